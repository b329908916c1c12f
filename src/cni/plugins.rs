//! Finding a plugin's binary in the search path, as libcni's `FindInPath` does.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where the upstream releases install plugins, then where Debian's `containernetworking-plugins`
/// puts them.
pub const DEFAULT_PATH: &[&str] = &["/opt/cni/bin", "/usr/lib/cni"];

/// The plugins of the containernetworking/plugins project, which Debian ships as one package.
const DEBIAN_PACKAGED: &[&str] = &[
    "bandwidth",
    "bridge",
    "dhcp",
    "dummy",
    "firewall",
    "host-device",
    "host-local",
    "ipvlan",
    "loopback",
    "macvlan",
    "portmap",
    "ptp",
    "sbr",
    "static",
    "tap",
    "tuning",
    "vlan",
    "vrf",
];
pub const DEBIAN_PACKAGE: &str = "containernetworking-plugins";

/// A plugin no directory of the search path has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPlugin {
    pub plugin: String,
    pub searched: Vec<PathBuf>,
}

impl MissingPlugin {
    /// The Debian package that has the plugin, when Debian ships it.
    pub fn package(&self) -> Option<&'static str> {
        DEBIAN_PACKAGED
            .contains(&self.plugin.as_str())
            .then_some(DEBIAN_PACKAGE)
    }
}

impl fmt::Display for MissingPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dirs: Vec<String> = self
            .searched
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        write!(
            f,
            "failed to find plugin {:?} in path [{}]",
            self.plugin,
            dirs.join(" ")
        )?;
        match self.package() {
            Some(p) => write!(f, " (Debian's package {p} has it)"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for MissingPlugin {}

/// Whether `name` can be a plugin's file name: a plugin type is never a path.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// The search path as `CNI_PATH` carries it.
pub fn cni_path(search: &[PathBuf]) -> String {
    let dirs: Vec<String> = search.iter().map(|d| d.display().to_string()).collect();
    dirs.join(":")
}

/// The first executable file named `plugin` in the directories of `search`, in order.
pub fn find(plugin: &str, search: &[PathBuf]) -> Result<PathBuf, MissingPlugin> {
    let missing = || MissingPlugin {
        plugin: plugin.to_string(),
        searched: search.to_vec(),
    };
    if !valid_name(plugin) {
        return Err(missing());
    }
    search
        .iter()
        .map(|d| d.join(plugin))
        .find(|p| executable(p))
        .ok_or_else(missing)
}

fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_directory_with_an_executable_wins() {
        let d = std::env::temp_dir().join(format!("podunit-cni-plugins-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for sub in ["a", "b", "c"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        // Not executable: skipped.
        std::fs::write(d.join("a/bridge"), "").unwrap();
        std::fs::write(d.join("b/bridge"), "").unwrap();
        std::fs::set_permissions(d.join("b/bridge"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::write(d.join("c/bridge"), "").unwrap();
        std::fs::set_permissions(d.join("c/bridge"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let search = vec![d.join("a"), d.join("b"), d.join("c")];
        assert_eq!(find("bridge", &search).unwrap(), d.join("b/bridge"));
        assert_eq!(cni_path(&search), format!("{0}/a:{0}/b:{0}/c", d.display()));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_plugin_names_itself_and_its_debian_package() {
        let e = find("portmap", &[PathBuf::from("/nonexistent")]).unwrap_err();
        assert_eq!(e.package(), Some("containernetworking-plugins"));
        let msg = e.to_string();
        assert!(
            msg.contains("\"portmap\"") && msg.contains("/nonexistent"),
            "{msg}"
        );
        assert!(msg.contains("containernetworking-plugins"), "{msg}");
        let e = find("calico", &[]).unwrap_err();
        assert_eq!(e.package(), None);
        assert!(!e.to_string().contains("Debian"));
    }

    #[test]
    fn a_path_is_never_a_plugin() {
        for bad in ["", ".", "..", "../bin/sh", "/bin/sh"] {
            assert!(find(bad, &[PathBuf::from("/usr/bin")]).is_err(), "{bad}");
        }
    }
}
