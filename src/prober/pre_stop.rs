//! A probed container's preStop hook, run by podunit-sync before it kills the container after a
//! failed liveness or startup probe (the kubelet's `executePreStopHook`): `exec` inside the
//! container as exec probes run ([`super::exec`]), `httpGet` and `sleep` as `podunit hook` runs
//! them ([`super::hook_run`]). systemd runs the unit's `ExecStop=` once the killed main process
//! has exited, but `podunit hook --pre-stop` does nothing then (no `$MAINPID`), so the hook runs
//! once per kill.

use super::check::Get;
use super::hook_run::{self, Answer};
use crate::kube::hook_events::Exit;
use crate::probe::hook::Hook;
use std::time::Duration;

/// How a hook failed, as [`crate::kube::hook_events::events`] words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub exit: Exit,
    /// An httpGet hook's error.
    pub error: Option<String>,
    /// An exec hook's output.
    pub output: String,
}

/// Where a hook runs: the container's unit, the CLI binary exec hooks run from, the pod's IP.
pub struct Target<'a> {
    pub client: &'a crate::systemd::Client,
    pub podunit: &'a str,
    pub unit: &'a str,
    pub pod_ip: &'a str,
}

/// Runs `hook` for at most `budget` (an exec hook is killed then; the caller stops waiting for
/// the others). `Ok` carries what to note in the journal (an HTTPS request answered in HTTP).
pub fn run(hook: &Hook, t: &Target<'_>, budget: Duration) -> Result<Option<String>, Failed> {
    match hook {
        Hook::Exec(cmd) => {
            let ran = super::exec::run_raw(t.client, t.podunit, t.unit, cmd, budget);
            exec_result(ran).map(|()| None)
        }
        Hook::Sleep(s) => {
            std::thread::sleep(Duration::from_secs(u64::try_from(*s).unwrap_or(0)).min(budget));
            Ok(None)
        }
        Hook::Http(h) => {
            let Some(req) = Get::of(h) else {
                return Ok(None);
            };
            match hook_run::http(&req, t.pod_ip) {
                Ok(Answer::Direct) => Ok(None),
                Ok(Answer::HttpFallback(host)) => {
                    Ok(Some(crate::kube::hook_events::fallback_message(&host)))
                }
                Err(e) => Err(Failed {
                    exit: Exit::Status(1),
                    error: Some(e),
                    output: String::new(),
                }),
            }
        }
    }
}

/// An exec hook's end, from what stage one reported ([`super::exec::Ran`]).
fn exec_result(ran: Result<super::exec::Ran, String>) -> Result<(), Failed> {
    let failed = |exit, output| {
        Err(Failed {
            exit,
            error: None,
            output,
        })
    };
    let ran = match ran {
        Ok(r) => r,
        Err(e) => return failed(Exit::Status(i32::from(super::exec::ENTER_FAILED)), e),
    };
    let status = ran.status.trim();
    if let Some(code) = status.strip_prefix("exit ") {
        return match code.parse::<i32>() {
            Ok(0) => Ok(()),
            Ok(n) => failed(Exit::Status(n), ran.output),
            Err(_) => failed(Exit::Status(1), ran.output),
        };
    }
    if let Some(n) = status.strip_prefix("signal ") {
        let n = n.parse().unwrap_or(0);
        return failed(
            Exit::Signal(crate::kube::hook_events::signal_name(n)),
            ran.output,
        );
    }
    if status == "timeout" {
        return failed(Exit::Signal("KILL".into()), ran.output);
    }
    let why = status.strip_prefix("error ").unwrap_or("no result");
    failed(
        Exit::Status(i32::from(super::exec::ENTER_FAILED)),
        why.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prober::exec::Ran;

    fn ran(status: &str, output: &str) -> Result<Ran, String> {
        Ok(Ran {
            status: status.into(),
            output: output.into(),
        })
    }

    #[test]
    fn exec_ends() {
        assert_eq!(exec_result(ran("exit 0\n", "x")), Ok(()));
        let f = exec_result(ran("exit 3\n", "bye")).unwrap_err();
        assert_eq!((f.exit, f.output.as_str()), (Exit::Status(3), "bye"));
        let f = exec_result(ran("signal 15\n", "")).unwrap_err();
        assert_eq!(f.exit, Exit::Signal("TERM".into()));
        let f = exec_result(ran("timeout\n", "")).unwrap_err();
        assert_eq!(f.exit, Exit::Signal("KILL".into()));
        let f = exec_result(ran("error the container is not running", "")).unwrap_err();
        assert_eq!(
            (f.exit, f.output.as_str()),
            (Exit::Status(126), "the container is not running")
        );
        let f = exec_result(Err("no bus".into())).unwrap_err();
        assert_eq!(f.output, "no bus");
    }
}
