//! The probe runner of podunit-sync (local and cluster mode alike): one thread that knows every
//! probed container and when its probes are due, starts each due probe on a short-lived thread
//! of its own (at most one at a time per probe, as the kubelet's workers do), counts results with
//! [`super::state`], kills containers whose liveness or startup probe failed, and publishes
//! `ready`/`started` ([`super::results`]).
//!
//! It learns what runs from systemd's signals (a unit's properties changed: look it up again)
//! and what is probed from the plans the generator wrote (after every daemon-reload).

use super::results::{ContainerResult, RESULTS_FILE, Results};
use super::spec::{ContainerProbes, Kind, Probe};
use super::state::{Container, Millis, Outcome, Step};
use crate::common::paths::Paths;
use crate::localsync::generator_output::{self, PodKey};
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
    Closed,
}

struct Run {
    started_us: u64,
    main_pid: u32,
    probing: Container,
    /// SIGKILL the container at this time if the same run still lives.
    kill_at: Option<Instant>,
}

struct Tracked {
    pod: PodKey,
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
    pod_ip: String,
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
    let generator_dir = paths.host(generator_output::GENERATOR_DIR);
    let results_path = paths.host(RESULTS_FILE);
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
            .filter_map(|t| t.run.as_ref()?.kill_at)
            .min();
        probes.into_iter().chain(kills).min()
    }

    /// Reads which containers have probes from the generator's plans.
    fn rescan(&mut self) {
        let pods = match generator_output::scan(&self.generator_dir) {
            Ok(p) => p,
            Err(e) => return log(&format!("probes: {e}")),
        };
        let mut next: HashMap<String, Tracked> = HashMap::new();
        for pod in &pods {
            let Some(pod_unit) = &pod.pod_unit else {
                continue;
            };
            for probes in super::results::plan_probes(&self.generator_dir, pod_unit) {
                let Some(c) = pod.containers.iter().find(|c| c.name == probes.container) else {
                    continue;
                };
                let kept = self
                    .units
                    .remove(&c.unit)
                    .filter(|t| t.probes == probes && t.pod == pod.key);
                let t = kept.unwrap_or_else(|| Tracked {
                    pod: pod.key.clone(),
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
            t.run = Some(Run {
                started_us: st.exec_main_start_us,
                main_pid: st.main_pid,
                probing: Container::new(&t.probes, started, now, jitter),
                kill_at: None,
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
        let mut due: Vec<(String, u64, Kind, Probe)> = Vec::new();
        for (unit, t) in &mut self.units {
            let Some(r) = t.run.as_mut() else {
                continue;
            };
            if r.kill_at.is_some() {
                continue;
            }
            for (kind, probe) in r.probing.take_due(now) {
                due.push((unit.clone(), r.started_us, kind, probe));
            }
        }
        for (unit, run, kind, probe) in due {
            if !self.in_flight.insert((unit.clone(), kind)) {
                continue; // the last one still runs: this tick is skipped, as in the kubelet
            }
            let (client, tx) = (self.client.clone(), self.tx.clone());
            let (podunit, pod_ip) = (self.podunit.clone(), self.pod_ip.clone());
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

    /// The kubelet's kill after a failed liveness or startup probe: SIGTERM to the main process,
    /// SIGKILL to all after the grace period (the probe's own, else the pod's); `Restart=`
    /// decides whether it comes back, and systemd counts the restart.
    fn kill(&mut self, unit: &str, kind: Kind, which: &str) {
        let Some(t) = self.units.get_mut(unit) else {
            return;
        };
        let Some(r) = t.run.as_mut() else {
            return;
        };
        let grace = r.probing.kill_grace(kind).or(t.pod_grace_s).unwrap_or(30);
        r.kill_at = Some(Instant::now() + Duration::from_secs(grace));
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
        if let Err(e) = self.client.kill_who(unit, "main", 15) {
            log(&format!("probes: {e}"));
        }
    }

    fn enforce_kills(&mut self) {
        let now = Instant::now();
        let mut due = Vec::new();
        for (unit, t) in &mut self.units {
            if let Some(r) = t.run.as_mut()
                && r.kill_at.is_some_and(|at| at <= now)
            {
                r.kill_at = None;
                due.push(unit.clone());
            }
        }
        for unit in due {
            log(&format!("{unit}: grace period over, SIGKILL"));
            if let Err(e) = self.client.kill_who(&unit, "all", 9) {
                log(&format!("probes: {e}"));
            }
        }
    }
}
