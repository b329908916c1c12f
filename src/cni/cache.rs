//! The ADD result and the configuration it was made with, kept per container ID and interface
//! (a pod's `lo` and `eth0` are two attachments, as libcni keys them), so DEL and CHECK
//! run against what ADD set up (libcni keeps the same, in `/var/lib/cni`). Written atomically,
//! read back bounded, removed after a successful DEL.

use crate::common::atomicfile;
use serde_json::Value;
use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

pub const DEFAULT_DIR: &str = "/var/lib/podunit/cni";
/// A result and a configuration, each bounded to a megabyte when they were made.
const MAX_BYTES: u64 = 3 << 20;
const KIND: &str = "podunit-cni-cache-v1";

/// What an ADD left for DEL and CHECK.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub container_id: String,
    pub ifname: String,
    /// The network configuration list, as `NetworkConfigList::to_json` has it.
    pub config: Value,
    /// The last plugin's result, as it printed it.
    pub result: Value,
    /// The capability arguments the plugins were given (portMappings, bandwidth): DEL needs the
    /// same to undo them.
    pub capability_args: Value,
}

#[derive(Debug)]
pub enum CacheError {
    Io { path: PathBuf, error: io::Error },
    Malformed { path: PathBuf, reason: String },
    InvalidContainerId(String),
    InvalidIfname(String),
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Io { path, error } => {
                write!(f, "CNI cache {}: {error}", path.display())
            }
            CacheError::Malformed { path, reason } => {
                write!(f, "CNI cache {}: {reason}", path.display())
            }
            CacheError::InvalidContainerId(id) => write!(
                f,
                "invalid container ID {id:?}: not alphanumerics, '_', '.' and '-'"
            ),
            CacheError::InvalidIfname(n) => {
                write!(
                    f,
                    "invalid interface name {n:?}: not a Linux interface name"
                )
            }
        }
    }
}

impl std::error::Error for CacheError {}

impl From<atomicfile::Error> for CacheError {
    fn from(e: atomicfile::Error) -> CacheError {
        CacheError::Io {
            path: e.path,
            error: e.error,
        }
    }
}

/// A container ID as the CNI spec allows it (alphanumerics, then also `_`, `.`, `-`): safe as a
/// file name too.
pub fn valid_container_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && id.len() <= 256
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// An interface name as Linux takes it (IFNAMSIZ less the NUL; no `/`, `:` or blank): safe in
/// a file name too.
pub fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name.contains(|c: char| c == '/' || c == ':' || c.is_whitespace() || c == '\0')
}

