//! The pod a DaemonSet stands for on this node, as the DaemonSet controller makes it: one pod,
//! `generateName: <daemonset>-`, labelled `controller-revision-hash` and
//! `pod-template-generation`, with the tolerations the controller adds to every daemon pod. Whether
//! the node is one of the DaemonSet's (its node selector and required node affinity against the
//! node's labels) is decided where the node's labels are known: a DaemonSet that does not select
//! this node has no pod here, which is not an error (see `generate`).

use super::replicas::{FieldProblem, check_template, controlled_pods, error, template_hash};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The label of the template's revision (a ControllerRevision's name: `<daemonset>-<hash>`).
pub const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";
/// The label of the DaemonSet's generation the pod was made from.
pub const POD_TEMPLATE_GENERATION: &str = "pod-template-generation";

/// The DaemonSet's pod, and the problems found; none when one of them is an error.
pub fn daemon_set_pods(ds: &DaemonSet) -> (Vec<Pod>, Vec<FieldProblem>) {
    let name = ds.metadata.name.clone().unwrap_or_default();
    let Some(spec) = ds.spec.as_ref() else {
        return (Vec::new(), vec![error("spec", "Required value")]);
    };
    let mut problems = check_template(Some(&spec.selector), &spec.template, "daemonset");
    if spec.template.spec.is_none() {
        problems.push(error("spec.template.spec", "Required value"));
    }
    if !problems.is_empty() {
        return (Vec::new(), problems);
    }
    let namespace = ds
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let meta = spec.template.metadata.clone().unwrap_or_default();
    let mut pod_labels = meta.labels.clone().unwrap_or_default();
    pod_labels.insert(
        CONTROLLER_REVISION_HASH.into(),
        template_hash(&spec.template, None),
    );
    pod_labels.insert(
        POD_TEMPLATE_GENERATION.into(),
        ds.metadata.generation.unwrap_or(1).to_string(),
    );
    let mut pod_spec = spec.template.spec.clone().unwrap_or_default();
    add_daemon_tolerations(&mut pod_spec);
    let meta = ObjectMeta {
        labels: Some(pod_labels),
        ..meta
    };
    let pods = controlled_pods(("DaemonSet", &name, &namespace), 1, &meta, Some(&pod_spec));
    (pods, problems)
}

/// The tolerations the DaemonSet controller adds (`util.AddOrUpdateDaemonPodTolerations`): daemon
/// pods stay through the node's conditions and run on unschedulable nodes; host-network ones also
/// where the network is not ready.
fn add_daemon_tolerations(spec: &mut k8s_openapi::api::core::v1::PodSpec) {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec.host_network == Some(true) {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for (key, effect) in wanted {
        let have = tolerations.iter().any(|t| {
            t.key.as_deref() == Some(key)
                && t.effect.as_deref() == Some(effect)
                && t.operator.as_deref() == Some("Exists")
        });
        if !have {
            tolerations.push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some(effect.into()),
                ..Toleration::default()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &str = "apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-agent, namespace: monitoring}
spec:
  selector: {matchLabels: {app: node-agent}}
  template:
    metadata: {labels: {app: node-agent}}
    spec:
      nodeSelector: {disktype: ssd}
      containers: [{name: agent, image: 'prom/node-exporter:v1.8.2'}]
";

    #[test]
    fn one_pod_named_labelled_and_tolerating_as_the_controller_makes_it() {
        let ds: DaemonSet = serde_saphyr::from_str(AGENT).unwrap();
        let (pods, problems) = daemon_set_pods(&ds);
        assert!(problems.is_empty(), "{problems:?}");
        let [pod] = pods.as_slice() else {
            panic!("{pods:?}")
        };
        let name = pod.metadata.name.as_deref().unwrap();
        assert!(name.starts_with("node-agent-") && name.len() == "node-agent-".len() + 5);
        assert_eq!(pod.metadata.namespace.as_deref(), Some("monitoring"));
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app"], "node-agent");
        assert_eq!(labels[POD_TEMPLATE_GENERATION], "1");
        assert!(labels.contains_key(CONTROLLER_REVISION_HASH));
        let tolerations = pod.spec.as_ref().unwrap().tolerations.as_ref().unwrap();
        assert_eq!(tolerations.len(), 6);
        assert_eq!(
            super::super::replicas::controller_of(pod),
            Some(("DaemonSet", "node-agent"))
        );
        // The node selector stays: whether this node is the DaemonSet's is decided with its labels.
        assert!(pod.spec.as_ref().unwrap().node_selector.is_some());
        assert_eq!(daemon_set_pods(&ds).0, pods, "stable");
    }

    #[test]
    fn the_api_servers_checks() {
        let mut ds: DaemonSet = serde_saphyr::from_str(AGENT).unwrap();
        ds.spec.as_mut().unwrap().selector = Default::default();
        let (pods, problems) = daemon_set_pods(&ds);
        assert!(pods.is_empty());
        assert_eq!(
            problems[0].message,
            "Invalid value: empty selector is invalid for daemonset"
        );
    }
}
