//! Pulling an image into the store: resolve the name, pick this host's manifest, fetch the config,
//! then stream each missing layer from the registry through its digest check, the decompressor and
//! the diff_id check into the unpacker, and keep it only when all three agree.

use super::digest::{Digest, HashingReader};
use super::error::{PullError, PullErrorKind};
use super::manifest::{CONFIG_MAX, Compression, Descriptor, ImageConfig, Manifest, Platform};
use super::reference::Reference;
use super::registries::Endpoint;
use super::registry::Client;
use super::store::write::is_no_space;
use super::store::{RefRecord, ResolvedImage, Store, StoreError};
use super::unpack::Unpacker;
use std::io::{self, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Layers fetched at the same time (network and CPU overlap; more buys little on small hosts).
const PARALLEL_LAYERS: usize = 3;
const READ_BUF: usize = 256 << 10;

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
            .unwrap_or_else(|| crate::image::registries::DEFAULT_CREDENTIALS.into());
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

impl Puller<'_> {
    /// Pulls `r` (always asks the registry: the caller decides by pull policy whether to).
    pub fn pull(&self, r: &Reference) -> Result<ResolvedImage, PullError> {
        let fail = |kind| PullError::new(r, kind);
        if let Some(allowed) = self.allowed_registries
            && !allowed.iter().any(|a| a == &r.registry)
        {
            return Err(fail(PullErrorKind::NotAllowed {
                registry: r.registry.clone(),
            }));
        }
        self.store.create().map_err(|e| fail(store_kind(e)))?;
        let _shared = self
            .store
            .lock_store(false)
            .map_err(|e| fail(store_kind(e)))?;
        self.store.clean_tmp();

        let (ep, body, ct) = self.client.manifest(r, &r.manifest_key()).map_err(fail)?;
        let top = Digest::of(&body);
        if let Some(want) = &r.digest
            && &top != want
        {
            return Err(fail(PullErrorKind::Digest {
                what: "the manifest".into(),
                expected: want.clone(),
                got: top.to_string(),
            }));
        }
        let parsed = Manifest::parse(&body, &ct).map_err(|e| fail(PullErrorKind::Invalid(e)))?;
        let mut blobs = vec![(top.clone(), body)];
        let (manifest_digest, config, layers) = match parsed {
            Manifest::Image { config, layers } => (top.clone(), config, layers),
            Manifest::Index(entries) => {
                let chosen =
                    super::platform::select(&entries, &self.platform).ok_or_else(|| {
                        fail(PullErrorKind::NoPlatform {
                            want: self.platform.to_string(),
                            available: entries
                                .iter()
                                .filter_map(|e| e.platform.as_ref().map(|p| p.to_string()))
                                .collect(),
                        })
                    })?;
                let key = chosen.digest.to_string();
                let (body, ct) = self.client.manifest_at(&ep, r, &key).map_err(fail)?;
                let got = Digest::of(&body);
                if got != chosen.digest {
                    return Err(fail(PullErrorKind::Digest {
                        what: format!("the {} manifest", self.platform),
                        expected: chosen.digest.clone(),
                        got: got.to_string(),
                    }));
                }
                match Manifest::parse(&body, &ct).map_err(|e| fail(PullErrorKind::Invalid(e)))? {
                    Manifest::Image { config, layers } => {
                        blobs.push((got.clone(), body));
                        (got, config, layers)
                    }
                    Manifest::Index(_) => {
                        return Err(fail(PullErrorKind::Invalid(
                            "an index inside an index".into(),
                        )));
                    }
                }
            }
        };
        if config.size > CONFIG_MAX {
            return Err(fail(PullErrorKind::Invalid(format!(
                "config larger than {CONFIG_MAX} bytes"
            ))));
        }
        let cbody = self
            .client
            .blob_bytes(&ep, r, &config.digest, config.size.max(1))
            .map_err(fail)?;
        let got = Digest::of(&cbody);
        if got != config.digest || cbody.len() as u64 != config.size {
            return Err(fail(PullErrorKind::Digest {
                what: "the image config".into(),
                expected: config.digest.clone(),
                got: format!("{got}, {} bytes", cbody.len()),
            }));
        }
        let image_config =
            ImageConfig::parse(&cbody).map_err(|e| fail(PullErrorKind::Invalid(e)))?;
        let diff_ids = &image_config.rootfs.diff_ids;
        if diff_ids.len() != layers.len() {
            return Err(fail(PullErrorKind::Invalid(format!(
                "the config lists {} layers, the manifest {}",
                diff_ids.len(),
                layers.len()
            ))));
        }
        blobs.push((config.digest.clone(), cbody));
        self.report(Progress::Resolved {
            digest: top.clone(),
            layers: layers.len(),
        });

        self.fetch_layers(&ep, r, &layers, diff_ids)?;

        for (d, b) in &blobs {
            self.store
                .write_blob(d, b)
                .map_err(|e| fail(store_kind(e)))?;
        }
        let rec = RefRecord {
            reference: r.to_string(),
            digest: top.clone(),
            manifest: manifest_digest,
        };
        // The name, and the name pinned to its digest (what the pod's imageID says).
        self.store
            .write_record(r, &rec)
            .map_err(|e| fail(store_kind(e)))?;
        let pinned = r.with_digest(&top);
        if &pinned != r {
            let prec = RefRecord {
                reference: pinned.to_string(),
                ..rec.clone()
            };
            self.store
                .write_record(&pinned, &prec)
                .map_err(|e| fail(store_kind(e)))?;
        }
        match self.store.resolve_record(r, &rec) {
            Ok(Some(img)) => Ok(img),
            Ok(None) => Err(fail(PullErrorKind::Store(
                "the image vanished right after its pull (a prune?)".into(),
            ))),
            Err(e) => Err(fail(store_kind(e))),
        }
    }

    fn report(&self, p: Progress) {
        if let Some(f) = self.progress {
            f(&p);
        }
    }

    fn fetch_layers(
        &self,
        ep: &Endpoint,
        r: &Reference,
        layers: &[Descriptor],
        diff_ids: &[Digest],
    ) -> Result<(), PullError> {
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let errors = std::sync::Mutex::new(Vec::new());
        let workers = PARALLEL_LAYERS.min(layers.len());
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= layers.len() || failed.load(Ordering::Relaxed) {
                            return;
                        }
                        if let Err(e) = self.fetch_layer(ep, r, &layers[i], &diff_ids[i]) {
                            failed.store(true, Ordering::Relaxed);
                            errors
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push((i, e));
                        }
                    }
                });
            }
        });
        let mut errors = errors.into_inner().unwrap_or_else(|p| p.into_inner());
        errors.sort_by_key(|(i, _)| *i);
        match errors.into_iter().next() {
            Some((_, kind)) => Err(PullError::new(r, kind)),
            None => Ok(()),
        }
    }

    fn fetch_layer(
        &self,
        ep: &Endpoint,
        r: &Reference,
        desc: &Descriptor,
        diff_id: &Digest,
    ) -> Result<(), PullErrorKind> {
        let done = || {
            self.report(Progress::LayerDone {
                digest: desc.digest.clone(),
                cached: true,
            })
        };
        if self.store.layer_path(diff_id).is_dir() {
            done();
            return Ok(());
        }
        let _lock = self.store.lock_digest(diff_id).map_err(store_kind)?;
        if self.store.layer_path(diff_id).is_dir() {
            done(); // another pull brought it while we waited
            return Ok(());
        }
        let comp = Compression::of(&desc.media_type).map_err(PullErrorKind::Invalid)?;
        self.report(Progress::LayerStart {
            digest: desc.digest.clone(),
            size: desc.size,
        });
        let body = self.client.blob(ep, r, &desc.digest)?;
        let tmp = self.store.temp_dir().map_err(store_kind)?;
        let result = self.unpack_stream(body, desc, diff_id, comp, &tmp.join("layer"));
        let result = result.and_then(|()| {
            self.store
                .commit_layer(&tmp.join("layer"), diff_id)
                .map(drop)
                .map_err(store_kind)
        });
        let _ = std::fs::remove_dir_all(&tmp);
        result?;
        self.report(Progress::LayerDone {
            digest: desc.digest.clone(),
            cached: false,
        });
        Ok(())
    }

    fn unpack_stream(
        &self,
        body: impl Read,
        desc: &Descriptor,
        diff_id: &Digest,
        comp: Compression,
        dest: &std::path::Path,
    ) -> Result<(), PullErrorKind> {
        std::fs::create_dir(dest).map_err(|e| store_kind(StoreError::Io(dest.to_path_buf(), e)))?;
        let oversize = Arc::new(AtomicBool::new(false));
        let bounded = Bounded {
            inner: body,
            left: desc.size,
            oversize: oversize.clone(),
            report: self.progress.map(|f| (f, desc.digest.clone(), 0u64)),
        };
        let mut compressed = HashingReader::new(BufReader::with_capacity(READ_BUF, bounded));
        let unpacked: Result<Digest, PullErrorKind> = (|| {
            let decoder: Box<dyn Read> = match comp {
                Compression::None => Box::new(&mut compressed),
                Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut compressed)),
                Compression::Zstd => Box::new(
                    ruzstd::decoding::StreamingDecoder::new(&mut compressed).map_err(|e| {
                        PullErrorKind::Invalid(format!("layer {}: zstd: {e}", desc.digest))
                    })?,
                ),
            };
            let mut plain = HashingReader::new(decoder);
            let mut u = Unpacker::new(dest).map_err(|e| layer_kind(&desc.digest, e))?;
            u.apply(&mut plain)
                .map_err(|e| layer_kind(&desc.digest, e))?;
            // The rest of the tar stream (padding after the end marker) is part of the diff_id.
            io::copy(&mut plain, &mut io::sink())
                .map_err(|e| PullErrorKind::Invalid(format!("layer {}: {e}", desc.digest)))?;
            Ok(plain.finish().0)
        })();
        // Whatever happened, read the blob to its end: a wrong digest is the real cause of most
        // decoding errors, and is what is reported then.
        let _ = io::copy(&mut compressed, &mut io::sink());
        let (count, (got, _)) = (compressed.count(), compressed.finish());
        if oversize.load(Ordering::Relaxed) {
            return Err(PullErrorKind::Invalid(format!(
                "layer {} is larger than its descriptor says ({} bytes); refused",
                desc.digest, desc.size
            )));
        }
        if got != desc.digest || count != desc.size {
            return Err(PullErrorKind::Digest {
                what: format!("layer {}", desc.digest),
                expected: desc.digest.clone(),
                got: format!("{got}, {count} of {} bytes", desc.size),
            });
        }
        let plain = unpacked?;
        if &plain != diff_id {
            return Err(PullErrorKind::Digest {
                what: format!("the uncompressed layer {}", desc.digest),
                expected: diff_id.clone(),
                got: plain.to_string(),
            });
        }
        Ok(())
    }
}

fn layer_kind(layer: &Digest, error: super::unpack::UnpackError) -> PullErrorKind {
    if error.no_space {
        return PullErrorKind::NoSpace(error.to_string());
    }
    PullErrorKind::Layer {
        layer: layer.clone(),
        error,
    }
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

/// Passes at most `left` bytes, and notes if the stream had more (a layer larger than its
/// descriptor is refused, never truncated into something that might verify).
struct Bounded<'a, R> {
    inner: R,
    left: u64,
    oversize: Arc<AtomicBool>,
    report: Option<(&'a Report<'a>, Digest, u64)>,
}

impl<R: Read> Read for Bounded<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            let mut probe = [0u8; 1];
            if self.inner.read(&mut probe)? > 0 {
                self.oversize.store(true, Ordering::Relaxed);
                return Err(io::Error::other(
                    "the layer is larger than its descriptor says",
                ));
            }
            return Ok(0);
        }
        let max = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.left -= n as u64;
        if let Some((f, d, done)) = &mut self.report {
            *done += n as u64;
            f(&Progress::LayerBytes {
                digest: d.clone(),
                done: *done,
            });
        }
        Ok(n)
    }
}
