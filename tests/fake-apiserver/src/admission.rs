//! What the API server does to a new Pod before storing it: field defaulting, the ServiceAccount
//! admission plugin (default account, the `kube-api-access-*` projected volume), DefaultTolerationSeconds,
//! and the mirror-pod rules. Pure functions over the JSON object.

use crate::refs::pod_refs;
use crate::util::random_suffix;
use serde_json::{Value, json};

pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
pub const SA_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

pub fn is_mirror(pod: &Value) -> bool {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .is_some()
}

fn default_field(obj: &mut Value, key: &str, value: Value) {
    if let Some(m) = obj.as_object_mut()
        && m.get(key).is_none_or(Value::is_null)
    {
        m.insert(key.to_string(), value);
    }
}

fn image_pull_policy(image: &str) -> &'static str {
    // The tag is what follows the last ':' after the last '/'; a digest pins the image.
    let last = image.rsplit('/').next().unwrap_or(image);
    let tag = last.split_once(':').map(|(_, t)| t);
    if image.contains('@') {
        "IfNotPresent"
    } else if tag.is_none() || tag == Some("latest") {
        "Always"
    } else {
        "IfNotPresent"
    }
}

/// The defaults the API server fills in on a Pod (SetObjectDefaults_Pod, the parts a client sees).
pub fn default_pod(pod: &mut Value) {
    let spec = &mut pod["spec"];
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    default_field(spec, "enableServiceLinks", json!(true));
    default_field(spec, "priority", json!(0));
    default_field(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    for kind in ["initContainers", "containers"] {
        for c in spec
            .get_mut(kind)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let image = c["image"].as_str().unwrap_or_default().to_string();
            default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
            default_field(c, "terminationMessagePolicy", json!("File"));
            default_field(c, "imagePullPolicy", json!(image_pull_policy(&image)));
            default_field(c, "resources", json!({}));
            for p in c
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                default_field(p, "protocol", json!("TCP"));
            }
        }
    }
    // DefaultTolerationSeconds admission.
    let tolerations = spec
        .as_object_mut()
        .map(|s| s.entry("tolerations").or_insert(json!([])));
    if let Some(Value::Array(t)) = tolerations {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let present = t
                .iter()
                .any(|x| x["key"] == key && (x["effect"] == "NoExecute" || x["effect"].is_null()));
            if !present {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    let qos = qos_class(&pod["spec"]);
    pod["status"] = json!({"phase": "Pending", "qosClass": qos});
}

/// The pod's QoS class (GetPodQOS): BestEffort without any cpu/memory requests or limits,
/// Guaranteed when every container's limits equal its requests for both, Burstable otherwise.
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec.get(*k).and_then(Value::as_array).into_iter().flatten())
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let limits = &c["resources"]["limits"];
        let requests = &c["resources"]["requests"];
        for r in ["cpu", "memory"] {
            let (l, q) = (limits.get(r), requests.get(r).or(limits.get(r)));
            if l.is_some() || requests.get(r).is_some() {
                any = true;
            }
            if l.is_none() || l != q {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Why the ServiceAccount plugin refuses a mirror pod, if it does: mirror pods come from a node's
/// local files and may not use API credentials or objects.
pub fn mirror_pod_refusal(pod: &Value) -> Option<&'static str> {
    let refs = pod_refs(pod);
    if refs.service_account.is_some() {
        Some("a mirror pod may not reference service accounts")
    } else if !refs.secrets.is_empty() {
        Some("a mirror pod may not reference secrets")
    } else if !refs.configmaps.is_empty() {
        Some("a mirror pod may not reference configmaps")
    } else if !refs.pvcs.is_empty() {
        Some("a mirror pod may not reference persistentvolumeclaims")
    } else {
        None
    }
}

/// The ServiceAccount plugin on a non-mirror pod whose account `sa` exists: copies the account's
/// imagePullSecrets to a pod without any and, unless automounting is off (pod first, then account), adds the projected
/// `kube-api-access-<5 chars>` volume and mounts it read-only in every container that has no mount
/// at the token path yet.
pub fn mount_service_account(pod: &mut Value, sa: &Value) {
    // A pod without image pull secrets gets its account's.
    let has_pull = pod["spec"]["imagePullSecrets"]
        .as_array()
        .is_some_and(|a| !a.is_empty());
    let account_pull = sa["imagePullSecrets"].as_array().filter(|s| !s.is_empty());
    if let (false, Some(secrets)) = (has_pull, account_pull) {
        pod["spec"]["imagePullSecrets"] = Value::Array(secrets.clone());
    }
    let automount = pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or(sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true);
    if !automount {
        return;
    }
    let name = format!("kube-api-access-{}", random_suffix(5));
    let mount = json!({"name": name, "readOnly": true, "mountPath": SA_MOUNT_PATH});
    let mut needed = false;
    for kind in ["initContainers", "containers"] {
        for c in pod["spec"]
            .get_mut(kind)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let has = c["volumeMounts"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["mountPath"] == SA_MOUNT_PATH));
            if !has {
                let mounts = c
                    .as_object_mut()
                    .map(|o| o.entry("volumeMounts").or_insert(json!([])));
                if let Some(Value::Array(m)) = mounts {
                    m.push(mount.clone());
                    needed = true;
                }
            }
        }
    }
    if needed {
        let volume = json!({
            "name": name,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ]
            }
        });
        let vols = pod["spec"]
            .as_object_mut()
            .map(|o| o.entry("volumes").or_insert(json!([])));
        if let Some(Value::Array(v)) = vols {
            v.push(volume);
        }
    }
}

