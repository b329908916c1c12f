//! The pods a Deployment or a ReplicaSet stands for on a node with no control plane, named and
//! labelled as the Deployment and ReplicaSet controllers name and label them:
//!
//! - a Deployment's ReplicaSet is `<deployment>-<pod-template-hash>`, and its template gains the
//!   label `pod-template-hash`;
//! - a ReplicaSet's pods are `generateName: <replicaset>-` names: the prefix cut to 58
//!   characters (the API server's `SimpleNameGenerator`) and five characters of
//!   `k8s.io/apimachinery`'s alphabet.
//!
//! Where the controllers draw at random (the five characters), podunit derives them from the
//! ReplicaSet's name and the replica's index, so a pod keeps its name across reloads and reboots;
//! scaling down removes the highest indexes. The hash is the controller's shape (FNV-32a, decimal,
//! each digit mapped through the alphabet) over the template's JSON, not over Go's `spew` dump of
//! it, so its value differs from a cluster's: it is stable, and it changes when the template does.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use std::collections::BTreeMap;

/// `k8s.io/apimachinery/pkg/util/rand`'s alphabet: no vowels, no 0, 1 and 3 (no words, no
/// look-alikes).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// The label the Deployment controller adds to its ReplicaSets' templates.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// `SimpleNameGenerator`: a generated name is at most 63 characters, 5 of them random.
const MAX_PREFIX: usize = 58;
const SUFFIX: usize = 5;

/// A problem of the workload document, at a field path relative to the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub path: String,
    pub message: String,
    /// A warning: the pods are made anyway.
    pub warning: bool,
}

impl std::fmt::Display for FieldProblem {
    /// `path: message`, as the API server prints a field error.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

pub(super) fn error(path: &str, message: impl Into<String>) -> FieldProblem {
    FieldProblem {
        path: path.into(),
        message: message.into(),
        warning: false,
    }
}

pub(super) fn warning(path: &str, message: impl Into<String>) -> FieldProblem {
    FieldProblem {
        path: path.into(),
        message: message.into(),
        warning: true,
    }
}

/// The pods of a Deployment, and the problems found; no pods when one of them is an error.
pub fn deployment_pods(d: &Deployment) -> (Vec<Pod>, Vec<FieldProblem>) {
    let name = d.metadata.name.clone().unwrap_or_default();
    let Some(spec) = d.spec.as_ref() else {
        return (Vec::new(), vec![error("spec", "Required value")]);
    };
    let mut problems = Vec::new();
    // What only a rollout acts on: podunit replaces every pod when the template changes.
    if spec.paused == Some(true) {
        problems.push(warning(
            "spec.paused",
            "rollouts are not run by podunit: a changed template replaces every pod at the next \
             reload, paused or not",
        ));
    }
    if spec
        .strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .is_some_and(|t| t != "Recreate")
        || spec.strategy.as_ref().is_none_or(|s| s.type_.is_none())
    {
        problems.push(warning(
            "spec.strategy",
            "RollingUpdate is not run by podunit yet: a changed template replaces every pod at \
             the next reload, as Recreate does",
        ));
    }
    let hash = template_hash(&spec.template, None);
    let mut template = spec.template.clone();
    template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default)
        .insert(POD_TEMPLATE_HASH.into(), hash.clone());
    let rs_name = format!("{name}-{hash}");
    let (pods, more) = pods_of(
        &d.metadata,
        &rs_name,
        spec.replicas,
        Some(&spec.selector),
        &spec.template,
        &template,
    );
    problems.extend(more);
    (pods, problems)
}

/// The pods of a ReplicaSet, and the problems found; no pods when one of them is an error.
pub fn replica_set_pods(rs: &ReplicaSet) -> (Vec<Pod>, Vec<FieldProblem>) {
    let name = rs.metadata.name.clone().unwrap_or_default();
    let Some(spec) = rs.spec.as_ref() else {
        return (Vec::new(), vec![error("spec", "Required value")]);
    };
    let Some(template) = spec.template.as_ref() else {
        return (Vec::new(), vec![error("spec.template", "Required value")]);
    };
    pods_of(
        &rs.metadata,
        &name,
        spec.replicas,
        Some(&spec.selector),
        template,
        template,
    )
}

