//! podunit: run Kubernetes Pods as native systemd units.
//!
//! The library holds everything the three programs share, in folders by role (docs/architecture.md).
//! The translation from a Pod to units is a pure function ([`translate`]); reading manifests,
//! writing unit trees, talking to systemd and to the API server live at the edges, in their own
//! modules.

// The exceptions: src/localsync/heap.rs (malloc_trim), src/pidinit/seccomp.rs (a seccomp filter).
#![deny(unsafe_code)]

// What the generator links (it builds the library without the `cli` feature): manifests in, units out.
pub mod common;
pub mod escape;
pub mod generate;
// Images: the store's read side here; pulling and unpacking with `cli`.
pub mod image;
pub mod manifest;
// Probes: their spec is part of the plan; running them is podunit-sync's.
pub mod probe;
pub mod translate;
pub mod validate;
// Workload controllers' pure decisions (a CronJob's schedule as calendar specs).
pub mod workload;

// Runs at pod start, as root.
#[cfg(feature = "cli")]
pub mod podstart;
// Runs probes and hooks: the checks, entering a container, the runner in podunit-sync.
#[cfg(feature = "cli")]
pub mod prober;
// Starts a container in a PID namespace of its own (its unit's ExecStart=).
#[cfg(feature = "cli")]
pub mod pidinit;

// podunit-sync: the local agent, the status model, the D-Bus client, the cluster agent.
#[cfg(feature = "cli")]
pub mod kube;
// The node agent: podunit-sync's cluster mode, on top of the API client.
#[cfg(feature = "cli")]
pub mod agent;
// The kubelet API server; its HTTP parsing alone builds without `cli` (the fuzz target).
pub mod kubelet;
#[cfg(feature = "cli")]
pub mod localsync;
// Container logs from the journal: `podunit logs` and the kubelet API.
#[cfg(feature = "cli")]
pub mod logs;
#[cfg(feature = "cli")]
pub mod status;
#[cfg(feature = "cli")]
pub mod systemd;

// Pod networking through CNI plugins: configuration, invocation, results, the result cache.
#[cfg(feature = "cli")]
pub mod cni;

// Commands run inside containers for people: `podunit exec` and the kubelet API's `/exec`.
#[cfg(feature = "cli")]
pub mod exec;

// The `podunit` command line and podunit-sync's entry point.
#[cfg(feature = "cli")]
pub mod cli;
