//! Reads what the generator produced (its NORMAL_DIR, `/run/systemd/generator` on a host) back
//! into pods: which units each pod has, what kind each container is, and a content hash of the
//! pod's rendered files so that a change, and only a change, restarts the pod.
//!
//! Grouping and parsing are pure ([`group`]); [`scan`] is the thin file-reading edge.

use crate::translate::naming::{self, Parsed};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The generator's output directory for system units.
pub const GENERATOR_DIR: &str = crate::translate::plan::GENERATOR_DIR;

/// `<namespace>/<name>`: how a pod is keyed everywhere in podunit-sync.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl PodKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        PodKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Parses `ns/name`.
    pub fn parse(s: &str) -> Option<Self> {
        let (ns, name) = s.split_once('/')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then(|| PodKey::new(ns, name))
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The role of a container in its pod, which status needs (`Init:1/2` vs `Running`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerKind {
    /// Runs to completion before the app containers.
    Init,
    /// An init container with `restartPolicy: Always`: keeps running beside the app containers.
    Sidecar,
    App,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedContainer {
    pub name: String,
    pub unit: String,
    pub kind: ContainerKind,
    /// Position among the pod's containers of the same kind group (init containers run in order).
    pub order: usize,
    /// The unit's `Restart=` (`always`, `on-failure`, `no`): decides Succeeded/Failed vs restarting.
    pub restart: String,
    /// `TimeoutStopSec=` in seconds (the grace period), when given as plain seconds.
    pub stop_timeout_s: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedPod {
    pub key: PodKey,
    pub uid: Option<String>,
    /// `podunit-<ns>_<pod>.service`; None when only container units were found (a broken tree).
    pub pod_unit: Option<String>,
    pub slice: Option<String>,
    /// Init and sidecar containers first in run order, then app containers in manifest order.
    pub containers: Vec<GeneratedContainer>,
    /// `SourcePath=` of the pod unit: the manifest it came from.
    pub source_path: Option<String>,
    /// Hex SHA-256 over the pod's unit files, drop-ins and dependency links.
    pub hash: String,
    /// A Job's pod (`X-PodunitJob=`): the Job controller starts it, not the reconcile.
    pub job: Option<crate::workload::job::JobTerms>,
    /// A pod of an OrderedReady StatefulSet (`X-PodunitOrderedReady=`): started by its
    /// controller in order, not by the reconcile.
    pub ordered: Option<crate::workload::stateful_set::Ordinal>,
    /// The workload of a local pod (`X-PodunitWorkload=`): (kind, name), in its namespace.
    pub workload: Option<(String, String)>,
}

impl GeneratedPod {
    /// Every unit name of the pod.
    pub fn units(&self) -> Vec<String> {
        let mut v: Vec<String> = self.pod_unit.iter().cloned().collect();
        v.extend(self.containers.iter().map(|c| c.unit.clone()));
        v.extend(self.slice.iter().cloned());
        v
    }
}

/// One file of the generator's tree, as read from disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenFile {
    /// Path relative to the generator dir: `x.service`, `x.service.wants/y.service`, `x.service.d/a.conf`.
    pub rel: String,
    /// File contents, or the link target for symlinks.
    pub content: Vec<u8>,
}

#[derive(Debug)]
pub enum Error {
    Read(PathBuf, std::io::Error),
    /// A file listed a moment before is gone: systemd empties the generator dir at the start of
    /// every daemon-reload, so a reload is under way, and its end brings a complete tree.
    Rewritten(PathBuf),
}

impl Error {
    /// Whether reading again after the reload under way ends is the whole answer: no error to
    /// report, since every reader rescans when a reload ends.
    pub fn is_reload_under_way(&self) -> bool {
        matches!(self, Error::Rewritten(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            Error::Rewritten(p) => write!(
                f,
                "{} went away while read: a daemon-reload is under way",
                p.display()
            ),
        }
    }
}

impl std::error::Error for Error {}

/// The error of reading `path`, found by listing its directory.
fn listed_read_error(path: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::Rewritten(path.to_path_buf())
    } else {
        Error::Read(path.to_path_buf(), e)
    }
}

/// Reads the podunit part of a generator output dir. A missing dir means no pods.
pub fn scan(dir: &Path) -> Result<Vec<GeneratedPod>, Error> {
    let mut files = Vec::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::Read(dir.to_path_buf(), e)),
    };
    for entry in rd {
        let entry = entry.map_err(|e| Error::Read(dir.to_path_buf(), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // `podunit/` holds the pods' start plans (`podunit/<pod unit stem>.json`).
        if !name.starts_with("podunit-") && name != crate::translate::plan::PLAN_DIR {
            continue;
        }
        let path = entry.path();
        read_entry(&path, &name, &mut files)?;
        if path.is_dir() {
            let sub = std::fs::read_dir(&path).map_err(|e| listed_read_error(&path, e))?;
            for e in sub {
                let e = e.map_err(|e| Error::Read(path.clone(), e))?;
                let rel = format!("{name}/{}", e.file_name().to_string_lossy());
                read_entry(&e.path(), &rel, &mut files)?;
            }
        }
    }
    Ok(group(files))
}

/// The CronJobs' timers in the generator's tree (`podunit-<ns>_<cronjob>.timer`).
pub fn timers(dir: &Path) -> Result<std::collections::BTreeSet<String>, Error> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(Error::Read(dir.to_path_buf(), e)),
    };
    let mut out = std::collections::BTreeSet::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::Read(dir.to_path_buf(), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("podunit-") && name.ends_with(".timer") {
            out.insert(name);
        }
    }
    Ok(out)
}

fn read_entry(path: &Path, rel: &str, out: &mut Vec<GenFile>) -> Result<(), Error> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| listed_read_error(path, e))?;
    let content = if meta.file_type().is_symlink() {
        let t = std::fs::read_link(path).map_err(|e| listed_read_error(path, e))?;
        t.to_string_lossy().into_owned().into_bytes()
    } else if meta.is_file() {
        std::fs::read(path).map_err(|e| listed_read_error(path, e))?
    } else {
        return Ok(());
    };
    out.push(GenFile {
        rel: rel.to_string(),
        content,
    });
    Ok(())
}

