//! The node loop: registers the Node, renews its Lease and posts node status on change and at
//! least every `node_status_report_seconds`.

use super::context::{AgentConfig, Shared, log, nap, now};
use crate::cni::default_network::{self, Fallback};
use crate::common::paths::Paths;
use crate::kube::backoff::Backoff;
use crate::kube::client::{self, ApiError, Client};
use crate::kube::node;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Registers the Node (or adopts the existing one) and returns it.
fn register(client: &Client, cfg: &AgentConfig, info: &node::HostInfo) -> Result<Node, ApiError> {
    let path = client::path::<Node>(None, None);
    let want = node::node(&cfg.node_name, info, &cfg.labels, &cfg.taints, now());
    match client.create::<_, Node>(&path, &want) {
        Ok(n) => {
            log(format!("registered node {}", cfg.node_name));
            Ok(n)
        }
        Err(e) if e.code() == Some(409) => {
            // Already registered (a restart): make sure our labels are on it.
            let p = client::path::<Node>(None, Some(&cfg.node_name));
            let patch = serde_json::json!({"metadata": {"labels": want.metadata.labels}});
            client.merge_patch::<Node>(&p, &patch)
        }
        Err(e) => Err(e),
    }
}

/// Why the pods' network is not ready, read afresh (a configuration may come at any time). With
/// no configuration, the Node's podCIDRs give podunit's own network (kubenet's way).
fn network_error(cfg: &AgentConfig, node: Option<&Node>) -> Option<String> {
    let dir = cfg.cni_conf_dir.as_ref()?;
    let fallback = Fallback {
        configured: cfg.cni_pod_subnet.clone(),
        cluster: true,
        pod_cidrs: pod_cidrs(node),
    };
    default_network::load(dir, &fallback)
        .err()
        .map(|e| node::network_not_ready(&e))
}

/// The Node's `spec.podCIDRs` (or the older single `podCIDR`).
fn pod_cidrs(node: Option<&Node>) -> Vec<String> {
    let Some(spec) = node.and_then(|n| n.spec.as_ref()) else {
        return Vec::new();
    };
    match (&spec.pod_cidrs, &spec.pod_cidr) {
        (Some(l), _) if !l.is_empty() => l.clone(),
        (_, Some(c)) if !c.is_empty() => vec![c.clone()],
        _ => Vec::new(),
    }
}

/// With `network: cni`: records the podCIDRs the controller manager assigned for `pod-prepare`
/// (read again from the API until there are some: they come after registration).
fn track_pod_cidrs(client: &Client, cfg: &AgentConfig, node_obj: &mut Node) {
    if cfg.cni_conf_dir.is_none() {
        return;
    }
    if pod_cidrs(Some(node_obj)).is_empty() {
        match client.get::<Node>(&client::path::<Node>(None, Some(&cfg.node_name))) {
            Ok(n) => *node_obj = n,
            Err(e) => log(format!("node: {e}")),
        }
    }
    let cidrs = pod_cidrs(Some(node_obj));
    if !cidrs.is_empty()
        && let Err(e) = default_network::write_pod_cidrs(&cfg.paths, &cidrs)
    {
        log(format!("pod CIDRs: {e}"));
    }
}

