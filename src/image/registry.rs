//! The OCI distribution API, read side: manifests and blobs over HTTPS (plain HTTP only for
//! registries named insecure), with anonymous, Bearer-token and Basic authentication.

use super::auth::{Credential, Keyring};
use super::digest::Digest;
use super::error::PullErrorKind;
use super::manifest::{ACCEPT, MANIFEST_MAX};
use super::reference::Reference;
use super::transfer::{Budget, Transfer};
use crate::common::registries::{Endpoint, Registries};
use base64::Engine;
use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};

/// Trust anchors of the host (Debian/Ubuntu, then Fedora/RHEL), used with any per-registry CA.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];
/// Token responses are small; anything larger is refused.
const TOKEN_MAX: u64 = 1 << 20;
/// Error bodies are only read for their message.
const ERROR_BODY_MAX: u64 = 64 << 10;

type Response = ureq::http::Response<ureq::Body>;

/// A registry client for one pull (or many): keeps connections and tokens per endpoint.
pub struct Client {
    settings: Registries,
    keyring: Keyring,
    agents: Mutex<HashMap<String, ureq::Agent>>,
    /// `Authorization` values that worked, by endpoint host and repository.
    auth: Mutex<HashMap<(String, String), String>>,
}

impl Client {
    pub fn new(settings: Registries, keyring: Keyring) -> Client {
        Client {
            settings,
            keyring,
            agents: Mutex::new(HashMap::new()),
            auth: Mutex::new(HashMap::new()),
        }
    }

    pub fn settings(&self) -> &Registries {
        &self.settings
    }

