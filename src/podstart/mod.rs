//! What runs at pod start, as root, from the pod's and containers' units: `podunit pod-prepare`
//! and `pod-cleanup` ([`prepare`]: volumes, env files, user records), `podunit subpath`
//! ([`subpath`]), and the atomic volume writes they share ([`atomicdir`]).

pub mod atomicdir;
pub mod prepare;
pub mod subpath;
