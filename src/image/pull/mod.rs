//! Pulling an image into the store: resolve the name, pick this host's manifest, fetch the config,
//! then the layers in two stages that overlap: each missing layer's blob is downloaded into the
//! pull's work directory and checked against its digest ([`blob`]), and as soon as it matches it
//! is unpacked and checked against its `diff_id` ([`layer`]) while the next downloads go on
//! ([`pipeline`]). Everything the pull verified enters the store together, with one `syncfs`
//! ([`Store::commit`]).

mod blob;
mod layer;
pub mod pipeline;

use super::digest::Digest;
use super::error::{PullError, PullErrorKind};
use super::manifest::{CONFIG_MAX, Descriptor, ImageConfig, Manifest, Platform};
use super::reference::Reference;
use super::registry::Client;
use super::store::write::{Commit, Lock, is_no_space};
use super::store::{RefRecord, ResolvedImage, Store, StoreError};
use super::transfer::Budget;
use crate::common::registries::Endpoint;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};

/// Layer downloads at the same time: they overlap the network's latency with each other and with
/// the unpacking; more buys little on small hosts.
const FETCHERS: usize = 3;
/// At most this many layers unpacked at the same time, however many cores there are.
const UNPACKERS: usize = 8;

/// What a pull reports as it goes (for a progress display).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Resolved {
        digest: Digest,
        layers: usize,
    },
    LayerStart {
        digest: Digest,
        size: u64,
    },
    LayerBytes {
        digest: Digest,
        done: u64,
    },
    /// `cached`: it was already in the store.
    LayerDone {
        digest: Digest,
        cached: bool,
    },
}

/// What a pull on this node needs from its configuration: the registries client with the node's
/// credentials, and the registries node policy allows. Loaded afresh for each pull by its caller,
/// so an edited config applies without a restart.
pub struct NodePull {
    pub client: Client,
    pub allowed_registries: Option<Vec<String>>,
}

impl NodePull {
    pub fn load(paths: &crate::common::paths::Paths) -> Result<NodePull, String> {
        NodePull::load_with(paths, crate::image::auth::Keyring::default())
    }

    /// As [`Self::load`], with `first` (a pod's pull secrets) tried before the node's credentials.
    pub fn load_with(
        paths: &crate::common::paths::Paths,
        first: crate::image::auth::Keyring,
    ) -> Result<NodePull, String> {
        let config = crate::common::config::Config::load(&paths.config_file())
            .map_err(|e| e.to_string())?
            .config;
        if let Some(p) = config.registries.problems().into_iter().next() {
            return Err(format!("{}: {p}", paths.config_file().display()));
        }
        let creds_file = config
            .registries
            .credentials
            .clone()
            .unwrap_or_else(|| crate::common::registries::DEFAULT_CREDENTIALS.into());
        let keyring = crate::image::auth::Keyring::load_node_file(
            &paths.host(&creds_file.to_string_lossy()),
        )?;
        Ok(NodePull {
            allowed_registries: config.effective_policy().registries,
            client: Client::new(config.registries.clone(), first.then(keyring)),
        })
    }
}

pub struct Puller<'a> {
    pub store: &'a Store,
    pub client: &'a Client,
    pub platform: Platform,
    /// `policy.registries`: `None` allows any.
    pub allowed_registries: Option<&'a [String]>,
    pub progress: Option<&'a (dyn Fn(&Progress) + Sync)>,
}

/// What the registry says the image is, before any layer is fetched.
struct Resolved {
    ep: Endpoint,
    /// The pull's time bounds, started at its first request.
    budget: Budget,
    /// The digest the name resolved to (an index or a manifest).
    top: Digest,
    /// This host's manifest.
    manifest: Digest,
    /// The manifest (and index) and config, verified, to be stored.
    blobs: Vec<(Digest, Vec<u8>)>,
    layers: Vec<Descriptor>,
    diff_ids: Vec<Digest>,
}

/// A directory under the store's `tmp/`, removed with whatever is left in it when dropped.
struct Work(PathBuf);

