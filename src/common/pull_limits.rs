//! What a registry can make one pull cost: bytes on disk, time, and the rate below which a
//! transfer counts as stalled. `registries.limits` in the node config (docs/security.md, "What a
//! registry can do"); every default is meant for a small edge host and can be raised.
//!
//! The tar format's own bounds (a header's long name or PAX records, the bytes after the end of
//! the archive) are constants of the unpacker, not settings: no real layer comes near them.

use serde::{Deserialize, Deserializer};

/// Bounds on one pull.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Limits {
    /// One layer, uncompressed (its blob too: a compressed layer is never larger in practice).
    #[serde(deserialize_with = "quantity")]
    pub max_layer_bytes: u64,
    /// All the layers one pull writes, uncompressed.
    #[serde(deserialize_with = "quantity")]
    pub max_image_bytes: u64,
    /// A pull never leaves less than this share of the image store's file system free (the
    /// kubelet's default `imagefs.available` hard eviction threshold is 15 %: a pull must not be
    /// what puts the node under disk pressure).
    pub store_reserve_percent: u8,
    /// One pull, from the first request to the last byte.
    pub pull_timeout_seconds: u64,
    /// A transfer slower than `lowSpeedBytesPerSecond` over `lowSpeedSeconds`, or one that sends
    /// nothing for `lowSpeedSeconds`, is abandoned (curl's `--speed-limit`/`--speed-time`).
    pub low_speed_bytes_per_second: u64,
    pub low_speed_seconds: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_layer_bytes: 8 << 30,
            max_image_bytes: 16 << 30,
            store_reserve_percent: 15,
            pull_timeout_seconds: 3600,
            low_speed_bytes_per_second: 1024,
            low_speed_seconds: 60,
        }
    }
}

impl Limits {
    /// Problems, as `registries.limits.<field>: what`.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut bad = |f: &str, why: &str| out.push(format!("registries.limits.{f}: {why}"));
        if self.max_layer_bytes == 0 {
            bad("maxLayerBytes", "must be more than 0");
        }
        if self.max_image_bytes == 0 {
            bad("maxImageBytes", "must be more than 0");
        }
        if self.store_reserve_percent >= 100 {
            bad("storeReservePercent", "must be less than 100");
        }
        if self.pull_timeout_seconds == 0 {
            bad("pullTimeoutSeconds", "must be more than 0");
        }
        if self.low_speed_seconds == 0 {
            bad("lowSpeedSeconds", "must be more than 0");
        }
        out
    }
}

/// A byte count written as a Kubernetes quantity (`8Gi`, `500M`) or a plain number.
fn quantity<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Q {
        N(u64),
        S(String),
    }
    match Q::deserialize(d)? {
        Q::N(n) => Ok(n),
        Q::S(s) => crate::common::quantity::bytes(&s)
            .map_err(|_| serde::de::Error::custom(format!("{s:?} is not a quantity of bytes"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_defaults() {
        let l: Limits =
            serde_json::from_str(r#"{"maxLayerBytes": "512Mi", "maxImageBytes": 1000}"#).unwrap();
        assert_eq!(l.max_layer_bytes, 512 << 20);
        assert_eq!(l.max_image_bytes, 1000);
        assert_eq!(l.store_reserve_percent, 15);
        assert!(serde_json::from_str::<Limits>(r#"{"maxLayerBytes": "lots"}"#).is_err());
        assert!(Limits::default().problems().is_empty());
        let zero = Limits {
            low_speed_seconds: 0,
            store_reserve_percent: 100,
            ..Limits::default()
        };
        assert_eq!(zero.problems().len(), 2);
    }
}
