//! Events about pods (core/v1, as `kubectl describe pod` shows them).

use super::context::{key_of, log, now};
use super::worker::Worker;
use crate::kube::client;
use k8s_openapi::api::core::v1::Pod;

impl Worker {
    /// Records an Event about the pod (core/v1, as `kubectl describe pod` shows them).
    pub(super) fn event(&mut self, pod: &Pod, kind: &str, reason: &str, message: &str) {
        let (ns, name) = key_of(pod);
        let t = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now());
        let ev = k8s_openapi::api::core::v1::Event {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(format!(
                    "{name}.{:x}",
                    now().as_nanosecond() as u64 & 0xffff_ffff_ffff
                )),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name),
                namespace: Some(ns.clone()),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(kind.into()),
            count: Some(1),
            first_timestamp: Some(t.clone()),
            last_timestamp: Some(t),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some("kubelet".into()),
                host: Some(self.cfg.node_name.clone()),
            }),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(self.cfg.node_name.clone()),
            ..Default::default()
        };
        let path = client::path::<k8s_openapi::api::core::v1::Event>(Some(&ns), None);
        match self.client.create::<_, serde_json::Value>(&path, &ev) {
            Ok(_) => {
                if let Some(r) = self.pods.get_mut(&key_of(pod)) {
                    r.event_sent = true;
                }
            }
            Err(e) => self.api_failed("posting an event", &e),
        }
    }

    /// `FailedPostStartHook` and `FailedPreStopHook` for the pod's hook runs that failed since
    /// the last look (see [`crate::kube::hook_events`]).
    pub(super) fn hook_events(&mut self, pod: &Pod) {
        use crate::probe::hook::{self, Stage};
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let (ns, name) = key_of(pod);
        let hooked: Vec<(String, &k8s_openapi::api::core::v1::Container)> = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .filter(|c| {
                c.lifecycle
                    .as_ref()
                    .is_some_and(|l| l.post_start.is_some() || l.pre_stop.is_some())
            })
            .map(|c| {
                (
                    crate::translate::naming::container_service(&ns, &name, &c.name),
                    c,
                )
            })
            .collect();
        if hooked.is_empty() {
            return;
        }
        let units: Vec<String> = hooked.iter().map(|(u, _)| u.clone()).collect();
        let runs = match self.units.hook_runs(&units) {
            Ok(r) => r,
            Err(e) => {
                log(format!("{ns}/{name}: lifecycle hook status: {e}"));
                return;
            }
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let pod_ref = crate::kube::events::message::pod_ref(&name, &ns, &uid);
        for (unit, r) in runs {
            let Some((_, c)) = hooked.iter().find(|(u, _)| *u == unit) else {
                continue;
            };
            let Some(lc) = c.lifecycle.as_ref() else {
                continue;
            };
            for (stage, handler, run) in [
                (Stage::PostStart, &lc.post_start, &r.post_start),
                (Stage::PreStop, &lc.pre_stop, &r.pre_stop),
            ] {
                let (Some(handler), Some(run)) = (handler, run) else {
                    continue;
                };
                let Some(h) = hook::hook(c, handler) else {
                    continue;
                };
                let Some(exit) = run.failed.clone() else {
                    continue;
                };
                if !self.hooks_seen.fresh_failure(&unit, stage, run) {
                    continue;
                }
                // What `podunit hook` left of a failed preStop's error (read once).
                let record = self.cfg.paths.host(&hook::record_path(
                    &format!("{}/{uid}", crate::common::paths::Paths::RUNTIME),
                    &c.name,
                ));
                let error = (stage == Stage::PreStop)
                    .then(|| std::fs::read_to_string(&record).ok())
                    .flatten();
                let _ = std::fs::remove_file(&record);
                let obj = crate::kube::events::Involved::container(pod, &c.name);
                for (type_, reason, message) in crate::kube::hook_events::events(
                    stage,
                    &h,
                    &c.name,
                    &pod_ref,
                    &exit,
                    error.as_deref(),
                ) {
                    self.post_event(&obj, type_, reason, &message);
                }
            }
        }
    }

    pub(super) fn probe_note(&mut self, n: crate::kube::probes::Note) {
        match n {
            crate::kube::probes::Note::Changed(p) => {
                self.status_due.pods.insert((p.namespace, p.name));
            }
            crate::kube::probes::Note::Event {
                pod,
                container,
                type_,
                reason,
                message,
            } => {
                let Some(rec) = self.pods.get(&(pod.namespace, pod.name)) else {
                    return;
                };
                let pod = rec.pod.get();
                let obj = crate::kube::events::Involved::container(&pod, &container);
                self.post_event(&obj, type_, &reason, &message);
            }
        }
    }

    /// Posts an event through the correlator (a repeat patches the first, a flood is dropped).
    pub fn post_event(
        &mut self,
        obj: &crate::kube::events::Involved,
        type_: &str,
        reason: &str,
        message: &str,
    ) {
        use crate::kube::events::Action;
        let Some(action) = self.events.correlate(obj, type_, reason, message, now()) else {
            return;
        };
        let r = match action {
            Action::Create(ev) => {
                let path =
                    client::path::<k8s_openapi::api::core::v1::Event>(Some(&obj.namespace), None);
                self.client
                    .create::<_, serde_json::Value>(&path, &*ev)
                    .map(|_| ())
            }
            Action::Patch {
                namespace,
                name,
                patch,
            } => {
                let path = client::path::<k8s_openapi::api::core::v1::Event>(
                    Some(&namespace),
                    Some(&name),
                );
                self.client
                    .merge_patch::<serde_json::Value>(&path, &patch)
                    .map(|_| ())
            }
        };
        if let Err(e) = r {
            self.api_failed("posting an event", &e);
        }
    }
}
