//! Registry credentials: the node's credentials file and the pods' `imagePullSecrets`, both in the
//! `config.json`/`auth.json` format (`kubernetes.io/dockerconfigjson`) or the older `.dockercfg`
//! one; matched against an image as the kubelet's credentialprovider keyring does: the same
//! number of host labels, each matched as a glob (`*.example.com`, `reg.*.io`), the same port, the
//! key's path a prefix of the repository's; keys tried in reverse lexical order (longer, then
//! non-wildcard keys first), a pod's secrets before the node's file.

use super::reference::Reference;
use base64::Engine;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// A user name and password (or token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credential({:?}, <password>)", self.username)
    }
}

/// Credentials by registry key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keyring {
    entries: Vec<(Key, Credential)>,
    /// Tried after all of this keyring's matches (the kubelet's union keyring: a pod's secrets,
    /// then the node's credentials).
    fallback: Option<Box<Keyring>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    /// Host labels without the port, lower case (globs allowed).
    labels: Vec<String>,
    port: String,
    /// Empty, or starting with `/`.
    path: String,
    /// `host[:port]path`: the kubelet's index string, which orders the keys.
    text: String,
}

#[derive(Deserialize)]
struct ConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Entry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

const SECRET_MAX: usize = 1 << 20;

impl Keyring {
    /// `{"auths": {...}}` (dockerconfigjson, auth.json) text.
    pub fn parse_config_json(bytes: &[u8]) -> Result<Keyring, String> {
        if bytes.len() > SECRET_MAX {
            return Err("credentials larger than 1 MiB".into());
        }
        let c: ConfigJson =
            serde_json::from_slice(bytes).map_err(|e| format!("not a docker config.json: {e}"))?;
        Keyring::from_entries(c.auths)
    }

    /// The legacy `.dockercfg` text: the `auths` map on its own.
    pub fn parse_dockercfg(bytes: &[u8]) -> Result<Keyring, String> {
        if bytes.len() > SECRET_MAX {
            return Err("credentials larger than 1 MiB".into());
        }
        let m: BTreeMap<String, Entry> =
            serde_json::from_slice(bytes).map_err(|e| format!("not a .dockercfg: {e}"))?;
        Keyring::from_entries(m)
    }

    /// An `imagePullSecret`'s data: `.dockerconfigjson` for `kubernetes.io/dockerconfigjson`,
    /// `.dockercfg` for `kubernetes.io/dockercfg`.
    pub fn from_secret(
        secret_type: &str,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Keyring, String> {
        match secret_type {
            "kubernetes.io/dockerconfigjson" => {
                let d = data
                    .get(".dockerconfigjson")
                    .ok_or("no .dockerconfigjson key")?;
                Keyring::parse_config_json(d)
            }
            "kubernetes.io/dockercfg" => {
                let d = data.get(".dockercfg").ok_or("no .dockercfg key")?;
                Keyring::parse_dockercfg(d)
            }
            t => Err(format!("secret type {t:?} is not an image pull secret")),
        }
    }

    /// A pod's `imagePullSecrets`, merged into one keyring as the kubelet merges them. Only the
    /// two image pull secret types count; a Secret of another type is passed over, as the kubelet
    /// does. `stringData` (which a manifest on disk may use) is read beside `data`. An error names
    /// the secret whose JSON does not parse.
    pub fn from_pull_secrets<'a>(
        secrets: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::Secret>,
    ) -> Result<Keyring, String> {
        let mut ring = Keyring::default();
        for s in secrets {
            let ty = s.type_.as_deref().unwrap_or_default();
            if ty != "kubernetes.io/dockerconfigjson" && ty != "kubernetes.io/dockercfg" {
                continue;
            }
            let mut data: BTreeMap<String, Vec<u8>> = s
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect();
            for (k, v) in s.string_data.iter().flatten() {
                data.insert(k.clone(), v.clone().into_bytes());
            }
            let name = s.metadata.name.as_deref().unwrap_or_default();
            let r = Keyring::from_secret(ty, &data)
                .map_err(|e| format!("image pull secret {name:?}: {e}"))?;
            ring.extend(r);
        }
        Ok(ring)
    }

