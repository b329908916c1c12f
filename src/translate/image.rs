//! `image` -> where the container's root filesystem comes from (DESIGN.md §6). The filesystem is
//! looked at by the caller (an [`ImageResolver`]); this module only decides.

use crate::common::paths::Paths;

/// What an image reference resolved to on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRoot {
    /// The host's own root filesystem.
    Host,
    /// A directory holding a root filesystem (`RootDirectory=`).
    Directory(String),
    /// A disk image file (`RootImage=`).
    File(String),
}

/// Looks references up on the host. The generator's implementation reads the filesystem; tests use
/// a table.
pub trait ImageResolver: Sync {
    /// Whether `path` is a directory, a regular file, or absent.
    fn probe(&self, path: &str) -> Probe;
    /// References that mean the host (`host` and the node's configured aliases).
    fn is_host_alias(&self, reference: &str) -> bool {
        reference == "host"
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Directory,
    File,
    Missing,
}

/// The store directory for a reference: `nginx:1.25` -> `<store>/nginx/1.25`,
/// `reg.example/app@sha256:ab` -> `<store>/reg.example/app/sha256:ab`.
pub fn store_path(reference: &str) -> Option<String> {
    let (repo, version) = match reference.split_once('@') {
        Some((r, d)) => (r, d.to_string()),
        None => {
            let slash = reference.rfind('/').map(|i| i + 1).unwrap_or(0);
            match reference[slash..].rfind(':') {
                Some(i) => (
                    &reference[..slash + i],
                    reference[slash + i + 1..].to_string(),
                ),
                None => (reference, "latest".to_string()),
            }
        }
    };
    let ok = |s: &str| {
        !s.is_empty()
            && s.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-/:".contains(&b))
    };
    if !ok(repo) || !ok(&version) || version.contains('/') {
        return None;
    }
    Some(format!("{}/{repo}/{version}", Paths::IMAGES))
}

/// Resolves `reference`, or says why it cannot run.
pub fn resolve(reference: &str, host: &dyn ImageResolver) -> Result<ImageRoot, String> {
    if host.is_host_alias(reference) {
        return Ok(ImageRoot::Host);
    }
    if reference.starts_with('/') {
        return match host.probe(reference) {
            Probe::Directory => Ok(ImageRoot::Directory(reference.to_string())),
            Probe::File => Ok(ImageRoot::File(reference.to_string())),
            Probe::Missing => Err(format!("{reference:?} does not exist on this host")),
        };
    }
    let Some(dir) = store_path(reference) else {
        return Err(format!("{reference:?} is not a valid image reference"));
    };
    let rootfs = format!("{dir}/rootfs");
    let raw = format!("{dir}/image.raw");
    if host.probe(&rootfs) == Probe::Directory {
        return Ok(ImageRoot::Directory(rootfs));
    }
    if host.probe(&raw) == Probe::File {
        return Ok(ImageRoot::File(raw));
    }
    Err(format!(
        "image {reference:?} is not in the local image store (expected {rootfs}/ or {raw}); \
         use `image: host` to run on the host's root filesystem"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_paths() {
        assert_eq!(
            store_path("nginx:1.25").as_deref(),
            Some("/var/lib/podunit/images/nginx/1.25")
        );
        assert_eq!(
            store_path("nginx").as_deref(),
            Some("/var/lib/podunit/images/nginx/latest")
        );
        assert_eq!(
            store_path("reg.example:5000/team/app").as_deref(),
            Some("/var/lib/podunit/images/reg.example:5000/team/app/latest")
        );
        assert_eq!(
            store_path("a/b@sha256:00ff").as_deref(),
            Some("/var/lib/podunit/images/a/b/sha256:00ff")
        );
        assert_eq!(store_path("../etc:x"), None);
        assert_eq!(store_path("a b"), None);
    }
}
