//! A container's Kubernetes state from its unit's systemd state: waiting (and why), running since
//! when, terminated with which exit code. Pure; the status model ([`crate::status::model`]) derives
//! every container's state here, for local and API pods alike.

use crate::generate::output::ContainerKind;
use crate::status::start_error;
use crate::systemd::unit::{ExitKind, SpawnFailure, UnitState};
use serde::{Serialize, Serializer};

/// Serialises µs since the epoch as RFC 3339, 0 (never) as null.
pub(crate) fn ser_time<S: Serializer>(us: &u64, s: S) -> Result<S::Ok, S::Error> {
    if *us == 0 {
        s.serialize_none()
    } else {
        s.serialize_str(&crate::common::timefmt::rfc3339(*us))
    }
}

/// Kubernetes `ContainerState`: exactly one of running, waiting, terminated. Times are µs since
/// the epoch (0 = unknown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    #[serde(rename_all = "camelCase")]
    Waiting { reason: String },
    #[serde(rename_all = "camelCase")]
    Running {
        #[serde(serialize_with = "ser_time")]
        started_at: u64,
    },
    #[serde(rename_all = "camelCase")]
    Terminated {
        exit_code: i32,
        #[serde(skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        reason: String,
        /// Why, in words: set for a start error ([`crate::status::start_error`]).
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(serialize_with = "ser_time")]
        started_at: u64,
        #[serde(serialize_with = "ser_time")]
        finished_at: u64,
    },
}

/// What of a container's unit its state depends on (systemd's properties of that name).
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitFacts<'a> {
    pub active_state: &'a str,
    pub sub_state: &'a str,
    /// `Result=`: success, exit-code, signal, core-dump, timeout, oom-kill, ...
    pub result: &'a str,
    /// `ExecMainCode=` and `ExecMainStatus=`.
    pub exit: ExitKind,
    pub exit_status: i32,
    /// `ExecMainStartTimestamp=` and `ExecMainExitTimestamp=`, µs (0 = never).
    pub start_us: u64,
    pub exit_us: u64,
    pub main_pid: u32,
    /// The journal's account of a step that failed before `execve()`, when the exit status
    /// says one did and the journal has it.
    pub start_error: Option<&'a SpawnFailure>,
}

impl<'a> UnitFacts<'a> {
    /// What a container's state depends on, of what systemd says about its unit.
    pub fn of(u: &'a UnitState) -> Self {
        UnitFacts {
            active_state: &u.active_state,
            sub_state: &u.sub_state,
            result: &u.result,
            exit: u.exec_main_code,
            exit_status: u.exec_main_status,
            start_us: u.exec_main_start_us,
            exit_us: u.exec_main_exit_us,
            main_pid: u.main_pid,
            start_error: u.start_error.as_ref(),
        }
    }

    /// Whether its main process ever ran.
    fn ran(&self) -> bool {
        self.exit != ExitKind::None || self.start_us != 0
    }

    /// Whether its main process runs now.
    fn running(&self) -> bool {
        (self.active_state == "active" && self.sub_state != "exited")
            || self.active_state == "reloading"
            || self.active_state == "deactivating"
    }
}

/// A container's state and what follows from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    pub state: State,
    /// The termination before the current wait (CrashLoopBackOff), while the unit still knows it.
    pub last_state: Option<State>,
    pub ready: bool,
    pub started: bool,
}

/// The last termination: exit code (128 + signal when killed), signal, the kubelet's reason;
/// a process systemd could not start is a `StartError` with exit code 128 and why, as
/// containerd reports a task that did not start ([`crate::status::start_error`]).
pub fn terminated(u: &UnitFacts) -> State {
    if start_error::is_start_error(u.exit, u.exit_status) {
        return State::Terminated {
            exit_code: start_error::EXIT_CODE,
            signal: None,
            reason: start_error::REASON.into(),
            message: Some(start_error::message(u.exit_status, u.start_error)),
            started_at: u.start_us,
            finished_at: u.exit_us,
        };
    }
    let exit_code = u.exit.exit_code(u.exit_status).unwrap_or(0);
    let signal = matches!(u.exit, ExitKind::Killed | ExitKind::Dumped).then_some(u.exit_status);
    let reason = if u.result == "oom-kill" {
        "OOMKilled"
    } else if exit_code == 0 {
        "Completed"
    } else {
        "Error"
    };
    State::Terminated {
        exit_code,
        signal,
        reason: reason.into(),
        message: None,
        started_at: u.start_us,
        finished_at: u.exit_us,
    }
}

