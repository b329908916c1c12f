//! podunit-sync, local mode: reconcile after every daemon-reload, driven by systemd's signals.
//!
//! One thread owns the D-Bus connection's calls and the state file (this one); helper threads only
//! forward events into its channel (D-Bus signals, SIGTERM, manifest changes), so a termination
//! request is handled between two reconciles, never in the middle of writing the record.

pub mod heap;
pub mod images;
pub mod jobs;
mod ordered;
pub mod reconcile;
pub mod statefile;
pub mod watch;

use crate::common::paths::Paths;
use crate::generate::output::{self, GeneratedPod};
use crate::systemd::{self, Client, Event};
use reconcile::{Action, State};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where podunit-sync reads and writes; every path already carries the `PODUNIT_ROOT` prefix.
#[derive(Debug, Clone)]
pub struct Options {
    pub paths: Paths,
    /// The generator's output (`/run/systemd/generator`).
    pub generator_dir: PathBuf,
    /// The record (`/var/lib/podunit/sync-state.json`).
    pub state_file: PathBuf,
}

impl Options {
    pub fn from_paths(paths: Paths) -> Self {
        Options {
            generator_dir: paths.host(output::GENERATOR_DIR),
            state_file: paths.host(statefile::STATE_FILE),
            paths,
        }
    }
}

#[derive(Debug)]
pub enum Error {
    Systemd(systemd::Error),
    State(statefile::Error),
    Generated(output::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Systemd(e) => e.fmt(f),
            Error::State(e) => e.fmt(f),
            Error::Generated(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// The generator's tree was being rewritten: a reload is under way and the reconcile
    /// after it does the work, so there is nothing to report.
    pub fn is_reload_under_way(&self) -> bool {
        matches!(self, Error::Generated(e) if e.is_reload_under_way())
    }
}

impl From<systemd::Error> for Error {
    fn from(e: systemd::Error) -> Self {
        Error::Systemd(e)
    }
}
impl From<statefile::Error> for Error {
    fn from(e: statefile::Error) -> Self {
        Error::State(e)
    }
}
impl From<output::Error> for Error {
    fn from(e: output::Error) -> Self {
        Error::Generated(e)
    }
}

/// A SIGKILL due when a stop's grace period is over.
struct KillAt {
    at: Instant,
    unit: String,
    /// The stop job: no SIGKILL once it is done.
    job: String,
    /// A second try, after the first SIGKILL failed.
    again: bool,
}

/// How long after a SIGKILL that failed it is tried again.
const KILL_AGAIN: Duration = Duration::from_secs(1);

/// A cleanup unit's start job under way.
struct CleanupJob {
    /// `namespace/name` of the removed pod.
    pod: String,
    unit: String,
}

/// What one reconcile did, for the log and `STATUS=`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub pods: usize,
    pub started: usize,
    pub restarted: usize,
    pub stopped: usize,
    pub reset: usize,
    pub failed: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} pods; started {}, restarted {}, stopped {} units, reset {}",
            self.pods, self.started, self.restarted, self.stopped, self.reset
        )?;
        if self.failed > 0 {
            write!(f, ", {} actions failed", self.failed)?;
        }
        Ok(())
    }
}

/// The kernel's id of this boot: recorded state from another boot is not trusted for restarts.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub struct Syncer {
    pub client: Client,
    pub opts: Options,
    boot_id: String,
    /// Stop jobs still running; once none is left, failed leftovers get reset.
    pending_stops: HashSet<String>,
    /// SIGKILL the unit if its stop job is still running at the deadline.
    kill_at: Vec<KillAt>,
    /// Removed pods whose directories go once no stop job is left.
    pending_cleanups: Vec<(crate::generate::output::PodKey, String)>,
    /// Start jobs of the cleanup units that run, and the pod (`namespace/name`) each is for: its
    /// entry in the record's `removed` goes once the job is done.
    cleanup_jobs: HashMap<String, CleanupJob>,
    /// Slices of removed pods: stopped last, after their pods' cleanup has been queued, so a
    /// removed pod's units are all gone only once its files are.
    pending_slices: Vec<String>,
    /// Pulls of the images pods wait for (none with `--once`).
    pub images: Option<images::ImagePulls>,
    /// When to reconcile again because a pod unit failed to start (`pod-prepare` failed: its
    /// network or a ConfigMap not there yet). The kubelet's pod worker tries a failed sync again
    /// 10 s later; a reconcile starts failed pod units.
    retry_at: Option<Instant>,
    /// The CNI cache to sweep once no stop job is left (asked for once, at the start).
    sweep_at_rest: Option<std::path::PathBuf>,
    /// When the Jobs' pods are to be looked at again ([`jobs`]).
    jobs_at: Option<Instant>,
}

