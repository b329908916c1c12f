//! The status model: a pod's units -> each container's status -> the pod's phase, conditions and
//! start time, computed once ([`observe`]). Both kinds of pod feed it the same inputs, systemd's
//! [`crate::systemd::unit::UnitState`] of each unit: a local pod ([`crate::status::pod`]) with the
//! generator's record of it, an API pod ([`crate::status::observe`]) with its spec. What each program shows
//! is a projection of the one [`Observed`]: `podunit status`'s row and JSON ([`crate::status::pod`]),
//! the PodStatus the cluster agent posts ([`crate::status::api`]). Probe results
//! ([`crate::status::probes::overlay_observed`]) set its containers' `ready` and `started` before
//! any projection, so READY and the `Ready` conditions follow from the model alone.

use crate::generate::output::ContainerKind;
use crate::status::container::{self, State, UnitFacts};
use crate::status::phase::{self, App, Phase, Restart};
use serde::Serialize;

/// What of the pod unit (the sandbox) the pod's status depends on.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodUnit<'a> {
    pub active_state: &'a str,
    /// `ActiveEnterTimestamp=` and `ExecMainStartTimestamp=`, µs (0 = never).
    pub active_enter_us: u64,
    pub exec_main_start_us: u64,
}

/// One container as its unit shows it, in the pod's order (init containers first).
#[derive(Debug, Clone, Copy)]
pub struct ContainerUnit<'a> {
    pub name: &'a str,
    pub unit: &'a str,
    pub kind: ContainerKind,
    /// Whether it runs again after it terminated.
    pub restart: Restart,
    pub facts: UnitFacts<'a>,
    /// `NRestarts=`.
    pub restart_count: u32,
}

/// One container's status: the Kubernetes `ContainerStatus`, with systemd's view beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    /// The container's unit (the API's `containerID: podunit://<unit>`).
    pub unit: String,
    pub kind: ContainerKind,
    pub state: State,
    /// The termination before the current wait (CrashLoopBackOff), while the unit still knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_state: Option<State>,
    pub ready: bool,
    pub started: bool,
    pub restart_count: u32,
    /// systemd's view, for people and debugging.
    pub active_state: String,
    pub sub_state: String,
}

impl ContainerStatus {
    /// The exit code shown to people: of the current termination, or of the last one.
    pub fn exit_code(&self) -> Option<i32> {
        match (&self.state, &self.last_state) {
            (State::Terminated { exit_code, .. }, _)
            | (_, Some(State::Terminated { exit_code, .. })) => Some(*exit_code),
            _ => None,
        }
    }

    pub fn started_at(&self) -> u64 {
        match &self.state {
            State::Running { started_at } => *started_at,
            State::Terminated { started_at, .. } => *started_at,
            State::Waiting { .. } => 0,
        }
    }

    /// Whether it no longer holds up the app containers (the `Initialized` condition).
    pub fn init_done(&self) -> bool {
        phase::init_done(self.kind, &self.state, self.started)
    }
}

/// The pod as its units show it, in kubelet terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub phase: Phase,
    /// The pod unit (the sandbox) is up: `PodReadyToStartContainers`.
    pub pod_ready_to_start: bool,
    /// Every init container is done: `Initialized`.
    pub initialized: bool,
    /// When the pod unit first became active (0 = not yet).
    pub start_us: u64,
    /// Init containers (sidecars among them), then app containers, each in spec order.
    pub init_containers: Vec<ContainerStatus>,
    pub containers: Vec<ContainerStatus>,
    /// The IPs CNI gave the pod (`network: cni`); none: the pod's IPs are the node's.
    pub pod_ips: Vec<String>,
}

impl Observed {
    /// Restarts of all its containers, as kubectl's RESTARTS column sums them.
    pub fn restarts(&self) -> u32 {
        self.init_containers
            .iter()
            .chain(&self.containers)
            .map(|c| c.restart_count)
            .sum()
    }

    /// Every app container is ready (there is at least one): `Ready` and `ContainersReady`.
    pub fn all_ready(&self) -> bool {
        !self.containers.is_empty() && self.containers.iter().all(|c| c.ready)
    }
}

