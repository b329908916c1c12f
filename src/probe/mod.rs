//! Startup, readiness and liveness probes and lifecycle hooks with the kubelet's semantics, as
//! pure decisions: what the plan carries and what the workers decide. Running them is
//! [`crate::prober`]'s.
//!
//! - [`spec`]: the probes of a container as the plan carries them (in the generator too);
//! - [`state`]: the kubelet's probe worker as a state machine;
//! - [`hook`]: lifecycle hooks (`postStart`, `preStop`) as the plan carries them;
//! - [`kill`]: the timing of a liveness or startup kill, preStop first.

pub mod handler;
pub mod hook;
pub mod kill;
pub mod spec;
pub mod state;
