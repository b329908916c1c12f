//! A small typed client for the Kubernetes API over ureq: get, list, watch, create, merge-patch,
//! delete. Blocking calls, one agent (connection pool) per client; threads call it concurrently.
//!
//! Errors from the API server arrive as `Status` objects and become [`ApiError::Status`] with the
//! HTTP code, reason and message, so callers can match on 404/409/410 the way client-go does.

pub use super::error::ApiError;
use super::kubeconfig::Credentials;
use super::watch::WatchStream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

/// Largest response body read into memory (a list of 110 pods with their ConfigMaps is far below).
const MAX_BODY: u64 = 64 << 20;
/// Per connection and direction; a TLS record (16 KiB) passes through in pieces.
const BUFFER_BYTES: usize = 16 << 10;

fn transport(e: ureq::Error) -> ApiError {
    ApiError::Transport(e.to_string())
}

/// Query parameters of list and watch calls.
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    pub field_selector: Option<String>,
    pub label_selector: Option<String>,
    pub resource_version: Option<String>,
    /// Watch only: ask for BOOKMARK events.
    pub allow_watch_bookmarks: bool,
    /// Watch only: the server ends the watch after this many seconds.
    pub timeout_seconds: Option<u32>,
}

impl ListParams {
    fn query(&self, watch: bool) -> String {
        let mut q: Vec<String> = Vec::new();
        if watch {
            q.push("watch=true".into());
            if self.allow_watch_bookmarks {
                q.push("allowWatchBookmarks=true".into());
            }
            if let Some(t) = self.timeout_seconds {
                q.push(format!("timeoutSeconds={t}"));
            }
        }
        if let Some(f) = &self.field_selector {
            q.push(format!("fieldSelector={}", encode(f)));
        }
        if let Some(l) = &self.label_selector {
            q.push(format!("labelSelector={}", encode(l)));
        }
        if let Some(rv) = &self.resource_version {
            q.push(format!("resourceVersion={}", encode(rv)));
        }
        if q.is_empty() {
            String::new()
        } else {
            format!("?{}", q.join("&"))
        }
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters pass).
pub fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The API path of a resource collection or object (`/api/v1/namespaces/ns/pods/name`).
pub fn path<K: k8s_openapi::Resource>(namespace: Option<&str>, name: Option<&str>) -> String {
    let mut p = if K::GROUP.is_empty() {
        format!("/api/{}", K::VERSION)
    } else {
        format!("/apis/{}/{}", K::GROUP, K::VERSION)
    };
    if let Some(ns) = namespace {
        p.push_str(&format!("/namespaces/{ns}"));
    }
    p.push('/');
    p.push_str(K::URL_PATH_SEGMENT);
    if let Some(n) = name {
        p.push('/');
        p.push_str(n);
    }
    p
}

/// The API client. Cheap to clone (shares the connection pool).
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    server: String,
    creds: Arc<Credentials>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .finish()
    }
}

