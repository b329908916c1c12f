//! A volume directory whose files all change at once, as the kubelet's AtomicWriter keeps
//! configMap, secret, downwardAPI and projected volumes:
//!
//! ```text
//! <dir>/..2026_11_30_18_41_23.1234567/   the files of one version (nested paths allowed)
//! <dir>/..data -> ..2026_11_30_18_41_23.1234567
//! <dir>/<name> -> ..data/<name>           one symlink per top-level name
//! ```
//!
//! A new version is written into a fresh hidden directory, then `..data` is switched to it with one
//! `rename(2)` of a symlink: a container that binds `<dir>` sees the old files or the new ones, never a
//! mix and never a partial file. Files bound one by one (`subPath`) keep the version they were bound
//! to, as with the kubelet. Writers of the same directory are serialised with `flock(2)` on it.

use crate::common::atomicfile;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// The link that names the current version.
pub const DATA: &str = "..data";

/// One file of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Relative path (no `..`, no leading `/`, not starting with `..`) -> file.
pub type Payload = BTreeMap<String, File>;

/// Whether `rel` may be a payload path: relative, no empty, `.` or `..` components, and not
/// starting with `..` (those names are the writer's own).
pub fn valid_path(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.starts_with('/')
        && !rel.starts_with("..")
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Makes `dir` hold exactly `payload`, owned by `owner` (uid, gid), its directories with
/// `dir_mode`. Returns whether anything changed (an identical payload writes nothing).
pub fn write(dir: &Path, payload: &Payload, owner: (u32, u32), dir_mode: u32) -> io::Result<bool> {
    if let Some(bad) = payload.keys().find(|p| !valid_path(p)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{bad:?} is not a path inside the volume"),
        ));
    }
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent)?;
    }
    mkdir(dir, dir_mode, owner)?;
    let lock = fs::File::open(dir)?;
    lock.lock()?;
    if current(dir, owner).as_ref() == Some(payload) {
        return Ok(false);
    }
    let version = version_name();
    let vdir = dir.join(&version);
    mkdir(&vdir, dir_mode, owner)?;
    for (rel, f) in payload {
        let path = vdir.join(rel);
        if let Some(parent) = path.parent() {
            mkdirs(&vdir, parent, owner, dir_mode)?;
        }
        let opts = atomicfile::Options::new(f.mode).owner(owner.0, owner.1);
        atomicfile::write(&path, &f.data, opts)?;
    }
    // The switch: one rename of a symlink.
    atomicfile::symlink(Path::new(&version), &dir.join(DATA))?;
    // Top-level names point through ..data; names that went away are removed.
    let tops: BTreeSet<&str> = payload
        .keys()
        .map(|p| p.split('/').next().unwrap_or(p))
        .collect();
    for top in &tops {
        let link = dir.join(top);
        let want = format!("{DATA}/{top}");
        match fs::read_link(&link) {
            Ok(t) if t == Path::new(&want) => continue,
            _ => {}
        }
        // A plain directory (a volume written before this layout) cannot be renamed over.
        if fs::symlink_metadata(&link).is_ok_and(|m| m.is_dir()) {
            fs::remove_dir_all(&link)?;
        }
        atomicfile::symlink(Path::new(&want), &link)?;
    }
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let keep = name == DATA || name == version || tops.contains(name.as_str());
        if keep {
            continue;
        }
        let path = e.path();
        if e.file_type()?.is_dir() {
            fs::remove_dir_all(&path)?;
        } else {
            fs::remove_file(&path)?;
        }
    }
    Ok(true)
}

/// The payload `dir` holds now, if it is in this layout and owned by `owner` throughout.
pub fn current(dir: &Path, owner: (u32, u32)) -> Option<Payload> {
    let target = fs::read_link(dir.join(DATA)).ok()?;
    let vdir = dir.join(target);
    let mut out = Payload::new();
    read_tree(&vdir, "", owner, &mut out).ok()?;
    Some(out)
}

fn read_tree(dir: &Path, prefix: &str, owner: (u32, u32), out: &mut Payload) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let meta = e.metadata()?;
        if (meta.uid(), meta.gid()) != owner {
            return Err(io::Error::other("owner differs"));
        }
        let rel = format!("{prefix}{}", e.file_name().to_string_lossy());
        if meta.is_dir() {
            read_tree(&e.path(), &format!("{rel}/"), owner, out)?;
        } else {
            out.insert(
                rel,
                File {
                    data: fs::read(e.path())?,
                    mode: meta.mode() & 0o7777,
                },
            );
        }
    }
    Ok(())
}

