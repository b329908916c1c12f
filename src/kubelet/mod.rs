//! The kubelet API that the API server proxies to (`kubectl logs`, `kubectl get --raw
//! /api/v1/nodes/N/proxy/...`, metrics-server): HTTPS on the node's kubelet port, every request
//! authenticated and authorised through the API server before any handler sees it.
//!
//! Plain threads like the rest of the agent: one accepts, one per connection (bounded), so a
//! client that never reads or a log followed for hours never holds up another request.

// Pure std: built without `cli` too, for the fuzz target.
pub mod http;
#[cfg(feature = "spdy")]
pub mod portforward_streams;
#[cfg(feature = "spdy")]
pub mod spdy;
pub mod websocket;

#[cfg(feature = "cli")]
pub mod attach;
#[cfg(feature = "cli")]
pub mod auth;
#[cfg(feature = "cli")]
pub mod certificate;
#[cfg(feature = "cli")]
mod channels;
#[cfg(feature = "cli")]
mod context;
#[cfg(feature = "cli")]
pub mod netns_dial;
#[cfg(feature = "cli")]
pub mod nodelogs;
#[cfg(feature = "cli")]
pub mod portforward;
#[cfg(feature = "cli")]
mod portforward_target;
#[cfg(feature = "cli")]
pub mod portforward_ws;
#[cfg(feature = "cli")]
pub mod query;
#[cfg(feature = "cli")]
pub mod remotecommand;
#[cfg(feature = "cli")]
mod routes;
#[cfg(feature = "cli")]
mod server;
#[cfg(feature = "cli")]
pub mod session;
#[cfg(feature = "cli")]
mod spdyconn;
#[cfg(feature = "cli")]
pub mod stats;
#[cfg(feature = "cli")]
pub mod subject;
#[cfg(feature = "cli")]
pub mod tls;
#[cfg(feature = "cli")]
pub mod wsconn;

#[cfg(feature = "cli")]
pub use server::{StartError, start};