/// `replicas` pods of `template` for ReplicaSet `rs_name`; `as_written` is the template the
/// user wrote (what the selector must match: the hash label is the controller's).
fn pods_of(
    owner: &ObjectMeta,
    rs_name: &str,
    replicas: Option<i32>,
    selector: Option<&LabelSelector>,
    as_written: &PodTemplateSpec,
    template: &PodTemplateSpec,
) -> (Vec<Pod>, Vec<FieldProblem>) {
    let mut problems = Vec::new();
    let replicas = replicas.unwrap_or(1);
    if replicas < 0 {
        problems.push(error(
            "spec.replicas",
            format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        ));
    }
    problems.extend(check_template(selector, as_written, "deployment"));
    if template.spec.is_none() {
        problems.push(error("spec.template.spec", "Required value"));
    }
    if problems.iter().any(|p| !p.warning) {
        return (Vec::new(), problems);
    }
    let namespace = owner.namespace.clone().unwrap_or_else(|| "default".into());
    let meta = template.metadata.clone().unwrap_or_default();
    let pods = controlled_pods(
        ("ReplicaSet", rs_name, &namespace),
        replicas.max(0) as usize,
        &meta,
        template.spec.as_ref(),
    );
    (pods, problems)
}

/// The API server's checks of a controller's selector against its template's labels, and of the
/// template's `restartPolicy` (`word` names the kind in the empty-selector message).
pub(super) fn check_template(
    selector: Option<&LabelSelector>,
    template: &PodTemplateSpec,
    word: &str,
) -> Vec<FieldProblem> {
    let mut problems = Vec::new();
    let labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    match selector {
        None => problems.push(error("spec.selector", "Required value")),
        Some(sel) if selector_is_empty(sel) => problems.push(error(
            "spec.selector",
            format!("Invalid value: empty selector is invalid for {word}"),
        )),
        Some(sel) => match matches(sel, &labels) {
            Ok(true) => {}
            Ok(false) => problems.push(error(
                "spec.template.metadata.labels",
                "Invalid value: `selector` does not match template `labels`",
            )),
            Err(e) => problems.push(error("spec.selector", e)),
        },
    }
    let restart = template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    if restart != "Always" {
        problems.push(error(
            "spec.template.spec.restartPolicy",
            format!("Unsupported value: \"{restart}\": supported values: \"Always\""),
        ));
    }
    problems
}

/// `n` pods of `spec` with `meta`'s labels and annotations, made by controller (kind, name,
/// namespace) and named as its `generateName` names them.
pub(super) fn controlled_pods(
    (kind, owner, namespace): (&str, &str, &str),
    n: usize,
    meta: &ObjectMeta,
    spec: Option<&k8s_openapi::api::core::v1::PodSpec>,
) -> Vec<Pod> {
    let prefix = generate_prefix(owner);
    pod_names(owner, &prefix, n)
        .into_iter()
        .map(|pod_name| Pod {
            metadata: ObjectMeta {
                name: Some(pod_name),
                generate_name: Some(prefix.clone()),
                namespace: Some(namespace.to_string()),
                labels: meta.labels.clone(),
                annotations: meta.annotations.clone(),
                owner_references: Some(vec![controller_ref(kind, namespace, owner)]),
                ..ObjectMeta::default()
            },
            spec: spec.cloned(),
            status: None,
        })
        .collect()
}

/// The controller's reference on a pod it made (an `apps/v1` owner in `namespace`). A standalone
/// node has no API server to give the owner a UID: it is derived from the owner's identity, as
/// static pods' are from theirs. A mirror pod carries the Node as its owner instead, so none of
/// this reaches a cluster.
pub(super) fn controller_ref(kind: &str, namespace: &str, name: &str) -> OwnerReference {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("apps/v1/{kind}/{namespace}/{name}").as_bytes());
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: crate::common::text::uid_from_digest(&d),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The workload that made `pod`, as its controller reference names it: (kind, name).
pub fn controller_of(pod: &Pod) -> Option<(&str, &str)> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.as_str(), o.name.as_str()))
}

/// The workload a pod stands for, as `kubectl get` lists it: (kind, name). A Deployment's pods
/// are its ReplicaSet's (`<deployment>-<pod-template-hash>`), named after the Deployment here.
pub fn workload_of(pod: &Pod) -> Option<(&'static str, String)> {
    let (kind, name) = controller_of(pod)?;
    match kind {
        "ReplicaSet" => {
            let hash = pod.metadata.labels.as_ref()?.get(POD_TEMPLATE_HASH);
            let deployment = hash.and_then(|h| name.strip_suffix(h.as_str())?.strip_suffix('-'));
            Some(match deployment {
                Some(d) => ("Deployment", d.to_string()),
                None => ("ReplicaSet", name.to_string()),
            })
        }
        "DaemonSet" => Some(("DaemonSet", name.to_string())),
        "StatefulSet" => Some(("StatefulSet", name.to_string())),
        _ => None,
    }
}

