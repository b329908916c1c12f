//! Status, in one direction and computed once: what systemd says about a unit ([`unit`]) -> each
//! container's Kubernetes state ([`container`]) -> the pod's phase and conditions ([`phase`]), put
//! together as one [`model::Observed`] pod ([`model`]). A local pod ([`pod`]) and an API pod
//! ([`observe`]) only feed the model; `podunit status`'s row and JSON ([`pod`]) and the PodStatus
//! the cluster agent posts ([`api`]) are projections of it. Pure: the edges (D-Bus, `systemctl`)
//! only fill the inputs ([`start_detail`] reads the journal for a container that did not start).

pub mod api;
pub mod container;
pub mod knownpods;
pub mod model;
pub mod observe;
pub mod phase;
pub mod pod;
pub mod probes;
pub mod start_detail;
pub mod start_error;
pub mod waiting;
