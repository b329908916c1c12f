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
