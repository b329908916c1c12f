//! The node agent: podunit-sync's cluster mode, the kubelet's job on a host without a container
//! runtime. Plain threads, no async runtime:
//!
//! - the **node loop** registers the Node, renews its Lease every 10 s and posts node status on
//!   change and at least every minute;
//! - the **pod watcher** lists and watches this node's pods (`spec.nodeName=<node>`), resuming from
//!   the last resourceVersion, re-listing on 410 Gone, backing off with jitter;
//! - the **unit watcher** wakes the worker when systemd reports a change;
//! - the **worker** (the calling thread) owns all pod state: it admits pods (policy, validation,
//!   referenced objects, tokens), writes the spool, coalesces reloads, posts PodStatus when it
//!   changes, runs the two-phase deletion and keeps mirror pods for static pods.
//!
//! An unreachable API server never stops pods: the spool stays as it is, statuses wait and are posted
//! once the server answers again.
//!
//! One module per job; the worker's jobs are `impl Worker` blocks on the state in `worker` and
//! `state`, so none of them imports another.

mod admission;
mod context;
mod events;
mod images;
pub mod mirror;
mod mirror_pods;
mod node_loop;
mod post_status;
pub mod probes;
mod refs;
mod services;
pub mod spool;
mod state;
mod termination;
mod tokens;
pub mod units;
mod volumes;
pub mod waitrecord;
mod watchers;
mod worker;

pub use context::{AgentConfig, IMAGE_NEVER_PULL, Shared};
pub use node_loop::node_loop;
pub use watchers::{Msg, unit_watch_loop, watch_loop};
pub use worker::Worker;

use crate::agent::units::Units;
use crate::kube::client::Client;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};

/// Starts the node loop, the pod watcher and the unit watcher, and runs the worker on this thread
/// until `shared.stop` is set.
pub fn run(
    client: Client,
    cfg: AgentConfig,
    units: Arc<dyn Units>,
    shared: Arc<Shared>,
) -> std::io::Result<()> {
    let mut worker = Worker::new(client.clone(), cfg.clone(), shared.clone(), units.clone())?;
    let (tx, rx) = mpsc::channel();
    worker.probes = crate::prober::runner::spawn(
        &cfg.paths,
        Box::new(crate::agent::probes::AgentSink(tx.clone())),
    );
    {
        let tx = tx.clone();
        worker.pulls = Some(crate::image::queue::PullQueue::spawn(
            cfg.paths.clone(),
            move |d| tx.send(Msg::Pulled(Box::new(d))).is_ok(),
        ));
    }
    let mut threads = Vec::new();
    {
        let (c, cfg, s) = (client.clone(), cfg.clone(), shared.clone());
        threads.push(std::thread::spawn(move || node_loop(c, cfg, s)));
    }
    {
        let (c, cfg, s, tx) = (client.clone(), cfg.clone(), shared.clone(), tx.clone());
        threads.push(std::thread::spawn(move || watch_loop(c, cfg, s, tx)));
    }
    {
        let (c, cfg, s) = (client.clone(), cfg.clone(), shared.clone());
        threads.push(std::thread::spawn(move || {
            services::services_loop(c, cfg, s)
        }));
    }
    {
        let (u, s) = (units.clone(), shared.clone());
        threads.push(std::thread::spawn(move || unit_watch_loop(u, s, tx)));
    }
    worker.run(rx);
    shared.stop.store(true, Ordering::SeqCst);
    // The loops see the flag within a wait period; a watch blocked on a quiet stream ends with the
    // process (or the connection), so nobody waits for it.
    drop(threads);
    Ok(())
}
