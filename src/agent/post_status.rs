//! Posting PodStatus: which pods' units changed (a unit change, a reload), the status computed
//! from their units ([`crate::status`]) and PATCHed when it differs from what was posted.

use super::context::{log, now};
use super::state::{Due, Phase};
use super::worker::Worker;
use crate::agent::units::Changes;
use crate::agent::waitrecord;
use crate::kube::client;
use crate::kube::compact::Compact;
use crate::status::api;
use crate::status::container::State;
use crate::status::observe;
use crate::status::waiting;
use crate::systemd::unit::UnitState;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use std::collections::HashMap;

impl Worker {
    pub(super) fn post_status(&mut self, k: &(String, String), st: PodStatus) -> bool {
        let Some(rec) = self.pods.get(k) else {
            return false;
        };
        let compact = Compact::new(&st);
        if rec.posted.as_ref() == Some(&compact) || rec.refused.as_ref() == Some(&compact) {
            return true;
        }
        let path = format!("{}/status", client::path::<Pod>(Some(&k.0), Some(&k.1)));
        match self
            .client
            .merge_patch::<Pod>(&path, &serde_json::json!({ "status": st }))
        {
            Ok(_) => {
                self.api_worked();
                if let Some(rec) = self.pods.get_mut(k) {
                    rec.posted = Some(compact);
                    if rec.refused.take().is_some() {
                        waitrecord::status_accepted(&self.cfg.paths, &rec.uid);
                    }
                }
                true
            }
            Err(e) if e.is_not_found() => true,
            // A refusal (422 Invalid, 403, ...) is final for this status: retrying the same
            // request only floods the API server. Logged once, posted as a Warning Event on the
            // pod and left for `podunit status`; a different status is sent.
            Err(e) if !e.is_transient() && e.code().is_some_and(|c| (400..500).contains(&c)) => {
                log(format!(
                    "{}/{}: status refused, not sent again until it changes: {e}",
                    k.0, k.1
                ));
                let error = e.to_string();
                let pod = rec.pod.get();
                let uid = rec.uid.clone();
                if let Some(rec) = self.pods.get_mut(k) {
                    rec.refused = Some(compact);
                }
                waitrecord::status_refused(&self.cfg.paths, &uid, &k.0, &k.1, &error);
                self.post_event(
                    &crate::kube::events::Involved::pod(&pod),
                    "Warning",
                    waitrecord::STATUS_REFUSED,
                    &waitrecord::refused_message(&error),
                );
                true
            }
            Err(e) => {
                self.api_failed("posting pod status", &e);
                false
            }
        }
    }

    /// Marks the pods (and static pods) that own the changed units.
    pub(super) fn units_changed(&mut self, c: Changes) {
        let changed = match c {
            Changes::None => return,
            Changes::All => {
                self.status_due.all = true;
                return;
            }
            Changes::Units(u) => u,
            Changes::Reloaded(u) => {
                self.status_due.reloaded = true;
                u
            }
        };
        if self.status_due.all {
            return;
        }
        let owns = |units: &[String]| units.iter().any(|u| changed.contains(u));
        let pods = self
            .pods
            .iter()
            .filter(|(_, r)| owns(&r.units))
            .map(|(k, _)| k);
        let statics = self
            .mirrors
            .iter()
            .filter(|(_, m)| owns(&observe::pod_units(&m.static_pod)))
            .map(|(k, _)| k);
        let keys: Vec<(String, String)> = pods.chain(statics).cloned().collect();
        self.status_due.pods.extend(keys);
    }

    /// The pods and static pods whose units a reload changed: load, active or sub state differs
    /// from what the last reload left (all of them when the edge cannot list units). Asking
    /// systemd for every unit's properties after each reload cost three D-Bus calls per unit, and
    /// slowed each new pod's start more the fuller the node was.
    fn changed_by_reload(&mut self) -> Vec<(String, String)> {
        let Some(now) = self.units.states() else {
            return self
                .pods
                .keys()
                .chain(self.mirrors.keys())
                .cloned()
                .collect();
        };
        let before = std::mem::replace(&mut self.reload_states, now);
        let after = &self.reload_states;
        let changed = |units: &[String]| units.iter().any(|u| before.get(u) != after.get(u));
        let pods = self.pods.iter().filter(|(_, r)| changed(&r.units));
        let statics = self
            .mirrors
            .iter()
            .filter(|(_, m)| changed(&observe::pod_units(&m.static_pod)));
        pods.map(|(k, _)| k)
            .chain(statics.map(|(k, _)| k))
            .cloned()
            .collect()
    }

