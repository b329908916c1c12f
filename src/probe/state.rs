//! The kubelet's probe worker (`pkg/kubelet/prober/worker.go`) as a pure state machine: when each
//! probe of a container is due, how results count against the thresholds, startup gating, and
//! when a container must be killed. Time is a number of milliseconds on a monotonic clock that the
//! caller supplies, so tests drive it without sleeping.

use super::spec::{ContainerProbes, Kind, Probe};

/// Milliseconds on the caller's monotonic clock.
pub type Millis = u64;

/// A published probe result (`proberesults.Result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Value {
    Unknown,
    Success,
    Failure,
}

impl Value {
    /// What a probe reports before its first result: a container is not ready until proven so,
    /// alive until proven otherwise, and not started until its startup probe says so.
    fn initial(kind: Kind) -> Value {
        match kind {
            Kind::Readiness => Value::Failure,
            Kind::Liveness => Value::Success,
            Kind::Startup => Value::Unknown,
        }
    }
}

/// What one run of a probe found (`probe.Result` plus its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Success with something to say (an HTTP redirect the kubelet does not follow).
    Warning(String),
    Failure(String),
    /// The probe could not be run at all: the kubelet throws the result away.
    Error(String),
}

/// What a consumer must do after a probe ran.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Step {
    /// The kubelet's event for this run: (type, reason, message).
    pub event: Option<(&'static str, &'static str, String)>,
    /// The published result changed: (from, to). Logged; readiness changes re-post status.
    pub changed: Option<(Value, Value)>,
    /// A liveness or startup probe failed past its threshold: kill the container.
    pub kill: Option<String>,
}

/// One probe of one container run.
#[derive(Debug, Clone)]
struct Worker {
    kind: Kind,
    spec: Probe,
    result: Value,
    last: Option<Value>,
    run: u32,
    on_hold: bool,
    due: Millis,
}

impl Worker {
    fn period(&self) -> Millis {
        u64::from(self.spec.period_seconds.max(1)) * 1000
    }
}

/// The probes of one run of one container (a new run, after any restart, starts afresh as the
/// kubelet's workers do when they see a new container ID).
#[derive(Debug, Clone)]
pub struct Container {
    workers: Vec<Worker>,
}

impl Container {
    /// `started`: when the run began; `now`: when podunit-sync learns of it; `jitter` (below one
    /// period) spreads the first probes of containers that were already running.
    pub fn new(probes: &ContainerProbes, started: Millis, now: Millis, jitter: Millis) -> Self {
        let workers = Kind::ALL
            .into_iter()
            .filter_map(|kind| {
                let spec = probes.get(kind)?.clone();
                let first = started + u64::from(spec.initial_delay_seconds) * 1000;
                let mut w = Worker {
                    kind,
                    result: Value::initial(kind),
                    last: None,
                    run: 0,
                    on_hold: false,
                    due: first,
                    spec,
                };
                if first < now {
                    w.due = now + jitter % w.period();
                }
                Some(w)
            })
            .collect();
        Container { workers }
    }

    fn worker(&self, kind: Kind) -> Option<&Worker> {
        self.workers.iter().find(|w| w.kind == kind)
    }

    pub fn result(&self, kind: Kind) -> Option<Value> {
        self.worker(kind).map(|w| w.result)
    }

    /// `started` as the kubelet reports it for a running container.
    pub fn started(&self) -> bool {
        self.result(Kind::Startup)
            .is_none_or(|v| v == Value::Success)
    }

    /// `ready` for a running container.
    pub fn ready(&self) -> bool {
        self.started()
            && self
                .result(Kind::Readiness)
                .is_none_or(|v| v == Value::Success)
    }

    /// Whether a probe of `kind` is to run at its due time: startup runs until it succeeds, the
    /// others only after it did; a probe that asked for a kill waits for the next run.
    fn active(&self, w: &Worker) -> bool {
        if w.on_hold {
            return false;
        }
        match w.kind {
            Kind::Startup => w.result != Value::Success,
            _ => self.started(),
        }
    }

    /// The earliest time a probe is due (inactive probes still tick, as the kubelet's do).
    pub fn next_due(&self) -> Option<Millis> {
        self.workers.iter().map(|w| w.due).min()
    }

