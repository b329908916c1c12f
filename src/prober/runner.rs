//! The probe runner of podunit-sync (local and cluster mode alike): one thread that knows every
//! probed container and when its probes are due, starts each due probe on a short-lived thread
//! of its own (at most one at a time per probe, as the kubelet's workers do), counts results with
//! [`crate::probe::state`], kills containers whose liveness or startup probe failed (their preStop hook
//! first, [`super::pre_stop`], timed by [`crate::probe::kill`]), and publishes `ready`/`started`
//! ([`crate::status::probes`]).
//!
//! It learns what runs from systemd's signals (a unit's properties changed: look it up again)
//! and what is probed from the plans the generator wrote (after every daemon-reload).

use super::pre_stop::{self, Failed};
use crate::common::paths::Paths;
use crate::generate::output::{self, PodKey};
use crate::probe::kill;
use crate::probe::spec::{ContainerProbes, Kind, Probe};
use crate::probe::state::{Container, Millis, Outcome, Step};
use crate::status::probes::{ContainerResult, RESULTS_FILE, Results};
use crate::systemd::{Client, Event};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where the runner's findings go besides the journal: in cluster mode, the node agent (events
/// posted to the API server, status re-posted).
pub trait Sink: Send + 'static {
    /// An event about a container: type, the kubelet's reason, message.
    fn event(&self, pod: &PodKey, container: &str, kind: &'static str, reason: &str, message: &str);
    /// A container's `ready` or `started` changed.
    fn changed(&self, pod: &PodKey);
}

/// Local mode: the journal lines are all there is.
pub struct JournalOnly;

impl Sink for JournalOnly {
    fn event(&self, _: &PodKey, _: &str, _: &'static str, _: &str, _: &str) {}
    fn changed(&self, _: &PodKey) {}
}

/// What other threads read: the published results.
#[derive(Clone, Default)]
pub struct Handle {
    pub results: Arc<RwLock<Results>>,
}

enum Msg {
    Rescan,
    Unit(String),
    Done {
        unit: String,
        run: u64,
        kind: Kind,
        outcome: Outcome,
    },
    PreStopDone {
        unit: String,
        run: u64,
        result: Result<Option<String>, Failed>,
    },
    Closed,
}

/// Where a liveness or startup kill of a run is. Its probes are held meanwhile.
enum Stop {
    /// The preStop hook runs since `since`; SIGTERM when it ends, or at `until` (the end of the
    /// grace period) if it is still running then.
    Hook {
        since: Instant,
        until: Instant,
        grace_s: u64,
    },
    /// SIGTERM sent: SIGKILL at `kill_at` if the same run still lives.
    Term { kill_at: Instant },
    /// SIGKILL sent.
    Killed,
}

struct Run {
    started_us: u64,
    main_pid: u32,
    /// Where probes and hooks with no `host` connect: the address CNI gave the pod when it
    /// started (`network: cni`), else the node's.
    pod_ip: String,
    probing: Container,
    stop: Option<Stop>,
}

struct Tracked {
    pod: PodKey,
    /// The pod's uid, for the kubelet's messages.
    uid: String,
    container: String,
    probes: ContainerProbes,
    /// The pod's grace period (`TimeoutStopSec=`).
    pod_grace_s: Option<u64>,
    /// `Restart=` of the unit: whether a killed container comes back.
    restart: String,
    run: Option<Run>,
}

struct Runner {
    client: Arc<Client>,
    podunit: String,
    /// The node's address: pods on the host network have it.
    pod_ip: String,
    paths: Paths,
    generator_dir: PathBuf,
    results_path: PathBuf,
    sink: Box<dyn Sink>,
    handle: Handle,
    tx: Sender<Msg>,
    epoch: Instant,
    units: HashMap<String, Tracked>,
    in_flight: HashSet<(String, Kind)>,
}

fn log(msg: &str) {
    eprintln!("podunit-sync: {msg}");
}

fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The CLI binary next to this one (`/usr/bin/podunit` beside `/usr/bin/podunit-sync`).
fn podunit_bin() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("podunit")))
        .filter(|p| p.exists())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| Paths::PODUNIT_BIN.into())
}

