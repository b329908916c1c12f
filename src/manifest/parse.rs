//! One manifest file's text -> typed Kubernetes objects, with every problem located.

use super::Object;
use super::cache::Reader;
use super::documents::{documents, one_line};
use crate::common::diag::{FieldPath, Problem};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::Path;

/// Whether fields k8s-openapi does not know are errors (admin-written files: almost always typos)
/// or warnings (pods from an API server that may be newer than our types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownFields {
    Error,
    Warn,
}

/// Parses `text` (YAML or JSON, possibly several documents or a `v1/List`) from `file`.
/// Returns the objects that parsed and the problems of those that did not; one bad document never
/// hides the good ones beside it.
pub fn parse(file: &Path, text: &str, unknown: UnknownFields) -> (Vec<Object>, Vec<Problem>) {
    parse_cached(file, text, unknown, &Reader::none())
}

/// As [`parse`]; a YAML file whose parsed form `cache` holds is read from there (the same
/// objects, see [`super::cache`]).
pub fn parse_cached(
    file: &Path,
    text: &str,
    unknown: UnknownFields,
    cache: &Reader,
) -> (Vec<Object>, Vec<Problem>) {
    if !text.contains('\0')
        && let Some(objects) = super::fast::objects(text).or_else(|| cache.objects(text))
    {
        return (objects, Vec::new());
    }
    parse_general(file, text, unknown)
}

/// [`parse`] without its fast ways: every document through a `serde_json::Value`, which locates
/// every problem. What the fast ways return is what this returns (tests/manifest_parse_paths.rs).
pub fn parse_general(
    file: &Path,
    text: &str,
    unknown: UnknownFields,
) -> (Vec<Object>, Vec<Problem>) {
    let mut objects = Vec::new();
    let mut problems = Vec::new();
    if text.contains('\0') {
        problems.push(Problem::error(file, "file contains a NUL byte"));
        return (objects, problems);
    }
    let docs = match documents(text) {
        Ok(d) => d,
        Err(e) => {
            problems.push(Problem::error(file, e));
            return (objects, problems);
        }
    };
    for (i, doc) in docs.into_iter().enumerate() {
        let root = if i == 0 {
            FieldPath::default()
        } else {
            FieldPath::new(&format!("document[{i}]"))
        };
        parse_document(file, doc, &root, unknown, &mut objects, &mut problems);
    }
    (objects, problems)
}

