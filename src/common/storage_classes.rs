//! The node's storage classes (node config `storageClasses`, `defaultStorageClass`): where
//! the claims podunit provisions live (see `workload::claims`).

use std::collections::BTreeMap;

/// The node's storage classes: name -> the directory their claims' directories are made in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageClasses {
    pub classes: BTreeMap<String, String>,
    /// The class a claim without `storageClassName` gets.
    pub default: Option<String>,
}

/// The class podunit provisions claims of when the node config names none: the name k3s's
/// local-path provisioner made familiar, so charts written for small clusters find it.
pub const DEFAULT_CLASS: &str = "local-path";
/// Where [`DEFAULT_CLASS`]'s claims live.
pub const DEFAULT_CLASS_DIR: &str = "/var/lib/podunit/volumes";

/// The directory podunit provisions for claim `namespace/name` in a class's directory `dir`.
pub fn claim_dir(dir: &str, namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", dir.trim_end_matches('/'))
}

impl Default for StorageClasses {
    fn default() -> Self {
        StorageClasses {
            classes: BTreeMap::from([(DEFAULT_CLASS.into(), DEFAULT_CLASS_DIR.into())]),
            default: Some(DEFAULT_CLASS.into()),
        }
    }
}
