//! The pod-level rules of the status model ([`crate::status::model`]), from container states to the
//! pod's: whether the pod unit (the sandbox) is up, what a container that has not run waits for,
//! when an init container is done or has failed for good, whether a terminated container runs
//! again, and the phase (the kubelet's `getPhase`).

use crate::generate::output::ContainerKind;
use crate::status::container::State;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    /// As the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Unknown => "Unknown",
        }
    }
}

/// Whether the pod unit is up (its containers may start), from its `ActiveState=`.
pub fn pod_up(active_state: &str) -> bool {
    active_state == "active" || active_state == "reloading"
}

/// What a container that has not run yet waits for: the pod unit, or the init containers before it.
pub fn waiting_reason(pod_up: bool, inits_done: bool) -> &'static str {
    if pod_up || !inits_done {
        "PodInitializing"
    } else {
        "ContainerCreating"
    }
}

/// Whether an init container no longer holds up the app containers: a sidecar once it started,
/// any other once it exited 0.
pub fn init_done(kind: ContainerKind, state: &State, started: bool) -> bool {
    match kind {
        ContainerKind::Sidecar => started,
        _ => matches!(state, State::Terminated { exit_code: 0, .. }),
    }
}

/// Whether an init container failed and will not run again: that fails the pod (the kubelet's
/// `failedInitialization` under `restartPolicy: Never`). Sidecars do not count.
pub fn init_failed(kind: ContainerKind, restart: Restart, state: &State) -> bool {
    kind == ContainerKind::Init
        && matches!(state, State::Terminated { exit_code, .. } if *exit_code != 0)
        && !restart.will_restart(state)
}

/// When a container runs again after it terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    Always,
    OnFailure,
    Never,
}

impl Restart {
    /// From the pod's `restartPolicy` (the caller defaults an unset one to `Always`).
    pub fn from_policy(policy: &str) -> Restart {
        match policy {
            "Always" => Restart::Always,
            "OnFailure" => Restart::OnFailure,
            _ => Restart::Never,
        }
    }

    /// A container of `kind` in a pod with `policy`, as the kubelet restarts it (and the generator
    /// writes its `Restart=`): a sidecar always, an init container after a failure unless the pod
    /// never restarts, an app container by the policy.
    pub fn of_container(kind: ContainerKind, policy: &str) -> Restart {
        match (kind, Restart::from_policy(policy)) {
            (ContainerKind::Sidecar, _) => Restart::Always,
            (ContainerKind::Init, Restart::Never) => Restart::Never,
            (ContainerKind::Init, _) => Restart::OnFailure,
            (ContainerKind::App, r) => r,
        }
    }

    /// From the unit's `Restart=`, as the generator wrote it.
    pub fn from_unit(restart: &str) -> Restart {
        match restart {
            "always" => Restart::Always,
            "on-failure" => Restart::OnFailure,
            _ => Restart::Never,
        }
    }

    /// Whether a container in `state` runs (again) by itself. Decides Succeeded/Failed versus
    /// Running.
    pub fn will_restart(self, state: &State) -> bool {
        match (state, self) {
            (State::Terminated { .. }, Restart::Always) => true,
            (State::Terminated { exit_code, .. }, Restart::OnFailure) => *exit_code != 0,
            (State::Terminated { .. }, Restart::Never) => false,
            _ => true,
        }
    }
}

/// What of an app container the phase depends on.
#[derive(Debug, Clone, Copy)]
pub struct App<'a> {
    pub state: &'a State,
    pub restart: Restart,
    pub started: bool,
    /// It terminated before (a last state is known).
    pub ran_before: bool,
}

/// The pod's phase: Failed once an init container failed for good ([`init_failed`]), Pending until
/// the init containers are done, Succeeded or Failed when no app container will run again, Running
/// once one has run.
pub fn phase(inits_done: bool, init_failed: bool, apps: &[App]) -> Phase {
    let exit0 = |a: &App| matches!(a.state, State::Terminated { exit_code: 0, .. });
    if init_failed {
        Phase::Failed
    } else if !inits_done {
        Phase::Pending
    } else if !apps.is_empty() && apps.iter().all(|a| !a.restart.will_restart(a.state)) {
        if apps.iter().all(exit0) {
            Phase::Succeeded
        } else {
            Phase::Failed
        }
    } else if apps.iter().any(|a| a.started || a.ran_before) {
        Phase::Running
    } else {
        Phase::Pending
    }
}

/// When the pod started: when its pod unit became active, else when its main process started
/// (µs, 0 = not yet).
pub fn start_us(active_enter_us: u64, exec_main_start_us: u64) -> u64 {
    if active_enter_us != 0 {
        active_enter_us
    } else {
        exec_main_start_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(code: i32) -> State {
        State::Terminated {
            exit_code: code,
            signal: None,
            reason: String::new(),
            message: None,
            started_at: 1,
            finished_at: 2,
        }
    }

    #[test]
    fn both_spellings_of_a_restart_policy_agree() {
        for (api, unit) in [
            ("Always", "always"),
            ("OnFailure", "on-failure"),
            ("Never", "no"),
        ] {
            assert_eq!(Restart::from_policy(api), Restart::from_unit(unit));
        }
        assert!(Restart::OnFailure.will_restart(&done(1)));
        assert!(!Restart::OnFailure.will_restart(&done(0)));
        assert!(!Restart::Never.will_restart(&done(1)));
        // The generator's `Restart=` for each kind of container (translate/container.rs).
        for (kind, policy, unit) in [
            (ContainerKind::Init, "Never", "no"),
            (ContainerKind::Init, "OnFailure", "on-failure"),
            (ContainerKind::Init, "Always", "on-failure"),
            (ContainerKind::Sidecar, "Never", "always"),
            (ContainerKind::App, "Always", "always"),
            (ContainerKind::App, "OnFailure", "on-failure"),
            (ContainerKind::App, "Never", "no"),
        ] {
            assert_eq!(
                Restart::of_container(kind, policy),
                Restart::from_unit(unit),
                "{kind:?} {policy}"
            );
        }
    }

    #[test]
    fn only_an_init_container_that_will_not_run_again_fails_the_pod() {
        let failed = done(1);
        assert!(init_failed(ContainerKind::Init, Restart::Never, &failed));
        assert!(!init_failed(
            ContainerKind::Init,
            Restart::OnFailure,
            &failed
        ));
        assert!(!init_failed(
            ContainerKind::Sidecar,
            Restart::Never,
            &failed
        ));
        assert!(!init_failed(ContainerKind::Init, Restart::Never, &done(0)));
    }

    #[test]
    fn waiting_reasons_and_phases() {
        assert_eq!(waiting_reason(false, true), "ContainerCreating");
        assert_eq!(waiting_reason(true, true), "PodInitializing");
        assert_eq!(waiting_reason(false, false), "PodInitializing");
        let app = |state, restart| App {
            state,
            restart,
            started: false,
            ran_before: false,
        };
        let (ok, failed) = (done(0), done(1));
        assert_eq!(
            phase(false, false, &[app(&ok, Restart::Never)]),
            Phase::Pending
        );
        assert_eq!(
            phase(true, false, &[app(&ok, Restart::Never)]),
            Phase::Succeeded
        );
        assert_eq!(
            phase(true, false, &[app(&failed, Restart::Never)]),
            Phase::Failed
        );
        assert_eq!(
            phase(true, false, &[app(&failed, Restart::Always)]),
            Phase::Pending
        );
        assert_eq!(phase(true, false, &[]), Phase::Pending);
        assert_eq!(start_us(0, 7), 7);
        assert_eq!(start_us(5, 7), 5);
    }
}
