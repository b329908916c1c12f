//! SPDY/3 header blocks: a count, then length-prefixed names and values, compressed with one
//! zlib stream per direction that starts from the protocol's dictionary and is sync-flushed
//! after each block. Decompression is bounded: a small block may not inflate past
//! [`MAX_BLOCK`], and a block may hold at most [`MAX_HEADERS`] pairs.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The SPDY/3 header compression dictionary (the protocol's constant).
const DICTIONARY: &[u8] = include_bytes!("dictionary.bin");
/// The most a header block may inflate to (remotecommand's are a few dozen bytes).
pub const MAX_BLOCK: usize = 16 * 1024;
/// The most name/value pairs in a block.
pub const MAX_HEADERS: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    TooLarge,
    Malformed(&'static str),
    Zlib(String),
}

/// A peer's header blocks, in the order they arrive.
pub struct Inflater {
    z: Decompress,
}

impl Default for Inflater {
    fn default() -> Self {
        Inflater {
            z: Decompress::new(true),
        }
    }
}

impl Inflater {
    /// The pairs of the next block, names as sent (lower case in SPDY/3) and each value whole
    /// (several values are NUL-separated).
    pub fn block(&mut self, input: &[u8]) -> Result<Vec<(String, String)>, HeaderError> {
        let mut out = vec![0u8; MAX_BLOCK];
        let (mut read, mut written) = (0usize, 0usize);
        loop {
            let (in0, out0) = (self.z.total_in(), self.z.total_out());
            let r = self
                .z
                .decompress(&input[read..], &mut out[written..], FlushDecompress::Sync);
            read += (self.z.total_in() - in0) as usize;
            written += (self.z.total_out() - out0) as usize;
            match r {
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z
                        .set_dictionary(DICTIONARY)
                        .map_err(|e| HeaderError::Zlib(e.to_string()))?;
                }
                Err(e) => return Err(HeaderError::Zlib(e.to_string())),
                Ok(Status::StreamEnd) => return Err(HeaderError::Malformed("zlib stream ended")),
                Ok(_) if read == input.len() && written < out.len() => break,
                Ok(_) if written == out.len() => return Err(HeaderError::TooLarge),
                // No progress on either side: the input is cut short.
                Ok(_) if self.z.total_in() == in0 && self.z.total_out() == out0 => {
                    return Err(HeaderError::Malformed("truncated header block"));
                }
                Ok(_) => {}
            }
        }
        parse_pairs(&out[..written])
    }
}

/// Parses an inflated block.
pub fn parse_pairs(b: &[u8]) -> Result<Vec<(String, String)>, HeaderError> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], HeaderError> {
        let end = at
            .checked_add(n)
            .filter(|e| *e <= b.len())
            .ok_or(HeaderError::Malformed("header block cut short"))?;
        let s = &b[at..end];
        at = end;
        Ok(s)
    };
    let word = |s: &[u8]| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize;
    let count = word(take(4)?);
    if count > MAX_HEADERS {
        return Err(HeaderError::TooLarge);
    }
    let mut pairs = Vec::with_capacity(count);
    for _ in 0..count {
        let n = word(take(4)?);
        let name = take(n)?;
        let n = word(take(4)?);
        let value = take(n)?;
        if name.is_empty() || name.iter().any(|c| c.is_ascii_uppercase() || *c == 0) {
            return Err(HeaderError::Malformed("header name"));
        }
        let text = |s: &[u8]| {
            String::from_utf8(s.to_vec()).map_err(|_| HeaderError::Malformed("not UTF-8"))
        };
        pairs.push((text(name)?, text(value)?));
    }
    if at != b.len() {
        return Err(HeaderError::Malformed("bytes after the header block"));
    }
    Ok(pairs)
}

/// This side's header blocks.
pub struct Deflater {
    z: Compress,
}

impl Default for Deflater {
    fn default() -> Self {
        let mut z = Compress::new(Compression::default(), true);
        z.set_dictionary(DICTIONARY)
            .expect("a dictionary on a fresh stream");
        Deflater { z }
    }
}

impl Deflater {
    pub fn block(&mut self, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(pairs.len() as u32).to_be_bytes());
        for (n, v) in pairs {
            for s in [n, v] {
                raw.extend_from_slice(&(s.len() as u32).to_be_bytes());
                raw.extend_from_slice(s.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut read = 0usize;
        loop {
            let in0 = self.z.total_in();
            self.z
                .compress_vec(&raw[read..], &mut out, FlushCompress::Sync)
                .expect("deflate into a growing buffer");
            read += (self.z.total_in() - in0) as usize;
            // Done once everything is in and the flush fitted (room left over).
            if read == raw.len() && out.len() < out.capacity() {
                return out;
            }
            out.reserve(256);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_across_one_stream() {
        let (mut d, mut i) = (Deflater::default(), Inflater::default());
        for t in ["error", "stdin", "stdout"] {
            let b = d.block(&[("streamtype", t), ("port", "8080")]);
            assert_eq!(
                i.block(&b).unwrap(),
                [("streamtype", t), ("port", "8080")].map(|(a, b)| (a.into(), b.into()))
            );
        }
        assert_eq!(i.block(&d.block(&[])).unwrap(), []);
    }

    #[test]
    fn hostile_blocks_are_refused() {
        let mut d = Deflater::default();
        // Inflating past the bound (a zip bomb of one long value).
        let huge = "a".repeat(MAX_BLOCK);
        let b = d.block(&[("x", &huge)]);
        assert!(b.len() < 1024);
        assert_eq!(Inflater::default().block(&b), Err(HeaderError::TooLarge));
        assert!(Inflater::default().block(b"not zlib at all").is_err());
        let mut many = Vec::new();
        many.extend_from_slice(&(MAX_HEADERS as u32 + 1).to_be_bytes());
        assert_eq!(parse_pairs(&many), Err(HeaderError::TooLarge));
        assert!(parse_pairs(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(parse_pairs(&[0, 0, 0, 1, 0, 0, 0, 1, b'A', 0, 0, 0, 0]).is_err());
        assert_eq!(
            parse_pairs(&[0, 0, 0, 1, 0, 0, 0, 1, b'a', 0, 0, 0, 0]).unwrap(),
            [("a".to_string(), String::new())]
        );
    }
}
