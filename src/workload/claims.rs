//! PersistentVolumeClaims on a standalone node: the API server's checks of a claim and of a
//! PersistentVolume, and the PV controller's binding of claims to volumes, pure.
//!
//! A claim binds as the PV controller binds it (`FindMatchingVolume`): to the PersistentVolume
//! pre-bound to it (`claimRef`, or the claim's `volumeName`), else to the smallest free volume of
//! its storage class whose access modes hold the claim's, whose capacity holds its request, whose
//! `volumeMode` is the claim's and whose labels its `selector` matches. A claim no volume matches
//! is provisioned when its storage class is one of the node's (node config `storageClasses`): a
//! directory of its own under the class's directory, `<dir>/<namespace>/<claim>`, kept across pod
//! restarts, reboots, manifest edits and the claim's removal (`podunit volume rm` deletes it).
//! A claim without `storageClassName` is given the node's default class, as the
//! `DefaultStorageClass` admission plugin gives it the cluster's.

use super::replicas::{FieldProblem, error, matches, warning};
use crate::common::quantity;
pub use crate::common::storage_classes::{DEFAULT_CLASS, DEFAULT_CLASS_DIR, StorageClasses};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use std::collections::{BTreeMap, BTreeSet};

/// The access modes the API server knows.
const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

/// Where a bound claim's data is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The directory on the host.
    pub path: String,
    /// How the directory is checked or made at pod start: a `hostPath` volume's `type`, or
    /// [`PROVISIONED`] for a directory podunit makes, or `""` for a `local` volume (which must
    /// exist, as the kubelet's local volume plugin requires).
    pub host_type: String,
    /// The PersistentVolume bound, or None for a provisioned directory.
    pub volume: Option<String>,
    /// The claim's storage class ("" for none).
    pub class: String,
    /// The claim's request, as written (`1Gi`), and the volume's capacity.
    pub request: String,
    pub capacity: String,
    pub access_modes: Vec<String>,
    /// A `ReadWriteOncePod` claim: the one pod (`namespace/name`) that may use it.
    pub only_pod: Option<String>,
}

/// [`Bound::host_type`] of a provisioned directory.
pub const PROVISIONED: &str = "Provisioned";

/// Every claim's binding by (namespace, name), or why it is not bound.
pub type Bindings = BTreeMap<(String, String), Result<Bound, String>>;

/// The API server's checks of a claim (`ValidatePersistentVolumeClaim`), and what podunit
/// cannot provide (`volumeMode: Block`: its volumes are directories).
pub fn check_claim(c: &PersistentVolumeClaim) -> Vec<FieldProblem> {
    let mut problems = Vec::new();
    let Some(spec) = c.spec.as_ref() else {
        return vec![error("spec", "Required value")];
    };
    check_access_modes(spec.access_modes.as_deref(), &mut problems);
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    match storage {
        None => problems.push(error(
            "spec.resources.requests.storage",
            "Required value: storage request is required",
        )),
        Some(q) => check_size("spec.resources.requests.storage", &q.0, &mut problems),
    }
    check_volume_mode(spec.volume_mode.as_deref(), &mut problems);
    // Populating a claim from a snapshot, another claim or a populator is a storage driver's.
    for (field, set) in [
        ("spec.dataSource", spec.data_source.is_some()),
        ("spec.dataSourceRef", spec.data_source_ref.is_some()),
    ] {
        if set {
            problems.push(error(
                field,
                "Unsupported value: claims here start empty (no storage driver to populate them \
                 from a snapshot, a claim or a populator)",
            ));
        }
    }
    if spec.volume_attributes_class_name.is_some() {
        problems.push(warning(
            "spec.volumeAttributesClassName",
            "ignored: a directory of this node has no attributes to set",
        ));
    }
    if let Some(sel) = &spec.selector
        && let Err(e) = matches(sel, &BTreeMap::new())
    {
        problems.push(error("spec.selector", e));
    }
    problems
}

