//! `podunit status`'s view of a local pod: the status model ([`crate::status::model`]) fed from the
//! generator's record of the pod and systemd's unit states, projected to the row kubectl would print
//! (READY, STATUS, RESTARTS) and the JSON of `podunit status -o json`.

use crate::common::paths::Source;
use crate::generate::output::{ContainerKind, GeneratedContainer, GeneratedPod, PodKey};
use crate::status::container::{State, ser_time};
use crate::status::model::{self, ContainerStatus, ContainerUnit, Observed, PodUnit};
use crate::status::phase::{Phase, Restart};
use crate::systemd::unit::{ListedUnit, UnitState};
use crate::translate::naming::{self, Parsed};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `True` / `False`, as the API spells it.
    pub status: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    pub phase: Phase,
    /// kubectl's STATUS column: Running, Pending, Init:0/2, CrashLoopBackOff, Completed, ...
    pub display: String,
    pub ready_containers: usize,
    pub total_containers: usize,
    /// kubectl's RESTARTS: every container's restartCount summed.
    pub restarts: u32,
    #[serde(serialize_with = "ser_time")]
    pub start_time: u64,
    pub terminating: bool,
    pub conditions: Vec<Condition>,
    pub init_container_statuses: Vec<ContainerStatus>,
    pub container_statuses: Vec<ContainerStatus>,
    pub pod_unit: String,
    pub pod_unit_state: String,
    /// Why a pod does not run: set for refused pods (`InvalidManifest`, ...), as the API's
    /// `status.reason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What it waits for or why it was refused, in words (see [`crate::status::knownpods`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The IPs CNI gave the pod (`network: cni`), IPv4 first; none on the host network.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pod_ips: Vec<String>,
}

/// The status model of a local pod. `units` maps unit names to their states (missing = never
/// loaded). Each container runs again as its unit's `Restart=` says.
pub fn observe(pod: &GeneratedPod, units: &HashMap<String, UnitState>) -> Observed {
    let absent = UnitState::absent("");
    let state_of = |name: &str| units.get(name).unwrap_or(&absent);
    let pu = pod.pod_unit.as_deref().map_or(&absent, state_of);
    let containers: Vec<ContainerUnit> = pod
        .containers
        .iter()
        .map(|c| {
            let u = state_of(&c.unit);
            ContainerUnit {
                name: &c.name,
                unit: &c.unit,
                kind: c.kind,
                restart: Restart::from_unit(&c.restart),
                facts: crate::status::container::UnitFacts::of(u),
                restart_count: u.n_restarts,
            }
        })
        .collect();
    let pod_unit = PodUnit {
        active_state: &pu.active_state,
        active_enter_us: pu.active_enter_us,
        exec_main_start_us: pu.exec_main_start_us,
    };
    model::observe(pod_unit, &containers)
}

/// The whole pod, as `podunit status` shows it: the projection of its model `obs` ([`observe`],
/// with its probes' results) to kubectl's columns and conditions. `units` maps unit names to their
/// states (missing = never loaded).
pub fn pod_status(
    pod: &GeneratedPod,
    obs: Observed,
    units: &HashMap<String, UnitState>,
    source: Option<Source>,
    terminating: bool,
) -> PodStatus {
    let pod_unit = pod.pod_unit.clone().unwrap_or_default();
    let absent = UnitState::absent("");
    let pu = units.get(&pod_unit).unwrap_or(&absent);
    let all_ready = obs.all_ready();
    let message = start_errors(&obs);
    PodStatus {
        namespace: pod.key.namespace.clone(),
        name: pod.key.name.clone(),
        uid: pod.uid.clone(),
        source,
        phase: obs.phase,
        display: display_status(&obs, terminating),
        ready_containers: obs.containers.iter().filter(|c| c.ready).count(),
        total_containers: obs.containers.len(),
        restarts: obs.restarts(),
        start_time: obs.start_us,
        terminating,
        conditions: vec![
            cond("PodReadyToStartContainers", obs.pod_ready_to_start),
            cond("Initialized", obs.initialized),
            cond("Ready", all_ready),
            cond("ContainersReady", all_ready),
            cond("PodScheduled", true),
        ],
        init_container_statuses: obs.init_containers,
        container_statuses: obs.containers,
        pod_unit,
        pod_unit_state: format!("{}/{}", pu.active_state, pu.sub_state),
        reason: None,
        message,
        pod_ips: obs.pod_ips,
    }
}

