//! `image` -> where the container's root filesystem comes from (DESIGN.md §6). The filesystem is
//! looked at by the caller (an [`ImageResolver`]); this module only decides.

use crate::common::paths::Paths;
use crate::image::manifest::RunConfig;
use crate::image::{Reference, ResolvedImage};

/// What an image reference resolved to on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRoot {
    /// The host's own root filesystem.
    Host,
    /// A directory holding a root filesystem (`RootDirectory=`).
    Directory(String),
    /// A disk image file (`RootImage=`).
    File(String),
    /// A pulled image in the local store: its layers, mounted as the container's root.
    Stored(Box<StoredImage>),
}

/// A pulled image as the translation needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredImage {
    /// `registry/repository@sha256:...`: the container's `imageID`.
    pub image_id: String,
    /// The layers' directories as the host sees them (no test root), lowest first.
    pub layers: Vec<String>,
    /// What the image says about running it. Untrusted, like the manifest.
    pub config: RunConfig,
    /// The image's own `/etc/passwd` and `/etc/group`, when it has them (a `User` by name).
    pub passwd: Option<String>,
    pub group: Option<String>,
}

impl StoredImage {
    /// From a store lookup; `passwd`/`group` read from the image's layers by the caller.
    pub fn new(img: &ResolvedImage, passwd: Option<String>, group: Option<String>) -> StoredImage {
        StoredImage {
            image_id: img.image_id(),
            layers: img
                .config
                .rootfs
                .diff_ids
                .iter()
                .map(|d| format!("{}/layers/{}/{}", Paths::STORE, d.algorithm(), d.hex()))
                .collect(),
            config: img.config.config.clone(),
            passwd,
            group,
        }
    }
}

/// Why a reference did not resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// Not on this host yet: a pull brings it.
    Absent { reference: String, message: String },
    /// Can never run: a bad reference, a missing path, a damaged store entry.
    Invalid(String),
}

impl Unresolved {
    pub fn message(&self) -> &str {
        match self {
            Unresolved::Absent { message, .. } | Unresolved::Invalid(message) => message,
        }
    }
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
    /// The pulled image `reference` names, if the local store has all of it.
    fn stored(&self, reference: &Reference) -> Result<Option<StoredImage>, String> {
        let _ = reference;
        Ok(None)
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

/// The reason a pod waiting for its images shows in the generator's report (see
/// [`crate::generate::report::WaitingPod`]).
pub const IMAGE_PENDING: &str = "ImagePending";

/// The names of a pod's `imagePullSecrets`, in order, empty names left out (the API server drops
/// them too).
pub fn pull_secret_names(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Vec<String> {
    spec.and_then(|s| s.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
        .collect()
}

/// Resolves `reference`, or says why it cannot run.
pub fn resolve(reference: &str, host: &dyn ImageResolver) -> Result<ImageRoot, Unresolved> {
    if host.is_host_alias(reference) {
        return Ok(ImageRoot::Host);
    }
    if reference.starts_with('/') {
        return match host.probe(reference) {
            Probe::Directory => Ok(ImageRoot::Directory(reference.to_string())),
            Probe::File => Ok(ImageRoot::File(reference.to_string())),
            Probe::Missing => Err(Unresolved::Invalid(format!(
                "{reference:?} does not exist on this host"
            ))),
        };
    }
    // A root filesystem put in place by hand keeps working as before pulls existed.
    if let Some(dir) = store_path(reference) {
        let rootfs = format!("{dir}/rootfs");
        let raw = format!("{dir}/image.raw");
        if host.probe(&rootfs) == Probe::Directory {
            return Ok(ImageRoot::Directory(rootfs));
        }
        if host.probe(&raw) == Probe::File {
            return Ok(ImageRoot::File(raw));
        }
    }
    let parsed = Reference::parse(reference).map_err(|e| {
        Unresolved::Invalid(format!("{reference:?} is not a valid image reference: {e}"))
    })?;
    match host.stored(&parsed) {
        Ok(Some(img)) => Ok(ImageRoot::Stored(Box::new(img))),
        Ok(None) => Err(Unresolved::Absent {
            reference: parsed.to_string(),
            message: format!(
                "image {:?} is not on this node yet: podunit-sync pulls it, then the pod starts",
                parsed.to_string()
            ),
        }),
        Err(e) => Err(Unresolved::Invalid(format!("image {reference:?}: {e}"))),
    }
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