/// A unit file as key/value pairs per section; enough for the few keys podunit reads back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UnitFile {
    entries: Vec<(String, String, String)>,
}

impl UnitFile {
    pub fn parse(text: &str) -> Self {
        let mut entries = Vec::new();
        let mut section = String::new();
        let mut pending = String::new();
        for raw in text.lines() {
            let line = if pending.is_empty() {
                raw.trim().to_string()
            } else {
                format!("{pending} {}", raw.trim())
            };
            pending.clear();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            // A trailing backslash continues the value on the next line (systemd.syntax(7)).
            if let Some(head) = line.strip_suffix('\\') {
                pending = head.to_string();
                continue;
            }
            if line.starts_with('[') && line.ends_with(']') {
                section = line[1..line.len() - 1].to_string();
                continue;
            }
            if let Some((k, v)) = line.split_once('=') {
                entries.push((section.clone(), k.trim().to_string(), v.trim().to_string()));
            }
        }
        UnitFile { entries }
    }

    /// The last value of `key` in `section` (later assignments win, as in systemd).
    pub fn get(&self, section: &str, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .find(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.as_str())
    }

    /// All space-separated words of every assignment of `key`.
    pub fn words(&self, section: &str, key: &str) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(s, k, _)| s == section && k == key)
            .flat_map(|(_, _, v)| v.split_whitespace().map(str::to_string))
            .collect()
    }
}

/// The unit a path of the tree belongs to: `a.service`, `a.service.wants/b` and `a.service.d/x.conf`
/// all belong to `a.service`.
fn owner_unit(rel: &str) -> String {
    if let Some(stem) = rel
        .strip_prefix(crate::translate::plan::PLAN_DIR)
        .and_then(|r| r.strip_prefix('/'))
        .and_then(|r| r.strip_suffix(".json"))
    {
        return format!("{stem}.service");
    }
    let first = rel.split('/').next().unwrap_or(rel);
    for suffix in [".wants", ".requires", ".upholds", ".d"] {
        if let Some(u) = first.strip_suffix(suffix) {
            return u.to_string();
        }
    }
    first.to_string()
}

