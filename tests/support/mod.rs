//! Shared by the integration tests: the real-systemd machine and helpers around pods in it.
#![allow(dead_code)]

pub mod api;
pub mod controlplane;
pub mod mem;
pub mod nspawn;
pub mod pods;
pub mod registry;
pub mod reload;
pub mod status;

/// The host's load average (1, 5 and 15 min), printed beside a benchmark's numbers: on a shared
/// machine they mean little without it.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Runs a host command, panicking with its output unless it succeeds.
pub fn run_ok(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