/// Runs until stopped: register, then Lease every `lease_renew_seconds`, status on change and every
/// `node_status_report_seconds`.
pub fn node_loop(client: Client, cfg: AgentConfig, shared: Arc<Shared>) {
    let t = &cfg.timing;
    let mut backoff = Backoff::with_time_seed(Duration::from_millis(200), Duration::from_secs(7));
    let storage = cfg.paths.host(Paths::STATE);
    let mut info = node::gather(storage.parent().unwrap_or(&storage), cfg.node_ip.as_deref());
    info.runtime_version = cfg.runtime_version.clone();
    info.kubelet_port = cfg.kubelet_port;
    info.network_error = network_error(&cfg, None);
    *shared.node_ips.lock().unwrap() = info.addresses.clone();
    let mut node_obj = loop {
        match register(&client, &cfg, &info) {
            Ok(n) => break n,
            Err(e) => {
                log(format!("node registration: {e}"));
                if !nap(&shared, backoff.next_delay()) {
                    return;
                }
            }
        }
    };
    backoff.reset();
    *shared.node_uid.lock().unwrap() = node_obj.metadata.uid.clone();
    let mut posted: Option<k8s_openapi::api::core::v1::NodeStatus> = None;
    let mut last_post = Instant::now() - Duration::from_secs(3600);
    let mut lease: Option<Lease> = None;
    loop {
        // Lease first: it is what tells the control plane this node is alive.
        match renew_lease(
            &client,
            &cfg,
            lease.take(),
            node_obj.metadata.uid.as_deref(),
        ) {
            Ok(l) => {
                lease = Some(l);
                backoff.reset();
            }
            Err(e) => log(format!("lease: {e}")),
        }
        let mut fresh = node::gather(storage.parent().unwrap_or(&storage), cfg.node_ip.as_deref());
        fresh.runtime_version = cfg.runtime_version.clone();
        fresh.kubelet_port = cfg.kubelet_port;
        track_pod_cidrs(&client, &cfg, &mut node_obj);
        fresh.network_error = network_error(&cfg, Some(&node_obj));
        *shared.node_ips.lock().unwrap() = fresh.addresses.clone();
        let prev = posted.as_ref().or(node_obj.status.as_ref());
        let st = node::status(&fresh, prev, now());
        let changed = posted.as_ref().is_none_or(|p| node::status_changed(p, &st));
        if changed || last_post.elapsed() >= Duration::from_secs(t.node_status_report_seconds) {
            let p = format!(
                "{}/status",
                client::path::<Node>(None, Some(&cfg.node_name))
            );
            match client.merge_patch::<Node>(&p, &serde_json::json!({ "status": st })) {
                Ok(n) => {
                    posted = Some(st);
                    last_post = Instant::now();
                    node_obj = n;
                    backoff.reset();
                }
                Err(e) if e.is_not_found() => {
                    // Someone deleted our Node: register again.
                    log("node object is gone; registering again");
                    if let Ok(n) = register(&client, &cfg, &fresh) {
                        *shared.node_uid.lock().unwrap() = n.metadata.uid.clone();
                        node_obj = n;
                        posted = None;
                        lease = None;
                    }
                }
                Err(e) => log(format!("node status: {e}")),
            }
        }
        info = fresh;
        let _ = &info;
        let wait = if lease.is_some() {
            Duration::from_secs(t.lease_renew_seconds)
        } else {
            // The kubelet retries a failed renewal quickly (200 ms doubling to 7 s).
            backoff.next_delay()
        };
        if !nap(&shared, wait) {
            return;
        }
    }
}

fn renew_lease(
    client: &Client,
    cfg: &AgentConfig,
    known: Option<Lease>,
    node_uid: Option<&str>,
) -> Result<Lease, ApiError> {
    let path = client::path::<Lease>(Some(node::LEASE_NAMESPACE), Some(&cfg.node_name));
    let current = match known {
        Some(l) => Some(l),
        None => match client.get::<Lease>(&path) {
            Ok(l) => Some(l),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        },
    };
    let Some(mut l) = current else {
        let want = node::lease(
            &cfg.node_name,
            node_uid,
            cfg.timing.lease_duration_seconds,
            now(),
        );
        return client.create(
            &client::path::<Lease>(Some(node::LEASE_NAMESPACE), None),
            &want,
        );
    };
    let spec = l.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(cfg.node_name.clone());
    spec.lease_duration_seconds = Some(cfg.timing.lease_duration_seconds);
    spec.renew_time = Some(MicroTime(now()));
    // PUT with our resourceVersion: a conflict means we hold a stale copy; re-read next time.
    client.replace(&path, &l)
}
