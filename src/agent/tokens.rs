//! Service account tokens for projected volumes: requested (TokenRequest), written where
//! pod-prepare reads them, and renewed before they expire.

use super::context::{log, now, uid_of};
use super::state::Phase;
use super::worker::Worker;
use crate::common::paths::Paths;
use crate::kube::client;
use crate::kube::token;
use k8s_openapi::api::authentication::v1::TokenRequest;
use std::path::PathBuf;

impl Worker {
    fn token_file(&self, uid: &str, path: &str) -> Option<PathBuf> {
        let dir = self.cfg.paths.host(&format!("{}/{uid}", Paths::TOKENS));
        crate::common::paths::join_inside(&dir, path)
    }

    /// Requests every token the pod's projected volumes need that is missing or due and writes
    /// them where pod-prepare (and [`Self::refresh_volumes`]) read them. Returns whether any token
    /// was issued.
    pub(super) fn issue_tokens(&mut self, k: &(String, String)) -> Result<bool, Option<String>> {
        let Some(rec) = self.pods.get(k) else {
            return Ok(false);
        };
        let mut issued_any = false;
        let pod = rec.pod.get();
        let uid = uid_of(&pod);
        let sa = token::service_account(&pod);
        for src in token::sources(&pod) {
            let Some(file) = self.token_file(&uid, &src.path) else {
                return Err(Some(format!("token path {:?} leaves the volume", src.path)));
            };
            let mut refresh = self
                .pods
                .get(k)
                .and_then(|r| r.tokens.get(&src.path))
                .copied();
            if refresh.is_none() {
                // After a restart: the token written before it, if still good.
                refresh = std::fs::read_to_string(&file)
                    .ok()
                    .and_then(|t| token::refresh_at_of(&t));
                if let (Some(at), Some(r)) = (refresh, self.pods.get_mut(k)) {
                    r.tokens.insert(src.path.clone(), at);
                }
            }
            if refresh.is_some_and(|t| now() < t) && file.exists() {
                continue;
            }
            let path = format!(
                "{}/{sa}/token",
                client::path::<k8s_openapi::api::core::v1::ServiceAccount>(Some(&k.0), None)
            );
            let tr: TokenRequest = match self.client.create(&path, &token::request(&pod, &src)) {
                Ok(t) => t,
                Err(e) if e.is_transient() => {
                    self.api_failed("token request", &e);
                    return Err(None);
                }
                Err(e) => return Err(Some(format!("service account token: {e}"))),
            };
            let Some(st) = tr.status else {
                return Err(Some("TokenRequest answered without a token".into()));
            };
            let dir = file.parent().map(PathBuf::from).unwrap_or_default();
            let write = || -> std::io::Result<()> {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir)?;
                use crate::common::atomicfile;
                let opts = atomicfile::Options::new(0o600);
                atomicfile::write(&file, st.token.as_bytes(), opts).map_err(Into::into)
            };
            if let Err(e) = write() {
                return Err(Some(format!("writing the token: {e}")));
            }
            issued_any = true;
            let issued = now();
            let at = token::refresh_at(issued, st.expiration_timestamp.0);
            if let Some(r) = self.pods.get_mut(k) {
                r.tokens.insert(src.path.clone(), at);
            }
        }
        self.api_worked();
        Ok(issued_any)
    }

    pub(super) fn refresh_tokens(&mut self) {
        let due: Vec<(String, String)> = self
            .pods
            .iter()
            .filter(|(_, r)| r.phase == Phase::Active && r.tokens.values().any(|t| now() >= *t))
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            match self.issue_tokens(&k) {
                Ok(true) => self.refresh_volumes(&k),
                Ok(false) | Err(None) => {}
                Err(Some(m)) => log(format!("{}/{}: {m}", k.0, k.1)),
            }
        }
    }
}