/// `SimpleNameGenerator`'s prefix: `<base>-`, cut to 58 characters.
pub(super) fn generate_prefix(rs_name: &str) -> String {
    let base = format!("{rs_name}-");
    match base.char_indices().nth(MAX_PREFIX) {
        Some((cut, _)) => base[..cut].to_string(),
        None => base,
    }
}

/// The names of `n` replicas: the prefix and five characters derived from the ReplicaSet and the
/// index, none twice.
pub(super) fn pod_names(rs_name: &str, prefix: &str, n: usize) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(n);
    for i in 0..n {
        let mut salt = 0u32;
        loop {
            let name = format!(
                "{prefix}{}",
                suffix(fnv32a(format!("{rs_name}/{i}/{salt}").as_bytes()))
            );
            if !names.contains(&name) {
                names.push(name);
                break;
            }
            salt += 1;
        }
    }
    names
}

/// Five characters of [`ALPHANUMS`] from `v`.
fn suffix(mut v: u32) -> String {
    (0..SUFFIX)
        .map(|_| {
            let c = ALPHANUMS[(v % ALPHANUMS.len() as u32) as usize] as char;
            v /= ALPHANUMS.len() as u32;
            c
        })
        .collect()
}

/// The controller's `ComputeHash`: FNV-32a over the template (and the collision count), its
/// decimal digits mapped through the alphabet (`rand.SafeEncodeString`).
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(template).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(&(c as u32).to_le_bytes());
    }
    fnv32a(&bytes)
        .to_string()
        .bytes()
        .map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char)
        .collect()
}

fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

pub(super) fn selector_is_empty(sel: &LabelSelector) -> bool {
    sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty())
}

/// Whether `labels` match `sel` (`metav1.LabelSelectorAsSelector`); an invalid operator is an
/// error with the API server's words.
pub fn matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    for (k, v) in sel.match_labels.iter().flatten() {
        if labels.get(k) != Some(v) {
            return Ok(false);
        }
    }
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default();
        let has = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => has.is_some_and(|v| values.contains(v)),
            "NotIn" => has.is_none_or(|v| !values.contains(v)),
            "Exists" => has.is_some(),
            "DoesNotExist" => has.is_none(),
            op => {
                return Err(format!(
                    "Invalid value: \"{op}\": not a valid selector operator"
                ));
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(yaml: &str) -> Deployment {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn pod_spec(d: &mut Deployment) -> &mut k8s_openapi::api::core::v1::PodSpec {
        d.spec.as_mut().unwrap().template.spec.as_mut().unwrap()
    }

    const WEB: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web, tier: front}}
    spec:
      containers: [{name: nginx, image: 'nginx:1.27'}]
