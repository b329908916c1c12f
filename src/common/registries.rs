//! The node's registry settings: the `registries:` key of `/etc/podunit/config.yaml`.
//!
//! ```yaml
//! registries:
//!   mirrors:                        # tried in order before the registry itself
//!     docker.io: [mirror.internal:5000]
//!   ca:                             # extra trust anchors (PEM), per registry or mirror host
//!     mirror.internal:5000: /etc/podunit/ca/mirror.pem
//!   insecure: [lab.local:5000]      # plain HTTP; only for the hosts named here
//!   credentials: /etc/podunit/auth.json
//!   limits: {maxLayerBytes: 8Gi}    # what one pull may cost (limits.rs)
//! ```

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The node credentials file's default place (auth.json / config.json format, root-only).
pub const DEFAULT_CREDENTIALS: &str = "/etc/podunit/auth.json";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct Registries {
    pub mirrors: BTreeMap<String, Vec<String>>,
    pub ca: BTreeMap<String, PathBuf>,
    pub insecure: Vec<String>,
    /// Default: [`DEFAULT_CREDENTIALS`] (when it exists).
    pub credentials: Option<PathBuf>,
    /// Bounds on what a registry can make one pull cost.
    pub limits: crate::common::pull_limits::Limits,
}

/// Where to send requests for one registry: the mirrors first, then the registry itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host[:port]` as written.
    pub host: String,
    /// `https://host[:port]` or `http://` for insecure hosts.
    pub base: String,
    pub is_mirror: bool,
}

/// The registry of a reference that names none (Docker Hub).
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// `host`, `host:port`, `[v6]:port`; host labels of letters, digits and inner dashes.
pub fn valid_registry(s: &str) -> bool {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return false;
        };
        if v6.is_empty() || !v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return false;
        }
        match after.strip_prefix(':') {
            Some(p) => ("", Some(p)),
            None if after.is_empty() => ("", None),
            None => return false,
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let host_ok = host.is_empty() && s.starts_with('[') || host.split('.').all(label_ok);
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

impl Registries {
    pub fn is_insecure(&self, host: &str) -> bool {
        self.insecure.iter().any(|h| h == host)
    }

    fn endpoint(&self, host: &str, is_mirror: bool) -> Endpoint {
        // Docker Hub's API is served by registry-1.docker.io, not docker.io.
        let api = if host == DEFAULT_REGISTRY {
            "registry-1.docker.io"
        } else {
            host
        };
        let scheme = if self.is_insecure(host) {
            "http"
        } else {
            "https"
        };
        Endpoint {
            host: host.to_string(),
            base: format!("{scheme}://{api}"),
            is_mirror,
        }
    }

    /// The endpoints for `registry`, in the order to try them.
    pub fn endpoints(&self, registry: &str) -> Vec<Endpoint> {
        let mut out: Vec<Endpoint> = self
            .mirrors
            .get(registry)
            .into_iter()
            .flatten()
            .map(|m| self.endpoint(m, true))
            .collect();
        out.push(self.endpoint(registry, false));
        out
    }

    /// Problems with the settings, as `registries.<field>: what` (checked at load).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let hosts = self
            .mirrors
            .iter()
            .flat_map(|(k, v)| std::iter::once(k).chain(v))
            .map(|h| ("mirrors", h))
            .chain(self.ca.keys().map(|h| ("ca", h)))
            .chain(self.insecure.iter().map(|h| ("insecure", h)));
        for (field, h) in hosts {
            if !valid_registry(h) {
                out.push(format!("registries.{field}: {h:?} is not a host[:port]"));
            }
        }
        for (h, p) in &self.ca {
            if !p.is_absolute() {
                out.push(format!(
                    "registries.ca.{h}: {} is not an absolute path",
                    p.display()
                ));
            }
        }
        out.extend(self.limits.problems());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_first_then_the_registry() {
        let r = Registries {
            mirrors: [(
                "docker.io".to_string(),
                vec!["m1:5000".to_string(), "m2".to_string()],
            )]
            .into(),
            insecure: vec!["m2".into()],
            ..Default::default()
        };
        let e = r.endpoints("docker.io");
        let bases: Vec<_> = e.iter().map(|e| e.base.as_str()).collect();
        assert_eq!(
            bases,
            [
                "https://m1:5000",
                "http://m2",
                "https://registry-1.docker.io"
            ]
        );
        assert!(e[0].is_mirror && !e[2].is_mirror);
        assert_eq!(r.endpoints("quay.io")[0].base, "https://quay.io");
        assert!(r.problems().is_empty());
        let bad = Registries {
            insecure: vec!["http://x".into()],
            ..Default::default()
        };
        assert_eq!(bad.problems().len(), 1);
    }
}
