//! Authentication and authorisation as the kubelet's webhook mode: a client certificate that
//! chains to the client CA, or a bearer token the API server confirms (`TokenReview`); then a
//! `SubjectAccessReview` for the request's attributes on this Node. Anonymous requests are refused.
//! Answers are cached as the kubelet's defaults say (tokens 2 min; allowed 5 min, denied 30 s).

use crate::kube::client::{ApiError, Client};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a request asks for on the Node object (the kubelet's `GetRequestAttributes`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: String,
    pub subresource: &'static str,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// 401: no usable credentials.
    Unauthenticated,
    /// 403, with the kubelet's message.
    Forbidden(String),
    /// 500: the API server could not be asked.
    Unavailable(String),
}

/// `/stats/...` is `stats`, `/metrics...` `metrics`, `/logs/...` `log`, anything else `proxy`;
/// the verb is the HTTP method's.
pub fn attributes(method: &str, path: &str) -> Attributes {
    let verb = match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    };
    let subresource = if is_subpath(path, "/stats") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs") {
        "log"
    } else {
        "proxy"
    };
    Attributes {
        verb: verb.to_string(),
        subresource,
    }
}

fn is_subpath(path: &str, base: &str) -> bool {
    path == base
        || path
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The 403 message the kubelet sends.
pub fn forbidden_message(u: &User, a: &Attributes) -> String {
    format!(
        "Forbidden (user={}, verb={}, resource=nodes, subresource={})",
        u.name, a.verb, a.subresource
    )
}

/// The SubjectAccessReview for `a` on node `node`.
pub fn access_review(u: &User, a: &Attributes, node: &str) -> serde_json::Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": u.name,
            "uid": u.uid,
            "groups": u.groups,
            "extra": u.extra,
            "resourceAttributes": {
                "verb": a.verb,
                "version": "v1",
                "resource": "nodes",
                "subresource": a.subresource,
                "name": node,
            },
        },
    })
}

/// The user a TokenReview's answer names; None when it is not authenticated.
pub fn reviewed_user(review: &serde_json::Value) -> Option<User> {
    let st = &review["status"];
    if st["authenticated"].as_bool() != Some(true) {
        return None;
    }
    let u = &st["user"];
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let name = u["username"].as_str()?.to_string();
    let extra = u["extra"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), strings(v)))
        .collect();
    Some(User {
        name,
        uid: u["uid"].as_str().unwrap_or_default().to_string(),
        groups: strings(&u["groups"]),
        extra,
    })
}

const TOKEN_TTL: Duration = Duration::from_secs(120);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);
/// Entries kept at most per cache; a full cache is cleared of expired entries, then emptied.
const CACHE_MAX: usize = 1024;

struct Cache<K, V> {
    map: HashMap<K, (Instant, V)>,
}

impl<K: std::hash::Hash + Eq, V: Clone> Cache<K, V> {
    fn new() -> Self {
        Cache {
            map: HashMap::new(),
        }
    }

    fn get(&self, k: &K) -> Option<V> {
        self.map
            .get(k)
            .filter(|(until, _)| Instant::now() < *until)
            .map(|(_, v)| v.clone())
    }

    fn put(&mut self, k: K, v: V, ttl: Duration) {
        if self.map.len() >= CACHE_MAX {
            let now = Instant::now();
            self.map.retain(|_, (until, _)| now < *until);
            if self.map.len() >= CACHE_MAX {
                self.map.clear();
            }
        }
        self.map.insert(k, (Instant::now() + ttl, v));
    }
}

/// Decides who a request is from and whether it may do what it asks.
pub struct Gate {
    client: Client,
    node: String,
    client_ca: Arc<dyn ClientCertVerifier>,
    tokens: Mutex<Cache<[u8; 32], Option<User>>>,
    reviews: Mutex<Cache<(String, Attributes), bool>>,
}

impl Gate {
    pub fn new(client: Client, node: String, client_ca: Arc<dyn ClientCertVerifier>) -> Gate {
        Gate {
            client,
            node,
            client_ca,
            tokens: Mutex::new(Cache::new()),
            reviews: Mutex::new(Cache::new()),
        }
    }

