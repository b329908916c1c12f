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
    /// the last look, and `LifecycleHTTPFallback` for its HTTPS hooks answered in HTTP (see
    /// [`crate::kube::hook_events`]). The journal and the records keep them after the units are
    /// gone, so the termination path calls this last, after the stop.
    /// `last`: the pod's units have just stopped and this is the last read (its termination):
    /// journald is asked to store what it was sent first, or the preStop failures systemd logged
    /// during that stop may not be readable yet on a busy node.
    pub(super) fn hook_events(&mut self, pod: &Pod, last: bool) {
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
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let units: Vec<String> = hooked.iter().map(|(u, _)| u.clone()).collect();
        if last && let Err(e) = self.units.sync_journal() {
            log(format!("{ns}/{name}: {e}"));
        }
        let (after, since) = self.hooks_seen.from(&uid);
        let exits = match self.units.hook_exits(&units, after, since) {
            Ok(r) => r,
            Err(e) => {
                log(format!("{ns}/{name}: lifecycle hook status: {e}"));
                return;
            }
        };
        let pod_ref = crate::kube::events::message::pod_ref(&name, &ns, &uid);
        let record = |c: &str, stage: Stage| {
            hook::record_path(&uid, c, stage).map(|r| self.cfg.paths.host(&r))
        };
        let mut posts = Vec::new();
        for x in &exits {
            let Some((_, c)) = hooked.iter().find(|(u, _)| *u == x.unit) else {
                continue;
            };
            let handler = c.lifecycle.as_ref().and_then(|lc| match x.stage {
                Stage::PostStart => lc.post_start.as_ref(),
                Stage::PreStop => lc.pre_stop.as_ref(),
            });
            let Some(h) = handler.and_then(|h| hook::hook(c, h)) else {
                continue;
            };
            // What `podunit hook` left of a failed preStop's error (read once).
            let error = match (x.stage, record(&c.name, x.stage)) {
                (Stage::PreStop, Some(r)) => {
                    let e = std::fs::read_to_string(&r).ok();
                    let _ = std::fs::remove_file(&r);
                    e
                }
                _ => None,
            };
            let obj = crate::kube::events::Involved::container(pod, &c.name);
            for e in crate::kube::hook_events::events(
                x.stage,
                &h,
                &c.name,
                &pod_ref,
                &x.exit,
                error.as_deref(),
                "",
            ) {
                posts.push((obj.clone(), e));
            }
        }
        // The kubelet reports a fallback about the pod (`eventRecorder.Event(pod, ...)`).
        for (_, c) in &hooked {
            for stage in [Stage::PostStart, Stage::PreStop] {
                let Some(r) = record(&c.name, stage) else {
                    continue;
                };
                let f = std::path::PathBuf::from(hook::fallback_path(&r.to_string_lossy()));
                if let Ok(host) = std::fs::read_to_string(&f) {
                    let _ = std::fs::remove_file(&f);
                    posts.push((
                        crate::kube::events::Involved::pod(pod),
                        (
                            "Warning",
                            "LifecycleHTTPFallback",
                            crate::kube::hook_events::fallback_message(host.trim()),
                        ),
                    ));
                }
            }
        }
        if let Some(last) = exits.last() {
            self.hooks_seen.advance(&uid, &last.cursor);
        }
        for (obj, (type_, reason, message)) in posts {
            self.post_event(&obj, type_, reason, &message);
        }
    }

    pub(super) fn probe_note(&mut self, n: crate::agent::probes::Note) {
        match n {
            crate::agent::probes::Note::Changed(p) => {
                self.status_due.pods.insert((p.namespace, p.name));
            }
            crate::agent::probes::Note::Event {
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
