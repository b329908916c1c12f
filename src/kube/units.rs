//! The node agent's view of systemd: reload, read unit properties, stop, and wait for changes.
//!
//! A trait, so the agent's loops are tested against the API server double without a systemd, and
//! so the D-Bus client (signals instead of waiting) can replace the `systemctl` implementation
//! without touching the loops.

use super::observe::{self, UnitProps};
use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

pub trait Units: Send + Sync {
    /// `daemon-reload`, then have new pods started (the generator has just rendered them).
    fn reload(&self) -> Result<(), String>;
    /// Properties of the named units (unknown units may be missing or reported inactive).
    fn props(&self, units: &[String]) -> Result<HashMap<String, UnitProps>, String>;
    /// Stops the units (`kill`: SIGKILL them now, the grace period is over).
    fn stop(&self, units: &[String], kill: bool) -> Result<(), String>;
    /// Blocks until systemd reports a unit change or `timeout` passes; true when something changed.
    fn wait_change(&self, timeout: Duration) -> bool;
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

impl Units for Systemctl {
    fn reload(&self) -> Result<(), String> {
        run(&["daemon-reload"])?;
        // Starting the target starts pods that are new; running ones are left alone.
        run(&["start", "--no-block", "podunit.target"]).map(|_| ())
    }

    fn props(&self, units: &[String]) -> Result<HashMap<String, UnitProps>, String> {
        let mut args = vec!["show", "--timestamp=unix", "-p", observe::SHOW_PROPERTIES];
        args.extend(units.iter().map(String::as_str));
        run(&args).map(|t| observe::parse_show(&t))
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
}
