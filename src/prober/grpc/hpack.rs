//! HPACK (RFC 7541), as much as one gRPC call needs: a decoder for what a server sends (indexed
//! and literal fields, the dynamic table, Huffman strings) and an encoder that writes every field
//! as a literal without indexing (so the server's table never holds anything of ours). Input is
//! hostile: every length is checked before it is used, and the table never outgrows the size we
//! announced.

use super::tables::{HUFFMAN, STATIC};

/// The dynamic table size the client announces (the protocol's default).
pub const TABLE_SIZE: usize = 4096;
/// The most a decoded header block may add up to (names + values).
const MAX_DECODED: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub &'static str);

/// The decoder's state across the header blocks of one connection.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Newest first, as HPACK indexes them.
    table: std::collections::VecDeque<(String, String)>,
    size: usize,
    max: usize,
}

fn entry_size(n: &str, v: &str) -> usize {
    n.len() + v.len() + 32
}

/// An integer with an `n`-bit prefix (5.1); returns it and the bytes used.
fn integer(buf: &[u8], n: u8) -> Result<(usize, usize), Error> {
    let first = *buf.first().ok_or(Error("truncated integer"))?;
    let mask = (1u16 << n) as usize - 1;
    let mut v = usize::from(first) & mask;
    if v < mask {
        return Ok((v, 1));
    }
    let mut shift = 0u32;
    for (i, b) in buf[1..].iter().enumerate() {
        if shift > 21 {
            return Err(Error("integer too large"));
        }
        v += usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok((v, i + 2));
        }
    }
    Err(Error("truncated integer"))
}

/// A string literal (5.2); returns it and the bytes used.
fn string(buf: &[u8]) -> Result<(String, usize), Error> {
    let huffman = buf.first().is_some_and(|b| b & 0x80 != 0);
    let (len, used) = integer(buf, 7)?;
    let raw = buf
        .get(used..used.checked_add(len).ok_or(Error("string too long"))?)
        .ok_or(Error("truncated string"))?;
    let bytes = if huffman {
        huffman_decode(raw)?
    } else {
        raw.to_vec()
    };
    let s = String::from_utf8(bytes).map_err(|_| Error("header is not UTF-8"))?;
    Ok((s, used + len))
}

/// Decodes a Huffman-coded string: codes are at most 30 bits; the padding is at most 7 one-bits.
pub fn huffman_decode(raw: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(raw.len() * 8 / 5);
    let (mut code, mut len) = (0u32, 0u8);
    for byte in raw {
        for bit in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> bit) & 1);
            len += 1;
            // The shortest code is 5 bits: no symbol ends before.
            if len >= 5
                && let Some(sym) = HUFFMAN.iter().position(|&(c, l)| l == len && c == code)
            {
                out.push(sym as u8);
                (code, len) = (0, 0);
            } else if len >= 30 {
                return Err(Error("invalid Huffman code"));
            }
        }
    }
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(Error("invalid Huffman padding"));
    }
    Ok(out)
}

impl Decoder {
    pub fn new() -> Self {
        Decoder {
            max: TABLE_SIZE,
            ..Default::default()
        }
    }

