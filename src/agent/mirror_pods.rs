//! Mirror pods: one current mirror per static pod (/etc/pods.d, /run/pods.d), none for anything
//! else, and their statuses.

use super::context::now;
use super::state::{Due, MirrorRec};
use super::worker::Worker;
use crate::agent::mirror;
use crate::agent::spool;
use crate::common::paths::Paths;
use crate::common::policy;
use crate::kube::client::{self, DeleteOptions};
use crate::status::api::{self, NodeAddrs};
use crate::status::observe;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The static pods (/etc/pods.d, /run/pods.d) as the generator loads them, without parsing the
/// spool: re-reading every API pod's manifest at each mirror scan was most of the idle CPU. A
/// static pod whose name a spool file also has is refused by the generator (defined twice), so it
/// is left out here too, as are static pods defined twice.
fn static_catalog(paths: &Paths, spooled: &BTreeSet<(String, String)>) -> crate::manifest::Catalog {
    use crate::manifest::discover;
    let mut c = crate::manifest::Catalog::default();
    for (source, dir) in paths.manifest_dirs() {
        if !source.is_static() {
            continue;
        }
        for f in discover::list_dir(&dir).unwrap_or_default() {
            let shown = std::path::Path::new("/").join(f.strip_prefix(&paths.root).unwrap_or(&f));
            if discover::check_trusted(&paths.root, &dir, &f).is_ok() {
                c.add_file_as(&f, &shown, source);
            }
        }
    }
    let mut count: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in &c.pods {
        *count
            .entry((e.namespace().to_string(), e.name().to_string()))
            .or_default() += 1;
    }
    c.pods.retain(|e| {
        let k = (e.namespace().to_string(), e.name().to_string());
        count[&k] == 1 && !spooled.contains(&k)
    });
    c
}

impl Worker {
    fn delete_mirror(&mut self, ns: &str, api: &Pod) -> bool {
        let path = client::path::<Pod>(Some(ns), api.metadata.name.as_deref());
        let opts = DeleteOptions {
            grace_period_seconds: Some(0),
            uid: api.metadata.uid.clone(),
            resource_version: None,
        };
        match self.client.delete(&path, &opts) {
            Ok(()) => true,
            Err(e) if e.is_not_found() || e.is_conflict() => true,
            Err(e) => {
                self.api_failed("deleting a mirror pod", &e);
                false
            }
        }
    }

    /// Keeps one current mirror pod per static pod, and none for anything else.
    pub(super) fn scan_mirrors(&mut self) {
        if self
            .last_mirror_scan
            .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        self.last_mirror_scan = Some(Instant::now());
        let Some(node_uid) = self.shared.node_uid.lock().unwrap().clone() else {
            return;
        };
        let spooled: BTreeSet<(String, String)> = self
            .spool
            .list()
            .unwrap_or_default()
            .iter()
            .filter_map(|f| spool::parse_file_name(f))
            .collect();
        let catalog = static_catalog(&self.cfg.paths, &spooled);
        let mut wanted = std::collections::BTreeSet::new();
        let mut statics = BTreeMap::new();
        for e in &catalog.pods {
            if self.cfg.policy.local == policy::Local::Enforce
                && policy::check(&e.pod, &self.cfg.policy).is_err()
            {
                continue;
            }
            let k = (e.namespace().to_string(), e.name().to_string());
            let mirror_name = mirror::name(&k.1, &self.cfg.node_name);
            wanted.insert((k.0.clone(), mirror_name.clone()));
            statics.insert(k, (e.pod.clone(), mirror_name));
        }
        // Mirrors of static pods that are gone (or never ours): removed, as the kubelet does.
        let stale: Vec<((String, String), Pod)> = self
            .api_mirrors
            .iter()
            .filter(|(k, _)| !wanted.contains(*k))
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        for (k, p) in stale {
            if !self.api_ok() || !self.delete_mirror(&k.0, &p) {
                return;
            }
            self.api_mirrors.remove(&k);
        }
        self.mirrors.retain(|k, _| statics.contains_key(k));
        for (k, (static_pod, mirror_name)) in statics {
            if !self.api_ok() {
                return;
            }
            let hash = mirror::config_hash(&static_pod);
            let mk = (k.0.clone(), mirror_name.clone());
            let current = self.api_mirrors.get(&mk).cloned();
            let ok = current.as_ref().is_some_and(|p| {
                mirror::mirrors(p, &hash) && p.metadata.deletion_timestamp.is_none()
            });
            if !ok {
                if let Some(old) = &current {
                    if !self.delete_mirror(&k.0, old) {
                        continue;
                    }
                    self.api_mirrors.remove(&mk);
                }
                let want = mirror::mirror_pod(&static_pod, &self.cfg.node_name, &node_uid);
                match self
                    .client
                    .create::<_, Pod>(&client::path::<Pod>(Some(&k.0), None), &want)
                {
                    Ok(p) => {
                        self.api_mirrors.insert(mk, p);
                    }
                    // Already there: the watch will tell us about it.
                    Err(e) if e.code() == Some(409) => {}
                    Err(e) => {
                        self.api_failed(&format!("creating mirror pod {}/{mirror_name}", k.0), &e);
                        continue;
                    }
                }
            }
            self.status_due.pods.insert(k.clone());
            let rec = self.mirrors.entry(k).or_insert_with(|| MirrorRec {
                hash: hash.clone(),
                mirror_name: mirror_name.clone(),
                static_pod: static_pod.clone(),
                posted: None,
            });
            if rec.hash != hash {
                rec.hash = hash;
                rec.static_pod = static_pod;
                rec.posted = None;
            }
        }
    }

    pub(super) fn post_mirror_statuses(&mut self, addrs: &NodeAddrs, due: &Due) {
        let keys: Vec<(String, String)> = self
            .mirrors
            .keys()
            .filter(|k| due.has(k))
            .cloned()
            .collect();
        for k in keys {
            if !self.api_ok() {
                self.status_due.pods.insert(k);
                continue;
            }
            let Some(m) = self.mirrors.get(&k) else {
                continue;
            };
            let Some(api) = self
                .api_mirrors
                .get(&(k.0.clone(), m.mirror_name.clone()))
                .cloned()
            else {
                continue;
            };
            let units = observe::pod_units(&m.static_pod);
            let Ok(mut props) = self.units.props(&units) else {
                continue;
            };
            crate::status::start_detail::fill(&mut props);
            let mut obs = observe::observe(&m.static_pod, &props);
            crate::agent::probes::overlay_api_pod(&m.static_pod, &mut obs, &self.probes.results);
            let prev = m.posted.clone().or(api.status.clone());
            let st = api::build(&api, &obs, addrs, prev.as_ref(), now());
            if m.posted.as_ref() == Some(&st) {
                continue;
            }
            let path = format!(
                "{}/status",
                client::path::<Pod>(Some(&k.0), api.metadata.name.as_deref())
            );
            match self
                .client
                .merge_patch::<Pod>(&path, &serde_json::json!({ "status": st }))
            {
                Ok(_) => {
                    if let Some(m) = self.mirrors.get_mut(&k) {
                        m.posted = Some(st);
                    }
                }
                Err(e) if e.is_not_found() => {
                    self.api_mirrors
                        .remove(&(k.0.clone(), api.metadata.name.clone().unwrap_or_default()));
                    self.last_mirror_scan = None;
                }
                Err(e) => self.api_failed("posting mirror pod status", &e),
            }
        }
    }
}
