//! Workload controllers' pure logic: what a controller of Kubernetes decides, as data podunit
//! renders into units.
//!
//! - [`cron`]: a CronJob's `schedule` and `timeZone` as systemd calendar specs (`OnCalendar=`).
//! - [`replicas`]: the pods a Deployment or a ReplicaSet stands for, named and labelled as the
//!   controllers do.
//! - [`daemon_set`]: a DaemonSet's pod on this node.

pub mod cron;
pub mod daemon_set;
pub mod replicas;
