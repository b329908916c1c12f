//! The node agent's view of systemd: reload, read unit properties, stop, and wait for changes.
//!
//! A trait, so the agent's loops are tested against the API server double without a systemd, and
//! so the D-Bus client (signals instead of waiting) can replace the `systemctl` implementation
//! without touching the loops.

use crate::kube::hook_events::{self, HookExit};
use crate::systemd::unit::{ExitKind, UnitState};
use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::time::Duration;

pub trait Units: Send + Sync {
    /// `daemon-reload`, then have new pods started (the generator has just rendered them).
    fn reload(&self) -> Result<(), String>;
    /// Properties of the named units (unknown units may be missing or reported inactive).
    fn props(&self, units: &[String]) -> Result<HashMap<String, UnitState>, String>;
    /// Stops the units (`kill`: SIGKILL them now, the grace period is over).
    fn stop(&self, units: &[String], kill: bool) -> Result<(), String>;
    /// Blocks until systemd reports a unit change or `timeout` passes; true when something changed.
    fn wait_change(&self, timeout: Duration) -> bool;
    /// Starts `argv` once as the transient unit `name` in the service manager's context (outside
    /// podunit-sync's sandbox), without waiting for it; the unit is collected when done.
    fn run_once(&self, name: &str, description: &str, argv: &[String]) -> Result<(), String>;
    /// The container units' failed lifecycle hook runs (`ExecStartPost=`, `ExecStop=`) after the
    /// journal cursor `after`, or since `since_s` (see [`hook_events::journal_args`]). From the
    /// journal whichever edge talks to systemd: it keeps them after the units are gone.
    fn hook_exits(
        &self,
        units: &[String],
        after: Option<&str>,
        since_s: i64,
    ) -> Result<Vec<HookExit>, String> {
        journal_hook_exits(units, after, since_s)
    }
    /// Waits until journald has stored every message sent to it so far (`journalctl --sync`),
    /// so that a read right after a unit stopped sees systemd's lines about that stop. Best
    /// effort: without it the read is only as late as journald is.
    fn sync_journal(&self) -> Result<(), String> {
        succeeds(
            "journalctl --sync",
            Command::new("journalctl").arg("--sync"),
        )
    }
    /// Load, active and sub state of every podunit unit systemd has loaded, in one call; `None`
    /// when this edge cannot list them cheaply.
    fn states(&self) -> Option<HashMap<String, UnitStates>> {
        None
    }
    /// Like [`Units::wait_change`], naming the units that changed when the edge can tell, so only
    /// their pods' status is recomputed.
    fn wait_changes(&self, timeout: Duration) -> Changes {
        if self.wait_change(timeout) {
            Changes::All
        } else {
            Changes::None
        }
    }
}

/// A unit's `(LoadState, ActiveState, SubState)`.
pub type UnitStates = (String, String, String);

/// What systemd reported during one wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changes {
    /// Nothing.
    None,
    /// Any unit may have changed (an edge that cannot tell which).
    All,
    /// These units changed.
    Units(BTreeSet<String>),
    /// A daemon-reload finished, and these units changed. A reload can change any unit's load
    /// state without a signal for it; [`Units::states`] tells which did.
    Reloaded(BTreeSet<String>),
}

impl Changes {
    /// Adds what `other` reports.
    pub fn merge(&mut self, other: Changes) {
        *self = match (std::mem::replace(self, Changes::None), other) {
            (c, Changes::None) | (Changes::None, c) => c,
            (Changes::All, _) | (_, Changes::All) => Changes::All,
            (Changes::Units(mut a), Changes::Units(b)) => {
                a.extend(b);
                Changes::Units(a)
            }
            // Either side saw a reload: so did both together.
            (
                Changes::Units(mut a) | Changes::Reloaded(mut a),
                Changes::Units(b) | Changes::Reloaded(b),
            ) => {
                a.extend(b);
                Changes::Reloaded(a)
            }
        };
    }
}

