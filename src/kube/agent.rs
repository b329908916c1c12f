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

use super::backoff::Backoff;
use super::client::{self, ApiError, Client, DeleteOptions, ListParams};
use super::compact::Compact;
use super::spool::{self, Spool};
use super::units::{Changes, UnitStates, Units};
use super::watch::Event;
use super::{mirror, node, token};
use crate::common::config::ClusterTiming;
use crate::common::paths::Paths;
use crate::common::policy::{self, Policy};
use crate::status::api::{self as podstatus, NodeAddrs};
use crate::status::observe::{self, UnitProps};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, PodStatus, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The kubelet's waiting reason (and Event reason) for an image that is not on the node when it
/// may not pull: podunit never pulls, so every image behaves as `imagePullPolicy: Never`.
pub const IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";

/// What the agent needs besides the API client and systemd.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node_name: String,
    pub timing: ClusterTiming,
    pub policy: Policy,
    pub labels: BTreeMap<String, String>,
    pub paths: Paths,
    /// The node IP to report instead of the detected one.
    pub node_ip: Option<String>,
    /// `systemd://<version>` for nodeInfo.
    pub runtime_version: String,
}

/// State shared between the loops.
#[derive(Default)]
pub struct Shared {
    pub node_uid: Mutex<Option<String>>,
    pub node_ips: Mutex<Vec<String>>,
    pub stop: AtomicBool,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// Sleeps up to `d`, waking early when the agent stops. False when stopping.
fn nap(shared: &Shared, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if shared.stopping() {
            return false;
        }
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
    }
    !shared.stopping()
}

fn now() -> Timestamp {
    // jiff is built without its clock (k8s-openapi leaves `std` off): read the system clock here.
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::new(d.as_secs() as i64, d.subsec_nanos() as i32).unwrap_or_default()
}

fn log(msg: impl AsRef<str>) {
    eprintln!("podunit-sync: {}", msg.as_ref());
}

// ---------------------------------------------------------------------------------------------
// Node registration, status and Lease

