//! The generator's report of its problems, left in its own output directory
//! (`podunit/problems.json`, beside the pods' plans) so that `podunit status` and podunit-sync can
//! show the pods it refused without running it again. Building the report is pure ([`build`]);
//! [`write`] and [`read`] are the edges.
//!
//! The file exists only when there was a problem: systemd empties the directory before every
//! generator run, so no file means the last run found nothing wrong.

use crate::common::diag::Problem;
use crate::manifest::Catalog;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// Where the report lies, relative to the generator's output directory.
pub const FILE: &str = "podunit/problems.json";

/// What a refused pod shows when no problem names a more precise reason.
pub const INVALID_MANIFEST: &str = "InvalidManifest";

/// One run's problems, and the pods and files they kept from running.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Pods that got no units, in file order. One entry per (file, pod): a pod defined in two
    /// files is refused twice.
    pub refused: Vec<RefusedPod>,
    /// Files refused before any pod in them could be named (unreadable, not YAML, untrusted).
    pub files: Vec<RefusedFile>,
    /// Pods that got no units because an image they name is not on the node yet: podunit-sync
    /// pulls what they wait for and reloads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<WaitingPod>,
    /// Why the node configuration was not used as written, if it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// Every problem, errors and warnings, as `podunit check` prints them.
    pub problems: Vec<Problem>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedPod {
    pub namespace: String,
    pub name: String,
    pub file: PathBuf,
    /// `InvalidManifest`, or the first reason a problem names (`PolicyViolation`, ...).
    pub reason: String,
    /// The first error, in full (`FILE: ns/pod: field.path: what is wrong`).
    pub message: String,
    /// How many errors in all; `podunit check FILE` lists them.
    pub errors: usize,
    /// How many app containers the manifest declares, when it parsed that far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containers: Option<usize>,
}

/// A pod that waits for images (every other check passed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub file: PathBuf,
    /// Every container of the pod, init containers first, for `podunit status`.
    pub containers: Vec<String>,
    pub images: Vec<WaitingImage>,
    /// The names of the pod's `imagePullSecrets` (Secrets in the manifest directories), which
    /// its pulls use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<String>,
}

/// One container's image that is not in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingImage {
    pub container: String,
    /// As the manifest gives it.
    pub image: String,
    /// `Always`, `IfNotPresent` or `Never`, defaulted as the API server does.
    pub pull_policy: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedFile {
    pub file: PathBuf,
    pub message: String,
    pub errors: usize,
}

impl Report {
    pub fn is_empty(&self) -> bool {
        self.problems.is_empty() && self.config.is_none()
    }
}

/// The report of a generation over `catalog` that found `problems` (sorted as the generator
/// sorts them). Pure.
pub fn build(catalog: &Catalog, problems: &[Problem], config: Option<&str>) -> Report {
    let mut r = Report {
        config: config.map(str::to_string),
        problems: problems.to_vec(),
        ..Report::default()
    };
    let refused_keys: Vec<(&Path, &str)> = problems
        .iter()
        .filter(|p| p.is_error())
        .filter_map(|p| Some((p.file.as_path(), p.pod.as_deref()?)))
        .collect();
    for p in problems.iter().filter(|p| {
        p.is_note() && p.reason.as_deref() == Some(crate::translate::image::IMAGE_PENDING)
    }) {
        let Some(key) = p.pod.as_deref() else {
            continue;
        };
        // A pod with errors is refused, whatever it also waits for.
        if refused_keys.contains(&(p.file.as_path(), key)) {
            continue;
        }
        if let Some(w) = waiting_image(catalog, p) {
            match r
                .waiting
                .iter_mut()
                .find(|e| e.file == w.file && e.uid == w.uid)
            {
                Some(e) => e.images.extend(w.images),
                None => r.waiting.push(w),
            }
        }
    }
    for p in problems.iter().filter(|p| p.is_error()) {
        match &p.pod {
            Some(key) => {
                let (namespace, name) = key.split_once('/').unwrap_or(("", key));
                if let Some(e) = r
                    .refused
                    .iter_mut()
                    .find(|e| e.file == p.file && e.namespace == namespace && e.name == name)
                {
                    e.errors += 1;
                    if e.reason == INVALID_MANIFEST
                        && let Some(why) = &p.reason
                    {
                        e.reason = why.clone();
                    }
                    continue;
                }
                let containers = catalog
                    .pods
                    .iter()
                    .find(|e| e.file == p.file && e.namespace() == namespace && e.name() == name)
                    .and_then(|e| e.pod.spec.as_ref())
                    .map(|s| s.containers.len());
                r.refused.push(RefusedPod {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    file: p.file.clone(),
                    reason: p.reason.clone().unwrap_or_else(|| INVALID_MANIFEST.into()),
                    message: p.to_string(),
                    errors: 1,
                    containers,
                });
            }
            None => match r.files.iter_mut().find(|f| f.file == p.file) {
                Some(f) => f.errors += 1,
                None => r.files.push(RefusedFile {
                    file: p.file.clone(),
                    message: p.to_string(),
                    errors: 1,
                }),
            },
        }
    }
    r
}