/// `systemctl` as the edge: works on any systemd, no bus library. Its `wait_change` cannot see
/// signals and simply waits, so status follows within one wait period.
pub struct Systemctl {
    pub period: Duration,
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new("systemctl")
        .args(args)
        .output()
        .map_err(|e| format!("systemctl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "systemctl {}: {}",
            args.first().copied().unwrap_or(""),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs `cmd`; its stderr, after `what`, when it fails.
fn succeeds(what: &str, cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The journal's record of failed hook runs (see [`hook_events::parse_journal`]).
fn journal_hook_exits(
    units: &[String],
    after: Option<&str>,
    since_s: i64,
) -> Result<Vec<HookExit>, String> {
    if units.is_empty() {
        return Ok(Vec::new());
    }
    let out = Command::new("journalctl")
        .args(hook_events::journal_args(units, after, since_s))
        .output()
        .map_err(|e| format!("journalctl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "journalctl: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(hook_events::parse_journal(&String::from_utf8_lossy(
        &out.stdout,
    )))
}

impl Units for Systemctl {
    fn reload(&self) -> Result<(), String> {
        run(&["daemon-reload"])?;
        // Starting the target starts pods that are new; running ones are left alone.
        run(&["start", "--no-block", "podunit.target"]).map(|_| ())
    }

    fn props(&self, units: &[String]) -> Result<HashMap<String, UnitState>, String> {
        let mut args = vec!["show", "--timestamp=unix", "-p", SHOW_PROPERTIES];
        args.extend(units.iter().map(String::as_str));
        run(&args).map(|t| parse_show(&t))
    }

    fn stop(&self, units: &[String], kill: bool) -> Result<(), String> {
        let mut args: Vec<&str> = if kill {
            vec!["kill", "--signal=SIGKILL"]
        } else {
            vec!["stop", "--no-block"]
        };
        args.extend(units.iter().map(String::as_str));
        run(&args).map(|_| ())
    }

    fn wait_change(&self, timeout: Duration) -> bool {
        std::thread::sleep(timeout.min(self.period));
        true
    }

    fn run_once(&self, name: &str, description: &str, argv: &[String]) -> Result<(), String> {
        let unit = format!("--unit={name}");
        let desc = format!("--description={description}");
        let mut args = vec![
            unit.as_str(),
            desc.as_str(),
            "--collect",
            "--no-block",
            "--",
        ];
        args.extend(argv.iter().map(String::as_str));
        succeeds(
            &format!("systemd-run {name}"),
            Command::new("systemd-run").args(&args),
        )
    }
}

/// Parses `systemctl show --timestamp=unix` output (blocks separated by blank lines, `Id=` first).
fn parse_show(text: &str) -> HashMap<String, UnitState> {
    let mut out = HashMap::new();
    for block in text.split("\n\n") {
        let mut id = String::new();
        let mut u = UnitState::default();
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
                "FragmentPath" => u.fragment_path = v.into(),
                "InvocationID" => u.invocation_id = v.into(),
                "LoadState" => u.load_state = v.into(),
                "ActiveState" => u.active_state = v.into(),
                "SubState" => u.sub_state = v.into(),
                "Result" => u.result = v.into(),
                "NRestarts" => u.n_restarts = v.parse().unwrap_or(0),
                "ExecMainCode" => u.exec_main_code = ExitKind::from_code(v.parse().unwrap_or(0)),
                "ExecMainStatus" => u.exec_main_status = v.parse().unwrap_or(0),
                "ExecMainStartTimestamp" => u.exec_main_start_us = ts(),
                "ExecMainExitTimestamp" => u.exec_main_exit_us = ts(),
                "ActiveEnterTimestamp" => u.active_enter_us = ts(),
                "MainPID" => u.main_pid = v.parse().unwrap_or(0),
                "RootDirectory" => u.root_directory = v.into(),
                // `{ path=/bin/app ; argv[]=/bin/app -x ; ... }`: the first command's program
                // (the container's, behind pid-init).
                "ExecStart" if u.exec_path.is_empty() => {
                    let field = |name: &str| {
                        v.split_once(name)
                            .and_then(|(_, r)| r.split(" ;").next())
                            .unwrap_or_default()
                    };
                    let argv: Vec<String> = field("argv[]=").split(' ').map(String::from).collect();
                    (u.exec_path, u.exec_search) =
                        crate::systemd::unit::container_program(field("path="), &argv);
                }
                _ => {}
            }
        }
        if !id.is_empty() {
            u.name = id.clone();
            out.insert(id, u);
        }
    }
    out
}

/// The properties [`parse_show`] reads: every field of [`UnitState`].
const SHOW_PROPERTIES: &str = "Id,LoadState,FragmentPath,InvocationID,ActiveState,SubState,Result,NRestarts,ExecMainCode,ExecMainStatus,ExecMainStartTimestamp,ExecMainExitTimestamp,ActiveEnterTimestamp,MainPID,ExecStart,RootDirectory";

/// The D-Bus edge: systemd's own signals wake the status loop (no polling), properties come from
/// the unit objects. `daemon-reload` is all a reload needs here: podunit-sync's reconcile loop
/// starts and stops pods when systemd reports the reload.
pub struct Dbus {
    client: crate::systemd::Client,
    /// `Some(unit)`: that unit changed; `None`: a reload finished.
    changes: std::sync::Mutex<std::sync::mpsc::Receiver<Option<String>>>,
}

impl Dbus {
    /// Calls and the signal stream on podunit-sync's one connection to the system manager.
    pub fn connect() -> Result<Dbus, String> {
        let client = crate::systemd::Client::system().map_err(|e| e.to_string())?;
        let events = client.events(true).map_err(|e| e.to_string())?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use crate::systemd::Event;
            for ev in events.flatten() {
                let change = match ev {
                    Event::UnitChanged { unit } | Event::JobRemoved { unit, .. }
                        if unit.starts_with("podunit-") =>
                    {
                        Some(unit)
                    }
                    Event::Reloading(false) => None,
                    _ => continue,
                };
                if tx.send(change).is_err() {
                    return;
                }
            }
        });
        Ok(Dbus {
            client,
            changes: std::sync::Mutex::new(rx),
        })
    }
}

impl Units for Dbus {
    fn reload(&self) -> Result<(), String> {
        self.client.reload().map_err(|e| e.to_string())
    }

    fn props(&self, units: &[String]) -> Result<HashMap<String, UnitState>, String> {
        let mut out = HashMap::new();
        for u in units {
            let st = self.client.unit_state(u).map_err(|e| e.to_string())?;
            out.insert(u.clone(), st);
        }
        Ok(out)
    }

    fn stop(&self, units: &[String], kill: bool) -> Result<(), String> {
        if kill {
            // The D-Bus client has no KillUnit; systemctl does the same call.
            let mut args = vec!["kill", "--signal=SIGKILL"];
            args.extend(units.iter().map(String::as_str));
            return run(&args).map(|_| ());
        }
        for u in units {
            self.client.stop(u).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn wait_change(&self, timeout: Duration) -> bool {
        self.wait_changes(timeout) != Changes::None
    }

    fn states(&self) -> Option<HashMap<String, UnitStates>> {
        let listed = self.client.list_units(crate::systemd::UNIT_PATTERN).ok()?;
        Some(
            listed
                .into_iter()
                .map(|u| (u.name, (u.load_state, u.active_state, u.sub_state)))
                .collect(),
        )
    }

    fn wait_changes(&self, timeout: Duration) -> Changes {
        let rx = self.changes.lock().unwrap();
        let one = |c: Option<String>| match c {
            Some(u) => Changes::Units(BTreeSet::from([u])),
            None => Changes::Reloaded(BTreeSet::new()),
        };
        let Ok(first) = rx.recv_timeout(timeout) else {
            return Changes::None;
        };
        let mut all = one(first);
        while let Ok(c) = rx.try_recv() {
            all.merge(one(c));
        }
        all
    }

    fn run_once(&self, name: &str, description: &str, argv: &[String]) -> Result<(), String> {
        self.client
            .run_transient(name, description, argv)
            .map(|_job| ())
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(names: &[&str]) -> Changes {
        Changes::Units(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn show_output_parses() {
        let text = "Id=podunit-ns_web_app.service\nLoadState=loaded\nActiveState=failed\nSubState=failed\nResult=exit-code\nNRestarts=4\nExecMainCode=1\nExecMainStatus=3\nExecMainStartTimestamp=@1700000000\nExecMainExitTimestamp=@1700000005\nActiveEnterTimestamp=n/a\nMainPID=0\nFragmentPath=/run/systemd/generator/podunit-ns_web_app.service\nInvocationID=ab01\nRootDirectory=/run/podunit/pods/u/roots/app\nExecStart={ path=/bin/app ; argv[]=/bin/app -x ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n\nId=podunit-ns_web.service\nActiveState=active\nSubState=exited\n";
        let m = parse_show(text);
        let a = &m["podunit-ns_web_app.service"];
        assert_eq!(a.n_restarts, 4);
        assert_eq!(a.exec_main_code, ExitKind::Exited);
        assert_eq!(a.exec_main_status, 3);
        assert_eq!(a.name, "podunit-ns_web_app.service");
        assert_eq!(a.invocation_id, "ab01");
        assert_eq!(a.exec_path, "/bin/app");
        assert_eq!(a.root_directory, "/run/podunit/pods/u/roots/app");
        assert_eq!(a.exec_main_start_us, 1_700_000_000_000_000);
        assert_eq!(a.active_enter_us, 0);
        assert_eq!(m["podunit-ns_web.service"].sub_state, "exited");
        assert!(!crate::status::observe::all_stopped(m.values()));
    }

    #[test]
    fn changes_merge_to_the_union_and_all_wins() {
        let mut c = Changes::None;
        c.merge(units(&["a"]));
        c.merge(Changes::None);
        c.merge(units(&["b"]));
        assert_eq!(c, units(&["a", "b"]));
        c.merge(Changes::All);
        assert_eq!(c, Changes::All);
        c.merge(units(&["c"]));
        assert_eq!(c, Changes::All);
    }

    #[test]
    fn a_reload_keeps_the_units_seen_with_it() {
        let reloaded =
            |names: &[&str]| Changes::Reloaded(names.iter().map(|n| n.to_string()).collect());
        let mut c = units(&["a"]);
        c.merge(reloaded(&[]));
        assert_eq!(c, reloaded(&["a"]));
        c.merge(units(&["b"]));
        c.merge(reloaded(&["c"]));
        assert_eq!(c, reloaded(&["a", "b", "c"]));
        c.merge(Changes::All);
        assert_eq!(c, Changes::All);
        let mut c = Changes::None;
        c.merge(reloaded(&[]));
        assert_eq!(c, reloaded(&[]));
    }
}