/// Registers the Node (or adopts the existing one) and returns it.
fn register(client: &Client, cfg: &AgentConfig, info: &node::HostInfo) -> Result<Node, ApiError> {
    let path = client::path::<Node>(None, None);
    let want = node::node(&cfg.node_name, info, &cfg.labels, now());
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

/// Runs until stopped: register, then Lease every `lease_renew_seconds`, status on change and every
/// `node_status_report_seconds`.
pub fn node_loop(client: Client, cfg: AgentConfig, shared: Arc<Shared>) {
    let t = &cfg.timing;
    let mut backoff = Backoff::with_time_seed(Duration::from_millis(200), Duration::from_secs(7));
    let storage = cfg.paths.host(Paths::STATE);
    let mut info = node::gather(storage.parent().unwrap_or(&storage), cfg.node_ip.as_deref());
    info.runtime_version = cfg.runtime_version.clone();
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

// ---------------------------------------------------------------------------------------------
// Pod list + watch

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
    Probe(super::probes::Note),
}

/// Lists and watches this node's pods until stopped.
pub fn watch_loop(client: Client, cfg: AgentConfig, shared: Arc<Shared>, tx: Sender<Msg>) {
    let path = client::path::<Pod>(None, None);
    let selector = format!("spec.nodeName={}", cfg.node_name);
    let mut backoff = Backoff::with_time_seed(
        Duration::from_millis(500),
        Duration::from_secs(cfg.timing.max_backoff_seconds.max(1)),
    );
    let mut rv: Option<String> = None;
    while !shared.stopping() {
        if rv.is_none() {
            let params = ListParams {
                field_selector: Some(selector.clone()),
                ..Default::default()
            };
            match client.list::<Pod>(&path, &params) {
                Ok(list) => {
                    backoff.reset();
                    rv = list.metadata.resource_version.clone();
                    if tx.send(Msg::Sync(list.items)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    log(format!("listing pods: {e}"));
                    if !nap(&shared, backoff.next_delay()) {
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
            field_selector: Some(selector.clone()),
            resource_version: rv.clone(),
            allow_watch_bookmarks: true,
            timeout_seconds: Some(timeout),
            ..Default::default()
        };
        let stream = match client.watch::<Pod>(&path, &params) {
            Ok(s) => s,
            Err(e) if e.is_gone() => {
                rv = None;
                continue;
            }
            Err(e) => {
                log(format!("watching pods: {e}"));
                if !nap(&shared, backoff.next_delay()) {
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
            let msg = match ev {
                Ok(Event::Bookmark(v)) => {
                    rv = Some(v);
                    continue;
                }
                Ok(Event::Added(p) | Event::Modified(p)) => {
                    rv = p.metadata.resource_version.clone().or(rv);
                    Msg::Upsert(Box::new(p))
                }
                Ok(Event::Deleted(p)) => {
                    rv = p.metadata.resource_version.clone().or(rv);
                    Msg::Deleted(Box::new(p))
                }
                Err(e) if e.is_gone() => {
                    log("watch expired (410 Gone); listing again");
                    rv = None;
                    break;
                }
                Err(e) => {
                    log(format!("watch ended: {e}"));
                    break;
                }
            };
            got_any = true;
            if tx.send(msg).is_err() {
                return;
            }
        }
        if !got_any && rv.is_some() && !nap(&shared, backoff.next_delay()) {
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

// ---------------------------------------------------------------------------------------------
// The worker

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Written to the spool; its units run (or will, after the next reload).
    Active,
    /// Not run: policy, validation or image; the reason and message were posted.
    Rejected { reason: String, message: String },
    /// Waiting for something it needs (a ConfigMap, Secret, token or image); retried. `only`: the
    /// containers the reason is about (empty: all of them).
    Blocked {
        reason: String,
        message: String,
        only: Vec<String>,
    },
    /// deletionTimestamp seen: units stopping; DELETE once they are down or the grace ran out.
    Terminating { deadline: Instant, killed: bool },
    /// Already `Succeeded` or `Failed` in the API when first seen, and not in the spool: it ran
    /// elsewhere or before a reinstall. Never run (the kubelet never restarts a terminal pod) and
    /// its status left as it is (the API forbids a terminated container to become anything else).
    Finished,
}

#[derive(Debug)]
struct PodRec {
    /// Without its status and managedFields (see [`Worker::upsert`]).
    pod: Compact<Pod>,
    uid: String,
    /// Its units, the pod unit first ([`observe::pod_units`]).
    units: Vec<String>,
    phase: Phase,
    posted: Option<Compact<PodStatus>>,
    /// token file path -> when to refresh it
    tokens: HashMap<String, Timestamp>,
    event_sent: bool,
    /// Hash of the spool text that last passed validation: the periodic re-admission skips the
    /// generator run when nothing changed.
    validated: Option<u64>,
    /// The resourceVersions of the ConfigMaps and Secrets it was last spooled with: the periodic
    /// refresh leaves the pod alone while they are the same.
    refs_seen: Option<String>,
    /// A status the API server refused (422 and the like): not sent again until it changes.
    refused: Option<Compact<PodStatus>>,
}

/// ConfigMaps and Secrets read during one batch of work (a burst of new pods, a refresh round), so
/// 110 pods using `kube-root-ca.crt` mean one GET, not 110. `None`: not found.
#[derive(Default)]
struct RefCache {
    config_maps: HashMap<(String, String), Option<ConfigMap>>,
    secrets: HashMap<(String, String), Option<Secret>>,
}

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

/// A static pod and its mirror (keyed by the static pod's namespace and name).
struct MirrorRec {
    hash: String,
    mirror_name: String,
    static_pod: Pod,
    posted: Option<PodStatus>,
}

/// Whose status is to be recomputed: asking systemd about every pod on every unit change would
/// cost each change a few D-Bus round trips per pod.
#[derive(Debug, Default)]
struct Due {
    all: bool,
    /// A daemon-reload finished: also the pods whose units it changed (see
    /// [`Worker::changed_by_reload`]).
    reloaded: bool,
    pods: BTreeSet<(String, String)>,
}

impl Due {
    fn everything() -> Due {
        Due {
            all: true,
            reloaded: false,
            pods: BTreeSet::new(),
        }
    }

    fn is_empty(&self) -> bool {
        !self.all && !self.reloaded && self.pods.is_empty()
    }

    /// Whether `k` is due; a reload must have been turned into the pods it changed first.
    fn has(&self, k: &(String, String)) -> bool {
        debug_assert!(!self.reloaded, "resolve the reload first (post_statuses)");
        self.all || self.pods.contains(k)
    }
}

/// The worker's state.
pub struct Worker {
    client: Client,
    cfg: AgentConfig,
    shared: Arc<Shared>,
    units: Arc<dyn Units>,
    spool: Spool,
    pods: BTreeMap<(String, String), PodRec>,
    mirrors: BTreeMap<(String, String), MirrorRec>,
    /// Mirror pods bound to this node as the watch shows them, by (namespace, mirror name). A node
    /// may not read pods that are not bound to it, so this is the only way to know them.
    api_mirrors: BTreeMap<(String, String), Pod>,
    dirty_since: Option<Instant>,
    last_dirty: Instant,
    /// Pods whose spool file changed since the last reload: their status is recomputed after it,
    /// whatever systemd then lists (a pod whose units did not load has none to compare).
    respooled: BTreeSet<(String, String)>,
    api_retry_at: Option<Instant>,
    api_backoff: Backoff,
    last_refresh: Instant,
    last_mirror_scan: Option<Instant>,
    /// Pods whose status to recompute at the next tick.
    status_due: Due,
    /// Set while a batch of work runs; see [`RefCache`].
    ref_cache: Option<RefCache>,
    /// Set during the periodic refresh of referenced objects.
    refreshing: bool,
    /// Volume refreshes started (names their transient units).
    refresh_runs: u64,
    /// Every podunit unit's states as of the last reload handled, to tell which pods it changed.
    reload_states: HashMap<String, UnitStates>,
    /// Pods whose ConfigMap or Secret read was forbidden (403): right after a node registers,
    /// or a pod is bound to it, the Node authorizer may not know the link yet. Retried soon, with
    /// back-off, not at the next refresh round.
    forbidden: BTreeSet<(String, String)>,
    forbidden_retry_at: Option<Instant>,
    forbidden_backoff: Backoff,
    /// How many daemon-reloads were asked for (tests and benchmarks read it).
    pub reloads: u64,
    /// The probe runner's published results.
    pub probes: crate::probe::runner::Handle,
    /// What events were posted (dedup, aggregation, spam filter).
    events: super::events::Correlator,
}

/// The static pods (/etc/pods.d, /run/pods.d) as the generator loads them, without parsing the
/// spool: re-reading every API pod's manifest at each mirror scan was most of the idle CPU. A
/// static pod whose name a spool file also has is refused by the generator (defined twice), so it
/// is left out here too, as are static pods defined twice.
fn static_catalog(paths: &Paths, spooled: &BTreeSet<(String, String)>) -> crate::manifest::Catalog {
    use crate::manifest::discover;
    let mut c = crate::manifest::Catalog::default();
    for (source, dir) in paths.manifest_dirs() {
        if !source.is_static() {
            continue;
        }
        for f in discover::list_dir(&dir).unwrap_or_default() {
            let shown = std::path::Path::new("/").join(f.strip_prefix(&paths.root).unwrap_or(&f));
            if discover::check_trusted(&paths.root, &dir, &f).is_ok() {
                c.add_file_as(&f, &shown, source);
            }
        }
    }
    let mut count: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in &c.pods {
        *count
            .entry((e.namespace().to_string(), e.name().to_string()))
            .or_default() += 1;
    }
    c.pods.retain(|e| {
        let k = (e.namespace().to_string(), e.name().to_string());
        count[&k] == 1 && !spooled.contains(&k)
    });
    c
}

fn key_of(p: &Pod) -> (String, String) {
    (
        p.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

fn uid_of(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

impl Worker {
    pub fn new(
        client: Client,
        cfg: AgentConfig,
        shared: Arc<Shared>,
        units: Arc<dyn Units>,
    ) -> std::io::Result<Worker> {
        let spool = Spool::new(cfg.paths.spool());
        spool.init()?;
        let cfg_max_backoff = cfg.timing.max_backoff_seconds.max(1);
        let events = super::events::Correlator::new(&cfg.node_name);
        Ok(Worker {
            client,
            cfg,
            shared,
            units,
            spool,
            pods: BTreeMap::new(),
            mirrors: BTreeMap::new(),
            api_mirrors: BTreeMap::new(),
            dirty_since: None,
            last_dirty: Instant::now(),
            respooled: BTreeSet::new(),
            api_retry_at: None,
            api_backoff: Backoff::with_time_seed(
                Duration::from_millis(500),
                Duration::from_secs(30),
            ),
            last_refresh: Instant::now(),
            last_mirror_scan: None,
            status_due: Due::everything(),
            ref_cache: None,
            refreshing: false,
            refresh_runs: 0,
            reload_states: HashMap::new(),
            forbidden: BTreeSet::new(),
            forbidden_retry_at: None,
            forbidden_backoff: Backoff::with_time_seed(
                Duration::from_millis(200),
                Duration::from_secs(cfg_max_backoff),
            ),
            reloads: 0,
            probes: Default::default(),
            events,
        })
    }

    fn api_ok(&self) -> bool {
        self.api_retry_at.is_none_or(|t| Instant::now() >= t)
    }

    /// Notes an API failure: transient ones pause API calls for a backed-off while.
    fn api_failed(&mut self, what: &str, e: &ApiError) {
        log(format!("{what}: {e}"));
        if e.is_transient() {
            self.api_retry_at = Some(Instant::now() + self.api_backoff.next_delay());
        }
    }

    fn api_worked(&mut self) {
        if self.api_retry_at.take().is_some() {
            self.api_backoff.reset();
        }
    }

    fn node_addrs(&self) -> NodeAddrs {
        NodeAddrs {
            ips: self.shared.node_ips.lock().unwrap().clone(),
        }
    }

    fn mark_dirty(&mut self, k: &(String, String)) {
        self.respooled.insert(k.clone());
        self.last_dirty = Instant::now();
        self.dirty_since.get_or_insert(self.last_dirty);
    }

    /// Runs until stopped, handling messages from `rx`.
    pub fn run(&mut self, rx: Receiver<Msg>) {
        let tick = Duration::from_millis(self.cfg.timing.reload_debounce_millis.clamp(50, 1000));
        while !self.shared.stopping() {
            match rx.recv_timeout(tick) {
                Ok(m) => {
                    self.ref_cache = Some(RefCache::default());
                    self.handle(m);
                    // Drain what is queued so a burst becomes one reload.
                    while let Ok(m) = rx.try_recv() {
                        self.handle(m);
                    }
                    self.ref_cache = None;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            self.tick();
        }
    }

    pub fn handle(&mut self, m: Msg) {
        match m {
            Msg::Sync(list) => self.sync(list),
            Msg::Upsert(p) => self.upsert(*p),
            Msg::Deleted(p) => self.gone(&p),
            Msg::UnitsChanged(c) => self.units_changed(c),
            Msg::Probe(n) => self.probe_note(n),
        }
    }

    fn probe_note(&mut self, n: super::probes::Note) {
        match n {
            super::probes::Note::Changed(p) => {
                self.status_due.pods.insert((p.namespace, p.name));
            }
            super::probes::Note::Event {
                pod,
                container,
                type_,
                reason,
                message,
            } => {
                let Some(rec) = self.pods.get(&(pod.namespace, pod.name)) else {
                    return;
                };
                let pod = rec.pod.get();
                let obj = super::events::Involved::container(&pod, &container);
                self.post_event(&obj, type_, &reason, &message);
            }
        }
    }

    /// Posts an event through the correlator (a repeat patches the first, a flood is dropped).
    pub fn post_event(
        &mut self,
        obj: &super::events::Involved,
        type_: &str,
        reason: &str,
        message: &str,
    ) {
        use super::events::Action;
        let Some(action) = self.events.correlate(obj, type_, reason, message, now()) else {
            return;
        };
        let r = match action {
            Action::Create(ev) => {
                let path =
                    client::path::<k8s_openapi::api::core::v1::Event>(Some(&obj.namespace), None);
                self.client
                    .create::<_, serde_json::Value>(&path, &*ev)
                    .map(|_| ())
            }
            Action::Patch {
                namespace,
                name,
                patch,
            } => {
                let path = client::path::<k8s_openapi::api::core::v1::Event>(
                    Some(&namespace),
                    Some(&name),
                );
                self.client
                    .merge_patch::<serde_json::Value>(&path, &patch)
                    .map(|_| ())
            }
        };
        if let Err(e) = r {
            self.api_failed("posting an event", &e);
        }
    }

    /// Periodic work after each batch of messages.
    pub fn tick(&mut self) {
        let debounce = Duration::from_millis(self.cfg.timing.reload_debounce_millis);
        if let Some(since) = self.dirty_since
            && (self.last_dirty.elapsed() >= debounce || since.elapsed() >= debounce * 10)
        {
            self.dirty_since = None;
            self.reloads += 1;
            if let Err(e) = self.units.reload() {
                log(format!("reload: {e}"));
            }
            self.status_due.reloaded = true;
            let respooled = std::mem::take(&mut self.respooled);
            self.status_due.pods.extend(respooled);
        }
        let refresh = Duration::from_secs(self.cfg.timing.object_refresh_seconds.max(1));
        if self.api_ok() && self.last_refresh.elapsed() >= refresh {
            self.last_refresh = Instant::now();
            self.refresh_all();
        }
        if self.api_ok() && self.forbidden_retry_at.is_some_and(|t| Instant::now() >= t) {
            self.retry_forbidden();
        }
        if self.api_ok() {
            self.refresh_tokens();
            self.progress_terminations();
            self.scan_mirrors();
            // While a reload is pending, statuses wait for it: posting them first would delay the
            // reload (and every pod's start) by a round of D-Bus reads and PATCHes, only to say
            // ContainerCreating, which the next round says again after the reload.
            if !self.status_due.is_empty() && self.dirty_since.is_none() {
                let due = std::mem::take(&mut self.status_due);
                self.post_statuses(due);
            }
        }
    }

    fn sync(&mut self, list: Vec<Pod>) {
        let keys: std::collections::BTreeSet<(String, String)> = list
            .iter()
            .filter(|p| !mirror::is_mirror(p))
            .map(key_of)
            .collect();
        // Pods deleted while we were not watching.
        let gone: Vec<(String, String)> = self
            .pods
            .keys()
            .filter(|k| !keys.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            self.forget(&k, true);
        }
        for f in self.spool.list().unwrap_or_default() {
            if let Some(k) = spool::parse_file_name(&f)
                && !keys.contains(&k)
            {
                log(format!("{}/{}: no longer assigned to this node", k.0, k.1));
                self.stop_units_of_file(&k);
                let _ = self.spool.remove(&f);
                self.mark_dirty(&k);
            }
        }
        self.api_mirrors.clear();
        for p in list {
            if mirror::is_mirror(&p) {
                self.api_mirrors.insert(key_of(&p), p);
                continue;
            }
            self.upsert(p);
        }
        self.status_due.all = true;
    }

    fn stop_units_of_file(&self, k: &(String, String)) {
        let units = vec![crate::translate::naming::pod_service(&k.0, &k.1)];
        if let Err(e) = self.units.stop(&units, false) {
            log(format!("stopping {}/{}: {e}", k.0, k.1));
        }
    }

    fn upsert(&mut self, mut pod: Pod) {
        if mirror::is_mirror(&pod) {
            self.api_mirrors.insert(key_of(&pod), pod);
            self.last_mirror_scan = None;
            return;
        }
        let k = key_of(&pod);
        if let Some(rec) = self.pods.get(&k)
            && rec.uid != uid_of(&pod)
        {
            // Same name, new pod: the old one is gone.
            self.forget(&k, true);
        }
        let terminating = pod.metadata.deletion_timestamp.is_some();
        // Kept per pod for as long as it runs: the API's copy of the status is only the first
        // `posted` (status is computed from the units), managedFields never used.
        let api_status = pod.status.take();
        pod.metadata.managed_fields = None;
        if let Some(rec) = self.pods.get_mut(&k) {
            let old = rec.pod.get();
            let same_spec = old.spec == pod.spec
                && old.metadata.labels == pod.metadata.labels
                && old.metadata.annotations == pod.metadata.annotations;
            rec.pod = Compact::new(&pod);
            rec.units = observe::pod_units(&pod);
            if rec.posted.is_none() {
                rec.posted = api_status.as_ref().map(Compact::new);
            }
            if terminating {
                if !matches!(rec.phase, Phase::Terminating { .. }) {
                    self.begin_termination(&k);
                }
                return;
            }
            if rec.phase == Phase::Finished
                || (same_spec && !matches!(rec.phase, Phase::Blocked { .. }))
            {
                return;
            }
        } else {
            let posted = api_status;
            let phase_done = matches!(
                posted.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            );
            let in_spool = self.spool.dir.join(spool::file_name(&k.0, &k.1)).exists();
            self.pods.insert(
                k.clone(),
                PodRec {
                    pod: Compact::new(&pod),
                    uid: uid_of(&pod),
                    units: observe::pod_units(&pod),
                    phase: if phase_done && !in_spool {
                        Phase::Finished
                    } else {
                        Phase::Active
                    },
                    posted: posted.as_ref().map(Compact::new),
                    tokens: HashMap::new(),
                    event_sent: false,
                    validated: None,
                    refs_seen: None,
                    refused: None,
                },
            );
            if terminating {
                self.begin_termination(&k);
                return;
            }
            if phase_done && !in_spool {
                // A finished pod is never run again (the kubelet does not restart terminal pods).
                return;
            }
        }
        self.admit(&k);
    }

    /// Policy, validation, referenced objects, tokens, then the spool.
    fn admit(&mut self, k: &(String, String)) {
        let Some(rec) = self.pods.get(k) else { return };
        let pod = rec.pod.get();
        let paths = self.cfg.paths.clone();
        let resolve = |p: &str| crate::generate::host_realpath(&paths, p);
        if let Err(v) = policy::check_resolved(&pod, &self.cfg.policy, &resolve) {
            self.reject(k, policy::Violation::REASON, &v.to_string());
            return;
        }
        let (cms, secrets) = match self.fetch_refs(&pod) {
            Ok(x) => x,
            Err(Some((reason, message))) => {
                self.block(k, &reason, &message);
                return;
            }
            // The API server is unreachable: leave whatever the spool has.
            Err(None) => return,
        };
        let seen: String = cms
            .iter()
            .map(|c| &c.metadata)
            .chain(secrets.iter().map(|s| &s.metadata))
            .map(|m| {
                format!(
                    "{}@{} ",
                    m.name.as_deref().unwrap_or_default(),
                    m.resource_version.as_deref().unwrap_or_default()
                )
            })
            .collect();
        let file = spool::file_name(&k.0, &k.1);
        // Checked before a pod is first spooled: an image removed from the store later does not
        // touch a pod that already runs, as the kubelet leaves running containers alone.
        let in_spool = self.spool.dir.join(&file).exists();
        if self.refreshing
            && in_spool
            && self
                .pods
                .get(k)
                .is_some_and(|r| r.phase == Phase::Active && r.refs_seen.as_ref() == Some(&seen))
        {
            // Nothing it uses changed since it was spooled: the text would be the same (tokens
            // are renewed by refresh_tokens).
            return;
        }
        if !in_spool && let Some((containers, message)) = self.missing_images(&pod) {
            // podunit never pulls: an image not on this host is the kubelet's imagePullPolicy
            // Never case. The pod waits (retried: the image may be put into the store) instead
            // of failing as invalid.
            self.block_containers(k, IMAGE_NEVER_PULL, &message, IMAGE_NEVER_PULL, containers);
            return;
        }
        let text = spool::render(&pod, &cms, &secrets);
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            text.hash(&mut h);
            h.finish()
        };
        if self.pods.get(k).and_then(|r| r.validated) != Some(hash) {
            if let Err(msg) = self.validate(k, &text) {
                self.reject(k, "InvalidPod", &msg);
                return;
            }
            if let Some(rec) = self.pods.get_mut(k) {
                rec.validated = Some(hash);
            }
        }
        let new_tokens = match self.issue_tokens(k) {
            Ok(n) => n,
            Err(e) => {
                if let Some(msg) = e {
                    self.block(k, "CreateContainerConfigError", &msg);
                }
                return;
            }
        };
        let spooled = match self.spool.put(&file, text.as_bytes()) {
            Ok(changed) => changed,
            Err(e) => {
                log(format!("{}/{}: writing the spool: {e}", k.0, k.1));
                return;
            }
        };
        if spooled {
            self.mark_dirty(k);
        }
        if spooled || new_tokens {
            // A running pod sees its ConfigMaps, Secrets and tokens change, as with the kubelet.
            self.refresh_volumes(k);
        }
        if let Some(rec) = self.pods.get_mut(k) {
            rec.phase = Phase::Active;
            rec.refs_seen = Some(seen);
        }
        self.status_due.pods.insert(k.clone());
    }

    /// The containers whose image is neither the host, a root directory or image file, nor in the
    /// local image store, and the message for them (the kubelet's, plus where podunit looks).
    fn missing_images(&self, pod: &Pod) -> Option<(Vec<String>, String)> {
        use crate::translate::image;
        let images = crate::generate::FsImages {
            paths: self.cfg.paths.clone(),
            host_aliases: self.cfg.policy.host_images.clone(),
        };
        let spec = pod.spec.as_ref()?;
        let mut names = Vec::new();
        let mut messages = Vec::new();
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
        {
            let Some(reference) = c.image.as_deref().filter(|i| !i.is_empty()) else {
                continue;
            };
            // An image reference that is not valid is the generator's to report (InvalidPod).
            if !reference.starts_with('/') && image::store_path(reference).is_none() {
                continue;
            }
            if let Err(why) = image::resolve(reference, &images) {
                names.push(c.name.clone());
                messages.push(format!(
                    "Container image {reference:?} is not present with pull policy of Never \
                     (podunit never pulls: {why})"
                ));
            }
        }
        (!names.is_empty()).then(|| (names, messages.join("; ")))
    }

    /// The generator's own checks, run on exactly what it will read.
    fn validate(&self, k: &(String, String), text: &str) -> Result<(), String> {
        let mut c = crate::manifest::Catalog::default();
        let shown = PathBuf::from(Paths::SPOOL).join(spool::file_name(&k.0, &k.1));
        c.add_text(&shown, text, crate::common::paths::Source::Spool);
        let facts = crate::generate::detect_node(&self.cfg.paths);
        let images = crate::generate::FsImages {
            paths: self.cfg.paths.clone(),
            host_aliases: self.cfg.policy.host_images.clone(),
        };
        let g = crate::generate::generate(&c, &facts, &images);
        let errors: Vec<String> = g
            .problems
            .iter()
            .filter(|p| p.is_error())
            .map(|p| {
                let mut s = String::new();
                if let Some(path) = &p.path {
                    s.push_str(path);
                    s.push_str(": ");
                }
                s.push_str(&p.message);
                s
            })
            .collect();
        if errors.is_empty() && !g.pods.is_empty() {
            Ok(())
        } else if errors.is_empty() {
            Err("the pod could not be translated to units".into())
        } else {
            Err(errors.join("; "))
        }
    }

    /// ConfigMaps and Secrets the pod uses. `Err(Some)`: a required one is missing (reason, message);
    /// `Err(None)`: the API server did not answer.
    #[allow(clippy::type_complexity)]
    fn fetch_refs(
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

    fn token_file(&self, uid: &str, path: &str) -> Option<PathBuf> {
        let dir = self.cfg.paths.host(&format!("{}/{uid}", Paths::TOKENS));
        crate::common::paths::join_inside(&dir, path)
    }

    /// Requests every token the pod's projected volumes need that is missing or due and writes
    /// them where pod-prepare (and [`Self::refresh_volumes`]) read them. Returns whether any token
    /// was issued.
    fn issue_tokens(&mut self, k: &(String, String)) -> Result<bool, Option<String>> {
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
                spool::write_atomic(&file, st.token.as_bytes(), 0o600)
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

    /// Has the files volumes of the pod, if it runs, rewritten from the spool (its ConfigMaps and
    /// Secrets now) and its issued tokens: `podunit pod-refresh` with the plan the generator wrote
    /// for it, run as a transient unit (the files belong to the pod's users, which podunit-sync's
    /// own sandbox may not chown to). A pod that does not run yet gets its files from pod-prepare.
    fn refresh_volumes(&mut self, k: &(String, String)) {
        let Some(rec) = self.pods.get(k) else { return };
        let unit = crate::translate::naming::pod_service(&k.0, &k.1);
        let plan_path = format!(
            "{}/{}/{}",
            crate::translate::plan::GENERATOR_DIR,
            crate::translate::plan::PLAN_DIR,
            crate::translate::plan::PodPlan::file_name(&unit)
        );
        let Some(plan) = std::fs::read_to_string(self.cfg.paths.host(&plan_path))
            .ok()
            .and_then(|t| serde_json::from_str::<crate::translate::plan::PodPlan>(&t).ok())
        else {
            return;
        };
        // The plan of an older pod of the same name, or a pod that is not running: nothing to do.
        if plan.uid != rec.uid || !self.cfg.paths.host(&plan.runtime_dir).is_dir() {
            return;
        }
        self.refresh_runs += 1;
        // A new name each time: a refresh still running never blocks the next one (the volume's
        // lock orders them, and each writes what is current when it runs).
        let mut name = format!(
            "{}-refresh-{}.service",
            unit.trim_end_matches(".service"),
            self.refresh_runs
        );
        if name.len() > crate::translate::naming::UNIT_NAME_MAX {
            // A pod unit name near the limit: the UID names the pod as well, in 36 characters.
            name = format!("podunit-refresh-{}-{}.service", plan.uid, self.refresh_runs);
        }
        let bin = crate::generate::podunit_bin(&self.cfg.paths);
        let argv = [bin.as_str(), "pod-refresh", &plan_path].map(String::from);
        match self.units.run_once(
            &name,
            &format!("Update the volumes of pod {}/{}", k.0, k.1),
            &argv,
        ) {
            Ok(()) => log(format!("{}/{}: updating its volumes ({name})", k.0, k.1)),
            Err(e) => log(format!("{}/{}: updating its volumes: {e}", k.0, k.1)),
        }
    }

    fn refresh_tokens(&mut self) {
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

    /// Re-reads referenced ConfigMaps and Secrets (the kubelet's TTL cache strategy) and retries
    /// blocked pods.
    fn refresh_all(&mut self) {
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

    fn retry_forbidden(&mut self) {
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

    fn reject(&mut self, k: &(String, String), reason: &str, message: &str) {
        log(format!("{}/{}: {reason}: {message}", k.0, k.1));
        // Never partly run: whatever was spooled for it goes.
        if self
            .spool
            .remove(&spool::file_name(&k.0, &k.1))
            .unwrap_or(false)
        {
            self.stop_units_of_file(k);
            self.mark_dirty(k);
        }
        let addrs = self.node_addrs();
        let Some(rec) = self.pods.get_mut(k) else {
            return;
        };
        rec.phase = Phase::Rejected {
            reason: reason.into(),
            message: message.into(),
        };
        let pod = rec.pod.get();
        let st = podstatus::rejected(
            &pod,
            reason,
            message,
            &addrs,
            rec.posted.as_ref().map(Compact::get).as_ref(),
            now(),
        );
        if !rec.event_sent {
            self.event(&pod, "Warning", reason, message);
        }
        self.post_status(k, st);
    }

    fn block(&mut self, k: &(String, String), reason: &str, message: &str) {
        // The kubelet's Event for a container it cannot create has reason `Failed`.
        self.block_containers(k, reason, message, "Failed", Vec::new());
    }

    /// The pod waits with `reason` on the containers in `only` (all when empty); one Warning Event
    /// with `event_reason` each time the reason or message changes.
    fn block_containers(
        &mut self,
        k: &(String, String),
        reason: &str,
        message: &str,
        event_reason: &str,
        only: Vec<String>,
    ) {
        let Some(rec) = self.pods.get_mut(k) else {
            return;
        };
        let new = Phase::Blocked {
            reason: reason.into(),
            message: message.into(),
            only,
        };
        let changed = rec.phase != new;
        rec.phase = new;
        if changed {
            let pod = rec.pod.get();
            log(format!("{}/{}: {reason}: {message}", k.0, k.1));
            self.event(&pod, "Warning", event_reason, message);
            self.status_due.pods.insert(k.clone());
        }
    }

    /// Records an Event about the pod (core/v1, as `kubectl describe pod` shows them).
    fn event(&mut self, pod: &Pod, kind: &str, reason: &str, message: &str) {
        let (ns, name) = key_of(pod);
        let t = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now());
        let ev = k8s_openapi::api::core::v1::Event {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(format!(
                    "{name}.{:x}",
                    now().as_nanosecond() as u64 & 0xffff_ffff_ffff
                )),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name),
                namespace: Some(ns.clone()),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(kind.into()),
            count: Some(1),
            first_timestamp: Some(t.clone()),
            last_timestamp: Some(t),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some("kubelet".into()),
                host: Some(self.cfg.node_name.clone()),
            }),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(self.cfg.node_name.clone()),
            ..Default::default()
        };
        let path = client::path::<k8s_openapi::api::core::v1::Event>(Some(&ns), None);
        match self.client.create::<_, serde_json::Value>(&path, &ev) {
            Ok(_) => {
                if let Some(r) = self.pods.get_mut(&key_of(pod)) {
                    r.event_sent = true;
                }
            }
            Err(e) => self.api_failed("posting an event", &e),
        }
    }

    // -- deletion ------------------------------------------------------------------------------

    fn begin_termination(&mut self, k: &(String, String)) {
        let Some(rec) = self.pods.get_mut(k) else {
            return;
        };
        let pod = rec.pod.get();
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30)
            .max(0) as u64;
        rec.phase = Phase::Terminating {
            deadline: Instant::now() + Duration::from_secs(grace),
            killed: false,
        };
        let units = rec.units.clone();
        log(format!("{}/{}: deleting (grace {grace}s)", k.0, k.1));
        let running: Vec<String> = rec
            .posted
            .as_ref()
            .map(|p| p.get())
            .iter()
            .flat_map(|st| {
                st.init_container_statuses
                    .iter()
                    .flatten()
                    .chain(st.container_statuses.iter().flatten())
            })
            .filter(|cs| cs.state.as_ref().is_some_and(|s| s.running.is_some()))
            .map(|cs| cs.name.clone())
            .collect();
        for c in running {
            let obj = super::events::Involved::container(&pod, &c);
            self.post_event(
                &obj,
                "Normal",
                "Killing",
                &super::events::message::killing(&c),
            );
        }
        // Stop now (the pod unit's stop propagates to its containers with their TimeoutStopSec),
        // then drop the manifest so the next reload forgets the units.
        if let Err(e) = self.units.stop(&units[..1], false) {
            log(format!("{}/{}: stop: {e}", k.0, k.1));
        }
        if self
            .spool
            .remove(&spool::file_name(&k.0, &k.1))
            .unwrap_or(false)
        {
            self.mark_dirty(k);
        }
    }

    fn progress_terminations(&mut self) {
        let keys: Vec<(String, String)> = self
            .pods
            .iter()
            .filter(|(_, r)| matches!(r.phase, Phase::Terminating { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            let Some(rec) = self.pods.get_mut(&k) else {
                continue;
            };
            let Phase::Terminating { deadline, killed } = rec.phase.clone() else {
                continue;
            };
            let units = rec.units.clone();
            let stopped = match self.units.props(&units) {
                Ok(p) => observe::all_stopped(units.iter().filter_map(|u| p.get(u))),
                Err(e) => {
                    log(format!("{}/{}: {e}", k.0, k.1));
                    false
                }
            };
            if !stopped {
                if Instant::now() >= deadline && !killed {
                    log(format!("{}/{}: grace period over, killing", k.0, k.1));
                    let _ = self.units.stop(&units, true);
                    rec.phase = Phase::Terminating {
                        deadline,
                        killed: true,
                    };
                }
                continue;
            }
            // Volumes go before the object does (the kubelet unmounts before its final DELETE), so
            // whoever sees the pod gone also sees its state gone.
            let uid = rec.uid.clone();
            self.remove_pod_dirs(&uid);
            let path = client::path::<Pod>(Some(&k.0), Some(&k.1));
            let opts = DeleteOptions {
                grace_period_seconds: Some(0),
                uid: Some(uid.clone()),
                resource_version: None,
            };
            match self.client.delete(&path, &opts) {
                Ok(()) => {}
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => {
                    self.api_failed("deleting a pod", &e);
                    return;
                }
            }
            self.forget(&k, false);
        }
    }

    /// Drops all local traces of a pod: spool file, tokens, state and runtime dirs.
    fn forget(&mut self, k: &(String, String), stop: bool) {
        let Some(rec) = self.pods.remove(k) else {
            return;
        };
        if stop {
            self.stop_units_of_file(k);
        }
        if self
            .spool
            .remove(&spool::file_name(&k.0, &k.1))
            .unwrap_or(false)
        {
            self.mark_dirty(k);
        }
        self.remove_pod_dirs(&rec.uid);
    }

    /// Removes /var/lib/podunit/pods/<uid> and /run/podunit/pods/<uid>.
    fn remove_pod_dirs(&self, uid: &str) {
        if !uid.is_empty() && !uid.contains('/') && !uid.contains("..") {
            for base in [Paths::STATE, Paths::RUNTIME, Paths::TOKENS] {
                let _ = std::fs::remove_dir_all(self.cfg.paths.host(&format!("{base}/{uid}")));
            }
        }
    }

    fn gone(&mut self, pod: &Pod) {
        if mirror::is_mirror(pod) {
            let k = key_of(pod);
            if self.api_mirrors.get(&k).map(uid_of) == Some(uid_of(pod)) {
                self.api_mirrors.remove(&k);
            }
            self.last_mirror_scan = None;
            return;
        }
        let k = key_of(pod);
        if self.pods.get(&k).is_some_and(|r| r.uid == uid_of(pod)) {
            self.forget(&k, true);
        }
    }

    // -- status ----------------------------------------------------------------------------------

    fn post_status(&mut self, k: &(String, String), st: PodStatus) -> bool {
        let Some(rec) = self.pods.get(k) else {
            return false;
        };
        let compact = Compact::new(&st);
        if rec.posted.as_ref() == Some(&compact) || rec.refused.as_ref() == Some(&compact) {
            return true;
        }
        let path = format!("{}/status", client::path::<Pod>(Some(&k.0), Some(&k.1)));
        match self
            .client
            .merge_patch::<Pod>(&path, &serde_json::json!({ "status": st }))
        {
            Ok(_) => {
                self.api_worked();
                if let Some(rec) = self.pods.get_mut(k) {
                    rec.posted = Some(compact);
                }
                true
            }
            Err(e) if e.is_not_found() => true,
            // A refusal (422 Invalid, 403, ...) is final for this status: retrying the same
            // request only floods the API server. Logged once; a different status is sent.
            Err(e) if !e.is_transient() && e.code().is_some_and(|c| (400..500).contains(&c)) => {
                log(format!(
                    "{}/{}: status refused, not sent again until it changes: {e}",
                    k.0, k.1
                ));
                if let Some(rec) = self.pods.get_mut(k) {
                    rec.refused = Some(compact);
                }
                true
            }
            Err(e) => {
                self.api_failed("posting pod status", &e);
                false
            }
        }
    }

    /// Marks the pods (and static pods) that own the changed units.
    fn units_changed(&mut self, c: Changes) {
        let changed = match c {
            Changes::None => return,
            Changes::All => {
                self.status_due.all = true;
                return;
            }
            Changes::Units(u) => u,
            Changes::Reloaded(u) => {
                self.status_due.reloaded = true;
                u
            }
        };
        if self.status_due.all {
            return;
        }
        let owns = |units: &[String]| units.iter().any(|u| changed.contains(u));
        let pods = self
            .pods
            .iter()
            .filter(|(_, r)| owns(&r.units))
            .map(|(k, _)| k);
        let statics = self
            .mirrors
            .iter()
            .filter(|(_, m)| owns(&observe::pod_units(&m.static_pod)))
            .map(|(k, _)| k);
        let keys: Vec<(String, String)> = pods.chain(statics).cloned().collect();
        self.status_due.pods.extend(keys);
    }

    /// The pods and static pods whose units a reload changed: load, active or sub state differs
    /// from what the last reload left (all of them when the edge cannot list units). Asking
    /// systemd for every unit's properties after each reload cost three D-Bus calls per unit, and
    /// slowed each new pod's start more the fuller the node was.
    fn changed_by_reload(&mut self) -> Vec<(String, String)> {
        let Some(now) = self.units.states() else {
            return self
                .pods
                .keys()
                .chain(self.mirrors.keys())
                .cloned()
                .collect();
        };
        let before = std::mem::replace(&mut self.reload_states, now);
        let after = &self.reload_states;
        let changed = |units: &[String]| units.iter().any(|u| before.get(u) != after.get(u));
        let pods = self.pods.iter().filter(|(_, r)| changed(&r.units));
        let statics = self
            .mirrors
            .iter()
            .filter(|(_, m)| changed(&observe::pod_units(&m.static_pod)));
        pods.map(|(k, _)| k)
            .chain(statics.map(|(k, _)| k))
            .cloned()
            .collect()
    }

    fn post_statuses(&mut self, mut due: Due) {
        if due.reloaded && !due.all {
            let changed = self.changed_by_reload();
            due.pods.extend(changed);
            due.reloaded = false;
        }
        let keys: Vec<(String, String)> = if due.all {
            self.pods.keys().cloned().collect()
        } else {
            due.pods
                .iter()
                .filter(|k| self.pods.contains_key(*k))
                .cloned()
                .collect()
        };
        let addrs = self.node_addrs();
        for (i, k) in keys.iter().enumerate() {
            let k = k.clone();
            if !self.api_ok() {
                // Try again once the API server is back.
                self.status_due.pods.extend(keys[i..].iter().cloned());
                self.status_due.pods.extend(
                    self.mirrors
                        .keys()
                        .filter(|k| due.has(k))
                        .cloned()
                        .collect::<Vec<_>>(),
                );
                return;
            }
            let Some(rec) = self.pods.get(&k) else {
                continue;
            };
            let pod = rec.pod.get();
            let posted = rec.posted.as_ref().map(Compact::get);
            let st = match &rec.phase {
                Phase::Finished => continue,
                Phase::Rejected { reason, message } => {
                    podstatus::rejected(&pod, reason, message, &addrs, posted.as_ref(), now())
                }
                Phase::Blocked {
                    reason,
                    message,
                    only,
                } => {
                    let about = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
                    let mut obs = observe::observe(&pod, &HashMap::new());
                    for c in obs
                        .containers
                        .iter_mut()
                        .chain(obs.init_containers.iter_mut())
                        .filter(|c| about(&c.name))
                    {
                        c.state = podstatus::State::Waiting {
                            reason: reason.clone(),
                        };
                    }
                    let mut st = podstatus::build(&pod, &obs, &addrs, posted.as_ref(), now());
                    for cs in st
                        .container_statuses
                        .iter_mut()
                        .flatten()
                        .chain(st.init_container_statuses.iter_mut().flatten())
                        .filter(|cs| about(&cs.name))
                    {
                        if let Some(w) = cs.state.as_mut().and_then(|s| s.waiting.as_mut()) {
                            w.message = Some(message.clone());
                        }
                    }
                    st
                }
                Phase::Active | Phase::Terminating { .. } => {
                    let units = rec.units.clone();
                    let props: HashMap<String, UnitProps> = match self.units.props(&units) {
                        Ok(p) => p,
                        Err(e) => {
                            log(format!("{}/{}: {e}", k.0, k.1));
                            self.status_due.pods.insert(k);
                            continue;
                        }
                    };
                    let mut obs = observe::observe(&pod, &props);
                    {
                        let results = self
                            .probes
                            .results
                            .read()
                            .unwrap_or_else(|e| e.into_inner());
                        super::probes::overlay_observed(&pod, &mut obs, &results);
                    }
                    let st = podstatus::build(&pod, &obs, &addrs, posted.as_ref(), now());
                    for (c, type_, reason, message) in
                        super::events::lifecycle(&pod, posted.as_ref(), &st)
                    {
                        let obj = super::events::Involved::container(&pod, &c);
                        self.post_event(&obj, type_, reason, &message);
                    }
                    st
                }
            };
            if !self.post_status(&k, st) {
                self.status_due.pods.insert(k);
            }
        }
        self.post_mirror_statuses(&addrs, &due);
    }

    // -- mirror pods -----------------------------------------------------------------------------

    fn delete_mirror(&mut self, ns: &str, api: &Pod) -> bool {
        let path = client::path::<Pod>(Some(ns), api.metadata.name.as_deref());
        let opts = DeleteOptions {
            grace_period_seconds: Some(0),
            uid: api.metadata.uid.clone(),
            resource_version: None,
        };
        match self.client.delete(&path, &opts) {
            Ok(()) => true,
            Err(e) if e.is_not_found() || e.is_conflict() => true,
            Err(e) => {
                self.api_failed("deleting a mirror pod", &e);
                false
            }
        }
    }

    /// Keeps one current mirror pod per static pod, and none for anything else.
    fn scan_mirrors(&mut self) {
        if self
            .last_mirror_scan
            .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        self.last_mirror_scan = Some(Instant::now());
        let Some(node_uid) = self.shared.node_uid.lock().unwrap().clone() else {
            return;
        };
        let spooled: BTreeSet<(String, String)> = self
            .spool
            .list()
            .unwrap_or_default()
            .iter()
            .filter_map(|f| spool::parse_file_name(f))
            .collect();
        let catalog = static_catalog(&self.cfg.paths, &spooled);
        let mut wanted = std::collections::BTreeSet::new();
        let mut statics = BTreeMap::new();
        for e in &catalog.pods {
            if self.cfg.policy.local == policy::Local::Enforce
                && policy::check(&e.pod, &self.cfg.policy).is_err()
            {
                continue;
            }
            let k = (e.namespace().to_string(), e.name().to_string());
            let mirror_name = mirror::name(&k.1, &self.cfg.node_name);
            wanted.insert((k.0.clone(), mirror_name.clone()));
            statics.insert(k, (e.pod.clone(), mirror_name));
        }
        // Mirrors of static pods that are gone (or never ours): removed, as the kubelet does.
        let stale: Vec<((String, String), Pod)> = self
            .api_mirrors
            .iter()
            .filter(|(k, _)| !wanted.contains(*k))
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        for (k, p) in stale {
            if !self.api_ok() || !self.delete_mirror(&k.0, &p) {
                return;
            }
            self.api_mirrors.remove(&k);
        }
        self.mirrors.retain(|k, _| statics.contains_key(k));
        for (k, (static_pod, mirror_name)) in statics {
            if !self.api_ok() {
                return;
            }
            let hash = mirror::config_hash(&static_pod);
            let mk = (k.0.clone(), mirror_name.clone());
            let current = self.api_mirrors.get(&mk).cloned();
            let ok = current.as_ref().is_some_and(|p| {
                mirror::mirrors(p, &hash) && p.metadata.deletion_timestamp.is_none()
            });
            if !ok {
                if let Some(old) = &current {
                    if !self.delete_mirror(&k.0, old) {
                        continue;
                    }
                    self.api_mirrors.remove(&mk);
                }
                let want = mirror::mirror_pod(&static_pod, &self.cfg.node_name, &node_uid);
                match self
                    .client
                    .create::<_, Pod>(&client::path::<Pod>(Some(&k.0), None), &want)
                {
                    Ok(p) => {
                        self.api_mirrors.insert(mk, p);
                    }
                    // Already there: the watch will tell us about it.
                    Err(e) if e.code() == Some(409) => {}
                    Err(e) => {
                        self.api_failed(&format!("creating mirror pod {}/{mirror_name}", k.0), &e);
                        continue;
                    }
                }
            }
            self.status_due.pods.insert(k.clone());
            let rec = self.mirrors.entry(k).or_insert_with(|| MirrorRec {
                hash: hash.clone(),
                mirror_name: mirror_name.clone(),
                static_pod: static_pod.clone(),
                posted: None,
            });
            if rec.hash != hash {
                rec.hash = hash;
                rec.static_pod = static_pod;
                rec.posted = None;
            }
        }
    }

    fn post_mirror_statuses(&mut self, addrs: &NodeAddrs, due: &Due) {
        let keys: Vec<(String, String)> = self
            .mirrors
            .keys()
            .filter(|k| due.has(k))
            .cloned()
            .collect();
        for k in keys {
            if !self.api_ok() {
                self.status_due.pods.insert(k);
                continue;
            }
            let Some(m) = self.mirrors.get(&k) else {
                continue;
            };
            let Some(api) = self
                .api_mirrors
                .get(&(k.0.clone(), m.mirror_name.clone()))
                .cloned()
            else {
                continue;
            };
            let units = observe::pod_units(&m.static_pod);
            let Ok(props) = self.units.props(&units) else {
                continue;
            };
            let obs = observe::observe(&m.static_pod, &props);
            let prev = m.posted.clone().or(api.status.clone());
            let st = podstatus::build(&api, &obs, addrs, prev.as_ref(), now());
            if m.posted.as_ref() == Some(&st) {
                continue;
            }
            let path = format!(
                "{}/status",
                client::path::<Pod>(Some(&k.0), api.metadata.name.as_deref())
            );
            match self
                .client
                .merge_patch::<Pod>(&path, &serde_json::json!({ "status": st }))
            {
                Ok(_) => {
                    if let Some(m) = self.mirrors.get_mut(&k) {
                        m.posted = Some(st);
                    }
                }
                Err(e) if e.is_not_found() => {
                    self.api_mirrors
                        .remove(&(k.0.clone(), api.metadata.name.clone().unwrap_or_default()));
                    self.last_mirror_scan = None;
                }
                Err(e) => self.api_failed("posting mirror pod status", &e),
            }
        }
    }
}

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
    worker.probes =
        crate::probe::runner::spawn(&cfg.paths, Box::new(super::probes::AgentSink(tx.clone())));
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
