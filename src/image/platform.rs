//! Which entry of a multi-platform index this host runs: `linux/<GOARCH>` with the variant
//! preferences of containerd's platform matcher (arm/v7 also runs v6 and v5; arm64 is v8).

use super::manifest::{Descriptor, Platform};

/// The host's platform in OCI terms.
pub fn host() -> Platform {
    let (arch, variant) = match std::env::consts::ARCH {
        "x86_64" => ("amd64", None),
        "x86" => ("386", None),
        "aarch64" => ("arm64", Some("v8")),
        "arm" => ("arm", Some("v7")),
        "powerpc64" if cfg!(target_endian = "little") => ("ppc64le", None),
        "riscv64" => ("riscv64", None),
        "s390x" => ("s390x", None),
        "loongarch64" => ("loong64", None),
        other => (other, None),
    };
    Platform {
        architecture: arch.to_string(),
        os: "linux".to_string(),
        variant: variant.map(str::to_string),
    }
}

/// Variants `want` can run, best first; `None` stands for "no variant given".
fn variants(want: &Platform) -> Vec<Option<&'static str>> {
    match (want.architecture.as_str(), want.variant.as_deref()) {
        ("arm64", _) => vec![Some("v8"), None],
        ("arm", Some("v8")) => vec![Some("v8"), Some("v7"), Some("v6"), Some("v5"), None],
        ("arm", Some("v7")) | ("arm", None) => vec![Some("v7"), Some("v6"), Some("v5"), None],
        ("arm", Some("v6")) => vec![Some("v6"), Some("v5"), None],
        ("arm", Some("v5")) => vec![Some("v5"), None],
        ("amd64", _) => vec![None, Some("v1")],
        _ => vec![None],
    }
}

/// The index entry for `want`, or `None`. Entries without a platform are ignored (attestations).
pub fn select<'a>(entries: &'a [Descriptor], want: &Platform) -> Option<&'a Descriptor> {
    let rank = |d: &Descriptor| -> Option<usize> {
        let p = d.platform.as_ref()?;
        if p.os != want.os || p.architecture != want.architecture {
            return None;
        }
        variants(want)
            .iter()
            .position(|v| *v == p.variant.as_deref())
    };
    entries
        .iter()
        .filter_map(|d| rank(d).map(|r| (r, d)))
        .min_by_key(|(r, _)| *r)
        .map(|(_, d)| d)
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::digest::Digest;

    fn entry(n: u8, arch: &str, variant: Option<&str>) -> Descriptor {
        Descriptor {
            media_type: String::new(),
            digest: Digest::of(&[n]),
            size: 1,
            platform: Some(Platform {
                architecture: arch.into(),
                os: "linux".into(),
                variant: variant.map(Into::into),
            }),
            urls: vec![],
        }
    }

    fn plat(arch: &str, variant: Option<&str>) -> Platform {
        Platform {
            architecture: arch.into(),
            os: "linux".into(),
            variant: variant.map(Into::into),
        }
    }

    #[test]
    fn picks_the_best_variant() {
        let idx = vec![
            entry(1, "arm", Some("v6")),
            entry(2, "arm", Some("v7")),
            entry(3, "arm64", Some("v8")),
            entry(4, "amd64", None),
            entry(5, "s390x", None),
        ];
        let pick = |p: Platform| select(&idx, &p).map(|d| d.digest.clone());
        assert_eq!(pick(plat("arm", Some("v7"))), Some(Digest::of(&[2])));
        assert_eq!(pick(plat("arm", Some("v6"))), Some(Digest::of(&[1])));
        assert_eq!(pick(plat("arm", Some("v5"))), None);
        assert_eq!(pick(plat("arm64", Some("v8"))), Some(Digest::of(&[3])));
        assert_eq!(pick(plat("amd64", None)), Some(Digest::of(&[4])));
        assert_eq!(pick(plat("riscv64", None)), None);
        // arm64 without a variant in the index still matches.
        let plain = vec![entry(6, "arm64", None)];
        assert!(select(&plain, &plat("arm64", Some("v8"))).is_some());
        // Attestation manifests carry platform unknown/unknown: never picked.
        let att = vec![entry(7, "unknown", None)];
        assert!(select(&att, &host()).is_none());
    }
}