impl Client {
    /// Builds a client that trusts only the kubeconfig's CA.
    pub fn new(creds: Credentials) -> Result<Client, ApiError> {
        let roots: Vec<Certificate<'static>> = ureq::tls::parse_pem(&creds.ca_pem)
            .filter_map(|i| match i {
                Ok(PemItem::Certificate(c)) => Some(Ok(c)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::Config(format!("certificate-authority: {e}")))?;
        if roots.is_empty() {
            return Err(ApiError::Config(
                "certificate-authority: no PEM certificate".into(),
            ));
        }
        let client_cert = match &creds.client_cert {
            None => None,
            Some((cert, key)) => {
                let chain: Vec<Certificate<'static>> = ureq::tls::parse_pem(cert)
                    .filter_map(|i| match i {
                        Ok(PemItem::Certificate(c)) => Some(c),
                        _ => None,
                    })
                    .collect();
                if chain.is_empty() {
                    return Err(ApiError::Config(
                        "client-certificate: no PEM certificate".into(),
                    ));
                }
                let key = PrivateKey::from_pem(key)
                    .map_err(|_| ApiError::Config("client-key: no PEM private key".into()))?;
                Some(ClientCert::new_with_certs(&chain, key))
            }
        };
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&roots))
            .client_cert(client_cert)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .user_agent(concat!("podunit/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(60)))
            // ureq's 128 KiB buffers each way, per pooled connection, were a fifth of the agent's
            // heap; the API server's response headers are a few hundred bytes and bodies stream.
            .input_buffer_size(BUFFER_BYTES)
            .output_buffer_size(BUFFER_BYTES)
            .max_response_header_size(BUFFER_BYTES)
            .max_idle_connections_per_host(2)
            .build()
            .into();
        Ok(Client {
            agent,
            server: creds.server.clone(),
            creds: Arc::new(creds),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.server, path)
    }

    /// `Bearer <token>`: the tokenFile is re-read on every call so rotated tokens are picked up.
    fn auth(&self) -> Option<String> {
        if let Some(f) = &self.creds.token_file
            && let Ok(t) = std::fs::read_to_string(f)
        {
            return Some(format!("Bearer {}", t.trim()));
        }
        self.creds.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    fn finish<T: DeserializeOwned>(
        resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, ApiError> {
        let mut resp = resp.map_err(transport)?;
        let code = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(transport)?;
        if !(200..300).contains(&code) {
            return Err(status_error(code, &body));
        }
        crate::manifest::unknown::decode(&body).map_err(|e| ApiError::Decode(e.to_string()))
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        let mut r = self
            .agent
            .get(self.url(path))
            .header("Accept", "application/json");
        if let Some(a) = self.auth() {
            r = r.header("Authorization", a);
        }
        Self::finish(r.call())
    }

    /// A list call (`path` is a collection).
    pub fn list<T: DeserializeOwned + k8s_openapi::ListableResource>(
        &self,
        path: &str,
        params: &ListParams,
    ) -> Result<k8s_openapi::List<T>, ApiError> {
        self.get(&format!("{path}{}", params.query(false)))
    }

    /// Starts a watch; events are read lazily from the returned stream.
    pub fn watch<T: DeserializeOwned>(
        &self,
        path: &str,
        params: &ListParams,
    ) -> Result<WatchStream<T>, ApiError> {
        let url = self.url(&format!("{path}{}", params.query(true)));
        let idle = Duration::from_secs(u64::from(params.timeout_seconds.unwrap_or(300)) + 30);
        let mut r = self
            .agent
            .get(url)
            .header("Accept", "application/json")
            .config()
            // A watch lasts as long as the server keeps it; a silent connection is dead after `idle`.
            .timeout_global(None)
            .timeout_per_read(Some(idle))
            .build();
        if let Some(a) = self.auth() {
            r = r.header("Authorization", a);
        }
        let mut resp = r.call().map_err(transport)?;
        let code = resp.status().as_u16();
        if !(200..300).contains(&code) {
            let body = resp
                .body_mut()
                .with_config()
                .limit(MAX_BODY)
                .read_to_vec()
                .unwrap_or_default();
            return Err(status_error(code, &body));
        }
        Ok(WatchStream::new(Box::new(resp.into_body().into_reader())))
    }

    fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &B,
    ) -> Result<T, ApiError> {
        let url = self.url(path);
        let mut r = match method {
            "POST" => self.agent.post(url),
            "PUT" => self.agent.put(url),
            "PATCH" => self.agent.patch(url),
            _ => self.agent.delete(url).force_send_body(),
        };
        r = r
            .header("Accept", "application/json")
            .header("Content-Type", content_type);
        if let Some(a) = self.auth() {
            r = r.header("Authorization", a);
        }
        let data = serde_json::to_vec(body).map_err(|e| ApiError::Decode(e.to_string()))?;
        Self::finish(r.send(&data[..]))
    }

    pub fn create<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ApiError> {
        self.send("POST", path, "application/json", body)
    }

    pub fn replace<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ApiError> {
        self.send("PUT", path, "application/json", body)
    }

    /// A JSON merge patch (RFC 7386); `path` may end in `/status` for the status subresource.
    pub fn merge_patch<T: DeserializeOwned>(
        &self,
        path: &str,
        patch: &serde_json::Value,
    ) -> Result<T, ApiError> {
        self.send("PATCH", path, "application/merge-patch+json", patch)
    }

    /// DELETE with `DeleteOptions` (grace period, preconditions). Returns the object (graceful) or a
    /// Status (gone at once); callers only need success.
    pub fn delete(&self, path: &str, opts: &DeleteOptions) -> Result<(), ApiError> {
        self.send::<_, serde_json::Value>("DELETE", path, "application/json", &opts.body())
            .map(|_| ())
    }
}

/// The options of a DELETE that a node uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl DeleteOptions {
    pub fn body(&self) -> serde_json::Value {
        let mut o = serde_json::json!({"apiVersion": "v1", "kind": "DeleteOptions"});
        if let Some(g) = self.grace_period_seconds {
            o["gracePeriodSeconds"] = g.into();
        }
        if self.uid.is_some() || self.resource_version.is_some() {
            let mut p = serde_json::Map::new();
            if let Some(u) = &self.uid {
                p.insert("uid".into(), u.clone().into());
            }
            if let Some(rv) = &self.resource_version {
                p.insert("resourceVersion".into(), rv.clone().into());
            }
            o["preconditions"] = p.into();
        }
        o
    }
}

/// Turns an error answer into [`ApiError::Status`], from its Status object when it has one.
pub fn status_error(code: u16, body: &[u8]) -> ApiError {
    match crate::manifest::unknown::decode::<Status>(body) {
        Ok(s) if s.reason.is_some() || s.message.is_some() => ApiError::from_status(code, s),
        _ => ApiError::Status {
            code,
            reason: String::new(),
            message: String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Node, Pod};

    #[test]
    fn paths() {
        assert_eq!(
            path::<Pod>(Some("ns"), Some("p")),
            "/api/v1/namespaces/ns/pods/p"
        );
        assert_eq!(path::<Pod>(None, None), "/api/v1/pods");
        assert_eq!(path::<Node>(None, Some("n1")), "/api/v1/nodes/n1");
        assert_eq!(
            path::<Lease>(Some("kube-node-lease"), Some("n1")),
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
        );
    }

    #[test]
    fn query_strings() {
        let p = ListParams {
            field_selector: Some("spec.nodeName=edge-1".into()),
            resource_version: Some("42".into()),
            allow_watch_bookmarks: true,
            timeout_seconds: Some(300),
            ..Default::default()
        };
        assert_eq!(
            p.query(true),
            "?watch=true&allowWatchBookmarks=true&timeoutSeconds=300&fieldSelector=spec.nodeName%3Dedge-1&resourceVersion=42"
        );
        assert_eq!(
            p.query(false),
            "?fieldSelector=spec.nodeName%3Dedge-1&resourceVersion=42"
        );
        assert_eq!(ListParams::default().query(false), "");
    }

    #[test]
    fn status_errors_are_typed() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}"#;
        let e = status_error(410, body);
        assert!(e.is_gone());
        assert_eq!(
            e,
            ApiError::Status {
                code: 410,
                reason: "Expired".into(),
                message: "too old resource version: 1 (5)".into()
            }
        );
        let e = status_error(503, b"upstream down");
        assert_eq!(e.code(), Some(503));
        assert!(e.is_transient());
        assert!(!status_error(403, b"{}").is_transient());
        assert!(ApiError::Transport("refused".into()).is_transient());
    }

    #[test]
    fn delete_options_body() {
        let o = DeleteOptions {
            grace_period_seconds: Some(0),
            uid: Some("u-1".into()),
            resource_version: None,
        };
        assert_eq!(
            o.body(),
            serde_json::json!({"apiVersion":"v1","kind":"DeleteOptions","gracePeriodSeconds":0,
                "preconditions":{"uid":"u-1"}})
        );
    }

    #[test]
    fn bad_ca_is_refused() {
        let creds = Credentials {
            server: "https://127.0.0.1:1".into(),
            ca_pem: b"not pem".to_vec(),
            client_cert: None,
            token: Some("t".into()),
            token_file: None,
        };
        assert!(matches!(Client::new(creds), Err(ApiError::Config(_))));
    }
}
