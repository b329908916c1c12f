//! Small pure basics every program shares: the node configuration and policy, host paths,
//! quantities, time formats, problem reports and the generator's parallel map.

pub mod atomicfile;
pub mod config;
pub mod diag;
pub mod parallel;
pub mod paths;
pub mod policy;
pub mod quantity;
pub mod timefmt;
