//! Loading manifests: which files count, how they parse, and the catalog of pods, ConfigMaps and
//! Secrets they hold. Validation of what parsed lives in [`crate::validate`].

pub mod admission;
pub mod cache;
pub mod control_plane;
pub mod discover;
pub mod documents;
pub mod fast;
pub mod host_ports;
pub mod names;
pub mod parse;
pub mod placement;
pub mod typeerr;
pub(crate) mod unknown;

use crate::common::diag::Problem;
use crate::common::paths::{Paths, Source};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use parse::UnknownFields;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The kinds a manifest may hold.
#[derive(Debug, Clone)]
pub enum Object {
    Pod(Box<Pod>),
    /// A Job's pod, with the terms its controller (podunit-sync) runs it by.
    JobPod(Box<Pod>, Box<crate::workload::job::JobTerms>),
    ConfigMap(Box<ConfigMap>),
    Secret(Box<Secret>),
    Claim(Box<PersistentVolumeClaim>),
    /// Cluster-scoped: by name alone.
    Volume(Box<PersistentVolume>),
}

/// A pod and where it came from. `pod.metadata.namespace` and `.uid` are always set.
#[derive(Debug, Clone)]
pub struct PodEntry {
    pub pod: Pod,
    pub file: PathBuf,
    pub source: Source,
    /// A Job's pod: started by the Job controller, not with the node.
    pub job: Option<Box<crate::workload::job::JobTerms>>,
    /// The claims its `persistentVolumeClaim` volumes name, bound (see [`Catalog::bind_claims`]).
    pub claims: Claims,
}

/// A pod's claims by name: where each is bound, or why it is not.
pub type Claims = BTreeMap<String, Result<crate::workload::claims::Bound, String>>;

impl PodEntry {
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }

    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or("")
    }

    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or("")
    }

    /// A local pod of an `OrderedReady` StatefulSet: which, and its ordinal (podunit-sync starts
    /// it once the pods before it are Ready).
    pub fn ordered(&self) -> Option<crate::workload::stateful_set::Ordinal> {
        use crate::workload::stateful_set::{ORDERED_READY_ANNOTATION, Ordinal};
        if !self.source.is_static()
            || crate::workload::replicas::controller_of(&self.pod).map(|c| c.0)
                != Some("StatefulSet")
        {
            return None;
        }
        let line = self
            .pod
            .metadata
            .annotations
            .as_ref()?
            .get(ORDERED_READY_ANNOTATION)?;
        Ordinal::from_line(line)
    }

    /// `namespace/name`, as problems name a pod.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }
}

/// Everything found in the manifest directories.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    pub pods: Vec<PodEntry>,
    /// By (namespace, name); a pod may only use objects of its own namespace.
    pub config_maps: BTreeMap<(String, String), (ConfigMap, PathBuf)>,
    pub secrets: BTreeMap<(String, String), (Secret, PathBuf)>,
    /// PersistentVolumeClaims by (namespace, name), PersistentVolumes by name.
    pub claims: BTreeMap<(String, String), (PersistentVolumeClaim, PathBuf)>,
    pub volumes: BTreeMap<String, (PersistentVolume, PathBuf)>,
    pub problems: Vec<Problem>,
}

impl Catalog {
    /// Loads every manifest directory of `paths` (DESIGN.md §3). Files are read and parsed in
    /// parallel; the catalog is the same, in the same order, as reading them one by one.
    pub fn load(paths: &Paths) -> Catalog {
        let mut c = Catalog::default();
        let mut files = Vec::new();
        for (source, dir) in paths.manifest_dirs() {
            match discover::list_dir(&dir) {
                Ok(found) => files.extend(found.into_iter().map(|f| (source, dir.clone(), f))),
                Err(e) => c
                    .problems
                    .push(Problem::error(&dir, format!("cannot read directory: {e}"))),
            }
        }
        let cache = cache::Reader::open(paths);
        let parsed = crate::common::parallel::map(&files, |(source, dir, f)| {
            // Units and messages name the host path, not the test root's.
            let shown = Path::new("/").join(f.strip_prefix(&paths.root).unwrap_or(f));
            let result = match discover::check_trusted(&paths.root, dir, f) {
                Ok(()) => read_and_parse(f, &shown, *source, &cache),
                Err(why) => (
                    Vec::new(),
                    vec![Problem::error(&shown, format!("refused: {why}"))],
                ),
            };
            (shown, *source, result)
        });
        for (shown, source, (objects, problems)) in parsed {
            c.add_parsed(&shown, source, objects, problems);
        }
        c.refuse_duplicates();
        c
    }