    pub(super) fn post_statuses(&mut self, mut due: Due) {
        // A reload is resolved into the pods it changed; with everything due, it adds nothing.
        if due.reloaded {
            if !due.all {
                let changed = self.changed_by_reload();
                due.pods.extend(changed);
            }
            due.reloaded = false;
        }
        let keys: Vec<(String, String)> = if due.all {
            self.pods.keys().cloned().collect()
        } else {
            due.pods
                .iter()
                .filter(|k| self.pods.contains_key(*k))
                .cloned()
                .collect()
        };
        let addrs = self.node_addrs();
        for (i, k) in keys.iter().enumerate() {
            let k = k.clone();
            if !self.api_ok() {
                // Try again once the API server is back.
                self.status_due.pods.extend(keys[i..].iter().cloned());
                self.status_due.pods.extend(
                    self.mirrors
                        .keys()
                        .filter(|k| due.has(k))
                        .cloned()
                        .collect::<Vec<_>>(),
                );
                return;
            }
            let Some(rec) = self.pods.get(&k) else {
                continue;
            };
            let pod = rec.pod.get();
            let posted = rec.posted.as_ref().map(Compact::get);
            let st = match &rec.phase {
                Phase::Finished => continue,
                Phase::Rejected { reason, message } => {
                    api::rejected(&pod, reason, message, &addrs, posted.as_ref(), now())
                }
                Phase::Blocked {
                    reason,
                    message,
                    only,
                } => {
                    let about = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
                    let mut obs = observe::observe(&pod, &HashMap::new());
                    for c in obs
                        .containers
                        .iter_mut()
                        .chain(obs.init_containers.iter_mut())
                        .filter(|c| about(&c.name))
                    {
                        c.state = State::Waiting {
                            reason: reason.clone(),
                        };
                    }
                    let mut st = api::build(&pod, &obs, &addrs, posted.as_ref(), now());
                    self.no_address_yet(&pod, &obs, &mut st);
                    for cs in st
                        .container_statuses
                        .iter_mut()
                        .flatten()
                        .chain(st.init_container_statuses.iter_mut().flatten())
                        .filter(|cs| about(&cs.name))
                    {
                        if let Some(w) = cs.state.as_mut().and_then(|s| s.waiting.as_mut()) {
                            // ContainerCreating while a pull runs has none, as on the kubelet.
                            w.message = (!message.is_empty()).then(|| message.clone());
                        }
                    }
                    st
                }
                Phase::Active | Phase::Terminating { .. } => {
                    let units = rec.units.clone();
                    let props: HashMap<String, UnitState> = match self.units.props(&units) {
                        Ok(mut p) => {
                            crate::status::start_detail::fill(&mut p);
                            p
                        }
                        Err(e) => {
                            log(format!("{}/{}: {e}", k.0, k.1));
                            self.status_due.pods.insert(k);
                            continue;
                        }
                    };
                    let mut obs = observe::observe(&pod, &props);
                    obs.pod_ips = recorded_pod_ips(&self.cfg.paths, &pod);
                    crate::agent::probes::overlay_api_pod(&pod, &mut obs, &self.probes.results);
                    let mut st = api::build(&pod, &obs, &addrs, posted.as_ref(), now());
                    self.no_address_yet(&pod, &obs, &mut st);
                    // The digest each image resolved to, as containerd reports it.
                    if let Some(rec) = self.pods.get(&k) {
                        for cs in st
                            .container_statuses
                            .iter_mut()
                            .flatten()
                            .chain(st.init_container_statuses.iter_mut().flatten())
                        {
                            if let Some(id) = rec.images.ids.get(&cs.name) {
                                cs.image_id = id.clone();
                            }
                        }
                    }
                    for (c, type_, reason, message) in
                        crate::kube::events::lifecycle(&pod, posted.as_ref(), &st)
                    {
                        let obj = crate::kube::events::Involved::container(&pod, &c);
                        self.post_event(&obj, type_, reason, &message);
                    }
                    self.hook_events(&pod, false);
                    self.prepare_event(&k, &pod);
                    self.images_at_restart(&k, &pod, &st);
                    st
                }
            };
            if !self.post_status(&k, st) {
                self.status_due.pods.insert(k);
            }
        }
        self.post_mirror_statuses(&addrs, &due);
    }
}

impl Worker {
    /// The Event of the pod's last failed `pod-prepare` (`FailedCreatePodSandBox`,
    /// `NetworkNotReady`), once per try.
    fn prepare_event(&mut self, k: &(String, String), pod: &Pod) {
        let Some(r) = self.pods.get(k) else {
            return;
        };
        let Some(rec) = waiting::read(&self.cfg.paths, &r.uid, waiting::Writer::Prepare) else {
            return;
        };
        let Some(note) = rec.event.filter(|_| rec.at_us > r.prepare_event_at) else {
            return;
        };
        if let Some(r) = self.pods.get_mut(k) {
            r.prepare_event_at = rec.at_us;
        }
        let obj = crate::kube::events::Involved::pod(pod);
        self.post_event(&obj, "Warning", &note.reason, &note.message);
    }

    /// A pod on a network of its own has no address until CNI gave it one: the node's, which
    /// `api::build` falls back to for host-network pods, would be a lie the cluster acts on
    /// (Services' endpoints).
    fn no_address_yet(
        &self,
        pod: &k8s_openapi::api::core::v1::Pod,
        obs: &crate::status::model::Observed,
        st: &mut k8s_openapi::api::core::v1::PodStatus,
    ) {
        let own_network = self.cfg.cni_conf_dir.is_some()
            && pod.spec.as_ref().and_then(|s| s.host_network) != Some(true);
        if own_network && obs.pod_ips.is_empty() {
            st.pod_ip = None;
            st.pod_ips = None;
        }
    }
}

/// The IPs `pod-prepare` recorded when CNI attached the pod; none on the host network.
fn recorded_pod_ips(
    paths: &crate::common::paths::Paths,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> Vec<String> {
    let Some(uid) = pod
        .metadata
        .uid
        .as_deref()
        .filter(|u| !u.is_empty() && !u.contains('/'))
    else {
        return Vec::new();
    };
    let dir = crate::common::text::concat(&[crate::common::paths::Paths::RUNTIME, "/", uid]);
    crate::podstart::network::recorded_ips(paths, &dir).unwrap_or_default()
}
