//! Authentication: static bearer tokens (an admin and one per node), node client certificates, and
//! the bound service-account tokens TokenRequest issues. The secrets live in `auth.json` (mode 0600)
//! in the server's directory, so a restarted server accepts the credentials it gave out before.

use crate::files::write_private;
use crate::util::random_hex;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::{digest, hmac};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The audience tokens are issued for when a TokenRequest names none, and the one the API accepts.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    pub fn admin() -> User {
        User {
            name: "kubernetes-admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }

    pub fn node(name: &str) -> User {
        User {
            name: format!("system:node:{name}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
        }
    }

    pub fn service_account(ns: &str, name: &str) -> User {
        User {
            name: format!("system:serviceaccount:{ns}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
        }
    }

    pub fn is_admin(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }

    /// The node this user is, as the Node authorizer recognises one.
    pub fn node_name(&self) -> Option<&str> {
        if self.groups.iter().any(|g| g == "system:nodes") {
            self.name.strip_prefix("system:node:")
        } else {
            None
        }
    }
}

struct Secrets {
    admin: String,
    nodes: BTreeMap<String, String>,
    signing_key: String,
}

pub struct Auth {
    file: PathBuf,
    secrets: Mutex<Secrets>,
    /// SHA-256 of client certificates this server issued -> their user.
    certs: Mutex<HashMap<Vec<u8>, User>>,
}

/// What a bearer token turned out to be.
pub enum Credential {
    User(User),
    /// A service-account token: its claims, for the caller to check the bound object still exists.
    ServiceAccount(Value),
}

impl Auth {
    pub fn load_or_create(dir: &Path) -> std::io::Result<Auth> {
        let file = dir.join("auth.json");
        let secrets = match std::fs::read_to_string(&file) {
            Ok(text) => {
                let v: Value = serde_json::from_str(&text)
                    .map_err(|e| std::io::Error::other(format!("auth.json: {e}")))?;
                Secrets {
                    admin: v["admin"].as_str().unwrap_or_default().to_string(),
                    nodes: v["nodes"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .map(|(k, t)| (k.clone(), t.as_str().unwrap_or_default().into()))
                                .collect()
                        })
                        .unwrap_or_default(),
                    signing_key: v["signingKey"].as_str().unwrap_or_default().to_string(),
                }
            }
            Err(_) => Secrets {
                admin: random_hex(24),
                nodes: BTreeMap::new(),
                signing_key: random_hex(32),
            },
        };
        let auth = Auth {
            file,
            secrets: Mutex::new(secrets),
            certs: Mutex::new(HashMap::new()),
        };
        auth.save()?;
        Ok(auth)
    }

    fn save(&self) -> std::io::Result<()> {
        let s = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
        let v = json!({"admin": s.admin, "nodes": s.nodes, "signingKey": s.signing_key});
        write_private(&self.file, v.to_string().as_bytes())
    }

    pub fn admin_token(&self) -> String {
        self.secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admin
            .clone()
    }

    /// The bearer token of node `name`, made on first use.
    pub fn node_token(&self, name: &str) -> std::io::Result<String> {
        let token = {
            let mut s = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
            s.nodes
                .entry(name.to_string())
                .or_insert_with(|| random_hex(24))
                .clone()
        };
        self.save()?;
        Ok(token)
    }

    pub fn register_cert(&self, der: &[u8], user: User) {
        let fp = digest::digest(&digest::SHA256, der).as_ref().to_vec();
        self.certs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fp, user);
    }

    pub fn cert_user(&self, der: &[u8]) -> Option<User> {
        let fp = digest::digest(&digest::SHA256, der).as_ref().to_vec();
        self.certs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fp)
            .cloned()
    }

    pub fn authenticate_token(&self, token: &str) -> Option<Credential> {
        {
            let s = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
            if !token.is_empty() && token == s.admin {
                return Some(Credential::User(User::admin()));
            }
            if let Some((name, _)) = s.nodes.iter().find(|(_, t)| t.as_str() == token) {
                return Some(Credential::User(User::node(name)));
            }
        }
        self.verify_jwt(token).map(Credential::ServiceAccount)
    }

    fn key(&self) -> hmac::Key {
        let s = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
        hmac::Key::new(hmac::HMAC_SHA256, s.signing_key.as_bytes())
    }

    /// A JWT with the claims of a Kubernetes bound service-account token. Signed with HMAC
    /// (the real server uses RS256): nothing outside this server is meant to verify it.
    pub fn sign_jwt(&self, claims: &Value) -> String {
        let header =
            URL_SAFE_NO_PAD.encode(json!({"alg": "HS256", "kid": "fake-apiserver"}).to_string());
        let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signing_input = format!("{header}.{payload}");
        let sig = hmac::sign(&self.key(), signing_input.as_bytes());
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    /// The claims of a token this server signed, unexpired and meant for the API.
    fn verify_jwt(&self, token: &str) -> Option<Value> {
        let (signing_input, sig) = token.rsplit_once('.')?;
        let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
        hmac::verify(&self.key(), signing_input.as_bytes(), &sig).ok()?;
        let (_, payload) = signing_input.split_once('.')?;
        let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
        let exp = claims["exp"].as_i64()?;
        let for_api = claims["aud"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == API_AUDIENCE));
        (exp > crate::util::now_secs() && for_api).then_some(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_survive_a_reload_and_jwts_verify() {
        let dir = std::env::temp_dir().join(format!("fake-apiserver-auth-{}", random_hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let a = Auth::load_or_create(&dir).unwrap();
        let node = a.node_token("n1").unwrap();
        let admin = a.admin_token();
        let b = Auth::load_or_create(&dir).unwrap();
        assert_eq!(b.admin_token(), admin);
        assert!(
            matches!(b.authenticate_token(&node), Some(Credential::User(u)) if u == User::node("n1"))
        );
        assert!(b.authenticate_token("nope").is_none());
        let claims =
            json!({"aud": [API_AUDIENCE], "exp": crate::util::now_secs() + 600, "sub": "x"});
        let jwt = a.sign_jwt(&claims);
        assert!(
            matches!(b.authenticate_token(&jwt), Some(Credential::ServiceAccount(c)) if c == claims)
        );
        let other = a.sign_jwt(&json!({"aud": ["vault"], "exp": crate::util::now_secs() + 600}));
        assert!(b.authenticate_token(&other).is_none());
        let expired = a.sign_jwt(&json!({"aud": [API_AUDIENCE], "exp": 1}));
        assert!(b.authenticate_token(&expired).is_none());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.join("auth.json"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o077, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn users() {
        assert_eq!(User::node("a").node_name(), Some("a"));
        assert!(User::admin().is_admin());
        assert_eq!(User::service_account("d", "s").node_name(), None);
    }
}