fn mkdir(path: &Path, mode: u32, owner: (u32, u32)) -> io::Result<()> {
    match fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => {}
        Err(e) => return Err(e),
    }
    std::os::unix::fs::chown(path, Some(owner.0), Some(owner.1))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// Creates the directories between `base` (exists) and `path`.
fn mkdirs(base: &Path, path: &Path, owner: (u32, u32), mode: u32) -> io::Result<()> {
    if path == base || path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        mkdirs(base, parent, owner, mode)?;
    }
    mkdir(path, mode, owner)
}

/// `..<UTC date and time>.<nanoseconds><pid>`: unique, and sorts by age as the kubelet's do.
fn version_name() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let ts = crate::common::timefmt::rfc3339(d.as_secs() * 1_000_000)
        .replace(['-', ':', 'T'], "_")
        .trim_end_matches('Z')
        .to_string();
    format!("..{ts}.{:09}{}", d.subsec_nanos(), std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The owner of the files this process creates.
    fn me() -> (u32, u32) {
        // Tests run in parallel threads of one process: each call its own probe file.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let probe =
            std::env::temp_dir().join(format!("podunit-atomicdir-me-{}-{n}", std::process::id()));
        fs::write(&probe, "").unwrap();
        let m = fs::metadata(&probe).unwrap();
        fs::remove_file(&probe).unwrap();
        (m.uid(), m.gid())
    }

    fn payload(items: &[(&str, &str, u32)]) -> Payload {
        items
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    File {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn versions_switch_whole_and_stale_names_go() {
        let root = std::env::temp_dir().join(format!("podunit-atomicdir-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let dir = root.join("vol");
        let owner = me();
        let v1 = payload(&[
            ("a", "one", 0o644),
            ("sub/b", "two", 0o600),
            ("gone", "x", 0o644),
        ]);
        assert!(write(&dir, &v1, owner, 0o755).unwrap());
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "one");
        assert_eq!(fs::read_to_string(dir.join("sub/b")).unwrap(), "two");
        assert_eq!(
            fs::metadata(dir.join("sub/b")).unwrap().mode() & 0o777,
            0o600
        );
        assert_eq!(fs::read_link(dir.join("a")).unwrap(), Path::new("..data/a"));
        let first = fs::read_link(dir.join(DATA)).unwrap();
        assert_eq!(current(&dir, owner), Some(v1.clone()));
        assert!(
            !write(&dir, &v1, owner, 0o755).unwrap(),
            "same payload: no write"
        );
        assert_eq!(fs::read_link(dir.join(DATA)).unwrap(), first);

        // An open file of the old version stays whole; the new version replaces everything at once.
        let old = fs::File::open(dir.join("a")).unwrap();
        let v2 = payload(&[("a", "uno", 0o644), ("sub/b", "dos", 0o600)]);
        assert!(write(&dir, &v2, owner, 0o755).unwrap());
        assert_eq!(io::read_to_string(old).unwrap(), "one");
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "uno");
        assert_eq!(fs::read_to_string(dir.join("sub/b")).unwrap(), "dos");
        assert!(!dir.join("gone").exists(), "a removed key disappears");
        let names: BTreeSet<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let version = fs::read_link(dir.join(DATA)).unwrap();
        assert_ne!(version, first);
        let want: BTreeSet<String> = [
            "..data".to_string(),
            "a".into(),
            "sub".into(),
            version.to_string_lossy().into_owned(),
        ]
        .into();
        assert_eq!(names, want, "old versions and temp links are removed");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_plain_volume_is_taken_over_and_bad_paths_refused() {
        let root =
            std::env::temp_dir().join(format!("podunit-atomicdir-plain-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let dir = root.join("vol");
        fs::create_dir_all(dir.join("nested")).unwrap();
        fs::write(dir.join("a"), "plain").unwrap();
        fs::write(dir.join("nested/x"), "plain").unwrap();
        let owner = me();
        let v = payload(&[("a", "new", 0o644), ("nested/x", "new", 0o644)]);
        assert!(write(&dir, &v, owner, 0o755).unwrap());
        assert_eq!(fs::read_to_string(dir.join("nested/x")).unwrap(), "new");
        assert_eq!(current(&dir, owner), Some(v));
        for bad in ["../x", "/etc/passwd", "..data", "a/../b", "a//b", ""] {
            assert!(!valid_path(bad), "{bad}");
            assert!(write(&dir, &payload(&[(bad, "x", 0o644)]), owner, 0o755).is_err());
        }
        fs::remove_dir_all(&root).unwrap();
    }
}
