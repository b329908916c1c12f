//! The bounds of one layer's uncompressed tar stream, enforced on the bytes before the tar parser
//! sees them. The parser holds some entries whole in memory (GNU long names and link names, PAX
//! records) and would read any amount of data after the archive's end marker; a 1 MB gzip layer
//! can declare a 1 GiB name or carry 10 GiB of zeros. So this reader follows the archive's block
//! structure as the `tar` crate does (512-byte headers, contents rounded up to blocks, a PAX
//! `size` overriding the next entry's, the first all-zero header ending the archive) and refuses:
//!
//! - an extension entry (`L`, `K`, `x`, `g`) larger than [`SPECIAL_MAX`], as Go's `archive/tar`
//!   (what containerd unpacks with) refuses them;
//! - more than [`TRAILER_MAX`] bytes after the end marker (GNU tar pads to 10 KiB records);
//! - a stream longer than the layer's limit, or one that would leave the store's file system
//!   with less free space than the node keeps ([`Room`]).

use std::io::{self, Read};

/// Largest GNU long name/link or PAX header accepted (Go's `archive/tar` `maxSpecialFileSize`).
pub const SPECIAL_MAX: u64 = 1 << 20;
/// Bytes after the tar end marker that are still read (and hashed: they are part of the diff_id).
pub const TRAILER_MAX: u64 = 1 << 20;
const BLOCK: usize = 512;

/// Why the stream was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// An extension header larger than [`SPECIAL_MAX`]: its type letter and declared size.
    Special { kind: char, size: u64 },
    /// GNU sparse entries carry more headers after their own; they are refused anyway.
    Sparse,
    /// More than [`TRAILER_MAX`] bytes after the end marker.
    Trailer,
    /// The layer or the image is over its limit (the message names the setting).
    TooLarge(String),
    /// The store's file system would have less free space than the node keeps.
    NoRoom(String),
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::Special { kind, size } => write!(
                f,
                "a {} header of {size} bytes (at most {SPECIAL_MAX} are read)",
                match kind {
                    'L' => "GNU long name",
                    'K' => "GNU long link name",
                    'x' => "PAX",
                    _ => "PAX global",
                }
            ),
            Violation::Sparse => write!(f, "GNU sparse files are not supported"),
            Violation::Trailer => write!(
                f,
                "more than {TRAILER_MAX} bytes after the end of the tar archive"
            ),
            Violation::TooLarge(m) | Violation::NoRoom(m) => write!(f, "{m}"),
        }
    }
}

/// The byte budget of the stream: checked as it grows, every [`Room::CHECK_EVERY`] bytes.
pub trait Room {
    const CHECK_EVERY: u64 = 8 << 20;
    /// `n` more bytes of this layer were read: an error stops the layer.
    fn grow(&mut self, n: u64) -> Result<(), Violation>;
}

/// No budget (tests, fuzzing).
pub struct Unbounded;

impl Room for Unbounded {
    fn grow(&mut self, _: u64) -> Result<(), Violation> {
        Ok(())
    }
}

enum State {
    /// Filling a header block.
    Header { filled: usize },
    /// Inside an entry's content: bytes left, and whether they are kept (a PAX header's).
    Body { left: u64, keep: bool },
    /// After the end marker.
    Trailer { read: u64 },
}

/// The tar stream `inner`, with the bounds above.
pub struct Bounded<R, B> {
    inner: R,
    room: B,
    state: State,
    header: [u8; BLOCK],
    /// The content of the PAX header being read, for its `size`.
    pax: Vec<u8>,
    /// A PAX `size` for the next ordinary entry.
    next_size: Option<u64>,
    since_check: u64,
    violation: Option<Violation>,
}

impl<R: Read, B: Room> Bounded<R, B> {
    pub fn new(inner: R, room: B) -> Bounded<R, B> {
        Bounded {
            inner,
            room,
            state: State::Header { filled: 0 },
            header: [0; BLOCK],
            pax: Vec::new(),
            next_size: None,
            since_check: 0,
            violation: None,
        }
    }

