//! The status model ([`crate::status::model`]) of an API pod: its spec names the containers and the
//! restart policy, systemd's unit states ([`UnitState`]) say how they run. Pure.

use crate::generate::output::ContainerKind;
use crate::status::model::{self, ContainerUnit, Observed, PodUnit};
use crate::status::phase::Restart;
use crate::systemd::unit::UnitState;
use crate::translate::naming;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;

/// Whether every unit of a pod is stopped (or unknown to systemd).
pub fn all_stopped<'a>(units: impl IntoIterator<Item = &'a UnitState>) -> bool {
    units
        .into_iter()
        .all(|u| matches!(u.active_state.as_str(), "inactive" | "failed" | ""))
}

/// The pod as its units show it. `units` maps unit names to properties (missing = never loaded).
pub fn observe(pod: &Pod, units: &HashMap<String, UnitState>) -> Observed {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let none = UnitState::absent("");
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
                facts: crate::status::container::UnitFacts::of(u),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::container::State;
    use crate::status::phase::Phase;
    use crate::systemd::unit::ExitKind;

    fn pod(restart: &str) -> Pod {
        serde_saphyr::from_str(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: web, namespace: ns}}\nspec:\n  restartPolicy: {restart}\n  initContainers: [{{name: init, image: host}}]\n  containers: [{{name: app, image: host}}]\n"
        ))
        .unwrap()
    }

    fn u(active: &str, sub: &str) -> UnitState {
        UnitState {
            load_state: "loaded".into(),
            active_state: active.into(),
            sub_state: sub.into(),
            ..Default::default()
        }
    }

    fn exited(code: i32) -> UnitState {
        UnitState {
            exec_main_code: ExitKind::Exited,
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

    fn units(list: &[(&str, UnitState)]) -> HashMap<String, UnitState> {
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
        killed.exec_main_code = ExitKind::Killed;
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
}
