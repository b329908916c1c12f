//! `volumeMounts[].subPath` at container start, as the kubelet does it: the sub-directory is
//! created when missing, and it must resolve to a place inside the volume. A container that can
//! write into a volume could otherwise plant `sub -> /` there and have the next start bind a
//! host directory instead (CVE-2017-1002101 in Kubernetes). Symlinks that stay inside the volume
//! are fine: a configMap volume's keys are symlinks through `..data`. Run as `podunit subpath VOLUME SUBPATH`
//! by each container unit with a subPath mount (`ExecStartPre=+`, before systemd binds it).

use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

#[derive(Debug)]
pub enum SubPathError {
    /// Not a plain relative path (absolute, `..`, empty): validation refuses these already.
    NotRelative(String),
    /// A component is a symlink that leads out of the volume (or nowhere).
    Escapes(PathBuf),
    /// A component before the last is not a directory.
    NotADirectory(PathBuf),
    Io(PathBuf, io::Error),
}

impl fmt::Display for SubPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubPathError::NotRelative(s) => {
                write!(f, "subPath {s:?} is not a relative path inside the volume")
            }
            SubPathError::Escapes(p) => write!(
                f,
                "{} is a symlink that leads out of the volume: refused",
                p.display()
            ),
            SubPathError::NotADirectory(p) => write!(f, "{} is not a directory", p.display()),
            SubPathError::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for SubPathError {}

/// Checks `sub` inside the volume directory `volume`, creating missing directories with the
/// volume's owner and mode (the kubelet uses the volume's mode, so an fsGroup can still write),
/// and returns where it resolves to. The volume directory itself is podunit's and is trusted.
pub fn ensure(volume: &Path, sub: &str) -> Result<PathBuf, SubPathError> {
    let rel = Path::new(sub);
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(SubPathError::NotRelative(sub.to_string())),
        })
        .collect::<Result<_, _>>()?;
    if parts.is_empty() {
        return Err(SubPathError::NotRelative(sub.to_string()));
    }
    let top = std::fs::metadata(volume).map_err(|e| SubPathError::Io(volume.to_path_buf(), e))?;
    let base =
        std::fs::canonicalize(volume).map_err(|e| SubPathError::Io(volume.to_path_buf(), e))?;
    // Where the path walked so far really is; never outside `base`.
    let mut real = base.clone();
    let mut shown = volume.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        shown.push(part);
        let next = real.join(part);
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                real = match std::fs::canonicalize(&next) {
                    Ok(r) if r.starts_with(&base) => r,
                    _ => return Err(SubPathError::Escapes(shown)),
                };
            }
            Ok(_) => real = next,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                make_dir(&next, &top)?;
                real = next;
            }
            Err(e) => return Err(SubPathError::Io(shown, e)),
        }
        if !last && !real.is_dir() {
            return Err(SubPathError::NotADirectory(shown));
        }
    }
    Ok(real)
}

fn make_dir(path: &Path, like: &std::fs::Metadata) -> Result<(), SubPathError> {
    let io = |e| SubPathError::Io(path.to_path_buf(), e);
    let mode = like.permissions().mode() & 0o7777;
    std::fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(io)?;
    // The umask may have taken bits away; the owner is root's until given the volume's.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    std::os::unix::fs::lchown(path, Some(like.uid()), Some(like.gid())).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("podunit-subpath-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o2775)).unwrap();
        d
    }

    #[test]
    fn missing_directories_are_made_like_the_volume() {
        let v = volume("make");
        let p = ensure(&v, "a/b/c").unwrap();
        assert_eq!(p, v.join("a/b/c"));
        for d in ["a", "a/b", "a/b/c"] {
            let m = std::fs::metadata(v.join(d)).unwrap();
            assert!(m.is_dir());
            assert_eq!(m.permissions().mode() & 0o7777, 0o2775, "{d}");
        }
        // Existing files and directories are left as they are.
        std::fs::write(v.join("a/file"), "x").unwrap();
        assert_eq!(ensure(&v, "a/file").unwrap(), v.join("a/file"));
        assert_eq!(std::fs::read(v.join("a/file")).unwrap(), b"x");
        std::fs::remove_dir_all(v).unwrap();
    }

    #[test]
    fn symlinks_out_of_the_volume_are_refused() {
        let v = volume("links");
        std::fs::create_dir(v.join("d")).unwrap();
        std::os::unix::fs::symlink("/etc", v.join("d/escape")).unwrap();
        std::os::unix::fs::symlink("../..", v.join("d/up")).unwrap();
        std::os::unix::fs::symlink("missing", v.join("dangling")).unwrap();
        for sub in ["d/escape", "d/escape/ssh", "d/up", "d/up/x", "dangling"] {
            match ensure(&v, sub) {
                Err(SubPathError::Escapes(p)) => assert!(p.starts_with(&v), "{p:?}"),
                other => panic!("{sub}: {other:?}"),
            }
        }
        std::fs::write(v.join("f"), "x").unwrap();
        assert!(matches!(
            ensure(&v, "f/below"),
            Err(SubPathError::NotADirectory(_))
        ));
        for bad in ["", "/etc", "../x", "a/../../x", "."] {
            assert!(
                matches!(ensure(&v, bad), Err(SubPathError::NotRelative(_))),
                "{bad:?}"
            );
        }
        std::fs::remove_dir_all(v).unwrap();
    }

    #[test]
    fn symlinks_inside_the_volume_are_followed() {
        // A configMap volume: each key is a symlink through `..data` to the current version.
        let v = volume("atomic");
        std::fs::create_dir(v.join("..2026_11_30")).unwrap();
        std::fs::write(v.join("..2026_11_30/app.conf"), "x").unwrap();
        std::os::unix::fs::symlink("..2026_11_30", v.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/app.conf", v.join("app.conf")).unwrap();
        let real = std::fs::canonicalize(&v).unwrap();
        assert_eq!(
            ensure(&v, "app.conf").unwrap(),
            real.join("..2026_11_30/app.conf")
        );
        // A missing directory below an inner link is made where the link leads.
        std::os::unix::fs::symlink("..data", v.join("current")).unwrap();
        assert_eq!(
            ensure(&v, "current/new").unwrap(),
            real.join("..2026_11_30/new")
        );
        std::fs::remove_dir_all(v).unwrap();
    }
}
