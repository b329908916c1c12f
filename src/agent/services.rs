//! The cluster's Services, for the environment the kubelet gives containers
//! ([`crate::translate::service_env`]): listed and watched in all namespaces, as the kubelet's
//! informer does, and written to [`Paths::SERVICES`] for `pod-prepare` after every change.

use super::context::{AgentConfig, Shared, log};
use super::watchers::list_watch;
use crate::common::atomicfile;
use crate::common::paths::Paths;
use crate::kube::client::Client;
use crate::kube::watch::Event;
use crate::translate::service_env::{ServicePort, ServiceRef};
use k8s_openapi::api::core::v1::Service;
use std::collections::BTreeMap;

/// What of `s` the environment needs.
pub fn service_ref(s: &Service) -> ServiceRef {
    let spec = s.spec.clone().unwrap_or_default();
    ServiceRef {
        namespace: s.metadata.namespace.clone().unwrap_or_default(),
        name: s.metadata.name.clone().unwrap_or_default(),
        cluster_ip: spec.cluster_ip.unwrap_or_default(),
        ports: spec
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| ServicePort {
                name: p.name.unwrap_or_default(),
                port: p.port,
                protocol: p.protocol.unwrap_or_default(),
            })
            .collect(),
    }
}

/// Writes the Services, sorted, where `pod-prepare` reads them (root-only: a pod's
/// `enableServiceLinks: false` must not be undone by reading another namespace's list).
fn write(paths: &Paths, all: &BTreeMap<(String, String), ServiceRef>) {
    let list: Vec<&ServiceRef> = all.values().collect();
    let text = serde_json::to_vec(&list).unwrap_or_default();
    let opts = atomicfile::Options::new(0o600).owner(0, 0);
    if let Err(e) = atomicfile::write(&paths.host(Paths::SERVICES), &text, opts) {
        log(format!(
            "writing the Services for containers' environment: {e}"
        ));
    }
}

fn key(s: &ServiceRef) -> (String, String) {
    (s.namespace.clone(), s.name.clone())
}

/// Keeps [`Paths::SERVICES`] up to date until stopped.
pub fn services_loop(client: Client, cfg: AgentConfig, shared: std::sync::Arc<Shared>) {
    let all = std::cell::RefCell::new(BTreeMap::new());
    let paths = cfg.paths.clone();
    list_watch::<Service>(
        &client,
        &cfg,
        &shared,
        None,
        "services",
        |items| {
            let mut all = all.borrow_mut();
            *all = items
                .iter()
                .map(service_ref)
                .map(|r| (key(&r), r))
                .collect();
            write(&paths, &all);
            true
        },
        |ev| {
            let mut all = all.borrow_mut();
            match ev {
                Event::Added(s) | Event::Modified(s) => {
                    let r = service_ref(&s);
                    if all.get(&key(&r)) == Some(&r) {
                        return true;
                    }
                    all.insert(key(&r), r);
                }
                Event::Deleted(s) => {
                    if all.remove(&key(&service_ref(&s))).is_none() {
                        return true;
                    }
                }
                Event::Bookmark(_) => return true,
            }
            write(&paths, &all);
            true
        },
    );
}
