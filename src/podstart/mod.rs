//! What runs at pod start, as root, from the pod's and containers' units: `podunit pod-prepare`
//! and `pod-cleanup` ([`prepare`]: volumes, env files, user records), `podunit subpath`
//! ([`subpath`]), the containers' roots from pulled images ([`root`], mounted by
//! `pod-prepare`) and the pod's name files ([`etcfiles`]), and the atomic volume writes they share
//! ([`atomicdir`]).

pub mod atomicdir;
pub mod etcfiles;
pub mod network;
pub mod prepare;
pub mod root;
pub mod subpath;