    fn get(&self, index: usize) -> Result<(String, String), Error> {
        if index == 0 {
            return Err(Error("header index 0"));
        }
        if let Some((n, v)) = STATIC.get(index - 1) {
            return Ok((n.to_string(), v.to_string()));
        }
        self.table
            .get(index - 1 - STATIC.len())
            .cloned()
            .ok_or(Error("header index out of range"))
    }

    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            match self.table.pop_back() {
                Some((n, v)) => self.size -= entry_size(&n, &v),
                None => break,
            }
        }
    }

    fn insert(&mut self, n: &str, v: &str) {
        let size = entry_size(n, v);
        self.evict_to(self.max.saturating_sub(size));
        if size <= self.max {
            self.table.push_front((n.to_string(), v.to_string()));
            self.size += size;
        }
    }

    /// Decodes one complete header block.
    pub fn decode(&mut self, mut buf: &[u8]) -> Result<Vec<(String, String)>, Error> {
        let mut out = Vec::new();
        let mut total = 0usize;
        while let Some(&b) = buf.first() {
            let (field, used) = if b & 0x80 != 0 {
                let (i, used) = integer(buf, 7)?;
                (Some(self.get(i)?), used)
            } else if b & 0xe0 == 0x20 {
                let (max, used) = integer(buf, 5)?;
                if max > TABLE_SIZE {
                    return Err(Error("table size update above the announced size"));
                }
                self.max = max;
                self.evict_to(max);
                (None, used)
            } else {
                // 0x40: with incremental indexing; 0x00 / 0x10: without / never indexed.
                let indexing = b & 0xc0 == 0x40;
                let (i, mut used) = integer(buf, if indexing { 6 } else { 4 })?;
                let name = if i == 0 {
                    let (n, u) = string(&buf[used..])?;
                    used += u;
                    n
                } else {
                    self.get(i)?.0
                };
                let (value, u) = string(&buf[used..])?;
                used += u;
                if indexing {
                    self.insert(&name, &value);
                }
                (Some((name, value)), used)
            };
            buf = &buf[used..];
            if let Some((n, v)) = field {
                total += n.len() + v.len();
                if total > MAX_DECODED {
                    return Err(Error("header block too large"));
                }
                out.push((n, v));
            }
        }
        Ok(out)
    }
}

fn put_integer(out: &mut Vec<u8>, first: u8, n: u8, mut v: usize) {
    let mask = (1usize << n) - 1;
    if v < mask {
        out.push(first | v as u8);
        return;
    }
    out.push(first | mask as u8);
    v -= mask;
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    put_integer(out, 0, 7, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// A header block of literal fields without indexing, with literal names.
pub fn encode(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        out.push(0x00);
        put_string(&mut out, n);
        put_string(&mut out, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 7541 C.4: three requests with Huffman coding, sharing one dynamic table.
    #[test]
    fn rfc_7541_c4_requests_with_huffman() {
        let mut d = Decoder::new();
        let h = d
            .decode(&hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"))
            .unwrap();
        assert_eq!(h[3], (":authority".into(), "www.example.com".into()));
        let h = d.decode(&hex("8286 84be 5886 a8eb 1064 9cbf")).unwrap();
        assert_eq!(h[3], (":authority".into(), "www.example.com".into()));
        assert_eq!(h[4], ("cache-control".into(), "no-cache".into()));
        let h = d
            .decode(&hex(
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ))
            .unwrap();
        assert_eq!(h[1], (":scheme".into(), "https".into()));
        assert_eq!(h[4], ("custom-key".into(), "custom-value".into()));
        assert_eq!(d.table.len(), 3);
        assert_eq!(d.size, 164);
    }

    #[test]
    fn literals_round_trip_and_long_lengths() {
        let long = "x".repeat(300);
        let block = encode(&[(":path", "/grpc.health.v1.Health/Check"), ("k", &long)]);
        let h = Decoder::new().decode(&block).unwrap();
        assert_eq!(h[0].1, "/grpc.health.v1.Health/Check");
        assert_eq!(h[1].1, long);
    }

    #[test]
    fn hostile_blocks_are_refused() {
        let mut d = Decoder::new();
        for bad in [
            &[0x80][..],                           // index 0
            &[0xff, 0x80],                         // truncated integer
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], // integer overflow
            &[0x00, 0x05, b'a'],                   // string past the end
            &[0x3f, 0xe2, 0x1f],                   // table size above 4096
            &[0xbf, 0x00],                         // dynamic index that is not there
            &[0x00, 0x81, 0x00, 0x00],             // Huffman padding of zeros
        ] {
            assert!(d.decode(bad).is_err(), "{bad:x?}");
        }
    }
}
