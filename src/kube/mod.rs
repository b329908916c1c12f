//! The Kubernetes API as podunit speaks it: kubeconfig, the client and its errors, the watch
//! stream, back-off, token requests, and the objects podunit makes (Node and Lease, Events,
//! hook events). The node agent that drives them is [`crate::agent`].
//!
//! Pure parts (kubeconfig resolution, watch decoding, back-off, the builders) are separate from
//! the I/O, so each is unit-tested on its own.

pub mod backoff;
pub mod client;
pub mod compact;
pub mod error;
pub mod events;
pub mod hook_events;
pub mod kubeconfig;
pub mod node;
pub mod token;
pub mod watch;