impl Work {
    fn new(store: &Store) -> Result<Work, PullErrorKind> {
        store.temp_dir().map(Work).map_err(store_kind)
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A layer this pull fetches: its index in the manifest, the lock that makes it ours, and where
/// its blob and unpacked directory go.
struct LayerJob {
    index: usize,
    _lock: Lock,
    work: Work,
}

impl Puller<'_> {
    /// Pulls `r` (always asks the registry: the caller decides by pull policy whether to).
    pub fn pull(&self, r: &Reference) -> Result<ResolvedImage, PullError> {
        let fail = |kind| PullError::new(r, kind);
        self.check_allowed(r).map_err(fail)?;
        self.store.create().map_err(|e| fail(store_kind(e)))?;
        let _shared = self
            .store
            .lock_store(false)
            .map_err(|e| fail(store_kind(e)))?;
        self.store.clean_tmp();
        let res = self.resolve(r).map_err(fail)?;
        self.report(Progress::Resolved {
            digest: res.top.clone(),
            layers: res.layers.len(),
        });
        let work = Work::new(self.store).map_err(fail)?;
        let rec = RefRecord {
            reference: r.to_string(),
            digest: res.top.clone(),
            manifest: res.manifest.clone(),
        };
        // The name, and the name pinned to its digest (what the pod's imageID says).
        let mut records = vec![(r.clone(), rec.clone())];
        let pinned = r.with_digest(&res.top);
        if &pinned != r {
            let prec = RefRecord {
                reference: pinned.to_string(),
                ..rec.clone()
            };
            records.push((pinned, prec));
        }
        let mut tail = Some(Commit {
            layers: Vec::new(),
            blobs: res.blobs.clone(),
            records,
        });

        // Each missing layer once (an image may list one twice).
        let mut pending: Vec<usize> = Vec::new();
        for (i, d) in res.diff_ids.iter().enumerate() {
            if self.store.layer_path(d).is_dir() {
                self.layer_done(&res.layers[i], true);
            } else if !pending.iter().any(|&j| &res.diff_ids[j] == d) {
                pending.push(i);
            }
        }
        // The blobs to fetch must fit beside the store's reserve (each is deleted once unpacked,
        // and the unpacking is checked as it goes).
        let fetch: u64 = pending.iter().map(|&i| res.layers[i].size).sum();
        layer::store_has_room(
            self.store.root(),
            fetch,
            self.client.settings().limits.store_reserve_percent,
        )
        .map_err(|m| fail(PullErrorKind::NoSpace(m)))?;
        let written = AtomicU64::new(0);
        // First the layers no other pull is fetching; then, holding none of ours any more, the
        // ones that were busy, waiting for their locks in one order (so two pulls never wait on
        // each other), fetched only if the other pull did not store them.
        let mut blocking = false;
        loop {
            let (jobs, busy) = self.claim(&res, &pending, blocking).map_err(fail)?;
            let layers = self
                .fetch_and_unpack(r, &res, &jobs, &written)
                .map_err(fail)?;
            let mut batch = Commit {
                layers,
                ..Commit::default()
            };
            if busy.is_empty() {
                batch = Commit {
                    layers: batch.layers,
                    ..tail.take().expect("committed once")
                };
            }
            self.store
                .commit(&work.0, batch)
                .map_err(|e| fail(store_kind(e)))?;
            drop(jobs);
            if busy.is_empty() {
                break;
            }
            pending = busy;
            blocking = true;
        }
        match self.store.resolve_record(r, &rec) {
            Ok(Some(img)) => Ok(img),
            Ok(None) => Err(fail(PullErrorKind::Store(
                "the image vanished right after its pull (a prune?)".into(),
            ))),
            Err(e) => Err(fail(store_kind(e))),
        }
    }

    /// The fetch stage alone: resolves `r` and downloads its manifest, config and layer blobs
    /// into the directory `dir` (named by their digests' hex), each checked against its digest
    /// and synced, as `skopeo copy` to a `dir:` does. Nothing enters the store. The image
    /// benchmark compares the two (docs/benchmarks.md).
    pub fn download(&self, r: &Reference, dir: &Path) -> Result<Vec<PathBuf>, PullError> {
        let fail = |kind| PullError::new(r, kind);
        self.check_allowed(r).map_err(fail)?;
        let res = self.resolve(r).map_err(fail)?;
        let indices: Vec<usize> = (0..res.layers.len()).collect();
        // The manifest and config are written beside the layer downloads: their fsyncs wait
        // for the disk, not for the network.
        let (small, layers) = std::thread::scope(|s| {
            let small = s.spawn(|| {
                res.blobs
                    .iter()
                    .map(|(d, bytes)| {
                        let p = dir.join(d.hex());
                        write_synced(&p, |f| std::io::Write::write_all(f, bytes)).map(|()| p)
                    })
                    .collect::<Result<Vec<PathBuf>, PullErrorKind>>()
            });
            let layers = pipeline::run(
                &indices,
                FETCHERS,
                1,
                |&i, cancel| {
                    let desc = &res.layers[i];
                    let p = dir.join(desc.digest.hex());
                    self.fetch_blob(r, &res, desc, &p, cancel, true).map(|()| p)
                },
                |_, p| Ok(p),
            );
            (
                small.join().expect("the blob writer does not panic"),
                layers,
            )
        });
        let mut out = small.map_err(fail)?;
        out.extend(layers.map_err(fail)?);
        Ok(out)
    }

    fn check_allowed(&self, r: &Reference) -> Result<(), PullErrorKind> {
        match self.allowed_registries {
            Some(allowed) if !allowed.iter().any(|a| a == &r.registry) => {
                Err(PullErrorKind::NotAllowed {
                    registry: r.registry.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The manifest for this host (through the index, if the name is one), and its config.
    fn resolve(&self, r: &Reference) -> Result<Resolved, PullErrorKind> {
        let limits = &self.client.settings().limits;
        let budget = Budget::start(limits);
        let (ep, body, ct) = self.client.manifest(r, &r.manifest_key(), &budget)?;
        let top = Digest::of(&body);
        if let Some(want) = &r.digest
            && &top != want
        {
            return Err(PullErrorKind::Digest {
                what: "the manifest".into(),
                expected: want.clone(),
                got: top.to_string(),
            });
        }
        let parsed = Manifest::parse(&body, &ct).map_err(PullErrorKind::Invalid)?;
        let mut blobs = vec![(top.clone(), body)];
        let (manifest, config, layers) = match parsed {
            Manifest::Image { config, layers } => (top.clone(), config, layers),
            Manifest::Index(entries) => {
                let chosen =
                    super::platform::select(&entries, &self.platform).ok_or_else(|| {
                        PullErrorKind::NoPlatform {
                            want: self.platform.to_string(),
                            available: entries
                                .iter()
                                .filter_map(|e| e.platform.as_ref().map(|p| p.to_string()))
                                .collect(),
                        }
                    })?;
                let key = chosen.digest.to_string();
                let (body, ct) = self.client.manifest_at(&ep, r, &key, &budget)?;
                let got = Digest::of(&body);
                if got != chosen.digest {
                    return Err(PullErrorKind::Digest {
                        what: format!("the {} manifest", self.platform),
                        expected: chosen.digest.clone(),
                        got: got.to_string(),
                    });
                }
                match Manifest::parse(&body, &ct).map_err(PullErrorKind::Invalid)? {
                    Manifest::Image { config, layers } => {
                        blobs.push((got.clone(), body));
                        (got, config, layers)
                    }
                    Manifest::Index(_) => {
                        return Err(PullErrorKind::Invalid("an index inside an index".into()));
                    }
                }
            }
        };
        if config.size > CONFIG_MAX {
            return Err(PullErrorKind::Invalid(format!(
                "config larger than {CONFIG_MAX} bytes"
            )));
        }
        let cbody = self
            .client
            .blob_bytes(&ep, r, &config.digest, config.size.max(1), &budget)?;
        let got = Digest::of(&cbody);
        if got != config.digest || cbody.len() as u64 != config.size {
            return Err(PullErrorKind::Digest {
                what: "the image config".into(),
                expected: config.digest.clone(),
                got: format!("{got}, {} bytes", cbody.len()),
            });
        }
        let image_config = ImageConfig::parse(&cbody).map_err(PullErrorKind::Invalid)?;
        let diff_ids = image_config.rootfs.diff_ids;
        if diff_ids.len() != layers.len() {
            return Err(PullErrorKind::Invalid(format!(
                "the config lists {} layers, the manifest {}",
                diff_ids.len(),
                layers.len()
            )));
        }
        blobs.push((config.digest.clone(), cbody));
        // What the manifest says the layers weigh, against the limits, before any is fetched.
        for l in &layers {
            if l.size > limits.max_layer_bytes {
                return Err(PullErrorKind::TooLarge(format!(
                    "layer {} is {} bytes, more than {} (registries.limits.maxLayerBytes)",
                    l.digest, l.size, limits.max_layer_bytes
                )));
            }
        }
        let total = layers.iter().fold(0u64, |t, l| t.saturating_add(l.size));
        if total > limits.max_image_bytes {
            return Err(PullErrorKind::TooLarge(format!(
                "its layers are {total} bytes, more than {} (registries.limits.maxImageBytes)",
                limits.max_image_bytes
            )));
        }
        Ok(Resolved {
            ep,
            budget,
            top,
            manifest,
            blobs,
            layers,
            diff_ids,
        })
    }

    /// Locks the `pending` layers for this pull. Without `blocking`, a layer another pull holds
    /// is returned as busy; with it, the locks are waited for in digest order. A layer found
    /// stored once its lock is held needs nothing more.
    fn claim(
        &self,
        res: &Resolved,
        pending: &[usize],
        blocking: bool,
    ) -> Result<(Vec<LayerJob>, Vec<usize>), PullErrorKind> {
        let mut order = pending.to_vec();
        order.sort_by(|&a, &b| res.diff_ids[a].cmp(&res.diff_ids[b]));
        let (mut jobs, mut busy) = (Vec::new(), Vec::new());
        for i in order {
            let d = &res.diff_ids[i];
            let lock = if blocking {
                Some(self.store.lock_digest(d).map_err(store_kind)?)
            } else {
                self.store.try_lock_digest(d).map_err(store_kind)?
            };
            let Some(lock) = lock else {
                busy.push(i);
                continue;
            };
            if self.store.layer_path(d).is_dir() {
                self.layer_done(&res.layers[i], true); // another pull stored it meanwhile
                continue;
            }
            jobs.push(LayerJob {
                index: i,
                _lock: lock,
                work: Work::new(self.store)?,
            });
        }
        jobs.sort_by_key(|j| j.index);
        Ok((jobs, busy))
    }

    /// Downloads and unpacks `jobs`' layers, overlapping the two; returns the unpacked
    /// directories with their diff_ids, for [`Store::commit`].
    fn fetch_and_unpack(
        &self,
        r: &Reference,
        res: &Resolved,
        jobs: &[LayerJob],
        written: &AtomicU64,
    ) -> Result<Vec<(PathBuf, Digest)>, PullErrorKind> {
        // Unpacking is the CPU-heavy stage (decompression, hashing, file creation): one worker
        // per core, at most UNPACKERS (each holds its buffers and decoder state).
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(UNPACKERS));
        pipeline::run(
            jobs,
            FETCHERS,
            workers,
            |j, cancel| {
                let blob = j.work.0.join("blob");
                let desc = &res.layers[j.index];
                self.fetch_blob(r, res, desc, &blob, cancel, false)
                    .map(|()| blob)
            },
            |j, blob| {
                let dest = j.work.0.join("layer");
                let (desc, diff_id) = (&res.layers[j.index], &res.diff_ids[j.index]);
                let room = layer::PullRoom {
                    limits: &self.client.settings().limits,
                    image: written,
                    store: self.store.root().to_path_buf(),
                    layer: 0,
                };
                layer::unpack(&blob, desc, diff_id, &dest, room)?;
                // The compressed copy is not kept: free its space before the next layer.
                let _ = std::fs::remove_file(&blob);
                self.layer_done(desc, false);
                Ok((dest, diff_id.clone()))
            },
        )
    }

    fn fetch_blob(
        &self,
        r: &Reference,
        res: &Resolved,
        desc: &Descriptor,
        dest: &Path,
        cancel: &AtomicBool,
        sync: bool,
    ) -> Result<(), PullErrorKind> {
        self.report(Progress::LayerStart {
            digest: desc.digest.clone(),
            size: desc.size,
        });
        let body = self.client.blob(&res.ep, r, &desc.digest, &res.budget)?;
        blob::fetch(body, desc, dest, cancel, self.progress, sync)
    }

    fn layer_done(&self, desc: &Descriptor, cached: bool) {
        self.report(Progress::LayerDone {
            digest: desc.digest.clone(),
            cached,
        });
    }

    fn report(&self, p: Progress) {
        if let Some(f) = self.progress {
            f(&p);
        }
    }
}

/// Writes the new file `p` with `write` and syncs it.
fn write_synced(
    p: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), PullErrorKind> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(p)
        .map_err(|e| store_kind(StoreError::Io(p.to_path_buf(), e)))?;
    write(&mut f)
        .and_then(|()| f.sync_all())
        .map_err(|e| store_kind(StoreError::Io(p.to_path_buf(), e)))
}

fn store_kind(e: StoreError) -> PullErrorKind {
    if is_no_space(&e) {
        PullErrorKind::NoSpace(e.to_string())
    } else {
        PullErrorKind::Store(e.to_string())
    }
}

/// A progress callback.
type Report<'a> = dyn Fn(&Progress) + Sync + 'a;
