//! The kubelet's own admission checks (pkg/kubelet/lifecycle/predicate.go), for the pods it is
//! given directly: static pods, and pods bound to the node without the scheduler. A pod whose
//! `nodeSelector` or required node affinity this node's labels do not match is refused with the
//! kubelet's reason and message. Local and cluster mode use the same labels: the ones the Node
//! object carries.

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Pod};
use std::collections::BTreeMap;

/// The kubelet's reason for a pod that does not match the node's labels.
pub const NODE_AFFINITY: &str = "NodeAffinity";

/// Why the kubelet would not run a pod: its status `reason` and `message` (the latter without
/// the `Pod was rejected: ` the status adds), and the field that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: &'static str,
    pub message: String,
    pub path: &'static str,
}

/// Maps Rust's `target_arch` to Go's GOARCH, as the label `kubernetes.io/arch` wants.
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "riscv64" => "riscv64",
        "s390x" => "s390x",
        other => other,
    }
}

/// The labels a kubelet sets on its Node (`arch` in Go's spelling), plus the configured ones.
pub fn node_labels(
    node_name: &str,
    arch: &str,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut l = extra.clone();
    for (k, v) in [
        ("kubernetes.io/hostname", node_name),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", arch),
        // NodeRestriction lets a node set node.kubernetes.io/* labels on itself.
        ("node.kubernetes.io/runtime", "podunit"),
    ] {
        l.insert(k.to_string(), v.to_string());
    }
    l
}

/// The labels of this host's Node: [`node_labels`] for the architecture this program runs on.
pub fn host_node_labels(
    node_name: &str,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    node_labels(node_name, go_arch(std::env::consts::ARCH), extra)
}

/// A taint of this node (node config `registerWithTaints`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTaint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl NodeTaint {
    pub fn of(t: &k8s_openapi::api::core::v1::Taint) -> NodeTaint {
        NodeTaint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone(),
        }
    }
}

/// The DaemonSet controller's taint check (`TolerationsTolerateTaintsWithFilter` over the
/// `NoSchedule` and `NoExecute` taints): the first taint the pod does not tolerate, in the
/// scheduler's words (`node(s) had untolerated taint {key: value}`).
pub fn check_taints(pod: &Pod, taints: &[NodeTaint]) -> Result<(), Rejection> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let tolerates = |t: &NodeTaint| {
        tolerations.iter().any(|tol| {
            let effect = tol.effect.as_deref().unwrap_or("");
            let key = tol.key.as_deref().unwrap_or("");
            (effect.is_empty() || effect == t.effect)
                && (key.is_empty() || key == t.key)
                && match tol.operator.as_deref().unwrap_or("Equal") {
                    "Exists" => true,
                    "Equal" => key == t.key && tol.value.as_deref().unwrap_or("") == t.value,
                    _ => false,
                }
        })
    };
    match taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !tolerates(t))
    {
        None => Ok(()),
        Some(t) => Err(Rejection {
            reason: "TaintToleration",
            message: format!("node(s) had untolerated taint {{{}: {}}}", t.key, t.value),
            path: "spec.tolerations",
        }),
    }
}

/// The kubelet's NodeAffinity predicate: `nodeSelector`, then the required node affinity.
pub fn check_node_affinity(
    pod: &Pod,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), Rejection> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    let reject = |path| Rejection {
        reason: NODE_AFFINITY,
        message: format!(
            "Predicate {NODE_AFFINITY} failed: node(s) didn't match Pod's node affinity/selector"
        ),
        path,
    };
    let selector = spec.node_selector.iter().flatten();
    if !selector.into_iter().all(|(k, v)| labels.get(k) == Some(v)) {
        return Err(reject("spec.nodeSelector"));
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if let Some(r) = required
        && !selector_matches(r, node_name, labels)
    {
        return Err(reject(
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        ));
    }
    Ok(())
}

/// Whether a required node selector (a pod's required node affinity, a PersistentVolume's node
/// affinity) selects this node.
pub fn selector_matches(
    s: &k8s_openapi::api::core::v1::NodeSelector,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    s.node_selector_terms
        .iter()
        .any(|t| term_matches(t, node_name, labels))
}

/// Terms are ORed, their requirements ANDed; a term without requirements matches no node.
fn term_matches(t: &NodeSelectorTerm, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            // The only node field a selector may name; In and NotIn with exactly one value.
            r.key == "metadata.name"
                && matches!(r.operator.as_str(), "In" | "NotIn")
                && r.values.as_ref().is_some_and(|v| v.len() == 1)
                && requirement_matches(r, Some(node_name))
        })
}