struct PodAcc {
    key: PodKey,
    files: Vec<GenFile>,
}

/// Groups the generator's files into pods. Pure: this is what the tests drive.
pub fn group(mut files: Vec<GenFile>) -> Vec<GeneratedPod> {
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    // Identity of each top-level unit file: its X-PodunitPod= if present (shortened names), else its name.
    let mut unit_key: BTreeMap<String, PodKey> = BTreeMap::new();
    for f in &files {
        if f.rel.contains('/') {
            continue;
        }
        let Some(parsed) = naming::parse(&f.rel) else {
            continue;
        };
        let uf = UnitFile::parse(&String::from_utf8_lossy(&f.content));
        let declared = uf.get("Unit", "X-PodunitPod").and_then(PodKey::parse);
        let key = match (declared, parsed) {
            (Some(k), _) => k,
            (None, Parsed::Exact(id)) => PodKey::new(&id.namespace, &id.pod),
            (None, Parsed::Shortened { .. }) => continue,
        };
        unit_key.insert(f.rel.clone(), key);
    }
    let mut pods: BTreeMap<PodKey, PodAcc> = BTreeMap::new();
    for f in files {
        let owner = owner_unit(&f.rel);
        let Some(key) = unit_key.get(&owner) else {
            continue;
        };
        pods.entry(key.clone())
            .or_insert_with(|| PodAcc {
                key: key.clone(),
                files: Vec::new(),
            })
            .files
            .push(f);
    }
    pods.into_values().map(build_pod).collect()
}

