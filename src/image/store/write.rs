//! Filling the store: every entry is built under `tmp/`, synced, then renamed into place, so a
//! pull killed at any point leaves nothing a reader trusts. A pull makes everything it brings
//! durable together ([`Store::commit`]: one `syncfs`, then the renames), not file by file. One lock
//! file per layer makes concurrent pulls of the same layer fetch and unpack it once; `prune` takes
//! the store lock exclusively, pulls take it shared.

use super::{RefRecord, Store, StoreError};
use crate::common::atomicfile;
use crate::image::digest::Digest;
use crate::image::reference::Reference;
use rustix::fs::{self as rfs, FlockOperation, Mode, OFlags};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static SEQ: AtomicU64 = AtomicU64::new(0);

fn io(p: &Path, e: impl Into<std::io::Error>) -> StoreError {
    StoreError::Io(p.to_path_buf(), e.into())
}

/// Whether `e` is the disk (or quota) being full.
pub fn is_no_space(e: &StoreError) -> bool {
    matches!(e, StoreError::Io(_, e) if matches!(e.raw_os_error(), Some(c) if c == rustix::io::Errno::NOSPC.raw_os_error() || c == rustix::io::Errno::DQUOT.raw_os_error()))
}

/// A held `flock`; released when dropped.
pub struct Lock {
    _fd: OwnedFd,
}

impl Store {
    /// Creates the store's directories (root-only: layers keep their own modes inside).
    pub fn create(&self) -> Result<(), StoreError> {
        for d in [
            self.root.clone(),
            self.root.join("blobs/sha256"),
            self.root.join("layers/sha256"),
            self.refs_dir(),
            self.tmp_dir(),
            self.locks_dir(),
        ] {
            std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io(&self.root, e))?;
        Ok(())
    }

    fn lock_file(&self, name: &str, op: FlockOperation) -> Result<Lock, StoreError> {
        let p = self.locks_dir().join(name);
        let fd = rfs::open(
            &p,
            OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io(&p, e))?;
        rfs::flock(&fd, op).map_err(|e| io(&p, e))?;
        Ok(Lock { _fd: fd })
    }

    /// Held by a pull for its whole run (shared) and by prune (exclusive).
    pub fn lock_store(&self, exclusive: bool) -> Result<Lock, StoreError> {
        let op = if exclusive {
            FlockOperation::LockExclusive
        } else {
            FlockOperation::LockShared
        };
        self.lock_file("store.lock", op)
    }

    /// Exclusive lock for fetching the blob or layer `d`.
    pub fn lock_digest(&self, d: &Digest) -> Result<Lock, StoreError> {
        self.lock_file(&format!("{}.lock", d.hex()), FlockOperation::LockExclusive)
    }