/// Starts the runner on threads of its own. Failing to reach systemd only costs the probes.
pub fn spawn(paths: &Paths, sink: Box<dyn Sink>) -> Handle {
    let handle = Handle::default();
    let h = handle.clone();
    let generator_dir = paths.host(output::GENERATOR_DIR);
    let results_path = paths.host(RESULTS_FILE);
    let paths = paths.clone();
    std::thread::spawn(move || {
        let client = match Client::system() {
            Ok(c) => Arc::new(c),
            Err(e) => return log(&format!("probes not run: {e}")),
        };
        let events = match client.events(true) {
            Ok(ev) => ev,
            Err(e) => return log(&format!("probes not run: {e}")),
        };
        let (tx, rx) = mpsc::channel();
        let etx = tx.clone();
        std::thread::spawn(move || {
            for ev in events {
                let m = match ev {
                    Ok(Event::Reloading(false)) => Msg::Rescan,
                    Ok(Event::UnitChanged { unit }) => Msg::Unit(unit),
                    _ => continue,
                };
                if etx.send(m).is_err() {
                    return;
                }
            }
            let _ = etx.send(Msg::Closed);
        });
        let mut r = Runner {
            client,
            podunit: podunit_bin(),
            pod_ip: crate::podstart::prepare::node_ip(),
            paths,
            generator_dir,
            results_path,
            sink,
            handle: h,
            tx,
            epoch: Instant::now(),
            units: HashMap::new(),
            in_flight: HashSet::new(),
        };
        r.rescan();
        r.run(rx);
    });
    handle
}

impl Runner {
    fn now(&self) -> Millis {
        self.epoch.elapsed().as_millis() as Millis
    }