fn build_pod(acc: PodAcc) -> GeneratedPod {
    let mut hasher = Sha256::new();
    for f in &acc.files {
        hasher.update(f.rel.as_bytes());
        hasher.update([0]);
        hasher.update(&f.content);
        hasher.update([0]);
    }
    let hash = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut pod_unit = None;
    let mut slice = None;
    let mut uid = None;
    let mut source_path = None;
    let mut job = None;
    let mut ordered = None;
    let mut workload = None;
    struct C {
        name: String,
        unit: String,
        file: UnitFile,
    }
    let mut raw: Vec<C> = Vec::new();
    for f in acc.files.iter().filter(|f| !f.rel.contains('/')) {
        let uf = UnitFile::parse(&String::from_utf8_lossy(&f.content));
        if uid.is_none() {
            uid = uf.get("Unit", "X-PodunitUid").map(str::to_string);
        }
        let container = match naming::parse(&f.rel) {
            Some(Parsed::Exact(id)) => id.container,
            Some(Parsed::Shortened { container, .. }) => container,
            None => None,
        };
        match container {
            Some(name) => raw.push(C {
                name,
                unit: f.rel.clone(),
                file: uf,
            }),
            None if f.rel.ends_with(".slice") => slice = Some(f.rel.clone()),
            None => {
                source_path = uf.get("Unit", "SourcePath").map(str::to_string);
                job = uf
                    .get("Unit", "X-PodunitJob")
                    .and_then(crate::workload::job::JobTerms::from_line);
                ordered = uf
                    .get("Unit", "X-PodunitOrderedReady")
                    .and_then(crate::workload::stateful_set::Ordinal::from_line);
                workload = uf
                    .get("Unit", "X-PodunitWorkload")
                    .and_then(|w| w.split_once('/'))
                    .map(|(k, n)| (k.to_string(), n.to_string()));
                pod_unit = Some(f.rel.clone());
            }
        }
    }
    // Init containers and sidecars are the ones other containers are ordered after; of those,
    // init containers run to completion (oneshot), sidecars keep running.
    let ordered_after: std::collections::BTreeSet<String> = raw
        .iter()
        .flat_map(|c| c.file.words("Unit", "After"))
        .collect();
    let kind_of = |c: &C| match c.file.get("Unit", "X-PodunitContainerKind") {
        Some("init") => ContainerKind::Init,
        Some("sidecar") => ContainerKind::Sidecar,
        Some(_) => ContainerKind::App,
        None if c.file.get("Service", "Type") == Some("oneshot") => ContainerKind::Init,
        None if ordered_after.contains(&c.unit) => ContainerKind::Sidecar,
        None => ContainerKind::App,
    };
    let kinds: Vec<ContainerKind> = raw.iter().map(kind_of).collect();
    // Run order among init/sidecar containers: how many of them each one is ordered after.
    let pre: Vec<&str> = raw
        .iter()
        .zip(&kinds)
        .filter(|(_, k)| **k != ContainerKind::App)
        .map(|(c, _)| c.unit.as_str())
        .collect();
    let depth = |start: usize| -> usize {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = vec![start];
        while let Some(i) = stack.pop() {
            for w in raw[i].file.words("Unit", "After") {
                if pre.contains(&w.as_str())
                    && let Some(j) = raw.iter().position(|c| c.unit == w)
                    && seen.insert(j)
                {
                    stack.push(j);
                }
            }
        }
        seen.len()
    };
    let explicit = |c: &C| {
        c.file
            .get("Unit", "X-PodunitContainerIndex")
            .and_then(|v| v.parse::<usize>().ok())
    };
    let mut containers: Vec<(usize, GeneratedContainer)> = raw
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let kind = kinds[i];
            let order = explicit(c).unwrap_or_else(|| {
                if kind == ContainerKind::App {
                    0
                } else {
                    depth(i)
                }
            });
            let group = usize::from(kind == ContainerKind::App);
            (
                group,
                GeneratedContainer {
                    name: c.name.clone(),
                    unit: c.unit.clone(),
                    kind,
                    order,
                    restart: c.file.get("Service", "Restart").unwrap_or("no").to_string(),
                    stop_timeout_s: c
                        .file
                        .get("Service", "TimeoutStopSec")
                        .and_then(|v| v.strip_suffix('s').unwrap_or(v).parse().ok()),
                },
            )
        })
        .collect();
    containers.sort_by(|(ga, a), (gb, b)| (ga, a.order, &a.name).cmp(&(gb, b.order, &b.name)));
    GeneratedPod {
        key: acc.key,
        uid,
        pod_unit,
        slice,
        containers: containers.into_iter().map(|(_, c)| c).collect(),
        source_path,
        hash,
        job,
        ordered,
        workload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(rel: &str, content: &str) -> GenFile {
        GenFile {
            rel: rel.into(),
            content: content.as_bytes().to_vec(),
        }
    }

    fn web() -> Vec<GenFile> {
        vec![
            f(
                "podunit-default_web.service",
                "# generated\n[Unit]\nSourcePath=/etc/pods.d/web.yaml\nX-PodunitPod=default/web\nX-PodunitUid=u1\n[Service]\nType=oneshot\nRemainAfterExit=yes\n",
            ),
            f(
                "podunit-default_web.slice",
                "[Unit]\nX-PodunitPod=default/web\n",
            ),
            f(
                "podunit-default_web_init-b.service",
                "[Unit]\nAfter=podunit-default_web.service \\\n podunit-default_web_init-a.service\n[Service]\nType=oneshot\n",
            ),
            f(
                "podunit-default_web_init-a.service",
                "[Unit]\nAfter=podunit-default_web.service\n[Service]\nType=oneshot\n",
            ),
            f(
                "podunit-default_web_nginx.service",
                "[Unit]\nAfter=podunit-default_web_init-b.service\n[Service]\nType=exec\nTimeoutStopSec=30s\n",
            ),
            f(
                "podunit-default_web.service.wants/podunit-default_web_nginx.service",
                "../podunit-default_web_nginx.service",
            ),
            f("podunit.target.wants/podunit-default_web.service", "x"),
            f("other.service", "[Unit]\n"),
        ]
    }

    #[test]
    fn groups_a_pod_with_kinds_and_order() {
        let pods = group(web());
        assert_eq!(pods.len(), 1);
        let p = &pods[0];
        assert_eq!(p.key, PodKey::new("default", "web"));
        assert_eq!(p.uid.as_deref(), Some("u1"));
        assert_eq!(p.pod_unit.as_deref(), Some("podunit-default_web.service"));
        assert_eq!(p.slice.as_deref(), Some("podunit-default_web.slice"));
        assert_eq!(p.source_path.as_deref(), Some("/etc/pods.d/web.yaml"));
        assert_eq!(p.containers[2].stop_timeout_s, Some(30));
        assert_eq!(p.containers[0].stop_timeout_s, None);
        let names: Vec<(&str, ContainerKind)> = p
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.kind))
            .collect();
        assert_eq!(
            names,
            vec![
                ("init-a", ContainerKind::Init),
                ("init-b", ContainerKind::Init),
                ("nginx", ContainerKind::App)
            ]
        );
    }

    #[test]
    fn hash_changes_with_content_and_links_only() {
        let h = group(web())[0].hash.clone();
        let mut files = web();
        files.reverse();
        assert_eq!(group(files)[0].hash, h, "order of reading must not matter");
        let mut files = web();
        files[4].content = b"[Service]\nType=exec\nExecStart=/bin/true\n".to_vec();
        assert_ne!(group(files)[0].hash, h);
        let mut files = web();
        files.pop();
        files.pop();
        files.pop(); // podunit.target.wants link + the pod's own wants link
        assert_ne!(group(files)[0].hash, h);
    }

    #[test]
    fn explicit_kind_and_shortened_names() {
        let pod = "a".repeat(250);
        let long = naming::pod_service("default", &pod);
        assert!(matches!(
            naming::parse(&long),
            Some(Parsed::Shortened { .. })
        ));
        let long = long.trim_end_matches(".service");
        let files = vec![
            f(
                &format!("{long}.service"),
                &format!("[Unit]\nX-PodunitPod=default/{pod}\n"),
            ),
            f(
                &format!("{long}_side.service"),
                &format!(
                    "[Unit]\nX-PodunitPod=default/{pod}\nX-PodunitContainerKind=sidecar\n[Service]\nType=exec\n"
                ),
            ),
            f(&format!("{long}_orphan.service"), "[Unit]\n"),
        ];
        let pods = group(files);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].key, PodKey::new("default", &pod));
        assert_eq!(pods[0].containers.len(), 1);
        assert_eq!(pods[0].containers[0].kind, ContainerKind::Sidecar);
    }

    #[test]
    fn two_pods_are_kept_apart() {
        let mut files = web();
        files.push(f("podunit-kube-system_dns.service", "[Unit]\n"));
        files.push(f("podunit-kube-system_dns_coredns.service", "[Unit]\n"));
        let pods = group(files);
        assert_eq!(pods.len(), 2);
        assert_eq!(pods[1].key, PodKey::new("kube-system", "dns"));
        assert_eq!(pods[1].containers[0].name, "coredns");
        assert_eq!(pods[0].containers.len(), 3);
    }

    #[test]
    fn sidecars_are_inferred_and_plans_hashed() {
        let mut files = web();
        files.push(f(
            "podunit-default_web_proxy.service",
            "[Unit]\nAfter=podunit-default_web.service\n[Service]\nType=exec\nRestart=always\n",
        ));
        files[4].content =
            b"[Unit]\nAfter=podunit-default_web_proxy.service\n[Service]\nType=exec\n".to_vec();
        files.push(f("podunit/podunit-default_web.json", "{}"));
        let p = &group(files.clone())[0];
        let kinds: Vec<(&str, ContainerKind, &str)> = p
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.kind, c.restart.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("init-a", ContainerKind::Init, "no"),
                ("proxy", ContainerKind::Sidecar, "always"),
                ("init-b", ContainerKind::Init, "no"),
                ("nginx", ContainerKind::App, "no"),
            ]
        );
        let last = files.len() - 1;
        files[last].content = b"{\"env\": 1}".to_vec();
        assert_ne!(
            group(files)[0].hash,
            p.hash,
            "a changed plan restarts the pod"
        );
    }

    #[test]
    fn scan_missing_dir_is_empty() {
        let pods = scan(Path::new("/nonexistent/podunit-test-dir")).unwrap();
        assert!(pods.is_empty());
    }
}