/// The API server's checks of a PersistentVolume, and the sources podunit can mount (a
/// directory of this node: `hostPath` or `local`).
pub fn check_volume(v: &PersistentVolume) -> Vec<FieldProblem> {
    let mut problems = Vec::new();
    let Some(spec) = v.spec.as_ref() else {
        return vec![error("spec", "Required value")];
    };
    check_access_modes(spec.access_modes.as_deref(), &mut problems);
    match spec.capacity.as_ref().and_then(|c| c.get("storage")) {
        None => problems.push(error("spec.capacity.storage", "Required value")),
        Some(q) => check_size("spec.capacity.storage", &q.0, &mut problems),
    }
    check_volume_mode(spec.volume_mode.as_deref(), &mut problems);
    if spec.mount_options.as_ref().is_some_and(|o| !o.is_empty()) {
        problems.push(warning(
            "spec.mountOptions",
            "ignored: the volume is bind-mounted, with no filesystem mount to pass options to",
        ));
    }
    match (&spec.host_path, &spec.local) {
        (Some(h), None) => check_path("spec.hostPath.path", &h.path, &mut problems),
        (None, Some(l)) => {
            check_path("spec.local.path", &l.path, &mut problems);
            if spec
                .node_affinity
                .as_ref()
                .and_then(|a| a.required.as_ref())
                .is_none()
            {
                problems.push(error(
                    "spec.nodeAffinity",
                    "Required value: Local volume requires node affinity",
                ));
            }
        }
        (Some(_), Some(_)) => problems.push(error(
            "spec.local",
            "Forbidden: may not specify more than 1 volume type",
        )),
        (None, None) => problems.push(error(
            "spec",
            "Unsupported value: only hostPath and local PersistentVolumes are supported here (a \
             directory of this node; no storage drivers)",
        )),
    }
    problems
}

fn check_access_modes(modes: Option<&[String]>, problems: &mut Vec<FieldProblem>) {
    let modes = modes.unwrap_or_default();
    if modes.is_empty() {
        problems.push(error(
            "spec.accessModes",
            "Required value: at least 1 access mode is required",
        ));
    }
    for m in modes {
        if !ACCESS_MODES.contains(&m.as_str()) {
            problems.push(error(
                "spec.accessModes",
                format!(
                    "Unsupported value: {m:?}: supported values: \"ReadOnlyMany\", \
                     \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""
                ),
            ));
        }
    }
    if modes.len() > 1 && modes.iter().any(|m| m == "ReadWriteOncePod") {
        problems.push(error(
            "spec.accessModes",
            "Forbidden: may not use ReadWriteOncePod with other access modes",
        ));
    }
}

fn check_size(path: &str, q: &str, problems: &mut Vec<FieldProblem>) {
    match quantity::bytes(q) {
        Ok(0) => problems.push(error(
            path,
            "Invalid value: \"0\": must be greater than zero",
        )),
        Ok(_) => {}
        Err(e) => problems.push(error(path, format!("Invalid value: {q:?}: {e}"))),
    }
}

fn check_volume_mode(mode: Option<&str>, problems: &mut Vec<FieldProblem>) {
    match mode {
        None | Some("Filesystem") => {}
        Some("Block") => problems.push(error(
            "spec.volumeMode",
            "Unsupported value: \"Block\": podunit volumes are directories of this node \
             (volumeMode Filesystem); raw block devices are not supported",
        )),
        Some(m) => problems.push(error(
            "spec.volumeMode",
            format!("Unsupported value: {m:?}: supported values: \"Block\", \"Filesystem\""),
        )),
    }
}

fn check_path(field: &str, path: &str, problems: &mut Vec<FieldProblem>) {
    if !path.starts_with('/') {
        problems.push(error(field, "Invalid value: must be an absolute path"));
    } else if path.split('/').any(|c| c == "..") {
        problems.push(error(field, "Invalid value: must not contain '..'"));
    }
}

/// The claim's storage class: `storageClassName`, else the beta annotation, else the node's
/// default (the `DefaultStorageClass` admission); `""` is no class.
pub fn claim_class(c: &PersistentVolumeClaim, classes: &StorageClasses) -> String {
    let spec = c.spec.as_ref();
    if let Some(n) = spec.and_then(|s| s.storage_class_name.as_ref()) {
        return n.clone();
    }
    if let Some(n) = c
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
    {
        return n.clone();
    }
    classes.default.clone().unwrap_or_default()
}

