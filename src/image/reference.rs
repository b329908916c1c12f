//! Image references, normalised as containerd and the kubelet do (the `distribution/reference`
//! rules): `nginx` -> `docker.io/library/nginx:latest`, `index.docker.io` -> `docker.io`, a first
//! path part with a `.` or `:` (or `localhost`) is a registry host, a digest wins over a tag.

use super::digest::Digest;
use std::fmt;

use crate::common::registries::{DEFAULT_REGISTRY, valid_registry};
/// The tag used when a reference has neither tag nor digest.
pub const DEFAULT_TAG: &str = "latest";
const NAME_MAX: usize = 255;
const TAG_MAX: usize = 128;

/// A normalised reference: registry host (with port), repository path, tag and/or digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reference {
    /// `docker.io`, `registry.k8s.io`, `localhost:5000`, `[::1]:5000`.
    pub registry: String,
    /// `library/nginx`, `pause`, `team/app`.
    pub repository: String,
    /// `latest` when the reference named neither tag nor digest; kept beside a digest when both
    /// were given (for display), though the digest decides what is pulled.
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parses and normalises `s` as `ParseDockerRef` does.
    pub fn parse(s: &str) -> Result<Reference, String> {
        let bad = |why: &str| Err(format!("invalid image reference {s:?}: {why}"));
        if s.is_empty() {
            return bad("empty");
        }
        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return bad("a 64-digit hexadecimal string is an image ID, not a name");
        }
        let (name, digest) = match s.split_once('@') {
            Some((n, d)) => match Digest::parse(d) {
                Ok(d) => (n, Some(d)),
                Err(e) => return bad(&e),
            },
            None => (s, None),
        };
        let (registry, rest) = match name.find('/') {
            Some(i)
                if name[..i].contains(['.', ':'])
                    || &name[..i] == "localhost"
                    || name[..i].bytes().any(|b| b.is_ascii_uppercase()) =>
            {
                (&name[..i], &name[i + 1..])
            }
            _ => (DEFAULT_REGISTRY, name),
        };
        let registry = if registry == "index.docker.io" {
            DEFAULT_REGISTRY
        } else {
            registry
        };
        let (path, tag) = match rest.rfind(':') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        if !valid_registry(registry) {
            return bad("the registry host is not a valid host[:port]");
        }
        if path.bytes().any(|b| b.is_ascii_uppercase()) {
            return bad("repository name must be lowercase");
        }
        if path.is_empty() || !path.split('/').all(valid_path_component) {
            return bad("the repository path is not valid");
        }
        if let Some(t) = tag
            && !valid_tag(t)
        {
            return bad("the tag is not valid");
        }
        let repository = if registry == DEFAULT_REGISTRY && !path.contains('/') {
            format!("library/{path}")
        } else {
            path.to_string()
        };
        if registry.len() + 1 + repository.len() > NAME_MAX {
            return bad("the name is longer than 255 characters");
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_string()),
            (None, None) => Some(DEFAULT_TAG.to_string()),
            (None, Some(_)) => None,
        };
        Ok(Reference {
            registry: registry.to_string(),
            repository,
            tag,
            digest,
        })
    }

    /// `registry/repository` without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// What the registry is asked for: the digest when there is one, else the tag.
    pub fn manifest_key(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => DEFAULT_TAG.to_string(),
        }
    }

    /// Whether the kubelet treats this reference as mutable (`:latest` or no tag): the default
    /// pull policy is then `Always`.
    pub fn is_latest(&self) -> bool {
        self.digest.is_none() && self.tag.as_deref() == Some(DEFAULT_TAG)
    }

    /// The same name, pinned to `digest` (the `imageID` a pod records: `name@sha256:...`).
    pub fn with_digest(&self, digest: &Digest) -> Reference {
        Reference {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.clone()),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Reference {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Reference::parse(s)
    }
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
fn valid_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// `[\w][\w.-]{0,127}`
fn valid_tag(t: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    !t.is_empty()
        && t.len() <= TAG_MAX
        && word(t.as_bytes()[0])
        && t.bytes().all(|b| word(b) || b == b'.' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> String {
        Reference::parse(s).unwrap().to_string()
    }

    const D: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn normalises_like_containerd() {
        assert_eq!(norm("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(norm("nginx:1.25"), "docker.io/library/nginx:1.25");
        assert_eq!(norm("library/nginx"), "docker.io/library/nginx:latest");
        assert_eq!(norm("bitnami/redis:7"), "docker.io/bitnami/redis:7");
        assert_eq!(
            norm("index.docker.io/busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            norm("docker.io/busybox:1.28"),
            "docker.io/library/busybox:1.28"
        );
        assert_eq!(
            norm("registry.k8s.io/busybox"),
            "registry.k8s.io/busybox:latest"
        );
        assert_eq!(
            norm("registry.k8s.io/e2e-test-images/agnhost:2.39"),
            "registry.k8s.io/e2e-test-images/agnhost:2.39"
        );
        assert_eq!(norm("localhost/app"), "localhost/app:latest");
        assert_eq!(norm("localhost:5000/app:v1"), "localhost:5000/app:v1");
        assert_eq!(norm("127.0.0.1:5000/a/b/c"), "127.0.0.1:5000/a/b/c:latest");
        assert_eq!(norm("[::1]:5000/app"), "[::1]:5000/app:latest");
        assert_eq!(
            norm(&format!("busybox@{D}")),
            format!("docker.io/library/busybox@{D}")
        );
        assert_eq!(
            norm(&format!("busybox:1.36@{D}")),
            format!("docker.io/library/busybox:1.36@{D}")
        );
        // No slash: `host:5000` is the name `host` with the tag `5000`, as in Docker.
        assert_eq!(norm("host:5000"), "docker.io/library/host:5000");
        assert_eq!(
            norm("a__b-c---d/e_f.g"),
            "docker.io/a__b-c---d/e_f.g:latest"
        );
        // A dot makes the first part a host, which must then be valid.
        assert!(Reference::parse("a__b.c/d").is_err());
    }

    #[test]
    fn keys_and_latest() {
        let r = Reference::parse("nginx").unwrap();
        assert!(r.is_latest());
        assert_eq!(r.manifest_key(), "latest");
        assert_eq!(r.name(), "docker.io/library/nginx");
        let p = Reference::parse(&format!("nginx:1@{D}")).unwrap();
        assert!(!p.is_latest());
        assert_eq!(p.manifest_key(), D);
        assert_eq!(
            r.with_digest(p.digest.as_ref().unwrap()).to_string(),
            format!("docker.io/library/nginx@{D}")
        );
        assert!(!Reference::parse("nginx:1.25").unwrap().is_latest());
    }

    #[test]
    fn refuses_what_docker_refuses() {
        for bad in [
            "",
            "Nginx",
            "docker.io/Library/nginx",
            "nginx:",
            "nginx:-x",
            "nginx@sha256:abc",
            "nginx@md5:00",
            "a//b",
            "/abs",
            "a/../b",
            "a/./b",
            "-a",
            "a-",
            "a..b",
            "a___b",
            "reg.example:port/app",
            "reg.example:123456/app",
            "-reg.example/app",
            "a b",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("a/{}", "b".repeat(260));
        assert!(Reference::parse(&long).is_err());
        let longtag = format!("a:{}", "t".repeat(129));
        assert!(Reference::parse(&longtag).is_err());
    }

    #[test]
    fn uppercase_host_is_a_registry() {
        // distribution/reference: a first part with capitals cannot be a path, so it is a host.
        assert_eq!(norm("Reg/app"), "Reg/app:latest");
    }
}