    fn agent(&self, ep: &Endpoint) -> Result<ureq::Agent, PullErrorKind> {
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = agents.get(&ep.host) {
            return Ok(a.clone());
        }
        let mut pem = Vec::new();
        for b in SYSTEM_BUNDLES {
            if let Ok(bytes) = std::fs::read(b) {
                pem.extend_from_slice(&bytes);
                pem.push(b'\n');
                break;
            }
        }
        if let Some(ca) = self.settings.ca.get(&ep.host) {
            let bytes = std::fs::read(ca).map_err(|e| {
                PullErrorKind::Registry(format!("registries.ca.{}: {}: {e}", ep.host, ca.display()))
            })?;
            pem.extend_from_slice(&bytes);
        }
        let roots: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
            .filter_map(|i| match i {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&roots))
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .https_only(!self.settings.is_insecure(&ep.host))
            .user_agent(concat!("podunit/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(Duration::from_secs(15)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            // A stalled body: nothing for a whole low-speed window (transfer.rs checks the rate).
            .timeout_per_read(Some(Duration::from_secs(
                self.settings.limits.low_speed_seconds,
            )))
            .max_redirects(5)
            // A redirect (a blob served from object storage) never carries our credentials on.
            .redirect_auth_headers(ureq::config::RedirectAuthHeaders::Never)
            .build()
            .into();
        agents.insert(ep.host.clone(), agent.clone());
        Ok(agent)
    }

    /// The manifest `key` (tag or digest) of `r`, from the first endpoint that has it. Returns
    /// the endpoint, so blobs come from the same place.
    pub fn manifest(
        &self,
        r: &Reference,
        key: &str,
        budget: &Budget,
    ) -> Result<(Endpoint, Vec<u8>, String), PullErrorKind> {
        let mut last = None;
        for ep in self.settings.endpoints(&r.registry) {
            match self.manifest_at(&ep, r, key, budget) {
                Ok((body, ct)) => return Ok((ep, body, ct)),
                // A mirror that fails or lacks the image is skipped, as containerd does; the
                // registry itself has the last word.
                Err(e) if ep.is_mirror => last = Some(e),
                // An unreachable registry behind mirrors (an air-gapped site) says less than
                // what the mirror answered.
                Err(PullErrorKind::Unreachable(_))
                    if last
                        .as_ref()
                        .is_some_and(|l| !matches!(l, PullErrorKind::Unreachable(_))) =>
                {
                    return Err(last.expect("checked"));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| PullErrorKind::Unreachable("no endpoint".into())))
    }

    pub fn manifest_at(
        &self,
        ep: &Endpoint,
        r: &Reference,
        key: &str,
        budget: &Budget,
    ) -> Result<(Vec<u8>, String), PullErrorKind> {
        let resp = self.get(
            ep,
            r,
            &format!("manifests/{key}"),
            Some(&ACCEPT.join(", ")),
            budget,
        )?;
        let ct = header(&resp, "content-type").unwrap_or_default();
        let body = read_small(resp, MANIFEST_MAX, budget, &format!("manifest {key}"))?;
        Ok((body, ct))
    }

    /// A small blob (the config), read whole, at most `max` bytes.
    pub fn blob_bytes(
        &self,
        ep: &Endpoint,
        r: &Reference,
        d: &Digest,
        max: u64,
        budget: &Budget,
    ) -> Result<Vec<u8>, PullErrorKind> {
        let resp = self.get(ep, r, &format!("blobs/{d}"), None, budget)?;
        read_small(resp, max, budget, &format!("blob {d}"))
    }

    /// A blob as a stream (layers), read under `budget`'s time bounds (a timeout is an
    /// [`std::io::ErrorKind::TimedOut`] naming the limit). The caller verifies size and digest.
    pub fn blob(
        &self,
        ep: &Endpoint,
        r: &Reference,
        d: &Digest,
        budget: &Budget,
    ) -> Result<impl Read + use<>, PullErrorKind> {
        let resp = self.get(ep, r, &format!("blobs/{d}"), None, budget)?;
        Ok(Transfer::new(resp.into_body().into_reader(), *budget))
    }

    /// GET `/v2/<repo>/<rest>`, answering an authentication challenge once per credential.
    fn get(
        &self,
        ep: &Endpoint,
        r: &Reference,
        rest: &str,
        accept: Option<&str>,
        budget: &Budget,
    ) -> Result<Response, PullErrorKind> {
        let agent = self.agent(ep)?;
        let url = format!("{}/v2/{}/{rest}", ep.base, r.repository);
        let cache_key = (ep.host.clone(), r.repository.clone());
        let cached = self
            .auth
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cache_key)
            .cloned();
        let resp = send(&agent, &url, accept, cached.as_deref(), budget)?;
        if !matches!(resp.status().as_u16(), 401 | 403) || cached.is_some() && resp.status() == 403
        {
            return check(resp, &url);
        }
        let challenge = header(&resp, "www-authenticate").unwrap_or_default();
        let first = error_message(resp);
        // A mirror's own credentials first, then the registry's (the mirror may pass them on).
        let mut creds = self.keyring.lookup_host(&ep.host, &r.repository);
        if ep.is_mirror {
            creds.extend(self.keyring.lookup(r));
        }
        let mut tries: Vec<Option<&Credential>> = creds.into_iter().map(Some).collect();
        if tries.is_empty() {
            tries.push(None);
        }
        let mut last = first;
        for cred in tries {
            let value = match self.authorize(&agent, r, &challenge, cred, budget) {
                Ok(v) => v,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let resp = send(&agent, &url, accept, Some(&value), budget)?;
            if matches!(resp.status().as_u16(), 401 | 403) {
                last = error_message(resp);
                continue;
            }
            self.auth
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(cache_key.clone(), value);
            return check(resp, &url);
        }
        Err(PullErrorKind::Unauthorized(format!("{}: {last}", ep.host)))
    }

    /// The `Authorization` value for `challenge` with `cred` (or none).
    fn authorize(
        &self,
        agent: &ureq::Agent,
        r: &Reference,
        challenge: &str,
        cred: Option<&Credential>,
        budget: &Budget,
    ) -> Result<String, String> {
        let (scheme, params) = parse_challenge(challenge);
        match scheme.to_ascii_lowercase().as_str() {
            "basic" => {
                let c = cred.ok_or(
                    "the registry requires a user name and password (no credentials for it)",
                )?;
                Ok(basic(c))
            }
            "bearer" => {
                let realm = params
                    .get("realm")
                    .ok_or("Bearer challenge without a realm")?;
                self.check_realm(realm)?;
                let scope = params
                    .get("scope")
                    .cloned()
                    .unwrap_or_else(|| format!("repository:{}:pull", r.repository));
                let mut url = format!(
                    "{realm}{}scope={}",
                    if realm.contains('?') { '&' } else { '?' },
                    encode(&scope)
                );
                if let Some(s) = params.get("service") {
                    url.push_str(&format!("&service={}", encode(s)));
                }
                let remaining = budget.remaining().ok_or_else(|| budget.expired_message())?;
                let mut req = agent
                    .get(&url)
                    .config()
                    .timeout_global(Some(remaining))
                    .build();
                if let Some(c) = cred {
                    req = req.header("Authorization", basic(c));
                }
                let resp = req
                    .call()
                    .map_err(|e| format!("token request to {realm}: {e}"))?;
                if resp.status() != 200 {
                    return Err(format!("token request to {realm}: {}", error_message(resp)));
                }
                let body = resp
                    .into_body()
                    .with_config()
                    .limit(TOKEN_MAX)
                    .read_to_vec()
                    .map_err(|e| format!("token response: {e}"))?;
                #[derive(serde::Deserialize)]
                struct Token {
                    token: Option<String>,
                    access_token: Option<String>,
                }
                let t: Token =
                    serde_json::from_slice(&body).map_err(|e| format!("token response: {e}"))?;
                let t = t
                    .token
                    .or(t.access_token)
                    .filter(|t| !t.is_empty())
                    .ok_or("token response without a token")?;
                if t.bytes().any(|b| b.is_ascii_control() || b == b' ') {
                    return Err("token response: the token has spaces or control characters".into());
                }
                Ok(format!("Bearer {t}"))
            }
            other => Err(format!("authentication scheme {other:?} is not supported")),
        }
    }
}

impl Client {
    /// A token realm gets the registry's credentials, so it must be as trusted as the
    /// registry: HTTPS, or plain HTTP only to a host that is itself listed in
    /// `registries.insecure`. That the registry is insecure says nothing about the host its
    /// challenge names (Docker and containerd send credentials to any realm; podunit does not).
    fn check_realm(&self, realm: &str) -> Result<(), String> {
        let uri: ureq::http::Uri = realm
            .parse()
            .map_err(|_| format!("token realm {realm:?} is not a URL"))?;
        let host = uri
            .authority()
            .map(|a| a.as_str())
            .filter(|a| !a.contains('@'))
            .ok_or_else(|| format!("token realm {realm:?} has no host"))?;
        match uri.scheme_str() {
            Some("https") => Ok(()),
            Some("http") if self.settings.is_insecure(host) => Ok(()),
            Some("http") => Err(format!(
                "token realm {realm:?} is plain HTTP and {host} is not in registries.insecure: \
                 no credentials or token request are sent there"
            )),
            _ => Err(format!("token realm {realm:?} is not HTTPS")),
        }
    }
}

/// A whole small body (manifest, config), at most `max` bytes, within the pull's time.
fn read_small(
    resp: Response,
    max: u64,
    budget: &Budget,
    what: &str,
) -> Result<Vec<u8>, PullErrorKind> {
    let mut out = Vec::new();
    let body = resp.into_body().into_reader().take(max + 1);
    Transfer::new(body, *budget)
        .read_to_end(&mut out)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => PullErrorKind::Timeout(format!("{what}: {e}")),
            _ => PullErrorKind::Registry(format!("{what}: {e}")),
        })?;
    if out.len() as u64 > max {
        return Err(PullErrorKind::Invalid(format!(
            "{what} is larger than {max} bytes"
        )));
    }
    Ok(out)
}

fn basic(c: &Credential) -> String {
    let raw = format!("{}:{}", c.username, c.password);
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

fn send(
    agent: &ureq::Agent,
    url: &str,
    accept: Option<&str>,
    auth: Option<&str>,
    budget: &Budget,
) -> Result<Response, PullErrorKind> {
    let remaining = budget
        .remaining()
        .ok_or_else(|| PullErrorKind::Timeout(budget.expired_message()))?;
    let mut req = agent
        .get(url)
        .config()
        .timeout_global(Some(remaining))
        .build();
    if let Some(a) = accept {
        req = req.header("Accept", a);
    }
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    req.call().map_err(|e| match e {
        ureq::Error::Timeout(ureq::Timeout::Global) => {
            PullErrorKind::Timeout(format!("{url}: {}", budget.expired_message()))
        }
        e => PullErrorKind::Unreachable(format!("{url}: {e}")),
    })
}

fn check(resp: Response, url: &str) -> Result<Response, PullErrorKind> {
    match resp.status().as_u16() {
        200 => Ok(resp),
        404 => Err(PullErrorKind::NotFound(format!(
            "{url}: {}",
            error_message(resp)
        ))),
        401 | 403 => Err(PullErrorKind::Unauthorized(format!(
            "{url}: {}",
            error_message(resp)
        ))),
        _ => Err(PullErrorKind::Registry(format!(
            "{url}: {}",
            error_message(resp)
        ))),
    }
}

fn header(resp: &Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The registry's own words: `CODE: message` from its JSON errors, else the HTTP status.
fn error_message(resp: Response) -> String {
    let status = resp.status();
    let body = resp
        .into_body()
        .with_config()
        .limit(ERROR_BODY_MAX)
        .read_to_vec()
        .unwrap_or_default();
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<E>,
    }
    #[derive(serde::Deserialize)]
    struct E {
        code: Option<String>,
        message: Option<String>,
    }
    if let Ok(e) = serde_json::from_slice::<Errors>(&body) {
        let parts: Vec<String> = e
            .errors
            .iter()
            .map(|e| match (&e.code, &e.message) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (Some(c), None) => c.clone(),
                (None, Some(m)) => m.clone(),
                (None, None) => String::new(),
            })
            .collect();
        if !parts.is_empty() {
            return format!("{status}: {}", parts.join("; "));
        }
    }
    status.to_string()
}

/// `Bearer realm="..",service=".."` -> ("Bearer", {realm, service}).
pub fn parse_challenge(h: &str) -> (String, HashMap<String, String>) {
    let h = h.trim();
    let (scheme, rest) = h.split_once(' ').unwrap_or((h, ""));
    let mut params = HashMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ',')).collect();
        if key.is_empty() {
            break;
        }
        if chars.next() != Some('=') {
            break;
        }
        let mut val = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => val.extend(chars.next()),
                    '"' => break,
                    c => val.push(c),
                }
            }
        } else {
            val = std::iter::from_fn(|| chars.next_if(|c| *c != ',')).collect();
        }
        params.insert(key.trim().to_ascii_lowercase(), val);
    }
    (scheme.to_string(), params)
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_challenges() {
        let (s, p) = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull,push""#,
        );
        assert_eq!(s, "Bearer");
        assert_eq!(p["realm"], "https://auth.docker.io/token");
        assert_eq!(p["service"], "registry.docker.io");
        assert_eq!(p["scope"], "repository:library/nginx:pull,push");
        let (s, p) = parse_challenge(r#"Basic realm="Registry Realm""#);
        assert_eq!(
            (s.as_str(), p["realm"].as_str()),
            ("Basic", "Registry Realm")
        );
        assert_eq!(encode("repository:a/b:pull"), "repository%3Aa%2Fb%3Apull");
    }
}