    /// The probes due at `now`, each moved on by one period. The caller runs them and reports
    /// each outcome with [`Container::record`].
    pub fn take_due(&mut self, now: Millis) -> Vec<(Kind, Probe)> {
        let mut out = Vec::new();
        for i in 0..self.workers.len() {
            if self.workers[i].due > now {
                continue;
            }
            let active = self.active(&self.workers[i]);
            let w = &mut self.workers[i];
            // Due again one period after this tick; missed ticks are not made up.
            let period = w.period();
            w.due += period * (1 + (now - w.due) / period);
            if active {
                out.push((w.kind, w.spec.clone()));
            }
        }
        out
    }

    /// Counts one outcome of the `kind` probe against its thresholds (`doProbe`).
    pub fn record(&mut self, kind: Kind, outcome: &Outcome) -> Step {
        let Some(w) = self.workers.iter_mut().find(|w| w.kind == kind) else {
            return Step::default();
        };
        let title = kind.title();
        let (value, event) = match outcome {
            Outcome::Success => (Value::Success, None),
            Outcome::Warning(m) => (
                Value::Success,
                Some((
                    "Warning",
                    "ProbeWarning",
                    format!("{title} probe warning: {m}"),
                )),
            ),
            Outcome::Failure(m) => (
                Value::Failure,
                Some(("Warning", "Unhealthy", format!("{title} probe failed: {m}"))),
            ),
            Outcome::Error(m) => {
                // Thrown away: neither counted nor published.
                return Step {
                    event: Some((
                        "Warning",
                        "Unhealthy",
                        format!("{title} probe errored: {m}"),
                    )),
                    ..Step::default()
                };
            }
        };
        let mut step = Step {
            event,
            ..Step::default()
        };
        if w.last == Some(value) {
            w.run = w.run.saturating_add(1);
        } else {
            w.last = Some(value);
            w.run = 1;
        }
        let threshold = match value {
            Value::Failure => w.spec.failure_threshold,
            _ => w.spec.success_threshold,
        };
        if w.run < threshold.max(1) {
            return step;
        }
        if w.result != value {
            step.changed = Some((w.result, value));
            w.result = value;
        }
        if value == Value::Failure && kind != Kind::Readiness {
            w.on_hold = true;
            w.run = 0;
            let which = if kind == Kind::Liveness {
                "liveness"
            } else {
                "startup"
            };
            step.kill = Some(which.to_string());
        }
        step
    }

