//! The status model ([`crate::status::model`]) of an API pod: its spec names the containers and the
//! restart policy, the agent's unit properties say how they run. Pure; the properties come from
//! systemd (`systemctl show`, parsed here).

use crate::localsync::generator_output::ContainerKind;
use crate::status::container::UnitFacts;
use crate::status::model::{self, ContainerUnit, Observed, PodUnit};
use crate::status::phase::Restart;
use crate::status::unit::ExitKind;
use crate::translate::naming;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;

/// The properties of one service unit that status needs (µs since the epoch, 0 = never).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnitProps {
    pub load_state: String,
    pub active_state: String,
    pub sub_state: String,
    /// `Result=`: success, exit-code, signal, core-dump, timeout, oom-kill, ...
    pub result: String,
    pub n_restarts: u32,
    /// `ExecMainCode=`: 0 never exited, 1 exited, 2 killed, 3 dumped (CLD_* codes).
    pub exec_main_code: i32,
    pub exec_main_status: i32,
    pub exec_main_start_us: u64,
    pub exec_main_exit_us: u64,
    pub active_enter_us: u64,
    pub main_pid: u32,
}

impl UnitProps {
    /// What the container state depends on ([`crate::status::container`]).
    fn facts(&self) -> UnitFacts<'_> {
        UnitFacts {
            active_state: &self.active_state,
            sub_state: &self.sub_state,
            result: &self.result,
            exit: ExitKind::from_code(self.exec_main_code),
            exit_status: self.exec_main_status,
            start_us: self.exec_main_start_us,
            exit_us: self.exec_main_exit_us,
            main_pid: self.main_pid,
        }
    }
}

/// Whether every unit of a pod is stopped (or unknown to systemd).
pub fn all_stopped<'a>(units: impl IntoIterator<Item = &'a UnitProps>) -> bool {
    units
        .into_iter()
        .all(|u| matches!(u.active_state.as_str(), "inactive" | "failed" | ""))
}

/// The pod as its units show it. `units` maps unit names to properties (missing = never loaded).
pub fn observe(pod: &Pod, units: &HashMap<String, UnitProps>) -> Observed {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    // A unit systemd does not know, as the local view sees one (`UnitState::absent`).
    let none = UnitProps {
        load_state: "not-found".into(),
        active_state: "inactive".into(),
        sub_state: "dead".into(),
        ..UnitProps::default()
    };
    let get = |u: &str| units.get(u).unwrap_or(&none);
    let spec = pod.spec.clone().unwrap_or_default();
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let inits = spec.init_containers.iter().flatten().map(|c| {
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        let kind = if sidecar {
            ContainerKind::Sidecar
        } else {
            ContainerKind::Init
        };
        (c, kind)
    });
    let apps = spec.containers.iter().map(|c| (c, ContainerKind::App));
    let named: Vec<(&str, ContainerKind, String)> = inits
        .chain(apps)
        .map(|(c, kind)| {
            (
                c.name.as_str(),
                kind,
                naming::container_service(ns, name, &c.name),
            )
        })
        .collect();
    let containers: Vec<ContainerUnit> = named
        .iter()
        .map(|(name, kind, unit)| {
            let u = get(unit);
            ContainerUnit {
                name,
                unit,
                kind: *kind,
                restart: Restart::of_container(*kind, policy),
                facts: u.facts(),
                restart_count: u.n_restarts,
            }
        })
        .collect();
    let pu = get(&naming::pod_service(ns, name));
    let pod_unit = PodUnit {
        active_state: &pu.active_state,
        active_enter_us: pu.active_enter_us,
        exec_main_start_us: pu.exec_main_start_us,
    };
    model::observe(pod_unit, &containers)
}

/// The unit names of a pod (pod unit first), for asking systemd.
pub fn pod_units(pod: &Pod) -> Vec<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let mut out = vec![naming::pod_service(ns, name)];
    if let Some(spec) = &pod.spec {
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
        {
            out.push(naming::container_service(ns, name, &c.name));
        }
    }
    out
}

