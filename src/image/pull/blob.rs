//! The fetch stage: one layer blob from the registry into a file under the pull's `tmp/` work,
//! hashed and counted as it streams. The file is only handed on when its size and digest are the
//! descriptor's; a stream longer than the descriptor says is refused as soon as it is, never
//! truncated into something that might verify.

use super::{Progress, Report};
use crate::image::digest::Digest;
use crate::image::error::PullErrorKind;
use crate::image::manifest::Descriptor;
use crate::image::store::StoreError;
use sha2::{Digest as _, Sha256};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Read and write size: large enough that a 100 MB layer is a few hundred system calls.
pub const BUF: usize = 1 << 20;

/// Copies `body` (the blob `desc` as the registry sends it) into the new file `dest`, checking
/// its size and digest. `cancel`: another layer of the pull failed; stop early. `sync`: the
/// file is synced once complete (a pull's blobs need not be: they are unpacked, then deleted).
pub fn fetch(
    body: impl Read,
    desc: &Descriptor,
    dest: &Path,
    cancel: &AtomicBool,
    progress: Option<&Report>,
    sync: bool,
) -> Result<(), PullErrorKind> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dest)
        .map_err(|e| super::store_kind(StoreError::Io(dest.to_path_buf(), e)))?;
    let (got, count) = copy_verified(body, desc, (&mut file, dest), cancel, progress)?;
    if count != desc.size {
        return Err(PullErrorKind::Size {
            what: format!("layer {}", desc.digest),
            expected: desc.size,
            got: count,
        });
    }
    if got != desc.digest {
        return Err(PullErrorKind::Digest {
            what: format!("layer {}", desc.digest),
            expected: desc.digest.clone(),
            got: got.to_string(),
        });
    }
    if sync {
        file.sync_all()
            .map_err(|e| super::store_kind(StoreError::Io(dest.to_path_buf(), e)))?;
    }
    Ok(())
}

/// The stream into `out` (a writer and its name), at most `desc.size` bytes (one more is an
/// error): its digest and length.
fn copy_verified(
    mut body: impl Read,
    desc: &Descriptor,
    (out, out_path): (&mut impl Write, &Path),
    cancel: &AtomicBool,
    progress: Option<&Report>,
) -> Result<(Digest, u64), PullErrorKind> {
    let mut buf = vec![0u8; BUF];
    let mut hasher = Sha256::new();
    let mut count: u64 = 0;
    let read_err = |e: io::Error| {
        let m = format!("layer {}: reading the blob: {e}", desc.digest);
        if e.kind() == io::ErrorKind::TimedOut {
            PullErrorKind::Timeout(m)
        } else {
            PullErrorKind::Registry(m)
        }
    };
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(PullErrorKind::Invalid("cancelled".into()));
        }
        // Fill the buffer (the body hands out TLS records of 16 KiB): fewer, larger writes.
        let mut filled = 0;
        while filled < buf.len() {
            match body.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(read_err(e)),
            }
        }
        if filled == 0 {
            return Ok((Digest::from_sha256(hasher), count));
        }
        count += filled as u64;
        if count > desc.size {
            return Err(PullErrorKind::Invalid(format!(
                "layer {} is larger than its descriptor says ({} bytes); refused",
                desc.digest, desc.size
            )));
        }
        hasher.update(&buf[..filled]);
        out.write_all(&buf[..filled])
            .map_err(|e| super::store_kind(StoreError::Io(out_path.to_path_buf(), e)))?;
        if let Some(f) = progress {
            f(&Progress::LayerBytes {
                digest: desc.digest.clone(),
                done: count,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(bytes: &[u8], size: u64) -> Descriptor {
        Descriptor {
            media_type: "application/vnd.oci.image.layer.v1.tar+gzip".into(),
            digest: Digest::of(bytes),
            size,
            platform: None,
            urls: Vec::new(),
        }
    }

    #[test]
    fn a_blob_is_its_digest_and_size_or_refused() {
        let no = AtomicBool::new(false);
        let body = vec![5u8; 3 * BUF + 17];
        let mut out = Vec::new();
        let d = desc(&body, body.len() as u64);
        let (got, n) = copy_verified(&body[..], &d, (&mut out, Path::new("t")), &no, None).unwrap();
        assert_eq!((got, n), (d.digest.clone(), body.len() as u64));
        assert_eq!(out, body);
        // One byte more than the descriptor: refused, whatever the digest would say.
        let short = desc(&body, body.len() as u64 - 1);
        let e = copy_verified(
            &body[..],
            &short,
            (&mut Vec::new(), Path::new("t")),
            &no,
            None,
        )
        .unwrap_err();
        assert!(e_text(&e).contains("larger than its descriptor"), "{e:?}");
        // Cancelled: stops before reading.
        let yes = AtomicBool::new(true);
        assert!(
            copy_verified(&body[..], &d, (&mut Vec::new(), Path::new("t")), &yes, None).is_err()
        );
    }

    fn e_text(e: &PullErrorKind) -> String {
        format!("{e:?}")
    }
}
