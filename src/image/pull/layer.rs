//! The unpack stage: a layer blob that already matched its digest, decompressed and applied to an
//! empty directory, with the uncompressed stream checked against the config's `diff_id`. The
//! unpacker therefore only ever reads bytes the registry's manifest vouched for; the layer is still
//! hostile input (src/image/unpack.rs).

use super::blob::BUF;
use crate::common::pull_limits::Limits;
use crate::image::digest::{Digest, HashingReader};
use crate::image::error::PullErrorKind;
use crate::image::manifest::{Compression, Descriptor};
use crate::image::store::StoreError;
use crate::image::unpack::bounds::{Bounded, Room, Violation};
use crate::image::unpack::{UnpackError, Unpacker};
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The bytes one pull may still write: its layer, its image, and the store's free space.
pub struct PullRoom<'a> {
    pub limits: &'a Limits,
    /// Every layer of this pull so far, uncompressed.
    pub image: &'a AtomicU64,
    /// The store's root, for statvfs.
    pub store: PathBuf,
    pub layer: u64,
}

impl Room for PullRoom<'_> {
    fn grow(&mut self, n: u64) -> Result<(), Violation> {
        let l = self.limits;
        self.layer += n;
        if self.layer > l.max_layer_bytes {
            return Err(Violation::TooLarge(format!(
                "a layer is larger than {} bytes uncompressed (registries.limits.maxLayerBytes)",
                l.max_layer_bytes
            )));
        }
        if self.image.fetch_add(n, Ordering::Relaxed) + n > l.max_image_bytes {
            return Err(Violation::TooLarge(format!(
                "the image is larger than {} bytes uncompressed (registries.limits.maxImageBytes)",
                l.max_image_bytes
            )));
        }
        store_has_room(&self.store, 0, l.store_reserve_percent).map_err(Violation::NoRoom)
    }
}

/// Whether `more` bytes fit on the store's file system and leave `reserve_percent` of it free.
pub fn store_has_room(store: &Path, more: u64, reserve_percent: u8) -> Result<(), String> {
    let Ok(st) = rustix::fs::statvfs(store) else {
        return Ok(()); // the writes themselves will say what is wrong
    };
    let size = st.f_blocks.saturating_mul(st.f_frsize);
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    let keep = size / 100 * u64::from(reserve_percent);
    if free.saturating_sub(more) < keep {
        return Err(format!(
            "the image store's file system has {free} of {size} bytes free{}; a pull leaves at \
             least {reserve_percent}% free (registries.limits.storeReservePercent)",
            if more > 0 {
                format!(" and the layers to fetch need {more}")
            } else {
                String::new()
            }
        ));
    }
    Ok(())
}

/// Applies the verified blob file `blob` (the layer `desc`) to the new directory `dest`, within
/// `room`.
pub fn unpack(
    blob: &Path,
    desc: &Descriptor,
    diff_id: &Digest,
    dest: &Path,
    room: impl Room,
) -> Result<(), PullErrorKind> {
    let store_err = |p: &Path, e| super::store_kind(StoreError::Io(p.to_path_buf(), e));
    let comp = Compression::of(&desc.media_type).map_err(PullErrorKind::Invalid)?;
    std::fs::create_dir(dest).map_err(|e| store_err(dest, e))?;
    let file = std::fs::File::open(blob).map_err(|e| store_err(blob, e))?;
    let compressed = BufReader::with_capacity(BUF, file);
    let decoder: Box<dyn Read> = match comp {
        Compression::None => Box::new(compressed),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(compressed)),
        Compression::Zstd => Box::new(
            ruzstd::decoding::StreamingDecoder::new(compressed)
                .map_err(|e| PullErrorKind::Invalid(format!("layer {}: zstd: {e}", desc.digest)))?,
        ),
    };
    let mut plain = HashingReader::new(Bounded::new(decoder, room));
    let mut u = Unpacker::new(dest).map_err(|e| layer_kind(&desc.digest, e))?;
    let applied = u.apply(&mut plain);
    if let Some(v) = plain.get_ref().violation() {
        return Err(violation_kind(&desc.digest, v));
    }
    applied.map_err(|e| layer_kind(&desc.digest, e))?;
    // The rest of the tar stream (padding after the end marker) is part of the diff_id.
    let drained = io::copy(&mut plain, &mut io::sink());
    if let Some(v) = plain.get_ref().violation() {
        return Err(violation_kind(&desc.digest, v));
    }
    drained.map_err(|e| PullErrorKind::Invalid(format!("layer {}: {e}", desc.digest)))?;
    let got = plain.finish().0;
    if &got != diff_id {
        return Err(PullErrorKind::Digest {
            what: format!("the uncompressed layer {}", desc.digest),
            expected: diff_id.clone(),
            got: got.to_string(),
        });
    }
    Ok(())
}

fn violation_kind(layer: &Digest, v: &Violation) -> PullErrorKind {
    match v {
        Violation::TooLarge(m) => PullErrorKind::TooLarge(format!("layer {layer}: {m}")),
        Violation::NoRoom(m) => PullErrorKind::NoSpace(m.clone()),
        v => PullErrorKind::Invalid(format!("layer {layer}: {v}")),
    }
}

fn layer_kind(layer: &Digest, error: UnpackError) -> PullErrorKind {
    if error.no_space {
        return PullErrorKind::NoSpace(error.to_string());
    }
    PullErrorKind::Layer {
        layer: layer.clone(),
        error,
    }
}
