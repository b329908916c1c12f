//! Loading a kubeconfig: the current context's cluster and user, resolved into what the client needs.
//!
//! Only what a node needs is supported: certificate-authority(-data), client-certificate/key(-data),
//! token and tokenFile. `insecure-skip-tls-verify` and plain `http://` servers are refused: the server
//! certificate is always verified against the kubeconfig's CA, nothing else is trusted.

use base64::Engine;
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// The parts of the kubeconfig file format that matter here (`clientcmd/api/v1`).
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "kebab-case", default)]
struct File {
    clusters: Vec<Named<Cluster>>,
    users: Vec<NamedUser>,
    contexts: Vec<Named<Context>>,
    current_context: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "context")]
    cluster: T,
}

#[derive(Debug, Deserialize)]
struct NamedUser {
    name: String,
    user: User,
}

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "kebab-case", default)]
struct Cluster {
    server: String,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "kebab-case", default)]
struct User {
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    client_key: Option<PathBuf>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
}

/// Everything needed to talk to the API server, read and checked.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// `https://host:port` without a trailing slash.
    pub server: String,
    /// PEM bytes of the trusted CA certificate(s).
    pub ca_pem: Vec<u8>,
    /// PEM bytes of the client certificate chain and key.
    pub client_cert: Option<(Vec<u8>, Vec<u8>)>,
    /// A bearer token given inline.
    pub token: Option<String>,
    /// A file re-read for the bearer token (rotated tokens).
    pub token_file: Option<PathBuf>,
}

impl fmt::Debug for Credentials {
    // Never print key material or tokens.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("server", &self.server)
            .field("client_cert", &self.client_cert.is_some())
            .field("token", &self.token.is_some())
            .field("token_file", &self.token_file)
            .finish()
    }
}

/// Why a kubeconfig cannot be used.
#[derive(Debug)]
pub enum KubeconfigError {
    Read(PathBuf, std::io::Error),
    Parse(PathBuf, String),
    /// A file holding credentials is readable or writable by others, or not owned by root.
    NotRootOnly {
        path: PathBuf,
        mode: u32,
        uid: u32,
    },
    /// Structurally fine but unusable: which context/cluster/user and why.
    Invalid(String),
}

impl fmt::Display for KubeconfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KubeconfigError::Read(p, e) => write!(f, "{}: {e}", p.display()),
            KubeconfigError::Parse(p, e) => write!(f, "{}: {e}", p.display()),
            KubeconfigError::NotRootOnly { path, mode, uid } => write!(
                f,
                "{}: holds credentials but is not root-only (mode {:04o}, owner uid {uid}); \
                 run `chown root:root {0} && chmod 0600 {0}`",
                path.display(),
                mode & 0o7777,
            ),
            KubeconfigError::Invalid(m) => write!(f, "kubeconfig: {m}"),
        }
    }
}

impl std::error::Error for KubeconfigError {}

/// Who must own credential files (root, the default, on a real host; tests pass their own uid).
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnerCheck {
    pub uid: u32,
}

/// Refuses a credential file that others could read or change.
pub fn check_root_only(path: &Path, owner: OwnerCheck) -> Result<(), KubeconfigError> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).map_err(|e| KubeconfigError::Read(path.to_path_buf(), e))?;
    if md.mode() & 0o077 != 0 || md.uid() != owner.uid {
        return Err(KubeconfigError::NotRootOnly {
            path: path.to_path_buf(),
            mode: md.mode(),
            uid: md.uid(),
        });
    }
    Ok(())
}

/// Reads `path`, checks that it and every key or token file it names are root-only, and resolves the
/// current context.
pub fn load(path: &Path, owner: OwnerCheck) -> Result<Credentials, KubeconfigError> {
    check_root_only(path, owner)?;
    let text =
        std::fs::read_to_string(path).map_err(|e| KubeconfigError::Read(path.to_path_buf(), e))?;
    let base = path.parent().unwrap_or(Path::new("/"));
    resolve(&text, base, &|p: &Path, secret: bool| {
        if secret {
            check_root_only(p, owner)?;
        }
        std::fs::read(p).map_err(|e| KubeconfigError::Read(p.to_path_buf(), e))
    })
    .map_err(|e| match e {
        KubeconfigError::Parse(_, m) => KubeconfigError::Parse(path.to_path_buf(), m),
        e => e,
    })
}

