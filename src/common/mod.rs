//! Small pure basics every program shares: the node configuration and policy, host paths,
//! quantities, time formats, problem reports, the generator's parallel map and string building.

pub mod argv_hex;
pub mod atomicfile;
pub mod config;
pub mod diag;
pub mod parallel;
pub mod paths;
pub mod policy;
// The image sections of the node configuration (`registries:`), below everything that reads it.
pub mod pull_limits;
pub mod quantity;
pub mod registries;
pub mod storage_classes;
pub mod text;
pub mod timefmt;
