//! The ConfigMaps and Secrets a pod uses: read once per batch of work ([`RefCache`]), and re-read
//! periodically (the kubelet's TTL cache strategy) to update running pods.

use super::context::{key_of, log};
use super::state::{Phase, RefCache};
use super::worker::Worker;
use crate::agent::spool;
use crate::kube::client::{self, ApiError, Client};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use std::collections::HashMap;
use std::time::Instant;

/// One object a pod references, from this batch's cache when it holds it, else from the API
/// server (and then cached, found or not). `Ok(None)`: it does not exist.
fn fetch_ref<T>(
    client: &Client,
    cache: Option<&mut HashMap<(String, String), Option<T>>>,
    ns: &str,
    name: &str,
) -> Result<Option<T>, ApiError>
where
    T: k8s_openapi::Resource + serde::de::DeserializeOwned + Clone,
{
    let key = (ns.to_string(), name.to_string());
    if let Some(hit) = cache.as_ref().and_then(|c| c.get(&key)) {
        return Ok(hit.clone());
    }
    let got = match client.get::<T>(&client::path::<T>(Some(ns), Some(name))) {
        Ok(o) => Some(o),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    if let Some(c) = cache {
        c.insert(key, got.clone());
    }
    Ok(got)
}

/// The kubelet's waiting reason for a container whose required ConfigMap or Secret is missing.
fn missing_ref(kind: &str, name: &str) -> (String, String) {
    (
        "CreateContainerConfigError".into(),
        format!("{kind} \"{name}\" not found"),
    )
}

impl Worker {
    /// ConfigMaps and Secrets the pod uses. `Err(Some)`: a required one is missing (reason, message);
    /// `Err(None)`: the API server did not answer.
    #[allow(clippy::type_complexity)]
    pub(super) fn fetch_refs(
        &mut self,
        pod: &Pod,
    ) -> Result<(Vec<ConfigMap>, Vec<Secret>), Option<(String, String)>> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok((Vec::new(), Vec::new()));
        };
        let ns = key_of(pod).0;
        let refs = spool::refs(spec);
        let mut cms = Vec::new();
        for (name, optional) in &refs.config_maps {
            let cache = self.ref_cache.as_mut().map(|c| &mut c.config_maps);
            match fetch_ref::<ConfigMap>(&self.client, cache, &ns, name) {
                Ok(Some(c)) => cms.push(c),
                Ok(None) if *optional => {}
                Ok(None) => return Err(Some(missing_ref("configmap", name))),
                Err(e) => {
                    if e.code() == Some(403) {
                        self.forbidden_read(key_of(pod));
                    }
                    self.api_failed("reading a configmap", &e);
                    return Err(None);
                }
            }
        }
        let mut secs = Vec::new();
        for (name, optional) in &refs.secrets {
            let cache = self.ref_cache.as_mut().map(|c| &mut c.secrets);
            match fetch_ref::<Secret>(&self.client, cache, &ns, name) {
                Ok(Some(s)) => secs.push(s),
                Ok(None) if *optional => {}
                Ok(None) => return Err(Some(missing_ref("secret", name))),
                Err(e) => {
                    if e.code() == Some(403) {
                        self.forbidden_read(key_of(pod));
                    }
                    self.api_failed("reading a secret", &e);
                    return Err(None);
                }
            }
        }
        self.api_worked();
        Ok((cms, secs))
    }

    /// The pod's `imagePullSecrets` that exist (the kubelet pulls without a missing one, and only
    /// logs it). `Err`: the API server did not answer (a 403 is retried soon, as for other reads).
    pub(super) fn fetch_pull_secrets(&mut self, pod: &Pod) -> Result<Vec<Secret>, ()> {
        let ns = key_of(pod).0;
        let names: Vec<String> = pod
            .spec
            .iter()
            .flat_map(|s| s.image_pull_secrets.iter().flatten())
            .map(|r| r.name.clone())
            .filter(|n| !n.is_empty())
            .collect();
        let mut found = Vec::new();
        for name in names {
            let cache = self.ref_cache.as_mut().map(|c| &mut c.secrets);
            match fetch_ref::<Secret>(&self.client, cache, &ns, &name) {
                Ok(Some(s)) => found.push(s),
                Ok(None) => log(format!(
                    "{ns}/{}: pull secret {name:?} not found; the image pull may not succeed",
                    pod.metadata.name.as_deref().unwrap_or_default()
                )),
                Err(e) => {
                    if e.code() == Some(403) {
                        self.forbidden_read(key_of(pod));
                    }
                    self.api_failed("reading an image pull secret", &e);
                    return Err(());
                }
            }
        }
        Ok(found)
    }

    /// Re-reads referenced ConfigMaps and Secrets (the kubelet's TTL cache strategy) and retries
    /// blocked pods.
    pub(super) fn refresh_all(&mut self) {
        let keys: Vec<(String, String)> = self
            .pods
            .iter()
            .filter(|(_, r)| matches!(r.phase, Phase::Active | Phase::Blocked { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        self.ref_cache = Some(RefCache::default());
        self.refreshing = true;
        for k in keys {
            if !self.api_ok() {
                break;
            }
            self.admit(&k);
        }
        self.refreshing = false;
        self.ref_cache = None;
    }

    /// A read for `k` was forbidden: try it again after the next back-off delay.
    fn forbidden_read(&mut self, k: (String, String)) {
        self.forbidden.insert(k);
        if self.forbidden_retry_at.is_none() {
            self.forbidden_retry_at = Some(Instant::now() + self.forbidden_backoff.next_delay());
        }
    }

    pub(super) fn retry_forbidden(&mut self) {
        self.forbidden_retry_at = None;
        for k in std::mem::take(&mut self.forbidden) {
            if self
                .pods
                .get(&k)
                .is_some_and(|r| matches!(r.phase, Phase::Active | Phase::Blocked { .. }))
            {
                self.admit(&k);
            }
        }
        // Forbidden again: admit queued it with the next, longer delay.
        if self.forbidden.is_empty() {
            self.forbidden_backoff.reset();
        }
    }
}