/// The account a pod runs as, defaulted to "default" and written to both spec fields.
pub fn default_service_account(pod: &mut Value) -> String {
    let sa = pod["spec"]["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .or(pod["spec"]["serviceAccount"]
            .as_str()
            .filter(|s| !s.is_empty()))
        .unwrap_or("default")
        .to_string();
    pod["spec"]["serviceAccountName"] = json!(sa);
    pod["spec"]["serviceAccount"] = json!(sa);
    sa
}

/// Field validation of a Pod, as `field: problem` messages.
pub fn validate_pod(pod: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let spec = &pod["spec"];
    let containers = spec["containers"].as_array().map(Vec::len).unwrap_or(0);
    if containers == 0 {
        errs.push("spec.containers: Required value".to_string());
    }
    let mut names = Vec::new();
    for kind in ["initContainers", "containers"] {
        for (i, c) in spec[kind].as_array().into_iter().flatten().enumerate() {
            let name = c["name"].as_str().unwrap_or_default();
            if name.is_empty() {
                errs.push(format!("spec.{kind}[{i}].name: Required value"));
            } else if names.contains(&name) {
                errs.push(format!("spec.{kind}[{i}].name: Duplicate value: {name:?}"));
            }
            names.push(name);
            if c["image"].as_str().unwrap_or_default().is_empty() {
                errs.push(format!("spec.{kind}[{i}].image: Required value"));
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {
            "initContainers": [{"name": "init", "image": "busybox:1.36"}],
            "containers": [
                {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}]},
                {"name": "b", "image": "host", "volumeMounts": [{"name": "own", "mountPath": SA_MOUNT_PATH}]}
            ]
        }})
    }

    #[test]
    fn defaults_like_the_api_server() {
        let mut p = pod();
        default_pod(&mut p);
        assert_eq!(p["spec"]["restartPolicy"], "Always");
        assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(
            p["spec"]["initContainers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(p["spec"]["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(p["spec"]["tolerations"].as_array().unwrap().len(), 2);
        assert_eq!(
            p["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );
    }

    #[test]
    fn service_account_volume_goes_where_the_plugin_puts_it() {
        let mut p = pod();
        assert_eq!(default_service_account(&mut p), "default");
        mount_service_account(&mut p, &json!({}));
        let vols = p["spec"]["volumes"].as_array().unwrap();
        assert_eq!(vols.len(), 1);
        let name = vols[0]["name"].as_str().unwrap();
        assert!(name.starts_with("kube-api-access-") && name.len() == "kube-api-access-".len() + 5);
        assert_eq!(
            vols[0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
        assert_eq!(
            p["spec"]["initContainers"][0]["volumeMounts"][0]["name"],
            name
        );
        assert_eq!(
            p["spec"]["containers"][0]["volumeMounts"][0]["readOnly"],
            true
        );
        // A container with its own mount at the path keeps it alone.
        assert_eq!(
            p["spec"]["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn account_pull_secrets_fill_in() {
        let sa = json!({"imagePullSecrets": [{"name": "reg"}]});
        let mut p = pod();
        mount_service_account(&mut p, &sa);
        assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "reg"}]));
        let mut p = pod();
        p["spec"]["imagePullSecrets"] = json!([{"name": "own"}]);
        mount_service_account(&mut p, &sa);
        assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "own"}]));
    }

    #[test]
    fn automount_off_on_pod_or_account() {
        let mut p = pod();
        p["spec"]["automountServiceAccountToken"] = json!(false);
        mount_service_account(&mut p, &json!({"automountServiceAccountToken": true}));
        assert!(p["spec"]["volumes"].is_null());
        let mut p = pod();
        mount_service_account(&mut p, &json!({"automountServiceAccountToken": false}));
        assert!(p["spec"]["volumes"].is_null());
    }

    #[test]
    fn qos_classes() {
        let g = json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]});
        let b = json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]});
        assert_eq!(qos_class(&g), "Guaranteed");
        assert_eq!(qos_class(&b), "Burstable");
        assert_eq!(qos_class(&json!({"containers": [{}]})), "BestEffort");
    }

    #[test]
    fn mirror_pods_may_not_use_api_objects() {
        assert_eq!(mirror_pod_refusal(&pod()), None);
        let mut p = pod();
        p["spec"]["serviceAccountName"] = json!("x");
        assert!(mirror_pod_refusal(&p).is_some());
    }

    #[test]
    fn validation() {
        assert!(validate_pod(&pod()).is_empty());
        let errs = validate_pod(
            &json!({"spec": {"containers": [{"name": "a"}, {"name": "a", "image": "x"}]}}),
        );
        assert_eq!(
            errs,
            [
                "spec.containers[0].image: Required value",
                "spec.containers[1].name: Duplicate value: \"a\""
            ]
        );
    }
}