    /// Reads and parses one file; its problems are recorded, its objects added.
    pub fn add_file(&mut self, file: &Path, source: Source) {
        self.add_file_as(file, file, source)
    }

    /// Reads `file` but names it `shown` in problems and units.
    pub fn add_file_as(&mut self, file: &Path, shown: &Path, source: Source) {
        let (objects, problems) = read_and_parse(file, shown, source, &cache::Reader::none());
        self.add_parsed(shown, source, objects, problems);
    }

    /// Parses manifest text as if read from `file`.
    pub fn add_text(&mut self, file: &Path, text: &str, source: Source) {
        let (objects, problems) = parse::parse(file, text, unknown_fields(source));
        self.add_parsed(file, source, objects, problems);
    }

    /// Files a file's parsed objects and problems into the catalog.
    fn add_parsed(
        &mut self,
        file: &Path,
        source: Source,
        objects: Vec<Object>,
        problems: Vec<Problem>,
    ) {
        self.problems.extend(problems);
        for o in objects {
            let (pod, job) = match o {
                Object::Pod(pod) => (pod, None),
                Object::JobPod(pod, terms) => (pod, Some(terms)),
                other => {
                    self.add_object(file, other);
                    continue;
                }
            };
            let mut pod = pod;
            let ns = pod
                .metadata
                .namespace
                .get_or_insert_with(|| "default".into())
                .clone();
            let name = pod.metadata.name.clone().unwrap_or_default();
            if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
                pod.metadata.uid = Some(static_uid(&ns, &name, file));
            }
            self.pods.push(PodEntry {
                pod: *pod,
                file: file.to_path_buf(),
                source,
                job,
                claims: Claims::new(),
            });
        }
    }

    /// Files a ConfigMap, a Secret, a claim or a volume.
    fn add_object(&mut self, file: &Path, o: Object) {
        match o {
            Object::Pod(_) | Object::JobPod(..) => {}
            Object::ConfigMap(cm) => {
                let key = object_key(&cm.metadata);
                self.config_maps.insert(key, (*cm, file.to_path_buf()));
            }
            Object::Secret(s) => {
                let key = object_key(&s.metadata);
                self.secrets.insert(key, (*s, file.to_path_buf()));
            }
            Object::Claim(c) => {
                let key = object_key(&c.metadata);
                self.claims.insert(key, (*c, file.to_path_buf()));
            }
            Object::Volume(v) => {
                let key = v.metadata.name.clone().unwrap_or_default();
                self.volumes.insert(key, (*v, file.to_path_buf()));
            }
        }
    }

    /// Two pods with one namespace/name: both are reported, neither silently wins.
    fn refuse_duplicates(&mut self) {
        let mut seen: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, p) in self.pods.iter().enumerate() {
            seen.entry(p.key()).or_default().push(i);
        }
        let mut drop = Vec::new();
        for (key, idx) in seen.into_iter().filter(|(_, v)| v.len() > 1) {
            let files: Vec<String> = idx
                .iter()
                .map(|&i| self.pods[i].file.display().to_string())
                .collect();
            for &i in &idx {
                self.problems.push(
                    Problem::error(
                        &self.pods[i].file,
                        format!("pod {key} is defined more than once ({})", files.join(", ")),
                    )
                    .pod(key.clone())
                    .at("metadata.name"),
                );
            }
            drop.extend(idx);
        }
        drop.sort_unstable();
        for i in drop.into_iter().rev() {
            self.pods.remove(i);
        }
    }
}

