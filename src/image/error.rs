//! Why a pull failed. Every error names the image; layer errors name the layer and the entry.

use super::digest::Digest;
use std::fmt;

#[derive(Debug)]
pub struct PullError {
    /// The reference as normalised (`docker.io/library/nginx:latest`).
    pub image: String,
    pub kind: PullErrorKind,
}

#[derive(Debug)]
pub enum PullErrorKind {
    /// The node policy does not allow pulling from this registry.
    NotAllowed { registry: String },
    /// No endpoint could be reached (every mirror and the registry).
    Unreachable(String),
    /// 401/403, or a token could not be had.
    Unauthorized(String),
    /// 404: no such repository, tag or digest.
    NotFound(String),
    /// Any other status or protocol error, with the registry's message.
    Registry(String),
    /// The index has no entry for this host.
    NoPlatform {
        want: String,
        available: Vec<String>,
    },
    /// Content whose digest or size is not what was asked for: nothing of it is kept.
    Digest {
        what: String,
        expected: Digest,
        got: String,
    },
    /// A manifest, config or layer that cannot be used.
    Invalid(String),
    /// A layer tarball refused.
    Layer {
        layer: Digest,
        error: super::unpack::UnpackError,
    },
    /// The store's file system is full, or a pull would leave less free than the node keeps.
    NoSpace(String),
    /// The image is larger than the node's limits allow (`registries.limits`).
    TooLarge(String),
    /// The pull ran out of time, or the registry stalled (`registries.limits`).
    Timeout(String),
    /// The registry sent a different number of bytes than the descriptor says.
    Size {
        what: String,
        expected: u64,
        got: u64,
    },
    /// The store could not be read or written.
    Store(String),
}

impl PullError {
    pub fn new(image: impl fmt::Display, kind: PullErrorKind) -> PullError {
        PullError {
            image: image.to_string(),
            kind,
        }
    }
}

impl fmt::Display for PullError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.image;
        match &self.kind {
            PullErrorKind::NotAllowed { registry } => write!(
                f,
                "image {i:?}: the node policy does not allow pulling from {registry:?} (policy.registries)"
            ),
            PullErrorKind::Unreachable(m) => write!(f, "image {i:?}: registry unreachable: {m}"),
            PullErrorKind::Unauthorized(m) => write!(f, "image {i:?}: pull access denied: {m}"),
            PullErrorKind::NotFound(m) => write!(f, "image {i:?}: not found: {m}"),
            PullErrorKind::Registry(m) => write!(f, "image {i:?}: {m}"),
            PullErrorKind::NoPlatform { want, available } => write!(
                f,
                "image {i:?}: no manifest for {want} in the index (it has: {})",
                if available.is_empty() {
                    "none".to_string()
                } else {
                    available.join(", ")
                }
            ),
            PullErrorKind::Digest {
                what,
                expected,
                got,
            } => write!(
                f,
                "image {i:?}: {what} does not match its digest {expected} (got {got}); nothing of it was kept"
            ),
            PullErrorKind::Invalid(m) => write!(f, "image {i:?}: {m}"),
            PullErrorKind::Layer { layer, error } => {
                write!(f, "image {i:?}: layer {layer}: {error}")
            }
            PullErrorKind::NoSpace(m) => {
                write!(f, "image {i:?}: no space left in the image store: {m}")
            }
            PullErrorKind::Store(m) => write!(f, "image {i:?}: image store: {m}"),
            PullErrorKind::TooLarge(m) => write!(f, "image {i:?}: too large: {m}"),
            PullErrorKind::Timeout(m) => write!(f, "image {i:?}: {m}"),
            PullErrorKind::Size {
                what,
                expected,
                got,
            } => write!(
                f,
                "image {i:?}: {what}: the registry sent {got} bytes, its descriptor says {expected}; nothing of it was kept"
            ),
        }
    }
}

impl std::error::Error for PullError {}