";

    #[test]
    fn a_deployment_is_its_replica_sets_pods_named_and_labelled_as_the_controllers_do() {
        let d = deployment(WEB);
        let (pods, problems) = deployment_pods(&d);
        assert!(problems.iter().all(|p| p.warning), "{problems:?}");
        assert_eq!(pods.len(), 3);
        let hash = template_hash(&d.spec.as_ref().unwrap().template, None);
        assert!(!hash.is_empty() && hash.len() <= 10, "{hash}");
        assert!(hash.bytes().all(|b| ALPHANUMS.contains(&b)), "{hash}");
        for p in &pods {
            let name = p.metadata.name.as_deref().unwrap();
            let prefix = format!("web-{hash}-");
            assert_eq!(p.metadata.generate_name.as_deref(), Some(prefix.as_str()));
            let rest = name.strip_prefix(&prefix).unwrap();
            assert_eq!(rest.len(), 5, "{name}");
            assert!(rest.bytes().all(|b| ALPHANUMS.contains(&b)), "{name}");
            assert_eq!(p.metadata.namespace.as_deref(), Some("shop"));
            let labels = p.metadata.labels.as_ref().unwrap();
            assert_eq!(labels["app"], "web");
            assert_eq!(labels["tier"], "front");
            assert_eq!(labels[POD_TEMPLATE_HASH], hash);
        }
        // Stable: the same document, the same names; scaling keeps the first ones.
        let again = deployment_pods(&d).0;
        assert_eq!(again, pods);
        let mut two = d.clone();
        two.spec.as_mut().unwrap().replicas = Some(2);
        let names = |v: &[Pod]| -> Vec<String> {
            v.iter().map(|p| p.metadata.name.clone().unwrap()).collect()
        };
        assert_eq!(names(&deployment_pods(&two).0), names(&pods[..2]));
        // A changed template: a new ReplicaSet, new names.
        let mut image = d.clone();
        pod_spec(&mut image).containers[0].image = Some("nginx:1.28".into());
        let moved = deployment_pods(&image).0;
        assert!(names(&moved).iter().all(|n| !names(&pods).contains(n)));
    }

    #[test]
    fn replicas_default_to_one_and_zero_is_none() {
        let mut d = deployment(WEB);
        d.spec.as_mut().unwrap().replicas = None;
        assert_eq!(deployment_pods(&d).0.len(), 1);
        d.spec.as_mut().unwrap().replicas = Some(0);
        let (pods, problems) = deployment_pods(&d);
        assert!(pods.is_empty() && problems.iter().all(|p| p.warning));
    }

    #[test]
    fn the_api_servers_checks_refuse_the_document() {
        let bad = |edit: &dyn Fn(&mut Deployment)| {
            let mut d = deployment(WEB);
            edit(&mut d);
            let (pods, problems) = deployment_pods(&d);
            assert!(pods.is_empty());
            problems
                .into_iter()
                .filter(|p| !p.warning)
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            bad(&|d| d.spec.as_mut().unwrap().selector.match_labels =
                Some([("app".to_string(), "api".to_string())].into())),
            [
                "spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`"
            ]
        );
        assert_eq!(
            bad(&|d| d.spec.as_mut().unwrap().selector = LabelSelector::default()),
            ["spec.selector: Invalid value: empty selector is invalid for deployment"]
        );
        assert_eq!(
            bad(&|d| d.spec.as_mut().unwrap().replicas = Some(-1)),
            ["spec.replicas: Invalid value: -1: must be greater than or equal to 0"]
        );
        assert_eq!(
            bad(&|d| pod_spec(d).restart_policy = Some("OnFailure".into())),
            [
                "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\""
            ]
        );
    }

    #[test]
    fn long_names_are_cut_as_generated_names_are() {
        let mut d = deployment(WEB);
        d.metadata.name = Some("a".repeat(70));
        let pods = deployment_pods(&d).0;
        let name = pods[0].metadata.name.as_deref().unwrap();
        assert_eq!(name.len(), 63, "{name}");
        assert_eq!(generate_prefix("short"), "short-");
    }

    #[test]
    fn a_replica_set_keeps_its_template_labels() {
        let rs: ReplicaSet = serde_saphyr::from_str(
            "apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: frontend}
spec:
  replicas: 2
  selector:
    matchExpressions: [{key: tier, operator: In, values: [frontend]}]
  template:
    metadata: {labels: {tier: frontend}}
    spec:
      containers: [{name: php, image: 'gcr.io/google_samples/gb-frontend:v3'}]
",
        )
        .unwrap();
        let (pods, problems) = replica_set_pods(&rs);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(pods.len(), 2);
        assert!(
            pods[0]
                .metadata
                .name
                .as_deref()
                .unwrap()
                .starts_with("frontend-")
        );
        assert_eq!(pods[0].metadata.namespace.as_deref(), Some("default"));
        assert!(
            !pods[0]
                .metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key(POD_TEMPLATE_HASH)
        );
    }

    #[test]
    fn selector_operators() {
        let labels: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
        let sel = |op: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "a".into(),
                    operator: op.into(),
                    values: Some(values.iter().map(|s| s.to_string()).collect()),
                },
            ]),
            ..Default::default()
        };
        assert_eq!(matches(&sel("In", &["1", "2"]), &labels), Ok(true));
        assert_eq!(matches(&sel("NotIn", &["1"]), &labels), Ok(false));
        assert_eq!(matches(&sel("Exists", &[]), &labels), Ok(true));
        assert_eq!(matches(&sel("DoesNotExist", &[]), &labels), Ok(false));
        assert!(matches(&sel("Near", &[]), &labels).is_err());
    }
}
