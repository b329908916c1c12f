//! The worker: owns all pod state, takes the watchers' messages one batch at a time and runs the
//! periodic work after each batch (reload, refresh, tokens, terminations, mirrors, statuses).

use super::context::{AgentConfig, Shared, key_of, log, uid_of};
use super::state::{Due, MirrorRec, Phase, PodRec, RefCache};
use super::watchers::Msg;
use crate::agent::mirror;
use crate::agent::spool::{self, Spool};
use crate::agent::units::{UnitStates, Units};
use crate::kube::backoff::Backoff;
use crate::kube::client::{ApiError, Client};
use crate::kube::compact::Compact;
use crate::status::api::NodeAddrs;
use crate::status::observe;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The worker's state.
pub struct Worker {
    pub(super) client: Client,
    pub(super) cfg: AgentConfig,
    pub(super) shared: Arc<Shared>,
    pub(super) units: Arc<dyn Units>,
    pub(super) spool: Spool,
    pub(super) pods: BTreeMap<(String, String), PodRec>,
    pub(super) mirrors: BTreeMap<(String, String), MirrorRec>,
    /// Mirror pods bound to this node as the watch shows them, by (namespace, mirror name). A node
    /// may not read pods that are not bound to it, so this is the only way to know them.
    pub(super) api_mirrors: BTreeMap<(String, String), Pod>,
    pub(super) dirty_since: Option<Instant>,
    pub(super) last_dirty: Instant,
    /// Pods whose spool file changed since the last reload: their status is recomputed after it,
    /// whatever systemd then lists (a pod whose units did not load has none to compare).
    pub(super) respooled: BTreeSet<(String, String)>,
    pub(super) api_retry_at: Option<Instant>,
    pub(super) api_backoff: Backoff,
    pub(super) last_refresh: Instant,
    pub(super) last_mirror_scan: Option<Instant>,
    /// Pods whose status to recompute at the next tick.
    pub(super) status_due: Due,
    /// Set while a batch of work runs; see [`RefCache`].
    pub(super) ref_cache: Option<RefCache>,
    /// Set during the periodic refresh of referenced objects.
    pub(super) refreshing: bool,
    /// Volume refreshes started (names their transient units).
    pub(super) refresh_runs: u64,
    /// Every podunit unit's states as of the last reload handled, to tell which pods it changed.
    pub(super) reload_states: HashMap<String, UnitStates>,
    /// Pods whose ConfigMap or Secret read was forbidden (403): right after a node registers,
    /// or a pod is bound to it, the Node authorizer may not know the link yet. Retried soon, with
    /// back-off, not at the next refresh round.
    pub(super) forbidden: BTreeSet<(String, String)>,
    pub(super) forbidden_retry_at: Option<Instant>,
    pub(super) forbidden_backoff: Backoff,
    /// How many daemon-reloads were asked for (tests and benchmarks read it).
    pub reloads: u64,
    /// The probe runner's published results.
    pub probes: crate::prober::runner::Handle,
    /// What events were posted (dedup, aggregation, spam filter).
    pub(super) events: crate::kube::events::Correlator,
    /// The node's image pulls (started by [`super::run`]).
    pub(super) pulls: Option<crate::image::queue::PullQueue>,
    /// Failed hook runs already posted as events.
    pub(super) hooks_seen: crate::kube::hook_events::Seen,
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
        crate::agent::waitrecord::release_all(&cfg.paths);
        // Its presence tells `podunit hook` to leave records for the hooks' events.
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(cfg.paths.host(crate::probe::hook::RECORDS))?;
        }
        let cfg_max_backoff = cfg.timing.max_backoff_seconds.max(1);
        let events = crate::kube::events::Correlator::new(&cfg.node_name);
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
            pulls: None,
            hooks_seen: crate::kube::hook_events::Seen::new(super::context::now().as_second()),
        })
    }

    pub(super) fn api_ok(&self) -> bool {
        self.api_retry_at.is_none_or(|t| Instant::now() >= t)
    }

    /// Notes an API failure: transient ones pause API calls for a backed-off while.
    pub(super) fn api_failed(&mut self, what: &str, e: &ApiError) {
        log(format!("{what}: {e}"));
        if e.is_transient() {
            self.api_retry_at = Some(Instant::now() + self.api_backoff.next_delay());
        }
    }

    pub(super) fn api_worked(&mut self) {
        if self.api_retry_at.take().is_some() {
            self.api_backoff.reset();
        }
    }

    pub(super) fn node_addrs(&self) -> NodeAddrs {
        NodeAddrs {
            ips: self.shared.node_ips.lock().unwrap().clone(),
        }
    }

    pub(super) fn mark_dirty(&mut self, k: &(String, String)) {
        self.respooled.insert(k.clone());
        self.last_dirty = Instant::now();
        self.dirty_since.get_or_insert(self.last_dirty);
    }

    /// Runs until stopped, handling messages from `rx`.
    pub fn run(&mut self, rx: Receiver<Msg>) {
        let tick = Duration::from_millis(self.cfg.timing.reload_debounce_millis.clamp(50, 1000));
        let mut heap = crate::localsync::heap::AfterWork::default();
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
                    heap.worked();
                }
                // A whole tick without a message: whatever the burst was, it is over.
                Err(RecvTimeoutError::Timeout) => heap.quiet(),
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
            Msg::Pulled(d) => self.image_pulled(*d),
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
            self.recheck_images();
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

    pub(super) fn stop_units_of_file(&self, k: &(String, String)) {
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
                    prepare_event_at: 0,
                    validated: None,
                    refs_seen: None,
                    refused: None,
                    images: Default::default(),
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
}
