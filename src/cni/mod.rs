//! Pod networking through standard CNI plugins, as a kubelet with containerd sets it up: the
//! network configuration found as containerd finds it (`config`), the plugin binaries
//! (`plugins`), ADD, CHECK, DEL, GC and STATUS over a plugin list as libcni runs them
//! (`invoke`), the plugins' results (`result`), and the ADD result kept for DEL and CHECK
//! (`cache`), and podunit's own bridge network for a node with no configuration
//! (`default_network`). CNI spec 1.0.0, with 0.3.x and 0.4.0 results read as well.
//!
//! Why our own and not a crate: invoking a plugin is an exec with a few environment variables and
//! JSON on stdin; the parts that matter (libcni's `runtimeConfig` injection and prevResult
//! chaining, bounded output, a timeout, typed errors) are what no maintained crate has.

pub mod cache;
pub mod config;
pub mod default_network;
pub mod invoke;
pub mod plugins;
pub mod result;

/// The CNI versions podunit reads: their results have `interfaces`, `ips` and `routes`.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// Whether version `v` is at least `min` (both `major.minor.patch`; an unparsable part is 0).
pub fn version_at_least(v: &str, min: &str) -> bool {
    fn parts(s: &str) -> [u32; 3] {
        let mut out = [0; 3];
        for (o, p) in out.iter_mut().zip(s.split('.')) {
            *o = p.parse().unwrap_or(0);
        }
        out
    }
    parts(v) >= parts(min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_number() {
        assert!(version_at_least("1.0.0", "0.4.0"));
        assert!(version_at_least("0.4.0", "0.4.0"));
        assert!(!version_at_least("0.3.1", "0.4.0"));
        assert!(version_at_least("1.10.0", "1.9.0"));
        assert!(!version_at_least("1.0.0", "1.1.0"));
    }
}
