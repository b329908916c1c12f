//! Events about pods (core/v1, as `kubectl describe pod` shows them).

use super::context::{key_of, now};
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
