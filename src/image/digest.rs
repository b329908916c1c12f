//! Content digests (`sha256:<64 hex>`), and a reader that hashes what passes through it.

use sha2::{Digest as _, Sha256};
use std::fmt;
use std::io::{self, Read};

/// A verified-shape content digest. Only sha256 is accepted: it is what every registry serves and
/// what the OCI spec requires implementations to support.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`.
    pub fn parse(s: &str) -> Result<Digest, String> {
        let Some((algo, hex)) = s.split_once(':') else {
            return Err(format!("digest {s:?} has no algorithm"));
        };
        if algo != "sha256" {
            return Err(format!("digest {s:?}: only sha256 is supported"));
        }
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format!("digest {s:?} is not 64 lowercase hex digits"));
        }
        Ok(Digest {
            hex: hex.to_string(),
        })
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest::from_hasher(Sha256::new_with_prefix(bytes))
    }

    /// The digest a running SHA-256 arrived at.
    pub fn from_sha256(h: Sha256) -> Digest {
        Digest::from_hasher(h)
    }

    fn from_hasher(h: Sha256) -> Digest {
        let out = h.finalize();
        let mut hex = String::with_capacity(64);
        for b in out {
            hex.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            hex.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        Digest { hex }
    }

    /// The 64 hex digits (a safe file name).
    pub fn hex(&self) -> &str {
        &self.hex
    }

    pub fn algorithm(&self) -> &'static str {
        "sha256"
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Hashes and counts every byte read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// Bytes read so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The digest of everything read, and the inner reader.
    pub fn finish(self) -> (Digest, R) {
        (Digest::from_hasher(self.hasher), self.inner)
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_hash() {
        let d = Digest::of(b"");
        assert_eq!(
            d.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Digest::parse(&d.to_string()).unwrap(), d);
        assert!(Digest::parse("sha256:E3B0").is_err());
        assert!(Digest::parse("sha512:00").is_err());
        assert!(Digest::parse("sha256:../../etc/passwd").is_err());
        let mut r = HashingReader::new(&b"abc"[..]);
        io::copy(&mut r, &mut io::sink()).unwrap();
        assert_eq!(r.count(), 3);
        assert_eq!(r.finish().0, Digest::of(b"abc"));
    }
}
