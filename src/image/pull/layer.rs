//! The unpack stage: a layer blob that already matched its digest, decompressed and applied to an
//! empty directory, with the uncompressed stream checked against the config's `diff_id`. The
//! unpacker therefore only ever reads bytes the registry's manifest vouched for; the layer is still
//! hostile input (src/image/unpack.rs).

use super::blob::BUF;
use crate::image::digest::{Digest, HashingReader};
use crate::image::error::PullErrorKind;
use crate::image::manifest::{Compression, Descriptor};
use crate::image::store::StoreError;
use crate::image::unpack::{UnpackError, Unpacker};
use std::io::{self, BufReader, Read};
use std::path::Path;

/// Applies the verified blob file `blob` (the layer `desc`) to the new directory `dest`.
pub fn unpack(
    blob: &Path,
    desc: &Descriptor,
    diff_id: &Digest,
    dest: &Path,
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
    let mut plain = HashingReader::new(decoder);
    let mut u = Unpacker::new(dest).map_err(|e| layer_kind(&desc.digest, e))?;
    u.apply(&mut plain)
        .map_err(|e| layer_kind(&desc.digest, e))?;
    // The rest of the tar stream (padding after the end marker) is part of the diff_id.
    io::copy(&mut plain, &mut io::sink())
        .map_err(|e| PullErrorKind::Invalid(format!("layer {}: {e}", desc.digest)))?;
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

fn layer_kind(layer: &Digest, error: UnpackError) -> PullErrorKind {
    if error.no_space {
        return PullErrorKind::NoSpace(error.to_string());
    }
    PullErrorKind::Layer {
        layer: layer.clone(),
        error,
    }
}