    fn run(&mut self, rx: Receiver<Msg>) {
        loop {
            let wait = self
                .next_wake()
                .map(|at| at.saturating_duration_since(Instant::now()));
            let msg = match wait {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => rx.recv_timeout(d),
            };
            match msg {
                Ok(Msg::Rescan) => self.rescan(),
                Ok(Msg::Unit(u)) => {
                    if self.units.contains_key(&u) {
                        self.refresh(&u);
                    }
                }
                Ok(Msg::Done {
                    unit,
                    run,
                    kind,
                    outcome,
                }) => self.done(unit, run, kind, outcome),
                Ok(Msg::PreStopDone { unit, run, result }) => self.pre_stop_done(unit, run, result),
                Ok(Msg::Closed) => {
                    return log("probes stopped: lost the connection to systemd");
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            self.start_due();
            self.enforce_kills();
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let now = self.now();
        let probes = self
            .units
            .values()
            .filter_map(|t| t.run.as_ref()?.probing.next_due())
            .min()
            .map(|due| Instant::now() + Duration::from_millis(due.saturating_sub(now)));
        let kills = self
            .units
            .values()
            .filter_map(|t| match t.run.as_ref()?.stop.as_ref()? {
                Stop::Hook { until, .. } => Some(*until),
                Stop::Term { kill_at } => Some(*kill_at),
                Stop::Killed => None,
            })
            .min();
        probes.into_iter().chain(kills).min()
    }

    /// Reads which containers have probes from the generator's plans.
    fn rescan(&mut self) {
        let pods = match output::scan(&self.generator_dir) {
            Ok(p) => p,
            // Probes keep running as they are; the reload's end rescans.
            Err(e) if e.is_reload_under_way() => return,
            Err(e) => return log(&format!("probes: {e}")),
        };
        let mut next: HashMap<String, Tracked> = HashMap::new();
        for pod in &pods {
            let Some(pod_unit) = &pod.pod_unit else {
                continue;
            };
            for probes in crate::status::probes::plan_probes(&self.generator_dir, pod_unit) {
                let Some(c) = pod.containers.iter().find(|c| c.name == probes.container) else {
                    continue;
                };
                let kept = self
                    .units
                    .remove(&c.unit)
                    .filter(|t| t.probes == probes && t.pod == pod.key);
                let t = kept.unwrap_or_else(|| Tracked {
                    pod: pod.key.clone(),
                    uid: pod.uid.clone().unwrap_or_default(),
                    container: c.name.clone(),
                    probes,
                    pod_grace_s: c.stop_timeout_s,
                    restart: c.restart.clone(),
                    run: None,
                });
                next.insert(c.unit.clone(), t);
            }
        }
        let gone: Vec<String> = self.units.keys().cloned().collect();
        self.units = next;
        let units: Vec<String> = self.units.keys().cloned().collect();
        for u in &units {
            self.refresh(u);
        }
        if !gone.is_empty() {
            self.publish(&gone);
        }
    }

    /// Looks a unit up again: a new run of its container starts its probes afresh.
    fn refresh(&mut self, unit: &str) {
        let st = match self.client.unit_state(unit) {
            Ok(s) => s,
            Err(e) => return log(&format!("probes: {e}")),
        };
        let now = self.now();
        let Some(t) = self.units.get_mut(unit) else {
            return;
        };
        let running = st.active_state == "active" && st.sub_state == "running" && st.main_pid != 0;
        let same = t
            .run
            .as_ref()
            .is_some_and(|r| r.started_us == st.exec_main_start_us && r.main_pid == st.main_pid);
        if running && !same {
            let age_ms = wall_us().saturating_sub(st.exec_main_start_us) / 1000;
            let started = now.saturating_sub(age_ms);
            // Spread the first probes of containers found already running over a period.
            let jitter = u64::from(st.exec_main_start_us.wrapping_mul(2654435761) as u32);
            let runtime_dir = crate::common::text::concat(&[Paths::RUNTIME, "/", &t.uid]);
            let pod_ip = crate::podstart::network::recorded_ips(&self.paths, &runtime_dir)
                .and_then(|ips| ips.into_iter().next())
                .unwrap_or_else(|| self.pod_ip.clone());
            t.run = Some(Run {
                started_us: st.exec_main_start_us,
                main_pid: st.main_pid,
                pod_ip,
                probing: Container::new(&t.probes, started, now, jitter),
                stop: None,
            });
        } else if !running && t.run.is_some() {
            t.run = None;
        } else {
            return;
        }
        self.publish(&[unit.to_string()]);
    }

    /// Updates the shared results and the file for `units`, and tells the sink.
    fn publish(&mut self, units: &[String]) {
        let mut changed_pods = Vec::new();
        {
            let mut res = self
                .handle
                .results
                .write()
                .unwrap_or_else(|e| e.into_inner());
            for u in units {
                let new = self.units.get(u).and_then(|t| {
                    let r = t.run.as_ref()?;
                    Some(ContainerResult {
                        run_started_us: r.started_us,
                        started: r.probing.started(),
                        ready: r.probing.ready(),
                    })
                });
                let old = match &new {
                    Some(n) => res.containers.insert(u.clone(), n.clone()),
                    None => res.containers.remove(u),
                };
                if old != new
                    && let Some(t) = self.units.get(u)
                {
                    changed_pods.push(t.pod.clone());
                }
            }
            if let Err(e) = res.save(&self.results_path) {
                log(&format!("probes: {e}"));
            }
        }
        changed_pods.dedup();
        for p in changed_pods {
            self.sink.changed(&p);
        }
    }

    fn start_due(&mut self) {
        let now = self.now();
        let mut due: Vec<(String, u64, Kind, Probe, String)> = Vec::new();
        for (unit, t) in &mut self.units {
            let Some(r) = t.run.as_mut() else {
                continue;
            };
            if r.stop.is_some() {
                continue;
            }
            for (kind, probe) in r.probing.take_due(now) {
                due.push((unit.clone(), r.started_us, kind, probe, r.pod_ip.clone()));
            }
        }
        for (unit, run, kind, probe, pod_ip) in due {
            if !self.in_flight.insert((unit.clone(), kind)) {
                continue; // the last one still runs: this tick is skipped, as in the kubelet
            }
            let (client, tx) = (self.client.clone(), self.tx.clone());
            let podunit = self.podunit.clone();
            let spawned = std::thread::Builder::new()
                .name("probe".into())
                .stack_size(256 * 1024)
                .spawn(move || {
                    let exec = |argv: &[String], timeout: Duration| {
                        super::exec::run(&client, &podunit, &unit, argv, timeout)
                    };
                    let cx = super::check::Context {
                        pod_ip: &pod_ip,
                        timeout: Duration::from_secs(u64::from(probe.timeout_seconds.max(1))),
                        exec: &exec,
                    };
                    let outcome = super::check::run(&probe.handler, &cx);
                    let _ = tx.send(Msg::Done {
                        unit,
                        run,
                        kind,
                        outcome,
                    });
                });
            if let Err(e) = spawned {
                log(&format!("probes: cannot start a probe thread: {e}"));
            }
        }
    }

    fn done(&mut self, unit: String, run: u64, kind: Kind, outcome: Outcome) {
        self.in_flight.remove(&(unit.clone(), kind));
        let Some(t) = self.units.get_mut(&unit) else {
            return;
        };
        let Some(r) = t.run.as_mut().filter(|r| r.started_us == run) else {
            return; // about a run that is over
        };
        let step: Step = r.probing.record(kind, &outcome);
        let (pod, container) = (t.pod.clone(), t.container.clone());
        if let Some((ty, reason, message)) = &step.event {
            self.sink.event(&pod, &container, ty, reason, message);
        }
        if let Some((from, to)) = step.changed {
            let why = match &outcome {
                Outcome::Failure(m) | Outcome::Warning(m) => format!(": {m}"),
                _ => String::new(),
            };
            log(&format!(
                "pod {pod} container {container}: {} probe {from:?} -> {to:?}{why}",
                kind.title()
            ));
            self.publish(std::slice::from_ref(&unit));
        }
        if let Some(which) = step.kill {
            self.kill(&unit, kind, &which);
        }
    }

    /// The kubelet's kill after a failed liveness or startup probe (`killContainer`): the
    /// `Killing` event, the preStop hook (on a thread of its own; SIGTERM when it ends, or at the
    /// end of the grace period), SIGTERM to the main process, SIGKILL to all after what is left
    /// of the grace period (the probe's own, else the pod's; [`kill`]). `Restart=` decides
    /// whether it comes back, and systemd counts the restart.
    fn kill(&mut self, unit: &str, kind: Kind, which: &str) {
        let Some(t) = self.units.get_mut(unit) else {
            return;
        };
        // One kill per run: a second probe failing meanwhile adds nothing.
        let Some(r) = t.run.as_mut().filter(|r| r.stop.is_none()) else {
            return;
        };
        let grace = kill::grace(r.probing.kill_grace(kind), t.pod_grace_s);
        let hook = t.probes.pre_stop.clone().filter(|_| kill::runs_hook(grace));
        let now = Instant::now();
        if hook.is_some() {
            r.stop = Some(Stop::Hook {
                since: now,
                until: now + Duration::from_secs(grace),
                grace_s: grace,
            });
        }
        let (run, pod_ip) = (r.started_us, r.pod_ip.clone());
        let restarts = t.restart != "no";
        let message = format!(
            "Container {} failed {which} probe{}",
            t.container,
            if restarts { ", will be restarted" } else { "" }
        );
        log(&format!("pod {} {message}", t.pod));
        let (pod, container) = (t.pod.clone(), t.container.clone());
        self.sink
            .event(&pod, &container, "Normal", "Killing", &message);
        match hook {
            Some(h) => self.spawn_pre_stop(unit, run, &pod_ip, h, grace),
            None => self.term(unit, kill::after_hook(grace, None)),
        }
    }

    /// Runs the preStop hook of `unit`'s run `run` on a thread; its end comes back as a message.
    fn spawn_pre_stop(
        &mut self,
        unit: &str,
        run: u64,
        pod_ip: &str,
        hook: crate::probe::hook::Hook,
        grace_s: u64,
    ) {
        let (client, tx) = (self.client.clone(), self.tx.clone());
        let (podunit, pod_ip, u) = (self.podunit.clone(), pod_ip.to_string(), unit.to_string());
        let spawned = std::thread::Builder::new()
            .name("prestop".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let target = pre_stop::Target {
                    client: &client,
                    podunit: &podunit,
                    unit: &u,
                    pod_ip: &pod_ip,
                };
                let result = pre_stop::run(&hook, &target, Duration::from_secs(grace_s));
                let _ = tx.send(Msg::PreStopDone {
                    unit: u,
                    run,
                    result,
                });
            });
        if let Err(e) = spawned {
            log(&format!(
                "probes: cannot run the preStop hook of {unit}: {e}"
            ));
            self.term(unit, kill::after_hook(grace_s, None));
        }
    }

    /// A preStop hook ended: a failure is a journal line and `FailedPreStopHook`, and the kill
    /// goes on (unless the grace period already ran out and it went on without the hook).
    fn pre_stop_done(&mut self, unit: String, run: u64, result: Result<Option<String>, Failed>) {
        let Some(t) = self.units.get(&unit) else {
            return;
        };
        let (pod, container) = (t.pod.clone(), t.container.clone());
        match (&result, &t.probes.pre_stop) {
            (Err(f), Some(hook)) => {
                let pod_ref =
                    crate::kube::events::message::pod_ref(&pod.name, &pod.namespace, &t.uid);
                let events = crate::kube::hook_events::events(
                    crate::probe::hook::Stage::PreStop,
                    hook,
                    &container,
                    &pod_ref,
                    &f.exit,
                    f.error.as_deref(),
                    &f.output,
                );
                for (ty, reason, message) in events {
                    log(&format!(
                        "pod {pod} container {container}: {reason}: {message}"
                    ));
                    self.sink.event(&pod, &container, ty, reason, &message);
                }
            }
            (Ok(Some(note)), _) => log(&format!("pod {pod} container {container}: {note}")),
            _ => {}
        }
        let hook_since = self.units.get(&unit).and_then(|t| {
            let r = t.run.as_ref().filter(|r| r.started_us == run)?;
            match r.stop {
                Some(Stop::Hook { since, grace_s, .. }) => Some((since, grace_s)),
                _ => None,
            }
        });
        if let Some((since, grace_s)) = hook_since {
            self.term(&unit, kill::after_hook(grace_s, Some(since.elapsed())));
        }
    }

    /// SIGTERM to the main process; SIGKILL to all after `grace_s`.
    fn term(&mut self, unit: &str, grace_s: u64) {
        let Some(r) = self.units.get_mut(unit).and_then(|t| t.run.as_mut()) else {
            return;
        };
        r.stop = Some(Stop::Term {
            kill_at: Instant::now() + Duration::from_secs(grace_s),
        });
        if let Err(e) = self.client.kill_who(unit, "main", 15) {
            log(&format!("probes: {e}"));
        }
    }

    fn enforce_kills(&mut self) {
        let now = Instant::now();
        let (mut term, mut kill) = (Vec::new(), Vec::new());
        for (unit, t) in &mut self.units {
            let Some(r) = t.run.as_mut() else {
                continue;
            };
            match r.stop {
                Some(Stop::Hook { until, grace_s, .. }) if until <= now => {
                    term.push((unit.clone(), grace_s));
                }
                Some(Stop::Term { kill_at }) if kill_at <= now => {
                    r.stop = Some(Stop::Killed);
                    kill.push(unit.clone());
                }
                _ => {}
            }
        }
        for (unit, grace_s) in term {
            log(&format!(
                "{unit}: the preStop hook outlasted the grace period, SIGTERM"
            ));
            self.term(
                &unit,
                kill::after_hook(grace_s, Some(Duration::from_secs(grace_s))),
            );
        }
        for unit in kill {
            log(&format!("{unit}: grace period over, SIGKILL"));
            if let Err(e) = self.client.kill_who(&unit, "all", 9) {
                log(&format!("probes: {e}"));
            }
        }
    }
}