    /// Why the stream was refused, if it was: the tar parser reports it as a read error.
    pub fn violation(&self) -> Option<&Violation> {
        self.violation.as_ref()
    }

    fn refuse(&mut self, v: Violation) -> io::Error {
        let e = io::Error::other(v.to_string());
        self.violation = Some(v);
        e
    }

    /// Follows the archive's structure over `data`, just read.
    fn follow(&mut self, mut data: &[u8]) -> Result<(), Violation> {
        while !data.is_empty() {
            match &mut self.state {
                State::Header { filled } => {
                    let n = (BLOCK - *filled).min(data.len());
                    self.header[*filled..*filled + n].copy_from_slice(&data[..n]);
                    *filled += n;
                    data = &data[n..];
                    if *filled == BLOCK {
                        self.state = self.after_header()?;
                    }
                }
                State::Body { left, keep } => {
                    let n = (*left).min(data.len() as u64) as usize;
                    if *keep {
                        self.pax.extend_from_slice(&data[..n]);
                    }
                    *left -= n as u64;
                    data = &data[n..];
                    if *left == 0 {
                        if *keep {
                            self.next_size = pax_size(&self.pax);
                            self.pax.clear();
                        }
                        self.state = State::Header { filled: 0 };
                    }
                }
                State::Trailer { read } => {
                    *read += data.len() as u64;
                    if *read > TRAILER_MAX {
                        return Err(Violation::Trailer);
                    }
                    data = &[];
                }
            }
        }
        Ok(())
    }

    /// The state after a complete header block.
    fn after_header(&mut self) -> Result<State, Violation> {
        let h = &self.header;
        if h.iter().all(|b| *b == 0) {
            return Ok(State::Trailer { read: 0 });
        }
        let kind = h[156];
        let declared = size_field(&h[124..136]);
        // The parser treats L, K and x as extensions only in a ustar or GNU header; otherwise
        // (and always for g) the entry is handed on, taking any pending PAX records with it.
        let magic = &h[257..265];
        let recognized = magic == b"ustar\x0000" || magic == b"ustar  \x00";
        if kind == b'g' || (matches!(kind, b'L' | b'K' | b'x') && !recognized) {
            self.next_size = None;
        }
        let (size, keep) = match kind {
            b'L' | b'K' | b'x' | b'g' => {
                // The tar crate fails on a size it cannot parse; so does this reader, cleanly.
                let size = declared.unwrap_or(u64::MAX);
                if size > SPECIAL_MAX {
                    return Err(Violation::Special {
                        kind: kind as char,
                        size,
                    });
                }
                (size, kind == b'x' && recognized)
            }
            b'S' => return Err(Violation::Sparse),
            _ => {
                let size = self.next_size.take().or(declared).unwrap_or(0);
                (size, false)
            }
        };
        let padded = size.div_ceil(BLOCK as u64).saturating_mul(BLOCK as u64);
        Ok(if padded == 0 {
            if keep {
                self.next_size = None;
            }
            State::Header { filled: 0 }
        } else {
            State::Body { left: padded, keep }
        })
    }
}

impl<R: Read, B: Room> Read for Bounded<R, B> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(v) = self.violation.clone() {
            return Err(io::Error::other(v.to_string()));
        }
        let n = self.inner.read(buf)?;
        if let Err(v) = self.follow(&buf[..n]) {
            return Err(self.refuse(v));
        }
        self.since_check += n as u64;
        if self.since_check >= B::CHECK_EVERY || n == 0 {
            let grown = std::mem::take(&mut self.since_check);
            if let Err(v) = self.room.grow(grown) {
                return Err(self.refuse(v));
            }
        }
        Ok(n)
    }
}

