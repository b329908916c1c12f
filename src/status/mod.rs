//! Status, in one direction: what systemd says about a unit ([`unit`]) -> each container's
//! Kubernetes state ([`container`]) -> the pod's phase and waiting reasons ([`phase`]) -> the pod's
//! status, as `podunit status` shows it ([`pod`]) and as the cluster agent posts it ([`observe`] ->
//! [`api`]). Container states and the pod-level rules are decided once, for both. Pure: the edges
//! (D-Bus, `systemctl`) only fill the inputs.

pub mod api;
pub mod container;
pub mod knownpods;
pub mod observe;
pub mod phase;
pub mod pod;
pub mod unit;
pub mod waiting;
