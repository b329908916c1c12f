//! The watchers that feed the worker: the pod watcher (list and watch this node's pods,
//! resuming from the last resourceVersion, re-listing on 410 Gone) and the unit watcher (systemd's
//! change notifications); [`list_watch`] is the API side of any of them.

use super::context::{AgentConfig, Shared, log, nap};
use crate::agent::units::{Changes, Units};
use crate::kube::backoff::Backoff;
use crate::kube::client::{self, Client, ListParams};
use crate::kube::watch::Event;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

/// What the watcher tells the worker.
#[derive(Debug)]
pub enum Msg {
    /// A complete list: pods not in it are gone.
    Sync(Vec<Pod>),
    Upsert(Box<Pod>),
    Deleted(Box<Pod>),
    /// systemd reported unit changes.
    UnitsChanged(Changes),
    /// The probe runner: an event to post, or a pod whose readiness changed.
    Probe(crate::agent::probes::Note),
    /// An image pull ended.
    Pulled(Box<crate::image::queue::Done>),
}

/// Lists and watches this node's pods until stopped.
pub fn watch_loop(client: Client, cfg: AgentConfig, shared: Arc<Shared>, tx: Sender<Msg>) {
    let selector = format!("spec.nodeName={}", cfg.node_name);
    let list_tx = tx.clone();
    list_watch::<Pod>(
        &client,
        &cfg,
        &shared,
        Some(selector),
        "pods",
        |items| list_tx.send(Msg::Sync(items)).is_ok(),
        |ev| {
            let msg = match ev {
                Event::Added(p) | Event::Modified(p) => Msg::Upsert(Box::new(p)),
                Event::Deleted(p) => Msg::Deleted(Box::new(p)),
                Event::Bookmark(_) => return true,
            };
            tx.send(msg).is_ok()
        },
    );
}

/// Lists and watches objects of kind `K` (all namespaces; `selector`: a field selector) until
/// stopped or a callback returns false: `on_list` gets every complete list (objects not in it are
/// gone), `on_event` every change after it. Resumes from the last resourceVersion, lists again
/// on 410 Gone.
pub fn list_watch<K>(
    client: &Client,
    cfg: &AgentConfig,
    shared: &Shared,
    selector: Option<String>,
    what: &str,
    mut on_list: impl FnMut(Vec<K>) -> bool,
    mut on_event: impl FnMut(Event<K>) -> bool,
) where
    K: k8s_openapi::ListableResource
        + k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>
        + serde::de::DeserializeOwned,
{
    let path = client::path::<K>(None, None);
    let mut backoff = Backoff::with_time_seed(
        Duration::from_millis(500),
        Duration::from_secs(cfg.timing.max_backoff_seconds.max(1)),
    );
    let mut rv: Option<String> = None;
    while !shared.stopping() {
        if rv.is_none() {
            let params = ListParams {
                field_selector: selector.clone(),
                ..Default::default()
            };
            match client.list::<K>(&path, &params) {
                Ok(list) => {
                    backoff.reset();
                    rv = list.metadata.resource_version.clone();
                    if !on_list(list.items) {
                        return;
                    }
                }
                Err(e) => {
                    log(format!("listing {what}: {e}"));
                    if !nap(shared, backoff.next_delay()) {
                        return;
                    }
                    continue;
                }
            }
        }
        // Watches end by themselves after a randomised 5-10 minutes, as client-go's reflector does.
        // The back-off is reset only by an answer (a list, an event), never by a new try: a down
        // API server is retried ever more slowly, up to cluster.maxBackoffSeconds.
        let timeout = 300 + backoff.jitter(Duration::from_secs(300)).as_secs() as u32;
        let params = ListParams {
            field_selector: selector.clone(),
            resource_version: rv.clone(),
            allow_watch_bookmarks: true,
            timeout_seconds: Some(timeout),
            ..Default::default()
        };
        let stream = match client.watch::<K>(&path, &params) {
            Ok(s) => s,
            Err(e) if e.is_gone() => {
                rv = None;
                continue;
            }
            Err(e) => {
                log(format!("watching {what}: {e}"));
                if !nap(shared, backoff.next_delay()) {
                    return;
                }
                continue;
            }
        };
        let mut got_any = false;
        for ev in stream {
            if shared.stopping() {
                return;
            }
            if ev.is_ok() {
                backoff.reset();
            }
            let ev = match ev {
                Ok(Event::Bookmark(v)) => {
                    rv = Some(v);
                    continue;
                }
                Ok(ev @ (Event::Added(_) | Event::Modified(_) | Event::Deleted(_))) => {
                    if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = &ev {
                        rv = o.metadata().resource_version.clone().or(rv);
                    }
                    ev
                }
                Err(e) if e.is_gone() => {
                    log(format!("watch of {what} expired (410 Gone); listing again"));
                    rv = None;
                    break;
                }
                Err(e) => {
                    log(format!("watch of {what} ended: {e}"));
                    break;
                }
            };
            got_any = true;
            if !on_event(ev) {
                return;
            }
        }
        if !got_any && rv.is_some() && !nap(shared, backoff.next_delay()) {
            return;
        }
    }
}

/// Forwards systemd's change notifications to the worker.
pub fn unit_watch_loop(units: Arc<dyn Units>, shared: Arc<Shared>, tx: Sender<Msg>) {
    while !shared.stopping() {
        let changes = units.wait_changes(Duration::from_secs(1));
        if changes != Changes::None && tx.send(Msg::UnitsChanged(changes)).is_err() {
            return;
        }
    }
}
