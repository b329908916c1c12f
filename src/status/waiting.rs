//! What a pod waits for, left where `podunit status` reads it: `/run/podunit/waiting/<uid>.json`.
//!
//! Written by whoever finds the pod cannot start yet, cleared by whoever sees it can:
//! `pod-prepare` (a ConfigMap, Secret or key that is not there: `CreateContainerConfigError`),
//! podunit-sync's node agent (pods it does not spool: a missing object, an image, a refusal),
//! and the image work (`ErrImagePull`, `ImagePullBackOff`). The kubelet keeps the same facts in
//! its pod workers and shows them as the containers' waiting reason and message.
//!
//! Records are small JSON files on tmpfs, one per pod, written atomically; a reader takes each for
//! what it is worth: a record of a rendered pod counts only while its pod unit is not up, and only
//! when it is newer than that unit's last start ([`applies`]).

use crate::common::paths::Paths;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// The directory of the records (under the runtime directory podunit-sync may write).
pub const DIR: &str = "/run/podunit/waiting";

/// Who wrote a record: decides who may clear it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Writer {
    /// `podunit pod-prepare`, when the pod unit starts.
    Prepare,
    /// podunit-sync's node agent: the pod is not in the spool, so it has no units.
    Agent,
    /// podunit-sync's node agent: the API server refused the pod's status (a 4xx), so the
    /// cluster does not see what the node does. Not a wait: it is kept beside the pod's other
    /// record (`<uid>.status.json`) and shown as the pod's message, until a status is accepted.
    Status,
}

/// One pod's wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub writer: Writer,
    /// The kubelet's word: `CreateContainerConfigError`, `ErrImagePull`, `InvalidPod`, ...
    pub reason: String,
    pub message: String,
    /// The containers waiting for this reason; empty: all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<String>,
    /// Every app container of the pod, for READY (agent records: the pod has no units to count).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub all_containers: Vec<String>,
    /// The pod is refused for good (phase Failed), not waiting.
    #[serde(default)]
    pub refused: bool,
    /// When it was written, µs since the epoch.
    pub at_us: u64,
    /// The Event the kubelet posts about this wait, if it posts one (`FailedCreatePodSandBox`
    /// with the plugin's error): podunit-sync posts it once per record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<EventNote>,
}

/// An Event's reason and message (the type is always Warning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventNote {
    pub reason: String,
    pub message: String,
}

/// A uid as a file name: nothing but what a UID holds.
fn file_name(uid: &str) -> Option<String> {
    let ok = !uid.is_empty()
        && uid.len() <= 128
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then(|| format!("{uid}.json"))
}

/// Where `writer`'s record of `uid` lies: a refused status has a file of its own, so that it
/// never hides (nor is hidden by) why the pod waits.
fn path_of(paths: &Paths, uid: &str, writer: Option<Writer>) -> io::Result<PathBuf> {
    file_name(uid)
        .map(|n| match writer {
            Some(Writer::Status) => n.replace(".json", ".status.json"),
            _ => n,
        })
        .map(|n| paths.host(DIR).join(n))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("odd uid {uid:?}")))
}

/// Leaves `rec` for its pod, atomically: a reader never sees half a record. The directory is
/// readable by root only, as the rest of /run/podunit.
pub fn write(paths: &Paths, rec: &Record) -> io::Result<()> {
    use crate::common::atomicfile;
    use std::os::unix::fs::DirBuilderExt;
    let path = path_of(paths, &rec.uid, Some(rec.writer))?;
    let dir = paths.host(DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let text = serde_json::to_vec(rec).map_err(io::Error::other)?;
    atomicfile::write(&path, &text, atomicfile::Options::new(0o644)).map_err(Into::into)
}

/// Removes the pod's record, if `writer` wrote it (or any record, with `None`).
pub fn clear(paths: &Paths, uid: &str, writer: Option<Writer>) -> io::Result<()> {
    let path = path_of(paths, uid, writer)?;
    if let Some(w) = writer {
        match read_one(&path) {
            Ok(Some(r)) if r.writer != w => return Ok(()),
            _ => {}
        }
    }
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn read_one(path: &Path) -> io::Result<Option<Record>> {
    match std::fs::read(path) {
        Ok(b) => Ok(serde_json::from_slice(&b).ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The record `writer` left of pod `uid`, if any (and readable).
pub fn read(paths: &Paths, uid: &str, writer: Writer) -> Option<Record> {
    let rec = read_one(&path_of(paths, uid, Some(writer)).ok()?).ok()??;
    (rec.writer == writer).then_some(rec)
}

/// Every record. A missing directory holds none; an unreadable one is an error (not root?).
pub fn read_all(paths: &Paths) -> io::Result<Vec<Record>> {
    let dir = paths.host(DIR);
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        if let Some(r) = read_one(&e.path())? {
            out.push(r);
        }
    }
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(out)
}

/// Whether a record still speaks for a rendered pod whose pod unit is `active_state` and last
/// started at `started_us`: only while the unit is not up, and only if written since that start
/// (an older record is about a start that is over).
pub fn applies(rec: &Record, active_state: &str, started_us: u64) -> bool {
    let up = matches!(active_state, "active" | "reloading");
    !up && rec.at_us >= started_us
}

pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(uid: &str, writer: Writer) -> Record {
        Record {
            uid: uid.into(),
            namespace: "default".into(),
            name: "app".into(),
            writer,
            reason: "CreateContainerConfigError".into(),
            message: "ConfigMap default/cfg not found".into(),
            containers: vec![],
            all_containers: vec![],
            refused: false,
            at_us: 10,
            event: None,
        }
    }

    #[test]
    fn written_read_and_cleared_by_their_writer() {
        let root = std::env::temp_dir().join(format!("podunit-waiting-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let paths = Paths::with_root(&root);
        assert!(read_all(&paths).unwrap().is_empty());
        write(&paths, &rec("u-1", Writer::Prepare)).unwrap();
        write(&paths, &rec("u-2", Writer::Agent)).unwrap();
        assert_eq!(read_all(&paths).unwrap().len(), 2);
        // The agent does not clear what pod-prepare found, nor the other way round.
        clear(&paths, "u-1", Some(Writer::Agent)).unwrap();
        clear(&paths, "u-2", Some(Writer::Prepare)).unwrap();
        assert_eq!(read_all(&paths).unwrap().len(), 2);
        // A refused status is kept beside the wait, and cleared on its own.
        let mut refused = rec("u-2", Writer::Status);
        refused.reason = "StatusRefused".into();
        write(&paths, &refused).unwrap();
        assert_eq!(read_all(&paths).unwrap().len(), 3);
        clear(&paths, "u-2", Some(Writer::Status)).unwrap();
        assert_eq!(read_all(&paths).unwrap().len(), 2);
        clear(&paths, "u-1", Some(Writer::Prepare)).unwrap();
        clear(&paths, "u-2", None).unwrap();
        clear(&paths, "u-3", None).unwrap();
        assert!(read_all(&paths).unwrap().is_empty());
        // A uid is never a path.
        assert!(write(&paths, &rec("../x", Writer::Prepare)).is_err());
        assert!(clear(&paths, "a/b", None).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_record_counts_while_the_pod_unit_is_down_and_since_its_start() {
        let r = rec("u", Writer::Prepare);
        assert!(applies(&r, "failed", 5));
        assert!(applies(&r, "inactive", 10));
        assert!(
            !applies(&r, "failed", 11),
            "older than the unit's last start"
        );
        assert!(!applies(&r, "active", 0), "the pod is up: the wait is over");
    }
}