fn parse_document(
    file: &Path,
    doc: Value,
    root: &FieldPath,
    unknown: UnknownFields,
    objects: &mut Vec<Object>,
    problems: &mut Vec<Problem>,
) {
    let map = match &doc {
        Value::Null => return, // an empty document (`---` at the end) is not an error
        Value::Object(m) => m,
        _ => {
            problems.push(Problem::error(file, "document is not a mapping").at(root.to_string()));
            return;
        }
    };
    let api = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    let who = pod_label(map);
    match (api, kind) {
        ("v1", "Pod") => {
            if let Some(p) = typed::<Pod>(file, doc, root, &who, unknown, problems) {
                // Boxed first and made compact in place, as the fast path does.
                let mut pod = Box::new(p);
                super::fast::compact(&mut pod);
                objects.push(Object::Pod(pod));
            }
        }
        ("v1", "ConfigMap") => {
            if let Some(c) = typed::<ConfigMap>(file, doc, root, &who, unknown, problems) {
                objects.push(Object::ConfigMap(Box::new(c)));
            }
        }
        ("v1", "Secret") => {
            if let Some(s) = typed::<Secret>(file, doc, root, &who, unknown, problems) {
                objects.push(Object::Secret(Box::new(s)));
            }
        }
        ("apps/v1", "Deployment") => {
            if let Some(d) = typed::<Deployment>(file, doc, root, &who, unknown, problems) {
                let found = crate::workload::replicas::deployment_pods(&d);
                add_workload(
                    file,
                    root,
                    &who,
                    &d.metadata,
                    pods(found),
                    objects,
                    problems,
                );
            }
        }
        ("apps/v1", "ReplicaSet") => {
            if let Some(rs) = typed::<ReplicaSet>(file, doc, root, &who, unknown, problems) {
                let found = crate::workload::replicas::replica_set_pods(&rs);
                add_workload(
                    file,
                    root,
                    &who,
                    &rs.metadata,
                    pods(found),
                    objects,
                    problems,
                );
            }
        }
        ("batch/v1", "Job") => {
            if let Some(job) = typed::<Job>(file, doc, root, &who, unknown, problems) {
                let found = job_pods(crate::workload::job::job_pods(&job));
                add_workload(file, root, &who, &job.metadata, found, objects, problems);
            }
        }
        ("batch/v1", "CronJob") => {
            if let Some(cj) = typed::<CronJob>(file, doc, root, &who, unknown, problems) {
                let found = job_pods(crate::workload::cron_job::cron_job_pods(&cj));
                add_workload(file, root, &who, &cj.metadata, found, objects, problems);
            }
        }
        ("apps/v1", "DaemonSet") => {
            if let Some(ds) = typed::<DaemonSet>(file, doc, root, &who, unknown, problems) {
                let found = crate::workload::daemon_set::daemon_set_pods(&ds);
                add_workload(
                    file,
                    root,
                    &who,
                    &ds.metadata,
                    pods(found),
                    objects,
                    problems,
                );
            }
        }
        ("apps/v1", "StatefulSet") => {
            if let Some(sts) = typed::<StatefulSet>(file, doc, root, &who, unknown, problems) {
                let found = crate::workload::stateful_set::stateful_set_objects(&sts);
                let found = (
                    found
                        .0
                        .into_iter()
                        .map(|o| match o {
                            crate::workload::stateful_set::Made::Pod(p) => Object::Pod(p),
                            crate::workload::stateful_set::Made::Claim(c) => Object::Claim(c),
                        })
                        .collect(),
                    found.1,
                );
                add_workload(file, root, &who, &sts.metadata, found, objects, problems);
            }
        }
        ("v1", "PersistentVolumeClaim") => {
            if let Some(c) =
                typed::<PersistentVolumeClaim>(file, doc, root, &who, unknown, problems)
            {
                let found = crate::workload::claims::check_claim(&c);
                let meta = c.metadata.clone();
                let object = vec![Object::Claim(Box::new(c))];
                add_workload(file, root, &who, &meta, (object, found), objects, problems);
            }
        }
        ("v1", "PersistentVolume") => {
            if let Some(v) = typed::<PersistentVolume>(file, doc, root, &who, unknown, problems) {
                let found = crate::workload::claims::check_volume(&v);
                let meta = v.metadata.clone();
                let object = vec![Object::Volume(Box::new(v))];
                // Cluster-scoped: named without a namespace.
                let who = meta.name.clone();
                add_workload(file, root, &who, &meta, (object, found), objects, problems);
            }
        }
        ("v1", "List") => {
            let items = map
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (i, item) in items.into_iter().enumerate() {
                parse_document(
                    file,
                    item,
                    &root.field("items").index(i),
                    unknown,
                    objects,
                    problems,
                );
            }
        }
        ("", _) | (_, "") => problems.push(
            Problem::error(
                file,
                match (api, kind) {
                    ("", "") => "apiVersion and kind are required",
                    ("", _) => "apiVersion is required",
                    _ => "kind is required",
                },
            )
            .at(root.to_string())
            .pod_opt(who),
        ),
        _ => match super::control_plane::skipped(api, kind) {
            Some(why) => problems.push(
                Problem::warning(file, format!("{api}/{kind} skipped: {why}"))
                    .at(root.field("kind").to_string())
                    .pod_opt(who),
            ),
            None => problems.push(
                Problem::error(
                    file,
                    format!(
                        "{api}/{kind} is not supported here (only v1 Pod, ConfigMap, Secret, \
                         PersistentVolumeClaim and PersistentVolume, apps/v1 Deployment, \
                         ReplicaSet, StatefulSet and DaemonSet, batch/v1 Job and CronJob)"
                    ),
                )
                .at(root.field("kind").to_string())
                .pod_opt(who),
            ),
        },
    }
}