fn object_key(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Admin-written files are held to the schema; pods from an API server may be newer than it.
fn unknown_fields(source: Source) -> UnknownFields {
    if source == Source::Spool {
        UnknownFields::Warn
    } else {
        UnknownFields::Error
    }
}

/// Reads and parses `file`, naming it `shown`; an unchanged YAML file is read from `cache`. No
/// side effect on any catalog: files can be read in parallel.
fn read_and_parse(
    file: &Path,
    shown: &Path,
    source: Source,
    cache: &cache::Reader,
) -> (Vec<Object>, Vec<Problem>) {
    match read_limited(file) {
        Ok(text) => parse::parse_cached(shown, &text, unknown_fields(source), cache),
        Err(msg) => (Vec::new(), vec![Problem::error(shown, msg)]),
    }
}

/// Reads at most [`discover::MAX_FILE_BYTES`]; a larger file is refused, not truncated.
pub(crate) fn read_limited(file: &Path) -> Result<String, String> {
    let f = std::fs::File::open(file).map_err(|e| format!("cannot read: {e}"))?;
    let mut buf = Vec::new();
    f.take(discover::MAX_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read: {e}"))?;
    if buf.len() as u64 > discover::MAX_FILE_BYTES {
        return Err(format!(
            "file is larger than {} bytes",
            discover::MAX_FILE_BYTES
        ));
    }
    String::from_utf8(buf).map_err(|e| {
        format!(
            "file is not valid UTF-8 (byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// A stable UID for a static pod, derived from namespace, name and source file, as the kubelet
/// derives one from the static pod's source: the same file gives the same UID across reboots.
pub fn static_uid(namespace: &str, name: &str, file: &Path) -> String {
    let mut h = Sha256::new();
    h.update(namespace.as_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    h.update([0]);
    h.update(file.as_os_str().as_encoded_bytes());
    crate::common::text::uid_from_digest(&h.finalize())
}

impl Catalog {
    /// Every claim of the manifests bound as the PV controller binds it, to the
    /// PersistentVolumes of the manifests that this node can mount (their node affinity
    /// matches its labels), or provisioned by one of `classes`.
    pub fn bind_claims(
        &self,
        classes: &crate::workload::claims::StorageClasses,
        node_name: &str,
        labels: &BTreeMap<String, String>,
    ) -> crate::workload::claims::Bindings {
        if self.claims.is_empty() {
            return Default::default();
        }
        let claims = self
            .claims
            .iter()
            .map(|(k, (c, _))| (k.clone(), c))
            .collect();
        let volumes = self
            .volumes
            .iter()
            .filter(|(_, (v, _))| volume_selects_node(v, node_name, labels))
            .map(|(k, (v, _))| (k.clone(), v))
            .collect();
        let mut bindings = crate::workload::claims::bind(&claims, &volumes, classes);
        // A ReadWriteOncePod claim is the first pod's (in file order) that uses it.
        for e in &self.pods {
            let volumes = e.pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
            for c in volumes.filter_map(|v| v.persistent_volume_claim.as_ref()) {
                let key = (e.namespace().to_string(), c.claim_name.clone());
                if let Some(Ok(b)) = bindings.get_mut(&key)
                    && b.access_modes.iter().any(|m| m == "ReadWriteOncePod")
                    && b.only_pod.is_none()
                {
                    b.only_pod = Some(e.key());
                }
            }
        }
        bindings
    }
}

/// Whether a PersistentVolume's required node affinity matches this node (none: any node).
fn volume_selects_node(
    v: &PersistentVolume,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    v.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .is_none_or(|r| admission::selector_matches(r, node_name, labels))
}

impl PodEntry {
    /// The claims the pod's `persistentVolumeClaim` volumes name, from `bindings` (a claim of
    /// the pod's namespace only); None when it has no such volume.
    pub fn bound_claims(&self, bindings: &crate::workload::claims::Bindings) -> Option<Claims> {
        let volumes = self.pod.spec.as_ref()?.volumes.as_deref()?;
        let mut claims = Claims::new();
        for v in volumes {
            let Some(c) = &v.persistent_volume_claim else {
                continue;
            };
            if !self.source.is_static() {
                claims.insert(
                    c.claim_name.clone(),
                    Err(
                        "is the cluster's: podunit mounts only the claims of its manifest \
                         directories (/etc/pods.d, /run/pods.d) yet"
                            .into(),
                    ),
                );
                continue;
            }
            let key = (self.namespace().to_string(), c.claim_name.clone());
            let Some(b) = bindings.get(&key) else {
                continue;
            };
            let b = match b {
                Ok(b) if b.only_pod.as_ref().is_some_and(|p| *p != self.key()) => Err(format!(
                    "in use by pod {}, and its access mode is ReadWriteOncePod (node has pod \
                     using PersistentVolumeClaim with the same name and ReadWriteOncePod access \
                     mode)",
                    b.only_pod.as_deref().unwrap_or_default()
                )),
                b => b.clone(),
            };
            claims.insert(c.claim_name.clone(), b);
        }
        let any = volumes.iter().any(|v| v.persistent_volume_claim.is_some());
        any.then_some(claims)
    }
}