/// The pod and container a pending-image note is about (its path is `spec.containers[i].image`
/// or `spec.initContainers[i].image`).
fn waiting_image(catalog: &Catalog, p: &Problem) -> Option<WaitingPod> {
    let key = p.pod.as_deref()?;
    let (namespace, name) = key.split_once('/').unwrap_or(("", key));
    let entry = catalog
        .pods
        .iter()
        .find(|e| e.file == p.file && e.namespace() == namespace && e.name() == name)?;
    let spec = entry.pod.spec.as_ref()?;
    let path = p.path.as_deref()?.strip_prefix("spec.")?;
    let (list, rest) = path.split_once('[')?;
    let index: usize = rest.split_once(']')?.0.parse().ok()?;
    let c = match list {
        "containers" => spec.containers.get(index)?,
        "initContainers" => spec.init_containers.as_ref()?.get(index)?,
        _ => return None,
    };
    let image = c.image.clone().unwrap_or_default();
    Some(WaitingPod {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: entry.uid().to_string(),
        file: p.file.clone(),
        containers: spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .map(|c| c.name.clone())
            .collect(),
        images: vec![WaitingImage {
            container: c.name.clone(),
            pull_policy: crate::image::policy::pull_policy(&image, c.image_pull_policy.as_deref()),
            image,
        }],
        pull_secrets: crate::translate::image::pull_secret_names(Some(spec)),
    })
}

/// Leaves the report in `dir` (the generator's output directory), or removes an old one when
/// there is nothing to report (`render --output-dir` into a used directory).
pub fn write(dir: &Path, report: &Report) -> io::Result<()> {
    let path = dir.join(FILE);
    if report.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let mut text = serde_json::to_string_pretty(report).map_err(io::Error::other)?;
    text.push('\n');
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&path, text)
}