/// A workload's pods, or its problems (located in its document, naming it): a workload with
/// an error makes no pods, and a workload's name is checked as the API server checks it.
#[allow(clippy::too_many_arguments)]
fn add_workload(
    file: &Path,
    root: &FieldPath,
    who: &Option<String>,
    meta: &ObjectMeta,
    (pods, found): (Vec<Object>, Vec<crate::workload::replicas::FieldProblem>),
    objects: &mut Vec<Object>,
    problems: &mut Vec<Problem>,
) {
    let name = meta.name.as_deref().unwrap_or_default();
    let mut failed = false;
    if !super::names::is_dns1123_subdomain(name) {
        failed = true;
        problems.push(
            Problem::error(
                file,
                if name.is_empty() {
                    "Required value: name or generateName is required".to_string()
                } else {
                    format!(
                        "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist \
                         of lower case alphanumeric characters, '-' or '.', and must start and \
                         end with an alphanumeric character"
                    )
                },
            )
            .at(root.field("metadata").field("name").to_string())
            .pod_opt(who.clone()),
        );
    }
    for p in found {
        failed |= !p.warning;
        let problem = if p.warning {
            Problem::warning(file, p.message)
        } else {
            Problem::error(file, p.message)
        };
        problems.push(
            problem
                .at(root.field(&p.path).to_string())
                .pod_opt(who.clone()),
        );
    }
    if failed {
        return;
    }
    for mut o in pods {
        if let Object::Pod(pod) | Object::JobPod(pod, _) = &mut o {
            super::fast::compact(pod);
        }
        objects.push(o);
    }
}

/// A Job's pods as objects of the catalog, each with the terms its controller runs it by.
fn job_pods(
    (pods, found): (
        Vec<(Pod, crate::workload::job::JobTerms)>,
        Vec<crate::workload::replicas::FieldProblem>,
    ),
) -> (Vec<Object>, Vec<crate::workload::replicas::FieldProblem>) {
    let pods = pods
        .into_iter()
        .map(|(p, t)| Object::JobPod(Box::new(p), Box::new(t)))
        .collect();
    (pods, found)
}

/// A controller's pods as objects of the catalog.
fn pods(
    (pods, found): (Vec<Pod>, Vec<crate::workload::replicas::FieldProblem>),
) -> (Vec<Object>, Vec<crate::workload::replicas::FieldProblem>) {
    (
        pods.into_iter().map(|p| Object::Pod(Box::new(p))).collect(),
        found,
    )
}

/// `namespace/name` from raw metadata, for messages about documents that did not parse.
fn pod_label(map: &serde_json::Map<String, Value>) -> Option<String> {
    let meta = map.get("metadata")?.as_object()?;
    let name = meta.get("name")?.as_str()?;
    let ns = meta
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    Some(format!("{ns}/{name}"))
}

impl Problem {
    fn pod_opt(self, pod: Option<String>) -> Self {
        match pod {
            Some(p) => self.pod(p),
            None => self,
        }
    }
}