/// Reads a referenced file; `secret` says it holds key material and must be root-only.
type ReadFile<'a> = dyn Fn(&Path, bool) -> Result<Vec<u8>, KubeconfigError> + 'a;

/// Pure part of [`load`]: parses `text`, files are read through `read` (relative to `base`).
pub fn resolve(text: &str, base: &Path, read: &ReadFile) -> Result<Credentials, KubeconfigError> {
    let file: File = serde_saphyr::from_str(text)
        .map_err(|e| KubeconfigError::Parse(PathBuf::new(), e.to_string()))?;
    let invalid = |m: String| KubeconfigError::Invalid(m);
    let ctx_name = file
        .current_context
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| (file.contexts.len() == 1).then(|| file.contexts[0].name.clone()))
        .ok_or_else(|| invalid("no current-context".into()))?;
    let ctx = &file
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .ok_or_else(|| invalid(format!("context {ctx_name:?} not found")))?
        .cluster;
    let cluster = &file
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .ok_or_else(|| invalid(format!("cluster {:?} not found", ctx.cluster)))?
        .cluster;
    let user = file
        .users
        .iter()
        .find(|u| u.name == ctx.user)
        .map(|u| &u.user)
        .ok_or_else(|| invalid(format!("user {:?} not found", ctx.user)))?;

    if cluster.insecure_skip_tls_verify {
        return Err(invalid(format!(
            "cluster {:?}: insecure-skip-tls-verify is refused; give certificate-authority",
            ctx.cluster
        )));
    }
    if cluster.tls_server_name.is_some() {
        return Err(invalid(format!(
            "cluster {:?}: tls-server-name is not supported; use a server URL whose host the \
             certificate names",
            ctx.cluster
        )));
    }
    let server = cluster.server.trim_end_matches('/').to_string();
    if !server.starts_with("https://") {
        return Err(invalid(format!(
            "cluster {:?}: server {server:?} is not https://",
            ctx.cluster
        )));
    }
    let abs = |p: &Path| base.join(p);
    let ca_pem = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(d), _) => b64(d, "certificate-authority-data")?,
        (None, Some(p)) => read(&abs(p), false)?,
        (None, None) => {
            return Err(invalid(format!(
                "cluster {:?}: no certificate-authority(-data); the server must be verified",
                ctx.cluster
            )));
        }
    };
    let cert = match (&user.client_certificate_data, &user.client_certificate) {
        (Some(d), _) => Some(b64(d, "client-certificate-data")?),
        (None, Some(p)) => Some(read(&abs(p), false)?),
        _ => None,
    };
    let key = match (&user.client_key_data, &user.client_key) {
        (Some(d), _) => Some(b64(d, "client-key-data")?),
        (None, Some(p)) => Some(read(&abs(p), true)?),
        _ => None,
    };
    let client_cert = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => {
            return Err(invalid(format!(
                "user {:?}: client certificate and key must be given together",
                ctx.user
            )));
        }
    };
    let token_file = user.token_file.as_deref().map(abs);
    if let Some(t) = &token_file {
        // Read once now so that a missing or loose file is reported at start.
        read(t, true)?;
    }
    let token = user.token.clone().filter(|t| !t.is_empty());
    if client_cert.is_none() && token.is_none() && token_file.is_none() {
        return Err(invalid(format!(
            "user {:?}: no client certificate, token or tokenFile",
            ctx.user
        )));
    }
    Ok(Credentials {
        server,
        ca_pem,
        client_cert,
        token,
        token_file,
    })
}

