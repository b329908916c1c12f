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
}
