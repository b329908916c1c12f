//! The local store of pulled images under `/var/lib/podunit/store` (docs/images.md):
//!
//! ```text
//! blobs/sha256/<hex>                         manifests, indexes, image configs (checked on every read)
//! layers/sha256/<diff_id hex>/               one unpacked layer, an overlayfs lower directory
//! refs/<registry>/<repository>/_tags/<tag>   a name -> digest record (JSON)
//! refs/<registry>/<repository>/_digests/sha256-<hex>
//! tmp/                                       work in progress, never read; cleared by writers
//! locks/                                     one lock file per blob being fetched
//! ```
//!
//! Everything outside `tmp/` appears by `rename()` after its content is verified and synced, so a
//! reader sees complete entries or none. `_` cannot start a repository path component, so the
//! `_tags`/`_digests` directories never clash with a repository name.
//!
//! This half only reads (the generator uses it, without the `cli` feature); [`write`] fills it.

use super::digest::Digest;
use super::manifest::{ImageConfig, Manifest};
use super::reference::Reference;
use crate::common::paths::Paths;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

pub mod files;
#[cfg(feature = "cli")]
pub mod write;

/// Why the store could not answer.
#[derive(Debug)]
pub enum StoreError {
    Io(PathBuf, std::io::Error),
    /// Content that does not match its name or does not parse: never used.
    Corrupt(PathBuf, String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            StoreError::Corrupt(p, why) => {
                write!(f, "{}: corrupt image store entry: {why}", p.display())
            }
        }
    }
}

impl std::error::Error for StoreError {}

impl From<crate::common::atomicfile::Error> for StoreError {
    fn from(e: crate::common::atomicfile::Error) -> Self {
        StoreError::Io(e.path, e.error)
    }
}

/// What a name points at, as recorded by the pull that stored it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefRecord {
    /// The normalised reference as pulled (`docker.io/library/nginx:latest`).
    pub reference: String,
    /// The digest the registry resolved the name to: an index or a manifest. What the pod's
    /// `imageID` carries, as with containerd.
    pub digest: Digest,
    /// The manifest chosen for this host (equal to `digest` for a single-platform image).
    pub manifest: Digest,
}

/// A stored image, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    /// The normalised reference it was looked up by.
    pub reference: Reference,
    /// The resolved (repository) digest: index or manifest.
    pub digest: Digest,
    /// This host's manifest.
    pub manifest: Digest,
    /// The config blob's digest (`podunit image ls` shows it as the image ID, like crictl).
    pub config_digest: Digest,
    pub config: ImageConfig,
    /// The unpacked layer directories, lowest first (overlayfs takes `lowerdir=` highest first).
    pub layers: Vec<PathBuf>,
}

impl ResolvedImage {
    /// `registry/repository@sha256:...`: what the kubelet reports as a container's `imageID`.
    pub fn image_id(&self) -> String {
        self.reference.with_digest(&self.digest).to_string()
    }
}

