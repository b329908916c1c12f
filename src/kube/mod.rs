//! Cluster mode: podunit-sync as this node's kubelet. The API client and the node agent.
//!
//! Pure parts (kubeconfig resolution, watch decoding, back-off, the Node/Lease/PodStatus builders,
//! the spool format) are separate from the loops that do I/O, so each is unit-tested on its own.

pub mod agent;
pub mod backoff;
pub mod client;
pub mod compact;
pub mod error;
pub mod events;
pub mod hook_events;
pub mod kubeconfig;
pub mod mirror;
pub mod node;
pub mod probes;
pub mod spool;
pub mod token;
pub mod units;
pub mod waitrecord;
pub mod watch;