/// What says why containers did not start: `container NAME: StartError: <message>` for each
/// whose current or last termination is a start error, for the line under the table.
fn start_errors(obs: &Observed) -> Option<String> {
    let lines: Vec<String> = obs
        .init_containers
        .iter()
        .chain(&obs.containers)
        .filter_map(|c| {
            let t = match (&c.state, &c.last_state) {
                (t @ State::Terminated { .. }, _) | (_, Some(t @ State::Terminated { .. })) => t,
                _ => return None,
            };
            match t {
                State::Terminated {
                    reason,
                    message: Some(m),
                    ..
                } if reason == crate::status::start_error::REASON => {
                    Some(format!("container {}: {reason}: {m}", c.name))
                }
                _ => None,
            }
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

fn cond(kind: &'static str, ok: bool) -> Condition {
    Condition {
        kind,
        status: if ok { "True" } else { "False" },
    }
}

/// kubectl's STATUS column (`printPod` in kubectl's printers): the phase, unless an init container
/// holds the pod up (`Init:1/2`, `Init:Error` also once the pod has Failed for it) or an app
/// container's state says more (`CrashLoopBackOff`, `Completed`, `Error`).
fn display_status(obs: &Observed, terminating: bool) -> String {
    if terminating {
        return "Terminating".into();
    }
    let mut reason = obs.phase.as_str().to_string();
    let init = &obs.init_containers;
    for (i, s) in init.iter().enumerate() {
        if s.init_done() {
            continue;
        }
        return match &s.state {
            State::Terminated { reason, .. } if !reason.is_empty() => {
                format!("Init:{reason}")
            }
            State::Waiting { reason }
                if !reason.is_empty()
                    && reason != "PodInitializing"
                    && reason != "ContainerCreating" =>
            {
                format!("Init:{reason}")
            }
            _ => format!("Init:{i}/{}", init.len()),
        };
    }
    let mut has_running = false;
    for s in obs.containers.iter().rev() {
        match &s.state {
            State::Waiting { reason: r } if !r.is_empty() => reason = r.clone(),
            State::Terminated { reason: r, .. } => reason = r.clone(),
            State::Running { .. } if s.ready => has_running = true,
            _ => {}
        }
    }
    if reason == "Completed" && has_running {
        reason = "Running".into();
    }
    reason
}

/// Pods that systemd still runs but the generator no longer renders (their files are gone):
/// shown as Terminating until their units are stopped. Shortened names are grouped by their hash.
pub fn orphan_pods(actual: &[ListedUnit], desired: &[GeneratedPod]) -> Vec<GeneratedPod> {
    let known: std::collections::HashSet<String> = desired.iter().flat_map(|p| p.units()).collect();
    let mut pods: BTreeMap<PodKey, GeneratedPod> = BTreeMap::new();
    for u in actual {
        if known.contains(&u.name) || !u.is_not_found() || !u.is_running() {
            continue;
        }
        let (key, container) = match naming::parse(&u.name) {
            Some(Parsed::Exact(id)) => (PodKey::new(&id.namespace, &id.pod), id.container),
            Some(Parsed::Shortened {
                namespace,
                hash,
                container,
            }) => (PodKey::new(&namespace, &format!(":{hash}")), container),
            None => continue,
        };
        let pod = pods.entry(key.clone()).or_insert_with(|| GeneratedPod {
            key,
            uid: None,
            pod_unit: None,
            slice: None,
            containers: Vec::new(),
            source_path: None,
            hash: String::new(),
            job: None,
            ordered: None,
            workload: None,
        });
        match container {
            Some(name) => pod.containers.push(GeneratedContainer {
                name,
                unit: u.name.clone(),
                kind: ContainerKind::App,
                order: 0,
                restart: "no".into(),
                stop_timeout_s: None,
            }),
            None if u.name.ends_with(".service") => pod.pod_unit = Some(u.name.clone()),
            None => pod.slice = Some(u.name.clone()),
        }
    }
    pods.into_values().collect()
}

/// Which manifest directory a `SourcePath=` lies in. Both the host path and the prefixed path
/// (tests, `PODUNIT_ROOT`) are recognised.
pub fn source_of(source_path: &str, paths: &crate::common::paths::Paths) -> Option<Source> {
    let host = [
        (Source::Etc, crate::common::paths::Paths::ETC_PODS),
        (Source::Run, crate::common::paths::Paths::RUN_PODS),
        (Source::Spool, crate::common::paths::Paths::SPOOL),
    ];
    host.iter().find_map(|(src, dir)| {
        let prefixed = paths.host(dir);
        let inside = |d: &str| {
            source_path
                .strip_prefix(d)
                .is_some_and(|rest| rest.starts_with('/'))
        };
        (inside(dir) || inside(&prefixed.to_string_lossy())).then_some(*src)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systemd::unit::ExitKind;

    const T0: u64 = 1_700_000_000_000_000;

    /// The pod's row from its units alone (no probes).
    fn status(
        p: &GeneratedPod,
        units: &HashMap<String, UnitState>,
        source: Option<Source>,
        terminating: bool,
    ) -> PodStatus {
        pod_status(p, observe(p, units), units, source, terminating)
    }

    fn c(name: &str, kind: ContainerKind, restart: &str) -> GeneratedContainer {
        GeneratedContainer {
            name: name.into(),
            unit: naming::container_service("default", "web", name),
            kind,
            order: 0,
            restart: restart.into(),
            stop_timeout_s: None,
        }
    }

    fn pod(containers: Vec<GeneratedContainer>) -> GeneratedPod {
        GeneratedPod {
            key: PodKey::new("default", "web"),
            uid: Some("u".into()),
            pod_unit: Some(naming::pod_service("default", "web")),
            slice: None,
            containers,
            source_path: Some("/etc/pods.d/web.yaml".into()),
            hash: "h".into(),
            job: None,
            ordered: None,
            workload: None,
        }
    }

    fn st(active: &str, sub: &str) -> UnitState {
        UnitState {
            load_state: "loaded".into(),
            active_state: active.into(),
            sub_state: sub.into(),
            ..Default::default()
        }
    }

    fn running_unit() -> UnitState {
        UnitState {
            exec_main_start_us: T0,
            main_pid: 42,
            active_enter_us: T0,
            ..st("active", "running")
        }
    }

    fn exited(code: ExitKind, status: i32, active: &str, sub: &str) -> UnitState {
        UnitState {
            exec_main_code: code,
            exec_main_status: status,
            exec_main_start_us: T0,
            exec_main_exit_us: T0 + 5_000_000,
            result: if status == 0 { "success" } else { "exit-code" }.into(),
            ..st(active, sub)
        }
    }

    fn units(p: &GeneratedPod, states: Vec<(&str, UnitState)>) -> HashMap<String, UnitState> {
        let mut m: HashMap<String, UnitState> = HashMap::new();
        m.insert(
            p.pod_unit.clone().unwrap(),
            UnitState {
                active_enter_us: T0,
                ..st("active", "exited")
            },
        );
        for (n, mut s) in states {
            let unit = p
                .containers
                .iter()
                .find(|c| c.name == n)
                .unwrap()
                .unit
                .clone();
            s.name = unit.clone();
            m.insert(unit, s);
        }
        m
    }

    #[test]
    fn running_pod() {
        let p = pod(vec![
            c("init", ContainerKind::Init, "no"),
            c("app", ContainerKind::App, "always"),
            c("side", ContainerKind::App, "always"),
        ]);
        let mut app = running_unit();
        app.n_restarts = 2;
        let m = units(
            &p,
            vec![
                ("init", exited(ExitKind::Exited, 0, "active", "exited")),
                ("app", app),
                ("side", running_unit()),
            ],
        );
        let s = status(&p, &m, Some(Source::Etc), false);
        assert_eq!(s.phase, Phase::Running);
        assert_eq!(s.display, "Running");
        assert_eq!((s.ready_containers, s.total_containers), (2, 2));
        assert_eq!(s.restarts, 2);
        assert_eq!(s.start_time, T0);
        assert!(s.init_container_statuses[0].ready);
        assert_eq!(s.init_container_statuses[0].exit_code(), Some(0));
        assert!(s.conditions.iter().all(|c| c.status == "True"));
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(
            j["containerStatuses"][0]["state"]["running"]["startedAt"],
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            j["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(j["source"], "etc");
        assert_eq!(j["phase"], "Running");
    }

    #[test]
    fn init_progress_and_failure() {
        let p = pod(vec![
            c("i1", ContainerKind::Init, "no"),
            c("i2", ContainerKind::Init, "no"),
            c("app", ContainerKind::App, "always"),
        ]);
        let m = units(
            &p,
            vec![
                ("i1", exited(ExitKind::Exited, 0, "active", "exited")),
                (
                    "i2",
                    UnitState {
                        main_pid: 7,
                        exec_main_start_us: T0,
                        ..st("activating", "start")
                    },
                ),
            ],
        );
        let s = status(&p, &m, None, false);
        assert_eq!(s.display, "Init:1/2");
        assert_eq!(s.phase, Phase::Pending);
        assert!(matches!(
            s.init_container_statuses[1].state,
            State::Running { .. }
        ));
        assert_eq!(
            s.container_statuses[0].state,
            State::Waiting {
                reason: "PodInitializing".into()
            }
        );
        let m = units(
            &p,
            vec![
                ("i1", exited(ExitKind::Exited, 0, "active", "exited")),
                ("i2", exited(ExitKind::Exited, 3, "failed", "failed")),
            ],
        );
        let s = status(&p, &m, None, false);
        // The kubelet fails the pod (restartPolicy Never: the init units have `Restart=no`);
        // kubectl still names the init container's termination.
        assert_eq!((s.phase, s.display.as_str()), (Phase::Failed, "Init:Error"));
        assert_eq!(s.init_container_statuses[1].exit_code(), Some(3));
        assert_eq!(
            s.conditions[1],
            Condition {
                kind: "Initialized",
                status: "False"
            }
        );
        // Retried (restartPolicy OnFailure or Always): the pod waits for the next run.
        let p = pod(vec![
            c("i1", ContainerKind::Init, "on-failure"),
            c("app", ContainerKind::App, "always"),
        ]);
        let s = one(&p, exited(ExitKind::Exited, 3, "failed", "failed"));
        assert_eq!(
            (s.phase, s.display.as_str()),
            (Phase::Pending, "Init:Error")
        );
    }

    /// A pod whose only container's unit is `u`.
    fn one(p: &GeneratedPod, u: UnitState) -> PodStatus {
        let name = p.containers[0].name.clone();
        status(p, &units(p, vec![(&name, u)]), None, false)
    }

    #[test]
    fn crash_loop_and_completion() {
        let p = pod(vec![c("app", ContainerKind::App, "always")]);
        let mut u = exited(ExitKind::Exited, 1, "activating", "auto-restart");
        u.n_restarts = 4;
        let s = one(&p, u);
        assert_eq!(s.display, "CrashLoopBackOff");
        assert_eq!(s.phase, Phase::Running);
        assert_eq!(s.restarts, 4);
        assert_eq!(s.container_statuses[0].exit_code(), Some(1));
        assert_eq!(s.message, None);
        // systemd could not exec the command (203/EXEC): a start error, said under the table.
        let mut u = exited(ExitKind::Exited, 203, "activating", "auto-restart");
        u.start_error = Some(crate::systemd::unit::SpawnFailure {
            executable: "/bin/app".into(),
            errno: Some(2),
        });
        let s = one(&p, u);
        assert_eq!(s.display, "CrashLoopBackOff");
        assert_eq!(s.container_statuses[0].exit_code(), Some(128));
        let m = s.message.unwrap();
        assert!(
            m.starts_with(
                "container app: StartError: exec: \"/bin/app\": stat /bin/app: no such file"
            ),
            "{m}"
        );

        let p = pod(vec![c("job", ContainerKind::App, "no")]);
        let s = one(&p, exited(ExitKind::Exited, 0, "inactive", "dead"));
        assert_eq!(
            (s.phase, s.display.as_str()),
            (Phase::Succeeded, "Completed")
        );
        let s = one(&p, exited(ExitKind::Killed, 9, "failed", "failed"));
        assert_eq!((s.phase, s.display.as_str()), (Phase::Failed, "Error"));
        assert_eq!(s.container_statuses[0].exit_code(), Some(137));
        let p = pod(vec![c("job", ContainerKind::App, "on-failure")]);
        let s = one(&p, exited(ExitKind::Exited, 0, "inactive", "dead"));
        assert_eq!(s.phase, Phase::Succeeded);
    }

    #[test]
    fn sidecar_counts_as_started_init() {
        let p = pod(vec![
            c("proxy", ContainerKind::Sidecar, "always"),
            c("app", ContainerKind::App, "always"),
        ]);
        let m = units(&p, vec![("proxy", running_unit()), ("app", running_unit())]);
        let s = status(&p, &m, None, false);
        assert_eq!(s.display, "Running");
        assert_eq!(s.total_containers, 1);
    }

    #[test]
    fn never_started_pod_is_pending() {
        let p = pod(vec![c("app", ContainerKind::App, "always")]);
        let s = status(&p, &HashMap::new(), None, false);
        assert_eq!(s.phase, Phase::Pending);
        assert_eq!(s.display, "ContainerCreating");
        assert_eq!(s.start_time, 0);
        let s = status(&p, &HashMap::new(), None, true);
        assert_eq!(s.display, "Terminating");
    }

    #[test]
    fn orphans_and_sources() {
        let actual = vec![
            ListedUnit {
                name: naming::container_service("default", "gone", "c"),
                load_state: "not-found".into(),
                active_state: "deactivating".into(),
                sub_state: "stop-sigterm".into(),
                fragment_path: None,
                job_queued: false,
            },
            ListedUnit {
                name: naming::pod_service("default", "gone"),
                load_state: "not-found".into(),
                active_state: "active".into(),
                sub_state: "exited".into(),
                fragment_path: None,
                job_queued: false,
            },
            ListedUnit {
                name: naming::pod_service("default", "idle"),
                load_state: "not-found".into(),
                active_state: "inactive".into(),
                sub_state: "dead".into(),
                fragment_path: None,
                job_queued: false,
            },
        ];
        let o = orphan_pods(&actual, &[]);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].key, PodKey::new("default", "gone"));
        assert_eq!(o[0].containers[0].name, "c");
        let paths = crate::common::paths::Paths::with_root("/tmp/r");
        assert_eq!(source_of("/etc/pods.d/a.yaml", &paths), Some(Source::Etc));
        assert_eq!(
            source_of("/tmp/r/var/lib/podunit/spool/x.yaml", &paths),
            Some(Source::Spool)
        );
        assert_eq!(source_of("/etc/pods.dx/a.yaml", &paths), None);
    }
}
