//! podunit: run Kubernetes Pods as native systemd units.
//!
//! The library holds everything the three programs share. The translation from a Pod to units is a
//! pure function ([`translate`]); reading manifests, writing unit trees, talking to systemd and to the
//! API server live at the edges, in their own modules.

pub mod config;
pub mod naming;
pub mod paths;
pub mod policy;

#[cfg(feature = "cli")]
pub mod kube;

#[cfg(feature = "cli")]
pub mod cli;

#[cfg(feature = "cli")]
pub mod atomicdir;
pub mod containerstate;
pub mod diag;
pub mod escape;
pub mod generate;
pub mod generated;
#[cfg(feature = "cli")]
pub mod localsync;
pub mod manifest;
pub mod parallel;
pub mod plan;
#[cfg(feature = "cli")]
pub mod prepare;
pub mod quantity;
pub mod reconcile;
pub mod statefile;
pub mod status;
#[cfg(feature = "cli")]
pub mod subpath;
#[cfg(feature = "cli")]
pub mod systemd;
pub mod timefmt;
pub mod translate;
pub mod unit;
pub mod unitstate;
pub mod validate;
#[cfg(feature = "cli")]
pub mod watch;
