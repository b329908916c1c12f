//! Mirror pods: how a static pod (/etc/pods.d, /run/pods.d) shows in the cluster, as the kubelet
//! names and marks them: `<pod>-<nodeName>`, annotations `kubernetes.io/config.mirror`,
//! `kubernetes.io/config.hash` and `kubernetes.io/config.source`, owned by the Node.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
pub const HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
pub const SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// The mirror pod's name.
pub fn name(pod_name: &str, node_name: &str) -> String {
    format!("{pod_name}-{node_name}")
}

/// The static pod's config hash: changes whenever its manifest content does (kubelet hashes the
/// pod object too), so an edited manifest replaces the mirror pod.
pub fn config_hash(static_pod: &Pod) -> String {
    let bytes = serde_json::to_vec(static_pod).unwrap_or_default();
    let d = Sha256::digest(&bytes);
    d[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `api_pod` is a mirror pod (made by a kubelet for a static pod).
pub fn is_mirror(api_pod: &Pod) -> bool {
    api_pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

/// Whether `api_pod` mirrors the static pod with hash `hash`.
pub fn mirrors(api_pod: &Pod, hash: &str) -> bool {
    api_pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .is_some_and(|h| h == hash)
}

/// The mirror pod to create for `static_pod` on node `node_name` (uid `node_uid`).
pub fn mirror_pod(static_pod: &Pod, node_name: &str, node_uid: &str) -> Pod {
    let hash = config_hash(static_pod);
    let m = &static_pod.metadata;
    let mut annotations = m.annotations.clone().unwrap_or_default();
    annotations.insert(MIRROR_ANNOTATION.into(), hash.clone());
    annotations.insert(HASH_ANNOTATION.into(), hash);
    annotations.insert(SOURCE_ANNOTATION.into(), "file".into());
    let mut spec = static_pod.spec.clone().unwrap_or_default();
    spec.node_name = Some(node_name.to_string());
    Pod {
        metadata: ObjectMeta {
            name: Some(name(m.name.as_deref().unwrap_or(""), node_name)),
            namespace: Some(m.namespace.clone().unwrap_or_else(|| "default".into())),
            labels: m.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node_name.to_string(),
                uid: node_uid.to_string(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Labels and annotations are compared when deciding whether a mirror pod is current.
pub fn annotations_of(p: &Pod) -> BTreeMap<String, String> {
    p.metadata.annotations.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(y: &str) -> Pod {
        serde_saphyr::from_str(y).unwrap()
    }

    #[test]
    fn mirror_is_named_annotated_and_owned_as_the_kubelet_does() {
        let s = pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: infra, uid: static-uid, labels: {app: web}}\nspec: {containers: [{name: c, image: host}]}\n",
        );
        let m = mirror_pod(&s, "edge-1", "node-uid");
        assert_eq!(m.metadata.name.as_deref(), Some("web-edge-1"));
        assert_eq!(m.metadata.namespace.as_deref(), Some("infra"));
        assert_eq!(
            m.metadata.uid, None,
            "the API server assigns the mirror's uid"
        );
        let a = annotations_of(&m);
        assert_eq!(a[SOURCE_ANNOTATION], "file");
        assert_eq!(a[MIRROR_ANNOTATION], a[HASH_ANNOTATION]);
        assert_eq!(a[HASH_ANNOTATION].len(), 32);
        let o = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.name.as_str(), o.uid.as_str()),
            ("Node", "edge-1", "node-uid")
        );
        assert_eq!(
            m.spec.as_ref().unwrap().node_name.as_deref(),
            Some("edge-1")
        );
        assert!(is_mirror(&m));
        assert!(mirrors(&m, &config_hash(&s)));
        let mut s2 = s.clone();
        s2.spec.as_mut().unwrap().containers[0].image = Some("other".into());
        assert!(
            !mirrors(&m, &config_hash(&s2)),
            "an edited manifest needs a new mirror"
        );
    }
}