fn volume_class(v: &PersistentVolume) -> String {
    v.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .or_else(|| {
            v.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class").cloned())
        })
        .unwrap_or_default()
}

fn storage(
    q: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> (String, u64) {
    let s = q
        .and_then(|m| m.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default();
    let b = quantity::bytes(&s).unwrap_or(0);
    (s, b)
}

/// Binds every claim, in (namespace, name) order: each volume to one claim at most. `volumes`
/// are the PersistentVolumes that passed [`check_volume`] and select this node; `claims` those
/// that passed [`check_claim`].
pub fn bind<'a>(
    claims: &BTreeMap<(String, String), &PersistentVolumeClaim>,
    volumes: &'a BTreeMap<String, &'a PersistentVolume>,
    classes: &StorageClasses,
) -> Bindings {
    // A volume whose claimRef names another claim is never given to this one (bind_one skips
    // it), as the controller never does.
    let mut taken: BTreeSet<&'a str> = BTreeSet::new();
    let mut out = Bindings::new();
    for ((ns, name), claim) in claims {
        let r = bind_one(ns, name, claim, volumes, classes, &mut taken)
            .map_err(|e| format!("not bound: {e}"));
        out.insert((ns.clone(), name.clone()), r);
    }
    out
}

fn bind_one<'a>(
    ns: &str,
    name: &str,
    claim: &PersistentVolumeClaim,
    volumes: &'a BTreeMap<String, &'a PersistentVolume>,
    classes: &StorageClasses,
    taken: &mut BTreeSet<&'a str>,
) -> Result<Bound, String> {
    let spec = claim.spec.clone().unwrap_or_default();
    let class = claim_class(claim, classes);
    let (request, want) = storage(spec.resources.as_ref().and_then(|r| r.requests.as_ref()));
    let modes = spec.access_modes.clone().unwrap_or_default();
    let claim_mode = spec.volume_mode.as_deref().unwrap_or("Filesystem");
    let labels = BTreeMap::new();
    let mut smallest: Option<(&'a str, &'a PersistentVolume, u64)> = None;
    for (vname, v) in volumes {
        if taken.contains(vname.as_str()) {
            continue;
        }
        let Some(vs) = v.spec.as_ref() else { continue };
        let (_, have) = storage(vs.capacity.as_ref());
        if have < want {
            continue;
        }
        if vs.volume_mode.as_deref().unwrap_or("Filesystem") != claim_mode {
            continue;
        }
        let vmodes = vs.access_modes.as_deref().unwrap_or_default();
        if !modes.iter().all(|m| vmodes.contains(m)) {
            continue;
        }
        let pre_bound = vs.claim_ref.as_ref().is_some_and(|r| {
            r.name.as_deref() == Some(name) && r.namespace.as_deref().unwrap_or("default") == ns
        }) || spec.volume_name.as_deref() == Some(vname.as_str());
        if pre_bound {
            if volume_class(v) != class {
                continue;
            }
            taken.insert(vname.as_str());
            return Ok(bound_to(vname, v, &class, &request, &modes));
        }
        if spec.volume_name.is_some() || vs.claim_ref.is_some() {
            continue;
        }
        if let Some(sel) = &spec.selector {
            let vl = v.metadata.labels.as_ref().unwrap_or(&labels);
            if !matches(sel, vl).unwrap_or(false) {
                continue;
            }
        }
        if volume_class(v) != class {
            continue;
        }
        if smallest.is_none_or(|(_, _, s)| have < s) {
            smallest = Some((vname.as_str(), v, have));
        }
    }
    if let Some((vname, v, _)) = smallest {
        taken.insert(vname);
        return Ok(bound_to(vname, v, &class, &request, &modes));
    }
    if let Some(want) = &spec.volume_name {
        return Err(format!(
            "the PersistentVolume {want:?} it names (volumeName) is not here or does not match \
             it (storage class, capacity, access modes, volumeMode)"
        ));
    }
    match classes.classes.get(&class) {
        Some(dir) if spec.selector.is_none() => Ok(Bound {
            path: crate::common::storage_classes::claim_dir(dir, ns, name),
            host_type: PROVISIONED.into(),
            volume: None,
            class,
            capacity: request.clone(),
            request,
            access_modes: modes,
            only_pod: None,
        }),
        // The provisioner cannot honour a selector (the external-provisioner refuses one too).
        Some(_) => Err(format!(
            "no PersistentVolume matches its selector, and claims with a selector are not \
             provisioned (storage class {class:?})"
        )),
        None if class.is_empty() => Err(
            "no PersistentVolume without a storage class matches it (capacity, access modes, \
             volumeMode), and claims with storageClassName \"\" are never provisioned"
                .into(),
        ),
        None => Err(format!(
            "no PersistentVolume of storage class {class:?} matches it (capacity, access modes, \
             volumeMode), and {class:?} is not one of this node's storage classes (node config \
             storageClasses)"
        )),
    }
}

