//! What a pod refers to: the ConfigMaps, Secrets and ServiceAccount the Node authorizer lets the
//! pod's node read, and the mirror-pod rules check.

use serde_json::Value;

#[derive(Debug, Default, PartialEq)]
pub struct PodRefs {
    pub configmaps: Vec<String>,
    pub secrets: Vec<String>,
    pub service_account: Option<String>,
    pub pvcs: Vec<String>,
}

fn push(list: &mut Vec<String>, v: Option<&Value>) {
    if let Some(s) = v.and_then(Value::as_str).filter(|s| !s.is_empty())
        && !list.iter().any(|x| x == s)
    {
        list.push(s.to_string());
    }
}

fn arr<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

pub fn pod_refs(pod: &Value) -> PodRefs {
    let spec = &pod["spec"];
    let mut r = PodRefs::default();
    for vol in arr(spec, "volumes") {
        push(&mut r.configmaps, vol.pointer("/configMap/name"));
        push(&mut r.secrets, vol.pointer("/secret/secretName"));
        push(&mut r.pvcs, vol.pointer("/persistentVolumeClaim/claimName"));
        for src in vol
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            push(&mut r.configmaps, src.pointer("/configMap/name"));
            push(&mut r.secrets, src.pointer("/secret/name"));
        }
    }
    for kind in ["initContainers", "containers", "ephemeralContainers"] {
        for c in arr(spec, kind) {
            for e in arr(c, "env") {
                push(
                    &mut r.configmaps,
                    e.pointer("/valueFrom/configMapKeyRef/name"),
                );
                push(&mut r.secrets, e.pointer("/valueFrom/secretKeyRef/name"));
            }
            for e in arr(c, "envFrom") {
                push(&mut r.configmaps, e.pointer("/configMapRef/name"));
                push(&mut r.secrets, e.pointer("/secretRef/name"));
            }
        }
    }
    for s in arr(spec, "imagePullSecrets") {
        push(&mut r.secrets, s.get("name"));
    }
    r.service_account = spec["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_every_kind_of_reference() {
        let pod = json!({"spec": {
            "serviceAccountName": "sa",
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "a", "configMap": {"name": "cm1"}},
                {"name": "b", "secret": {"secretName": "s1"}},
                {"name": "c", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}, {"secret": {"name": "s2"}}]}},
                {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}
            ],
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "s3"}}]}],
            "containers": [{"name": "c", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm2", "key": "k"}}}]}]
        }});
        let r = pod_refs(&pod);
        assert_eq!(r.configmaps, ["cm1", "kube-root-ca.crt", "cm2"]);
        assert_eq!(r.secrets, ["s1", "s2", "s3", "pull"]);
        assert_eq!(r.pvcs, ["data"]);
        assert_eq!(r.service_account.as_deref(), Some("sa"));
        assert_eq!(pod_refs(&json!({})), PodRefs::default());
    }
}
