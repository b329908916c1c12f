//! podunit: run Kubernetes Pods as native systemd units.
//!
//! The library holds everything the three programs share. The translation from a Pod to units is a
//! pure function ([`translate`]); reading manifests, writing unit trees, talking to systemd and to the
//! API server live at the edges, in their own modules.

pub mod naming;
pub mod paths;

#[cfg(feature = "cli")]
pub mod cli;

pub mod generated;
pub mod reconcile;
pub mod statefile;
pub mod status;
#[cfg(feature = "cli")]
pub mod systemd;
pub mod timefmt;
pub mod unitstate;