fn status(c: &ContainerUnit, blocked_reason: &str) -> ContainerStatus {
    let d = container::derive(&c.facts, c.kind, blocked_reason);
    ContainerStatus {
        name: c.name.to_string(),
        unit: c.unit.to_string(),
        kind: c.kind,
        state: d.state,
        last_state: d.last_state,
        ready: d.ready,
        started: d.started,
        restart_count: c.restart_count,
        active_state: c.facts.active_state.to_string(),
        sub_state: c.facts.sub_state.to_string(),
    }
}

/// The pod's status from its units: each container's state, what the ones that have not run wait
/// for, whether the init containers are done, and the phase (the kubelet's `getPhase`).
pub fn observe(pod: PodUnit, containers: &[ContainerUnit]) -> Observed {
    let pod_up = phase::pod_up(pod.active_state);
    let mut init = Vec::new();
    let mut apps = Vec::new();
    let mut initialized = true;
    let mut init_failed = false;
    for c in containers {
        if c.kind == ContainerKind::App {
            apps.push((
                c.restart,
                status(c, phase::waiting_reason(pod_up, initialized)),
            ));
        } else {
            let s = status(c, phase::waiting_reason(pod_up, true));
            initialized &= s.init_done();
            init_failed |= phase::init_failed(c.kind, c.restart, &s.state);
            init.push(s);
        }
    }
    let facts: Vec<App> = apps
        .iter()
        .map(|(restart, s)| App {
            state: &s.state,
            restart: *restart,
            started: s.started,
            ran_before: s.last_state.is_some(),
        })
        .collect();
    let phase = phase::phase(initialized, init_failed, &facts);
    Observed {
        phase,
        pod_ready_to_start: pod_up,
        initialized,
        start_us: phase::start_us(pod.active_enter_us, pod.exec_main_start_us),
        init_containers: init,
        containers: apps.into_iter().map(|(_, s)| s).collect(),
        pod_ips: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::output::{GeneratedContainer, GeneratedPod, PodKey};
    use crate::status::probes::{ContainerResult, Results, overlay_observed};
    use crate::systemd::unit::{ExitKind, UnitState};
    use crate::translate::naming;
    use std::collections::HashMap;

    /// The same pod as the generator records it (each unit's `Restart=` as it writes them) and as
    /// the API server holds it.
    fn both(policy: &str) -> (GeneratedPod, k8s_openapi::api::core::v1::Pod) {
        let c = |name: &str, kind: ContainerKind| GeneratedContainer {
            name: name.into(),
            unit: naming::container_service("ns", "web", name),
            kind,
            order: 0,
            restart: match Restart::of_container(kind, policy) {
                Restart::Always => "always",
                Restart::OnFailure => "on-failure",
                Restart::Never => "no",
            }
            .into(),
            stop_timeout_s: None,
        };
        let local = GeneratedPod {
            key: PodKey::new("ns", "web"),
            uid: None,
            pod_unit: Some(naming::pod_service("ns", "web")),
            slice: None,
            containers: vec![
                c("side", ContainerKind::Sidecar),
                c("init", ContainerKind::Init),
                c("app", ContainerKind::App),
            ],
            source_path: None,
            hash: String::new(),
            job: None,
            ordered: None,
            workload: None,
        };
        let api = serde_saphyr::from_str(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: web, namespace: ns}}\nspec:\n  restartPolicy: {policy}\n  initContainers: [{{name: side, image: host, restartPolicy: Always}}, {{name: init, image: host}}]\n  containers: [{{name: app, image: host}}]\n"
        ))
        .unwrap();
        (local, api)
    }

    fn unit(active: &str, sub: &str, exit: Option<i32>) -> UnitState {
        UnitState {
            load_state: "loaded".into(),
            active_state: active.into(),
            sub_state: sub.into(),
            exec_main_code: exit.map_or(ExitKind::None, |_| ExitKind::Exited),
            exec_main_status: exit.unwrap_or(0),
            exec_main_start_us: 10_000_000,
            exec_main_exit_us: exit.map_or(0, |_| 12_000_000),
            active_enter_us: 9_000_000,
            main_pid: if exit.is_none() { 7 } else { 0 },
            result: match exit {
                Some(0) | None => "success",
                Some(_) => "exit-code",
            }
            .into(),
            ..Default::default()
        }
    }

    /// The units by name: "" is the pod unit, any other the container of that name.
    fn named(units: &[(&str, UnitState)]) -> HashMap<String, UnitState> {
        let name = |c: &str| match c {
            "" => naming::pod_service("ns", "web"),
            c => naming::container_service("ns", "web", c),
        };
        units.iter().map(|(c, u)| (name(c), u.clone())).collect()
    }

    #[test]
    fn a_local_pod_and_an_api_pod_with_the_same_units_have_one_status() {
        // The pod unit up and the sidecar running, then the init and app containers' units.
        let up = |rest: &[(&'static str, UnitState)]| {
            let mut v = vec![
                ("", unit("active", "exited", None)),
                ("side", unit("active", "running", None)),
            ];
            v.extend_from_slice(rest);
            v
        };
        let init_ok = ("init", unit("active", "exited", Some(0)));
        let scenarios: Vec<Vec<(&str, UnitState)>> = vec![
            vec![],
            vec![("", unit("active", "exited", None))],
            up(&[("init", unit("activating", "start", None))]),
            up(&[("init", unit("failed", "failed", Some(3)))]),
            up(&[init_ok.clone(), ("app", unit("failed", "failed", Some(1)))]),
            up(&[
                init_ok.clone(),
                ("app", unit("activating", "auto-restart", Some(1))),
            ]),
            up(&[init_ok.clone(), ("app", unit("inactive", "dead", Some(0)))]),
        ];
        for policy in ["Always", "OnFailure", "Never"] {
            let (local, api) = both(policy);
            for units in &scenarios {
                let states = named(units);
                let from_local = crate::status::pod::observe(&local, &states);
                let from_api = crate::status::observe::observe(&api, &states);
                assert_eq!(from_local, from_api, "{policy}: {units:?}");
            }
        }
        // The rule that used to differ: an init container that failed under restartPolicy Never
        // fails the pod; retried, it keeps it Pending.
        let failed_init = &scenarios[3];
        for (policy, phase) in [("Never", Phase::Failed), ("OnFailure", Phase::Pending)] {
            let (local, _) = both(policy);
            let states = named(failed_init);
            assert_eq!(crate::status::pod::observe(&local, &states).phase, phase);
        }
    }

    #[test]
    fn probe_results_reach_every_projection_through_the_model() {
        let (local, _) = both("Always");
        let api: k8s_openapi::api::core::v1::Pod = serde_saphyr::from_str(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: ns}\nspec:\n  initContainers: [{name: side, image: host, restartPolicy: Always}, {name: init, image: host}]\n  containers: [{name: app, image: host, readinessProbe: {exec: {command: [\"true\"]}}}]\n",
        )
        .unwrap();
        let probes = crate::probe::spec::pod_probes(api.spec.as_ref().unwrap());
        let states = named(&[
            ("", unit("active", "exited", None)),
            ("side", unit("active", "running", None)),
            ("init", unit("active", "exited", Some(0))),
            ("app", unit("active", "running", None)),
        ]);
        let now = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap();
        for ready in [false, true] {
            let mut results = Results::default();
            let result = ContainerResult {
                run_started_us: 10_000_000,
                started: true,
                ready,
            };
            let app = naming::container_service("ns", "web", "app");
            results.containers.insert(app, result);
            let mut from_local = crate::status::pod::observe(&local, &states);
            overlay_observed(&mut from_local, &probes, &results);
            let mut from_api = crate::status::observe::observe(&api, &states);
            overlay_observed(&mut from_api, &probes, &results);
            assert_eq!(from_local, from_api);
            let want = if ready { "True" } else { "False" };
            let row = crate::status::pod::pod_status(&local, from_local, &states, None, false);
            assert_eq!(row.ready_containers, usize::from(ready));
            let shown = |kind: &str| {
                row.conditions
                    .iter()
                    .find(|c| c.kind == kind)
                    .unwrap()
                    .status
            };
            assert_eq!((shown("Ready"), shown("ContainersReady")), (want, want));
            let node = crate::status::api::NodeAddrs::default();
            let posted = crate::status::api::build(&api, &from_api, &node, None, now);
            let cond = |kind: &str| {
                let c = posted.conditions.iter().flatten().find(|c| c.type_ == kind);
                c.unwrap().status.clone()
            };
            assert_eq!(
                (cond("Ready"), cond("ContainersReady")),
                (want.into(), want.into())
            );
            assert_eq!(posted.container_statuses.unwrap()[0].ready, ready);
        }
    }
}
