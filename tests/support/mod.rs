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