/// How long after a pod's failed start it is tried again (the kubelet's `backOffPeriod`).
pub const POD_RETRY: Duration = Duration::from_secs(10);

/// Whether `unit` is a pod unit (not a container's, not a slice).
fn is_pod_unit(unit: &str) -> bool {
    use crate::translate::naming::Parsed;
    unit.ends_with(".service")
        && match crate::translate::naming::parse(unit) {
            Some(Parsed::Exact(id)) => id.container.is_none(),
            Some(Parsed::Shortened { container, .. }) => container.is_none(),
            None => false,
        }
}

impl Syncer {
    pub fn new(client: Client, opts: Options) -> Self {
        Syncer {
            client,
            opts,
            boot_id: boot_id(),
            pending_stops: HashSet::new(),
            kill_at: Vec::new(),
            pending_cleanups: Vec::new(),
            cleanup_jobs: HashMap::new(),
            pending_slices: Vec::new(),
            images: None,
            retry_at: None,
            sweep_at_rest: None,
            jobs_at: None,
        }
    }

    fn desired(&self) -> Result<Vec<GeneratedPod>, Error> {
        Ok(output::scan(&self.opts.generator_dir)?)
    }

    /// Loaded `podunit-*` units. Pod units the generator did not render this time get their
    /// `FragmentPath` looked up: a slice stays `loaded` without its file, and only a unit
    /// without a file is ours to stop (a hand-written unit of the same name is not).
    fn actual(
        &self,
        desired: &[GeneratedPod],
    ) -> Result<Vec<crate::systemd::unit::ListedUnit>, Error> {
        let rendered: HashSet<String> = desired.iter().flat_map(|p| p.units()).collect();
        let mut units = self.client.list_units(systemd::UNIT_PATTERN)?;
        let mut gone = HashSet::new();
        for u in &mut units {
            if u.load_state == "loaded"
                && !rendered.contains(&u.name)
                && crate::translate::naming::parse(&u.name).is_some()
            {
                match self.client.fragment_path(&u.name) {
                    Ok(f) => u.fragment_path = Some(f),
                    // Collected since it was listed: nothing left to do for it.
                    Err(e) if e.is_no_such_unit() => {
                        gone.insert(u.name.clone());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        units.retain(|u| !gone.contains(&u.name));
        Ok(units)
    }

    /// Reconciles once: queues the jobs, persists the record, then runs the Jobs' controllers
    /// over the same rendered pods. Per-unit failures are logged
    /// and leave that pod's record as it was, so the next reload retries it.
    pub fn reconcile(&mut self) -> Result<Summary, Error> {
        let desired = self.desired()?;
        let actual = self.actual(&desired)?;
        let recorded = statefile::load(&self.opts.state_file)?;
        let plan = reconcile::plan(&desired, &recorded, &actual, &self.boot_id);
        let mut next = plan.next;
        let mut sum = Summary {
            pods: desired.len(),
            ..Default::default()
        };
        // The plan lists every cleanup still due, including those queued before.
        self.pending_cleanups.clear();
        for action in &plan.actions {
            let result = match action {
                Action::Start { pod, unit } => {
                    log(&format!("starting pod {pod} ({unit})"));
                    self.count_restarts_from_zero(&desired, pod);
                    self.client.start(unit).map(|_| sum.started += 1)
                }
                Action::Restart { pod, unit } => {
                    log(&format!("restarting pod {pod}: its units changed ({unit})"));
                    self.count_restarts_from_zero(&desired, pod);
                    self.client.restart(unit).map(|_| sum.restarted += 1)
                }
                Action::Stop { unit, .. } if unit.ends_with(".slice") => {
                    self.pending_slices.push(unit.clone());
                    Ok(())
                }
                Action::Stop {
                    unit,
                    grace,
                    stopping,
                } => {
                    log(&format!("stopping {unit}: its pod is gone"));
                    // Asked before the stop, so that a stop under way counts from its start.
                    let at = grace.map(|g| self.grace_deadline(unit, g, *stopping));
                    match self.client.stop(unit) {
                        Ok(job) => {
                            let job = job.as_str().to_string();
                            // A stop already under way answers with its job: one deadline per job.
                            if let Some(at) = at
                                && !self.kill_at.iter().any(|k| k.job == job)
                            {
                                self.kill_at.push(KillAt {
                                    at,
                                    unit: unit.clone(),
                                    job: job.clone(),
                                    again: false,
                                });
                            }
                            self.pending_stops.insert(job);
                            sum.stopped += 1;
                            Ok(())
                        }
                        // Stopped and collected since it was listed.
                        Err(e) if e.is_no_such_unit() => Ok(()),
                        Err(e) => Err(e),
                    }
                }
                Action::ResetFailed { unit } => {
                    log(&format!("resetting failed {unit}: its pod is gone"));
                    match self.client.reset_failed(unit) {
                        Ok(()) => {
                            sum.reset += 1;
                            Ok(())
                        }
                        Err(e) if e.is_no_such_unit() => Ok(()),
                        Err(e) => Err(e),
                    }
                }
                Action::Cleanup { pod, uid } => {
                    // One that runs already reports back through its job.
                    let key = pod.to_string();
                    if !self.cleanup_jobs.values().any(|j| j.pod == key) {
                        self.pending_cleanups.push((pod.clone(), uid.clone()));
                    }
                    Ok(())
                }
            };
            if let Err(e) = result {
                let replaced = e.is_no_such_unit()
                    && matches!(action, Action::Start { .. } | Action::Restart { .. });
                if replaced {
                    // The generator's files are newer than what systemd has loaded: a reload is
                    // under way, and the reconcile after it sees the pod as systemd will.
                    if let Action::Start { pod, unit } | Action::Restart { pod, unit } = action {
                        log(&format!(
                            "pod {pod}: {unit} awaits the daemon-reload under way; the \
                             reconcile after it takes the pod up"
                        ));
                    }
                } else {
                    sum.failed += 1;
                    log(&format!("{e}"));
                }
                if let Action::Start { pod, .. } | Action::Restart { pod, .. } = action {
                    let key = pod.to_string();
                    match recorded.pods.get(&key) {
                        Some(old) => next.pods.insert(key, old.clone()),
                        None => next.pods.remove(&key),
                    };
                }
            }
        }
        statefile::save(&self.opts.state_file, &next)?;
        if self.pending_stops.is_empty() {
            self.after_stops();
        }
        // The Jobs' controllers look at the pods just read, as they now are.
        if let Err(e) = self.run_jobs_of(&desired)
            && !e.is_reload_under_way()
        {
            log(&format!("jobs: {e}"));
        }
        Ok(sum)
    }

    /// A static pod (re)started for its manifest is a new pod to Kubernetes (the kubelet's UID
    /// of a static pod is its manifest's hash), whose containers count restarts from 0. systemd
    /// keeps `NRestarts=` when a stop finds a unit waiting in `auto-restart` (it forgets it only
    /// when a run ends with no restart to follow), so a crash-looping pod would carry its count
    /// into its new manifest: `ResetFailedUnit` clears it first. Not for API pods (an updated
    /// API pod is the same pod), nor for a pod rendered again because its `Always` image tag
    /// moved: there the kubelet restarts the same container and its count goes on.
    fn count_restarts_from_zero(&mut self, desired: &[GeneratedPod], key: &output::PodKey) {
        let Some(pod) = desired.iter().find(|p| p.key == *key) else {
            return;
        };
        let is_static = pod
            .source_path
            .as_deref()
            .and_then(|s| crate::status::pod::source_of(s, &self.opts.paths))
            .is_some_and(|s| s.is_static());
        let units: Vec<String> = pod.containers.iter().map(|c| c.unit.clone()).collect();
        let image_moved = self.images.as_mut().is_some_and(|i| i.take_moved(&units));
        if !is_static || image_moved {
            return;
        }
        for unit in &units {
            match self.client.reset_failed(unit) {
                Ok(()) => {}
                Err(e) if e.is_no_such_unit() => {}
                Err(e) => log(&format!("{e}")),
            }
        }
    }

    /// Every stop job has ended: clean up the removed pods, then stop their slices.
    fn after_stops(&mut self) {
        self.cleanup_removed();
        if let Some(dir) = self.sweep_at_rest.take() {
            self.sweep_networks(&dir);
        }
        for unit in std::mem::take(&mut self.pending_slices) {
            log(&format!("stopping {unit}: its pod is gone"));
            match self.client.stop(&unit) {
                Ok(job) => {
                    self.pending_stops.insert(job.as_str().to_string());
                }
                Err(e) => log(&format!("{e}")),
            }
        }
    }

    /// When the grace period of `unit`'s stop ends: `grace` seconds from now, or, for a stop
    /// already under way (podunit-sync restarted during it), from when systemd began it.
    fn grace_deadline(&self, unit: &str, grace: u64, stopping: bool) -> Instant {
        let now = Instant::now();
        let full = now + Duration::from_secs(grace);
        if !stopping {
            return full;
        }
        let began = match self.client.stop_began_monotonic_us(unit) {
            Ok(Some(us)) => us,
            Ok(None) | Err(_) => return full,
        };
        let Ok(mono) = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) else {
            return full;
        };
        let now_us = mono.tv_sec() as u64 * 1_000_000 + mono.tv_nsec() as u64 / 1_000;
        let elapsed = Duration::from_micros(now_us.saturating_sub(began));
        now + Duration::from_secs(grace).saturating_sub(elapsed)
    }

    /// A cleanup unit's job ended: on success the pod's directories are gone, and so is its
    /// entry in the record; otherwise the next reconcile (or restart) tries again.
    fn cleanup_done(&mut self, done: &CleanupJob, result: &str) {
        let key = &done.pod;
        if result != "done" {
            log(&format!(
                "pod {key}: removing its directories ended with {result:?} (journalctl -u {}); \
                 retried at the next reconcile",
                done.unit
            ));
            return;
        }
        let forget = || -> Result<(), statefile::Error> {
            let mut s = statefile::load(&self.opts.state_file)?;
            if s.removed.remove(key).is_some() {
                statefile::save(&self.opts.state_file, &s)?;
            }
            Ok(())
        };
        if let Err(e) = forget() {
            log(&format!(
                "pod {key}: {e}; its cleanup runs again at the next reconcile"
            ));
        }
    }

    /// Removes the state and runtime directories of removed pods (secrets included). Run as a
    /// transient unit: podunit-sync's own sandbox keeps /run read-only. Its name is not a pod
    /// unit's (`podunit-cleanup-<uid>.service`), so no reconcile takes it for one.
    fn cleanup_removed(&mut self) {
        for (pod, uid) in std::mem::take(&mut self.pending_cleanups) {
            if uid.is_empty() || uid.contains('/') || uid.starts_with('.') {
                log(&format!("pod {pod}: refusing to clean up odd uid {uid:?}"));
                continue;
            }
            let dirs = [
                format!("{}/{uid}", Paths::RUNTIME),
                format!("{}/{uid}", Paths::STATE),
                format!("{}/{uid}.json", crate::status::waiting::DIR),
            ];
            // The pod's network attachment goes first (its unit stopped without its commands).
            let bin = crate::generate::podunit_bin(&self.opts.paths);
            let mut argv: Vec<String> = vec![bin, "pod-forget".into(), uid.clone(), "--".into()];
            argv.extend(
                dirs.iter()
                    .map(|d| self.opts.paths.host(d).to_string_lossy().into_owned()),
            );
            let name = format!("podunit-cleanup-{uid}.service");
            match self
                .client
                .run_transient(&name, &format!("Clean up removed pod {pod}"), &argv)
            {
                Ok(job) => {
                    log(&format!("pod {pod} removed: deleting {}", dirs.join(" ")));
                    let unit = name.clone();
                    let pod = pod.to_string();
                    self.cleanup_jobs
                        .insert(job.as_str().to_string(), CleanupJob { pod, unit });
                }
                // One from before (a restart of podunit-sync) still runs; the next reconcile
                // sees whether it left anything to do.
                Err(e) if e.is_unit_exists() => {}
                Err(e) => log(&format!("{e}")),
            }
        }
    }

    /// Asks for a sweep of the CNI attachments in `cache_dir` once no stop job is left (the
    /// units of pods nobody knows any more are stopped by then, so their namespaces are empty).
    pub fn sweep_networks_at_rest(&mut self, cache_dir: std::path::PathBuf) {
        self.sweep_at_rest = Some(cache_dir);
        if self.pending_stops.is_empty() {
            self.after_stops();
        }
    }

    /// Starts `podunit cni-sweep` (a transient unit: podunit-sync's sandbox cannot run plugins)
    /// for the CNI attachments in `cache_dir`, naming every pod that may own one: the rendered
    /// pods and the recorded ones, whose cleanup detaches them. Nothing cached, nothing to run.
    fn sweep_networks(&mut self, cache_dir: &std::path::Path) {
        let cached = crate::cni::cache::Cache::new(cache_dir)
            .entries()
            .map(|e| !e.is_empty())
            .unwrap_or(true);
        if !cached {
            return;
        }
        let mut live: std::collections::BTreeSet<String> = match self.desired() {
            Ok(pods) => pods.into_iter().filter_map(|p| p.uid).collect(),
            Err(e) => {
                log(&format!("CNI sweep skipped: {e}"));
                return;
            }
        };
        match statefile::load(&self.opts.state_file) {
            Ok(s) => live.extend(
                s.pods
                    .values()
                    .chain(s.removed.values())
                    .filter_map(|r| r.uid.clone()),
            ),
            Err(e) => {
                log(&format!("CNI sweep skipped: {e}"));
                return;
            }
        }
        let bin = crate::generate::podunit_bin(&self.opts.paths);
        let mut argv: Vec<String> = vec![bin, "cni-sweep".into(), "--".into()];
        argv.extend(live);
        let name = "podunit-cni-sweep.service";
        match self.client.run_transient(
            name,
            "Delete the network attachments of pods that are gone",
            &argv,
        ) {
            Ok(_) => log(&format!("checking the CNI attachments ({name})")),
            Err(e) if e.is_unit_exists() => {}
            Err(e) => log(&format!("{e}")),
        }
    }

    /// When the next grace period ends, if any stop is still running.
    pub fn next_deadline(&self) -> Option<Instant> {
        let pulls = self.images.as_ref().and_then(|i| i.next_deadline());
        self.kill_at
            .iter()
            .map(|k| k.at)
            .chain(pulls)
            .chain(self.retry_at)
            .chain(self.jobs_at)
            .min()
    }

    /// A unit's start job ended with `result`: a pod unit that failed is tried again after
    /// [`POD_RETRY`] (one reconcile for every pod that failed meanwhile).
    pub fn start_done(&mut self, unit: &str, result: &str) {
        if result == "failed" && is_pod_unit(unit) && self.retry_at.is_none() {
            self.retry_at = Some(Instant::now() + POD_RETRY);
        }
    }

    /// Whether the retry of failed pods is due; it is then taken.
    pub fn retry_due(&mut self, now: Instant) -> bool {
        if self.retry_at.is_some_and(|at| at <= now) {
            self.retry_at = None;
            return true;
        }
        false
    }

    /// After a reconcile: the pods the generator left waiting for images, and their pulls.
    pub fn pull_waiting_images(&mut self) {
        let Some(images) = self.images.as_mut() else {
            return;
        };
        match crate::generate::report::read(&self.opts.generator_dir) {
            Ok(r) => images.set_waiting(r.map(|r| r.waiting).unwrap_or_default()),
            Err(e) => warn(&format!("the generator's report: {e}")),
        }
        match output::scan(&self.opts.generator_dir) {
            Ok(pods) => {
                let spool = self.opts.paths.host(Paths::SPOOL);
                let dir = &self.opts.generator_dir;
                images.set_running(images::running_images(dir, &pods, &spool))
            }
            Err(e) if e.is_reload_under_way() => {}
            Err(e) => warn(&format!("{e}")),
        }
        images.pass();
    }

    /// A job of `unit` ended: if it was an attempt to start an `Always` container (a start, a
    /// restart, one that ran its process or one that could not), its image is asked for again,
    /// as the kubelet does before every container start ([`crate::image::policy::start_attempted`]).
    pub fn job_of_unit_done(&mut self, unit: &str, result: &str) {
        let Some(images) = self.images.as_mut() else {
            return;
        };
        if !images.pulls_at_start(unit) {
            return;
        }
        match self.client.unit_state(unit) {
            Ok(u) if crate::image::policy::start_attempted(result, &u.active_state) => {
                images.container_started(unit)
            }
            Ok(_) => {}
            Err(e) => log(&format!("{unit}: {e}")),
        }
    }

    /// SIGKILLs every unit whose grace period is over and whose stop job still runs: systemd
    /// forgot the unit's TimeoutStopSec= with its file, so the kubelet's rule is applied here.
    pub fn enforce_grace(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.kill_at)
            .into_iter()
            .partition(|k| k.at <= now);
        self.kill_at = later;
        for k in due {
            if !self.pending_stops.contains(&k.job) {
                continue;
            }
            if !k.again {
                log(&format!("{}: grace period over, SIGKILL", k.unit));
            }
            let Err(e) = self.client.kill(&k.unit, 9) else {
                continue;
            };
            // systemd 252 answers EIO when the unit's cgroup is emptying as it is signalled:
            // moot once the unit is down; otherwise said, and tried once more.
            let down = self
                .client
                .unit_state(&k.unit)
                .is_ok_and(|u| u.active_state != "deactivating");
            if down || e.is_no_such_unit() {
                continue;
            }
            if k.again {
                log(&format!("{e}"));
            } else {
                self.kill_at.push(KillAt {
                    at: now + KILL_AGAIN,
                    again: true,
                    ..k
                });
            }
        }
    }

    /// A job ended. When it was the last of our stop jobs, reset what failed while stopping.
    pub fn job_removed(&mut self, job: &str, result: &str) -> Result<(), Error> {
        if let Some(done) = self.cleanup_jobs.remove(job) {
            self.cleanup_done(&done, result);
            return Ok(());
        }
        self.kill_at.retain(|k| k.job != job);
        if !self.pending_stops.remove(job) || !self.pending_stops.is_empty() {
            return Ok(());
        }
        self.after_stops();
        if !self.pending_stops.is_empty() {
            return Ok(()); // slices stopping now; reset once they are done
        }
        self.reset_leftovers()
    }

    /// Resets every failed unit whose pod is gone, so `systemctl --failed` stays clean.
    pub fn reset_leftovers(&mut self) -> Result<(), Error> {
        let desired = self.desired()?;
        for unit in reconcile::leftovers(&self.actual(&desired)?, &desired) {
            log(&format!("resetting failed {unit}: its pod is gone"));
            if let Err(e) = self.client.reset_failed(&unit) {
                log(&format!("{e}"));
            }
        }
        Ok(())
    }

    /// The spool manifests the generator did not render, unless this boot already reloaded for
    /// exactly this spool content. Returns the fingerprint to record after reloading.
    pub fn spool_needs_reload(&self) -> Result<Option<(Vec<String>, String)>, Error> {
        let spool = self.opts.paths.spool();
        let files = crate::manifest::discover::list_dir(&spool)
            .map_err(|e| Error::State(statefile::Error::Io(spool.clone(), e)))?;
        let host: Vec<String> = files
            .iter()
            .filter_map(|f| f.file_name())
            .map(|n| {
                format!(
                    "{}/{}",
                    crate::common::paths::Paths::SPOOL,
                    n.to_string_lossy()
                )
            })
            .collect();
        let unseen = reconcile::unseen_spool(&host, &self.desired()?);
        if unseen.is_empty() {
            return Ok(None);
        }
        let fingerprint = format!("{} {}", self.boot_id, host.join(" "));
        let recorded = statefile::load(&self.opts.state_file)?;
        if recorded.spool_reloaded_for == fingerprint {
            return Ok(None);
        }
        Ok(Some((unseen, fingerprint)))
    }

    /// Remembers that this spool content was reloaded for.
    pub fn record_spool_reload(&self, fingerprint: String) -> Result<(), Error> {
        let mut s: State = statefile::load(&self.opts.state_file)?;
        s.spool_reloaded_for = fingerprint;
        Ok(statefile::save(&self.opts.state_file, &s)?)
    }
}

/// What the main loop is told by its helper threads.
#[derive(Debug)]
pub enum Msg {
    Bus(Result<Event, systemd::Error>),
    /// The signal stream ended (bus connection lost).
    BusClosed,
    Terminate(i32),
    /// Manifest files changed (the optional /etc/pods.d watch), debounced and validated.
    ManifestsChanged,
    /// An image pull ended: the digest, or the registry's message.
    Pulled {
        /// The pull queue's key (`<pod uid>_<image>`).
        key: String,
        image: String,
        result: Result<String, String>,
    },
    /// Pods whose start failed are due to be tried again (the loop's own timer).
    Retry,
}

/// Logs one line to stderr, which systemd sends to the journal.
/// One journal line per message, whatever names it holds (see [`crate::common::diag::one_line`]).
pub fn log(msg: &str) {
    eprintln!("podunit-sync: {}", crate::common::diag::one_line(msg));
}

/// Logs at warning level (syslog priority 4): stderr lines that start with `<4>` are read so
/// by journald (SyslogLevelPrefix=), which says it is there with `$JOURNAL_STREAM`.
pub fn warn(msg: &str) {
    let prefix = if std::env::var_os("JOURNAL_STREAM").is_some() {
        "<4>"
    } else {
        ""
    };
    eprintln!(
        "{prefix}podunit-sync: {}",
        crate::generate::report::one_line(msg)
    );
}

/// Says what the generator refused in its last run (its report in `generator_dir`), once per
/// reload: at boot it ran before journald, and a reload prints nothing on its own.
pub fn log_refused(generator_dir: &std::path::Path) {
    match crate::generate::report::read(generator_dir) {
        Ok(None) => {}
        Ok(Some(r)) => {
            if let Some(c) = &r.config {
                warn(&format!("node configuration: {c}"));
            }
            for p in &r.problems {
                let what = if p.is_error() {
                    "refused"
                } else if p.is_note() {
                    "waiting"
                } else {
                    "accepted"
                };
                warn(&format!("manifest {what}: {p}"));
            }
        }
        Err(e) => warn(&format!("the generator's report: {e}")),
    }
}

/// Runs the main loop until terminated. Called with `events` subscribed *before* the first
/// reconcile, so a reload in between is never missed.
pub fn run(syncer: &mut Syncer, rx: mpsc::Receiver<Msg>) -> Result<i32, Error> {
    loop {
        let msg = match syncer.next_deadline() {
            None => match rx.recv() {
                Ok(m) => m,
                Err(_) => return Ok(0),
            },
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(m) => m,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    syncer.enforce_grace();
                    if let Some(images) = syncer.images.as_mut() {
                        images.pass();
                    }
                    if syncer.jobs_due(Instant::now())
                        && let Err(e) = syncer.run_jobs()
                        && !e.is_reload_under_way()
                    {
                        log(&format!("jobs: {e}"));
                    }
                    if !syncer.retry_due(Instant::now()) {
                        continue;
                    }
                    Msg::Retry
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(0),
            },
        };
        let mut reconcile = false;
        let mut reloaded = false;
        let mut reload_now = false;
        let mut run_jobs = false;
        let mut handle = |msg: Msg, syncer: &mut Syncer| -> Result<Option<i32>, Error> {
            match msg {
                Msg::Bus(Ok(Event::Reloading(false))) => {
                    reconcile = true;
                    reloaded = true;
                }
                Msg::Retry => reconcile = true,
                Msg::Bus(Ok(Event::JobRemoved {
                    job, unit, result, ..
                })) => {
                    // The reconcile after the reload under way resets what is left.
                    match syncer.job_removed(&job, &result) {
                        Err(e) if !e.is_reload_under_way() => log(&format!("{e}")),
                        _ => {}
                    }
                    syncer.job_of_unit_done(&unit, &result);
                    syncer.start_done(&unit, &result);
                    // A CronJob's timer fired.
                    run_jobs |= jobs::is_cron_target(&unit);
                }
                Msg::Bus(Ok(_)) => {}
                Msg::Bus(Err(e)) => log(&format!("{e}")),
                Msg::BusClosed => {
                    log(
                        "lost the connection to systemd; exiting so the service manager restarts me",
                    );
                    return Ok(Some(1));
                }
                Msg::Terminate(sig) => {
                    log(&format!("signal {sig}: exiting; pods keep running"));
                    return Ok(Some(0));
                }
                Msg::ManifestsChanged => reload_now = true,
                Msg::Pulled { key, image, result } => {
                    if let Some(images) = syncer.images.as_mut() {
                        if images.pulled(&key, &image, result) {
                            log("an image pods wait for is pulled: daemon-reload");
                            if let Err(e) = syncer.client.reload() {
                                log(&format!("{e}"));
                            }
                        } else {
                            images.pass();
                        }
                    }
                }
            }
            Ok(None)
        };
        if let Some(code) = handle(msg, syncer)? {
            return Ok(code);
        }
        // Coalesce a burst (several reloads, many job signals) into one reconcile.
        while let Ok(more) = rx.try_recv() {
            if let Some(code) = handle(more, syncer)? {
                return Ok(code);
            }
        }
        if reload_now {
            log("manifests changed: daemon-reload");
            if let Err(e) = syncer.client.reload() {
                log(&format!("{e}"));
            }
        }
        if run_jobs
            && !reconcile
            && let Err(e) = syncer.run_jobs()
            && !e.is_reload_under_way()
        {
            log(&format!("jobs: {e}"));
        }
        if reconcile {
            if reloaded {
                log_refused(&syncer.opts.generator_dir);
            }
            let _ = systemd::notify::notify("STATUS=Reconciling after daemon-reload");
            match syncer.reconcile() {
                Ok(sum) => {
                    log(&format!("reconciled: {sum}"));
                    let _ = systemd::notify::notify(&format!("STATUS=Reconciled: {sum}"));
                    syncer.pull_waiting_images();
                }
                // Another reload began: the reconcile after it reads the whole tree.
                Err(e) if e.is_reload_under_way() => {}
                Err(e) => {
                    log(&format!("reconcile failed: {e}"));
                    let _ = systemd::notify::notify(&format!("STATUS=Reconcile failed: {e}"));
                }
            }
            // The next reload reads unchanged YAML files from the cache.
            if let Some(m) = crate::manifest::cache::refresh_message(&syncer.opts.paths) {
                log(&m);
            }
            // A reconcile is this loop's burst: what it read and built is garbage now.
            heap::release_free();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_pod_unit;
    use crate::translate::naming;

    #[test]
    fn only_pod_units_are_retried() {
        assert!(is_pod_unit(&naming::pod_service("default", "web")));
        let long = "p".repeat(200);
        assert!(is_pod_unit(&naming::pod_service("default", &long)));
        assert!(!is_pod_unit(&naming::container_service(
            "default", "web", "main"
        )));
        assert!(!is_pod_unit(&naming::container_service(
            "default", &long, "main"
        )));
        assert!(!is_pod_unit(&naming::pod_slice("default", "web")));
        assert!(!is_pod_unit("podunit-sync.service"));
        assert!(!is_pod_unit("nginx.service"));
    }
}
