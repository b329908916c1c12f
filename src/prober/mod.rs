//! Running probes and hooks in podunit-sync, as the kubelet's prober does: the checks (TCP,
//! HTTP, gRPC, exec) and how a process enters a container ([`enter`], [`capabilities`]), the
//! runner that drives [`crate::probe::state`] for every container and publishes the results
//! ([`crate::status::probes`]), the preStop hook it runs before a kill ([`pre_stop`]) and the
//! `httpGet` and `sleep` hooks of `podunit hook` ([`hook_run`]). The agents drive it through
//! [`runner::Sink`]; it imports none of them.

pub mod capabilities;
pub mod check;
pub mod enter;
pub mod exec;
pub mod grpc;
pub mod hook_run;
pub mod pre_stop;
pub mod runner;
