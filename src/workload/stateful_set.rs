//! The pods and claims a StatefulSet stands for on this node, as the StatefulSet controller makes
//! them (`newVersionedStatefulSetPod`, `updateStorage`, `getPersistentVolumeClaims`):
//!
//! - pod `i` is `<set>-<i>` (from `ordinals.start`), its hostname its name, its subdomain the
//!   set's `serviceName`, labelled `statefulset.kubernetes.io/pod-name`,
//!   `apps.kubernetes.io/pod-index` and `controller-revision-hash`;
//! - each `volumeClaimTemplates` entry is a claim `<template>-<set>-<i>` per pod, labelled with
//!   the set's `matchLabels`, and the pod's volume of that name mounts it. Claims are kept when
//!   the set scales down or a pod goes, as Kubernetes keeps them by default
//!   (`persistentVolumeClaimRetentionPolicy: Retain`): a claim's directory outlives its pod.
//!
//! With `podManagementPolicy: OrderedReady` (the default) pod `i` is started only once pods
//! `0..i` are Running and Ready: [`Ordinal`] tells podunit-sync, the controller here, which
//! pod of which set it is.

use super::daemon_set::CONTROLLER_REVISION_HASH;
use super::replicas::{
    FieldProblem, check_template, controller_ref, error, template_hash, warning,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The pod's name as a label (`apps.StatefulSetPodNameLabel`).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The pod's ordinal as a label (`apps.PodIndexLabel`).
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// What a StatefulSet makes.
#[derive(Debug, Clone)]
pub enum Made {
    Pod(Box<Pod>),
    Claim(Box<PersistentVolumeClaim>),
}

/// A pod of an `OrderedReady` StatefulSet: which set (`namespace/name`) and which ordinal, so
/// its controller starts it after the pods before it are Ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ordinal {
    pub set: String,
    pub ordinal: u32,
}

impl Ordinal {
    /// `<namespace>/<set> <ordinal>`, as the pod unit's `X-PodunitOrderedReady=` carries it.
    pub fn to_line(&self) -> String {
        format!("{} {}", self.set, self.ordinal)
    }

    pub fn from_line(line: &str) -> Option<Ordinal> {
        let (set, ordinal) = line.split_once(' ')?;
        Some(Ordinal {
            set: set.to_string(),
            ordinal: ordinal.parse().ok()?,
        })
    }
}

/// The annotation podunit puts on an `OrderedReady` set's pods: their [`Ordinal`]. (The
/// generator reads it back from the pod; a cluster's controller would keep it in its cache.)
pub const ORDERED_READY_ANNOTATION: &str = "podunit.io/ordered-ready";

