//! Admission: node policy, the generator's own validation, images (pulled as `imagePullPolicy`
//! says, `images.rs`), then the spool; a pod that may not run is rejected, one that waits for
//! something is blocked, with a Warning Event.

use super::context::{log, now};
use super::state::Phase;
use super::worker::Worker;
use crate::agent::{spool, waitrecord};
use crate::common::paths::Paths;
use crate::common::policy;
use crate::kube::compact::Compact;
use crate::status::api;
use std::path::PathBuf;

impl Worker {
    /// Policy, validation, referenced objects, tokens, then the spool.
    pub(super) fn admit(&mut self, k: &(String, String)) {
        let Some(rec) = self.pods.get(k) else { return };
        let pod = rec.pod.get();
        let paths = self.cfg.paths.clone();
        let resolve = |p: &str| crate::generate::host_realpath(&paths, p);
        // The kubelet's own admission first: a pod bound here without the scheduler may not fit.
        let labels =
            crate::manifest::admission::host_node_labels(&self.cfg.node_name, &self.cfg.labels);
        if let Err(r) =
            crate::manifest::admission::check_node_affinity(&pod, &self.cfg.node_name, &labels)
        {
            self.reject(k, r.reason, &format!("Pod was rejected: {}", r.message));
            return;
        }
        if let Err(v) = policy::check_resolved(&pod, &self.cfg.policy, &resolve) {
            self.reject(k, policy::Violation::REASON, &v.to_string());
            return;
        }
        let (cms, secrets) = match self.fetch_refs(&pod) {
            Ok(x) => x,
            Err(Some((reason, message))) => {
                self.block(k, &reason, &message);
                return;
            }
            // The API server is unreachable: leave whatever the spool has.
            Err(None) => return,
        };
        let seen: String = cms
            .iter()
            .map(|c| &c.metadata)
            .chain(secrets.iter().map(|s| &s.metadata))
            .map(|m| {
                format!(
                    "{}@{} ",
                    m.name.as_deref().unwrap_or_default(),
                    m.resource_version.as_deref().unwrap_or_default()
                )
            })
            .collect();
        let file = spool::file_name(&k.0, &k.1);
        // Checked before a pod is first spooled: an image removed from the store later does not
        // touch a pod that already runs, as the kubelet leaves running containers alone.
        let in_spool = self.spool.dir.join(&file).exists();
        if self.refreshing
            && in_spool
            && self
                .pods
                .get(k)
                .is_some_and(|r| r.phase == Phase::Active && r.refs_seen.as_ref() == Some(&seen))
        {
            // Nothing it uses changed since it was spooled: the text would be the same (tokens
            // are renewed by refresh_tokens).
            return;
        }
        if !in_spool {
            match self.ensure_images(k, &pod) {
                Some(true) => {}
                // Waiting for a pull (admitted again when it ends or a back-off is over), or
                // for an image it may not pull; or the API server did not answer.
                Some(false) | None => return,
            }
        }
        self.note_image_ids(k);
        let text = spool::render(&pod, &cms, &secrets);
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            text.hash(&mut h);
            h.finish()
        };
        if self.pods.get(k).and_then(|r| r.validated) != Some(hash) {
            if let Err(msg) = self.validate(k, &text) {
                self.reject(k, "InvalidPod", &msg);
                return;
            }
            if let Some(rec) = self.pods.get_mut(k) {
                rec.validated = Some(hash);
            }
        }
        let new_tokens = match self.issue_tokens(k) {
            Ok(n) => n,
            Err(e) => {
                if let Some(msg) = e {
                    self.block(k, "CreateContainerConfigError", &msg);
                }
                return;
            }
        };
        let spooled = match self.spool.put(&file, text.as_bytes()) {
            Ok(changed) => changed,
            Err(e) => {
                log(format!("{}/{}: writing the spool: {e}", k.0, k.1));
                return;
            }
        };
        if spooled {
            self.mark_dirty(k);
        }
        if spooled || new_tokens {
            // A running pod sees its ConfigMaps, Secrets and tokens change, as with the kubelet.
            self.refresh_volumes(k);
        }
        if let Some(rec) = self.pods.get_mut(k) {
            if rec.phase != Phase::Active {
                waitrecord::release(&self.cfg.paths, &rec.uid);
            }
            rec.phase = Phase::Active;
            rec.refs_seen = Some(seen);
        }
        self.status_due.pods.insert(k.clone());
    }

    /// The generator's own checks, run on exactly what it will read.
    fn validate(&self, k: &(String, String), text: &str) -> Result<(), String> {
        let mut c = crate::manifest::Catalog::default();
        let shown = PathBuf::from(Paths::SPOOL).join(spool::file_name(&k.0, &k.1));
        c.add_text(&shown, text, crate::common::paths::Source::Spool);
        // This node as the API server knows it, so validation agrees with admission.
        let mut facts = crate::generate::detect_node(&self.cfg.paths);
        facts.node_name = self.cfg.node_name.clone();
        facts.labels =
            crate::manifest::admission::host_node_labels(&self.cfg.node_name, &self.cfg.labels);
        let images = crate::generate::FsImages {
            paths: self.cfg.paths.clone(),
            host_aliases: self.cfg.policy.host_images.clone(),
        };
        let g = crate::generate::generate(&c, &facts, &images);
        let errors: Vec<String> = g
            .problems
            .iter()
            .filter(|p| p.is_error())
            .map(|p| {
                let mut s = String::new();
                if let Some(path) = &p.path {
                    s.push_str(path);
                    s.push_str(": ");
                }
                s.push_str(&p.message);
                s
            })
            .collect();
        if errors.is_empty() && !g.pods.is_empty() {
            Ok(())
        } else if errors.is_empty() {
            Err("the pod could not be translated to units".into())
        } else {
            Err(errors.join("; "))
        }
    }

    fn reject(&mut self, k: &(String, String), reason: &str, message: &str) {
        log(format!("{}/{}: {reason}: {message}", k.0, k.1));
        // Never partly run: whatever was spooled for it goes.
        if self
            .spool
            .remove(&spool::file_name(&k.0, &k.1))
            .unwrap_or(false)
        {
            self.stop_units_of_file(k);
            self.mark_dirty(k);
        }
        let addrs = self.node_addrs();
        let Some(rec) = self.pods.get_mut(k) else {
            return;
        };
        rec.phase = Phase::Rejected {
            reason: reason.into(),
            message: message.into(),
        };
        let pod = rec.pod.get();
        let st = api::rejected(
            &pod,
            reason,
            message,
            &addrs,
            rec.posted.as_ref().map(Compact::get).as_ref(),
            now(),
        );
        waitrecord::hold(&self.cfg.paths, &pod, reason, message, &[], true);
        if !rec.event_sent {
            self.event(&pod, "Warning", reason, message);
        }
        self.post_status(k, st);
    }

    fn block(&mut self, k: &(String, String), reason: &str, message: &str) {
        // The kubelet's Event for a container it cannot create has reason `Failed`.
        self.wait_containers(k, reason, message, Some("Failed"), Vec::new());
    }

    /// The pod waits with `reason` on the containers in `only` (all when empty); one Warning Event
    /// with `event_reason` (if any: image waits post their own) each time the reason or message
    /// changes.
    pub(super) fn wait_containers(
        &mut self,
        k: &(String, String),
        reason: &str,
        message: &str,
        event_reason: Option<&str>,
        only: Vec<String>,
    ) {
        let Some(rec) = self.pods.get_mut(k) else {
            return;
        };
        let new = Phase::Blocked {
            reason: reason.into(),
            message: message.into(),
            only: only.clone(),
        };
        let changed = rec.phase != new;
        rec.phase = new;
        if changed {
            let pod = rec.pod.get();
            waitrecord::hold(&self.cfg.paths, &pod, reason, message, &only, false);
            log(format!("{}/{}: {reason}: {message}", k.0, k.1));
            if let Some(r) = event_reason {
                self.event(&pod, "Warning", r, message);
            }
            self.status_due.pods.insert(k.clone());
        }
    }
}