/// Parses `systemctl show --timestamp=unix` output (blocks separated by blank lines, `Id=` first).
pub fn parse_show(text: &str) -> HashMap<String, UnitProps> {
    let mut out = HashMap::new();
    for block in text.split("\n\n") {
        let mut id = String::new();
        let mut u = UnitProps::default();
        for line in block.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let ts = || {
                v.strip_prefix('@')
                    .and_then(|s| s.parse::<u64>().ok())
                    .map_or(0, |s| s * 1_000_000)
            };
            match k {
                "Id" => id = v.to_string(),
                "LoadState" => u.load_state = v.into(),
                "ActiveState" => u.active_state = v.into(),
                "SubState" => u.sub_state = v.into(),
                "Result" => u.result = v.into(),
                "NRestarts" => u.n_restarts = v.parse().unwrap_or(0),
                "ExecMainCode" => u.exec_main_code = v.parse().unwrap_or(0),
                "ExecMainStatus" => u.exec_main_status = v.parse().unwrap_or(0),
                "ExecMainStartTimestamp" => u.exec_main_start_us = ts(),
                "ExecMainExitTimestamp" => u.exec_main_exit_us = ts(),
                "ActiveEnterTimestamp" => u.active_enter_us = ts(),
                "MainPID" => u.main_pid = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        if !id.is_empty() {
            out.insert(id, u);
        }
    }
    out
}

/// The properties `parse_show` reads.
pub const SHOW_PROPERTIES: &str = "Id,LoadState,ActiveState,SubState,Result,NRestarts,ExecMainCode,ExecMainStatus,ExecMainStartTimestamp,ExecMainExitTimestamp,ActiveEnterTimestamp,MainPID";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::container::State;
    use crate::status::phase::Phase;

    fn pod(restart: &str) -> Pod {
        serde_saphyr::from_str(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: web, namespace: ns}}\nspec:\n  restartPolicy: {restart}\n  initContainers: [{{name: init, image: host}}]\n  containers: [{{name: app, image: host}}]\n"
        ))
        .unwrap()
    }

    fn u(active: &str, sub: &str) -> UnitProps {
        UnitProps {
            load_state: "loaded".into(),
            active_state: active.into(),
            sub_state: sub.into(),
            ..Default::default()
        }
    }

    fn exited(code: i32) -> UnitProps {
        UnitProps {
            exec_main_code: 1,
            exec_main_status: code,
            exec_main_start_us: 10_000_000,
            exec_main_exit_us: 12_000_000,
            result: if code == 0 { "success" } else { "exit-code" }.into(),
            ..u(
                if code == 0 { "inactive" } else { "failed" },
                if code == 0 { "dead" } else { "failed" },
            )
        }
    }

    fn units(list: &[(&str, UnitProps)]) -> HashMap<String, UnitProps> {
        list.iter()
            .map(|(n, p)| (n.to_string(), p.clone()))
            .collect()
    }

    const POD: &str = "podunit-ns_web.service";
    const INIT: &str = "podunit-ns_web_init.service";
    const APP: &str = "podunit-ns_web_app.service";

    #[test]
    fn nothing_loaded_is_pending_container_creating() {
        let o = observe(&pod("Always"), &HashMap::new());
        assert_eq!(o.phase, Phase::Pending);
        assert!(!o.pod_ready_to_start);
        assert_eq!(
            o.containers[0].state,
            State::Waiting {
                reason: "PodInitializing".into()
            }
        );
        assert_eq!(
            o.init_containers[0].state,
            State::Waiting {
                reason: "ContainerCreating".into()
            }
        );
    }

    #[test]
    fn running_after_init() {
        let mut init = exited(0);
        init.active_state = "active".into();
        init.sub_state = "exited".into();
        let mut app = u("active", "running");
        app.exec_main_start_us = 13_000_000;
        let mut p = u("active", "exited");
        p.active_enter_us = 9_000_000;
        let o = observe(
            &pod("Always"),
            &units(&[(POD, p), (INIT, init), (APP, app)]),
        );
        assert_eq!(o.phase, Phase::Running);
        assert!(o.initialized && o.pod_ready_to_start);
        assert_eq!(o.start_us, 9_000_000);
        assert!(o.containers[0].ready);
        assert_eq!(
            o.containers[0].state,
            State::Running {
                started_at: 13_000_000
            }
        );
        assert!(o.init_containers[0].ready);
    }

    #[test]
    fn crash_loop_with_exit_code_and_restarts() {
        let mut init = exited(0);
        init.active_state = "active".into();
        init.sub_state = "exited".into();
        let mut app = exited(3);
        app.active_state = "activating".into();
        app.sub_state = "auto-restart".into();
        app.n_restarts = 2;
        let o = observe(
            &pod("Always"),
            &units(&[(POD, u("active", "exited")), (INIT, init), (APP, app)]),
        );
        assert_eq!(o.phase, Phase::Running);
        let c = &o.containers[0];
        assert_eq!(
            c.state,
            State::Waiting {
                reason: "CrashLoopBackOff".into()
            }
        );
        assert!(matches!(
            c.last_state,
            Some(State::Terminated { exit_code: 3, .. })
        ));
        assert_eq!(c.restart_count, 2);
    }

    #[test]
    fn never_policy_exit_3_is_failed_and_signal_is_128_plus() {
        let mut init = exited(0);
        init.active_state = "active".into();
        init.sub_state = "exited".into();
        let o = observe(
            &pod("Never"),
            &units(&[
                (POD, u("active", "exited")),
                (INIT, init.clone()),
                (APP, exited(3)),
            ]),
        );
        assert_eq!(o.phase, Phase::Failed);
        assert!(
            matches!(o.containers[0].state, State::Terminated { exit_code: 3, ref reason, .. } if reason == "Error")
        );
        let mut killed = exited(9);
        killed.exec_main_code = 2;
        let o = observe(
            &pod("Never"),
            &units(&[
                (POD, u("active", "exited")),
                (INIT, init.clone()),
                (APP, killed),
            ]),
        );
        assert!(matches!(
            o.containers[0].state,
            State::Terminated {
                exit_code: 137,
                signal: Some(9),
                ..
            }
        ));
        let o = observe(
            &pod("Never"),
            &units(&[(POD, u("active", "exited")), (INIT, init), (APP, exited(0))]),
        );
        assert_eq!(o.phase, Phase::Succeeded);
    }

    #[test]
    fn failed_init_blocks_apps() {
        let o = observe(
            &pod("Never"),
            &units(&[(POD, u("active", "exited")), (INIT, exited(1))]),
        );
        assert_eq!(o.phase, Phase::Failed);
        assert!(!o.initialized);
        assert_eq!(
            o.containers[0].state,
            State::Waiting {
                reason: "PodInitializing".into()
            }
        );
    }

    #[test]
    fn show_output_parses() {
        let text = "Id=podunit-ns_web_app.service\nLoadState=loaded\nActiveState=failed\nSubState=failed\nResult=exit-code\nNRestarts=4\nExecMainCode=1\nExecMainStatus=3\nExecMainStartTimestamp=@1700000000\nExecMainExitTimestamp=@1700000005\nActiveEnterTimestamp=n/a\nMainPID=0\n\nId=podunit-ns_web.service\nActiveState=active\nSubState=exited\n";
        let m = parse_show(text);
        let a = &m["podunit-ns_web_app.service"];
        assert_eq!(a.n_restarts, 4);
        assert_eq!(a.exec_main_status, 3);
        assert_eq!(a.exec_main_start_us, 1_700_000_000_000_000);
        assert_eq!(a.active_enter_us, 0);
        assert_eq!(m["podunit-ns_web.service"].sub_state, "exited");
        assert!(!all_stopped(m.values()));
    }
}
