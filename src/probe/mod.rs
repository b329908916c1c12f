//! Startup, readiness and liveness probes with the kubelet's semantics.
//!
//! - [`spec`]: the probes of a container as the plan carries them (pure, in the generator too);
//! - [`state`]: the kubelet's probe worker as a pure state machine;
//! - [`hook`]: lifecycle hooks (`postStart`, `preStop`) as the plan carries them (pure);
//!   [`hook_run`] runs the `httpGet` and `sleep` ones (`podunit hook`);
//! - [`kill`]: the timing of a liveness or startup kill, preStop first (pure);
//! - [`results`]: what is published (`ready`, `started`) and how status reads it;
//! - [`check`], [`grpc`], [`exec`], [`enter`], [`capabilities`], [`runner`]: running probes, in
//!   podunit-sync; [`pre_stop`]: the preStop hook it runs before such a kill.

pub mod hook;
pub mod kill;
pub mod spec;
pub mod state;

#[cfg(feature = "cli")]
pub mod capabilities;
#[cfg(feature = "cli")]
pub mod check;
#[cfg(feature = "cli")]
pub mod enter;
#[cfg(feature = "cli")]
pub mod exec;
#[cfg(feature = "cli")]
pub mod grpc;
#[cfg(feature = "cli")]
pub mod hook_run;
#[cfg(feature = "cli")]
pub mod pre_stop;
#[cfg(feature = "cli")]
pub mod results;
#[cfg(feature = "cli")]
pub mod runner;
