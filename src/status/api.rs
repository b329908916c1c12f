//! The PodStatus a node posts: the status model's projection to the API.
//!
//! Pure: the input is the model's [`Observed`] pod (what the unit states mean in kubelet terms: phase,
//! each container's state), the previous status (to keep condition transition times and a
//! container's last termination), the node's addresses and the time. The output is compared with
//! what was last posted; only a different status is sent.

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::status::container::State;
use crate::status::model::{self, Observed};
use crate::status::phase::Phase;

/// The node's addresses: with host networking a pod's IPs are the node's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeAddrs {
    pub ips: Vec<String>,
}

impl NodeAddrs {
    /// The host and pod IPs a status may carry: the first address of each family, as the
    /// kubelet's `getHostIPs` takes them (the API server refuses a status with more than one
    /// IP of a family: "may specify no more than one IP for each IP family").
    pub fn per_family(&self) -> Vec<String> {
        let v4 = self.ips.iter().find(|ip| !ip.contains(':'));
        let v6 = self.ips.iter().find(|ip| ip.contains(':'));
        v4.into_iter().chain(v6).cloned().collect()
    }
}

fn time_us(us: u64) -> Option<Time> {
    if us == 0 {
        return None;
    }
    // Whole seconds: that is what the API stores, so a re-read status compares equal.
    Timestamp::from_second((us / 1_000_000) as i64)
        .ok()
        .map(Time)
}

fn now_time(now: Timestamp) -> Time {
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

fn state(s: &State) -> ContainerState {
    match s {
        State::Waiting { reason } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: None,
            }),
            ..Default::default()
        },
        State::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: time_us(*started_at),
            }),
            ..Default::default()
        },
        State::Terminated {
            exit_code,
            signal,
            reason,
            message,
            started_at,
            finished_at,
        } => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: *exit_code,
                signal: *signal,
                reason: Some(reason.clone()),
                started_at: time_us(*started_at),
                finished_at: time_us(*finished_at),
                container_id: None,
                message: message.clone(),
            }),
            ..Default::default()
        },
    }
}

fn container_status(
    pod: &Pod,
    spec: Option<&Container>,
    o: &model::ContainerStatus,
    prev: Option<&ContainerStatus>,
) -> ContainerStatus {
    let mut st = state(&o.state);
    if let (Some(w), State::Waiting { reason }) = (st.waiting.as_mut(), &o.state)
        && reason == "CrashLoopBackOff"
    {
        w.message = Some(format!(
            "back-off restarting failed container={} pod={}_{}({})",
            o.name,
            pod.metadata.name.as_deref().unwrap_or(""),
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.uid.as_deref().unwrap_or("")
        ));
    }
    // lastState: what the unit still reports, else the termination we saw before the restart, else
    // what was posted before (the kubelet keeps it until the next termination).
    let last = match &o.last_state {
        Some(l) => Some(state(l)),
        None => prev.and_then(|p| {
            let was_terminated = p.state.as_ref().and_then(|s| s.terminated.as_ref());
            let restarted = o.restart_count > p.restart_count.max(0) as u32;
            match (was_terminated, restarted) {
                (Some(_), true) => p.state.clone(),
                _ if st.terminated.is_none() => p.last_state.clone(),
                _ => None,
            }
        }),
    };
    let image = spec.and_then(|c| c.image.clone()).unwrap_or_default();
    ContainerStatus {
        name: o.name.clone(),
        image: image.clone(),
        image_id: image,
        container_id: Some(format!("podunit://{}", o.unit)),
        ready: o.ready,
        started: Some(o.started),
        restart_count: o.restart_count.min(i32::MAX as u32) as i32,
        state: Some(st),
        last_state: Some(last.unwrap_or_default()),
        ..Default::default()
    }
}

fn condition(
    kind: &str,
    ok: bool,
    reason: Option<String>,
    message: Option<String>,
    prev: Option<&PodStatus>,
    now: Timestamp,
) -> PodCondition {
    let status = if ok { "True" } else { "False" }.to_string();
    let old = prev
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind));
    // The transition time only moves when the status does.
    let since = match old {
        Some(c) if c.status == status && c.last_transition_time.is_some() => {
            c.last_transition_time.clone()
        }
        _ => Some(now_time(now)),
    };
    PodCondition {
        type_: kind.to_string(),
        status,
        reason,
        message,
        last_transition_time: since,
        last_probe_time: None,
        observed_generation: None,
    }
}