/// A header's numeric field exactly as the tar crate reads it (else the two would disagree on
/// where the next header is): base-256 of the last 8 bytes when the high bit is set, else octal
/// text up to the first NUL, spaces trimmed.
fn size_field(f: &[u8]) -> Option<u64> {
    if f[0] & 0x80 != 0 {
        return Some(
            f[f.len() - 8..]
                .iter()
                .fold(0, |v, b| (v << 8) | u64::from(*b)),
        );
    }
    let end = f.iter().position(|b| *b == 0).unwrap_or(f.len());
    let text = std::str::from_utf8(&f[..end]).ok()?;
    u64::from_str_radix(text.trim(), 8).ok()
}

/// The `size` record of PAX extensions, as the tar crate takes it: the first `size` key, and
/// nothing at all if any record before it is malformed.
fn pax_size(records: &[u8]) -> Option<u64> {
    for ext in tar::PaxExtensions::new(records) {
        let ext = ext.ok()?;
        if ext.key() != Ok("size") {
            continue;
        }
        return ext.value().ok()?.parse().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u8, name: &str, size: u64) -> Vec<u8> {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(tar::EntryType::new(kind));
        h.set_size(size);
        h.set_mode(0o644);
        h.set_cksum();
        h.as_bytes().to_vec()
    }

    fn read_all(tar: &[u8]) -> (io::Result<u64>, Option<Violation>) {
        let mut b = Bounded::new(tar, Unbounded);
        let r = io::copy(&mut b, &mut io::sink());
        (r, b.violation().cloned())
    }

    #[test]
    fn a_huge_long_name_is_refused_at_its_header() {
        let mut t = header(b'L', "././@LongLink", 1 << 30);
        t.extend(vec![b'a'; 4096]);
        let (r, v) = read_all(&t);
        assert!(r.is_err());
        assert_eq!(
            v,
            Some(Violation::Special {
                kind: 'L',
                size: 1 << 30
            })
        );
        // At the limit it passes through.
        let mut t = header(b'x', "pax", SPECIAL_MAX);
        t.extend(vec![b'\n'; SPECIAL_MAX as usize]);
        t.extend(vec![0; 1024]);
        assert_eq!(read_all(&t).1, None);
    }

    #[test]
    fn a_pax_size_moves_the_next_header_as_the_parser_moves_it() {
        // The PAX record gives the file 1024 bytes though its header says 0: an `L` header
        // hidden inside those bytes is content, and the one after them is a header.
        let rec = "13 size=1024\n";
        let mut t = header(b'x', "pax", rec.len() as u64);
        t.extend(rec.as_bytes());
        t.extend(vec![0; 512 - rec.len()]);
        t.extend(header(b'0', "file", 0));
        t.extend(header(b'L', "inside", 1 << 40));
        t.extend(vec![0; 512]);
        let ok = read_all(&t);
        assert_eq!(ok.1, None, "the L block was the file's content");
        t.extend(header(b'L', "real", 1 << 40));
        assert!(matches!(read_all(&t).1, Some(Violation::Special { .. })));
    }

    #[test]
    fn data_after_the_end_marker_is_bounded() {
        let mut t = header(b'0', "f", 3);
        t.extend(b"abc");
        t.extend(vec![0; 509]);
        t.extend(vec![0; 10240]);
        assert_eq!(read_all(&t).1, None);
        t.extend(vec![0; TRAILER_MAX as usize]);
        assert_eq!(read_all(&t).1, Some(Violation::Trailer));
    }

    #[test]
    fn size_fields_read_like_the_tar_crate() {
        assert_eq!(size_field(b"00000000017\0"), Some(15));
        assert_eq!(size_field(b"      17    "), Some(15));
        let mut b256 = [0u8; 12];
        b256[0] = 0x80;
        b256[1] = 0x55; // outside the last 8 bytes: the tar crate ignores it
        b256[11] = 2;
        b256[10] = 1;
        assert_eq!(size_field(&b256), Some(258));
        assert_eq!(size_field(b"zz\0\0\0\0\0\0\0\0\0\0"), None);
    }
}
