//! Workload controllers' pure logic: what a controller of Kubernetes decides, as data podunit
//! renders into units.
//!
//! - [`cron`]: a CronJob's `schedule` and `timeZone` as systemd calendar specs (`OnCalendar=`).
//! - [`replicas`]: the pods a Deployment or a ReplicaSet stands for, named and labelled as the
//!   controllers do.

pub mod cron;
pub mod replicas;
