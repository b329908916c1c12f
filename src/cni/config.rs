//! The network configuration, found as containerd finds it: the first `.conflist`, `.conf` or
//! `.json` file of a directory in lexical order. A `.conf` or `.json` file is one plugin, taken
//! as a list of one.

use serde_json::{Map, Value};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Where containerd and the kubelet look by default.
pub const DEFAULT_DIR: &str = "/etc/cni/net.d";
/// The largest configuration file podunit reads.
pub const MAX_BYTES: u64 = 1 << 20;

/// A network configuration list, each plugin's configuration kept as the file has it (plugins
/// define their own fields).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    pub name: String,
    pub cni_version: String,
    /// CHECK is not run when set (the spec's `disableCheck`).
    pub disable_check: bool,
    pub plugins: Vec<Map<String, Value>>,
    /// The file it was read from (none when parsed from bytes).
    pub source: Option<PathBuf>,
}

#[derive(Debug)]
pub enum ConfigError {
    /// No configuration file in the directory: the kubelet's "cni config uninitialized", a node
    /// whose network is not ready.
    Uninitialized {
        dir: PathBuf,
    },
    Read {
        path: PathBuf,
        error: io::Error,
    },
    TooLarge {
        path: PathBuf,
        size: u64,
    },
    Malformed {
        path: PathBuf,
        reason: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Uninitialized { dir } => write!(
                f,
                "cni config uninitialized: no network config found in {}",
                dir.display()
            ),
            ConfigError::Read { path, error } => write!(f, "{}: {error}", path.display()),
            ConfigError::TooLarge { path, size } => write!(
                f,
                "{}: {size} bytes, more than the {MAX_BYTES} a CNI config may have",
                path.display()
            ),
            ConfigError::Malformed { path, reason } => {
                write!(f, "{}: invalid CNI config: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for ConfigError {}

impl NetworkConfigList {
    /// The plugin type (binary name) of each plugin, in order.
    pub fn plugin_types(&self) -> Vec<&str> {
        self.plugins.iter().map(plugin_type).collect()
    }

    /// Parses a `.conflist` (`list = true`) or a single plugin's `.conf`.
    pub fn parse(bytes: &[u8], list: bool) -> Result<NetworkConfigList, String> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        let Value::Object(mut obj) = v else {
            return Err("not a JSON object".into());
        };
        let name = required_string(&obj, "name")?;
        let cni_version = required_string(&obj, "cniVersion")?;
        if !super::SUPPORTED_VERSIONS.contains(&cni_version.as_str()) {
            return Err(format!(
                "cniVersion {cni_version:?} is not one of {:?}",
                super::SUPPORTED_VERSIONS
            ));
        }
        let (plugins, disable_check) = if list {
            let disable_check = match obj.get("disableCheck") {
                None => false,
                Some(Value::Bool(b)) => *b,
                // libcni also takes the string "true".
                Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
                Some(_) => return Err("disableCheck is not a boolean".into()),
            };
            let Some(Value::Array(plugins)) = obj.remove("plugins") else {
                return Err("no plugins list".into());
            };
            let plugins = plugins
                .into_iter()
                .enumerate()
                .map(|(i, p)| match p {
                    Value::Object(o) => Ok(o),
                    _ => Err(format!("plugins[{i}] is not an object")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            (plugins, disable_check)
        } else {
            (vec![obj], false)
        };
        if plugins.is_empty() {
            return Err("no plugins in the list".into());
        }
        for (i, p) in plugins.iter().enumerate() {
            match p.get("type") {
                Some(Value::String(t)) if super::plugins::valid_name(t) => {}
                Some(Value::String(t)) => {
                    return Err(format!("plugins[{i}]: {t:?} is not a plugin name"));
                }
                _ => return Err(format!("plugins[{i}] has no type")),
            }
        }
        Ok(NetworkConfigList {
            name,
            cni_version,
            disable_check,
            plugins,
            source: None,
        })
    }

    /// The list as a `.conflist` file has it (what the cache keeps).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "cniVersion": self.cni_version,
            "name": self.name,
            "disableCheck": self.disable_check,
            "plugins": self.plugins,
        })
    }
}

/// A plugin's type, which [`NetworkConfigList::parse`] checked.
pub fn plugin_type(p: &Map<String, Value>) -> &str {
    p.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn required_string(obj: &Map<String, Value>, key: &str) -> Result<String, String> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(format!("{key} is empty")),
        Some(_) => Err(format!("{key} is not a string")),
        None => Err(format!("no {key}")),
    }
}

/// The configuration files of `dir` in the order containerd tries them.
pub fn candidates(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(ConfigError::Read {
                path: dir.to_path_buf(),
                error,
            });
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| ConfigError::Read {
            path: dir.to_path_buf(),
            error,
        })?;
        let path = entry.path();
        let ext = path.extension().and_then(|e| e.to_str());
        if !matches!(ext, Some("conflist" | "conf" | "json")) {
            continue;
        }
        // Directories named like a config are no config (libcni skips them too).
        if std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        files.push(path);
    }
    files.sort();
    Ok(files)
}

