//! A test double of a registry's token service (the `realm` of a `WWW-Authenticate: Bearer`
//! challenge, as auth.docker.io is for Docker Hub): an HTTPS endpoint on 127.0.0.1 that checks
//! Basic credentials and issues JWTs signed by a key the registry is configured to trust
//! (`auth: token: rootcertbundle`). It only issues tokens; the registry, which is real
//! (docker-registry), verifies them and enforces their access claims. A double because no token
//! server is packaged in Debian, and it keeps what it was asked for, so a test can tell that the
//! client went to the realm with its credentials.

use super::registry::{Certs, PASSWORD, USER};
use base64::Engine;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

pub const SERVICE: &str = "podunit-test-registry";
pub const ISSUER: &str = "podunit-test-token-issuer";

/// One request the token service answered.
#[derive(Debug, Clone)]
pub struct Asked {
    /// Path and query, e.g. `/token?scope=repository%3Alibrary%2Fbusybox%3Apull&service=...`.
    pub target: String,
    /// Whether it carried the right Basic credentials (and so got a token).
    pub granted: bool,
    /// Whether it carried an `Authorization` header at all.
    pub with_credentials: bool,
}

pub struct TokenService {
    pub realm: String,
    /// The issuer's certificate (PEM): the registry's `rootcertbundle`.
    pub bundle: PathBuf,
    key: PathBuf,
    /// Base64 DER of the issuer's certificate, the tokens' `x5c`.
    x5c: String,
    pub asked: Arc<Mutex<Vec<Asked>>>,
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn b64url(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `%XX` decoding of a query value.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl TokenService {
    /// Makes the signing key and certificate under `dir` and serves on a free port with the
    /// TLS certificate of `certs` (its CA is the one clients trust for the registry).
    pub fn start(dir: &Path, certs: &Certs) -> TokenService {
        std::fs::create_dir_all(dir).unwrap();
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=podunit test token issuer",
                "-keyout",
                "sign.key",
                "-out",
                "sign.pem",
            ],
            dir,
        );
        openssl(
            &[
                "x509", "-in", "sign.pem", "-outform", "DER", "-out", "sign.der",
            ],
            dir,
        );
        let tls_dir = certs.dir.clone();
        openssl(
            &[
                "x509",
                "-in",
                "server.pem",
                "-outform",
                "DER",
                "-out",
                "server.der",
            ],
            &tls_dir,
        );
        openssl(
            &[
                "pkcs8",
                "-topk8",
                "-nocrypt",
                "-in",
                "server.key",
                "-outform",
                "DER",
                "-out",
                "server.key.der",
            ],
            &tls_dir,
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let realm = format!("https://{}/token", listener.local_addr().unwrap());
        let svc = TokenService {
            realm,
            bundle: dir.join("sign.pem"),
            key: dir.join("sign.key"),
            x5c: base64::engine::general_purpose::STANDARD
                .encode(std::fs::read(dir.join("sign.der")).unwrap()),
            asked: Arc::default(),
        };
        let cert = rustls::pki_types::CertificateDer::from(
            std::fs::read(tls_dir.join("server.der")).unwrap(),
        );
        let key = rustls::pki_types::PrivateKeyDer::try_from(
            std::fs::read(tls_dir.join("server.key.der")).unwrap(),
        )
        .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
        let config = Arc::new(config);
        let issuer = svc.issuer();
        let asked = svc.asked.clone();
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { return };
                let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                    continue;
                };
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                if serve(&mut tls, &issuer, &asked).is_ok() {
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                }
            }
        });
        svc
    }

    fn issuer(&self) -> Issuer {
        Issuer {
            key: self.key.clone(),
            x5c: self.x5c.clone(),
        }
    }

    /// A token for `repos` with `actions`, as the service would issue it (for pushes).
    pub fn token(&self, repos: &[&str], actions: &[&str]) -> String {
        let scopes: Vec<String> = repos
            .iter()
            .map(|r| format!("repository:{r}:{}", actions.join(",")))
            .collect();
        self.issuer().sign(&scopes)
    }

    /// The registry's `auth:` section trusting this service.
    pub fn registry_auth(&self) -> String {
        format!(
            "auth:\n  token:\n    realm: {}\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {}\n",
            self.realm,
            self.bundle.display()
        )
    }
}

struct Issuer {
    key: PathBuf,
    x5c: String,
}

impl Issuer {
    /// An RS256 JWT granting each `repository:NAME:ACTIONS` scope, signed with `openssl dgst`.
    fn sign(&self, scopes: &[String]) -> String {
        let access: Vec<serde_json::Value> = scopes
            .iter()
            .filter_map(|s| {
                let mut p = s.splitn(3, ':');
                let (ty, name, actions) = (p.next()?, p.next()?, p.next()?);
                Some(serde_json::json!({"type": ty, "name": name,
                    "actions": actions.split(',').collect::<Vec<_>>()}))
            })
            .collect();
        let header = serde_json::json!({"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]});
        let t = now();
        let claims = serde_json::json!({"iss": ISSUER, "sub": USER, "aud": SERVICE,
            "exp": t + 300, "nbf": t - 10, "iat": t, "jti": format!("{t}-{}", scopes.len()),
            "access": access});
        let input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let mut child = Command::new("openssl")
            .args(["dgst", "-sha256", "-sign"])
            .arg(&self.key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("openssl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        format!("{input}.{}", b64url(&out.stdout))
    }
}

/// One HTTP/1.1 request on `s`, answered and closed.
fn serve(
    s: &mut (impl Read + Write),
    issuer: &Issuer,
    asked: &Mutex<Vec<Asked>>,
) -> std::io::Result<()> {
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 64 * 1024 {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        req.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&req).into_owned();
    let target = text
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or_default()
        .to_string();
    let auth = text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("authorization")
            .then(|| v.trim().to_string())
    });
    let want = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    );
    let granted = auth.as_deref() == Some(want.as_str());
    asked.lock().unwrap().push(Asked {
        target: target.clone(),
        granted,
        with_credentials: auth.is_some(),
    });
    let query = target.split_once('?').map_or("", |(_, q)| q);
    let scopes: Vec<String> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == "scope")
        .map(|(_, v)| unescape(v))
        .collect();
    let (status, body) = if granted {
        let t = issuer.sign(&scopes);
        (
            "200 OK",
            serde_json::json!({"token": t, "access_token": t, "expires_in": 300}).to_string(),
        )
    } else {
        (
            "401 Unauthorized",
            r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#
                .to_string(),
        )
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    s.flush()
}
