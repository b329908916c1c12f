//! Workload controllers' pure logic: what a controller of Kubernetes decides, as data podunit
//! renders into units.
//!
//! - [`cron`]: a CronJob's `schedule` and `timeZone` as systemd calendar specs (`OnCalendar=`).

pub mod cron;