fn names(cs: &[&model::ContainerStatus]) -> String {
    cs.iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The status of a pod that runs (or is starting) on this node.
pub fn build(
    pod: &Pod,
    obs: &Observed,
    node: &NodeAddrs,
    prev: Option<&PodStatus>,
    now: Timestamp,
) -> PodStatus {
    let spec = pod.spec.as_ref();
    let find = |list: Option<&Vec<Container>>, name: &str| {
        list.and_then(|l| l.iter().find(|c| c.name == name).cloned())
    };
    let prev_of = |list: Option<&Vec<ContainerStatus>>, name: &str| {
        list.and_then(|l| l.iter().find(|c| c.name == name).cloned())
    };
    let init: Vec<ContainerStatus> = obs
        .init_containers
        .iter()
        .map(|o| {
            container_status(
                pod,
                find(spec.and_then(|s| s.init_containers.as_ref()), &o.name).as_ref(),
                o,
                prev_of(
                    prev.and_then(|p| p.init_container_statuses.as_ref()),
                    &o.name,
                )
                .as_ref(),
            )
        })
        .collect();
    let apps: Vec<ContainerStatus> = obs
        .containers
        .iter()
        .map(|o| {
            container_status(
                pod,
                find(spec.map(|s| &s.containers), &o.name).as_ref(),
                o,
                prev_of(prev.and_then(|p| p.container_statuses.as_ref()), &o.name).as_ref(),
            )
        })
        .collect();

    let not_init: Vec<&model::ContainerStatus> = obs
        .init_containers
        .iter()
        .filter(|c| !c.init_done())
        .collect();
    let unready: Vec<&model::ContainerStatus> =
        obs.containers.iter().filter(|c| !c.ready).collect();
    let all_ready = obs.all_ready();
    let completed = matches!(obs.phase, Phase::Succeeded | Phase::Failed);
    let (ready_reason, ready_msg) = if all_ready {
        (None, None)
    } else if completed {
        (Some("PodCompleted".to_string()), None)
    } else {
        (
            Some("ContainersNotReady".to_string()),
            Some(format!(
                "containers with unready status: [{}]",
                names(&unready)
            )),
        )
    };
    let (init_reason, init_msg) = if obs.initialized {
        (None, None)
    } else {
        (
            Some("ContainersNotInitialized".to_string()),
            Some(format!(
                "containers with incomplete status: [{}]",
                names(&not_init)
            )),
        )
    };
    let mut conditions = vec![
        condition(
            "PodReadyToStartContainers",
            obs.pod_ready_to_start,
            None,
            None,
            prev,
            now,
        ),
        condition(
            "Initialized",
            obs.initialized,
            init_reason,
            init_msg,
            prev,
            now,
        ),
        condition(
            "Ready",
            all_ready,
            ready_reason.clone(),
            ready_msg.clone(),
            prev,
            now,
        ),
        condition(
            "ContainersReady",
            all_ready,
            ready_reason,
            ready_msg,
            prev,
            now,
        ),
        condition("PodScheduled", true, None, None, prev, now),
    ];
    keep_foreign_conditions(&mut conditions, prev);
    let start_time = prev
        .and_then(|p| p.start_time.clone())
        .or_else(|| time_us(obs.start_us));
    let ips = node.per_family();
    let pod_ips = if obs.pod_ips.is_empty() {
        ips.clone()
    } else {
        NodeAddrs {
            ips: obs.pod_ips.clone(),
        }
        .per_family()
    };
    PodStatus {
        phase: Some(obs.phase.as_str().to_string()),
        conditions: Some(conditions),
        host_ip: ips.first().cloned(),
        host_ips: (!ips.is_empty())
            .then(|| ips.iter().map(|ip| HostIP { ip: ip.clone() }).collect()),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        start_time,
        qos_class: Some(qos_class(pod).to_string()),
        init_container_statuses: (!init.is_empty()).then_some(init),
        container_statuses: Some(apps),
        ..Default::default()
    }
}

/// Conditions someone else owns (DisruptionTarget, readiness gates) survive our update.
fn keep_foreign_conditions(conditions: &mut Vec<PodCondition>, prev: Option<&PodStatus>) {
    for c in prev
        .and_then(|p| p.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        if !conditions.iter().any(|o| o.type_ == c.type_) {
            conditions.push(c.clone());
        }
    }
}

/// A pod this node will not run: phase Failed with the reason and message (as the kubelet's admission
/// rejection does), keeping the start time and conditions it already had.
pub fn rejected(
    pod: &Pod,
    reason: &str,
    message: &str,
    node: &NodeAddrs,
    prev: Option<&PodStatus>,
    now: Timestamp,
) -> PodStatus {
    let mut conditions = vec![
        condition("PodScheduled", true, None, None, prev, now),
        condition("Ready", false, Some("PodFailed".into()), None, prev, now),
    ];
    keep_foreign_conditions(&mut conditions, prev);
    let ips = node.per_family();
    PodStatus {
        phase: Some("Failed".into()),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        conditions: Some(conditions),
        host_ip: ips.first().cloned(),
        host_ips: (!ips.is_empty())
            .then(|| ips.iter().map(|ip| HostIP { ip: ip.clone() }).collect()),
        start_time: prev
            .and_then(|p| p.start_time.clone())
            .or_else(|| Some(now_time(now))),
        qos_class: Some(qos_class(pod).to_string()),
        ..Default::default()
    }
}

/// The pod's QoS class, as the API server computes it (`GetPodQOS`): Guaranteed when every container
/// has cpu and memory limits equal to its requests, BestEffort when none has any, else Burstable.
pub fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else {
        return "BestEffort";
    };
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    let mut any = false;
    let mut guaranteed = true;
    for c in all {
        let r = c.resources.as_ref();
        let req = r.and_then(|r| r.requests.as_ref());
        let lim = r.and_then(|r| r.limits.as_ref());
        for res in ["cpu", "memory"] {
            let q = req.and_then(|m| m.get(res)).map(|q| q.0.as_str());
            let l = lim.and_then(|m| m.get(res)).map(|q| q.0.as_str());
            if q.is_some_and(|q| !is_zero(q)) || l.is_some_and(|l| !is_zero(l)) {
                any = true;
            }
            match (q, l) {
                // An unset request defaults to the limit.
                (None, Some(_)) => {}
                (Some(q), Some(l)) if same_quantity(res, q, l) => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn is_zero(q: &str) -> bool {
    matches!(crate::common::quantity::cpu_millis(q), Ok(0))
        || matches!(crate::common::quantity::bytes(q), Ok(0))
}

fn same_quantity(resource: &str, a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    if resource == "cpu" {
        matches!((crate::common::quantity::cpu_millis(a), crate::common::quantity::cpu_millis(b)), (Ok(x), Ok(y)) if x == y)
    } else {
        matches!((crate::common::quantity::bytes(a), crate::common::quantity::bytes(b)), (Ok(x), Ok(y)) if x == y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::output::ContainerKind;

    fn pod(yaml: &str) -> Pod {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn web() -> Pod {
        pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: ns, uid: u1}\nspec:\n  initContainers: [{name: init, image: host}]\n  containers: [{name: app, image: host}, {name: side, image: host}]\n",
        )
    }

    fn c(name: &str, state: State, ready: bool, restarts: u32) -> model::ContainerStatus {
        model::ContainerStatus {
            name: name.into(),
            unit: format!("podunit-ns_web_{name}.service"),
            kind: if name == "init" {
                ContainerKind::Init
            } else {
                ContainerKind::App
            },
            active_state: String::new(),
            sub_state: String::new(),
            started: matches!(state, State::Running { .. }),
            state,
            last_state: None,
            ready,
            restart_count: restarts,
        }
    }

    fn done(code: i32) -> State {
        State::Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: 1_700_000_000_000_000,
            finished_at: 1_700_000_005_000_000,
        }
    }

    fn running() -> Observed {
        Observed {
            pod_ips: Vec::new(),
            phase: Phase::Running,
            pod_ready_to_start: true,
            initialized: true,
            start_us: 1_700_000_000_500_000,
            init_containers: vec![c("init", done(0), true, 0)],
            containers: vec![
                c(
                    "app",
                    State::Running {
                        started_at: 1_700_000_006_000_000,
                    },
                    true,
                    0,
                ),
                c(
                    "side",
                    State::Running {
                        started_at: 1_700_000_006_000_000,
                    },
                    true,
                    0,
                ),
            ],
        }
    }

    fn node() -> NodeAddrs {
        NodeAddrs {
            ips: vec!["192.0.2.10".into()],
        }
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn cond<'a>(s: &'a PodStatus, kind: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == kind)
            .unwrap()
    }

    #[test]
    fn running_pod() {
        let s = build(&web(), &running(), &node(), None, t(1_700_000_010));
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["phase"], "Running");
        assert_eq!(v["hostIP"], "192.0.2.10");
        assert_eq!(v["podIPs"][0]["ip"], "192.0.2.10");
        assert_eq!(v["startTime"], "2023-11-14T22:13:20Z");
        assert_eq!(v["qosClass"], "BestEffort");
        assert_eq!(
            v["containerStatuses"][0]["state"]["running"]["startedAt"],
            "2023-11-14T22:13:26Z"
        );
        assert_eq!(
            v["containerStatuses"][0]["containerID"],
            "podunit://podunit-ns_web_app.service"
        );
        assert_eq!(
            v["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        for k in [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        ] {
            assert_eq!(cond(&s, k).status, "True", "{k}");
        }
    }

    #[test]
    fn unchanged_status_compares_equal_and_keeps_transition_times() {
        let s1 = build(&web(), &running(), &node(), None, t(100));
        let s2 = build(&web(), &running(), &node(), Some(&s1), t(200));
        assert_eq!(s1, s2, "nothing changed: nothing to post");
        let mut o = running();
        o.containers[1].ready = false;
        o.containers[1].state = State::Waiting {
            reason: "CrashLoopBackOff".into(),
        };
        let s3 = build(&web(), &o, &node(), Some(&s2), t(300));
        assert_ne!(s2, s3);
        assert_eq!(cond(&s3, "Ready").status, "False");
        assert_eq!(cond(&s3, "Ready").last_transition_time, Some(Time(t(300))));
        assert_eq!(
            cond(&s3, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [side]")
        );
        assert_eq!(
            cond(&s3, "PodScheduled").last_transition_time,
            Some(Time(t(100)))
        );
        let w = s3.container_statuses.as_ref().unwrap()[1]
            .state
            .clone()
            .unwrap()
            .waiting
            .unwrap();
        assert_eq!(
            w.message.as_deref(),
            Some("back-off restarting failed container=side pod=web_ns(u1)")
        );
    }

    /// The exit code of the first app container's last termination.
    fn last_exit(s: PodStatus) -> i32 {
        let cs = s.container_statuses.unwrap().remove(0);
        cs.last_state.unwrap().terminated.unwrap().exit_code
    }

    #[test]
    fn one_pod_and_host_ip_per_family() {
        let two = NodeAddrs {
            ips: vec![
                "192.0.2.10".into(),
                "2001:db8::1".into(),
                "198.51.100.7".into(),
                "2001:db8::2".into(),
            ],
        };
        let s = build(&web(), &running(), &two, None, t(1_700_000_010));
        let ips = |v: &Option<Vec<PodIP>>| -> Vec<String> {
            v.iter().flatten().map(|p| p.ip.clone()).collect()
        };
        assert_eq!(ips(&s.pod_ips), ["192.0.2.10", "2001:db8::1"]);
        assert_eq!(s.pod_ip.as_deref(), Some("192.0.2.10"));
        let hosts: Vec<String> = s.host_ips.iter().flatten().map(|h| h.ip.clone()).collect();
        assert_eq!(hosts, ["192.0.2.10", "2001:db8::1"]);
        let r = rejected(&web(), "X", "y", &two, None, t(1_700_000_010));
        assert_eq!(r.host_ips.map(|h| h.len()), Some(2));
    }

    #[test]
    fn a_start_error_is_reported_with_its_message() {
        let mut o = running();
        o.containers[0].state = State::Waiting {
            reason: "CrashLoopBackOff".into(),
        };
        o.containers[0].last_state = Some(State::Terminated {
            exit_code: 128,
            signal: None,
            reason: "StartError".into(),
            message: Some("exec: \"/bin/app\": stat /bin/app: no such file or directory".into()),
            started_at: 1_700_000_000_000_000,
            finished_at: 1_700_000_000_000_000,
        });
        let s = build(&web(), &o, &node(), None, t(1_700_000_010));
        let cs = &s.container_statuses.unwrap()[0];
        let t = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(
            (t.exit_code, t.reason.as_deref()),
            (128, Some("StartError"))
        );
        assert_eq!(
            t.message.as_deref(),
            Some("exec: \"/bin/app\": stat /bin/app: no such file or directory")
        );
    }

    #[test]
    fn exit_code_restart_count_and_last_state() {
        let mut o = running();
        o.containers[0] = c("app", done(3), false, 0);
        o.containers[0].state = State::Waiting {
            reason: "CrashLoopBackOff".into(),
        };
        o.containers[0].last_state = Some(done(3));
        o.containers[0].restart_count = 2;
        let s = build(&web(), &o, &node(), None, t(100));
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.restart_count, 2);
        let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(last.exit_code, 3);
        assert_eq!(last.reason.as_deref(), Some("Error"));
        assert_eq!(last.finished_at, Some(Time(t(1_700_000_005))));

        // Running again: systemd no longer reports the old exit, the posted lastState is kept.
        let mut o2 = running();
        o2.containers[0].restart_count = 3;
        let s2 = build(&web(), &o2, &node(), Some(&s), t(200));
        let cs2 = &s2.container_statuses.as_ref().unwrap()[0];
        assert!(cs2.state.as_ref().unwrap().running.is_some());
        assert_eq!(last_exit(s2), 3);
    }

    #[test]
    fn terminated_while_running_becomes_last_state_after_restart() {
        let mut o = running();
        o.containers[0] = c("app", done(7), false, 0);
        let s1 = build(&web(), &o, &node(), None, t(100));
        let mut o2 = running();
        o2.containers[0].restart_count = 1;
        let s2 = build(&web(), &o2, &node(), Some(&s1), t(110));
        assert_eq!(last_exit(s2), 7);
    }

    #[test]
    fn pending_with_init_running() {
        let o = Observed {
            pod_ips: Vec::new(),
            phase: Phase::Pending,
            pod_ready_to_start: true,
            initialized: false,
            start_us: 1_700_000_000_000_000,
            init_containers: vec![c(
                "init",
                State::Running {
                    started_at: 1_700_000_000_000_000,
                },
                false,
                0,
            )],
            containers: vec![
                c(
                    "app",
                    State::Waiting {
                        reason: "PodInitializing".into(),
                    },
                    false,
                    0,
                ),
                c(
                    "side",
                    State::Waiting {
                        reason: "PodInitializing".into(),
                    },
                    false,
                    0,
                ),
            ],
        };
        let s = build(&web(), &o, &node(), None, t(100));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let i = cond(&s, "Initialized");
        assert_eq!(i.status, "False");
        assert_eq!(i.reason.as_deref(), Some("ContainersNotInitialized"));
        assert_eq!(
            i.message.as_deref(),
            Some("containers with incomplete status: [init]")
        );
    }

    #[test]
    fn succeeded_pod_ready_reason() {
        let mut o = running();
        o.phase = Phase::Succeeded;
        o.containers = vec![c("app", done(0), false, 0), c("side", done(0), false, 0)];
        let s = build(&web(), &o, &node(), None, t(100));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
    }

    #[test]
    fn foreign_conditions_survive() {
        let mut prev = build(&web(), &running(), &node(), None, t(100));
        prev.conditions.as_mut().unwrap().push(PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            ..Default::default()
        });
        let s = build(&web(), &running(), &node(), Some(&prev), t(200));
        assert_eq!(cond(&s, "DisruptionTarget").status, "True");
    }

    #[test]
    fn rejected_pod() {
        let s = rejected(
            &web(),
            "PolicyViolation",
            "refused by node policy policy.privileged: x",
            &node(),
            None,
            t(5),
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("PolicyViolation"));
        assert_eq!(cond(&s, "Ready").status, "False");
    }

    #[test]
    fn qos() {
        let p = |res: &str| {
            pod(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: q}}\nspec:\n  containers: [{{name: c, image: host, resources: {res}}}]\n"
            ))
        };
        assert_eq!(qos_class(&p("{}")), "BestEffort");
        assert_eq!(
            qos_class(&p("{limits: {cpu: '1', memory: 1Gi}}")),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&p(
                "{limits: {cpu: '1', memory: 1Gi}, requests: {cpu: 1000m, memory: 1Gi}}"
            )),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&p(
                "{limits: {cpu: '1', memory: 1Gi}, requests: {cpu: 500m}}"
            )),
            "Burstable"
        );
        assert_eq!(qos_class(&p("{requests: {memory: 64Mi}}")), "Burstable");
    }
}