/// The pods and claims of a StatefulSet, and the problems found; nothing when one of them is an
/// error.
pub fn stateful_set_objects(sts: &StatefulSet) -> (Vec<Made>, Vec<FieldProblem>) {
    let name = sts.metadata.name.clone().unwrap_or_default();
    let Some(spec) = sts.spec.as_ref() else {
        return (Vec::new(), vec![error("spec", "Required value")]);
    };
    let mut problems = check_template(Some(&spec.selector), &spec.template, "statefulset");
    let replicas = spec.replicas.unwrap_or(1);
    if replicas < 0 {
        problems.push(error(
            "spec.replicas",
            format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        ));
    }
    let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
    if start < 0 {
        problems.push(error(
            "spec.ordinals.start",
            format!("Invalid value: {start}: must be greater than or equal to 0"),
        ));
    }
    let policy = spec
        .pod_management_policy
        .as_deref()
        .unwrap_or("OrderedReady");
    if !matches!(policy, "OrderedReady" | "Parallel") {
        problems.push(error(
            "spec.podManagementPolicy",
            format!(
                "Unsupported value: {policy:?}: supported values: \"OrderedReady\", \"Parallel\""
            ),
        ));
    }
    let strategy = spec.update_strategy.as_ref();
    match strategy.and_then(|s| s.type_.as_deref()) {
        None | Some("RollingUpdate") | Some("OnDelete") => {}
        Some(t) => problems.push(error(
            "spec.updateStrategy.type",
            format!("Unsupported value: {t:?}: supported values: \"OnDelete\", \"RollingUpdate\""),
        )),
    }
    if strategy
        .and_then(|s| s.rolling_update.as_ref())
        .is_some_and(|r| r.partition.unwrap_or(0) > 0 || r.max_unavailable.is_some())
    {
        problems.push(warning(
            "spec.updateStrategy.rollingUpdate",
            "rolling updates are not run by podunit yet: a changed template replaces every pod \
             at the next reload, partition or not",
        ));
    }
    if let Some(p) = &spec.persistent_volume_claim_retention_policy
        && (p.when_deleted.as_deref() == Some("Delete")
            || p.when_scaled.as_deref() == Some("Delete"))
    {
        problems.push(warning(
            "spec.persistentVolumeClaimRetentionPolicy",
            "claims are always retained here: `podunit volume rm` deletes a released claim's data",
        ));
    }
    let templates = spec.volume_claim_templates.as_deref().unwrap_or_default();
    for (i, t) in templates.iter().enumerate() {
        let at = |p: &str| format!("spec.volumeClaimTemplates[{i}].{p}");
        if t.metadata.name.as_deref().unwrap_or("").is_empty() {
            problems.push(error(&at("metadata.name"), "Required value"));
        }
        for p in super::claims::check_claim(t) {
            problems.push(FieldProblem {
                path: at(&p.path),
                ..p
            });
        }
    }
    if spec.template.spec.is_none() {
        problems.push(error("spec.template.spec", "Required value"));
    }
    if problems.iter().any(|p| !p.warning) {
        return (Vec::new(), problems);
    }
    let namespace = sts
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let revision = format!("{name}-{}", template_hash(&spec.template, None));
    let meta = spec.template.metadata.clone().unwrap_or_default();
    let match_labels = spec.selector.match_labels.clone().unwrap_or_default();
    let mut made = Vec::new();
    for ordinal in start..start + replicas {
        let pod_name = format!("{name}-{ordinal}");
        let mut labels = meta.labels.clone().unwrap_or_default();
        labels.insert(POD_NAME_LABEL.into(), pod_name.clone());
        labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
        labels.insert(CONTROLLER_REVISION_HASH.into(), revision.clone());
        let mut annotations = meta.annotations.clone().unwrap_or_default();
        if policy == "OrderedReady" {
            let o = Ordinal {
                set: format!("{namespace}/{name}"),
                ordinal: ordinal as u32,
            };
            annotations.insert(ORDERED_READY_ANNOTATION.into(), o.to_line());
        }
        let mut pod_spec = spec.template.spec.clone().unwrap_or_default();
        pod_spec.hostname = Some(pod_name.clone());
        pod_spec.subdomain = spec.service_name.clone().filter(|s| !s.is_empty());
        let mut volumes: Vec<Volume> = Vec::new();
        for t in templates {
            let tname = t.metadata.name.clone().unwrap_or_default();
            let claim_name = format!("{tname}-{name}-{ordinal}");
            let mut claim_labels = t.metadata.labels.clone().unwrap_or_default();
            claim_labels.extend(match_labels.clone());
            made.push(Made::Claim(Box::new(PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name.clone()),
                    namespace: Some(namespace.clone()),
                    labels: Some(claim_labels),
                    annotations: t.metadata.annotations.clone(),
                    ..ObjectMeta::default()
                },
                spec: t.spec.clone(),
                status: None,
            })));
            volumes.push(Volume {
                name: tname,
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name,
                    read_only: Some(false),
                }),
                ..Volume::default()
            });
        }
        for v in pod_spec.volumes.take().unwrap_or_default() {
            if !volumes.iter().any(|c| c.name == v.name) {
                volumes.push(v);
            }
        }
        pod_spec.volumes = (!volumes.is_empty()).then_some(volumes);
        made.push(Made::Pod(Box::new(Pod {
            metadata: ObjectMeta {
                name: Some(pod_name),
                namespace: Some(namespace.clone()),
                labels: Some(labels),
                annotations: (!annotations.is_empty()).then_some(annotations),
                owner_references: Some(vec![controller_ref("StatefulSet", &namespace, &name)]),
                ..ObjectMeta::default()
            },
            spec: Some(pod_spec),
            status: None,
        })));
    }
    (made, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Kubernetes documentation's StatefulSet example ("StatefulSet Basics"), unchanged.
    const WEB: &str = "apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: nginx
  replicas: 2
  minReadySeconds: 10
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: nginx
        image: registry.k8s.io/nginx-slim:0.24
        ports:
        - containerPort: 80
          name: web
        volumeMounts:
        - name: www
          mountPath: /usr/share/nginx/html
  volumeClaimTemplates:
  - metadata:
      name: www
    spec:
      accessModes: [ \"ReadWriteOnce\" ]
      storageClassName: \"my-storage-class\"
      resources:
        requests:
          storage: 1Gi
";

    fn made(yaml: &str) -> (Vec<Pod>, Vec<PersistentVolumeClaim>, Vec<FieldProblem>) {
        let sts: StatefulSet = serde_saphyr::from_str(yaml).unwrap();
        let (made, problems) = stateful_set_objects(&sts);
        let mut pods = Vec::new();
        let mut claims = Vec::new();
        for m in made {
            match m {
                Made::Pod(p) => pods.push(*p),
                Made::Claim(c) => claims.push(*c),
            }
        }
        (pods, claims, problems)
    }

    #[test]
    fn pods_and_claims_named_and_labelled_as_the_controller_makes_them() {
        let (pods, claims, problems) = made(WEB);
        assert!(problems.is_empty(), "{problems:?}");
        let names: Vec<_> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["web-0", "web-1"]);
        let claim_names: Vec<_> = claims
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(claim_names, ["www-web-0", "www-web-1"]);
        assert_eq!(claims[1].metadata.labels.as_ref().unwrap()["app"], "nginx");
        let web1 = &pods[1];
        let spec = web1.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-1"));
        assert_eq!(spec.subdomain.as_deref(), Some("nginx"));
        let labels = web1.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[POD_NAME_LABEL], "web-1");
        assert_eq!(labels[POD_INDEX_LABEL], "1");
        assert!(labels[CONTROLLER_REVISION_HASH].starts_with("web-"));
        let vol = &spec.volumes.as_ref().unwrap()[0];
        assert_eq!(vol.name, "www");
        assert_eq!(
            vol.persistent_volume_claim.as_ref().unwrap().claim_name,
            "www-web-1"
        );
        let ann = web1.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            Ordinal::from_line(&ann[ORDERED_READY_ANNOTATION]),
            Some(Ordinal {
                set: "default/web".into(),
                ordinal: 1
            })
        );
        assert_eq!(
            super::super::replicas::controller_of(web1),
            Some(("StatefulSet", "web"))
        );
    }

    #[test]
    fn parallel_sets_are_not_ordered_and_ordinals_start_where_asked() {
        let yaml = WEB.replace(
            "  replicas: 2\n",
            "  replicas: 2\n  podManagementPolicy: Parallel\n  ordinals: {start: 5}\n",
        );
        let (pods, claims, _) = made(&yaml);
        assert_eq!(pods[0].metadata.name.as_deref(), Some("web-5"));
        assert_eq!(claims[1].metadata.name.as_deref(), Some("www-web-6"));
        assert!(pods[0].metadata.annotations.is_none());
    }

    #[test]
    fn the_api_servers_checks() {
        let (pods, _, problems) =
            made(&WEB.replace("app: nginx\n  template", "app: other\n  template"));
        assert!(pods.is_empty());
        assert_eq!(problems[0].path, "spec.template.metadata.labels");
        let (_, _, problems) = made(&WEB.replace("storage: 1Gi", "storage: 0"));
        assert_eq!(
            problems[0].to_string(),
            "spec.volumeClaimTemplates[0].spec.resources.requests.storage: Invalid value: \"0\": \
             must be greater than zero"
        );
    }
}