/// The report the generator left in `dir`; `None` when it found nothing to report.
pub fn read(dir: &Path) -> Result<Option<Report>, String> {
    let path = dir.join(FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// `s` on one line, control characters written as escapes: a value from a manifest can never
/// start a line of its own in a log or a table.
pub fn one_line(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::paths::Source;

    const BAD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: typo}\nspec:\n  containers:\n  - {name: a, image: host, comand: [x]}\n  - {name: b, image: host, command: [run], foo: 1}\n";

    fn catalog() -> Catalog {
        let mut c = Catalog::default();
        c.add_text(Path::new("/etc/pods.d/bad.yaml"), BAD, Source::Etc);
        c.add_text(Path::new("/etc/pods.d/junk.yaml"), "[: nope", Source::Etc);
        c
    }

    #[test]
    fn names_each_refused_pod_with_its_first_problem_and_count() {
        let c = catalog();
        let mut problems = c.problems.clone();
        problems
            .push(Problem::warning("/etc/pods.d/ok.yaml", "probes are not run").pod("default/ok"));
        let r = build(&c, &problems, None);
        assert_eq!(r.refused.len(), 1, "{r:#?}");
        let p = &r.refused[0];
        assert_eq!((p.namespace.as_str(), p.name.as_str()), ("default", "typo"));
        assert_eq!(p.reason, INVALID_MANIFEST);
        assert_eq!(p.errors, 2);
        assert!(
            p.message
                .starts_with("/etc/pods.d/bad.yaml: default/typo: spec.containers[0].comand"),
            "{}",
            p.message
        );
        assert_eq!(r.files.len(), 1);
        assert_eq!(r.files[0].file, Path::new("/etc/pods.d/junk.yaml"));
        // Warnings are reported, never counted as refusals.
        assert_eq!(r.problems.len(), problems.len());
    }

    #[test]
    fn a_problem_s_reason_wins_over_invalid_manifest() {
        let c = Catalog::default();
        let problems = vec![
            Problem::error(
                "/etc/pods.d/w.yaml",
                "node(s) didn't match Pod's node affinity",
            )
            .pod("default/w")
            .reason("NodeAffinity"),
        ];
        let r = build(&c, &problems, None);
        assert_eq!(r.refused[0].reason, "NodeAffinity");
        assert_eq!(r.refused[0].containers, None);
    }

    #[test]
    fn a_pod_waiting_for_an_image_is_listed_with_its_pull_policy() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: w, uid: u-1}\nspec:\n  initContainers:\n  - {name: i, image: host, command: [x]}\n  containers:\n  - {name: a, image: busybox}\n  - {name: b, image: 'reg:5000/b:v1', imagePullPolicy: Never}\n";
        let mut c = Catalog::default();
        c.add_text(Path::new("/etc/pods.d/w.yaml"), text, Source::Etc);
        let note = |i: usize| {
            Problem::note("/etc/pods.d/w.yaml", "not on this node yet")
                .pod("default/w")
                .at(format!("spec.containers[{i}].image"))
                .reason(crate::translate::image::IMAGE_PENDING)
        };
        let r = build(&c, &[note(0), note(1)], None);
        assert!(r.refused.is_empty(), "{r:#?}");
        assert_eq!(r.waiting.len(), 1, "{r:#?}");
        let w = &r.waiting[0];
        assert_eq!((w.uid.as_str(), w.containers.len()), ("u-1", 3));
        let got: Vec<_> = w
            .images
            .iter()
            .map(|i| {
                (
                    i.container.as_str(),
                    i.image.as_str(),
                    i.pull_policy.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [("a", "busybox", "Always"), ("b", "reg:5000/b:v1", "Never")]
        );
        assert!(!r.is_empty(), "a report with waiting pods is written");
        // Refused for an error, it does not wait.
        let bad = Problem::error("/etc/pods.d/w.yaml", "bad").pod("default/w");
        let r = build(&c, &[note(0), bad], None);
        assert!(r.waiting.is_empty());
        assert_eq!(r.refused.len(), 1);
    }

    #[test]
    fn written_only_when_there_is_something_to_say() {
        let dir = std::env::temp_dir().join(format!("podunit-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = catalog();
        let r = build(&c, &c.problems, Some("config.yaml: bad"));
        write(&dir, &r).unwrap();
        assert_eq!(read(&dir).unwrap().as_ref(), Some(&r));
        write(&dir, &Report::default()).unwrap();
        assert_eq!(read(&dir).unwrap(), None);
        assert!(dir.join("podunit").is_dir());
        std::fs::write(dir.join(FILE), "{").unwrap();
        assert!(read(&dir).unwrap_err().contains("problems.json"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_line_escapes_control_characters() {
        assert_eq!(one_line("a\nb\tc\u{1b}"), "a\\nb\\tc\\u{1b}");
        assert_eq!(one_line("plain"), "plain");
    }
}
