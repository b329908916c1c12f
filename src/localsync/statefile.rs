//! Persisting podunit-sync's record atomically: a crash at any point leaves either the old or the
//! new file, never a torn one (temp file, fsync, rename, fsync of the directory).

use crate::localsync::reconcile::State;
use std::fmt;
use std::path::{Path, PathBuf};

/// Host path of the record (prefixed by `PODUNIT_ROOT` like every other path).
pub const STATE_FILE: &str = "/var/lib/podunit/sync-state.json";

#[derive(Debug)]
pub enum Error {
    Io(PathBuf, std::io::Error),
    Parse(PathBuf, serde_json::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(p, e) => write!(f, "{}: {e}", p.display()),
            Error::Parse(p, e) => write!(f, "{}: not a podunit-sync state file: {e}", p.display()),
        }
    }
}

impl std::error::Error for Error {}

/// Loads the record; a missing file is an empty record (first start).
pub fn load(path: &Path) -> Result<State, Error> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| Error::Parse(path.to_path_buf(), e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
        Err(e) => Err(Error::Io(path.to_path_buf(), e)),
    }
}

/// Writes the record atomically, mode 0600 (it names pods, nothing secret, but it is podunit's
/// own business).
pub fn save(path: &Path, state: &State) -> Result<(), Error> {
    use crate::common::atomicfile;
    let mut bytes =
        serde_json::to_vec_pretty(state).map_err(|e| Error::Parse(path.to_path_buf(), e))?;
    bytes.push(b'\n');
    atomicfile::write(path, &bytes, atomicfile::Options::new(0o600))
        .map_err(|e| Error::Io(e.path, e.error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::localsync::reconcile::Recorded;

    #[test]
    fn save_then_load_and_no_temp_left() {
        let dir = std::env::temp_dir().join(format!("podunit-statefile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("var/lib/podunit/sync-state.json");
        assert_eq!(load(&path).unwrap(), State::default());
        let mut s = State {
            boot_id: "b".into(),
            ..Default::default()
        };
        s.pods.insert(
            "default/web".into(),
            Recorded {
                hash: "h".into(),
                units: vec!["podunit-default_web.service".into()],
                grace: Default::default(),
                uid: Some("u".into()),
            },
        );
        save(&path, &s).unwrap();
        assert_eq!(load(&path).unwrap(), s);
        s.pods.clear();
        save(&path, &s).unwrap();
        assert_eq!(load(&path).unwrap(), s);
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("sync-state.json")]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(load(&path), Err(Error::Parse(..))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