/// The store rooted at a directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// `dir` is the store directory itself. Nothing is created: a missing store is an empty one.
    pub fn open(dir: impl Into<PathBuf>) -> Store {
        Store { root: dir.into() }
    }

    /// The store of this host (`PODUNIT_ROOT` honoured by `paths`).
    pub fn from_paths(paths: &Paths) -> Store {
        Store::open(paths.host(Paths::STORE))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        self.root.join("blobs").join(d.algorithm()).join(d.hex())
    }

    /// The directory of the layer whose uncompressed digest (`diff_id`) is `d`.
    pub fn layer_path(&self, d: &Digest) -> PathBuf {
        self.root.join("layers").join(d.algorithm()).join(d.hex())
    }

    pub fn refs_dir(&self) -> PathBuf {
        self.root.join("refs")
    }

    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    pub fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }

    /// Where the record for `r` lives: by digest when it has one, else by tag.
    pub fn ref_path(&self, r: &Reference) -> PathBuf {
        let base = self.refs_dir().join(&r.registry).join(&r.repository);
        match (&r.digest, &r.tag) {
            (Some(d), _) => base
                .join("_digests")
                .join(format!("{}-{}", d.algorithm(), d.hex())),
            (None, t) => base
                .join("_tags")
                .join(t.as_deref().unwrap_or(super::reference::DEFAULT_TAG)),
        }
    }

    /// The record for `r`, if it was pulled.
    pub fn record(&self, r: &Reference) -> Result<Option<RefRecord>, StoreError> {
        let p = self.ref_path(r);
        let Some(text) = read_optional(&p)? else {
            return Ok(None);
        };
        let rec: RefRecord = serde_json::from_slice(&text)
            .map_err(|e| StoreError::Corrupt(p.clone(), e.to_string()))?;
        if let Some(d) = &r.digest
            && &rec.digest != d
        {
            return Err(StoreError::Corrupt(
                p,
                format!("records {} for {d}", rec.digest),
            ));
        }
        Ok(Some(rec))
    }

    /// A stored blob, checked against its digest (manifests and configs are small: re-hashing them
    /// on every read costs little and means a damaged store is never trusted).
    pub fn read_blob(&self, d: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        let p = self.blob_path(d);
        let Some(bytes) = read_optional(&p)? else {
            return Ok(None);
        };
        let got = Digest::of(&bytes);
        if &got != d {
            return Err(StoreError::Corrupt(p, format!("content hashes to {got}")));
        }
        Ok(Some(bytes))
    }

    /// The stored image `r` names, with everything it needs present, or `None` when it is not
    /// (completely) in the store: a pull is needed.
    pub fn lookup(&self, r: &Reference) -> Result<Option<ResolvedImage>, StoreError> {
        let Some(rec) = self.record(r)? else {
            return Ok(None);
        };
        self.resolve_record(r, &rec)
    }

    /// [`lookup`](Self::lookup) from a record already read.
    pub fn resolve_record(
        &self,
        r: &Reference,
        rec: &RefRecord,
    ) -> Result<Option<ResolvedImage>, StoreError> {
        let Some(body) = self.read_blob(&rec.manifest)? else {
            return Ok(None);
        };
        let mpath = self.blob_path(&rec.manifest);
        let (config_desc, layers) = match Manifest::parse(&body, "") {
            Ok(Manifest::Image { config, layers }) => (config, layers),
            Ok(Manifest::Index(_)) => {
                return Err(StoreError::Corrupt(
                    mpath,
                    "an index where a manifest was recorded".into(),
                ));
            }
            Err(e) => return Err(StoreError::Corrupt(mpath, e)),
        };
        let Some(cbody) = self.read_blob(&config_desc.digest)? else {
            return Ok(None);
        };
        let config = ImageConfig::parse(&cbody)
            .map_err(|e| StoreError::Corrupt(self.blob_path(&config_desc.digest), e))?;
        if config.rootfs.diff_ids.len() != layers.len() {
            return Err(StoreError::Corrupt(
                self.blob_path(&config_desc.digest),
                format!(
                    "{} diff_ids for {} layers",
                    config.rootfs.diff_ids.len(),
                    layers.len()
                ),
            ));
        }
        let mut dirs = Vec::with_capacity(layers.len());
        for d in &config.rootfs.diff_ids {
            let p = self.layer_path(d);
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => dirs.push(p),
                Ok(_) => return Err(StoreError::Corrupt(p, "not a directory".into())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(StoreError::Io(p, e)),
            }
        }
        Ok(Some(ResolvedImage {
            reference: r.clone(),
            digest: rec.digest.clone(),
            manifest: rec.manifest.clone(),
            config_digest: config_desc.digest,
            config,
            layers: dirs,
        }))
    }

    /// Every record in the store, sorted by reference. Unreadable records are returned as errors
    /// beside the good ones, so one damaged file does not hide the rest.
    pub fn list(&self) -> (Vec<RefRecord>, Vec<StoreError>) {
        let mut out = Vec::new();
        let mut errs = Vec::new();
        let mut stack = vec![self.refs_dir()];
        while let Some(dir) = stack.pop() {
            let rd = match std::fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    errs.push(StoreError::Io(dir, e));
                    continue;
                }
            };
            let in_leaf_dir = matches!(
                dir.file_name().and_then(|n| n.to_str()),
                Some("_tags" | "_digests")
            );
            for e in rd.flatten() {
                let p = e.path();
                let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                if is_dir && !in_leaf_dir {
                    stack.push(p);
                } else if !is_dir && in_leaf_dir && !is_temp_name(&p) {
                    match std::fs::read(&p) {
                        Ok(b) => match serde_json::from_slice::<RefRecord>(&b) {
                            Ok(r) => out.push(r),
                            Err(e) => errs.push(StoreError::Corrupt(p, e.to_string())),
                        },
                        Err(e) => errs.push(StoreError::Io(p, e)),
                    }
                }
            }
        }
        out.sort_by(|a, b| a.reference.cmp(&b.reference));
        (out, errs)
    }
}

/// Files being written next to their final name start with `.tmp-` (see `write`).
fn is_temp_name(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(".tmp-"))
}

fn read_optional(p: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match std::fs::read(p) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::Io(p.to_path_buf(), e)),
    }
}

#[cfg(test)]
mod tests;