    /// The user of a request: its verified client certificate, else its bearer token.
    pub fn authenticate(
        &self,
        peer: Option<&[CertificateDer<'static>]>,
        authorization: Option<&str>,
    ) -> Result<User, Denied> {
        if let Some((end, chain)) = peer.and_then(|p| p.split_first())
            && self
                .client_ca
                .verify_client_cert(end, chain, UnixTime::now())
                .is_ok()
            && let Some((name, groups)) = super::subject::user_of(end)
        {
            return Ok(User {
                name,
                groups,
                ..Default::default()
            });
        }
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(Denied::Unauthenticated)?;
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(u) = self.tokens.lock().unwrap().get(&key) {
            return u.ok_or(Denied::Unauthenticated);
        }
        let review = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        });
        let answer: serde_json::Value = self
            .client
            .create("/apis/authentication.k8s.io/v1/tokenreviews", &review)
            .map_err(unavailable)?;
        let user = reviewed_user(&answer);
        let ttl = if user.is_some() {
            TOKEN_TTL
        } else {
            DENIED_TTL
        };
        self.tokens.lock().unwrap().put(key, user.clone(), ttl);
        user.ok_or(Denied::Unauthenticated)
    }

    /// Whether `u` may do `a` on this node.
    pub fn authorize(&self, u: &User, a: &Attributes) -> Result<(), Denied> {
        let body = access_review(u, a, &self.node);
        let key = (body["spec"].to_string(), a.clone());
        let cached = self.reviews.lock().unwrap().get(&key);
        let allowed = match cached {
            Some(v) => v,
            None => {
                let answer: serde_json::Value = self
                    .client
                    .create("/apis/authorization.k8s.io/v1/subjectaccessreviews", &body)
                    .map_err(unavailable)?;
                let v = answer["status"]["allowed"].as_bool() == Some(true);
                let ttl = if v { ALLOWED_TTL } else { DENIED_TTL };
                self.reviews.lock().unwrap().put(key, v, ttl);
                v
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(Denied::Forbidden(forbidden_message(u, a)))
        }
    }
}

fn unavailable(e: ApiError) -> Denied {
    Denied::Unavailable(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_the_kubelets_subresources() {
        let sub = |p: &str| attributes("GET", p).subresource;
        assert_eq!(sub("/stats/summary"), "stats");
        assert_eq!(sub("/stats"), "stats");
        assert_eq!(sub("/statsx"), "proxy");
        assert_eq!(sub("/metrics"), "metrics");
        assert_eq!(sub("/metrics/resource"), "metrics");
        assert_eq!(sub("/logs/syslog"), "log");
        assert_eq!(sub("/logs"), "log");
        assert_eq!(sub("/containerLogs/default/web/main"), "proxy");
        assert_eq!(sub("/pods"), "proxy");
        assert_eq!(sub("/healthz"), "proxy");
        assert_eq!(sub("/exec/default/web/main"), "proxy");
    }

    #[test]
    fn verbs_come_from_the_method() {
        let verb = |m: &str| attributes(m, "/pods").verb;
        assert_eq!(verb("GET"), "get");
        assert_eq!(verb("HEAD"), "get");
        assert_eq!(verb("POST"), "create");
        assert_eq!(verb("PUT"), "update");
        assert_eq!(verb("PATCH"), "patch");
        assert_eq!(verb("DELETE"), "delete");
        assert_eq!(verb("OPTIONS"), "");
    }

    #[test]
    fn the_review_names_the_node_and_the_user() {
        let u = User {
            name: "alice".into(),
            uid: "1".into(),
            groups: vec!["dev".into()],
            extra: BTreeMap::from([("scopes".into(), vec!["a".into()])]),
        };
        let a = attributes("GET", "/stats/summary");
        let r = access_review(&u, &a, "edge-1");
        let ra = &r["spec"]["resourceAttributes"];
        assert_eq!(ra["resource"], "nodes");
        assert_eq!(ra["subresource"], "stats");
        assert_eq!(ra["name"], "edge-1");
        assert_eq!(ra["verb"], "get");
        assert_eq!(r["spec"]["user"], "alice");
        assert_eq!(r["spec"]["groups"][0], "dev");
        assert_eq!(r["spec"]["extra"]["scopes"][0], "a");
        assert_eq!(
            forbidden_message(&u, &a),
            "Forbidden (user=alice, verb=get, resource=nodes, subresource=stats)"
        );
    }

    #[test]
    fn token_reviews_authenticate_only_when_they_say_so() {
        let ok = json!({"status": {"authenticated": true, "user": {"username": "system:serviceaccount:default:x",
            "uid": "u1", "groups": ["system:serviceaccounts"], "extra": {"k": ["v"]}}}});
        let u = reviewed_user(&ok).unwrap();
        assert_eq!(u.name, "system:serviceaccount:default:x");
        assert_eq!(u.groups, vec!["system:serviceaccounts"]);
        assert_eq!(u.extra["k"], vec!["v"]);
        assert_eq!(
            reviewed_user(&json!({"status": {"authenticated": false}})),
            None
        );
        assert_eq!(reviewed_user(&json!({"status": {}})), None);
    }

    #[test]
    fn the_cache_expires_and_stays_bounded() {
        let mut c: Cache<u32, bool> = Cache::new();
        c.put(1, true, Duration::from_secs(60));
        c.put(2, true, Duration::ZERO);
        assert_eq!(c.get(&1), Some(true));
        assert_eq!(c.get(&2), None);
        for i in 0..(CACHE_MAX as u32 * 2) {
            c.put(i, false, Duration::from_secs(60));
        }
        assert!(c.map.len() <= CACHE_MAX);
    }
}