#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of container `id`'s interface `ifname`.
    pub fn path(&self, id: &str, ifname: &str) -> Result<PathBuf, CacheError> {
        if !valid_container_id(id) {
            return Err(CacheError::InvalidContainerId(id.to_string()));
        }
        if !valid_ifname(ifname) {
            return Err(CacheError::InvalidIfname(ifname.to_string()));
        }
        Ok(self.dir.join(format!("{id}-{ifname}.json")))
    }

    pub fn store(&self, e: &Entry) -> Result<(), CacheError> {
        let path = self.path(&e.container_id, &e.ifname)?;
        let doc = serde_json::json!({
            "kind": KIND,
            "containerId": e.container_id,
            "ifName": e.ifname,
            "config": e.config,
            "result": e.result,
            "capabilityArgs": e.capability_args,
        });
        let bytes = serde_json::to_vec(&doc).map_err(|e| CacheError::Malformed {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        // Root-only: it names the pod's addresses and ports.
        atomicfile::write(&path, &bytes, atomicfile::Options::new(0o600))?;
        Ok(())
    }

    /// The entry of container `id`'s interface `ifname`, none if it has none.
    pub fn load(&self, id: &str, ifname_asked: &str) -> Result<Option<Entry>, CacheError> {
        let path = self.path(id, ifname_asked)?;
        let io_err = |error| CacheError::Io {
            path: path.clone(),
            error,
        };
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(e)),
        };
        let mut bytes = Vec::new();
        file.take(MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io_err)?;
        let bad = |reason: String| CacheError::Malformed {
            path: path.clone(),
            reason,
        };
        if bytes.len() as u64 > MAX_BYTES {
            return Err(bad(format!("more than {MAX_BYTES} bytes")));
        }
        let mut v: Value =
            serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
        if v.get("kind").and_then(Value::as_str) != Some(KIND) {
            return Err(bad(format!("not a {KIND} record")));
        }
        let mut take = |k: &str| v.get_mut(k).map(Value::take).unwrap_or(Value::Null);
        let container_id = take("containerId");
        let ifname = take("ifName");
        let (Value::String(container_id), Value::String(ifname)) = (container_id, ifname) else {
            return Err(bad("no containerId or ifName".into()));
        };
        if container_id != id || ifname != ifname_asked {
            return Err(bad(format!(
                "records container {container_id:?} interface {ifname:?}"
            )));
        }
        Ok(Some(Entry {
            container_id,
            ifname,
            config: take("config"),
            result: take("result"),
            capability_args: take("capabilityArgs"),
        }))
    }

    /// Removes the entry of container `id`'s interface `ifname`; no entry is no error.
    /// The (container ID, interface) of every entry, in name order: file names are
    /// `<id>-<ifname>.json`, and an interface name podunit gives has no `-`. Anything else in
    /// the directory is left out. No directory is no entries.
    pub fn entries(&self) -> Result<Vec<(String, String)>, CacheError> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => {
                return Err(CacheError::Io {
                    path: self.dir.clone(),
                    error,
                });
            }
        };
        let mut out: Vec<(String, String)> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let (id, ifname) = name.strip_suffix(".json")?.rsplit_once('-')?;
                (valid_container_id(id) && valid_ifname(ifname))
                    .then(|| (id.to_string(), ifname.to_string()))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    pub fn remove(&self, id: &str, ifname: &str) -> Result<(), CacheError> {
        let path = self.path(id, ifname)?;
        match std::fs::remove_file(&path) {
            Ok(()) => atomicfile::sync_dir(&self.dir).map_err(CacheError::from),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(CacheError::Io { path, error }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> Cache {
        let d =
            std::env::temp_dir().join(format!("podunit-cni-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Cache::new(d)
    }

    #[test]
    fn an_entry_is_stored_read_back_and_removed() {
        let c = scratch("roundtrip");
        let e = Entry {
            container_id: "abc123".into(),
            ifname: "eth0".into(),
            config: serde_json::json!({"name": "n", "plugins": [{"type": "bridge"}]}),
            result: serde_json::json!({"cniVersion": "1.0.0", "ips": []}),
            capability_args: serde_json::json!({"portMappings": [{"hostPort": 80}]}),
        };
        assert_eq!(c.load("abc123", "eth0").unwrap(), None);
        assert_eq!(c.entries().unwrap(), vec![], "no directory yet");
        c.store(&e).unwrap();
        assert_eq!(c.load("abc123", "eth0").unwrap(), Some(e.clone()));
        let uid = "0b6c52d4-1f0e-4a55-9d55-6a3c1c4bb1a1";
        c.store(&Entry {
            container_id: uid.into(),
            ..e
        })
        .unwrap();
        std::fs::write(c.dir().join("notes.txt"), "").unwrap();
        assert_eq!(
            c.entries().unwrap(),
            vec![
                (uid.to_string(), "eth0".to_string()),
                ("abc123".to_string(), "eth0".to_string())
            ]
        );
        c.remove(uid, "eth0").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(c.path("abc123", "eth0").unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        c.remove("abc123", "eth0").unwrap();
        assert_eq!(c.load("abc123", "eth0").unwrap(), None);
        c.remove("abc123", "eth0").unwrap();
        std::fs::remove_dir_all(c.dir()).unwrap();
    }

    #[test]
    fn ids_that_are_no_file_name_and_damaged_files_are_refused() {
        let c = scratch("bad");
        for id in ["", "../x", "a/b", ".hidden", "-x", "a b"] {
            assert!(
                matches!(c.load(id, "eth0"), Err(CacheError::InvalidContainerId(_))),
                "{id}"
            );
        }
        for name in ["", "..", "a/b", "sixteen-chars-xx", "e th0"] {
            assert!(
                matches!(c.load("x1", name), Err(CacheError::InvalidIfname(_))),
                "{name}"
            );
        }
        std::fs::create_dir_all(c.dir()).unwrap();
        for body in [
            "{",
            r#"{"kind":"other"}"#,
            r#"{"kind":"podunit-cni-cache-v1"}"#,
        ] {
            std::fs::write(c.dir().join("x1-eth0.json"), body).unwrap();
            assert!(
                matches!(c.load("x1", "eth0"), Err(CacheError::Malformed { .. })),
                "{body}"
            );
        }
        std::fs::remove_dir_all(c.dir()).unwrap();
    }
}
