//! An API object kept as its JSON text while the agent holds on to it.
//!
//! k8s-openapi's types hold every optional field inline: a `Volume` with one source set is 1.6 KB,
//! a `Container` 1 KB. The 110 pods of a full node took about 2.5 MB of podunit-sync's heap decoded,
//! and a tenth of that as JSON. Decoding one takes microseconds, and the agent decodes a pod only
//! when it recomputes that pod's status or spool file.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::marker::PhantomData;

pub struct Compact<T> {
    json: Box<str>,
    _t: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> Compact<T> {
    pub fn new(value: &T) -> Self {
        let json = serde_json::to_string(value)
            .expect("k8s-openapi objects always serialize (string keys, no custom serializers)");
        Compact {
            json: json.into_boxed_str(),
            _t: PhantomData,
        }
    }

    /// The object as it was stored.
    pub fn get(&self) -> T {
        crate::manifest::unknown::decode(self.json.as_bytes())
            .expect("an object reads back from the JSON it was written to")
    }
}

/// The same object: serialization is deterministic (struct fields in declaration order, maps
/// are BTreeMaps), so equal text is equal values.
impl<T> PartialEq for Compact<T> {
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json
    }
}

impl<T> fmt::Debug for Compact<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1",
                "labels": {"b": "2", "a": "1"},
                "creationTimestamp": "2026-11-30T10:00:00Z"},
            "spec": {"nodeName": "edge-1", "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "app", "image": "host", "command": ["/bin/app"],
                    "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                    "ports": [{"containerPort": 8080}],
                    "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                "volumes": [{"name": "token", "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]},
            "status": {"phase": "Running", "startTime": "2026-11-30T10:00:01Z",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "app", "image": "host", "imageID": "", "ready": true,
                    "restartCount": 2, "state": {"running": {"startedAt": "2026-11-30T10:00:02Z"}},
                    "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}
        }))
        .unwrap()
    }

    #[test]
    fn reads_back_what_was_stored() {
        let p = pod();
        assert_eq!(Compact::new(&p).get(), p);
        let st = p.status.clone().unwrap();
        assert_eq!(Compact::new(&st).get(), st);
    }

    #[test]
    fn equal_exactly_when_the_objects_are() {
        let a = pod();
        let mut b = pod();
        assert_eq!(Compact::new(&a), Compact::new(&b));
        b.status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .restart_count = 3;
        assert_ne!(Compact::new(&a), Compact::new(&b));
        let st = |p: &Pod| Compact::new(p.status.as_ref().unwrap());
        assert_ne!(st(&a), st(&b));
    }
}