/// The network configuration of `dir`: its first configuration file, which must be valid.
pub fn load_dir(dir: &Path) -> Result<NetworkConfigList, ConfigError> {
    let first = candidates(dir)?.into_iter().next();
    let path = first.ok_or_else(|| ConfigError::Uninitialized {
        dir: dir.to_path_buf(),
    })?;
    load_file(&path)
}

/// One configuration file, a list if it is a `.conflist`.
pub fn load_file(path: &Path) -> Result<NetworkConfigList, ConfigError> {
    use std::io::Read;
    let read_err = |error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    // One byte past the limit tells an oversized file from one exactly at it.
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_BYTES {
        let size = std::fs::metadata(path).map_or(bytes.len() as u64, |m| m.len());
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            size,
        });
    }
    let list = path.extension().is_some_and(|e| e == "conflist");
    let mut conf =
        NetworkConfigList::parse(&bytes, list).map_err(|reason| ConfigError::Malformed {
            path: path.to_path_buf(),
            reason,
        })?;
    conf.source = Some(path.to_path_buf());
    Ok(conf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("podunit-cni-config-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const LIST: &str = r#"{"cniVersion":"1.0.0","name":"podnet","plugins":[
        {"type":"bridge","bridge":"cni0","ipam":{"type":"host-local"}},
        {"type":"portmap","capabilities":{"portMappings":true}}]}"#;

    #[test]
    fn the_first_file_in_lexical_order_wins_and_a_conf_is_a_list_of_one() {
        let d = scratch("order");
        std::fs::write(d.join("20-b.conflist"), LIST).unwrap();
        std::fs::write(
            d.join("10-a.conf"),
            r#"{"cniVersion":"0.4.0","name":"single","type":"loopback"}"#,
        )
        .unwrap();
        std::fs::write(d.join("00-ignored.txt"), "not a config").unwrap();
        std::fs::create_dir(d.join("05-dir.conf")).unwrap();
        let c = load_dir(&d).unwrap();
        assert_eq!(c.name, "single");
        assert_eq!(c.cni_version, "0.4.0");
        assert_eq!(c.plugin_types(), ["loopback"]);
        assert_eq!(c.source.as_deref(), Some(d.join("10-a.conf").as_path()));
        std::fs::remove_file(d.join("10-a.conf")).unwrap();
        let c = load_dir(&d).unwrap();
        assert_eq!(
            (c.name.as_str(), c.cni_version.as_str()),
            ("podnet", "1.0.0")
        );
        assert_eq!(c.plugin_types(), ["bridge", "portmap"]);
        assert!(!c.disable_check);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn no_config_is_uninitialized() {
        let d = scratch("none");
        std::fs::write(d.join("README"), "x").unwrap();
        let e = load_dir(&d).unwrap_err();
        assert!(matches!(e, ConfigError::Uninitialized { .. }), "{e}");
        assert!(e.to_string().contains("cni config uninitialized"));
        let e = load_dir(&d.join("missing")).unwrap_err();
        assert!(matches!(e, ConfigError::Uninitialized { .. }), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_malformed_or_oversized_first_file_is_refused_naming_it() {
        let d = scratch("bad");
        for (body, says) in [
            ("{", "not JSON"),
            ("[]", "not a JSON object"),
            (
                r#"{"cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}"#,
                "no name",
            ),
            (
                r#"{"name":"n","plugins":[{"type":"bridge"}]}"#,
                "no cniVersion",
            ),
            (
                r#"{"name":"n","cniVersion":"9.9.9","plugins":[]}"#,
                "is not one of",
            ),
            (r#"{"name":"n","cniVersion":"1.0.0"}"#, "no plugins list"),
            (
                r#"{"name":"n","cniVersion":"1.0.0","plugins":[]}"#,
                "no plugins in",
            ),
            (
                r#"{"name":"n","cniVersion":"1.0.0","plugins":[{}]}"#,
                "has no type",
            ),
            (
                r#"{"name":"n","cniVersion":"1.0.0","plugins":[7]}"#,
                "not an object",
            ),
            (
                r#"{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"../sbin/x"}]}"#,
                "not a plugin name",
            ),
        ] {
            std::fs::write(d.join("10-x.conflist"), body).unwrap();
            let e = load_dir(&d).unwrap_err();
            assert!(matches!(e, ConfigError::Malformed { .. }), "{body}: {e}");
            let msg = e.to_string();
            assert!(
                msg.contains("10-x.conflist") && msg.contains(says),
                "{body}: {msg}"
            );
        }
        std::fs::write(d.join("10-x.conflist"), vec![b' '; MAX_BYTES as usize + 1]).unwrap();
        let e = load_dir(&d).unwrap_err();
        assert!(matches!(e, ConfigError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("10-x.conflist"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn disable_check_is_read_as_libcni_reads_it() {
        for (v, want) in [("true", true), ("false", false), (r#""true""#, true)] {
            let body = format!(
                r#"{{"name":"n","cniVersion":"1.0.0","disableCheck":{v},"plugins":[{{"type":"bridge"}}]}}"#
            );
            let c = NetworkConfigList::parse(body.as_bytes(), true).unwrap();
            assert_eq!(c.disable_check, want, "{v}");
        }
    }
}