/// One requirement against the label's value (None: the node has no such label).
fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let int = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), [want]) = (value.and_then(int), values) else {
                return false;
            };
            let Some(want) = int(want) else { return false };
            if r.operator == "Gt" {
                have > want
            } else {
                have < want
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec_yaml: &str) -> Pod {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{spec_yaml}  containers: [{{name: c, image: host}}]\n"
        );
        serde_saphyr::from_str(&text).unwrap()
    }

    fn labels() -> BTreeMap<String, String> {
        node_labels(
            "edge-1",
            "amd64",
            &BTreeMap::from([("zone".to_string(), "a".to_string())]),
        )
    }

    fn verdict(spec_yaml: &str) -> Result<(), &'static str> {
        check_node_affinity(&pod(spec_yaml), "edge-1", &labels()).map_err(|r| {
            assert_eq!(r.reason, "NodeAffinity");
            assert_eq!(
                r.message,
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
            );
            r.path
        })
    }

    #[test]
    fn a_daemon_pod_must_tolerate_the_nodes_no_schedule_and_no_execute_taints() {
        let taint = |key: &str, value: &str, effect: &str| NodeTaint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        };
        let pod = |tolerations: &str| -> Pod {
            serde_saphyr::from_str(&format!(
                "metadata: {{name: p}}\nspec:\n  tolerations: {tolerations}\n  containers: []\n"
            ))
            .unwrap()
        };
        let taints = [
            taint("dedicated", "edge", "NoSchedule"),
            taint("soft", "", "PreferNoSchedule"),
        ];
        assert_eq!(
            check_taints(&pod("[]"), &taints).unwrap_err().message,
            "node(s) had untolerated taint {dedicated: edge}"
        );
        for ok in [
            "[{key: dedicated, operator: Equal, value: edge, effect: NoSchedule}]",
            "[{key: dedicated, value: edge}]",
            "[{key: dedicated, operator: Exists}]",
            "[{operator: Exists}]",
        ] {
            assert!(check_taints(&pod(ok), &taints).is_ok(), "{ok}");
        }
        for not in [
            "[{key: dedicated, value: other}]",
            "[{key: dedicated, operator: Exists, effect: NoExecute}]",
        ] {
            assert!(check_taints(&pod(not), &taints).is_err(), "{not}");
        }
    }

    #[test]
    fn node_selector() {
        assert_eq!(verdict(""), Ok(()));
        assert_eq!(
            verdict("  nodeSelector: {kubernetes.io/os: linux, zone: a}\n"),
            Ok(())
        );
        assert_eq!(
            verdict("  nodeSelector: {kubernetes.io/os: windows}\n"),
            Err("spec.nodeSelector")
        );
        assert_eq!(
            verdict("  nodeSelector: {gpu: \"true\"}\n"),
            Err("spec.nodeSelector")
        );
    }

    #[test]
    fn required_node_affinity() {
        let aff = |terms: &str| {
            format!(
                "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n{terms}"
            )
        };
        let req = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
        for (terms, want) in [
            (
                "        - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}]\n",
                Ok(()),
            ),
            (
                "        - matchExpressions: [{key: kubernetes.io/os, operator: In, values: [windows]}]\n",
                Err(req),
            ),
            // Terms are ORed.
            (
                "        - matchExpressions: [{key: zone, operator: In, values: [b]}]\n        - matchExpressions: [{key: zone, operator: In, values: [a]}]\n",
                Ok(()),
            ),
            // Requirements of a term are ANDed.
            (
                "        - matchExpressions: [{key: zone, operator: In, values: [a]}, {key: gpu, operator: Exists}]\n",
                Err(req),
            ),
            (
                "        - matchExpressions: [{key: gpu, operator: DoesNotExist}, {key: zone, operator: NotIn, values: [b]}]\n",
                Ok(()),
            ),
            (
                "        - matchExpressions: [{key: gpu, operator: NotIn, values: [x]}]\n",
                Ok(()),
            ),
            // Gt/Lt compare integers; a label that is not one never matches.
            (
                "        - matchExpressions: [{key: zone, operator: Gt, values: [\"1\"]}]\n",
                Err(req),
            ),
            // An empty term matches no node.
            ("        - {}\n", Err(req)),
            (
                "        - matchFields: [{key: metadata.name, operator: In, values: [edge-1]}]\n",
                Ok(()),
            ),
            (
                "        - matchFields: [{key: metadata.name, operator: NotIn, values: [edge-1]}]\n",
                Err(req),
            ),
        ] {
            assert_eq!(verdict(&aff(terms)), want, "{terms}");
        }
        let mut l = labels();
        l.insert("cores".into(), "8".into());
        let p = pod(&aff(
            "        - matchExpressions: [{key: cores, operator: Gt, values: [\"4\"]}, {key: cores, operator: Lt, values: [\"16\"]}]\n",
        ));
        assert_eq!(check_node_affinity(&p, "edge-1", &l), Ok(()));
    }

    #[test]
    fn the_standard_labels() {
        let l = labels();
        assert_eq!(l["kubernetes.io/hostname"], "edge-1");
        assert_eq!(l["kubernetes.io/os"], "linux");
        assert_eq!(l["kubernetes.io/arch"], "amd64");
        assert_eq!(l["zone"], "a");
    }
}