    /// The node's credentials file. It holds secrets: refused unless owned by root and closed to
    /// group and others. A missing file is an empty keyring.
    pub fn load_node_file(path: &Path) -> Result<Keyring, String> {
        use std::os::unix::fs::MetadataExt;
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Keyring::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        if meta.uid() != 0 || meta.mode() & 0o077 != 0 {
            return Err(format!(
                "{}: credentials must be owned by root and not readable by others (mode 0600), not uid {} mode {:o}",
                path.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Keyring::parse_config_json(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn from_entries(m: BTreeMap<String, Entry>) -> Result<Keyring, String> {
        let mut entries = Vec::new();
        for (k, e) in m {
            let cred = if let (Some(u), Some(p)) = (&e.username, &e.password) {
                Credential {
                    username: u.clone(),
                    password: p.clone(),
                }
            } else if let Some(a) = &e.auth {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(a.trim())
                    .map_err(|_| format!("auths.{k}.auth is not base64"))?;
                let s =
                    String::from_utf8(raw).map_err(|_| format!("auths.{k}.auth is not UTF-8"))?;
                let (u, p) = s
                    .split_once(':')
                    .ok_or_else(|| format!("auths.{k}.auth is not user:password"))?;
                Credential {
                    username: u.to_string(),
                    password: p.to_string(),
                }
            } else {
                continue; // identity tokens and credential helpers: not supported, skipped
            };
            entries.push((parse_key(&k), cred));
        }
        Ok(Keyring {
            entries,
            fallback: None,
        })
    }

    /// Adds `other`'s entries to this one's, as the kubelet merges all of a pod's pull secrets
    /// into one keyring (earlier entries win ties).
    pub fn extend(&mut self, other: Keyring) {
        self.entries.extend(other.entries);
    }

    /// This keyring, then `other` for whatever this one's matches do not settle (the kubelet's
    /// union of a pod's secrets and the node's credentials).
    pub fn then(mut self, other: Keyring) -> Keyring {
        match &mut self.fallback {
            Some(f) => {
                let f = std::mem::take(f.as_mut());
                self.fallback = Some(Box::new(f.then(other)));
            }
            None => self.fallback = Some(Box::new(other)),
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.fallback.as_ref().is_none_or(|f| f.is_empty())
    }

    /// Credentials for `r`, most specific key first (the kubelet tries each in turn).
    pub fn lookup(&self, r: &Reference) -> Vec<&Credential> {
        self.lookup_host(&r.registry, &r.repository)
    }

    /// Credentials for `repository` at `host` (a registry or one of its mirrors).
    pub fn lookup_host(&self, host: &str, repository: &str) -> Vec<&Credential> {
        let (name, port) = split_port(host);
        let labels: Vec<String> = name.split('.').map(str::to_ascii_lowercase).collect();
        let path = format!("/{repository}");
        let mut hits: Vec<(&str, usize, &Credential)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, (k, _))| k.matches(&labels, port, &path))
            .map(|(i, (k, c))| (k.text.as_str(), i, c))
            .collect();
        // The kubelet's index is reverse-sorted: `reg/team` before `reg`, `reg` before `*.reg`.
        hits.sort_by(|a, b| b.0.cmp(a.0).then(a.1.cmp(&b.1)));
        let mut found: Vec<&Credential> = hits.into_iter().map(|(_, _, c)| c).collect();
        if let Some(f) = &self.fallback {
            found.extend(f.lookup_host(host, repository));
        }
        found
    }
}

impl Key {
    fn matches(&self, labels: &[String], port: &str, path: &str) -> bool {
        self.port == port
            && self.labels.len() == labels.len()
            && self
                .labels
                .iter()
                .zip(labels)
                .all(|(g, l)| glob_matches(g.as_bytes(), l.as_bytes()))
            && path.starts_with(&self.path)
    }
}

fn parse_key(k: &str) -> Key {
    let k = k.trim();
    let k = k
        .strip_prefix("https://")
        .or_else(|| k.strip_prefix("http://"))
        .unwrap_or(k);
    let (host, path) = match k.find('/') {
        Some(i) => (&k[..i], &k[i..]),
        None => (k, ""),
    };
    // `https://index.docker.io/v1/` and friends name the registry, not a repository.
    let path = path
        .strip_prefix("/v1")
        .or_else(|| path.strip_prefix("/v2"))
        .filter(|p| p.starts_with('/'))
        .unwrap_or(path);
    let path = if path == "/" { "" } else { path };
    let host = host.to_ascii_lowercase();
    // podunit names Docker Hub `docker.io`, whatever the key calls it.
    let host = match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
        _ => host,
    };
    let (name, port) = split_port(&host);
    Key {
        labels: name.split('.').map(str::to_string).collect(),
        port: port.to_string(),
        path: path.to_string(),
        text: format!("{host}{path}"),
    }
}

fn split_port(host: &str) -> (&str, &str) {
    match host.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (h, p),
        _ => (host, ""),
    }
}

/// One host label against a glob label, as Go's `filepath.Match` does for them: `*` any run of
/// characters, `?` one.
fn glob_matches(glob: &[u8], s: &[u8]) -> bool {
    match glob.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| glob_matches(rest, &s[i..])),
        Some((b'?', rest)) => !s.is_empty() && glob_matches(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && glob_matches(rest, &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn matches_like_the_kubelet() {
        let json = format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{}"}},"reg.example:5000/team":{{"username":"t","password":"tp"}},"reg.example:5000":{{"auth":"{}"}},"*.corp.example":{{"auth":"{}"}}}}}}"#,
            b64("hub:hp"),
            b64("any:ap"),
            b64("w:wp")
        );
        let k = Keyring::parse_config_json(json.as_bytes()).unwrap();
        let users = |r: &str| -> Vec<String> {
            k.lookup(&Reference::parse(r).unwrap())
                .iter()
                .map(|c| c.username.clone())
                .collect()
        };
        assert_eq!(users("busybox"), ["hub"]);
        assert_eq!(users("reg.example:5000/team/app"), ["t", "any"]);
        // The kubelet compares paths as strings: `/team` is a prefix of `/teamx/app`.
        assert_eq!(users("reg.example:5000/teamx/app"), ["t", "any"]);
        assert_eq!(users("reg.example:5000/other"), ["any"]);
        // The port must be the same: a key without one does not match a registry with one.
        assert!(users("reg.example/team/app").is_empty());
        assert_eq!(users("a.corp.example/x"), ["w"]);
        assert!(users("a.b.corp.example/x").is_empty());
        assert!(users("quay.io/x").is_empty());
        assert!(
            !format!("{k:?}").contains("hp"),
            "no password in Debug output"
        );
    }

    #[test]
    fn globs_per_label_and_pod_secrets_before_the_node() {
        let pod = Keyring::parse_config_json(
            br#"{"auths":{"reg.*.io":{"username":"g","password":"1"},"reg.eu.io":{"username":"e","password":"2"},"app?.k8s.io":{"username":"q","password":"3"}}}"#,
        )
        .unwrap();
        let node = Keyring::parse_config_json(
            br#"{"auths":{"reg.eu.io":{"username":"n","password":"4"}}}"#,
        )
        .unwrap();
        let k = pod.then(node);
        let users = |r: &str| -> Vec<String> {
            k.lookup(&Reference::parse(r).unwrap())
                .iter()
                .map(|c| c.username.clone())
                .collect()
        };
        // Reverse lexical order: `reg.eu.io` before `reg.*.io`; then the node's.
        assert_eq!(users("reg.eu.io/a"), ["e", "g", "n"]);
        assert_eq!(users("reg.us.io/a"), ["g"]);
        assert_eq!(users("app1.k8s.io/a"), ["q"]);
        assert!(users("app12.k8s.io/a").is_empty());
        assert!(!k.is_empty());
    }

    #[test]
    fn secrets_of_both_types() {
        let cfg = format!(
            r#"{{"reg.example":{{"auth":"{}"}}}}"#,
            b64("u:p:with:colons")
        );
        let data = [(".dockercfg".to_string(), cfg.into_bytes())].into();
        let k = Keyring::from_secret("kubernetes.io/dockercfg", &data).unwrap();
        let c = k.lookup(&Reference::parse("reg.example/a").unwrap());
        assert_eq!(c[0].password, "p:with:colons");
        assert!(Keyring::from_secret("kubernetes.io/dockerconfigjson", &data).is_err());
        assert!(Keyring::from_secret("Opaque", &data).is_err());
        assert!(Keyring::parse_config_json(br#"{"auths":{"x":{"auth":"%%%"}}}"#).is_err());
    }

    #[test]
    fn node_file_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("podunit-auth-{}.json", std::process::id()));
        std::fs::write(&p, br#"{"auths":{}}"#).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Keyring::load_node_file(&p).unwrap_err().contains("0600"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Keyring::load_node_file(&p).unwrap().is_empty());
        std::fs::remove_file(&p).unwrap();
        assert!(Keyring::load_node_file(&p).unwrap().is_empty());
    }
}
