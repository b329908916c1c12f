//! Workload controllers' pure logic: what a controller of Kubernetes decides, as data podunit
//! renders into units.
//!
//! - [`cron`]: a CronJob's `schedule` and `timeZone` as systemd calendar specs (`OnCalendar=`).
//! - [`replicas`]: the pods a Deployment or a ReplicaSet stands for, named and labelled as the
//!   controllers do.
//! - [`daemon_set`]: a DaemonSet's pod on this node.
//! - [`job`]: a Job's pods and the terms they run by; [`job_controller`]: the Job controller's
//!   decisions (which pods to start and stop, when a Job is complete or failed).
//! - [`stateful_set`]: a StatefulSet's pods and their claims.
//! - [`claims`]: PersistentVolumeClaims and PersistentVolumes checked, and bound as the PV
//!   controller binds them (or provisioned as a directory of the node's).
//! - [`cron_job`]: a CronJob's Job pods and terms; [`cron_controller`]: when a run is due.

pub mod claims;
pub mod cron;
pub mod cron_controller;
pub mod cron_job;
pub mod daemon_set;
pub mod job;
pub mod job_controller;
pub mod replicas;
pub mod stateful_set;