    /// [`Self::lock_digest`] if no one holds it now; `None` when another pull does.
    pub fn try_lock_digest(&self, d: &Digest) -> Result<Option<Lock>, StoreError> {
        match self.lock_file(
            &format!("{}.lock", d.hex()),
            FlockOperation::NonBlockingLockExclusive,
        ) {
            Ok(l) => Ok(Some(l)),
            Err(StoreError::Io(_, e)) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A fresh directory under `tmp/` named for this process, so [`Store::clean_tmp`] can tell
    /// live work from a dead pull's leftovers.
    pub fn temp_dir(&self) -> Result<PathBuf, StoreError> {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let p = self.tmp_dir().join(format!("{}-{n}", std::process::id()));
        std::fs::create_dir(&p).map_err(|e| io(&p, e))?;
        Ok(p)
    }

    /// Removes what dead pulls left under `tmp/`.
    pub fn clean_tmp(&self) {
        let Ok(rd) = std::fs::read_dir(self.tmp_dir()) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
            if !alive {
                let _ =
                    std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
            }
        }
    }

    /// Removes the record for `r`; true when there was one.
    pub fn remove_record(&self, r: &Reference) -> Result<bool, StoreError> {
        let p = self.ref_path(r);
        match std::fs::remove_file(&p) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io(&p, e)),
        }
    }

    /// Puts what one pull verified into the store, durably and in an order that keeps every
    /// reader safe: the layers' and blobs' contents and the records are written under `tmp/`
    /// (`work`), the file system is synced once, then layers and blobs are renamed into place
    /// (each rename synced), and only then are the records (a record is what makes an image
    /// present). A crash at any point leaves complete entries or leftovers in `tmp/`.
    /// A layer another pull put in place meanwhile wins; ours is dropped. A record that says
    /// what the stored one says is not written again.
    pub fn commit(&self, work: &Path, batch: Commit) -> Result<(), StoreError> {
        let mut blobs = Vec::new();
        for (d, bytes) in &batch.blobs {
            let got = Digest::of(bytes);
            if &got != d {
                return Err(StoreError::Corrupt(
                    self.blob_path(d),
                    format!("content hashes to {got}"),
                ));
            }
            if self.blob_path(d).exists() {
                continue;
            }
            let tmp = work.join(format!("blob-{}", d.hex()));
            write_new(&tmp, bytes)?;
            blobs.push((tmp, self.blob_path(d)));
        }
        let mut records = Vec::new();
        for (r, rec) in &batch.records {
            if self.record(r).ok().flatten().as_ref() == Some(rec) {
                continue;
            }
            let dest = self.ref_path(r);
            let parent = dest.parent().expect("a record has a parent");
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            let tmp = work.join(format!("record-{}", records.len()));
            write_new(
                &tmp,
                &serde_json::to_vec_pretty(rec).expect("a record serialises"),
            )?;
            records.push((tmp, dest));
        }
        if batch.layers.is_empty() && blobs.is_empty() && records.is_empty() {
            return Ok(());
        }
        // One syncfs for everything below `work`: far cheaper than an fsync per file of every
        // layer, and every later rename names only synced content.
        let fd = rfs::open(
            work,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(work, e))?;
        rfs::syncfs(fd.as_fd()).map_err(|e| io(work, e))?;
        for (unpacked, diff_id) in &batch.layers {
            let dest = self.layer_path(diff_id);
            match atomicfile::rename(unpacked, &dest) {
                Ok(()) => {}
                // The rename itself failed (the error names the destination) where another
                // pull's layer is: it wins.
                Err(e) if e.path == dest && dest.is_dir() => {}
                Err(e) => return Err(e.into()),
            }
        }
        for (tmp, dest) in blobs.iter().chain(&records) {
            atomicfile::rename(tmp, dest)?;
        }
        Ok(())
    }

    /// Deletes blobs and layers no record reaches. Returns (blobs, layers) removed.
    pub fn gc(&self) -> Result<(usize, usize), StoreError> {
        let _lock = self.lock_store(true)?;
        let (records, errs) = self.list();
        if let Some(e) = errs.into_iter().next() {
            // A record we cannot read might hold on to anything: remove nothing.
            return Err(e);
        }
        let mut blobs = std::collections::HashSet::new();
        let mut layers = std::collections::HashSet::new();
        for rec in &records {
            blobs.insert(rec.digest.hex().to_string());
            blobs.insert(rec.manifest.hex().to_string());
            if let Ok(Some(body)) = self.read_blob(&rec.manifest)
                && let Ok(crate::image::manifest::Manifest::Image { config, .. }) =
                    crate::image::manifest::Manifest::parse(&body, "")
            {
                blobs.insert(config.digest.hex().to_string());
                if let Ok(Some(c)) = self.read_blob(&config.digest)
                    && let Ok(c) = crate::image::manifest::ImageConfig::parse(&c)
                {
                    layers.extend(c.rootfs.diff_ids.iter().map(|d| d.hex().to_string()));
                }
            }
        }
        let sweep =
            |dir: PathBuf, keep: &std::collections::HashSet<String>| -> Result<usize, StoreError> {
                let mut n = 0;
                let rd = match std::fs::read_dir(&dir) {
                    Ok(rd) => rd,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
                    Err(e) => return Err(io(&dir, e)),
                };
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if keep.contains(&name) {
                        continue;
                    }
                    let p = e.path();
                    let r = if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                        std::fs::remove_dir_all(&p)
                    } else {
                        std::fs::remove_file(&p)
                    };
                    r.map_err(|e| io(&p, e))?;
                    n += 1;
                }
                Ok(n)
            };
        let b = sweep(self.root.join("blobs/sha256"), &blobs)?;
        let l = sweep(self.root.join("layers/sha256"), &layers)?;
        Ok((b, l))
    }
}

/// What one pull brings to the store (see [`Store::commit`]).
#[derive(Debug, Default)]
pub struct Commit {
    /// Unpacked, verified layer directories under the pull's `tmp/` work, by `diff_id`.
    pub layers: Vec<(PathBuf, Digest)>,
    /// Manifests, indexes and the config, checked again against their digests here.
    pub blobs: Vec<(Digest, Vec<u8>)>,
    /// Written last, after everything they name.
    pub records: Vec<(Reference, RefRecord)>,
}

fn write_new(p: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(p)
        .map_err(|e| io(p, e))?;
    f.write_all(bytes).map_err(|e| io(p, e))
}