/// Deserializes with both the path of a type error and every unknown field reported.
fn typed<T: DeserializeOwned>(
    file: &Path,
    doc: Value,
    root: &FieldPath,
    who: &Option<String>,
    unknown: UnknownFields,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    // A clean document is decoded as JSON text, the way every other object is (one copy of each
    // type's decoder in the binaries, see `unknown::from_json`); writing the tree out costs a
    // fraction of having read it from YAML. Only a document with something to say is read again
    // from the tree, tracking paths, to say where (and, for type errors, every one: typeerr).
    let first = serde_json::to_string(&doc)
        .map_err(|e| e.to_string())
        .and_then(|json| super::unknown::from_json::<T>(&json).map_err(|e| e.to_string()));
    let (result, ignored) = match first {
        Ok((v, false)) => (Ok(v), Vec::new()),
        Ok((v, true)) => (Ok(v), super::typeerr::find::<T>(&doc).unknown),
        Err(first) => {
            let found = super::typeerr::find::<T>(&doc);
            let errors = if found.errors.is_empty() {
                // Where in the re-written text means nothing to the manifest's author.
                let first = match first.rfind(" at line ") {
                    Some(i) => first[..i].to_string(),
                    None => first,
                };
                vec![(".".to_string(), first)]
            } else {
                found.errors
            };
            (Err(errors), found.unknown)
        }
    };
    for path in ignored {
        let p = if root.as_str().is_empty() {
            path
        } else {
            format!("{root}.{path}")
        };
        let msg = "unknown field (a typo, or newer than the Kubernetes 1.33 API podunit reads)";
        let pr = match unknown {
            UnknownFields::Error => Problem::error(file, msg),
            UnknownFields::Warn => Problem::warning(file, msg),
        };
        problems.push(pr.at(p).pod_opt(who.clone()));
    }
    match result {
        Ok(v) => {
            if unknown == UnknownFields::Error
                && problems.iter().any(|p| p.is_error() && &p.pod == who)
            {
                return None;
            }
            Some(v)
        }
        Err(errors) => {
            for (path, message) in errors {
                let full = match (root.as_str().is_empty(), path == "." || path.is_empty()) {
                    (true, _) => path,
                    (false, true) => root.to_string(),
                    (false, false) => format!("{root}.{path}"),
                };
                problems.push(
                    Problem::error(file, one_line(&message))
                        .at(full)
                        .pod_opt(who.clone()),
                );
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> (Vec<Object>, Vec<String>) {
        let (o, p) = parse(Path::new("t.yaml"), text, UnknownFields::Error);
        (o, p.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn multi_document_with_a_bad_one() {
        let (o, p) = run(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: host}]}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {k: v}\n",
        );
        assert_eq!(o.len(), 2);
        assert_eq!(
            p,
            vec!["t.yaml: default/d: document[1].spec: Required value"]
        );
    }

    #[test]
    fn control_plane_kinds_are_skipped_with_a_warning_and_cost_nothing_else() {
        // As a chart renders a workload: the Service and ServiceAccount beside the Pod.
        let (o, p) = run(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: web}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec: {ports: [{port: 80}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: host}]}\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web}\n---\napiVersion: v1\nkind: Sevice\nmetadata: {name: typo}\n",
        );
        assert!(matches!(o.as_slice(), [Object::Pod(_)]));
        assert_eq!(
            p,
            vec![
                "t.yaml: default/web: kind: warning: v1/ServiceAccount skipped: pods on a standalone node get no API credentials, so there is no account to run as",
                "t.yaml: shop/web: document[1].kind: warning: v1/Service skipped: Services are served by kube-proxy and cluster DNS, which a standalone node does not run",
                "t.yaml: default/web: document[3].kind: warning: networking.k8s.io/v1/Ingress skipped: Ingresses are served by an ingress controller, which a standalone node does not run",
                "t.yaml: default/typo: document[4].kind: v1/Sevice is not supported here (only v1 Pod, ConfigMap, Secret, PersistentVolumeClaim and PersistentVolume, apps/v1 Deployment, ReplicaSet, StatefulSet and DaemonSet, batch/v1 Job and CronJob)",
            ]
        );
    }

    #[test]
    fn unknown_fields_have_paths() {
        let (o, p) = run(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: x}\nspec:\n  containers:\n  - name: c\n    image: host\n    comand: [/bin/true]\n",
        );
        assert!(o.is_empty());
        assert_eq!(
            p,
            vec![
                "t.yaml: x/a: spec.containers[0].comand: unknown field (a typo, or newer than the Kubernetes 1.33 API podunit reads)"
            ]
        );
    }

    #[test]
    fn type_errors_have_paths() {
        let (_, p) = run(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    args: {x: 1}\n",
        );
        assert_eq!(
            p,
            ["t.yaml: default/a: spec.containers[0].args: Invalid value: object: must be a list"]
        );
    }

    #[test]
    fn a_type_error_hides_no_other_problem_of_its_document() {
        let (o, p) = run(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    image: host\n    ports: [{containerPort: eighty}]\n  - name: d\n    image: host\n    comand: [/bin/true]\n    args: oops\n",
        );
        assert!(o.is_empty());
        assert_eq!(
            p,
            [
                "t.yaml: default/a: spec.containers[1].comand: unknown field (a typo, or newer than the Kubernetes 1.33 API podunit reads)",
                "t.yaml: default/a: spec.containers[0].ports[0].containerPort: Invalid value: \"eighty\": must be an integer",
                "t.yaml: default/a: spec.containers[1].args: Invalid value: \"oops\": must be a list",
            ]
        );
    }

    #[test]
    fn duplicate_keys_and_aliases_are_refused() {
        let (_, p) = run("apiVersion: v1\nkind: Pod\nkind: Pod\n");
        assert!(p[0].contains("not valid YAML"), "{p:?}");
        let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
        for i in 1..12 {
            bomb.push_str(&format!(
                "{}: &{} [*{},*{},*{},*{},*{},*{},*{},*{},*{},*{}]\n",
                (b'a' + i) as char,
                (b'a' + i) as char,
                (b'a' + i - 1) as char,
                (b'a' + i - 1) as char,
                (b'a' + i - 1) as char,
                (b'a' + i - 1) as char,
                (b'a' + i - 1) as char,
                (b'a' + i - 1) as char,
                (b'a' + i - 1) as char,
                (b'a' + i - 1) as char,
                (b'a' + i - 1) as char,
                (b'a' + i - 1) as char
            ));
        }
        let (_, p) = run(&bomb);
        assert!(p[0].contains("not valid YAML"), "{p:?}");
    }
}