/// The state of a container of `kind` whose unit is `u`. `blocked_reason` is what it waits for when
/// it has not run yet (ContainerCreating, PodInitializing).
pub fn derive(u: &UnitFacts, kind: ContainerKind, blocked_reason: &str) -> Derived {
    let (state, last_state) = match (u.active_state, u.sub_state) {
        // Between two runs systemd waits RestartSec=; the kubelet calls that CrashLoopBackOff.
        (_, "auto-restart") => (
            State::Waiting {
                reason: "CrashLoopBackOff".into(),
            },
            Some(terminated(u)),
        ),
        // A oneshot init container that finished (RemainAfterExit keeps it active/exited).
        ("active", "exited") => (terminated(u), None),
        ("activating", _) if kind == ContainerKind::Init && u.main_pid != 0 => (
            State::Running {
                started_at: u.start_us,
            },
            None,
        ),
        ("activating", _) => (
            State::Waiting {
                reason: "ContainerCreating".into(),
            },
            None,
        ),
        _ if u.running() => (
            State::Running {
                started_at: u.start_us,
            },
            None,
        ),
        ("inactive" | "failed", _) if u.ran() => (terminated(u), None),
        _ => (
            State::Waiting {
                reason: blocked_reason.into(),
            },
            None,
        ),
    };
    let ready = match &state {
        State::Running { .. } => u.active_state == "active",
        State::Terminated { exit_code, .. } => kind == ContainerKind::Init && *exit_code == 0,
        State::Waiting { .. } => false,
    };
    Derived {
        started: matches!(state, State::Running { .. }),
        state,
        last_state,
        ready,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit<'a>(active: &'a str, sub: &'a str) -> UnitFacts<'a> {
        UnitFacts {
            active_state: active,
            sub_state: sub,
            start_us: 5_000_000,
            main_pid: 7,
            ..Default::default()
        }
    }

    #[test]
    fn states_from_units() {
        let d = derive(&unit("active", "running"), ContainerKind::App, "X");
        assert_eq!(
            d.state,
            State::Running {
                started_at: 5_000_000
            }
        );
        assert!(d.ready && d.started);
        let never = UnitFacts::default();
        assert_eq!(
            derive(&never, ContainerKind::App, "PodInitializing").state,
            State::Waiting {
                reason: "PodInitializing".into()
            }
        );
        let crash = UnitFacts {
            exit: ExitKind::Killed,
            exit_status: 9,
            exit_us: 6_000_000,
            ..unit("activating", "auto-restart")
        };
        let d = derive(&crash, ContainerKind::App, "X");
        assert_eq!(
            d.state,
            State::Waiting {
                reason: "CrashLoopBackOff".into()
            }
        );
        assert!(matches!(
            d.last_state,
            Some(State::Terminated {
                exit_code: 137,
                signal: Some(9),
                ..
            })
        ));
        let done = UnitFacts {
            exit: ExitKind::Exited,
            ..unit("active", "exited")
        };
        let d = derive(&done, ContainerKind::Init, "X");
        assert!(d.ready, "a finished init container is ready");
        assert!(!derive(&done, ContainerKind::App, "X").ready);
        let oom = UnitFacts {
            exit: ExitKind::Killed,
            exit_status: 9,
            result: "oom-kill",
            ..unit("failed", "failed")
        };
        assert!(matches!(
            derive(&oom, ContainerKind::App, "X").state,
            State::Terminated { reason, .. } if reason == "OOMKilled"
        ));
        // systemd could not exec the command: a start error, as containerd reports it.
        let detail = SpawnFailure {
            executable: "/bin/app".into(),
            errno: Some(2),
        };
        let not_started = UnitFacts {
            exit: ExitKind::Exited,
            exit_status: 203,
            result: "exit-code",
            start_error: Some(&detail),
            ..unit("activating", "auto-restart")
        };
        match derive(&not_started, ContainerKind::App, "X").last_state {
            Some(State::Terminated {
                exit_code: 128,
                signal: None,
                reason,
                message: Some(m),
                ..
            }) => {
                assert_eq!(reason, "StartError");
                assert!(
                    m.starts_with("exec: \"/bin/app\": stat /bin/app: no such file or directory"),
                    "{m}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            derive(&unit("activating", "start"), ContainerKind::Init, "X").state,
            State::Running { .. }
        ));
        assert!(matches!(
            derive(&unit("activating", "start"), ContainerKind::App, "X").state,
            State::Waiting { reason } if reason == "ContainerCreating"
        ));
    }
}