fn bound_to(
    vname: &str,
    v: &PersistentVolume,
    class: &str,
    request: &str,
    modes: &[String],
) -> Bound {
    let spec = v.spec.as_ref();
    let (path, host_type) = match (
        spec.and_then(|s| s.host_path.as_ref()),
        spec.and_then(|s| s.local.as_ref()),
    ) {
        (Some(h), _) => (h.path.clone(), h.type_.clone().unwrap_or_default()),
        (None, Some(l)) => (l.path.clone(), "Directory".into()),
        (None, None) => (String::new(), String::new()),
    };
    Bound {
        path,
        host_type,
        volume: Some(vname.to_string()),
        class: class.to_string(),
        request: request.to_string(),
        capacity: storage(spec.and_then(|s| s.capacity.as_ref())).0,
        access_modes: modes.to_vec(),
        only_pod: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(yaml: &str) -> PersistentVolumeClaim {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn volume(yaml: &str) -> PersistentVolume {
        serde_saphyr::from_str(yaml).unwrap()
    }

    /// The Kubernetes documentation's walkthrough ("Configure a Pod to Use a PersistentVolume
    /// for Storage"), unchanged.
    const DOC_PV: &str = "apiVersion: v1
kind: PersistentVolume
metadata: {name: task-pv-volume, labels: {type: local}}
spec:
  storageClassName: manual
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /mnt/data}
";
    const DOC_PVC: &str = "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: task-pv-claim}
spec:
  storageClassName: manual
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 3Gi}}
";

    fn bind_all(claims: &[(&str, &PersistentVolumeClaim)], vols: &[&PersistentVolume]) -> Bindings {
        let claims = claims
            .iter()
            .map(|(n, c)| (("default".to_string(), n.to_string()), *c))
            .collect();
        let vols = vols
            .iter()
            .map(|v| (v.metadata.name.clone().unwrap(), *v))
            .collect();
        bind(&claims, &vols, &StorageClasses::default())
    }

    #[test]
    fn the_documentations_walkthrough_binds_the_claim_to_the_volume() {
        let (pv, pvc) = (volume(DOC_PV), claim(DOC_PVC));
        assert!(check_volume(&pv).is_empty());
        assert!(check_claim(&pvc).is_empty());
        let b = bind_all(&[("task-pv-claim", &pvc)], &[&pv]);
        let bound = b[&("default".into(), "task-pv-claim".into())]
            .clone()
            .unwrap();
        assert_eq!(bound.path, "/mnt/data");
        assert_eq!(bound.volume.as_deref(), Some("task-pv-volume"));
        assert_eq!(
            (bound.request.as_str(), bound.capacity.as_str()),
            ("3Gi", "10Gi")
        );
    }

    #[test]
    fn the_smallest_matching_volume_and_each_volume_once() {
        let small = volume(
            &DOC_PV
                .replace("task-pv-volume", "small")
                .replace("10Gi", "4Gi"),
        );
        let big = volume(
            &DOC_PV
                .replace("task-pv-volume", "big")
                .replace("/mnt/data", "/mnt/big"),
        );
        let tiny = volume(
            &DOC_PV
                .replace("task-pv-volume", "tiny")
                .replace("10Gi", "1Gi"),
        );
        let (a, b, c) = (claim(DOC_PVC), claim(DOC_PVC), claim(DOC_PVC));
        let got = bind_all(&[("a", &a), ("b", &b), ("c", &c)], &[&small, &big, &tiny]);
        let vol = |n: &str| got[&("default".into(), n.into())].clone().map(|b| b.volume);
        assert_eq!(vol("a"), Ok(Some("small".into())));
        assert_eq!(vol("b"), Ok(Some("big".into())));
        // The 1Gi volume is too small, and "manual" is no class of this node's.
        let err = vol("c").unwrap_err();
        assert!(
            err.contains("\"manual\" is not one of this node's storage classes"),
            "{err}"
        );
    }

    #[test]
    fn access_modes_class_and_claim_ref_decide() {
        let rwx = claim(&DOC_PVC.replace("[ReadWriteOnce]", "[ReadWriteMany]"));
        let other_class = claim(&DOC_PVC.replace("manual", "fast"));
        let pv = volume(DOC_PV);
        let got = bind_all(&[("rwx", &rwx), ("other", &other_class)], &[&pv]);
        assert!(got[&("default".into(), "rwx".into())].is_err());
        assert!(got[&("default".into(), "other".into())].is_err());
        // A volume pre-bound to one claim is not given to another, even one sorted first.
        let held = volume(&DOC_PV.replace(
            "  hostPath:",
            "  claimRef: {namespace: default, name: zz}\n  hostPath:",
        ));
        let (a, zz) = (claim(DOC_PVC), claim(DOC_PVC));
        let got = bind_all(&[("a", &a), ("zz", &zz)], &[&held]);
        assert!(got[&("default".into(), "a".into())].is_err());
        assert_eq!(
            got[&("default".into(), "zz".into())]
                .clone()
                .unwrap()
                .volume
                .as_deref(),
            Some("task-pv-volume")
        );
    }

    #[test]
    fn a_claim_of_the_default_class_is_provisioned_under_its_directory() {
        let c = claim(
            "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: shop}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
",
        );
        let claims = BTreeMap::from([(("shop".to_string(), "data".to_string()), &c)]);
        let got = bind(&claims, &BTreeMap::new(), &StorageClasses::default());
        let b = got[&("shop".into(), "data".into())].clone().unwrap();
        assert_eq!(b.path, "/var/lib/podunit/volumes/shop/data");
        assert_eq!(
            (b.host_type.as_str(), b.class.as_str()),
            (PROVISIONED, "local-path")
        );
        // storageClassName "" never is.
        let none = claim(&DOC_PVC.replace("manual", "\"\""));
        assert!(bind_all(&[("n", &none)], &[]).values().all(|r| r.is_err()));
    }

    #[test]
    fn the_api_servers_checks_and_block_mode() {
        let bad = claim(
            "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: x}
spec:
  accessModes: [ReadWriteOncePod, ReadWriteOnce]
  volumeMode: Block
  resources: {}
",
        );
        let got: Vec<String> = check_claim(&bad).iter().map(|p| p.to_string()).collect();
        assert_eq!(
            got,
            [
                "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes",
                "spec.resources.requests.storage: Required value: storage request is required",
                "spec.volumeMode: Unsupported value: \"Block\": podunit volumes are directories of \
                 this node (volumeMode Filesystem); raw block devices are not supported",
            ]
        );
        let nfs = volume(
            "apiVersion: v1
kind: PersistentVolume
metadata: {name: n}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  nfs: {server: nfs.example, path: /export}
",
        );
        assert!(
            check_volume(&nfs)[0]
                .message
                .contains("only hostPath and local")
        );
        let local = volume(&DOC_PV.replace("hostPath:", "local:"));
        assert_eq!(
            check_volume(&local)[0].to_string(),
            "spec.nodeAffinity: Required value: Local volume requires node affinity"
        );
    }
}
