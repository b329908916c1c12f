//! Container images from OCI registries: references, manifests, the local store, and (with the
//! `cli` feature) pulling and unpacking. The generator uses only the read side ([`store::Store`]):
//! it may look at the local store, never at the network.

pub mod digest;
pub mod manifest;
pub mod platform;
pub mod policy;
pub mod reference;
pub mod store;

pub use digest::Digest;
pub use reference::Reference;
pub use store::{ResolvedImage, Store, StoreError};

#[cfg(feature = "cli")]
pub mod auth;
#[cfg(feature = "cli")]
pub mod error;
#[cfg(feature = "cli")]
pub mod pull;
#[cfg(feature = "cli")]
pub mod queue;
#[cfg(feature = "cli")]
pub mod registry;
#[cfg(feature = "cli")]
pub mod transfer;
#[cfg(feature = "unpack")]
pub mod unpack;