    /// The probe-level grace period of the probe that asked for a kill.
    pub fn kill_grace(&self, kind: Kind) -> Option<u64> {
        self.worker(kind)
            .and_then(|w| w.spec.termination_grace_period_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::handler::Handler;

    fn probe(initial: u32, period: u32, success: u32, failure: u32) -> Probe {
        Probe {
            handler: Handler::TcpSocket {
                host: String::new(),
                port: 80,
            },
            initial_delay_seconds: initial,
            period_seconds: period,
            timeout_seconds: 1,
            success_threshold: success,
            failure_threshold: failure,
            termination_grace_period_seconds: None,
        }
    }

    fn probes(
        startup: Option<Probe>,
        readiness: Option<Probe>,
        liveness: Option<Probe>,
    ) -> ContainerProbes {
        ContainerProbes {
            container: "c".into(),
            startup,
            readiness,
            liveness,
            pre_stop: None,
        }
    }

    fn fail() -> Outcome {
        Outcome::Failure("connection refused".into())
    }

    #[test]
    fn readiness_waits_for_its_initial_delay_and_success_threshold() {
        let p = probes(None, Some(probe(5, 10, 2, 3)), None);
        let mut c = Container::new(&p, 1_000, 1_000, 0);
        assert!(!c.ready(), "not ready before the first success");
        assert_eq!(c.next_due(), Some(6_000));
        assert!(c.take_due(5_999).is_empty());
        assert_eq!(c.take_due(6_000).len(), 1);
        assert_eq!(c.next_due(), Some(16_000));
        assert_eq!(c.record(Kind::Readiness, &Outcome::Success).changed, None);
        assert!(!c.ready(), "one success of two");
        c.take_due(16_000);
        let s = c.record(Kind::Readiness, &Outcome::Success);
        assert_eq!(s.changed, Some((Value::Failure, Value::Success)));
        assert!(c.ready());
        // Failures below the threshold leave it ready; each one is an event, none a transition.
        for _ in 0..2 {
            let s = c.record(Kind::Readiness, &fail());
            assert_eq!(s.event.as_ref().unwrap().1, "Unhealthy");
            assert_eq!(
                s.event.unwrap().2,
                "Readiness probe failed: connection refused"
            );
            assert!(s.changed.is_none() && s.kill.is_none());
            assert!(c.ready());
        }
        let s = c.record(Kind::Readiness, &fail());
        assert_eq!(s.changed, Some((Value::Success, Value::Failure)));
        assert!(s.kill.is_none(), "readiness never kills");
        assert!(!c.ready());
    }

    #[test]
    fn liveness_kills_at_its_threshold_then_holds() {
        let mut lp = probe(0, 10, 1, 3);
        lp.termination_grace_period_seconds = Some(4);
        let p = probes(None, None, Some(lp));
        let mut c = Container::new(&p, 0, 0, 0);
        assert!(c.ready(), "no readiness probe: ready once running");
        let mut kills = 0;
        for i in 0..3 {
            assert_eq!(c.take_due(i * 10_000).len(), 1);
            kills += usize::from(c.record(Kind::Liveness, &fail()).kill.is_some());
        }
        assert_eq!(kills, 1);
        assert_eq!(c.kill_grace(Kind::Liveness), Some(4));
        assert!(
            c.take_due(30_000).is_empty(),
            "on hold until the next run of the container"
        );
        // A success resets the run of failures.
        let mut c = Container::new(&p, 0, 0, 0);
        for o in [fail(), fail(), Outcome::Success, fail(), fail()] {
            assert!(c.record(Kind::Liveness, &o).kill.is_none());
        }
    }

    #[test]
    fn startup_gates_the_others_and_stops_once_passed() {
        let p = probes(
            Some(probe(0, 1, 1, 30)),
            Some(probe(0, 10, 1, 3)),
            Some(probe(0, 10, 1, 1)),
        );
        let mut c = Container::new(&p, 0, 0, 0);
        assert!(!c.started() && !c.ready());
        let due: Vec<Kind> = c.take_due(0).into_iter().map(|d| d.0).collect();
        assert_eq!(
            due,
            vec![Kind::Startup],
            "only startup runs before it passed"
        );
        assert!(c.record(Kind::Startup, &fail()).kill.is_none());
        c.take_due(1_000);
        let s = c.record(Kind::Startup, &Outcome::Success);
        assert_eq!(s.changed, Some((Value::Unknown, Value::Success)));
        assert!(c.started() && !c.ready());
        let due: Vec<Kind> = c.take_due(10_000).into_iter().map(|d| d.0).collect();
        assert_eq!(due, vec![Kind::Readiness, Kind::Liveness]);
        assert!(
            c.record(Kind::Readiness, &Outcome::Success)
                .changed
                .is_some()
        );
        assert!(c.ready());
    }

    #[test]
    fn startup_failure_kills() {
        let p = probes(Some(probe(0, 1, 1, 2)), None, None);
        let mut c = Container::new(&p, 0, 0, 0);
        assert!(c.record(Kind::Startup, &fail()).kill.is_none());
        assert_eq!(
            c.record(Kind::Startup, &fail()).kill.as_deref(),
            Some("startup")
        );
    }

    #[test]
    fn errors_are_thrown_away_and_warnings_succeed() {
        let p = probes(None, Some(probe(0, 10, 1, 1)), None);
        let mut c = Container::new(&p, 0, 0, 0);
        let s = c.record(Kind::Readiness, &Outcome::Error("no such port".into()));
        assert!(s.changed.is_none());
        assert_eq!(s.event.unwrap().2, "Readiness probe errored: no such port");
        let s = c.record(Kind::Readiness, &Outcome::Warning("redirect".into()));
        assert_eq!(s.event.unwrap().1, "ProbeWarning");
        assert!(c.ready());
    }

    #[test]
    fn missed_ticks_are_skipped_and_running_pods_get_jitter() {
        let p = probes(None, Some(probe(0, 10, 1, 3)), None);
        // Known only 95 s after it started: first probe within one period, spread by jitter.
        let mut c = Container::new(&p, 0, 95_000, 12_345);
        assert_eq!(c.next_due(), Some(95_000 + 2_345));
        c.take_due(200_000);
        assert_eq!(c.next_due(), Some(207_345));
    }
}