fn b64(data: &str, what: &str) -> Result<Vec<u8>, KubeconfigError> {
    let clean: String = data.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(clean)
        .map_err(|e| KubeconfigError::Invalid(format!("{what}: not base64: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn files(m: &[(&str, &str)]) -> impl Fn(&Path, bool) -> Result<Vec<u8>, KubeconfigError> {
        let map: BTreeMap<PathBuf, Vec<u8>> = m
            .iter()
            .map(|(p, c)| (PathBuf::from(p), c.as_bytes().to_vec()))
            .collect();
        move |p: &Path, _| {
            map.get(p).cloned().ok_or_else(|| {
                KubeconfigError::Read(p.to_path_buf(), std::io::ErrorKind::NotFound.into())
            })
        }
    }

    const CFG: &str = r#"
apiVersion: v1
kind: Config
current-context: node
clusters:
- name: other
  cluster: {server: "https://other:6443", certificate-authority-data: b3RoZXI=}
- name: prod
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority: ca.crt
users:
- name: node1
  user:
    client-certificate: /abs/node.crt
    client-key-data: S0VZ
contexts:
- name: node
  context: {cluster: prod, user: node1}
"#;

    #[test]
    fn resolves_current_context_with_files_and_data() {
        let read = files(&[("/etc/podunit/ca.crt", "CA"), ("/abs/node.crt", "CERT")]);
        let c = resolve(CFG, Path::new("/etc/podunit"), &read).unwrap();
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert_eq!(c.ca_pem, b"CA");
        assert_eq!(c.client_cert, Some((b"CERT".to_vec(), b"KEY".to_vec())));
        assert_eq!(c.token, None);
    }

    #[test]
    fn token_and_token_file() {
        let cfg = CFG.replace(
            "    client-certificate: /abs/node.crt\n    client-key-data: S0VZ\n",
            "    token: abc\n    tokenFile: tok\n",
        );
        let read = files(&[("/etc/podunit/ca.crt", "CA"), ("/etc/podunit/tok", "T")]);
        let c = resolve(&cfg, Path::new("/etc/podunit"), &read).unwrap();
        assert_eq!(c.token.as_deref(), Some("abc"));
        assert_eq!(c.token_file.as_deref(), Some(Path::new("/etc/podunit/tok")));
        assert!(
            !format!("{c:?}").contains("abc"),
            "Debug must hide the token"
        );
    }

    #[test]
    fn refusals() {
        let read = files(&[("/etc/podunit/ca.crt", "CA"), ("/abs/node.crt", "CERT")]);
        let cases = [
            (
                CFG.replace(
                    "certificate-authority: ca.crt",
                    "insecure-skip-tls-verify: true",
                ),
                "insecure-skip-tls-verify",
            ),
            (
                CFG.replace("certificate-authority: ca.crt", "proxy-url: x"),
                "no certificate-authority",
            ),
            (
                CFG.replace("https://10.0.0.1", "http://10.0.0.1"),
                "not https",
            ),
            (
                CFG.replace("current-context: node", "current-context: x"),
                "\"x\" not found",
            ),
            (
                CFG.replace("client-key-data: S0VZ", "username: x"),
                "together",
            ),
            (CFG.replace("S0VZ", "'%%%'"), "not base64"),
        ];
        for (cfg, want) in cases {
            let e = resolve(&cfg, Path::new("/etc/podunit"), &read)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e} should contain {want}");
        }
    }

    #[test]
    fn root_only_check() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("podunit-kc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("kubeconfig");
        std::fs::write(&f, "x").unwrap();
        let me = OwnerCheck {
            uid: unsafe_free_uid(&f),
        };
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = check_root_only(&f, me).unwrap_err().to_string();
        assert!(e.contains("not root-only (mode 0640"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_root_only(&f, me).unwrap();
        let other = OwnerCheck { uid: me.uid + 1 };
        assert!(check_root_only(&f, other).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn unsafe_free_uid(p: &Path) -> u32 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().uid()
    }
}
