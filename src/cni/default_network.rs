//! podunit's own network, for a node whose configuration directory has none: a bridge with
//! host-local addresses, as kubenet gave a node from its `podCIDR` and as containerd's and
//! Podman's default networks give a lone host. It is what makes `network: cni` work on a fresh
//! install with no setup, and a cluster started with `--allocate-node-cidrs` work with no per-node
//! configuration.
//!
//! Which subnets it gets (the first that applies):
//! 1. `cni.podSubnet` in the node config;
//! 2. in cluster mode, the Node's `spec.podCIDRs` once the controller manager has assigned them
//!    (until then, and without them, the node's network is not ready, as the kubelet's is with no
//!    configuration: a cluster's network add-on writes its own into the directory, and that
//!    always wins);
//! 3. in local mode, [`LOCAL_SUBNET`].
//!
//! It is never written into the configuration directory: a file there would shadow the
//! configuration a cluster's add-on writes later (flannel, calico and cilium all name theirs to
//! sort first, but not every add-on does).

use super::config::{self, ConfigError, NetworkConfigList};
use super::result::IpNet;
use crate::common::atomicfile;
use crate::common::paths::Paths;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// The network's name: host-local keeps its leases under `/var/lib/cni/networks/<name>`.
pub const NAME: &str = "podunit";
/// The bridge on the host.
pub const BRIDGE: &str = "podunit0";
/// The pods' subnet in local mode when the node config names none.
pub const LOCAL_SUBNET: &str = "10.88.0.0/16";

/// The network configuration over `subnets` (one IPv4 and/or one IPv6, dual-stack as the Node's
/// `podCIDRs`): masquerading for traffic leaving the node, host ports, the firewall plugin's
/// forwarding rules, and bandwidth limits from the pods' annotations. systemd brings up the
/// pod's loopback interface itself (`PrivateNetwork=`), so the loopback plugin is not needed.
pub fn bridge(subnets: &[String]) -> Result<NetworkConfigList, String> {
    if subnets.is_empty() {
        return Err("no subnet".into());
    }
    let mut ranges = Vec::new();
    let mut routes = Vec::new();
    for s in subnets {
        let net = IpNet::parse(s).map_err(|e| format!("subnet {s:?}: {}", e.0))?;
        ranges.push(json!([{ "subnet": s }]));
        routes.push(json!({ "dst": if net.addr.is_ipv4() { "0.0.0.0/0" } else { "::/0" } }));
    }
    let plugins: Vec<Map<String, Value>> = [
        json!({
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": true,
            "ipMasq": true,
            "hairpinMode": true,
            "ipam": { "type": "host-local", "ranges": ranges, "routes": routes },
        }),
        json!({ "type": "portmap", "capabilities": { "portMappings": true } }),
        json!({ "type": "firewall" }),
        json!({ "type": "bandwidth", "capabilities": { "bandwidth": true } }),
    ]
    .into_iter()
    .filter_map(|v| match v {
        Value::Object(o) => Some(o),
        _ => None,
    })
    .collect();
    Ok(NetworkConfigList {
        name: NAME.into(),
        cni_version: "1.0.0".into(),
        disable_check: false,
        plugins,
        source: None,
    })
}

/// What decides the node's network besides the configuration directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fallback {
    /// `cni.podSubnet` from the node config.
    pub configured: Option<String>,
    /// Cluster mode (a kubeconfig is set).
    pub cluster: bool,
    /// The Node's `spec.podCIDRs`, as the node agent last saw them.
    pub pod_cidrs: Vec<String>,
}

impl Fallback {
    /// The subnets of podunit's own network; none: the node's network is not ready.
    pub fn subnets(&self) -> Option<Vec<String>> {
        if let Some(s) = self.configured.as_ref().filter(|s| !s.is_empty()) {
            return Some(vec![s.clone()]);
        }
        if self.cluster {
            return (!self.pod_cidrs.is_empty()).then(|| self.pod_cidrs.clone());
        }
        Some(vec![LOCAL_SUBNET.into()])
    }
}

impl Fallback {
    /// The node's: its config, its mode, and the podCIDRs the node agent recorded.
    pub fn for_node(config: &crate::common::config::Config, paths: &Paths) -> Fallback {
        let cluster = config.kubeconfig.is_some();
        Fallback {
            configured: config.cni.pod_subnet.clone(),
            cluster,
            pod_cidrs: if cluster {
                read_pod_cidrs(paths)
            } else {
                Vec::new()
            },
        }
    }
}

/// The podCIDRs the node agent recorded; none when it has not (yet).
pub fn read_pod_cidrs(paths: &Paths) -> Vec<String> {
    std::fs::read(paths.host(Paths::POD_CIDRS))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Records the Node's podCIDRs for `pod-prepare` (root-only, atomically); unchanged is no write.
pub fn write_pod_cidrs(paths: &Paths, cidrs: &[String]) -> Result<(), atomicfile::Error> {
    if read_pod_cidrs(paths) == cidrs {
        return Ok(());
    }
    let text = serde_json::to_vec(cidrs).unwrap_or_default();
    atomicfile::write(
        &paths.host(Paths::POD_CIDRS),
        &text,
        atomicfile::Options::new(0o600).owner(0, 0),
    )
}

/// The node's network: the configuration directory's first file, else podunit's own network
/// when `fallback` gives it subnets, else [`ConfigError::Uninitialized`].
pub fn load(dir: &Path, fallback: &Fallback) -> Result<NetworkConfigList, ConfigError> {
    match config::load_dir(dir) {
        Err(ConfigError::Uninitialized { dir }) => match fallback.subnets() {
            Some(subnets) => bridge(&subnets).map_err(|reason| ConfigError::Malformed {
                path: PathBuf::from("podunit's own network (cni.podSubnet, the Node's podCIDRs)"),
                reason,
            }),
            None => Err(ConfigError::Uninitialized { dir }),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bridge_is_the_documented_conflist() {
        let l = bridge(&[LOCAL_SUBNET.into()]).unwrap();
        assert_eq!(
            l.plugin_types(),
            ["bridge", "portmap", "firewall", "bandwidth"]
        );
        let text = serde_json::to_string(&l.to_json()).unwrap();
        // What docs/networking.md shows, key for key (it is read back from there).
        let doc = include_str!("../../docs/networking.md");
        let start = doc
            .find("<!-- default-network -->")
            .expect("marker in docs/networking.md");
        let block = &doc[start..];
        let json_start = block.find("```json\n").unwrap() + 8;
        let json_end = block[json_start..].find("```").unwrap() + json_start;
        let shown: Value = serde_json::from_str(&block[json_start..json_end]).unwrap();
        let parsed = NetworkConfigList::parse(shown.to_string().as_bytes(), true).unwrap();
        assert_eq!(serde_json::to_string(&parsed.to_json()).unwrap(), text);
        // A list the parser takes as a file's.
        assert_eq!(NetworkConfigList::parse(text.as_bytes(), true).unwrap(), l);
    }

    #[test]
    fn dual_stack_gets_a_range_and_a_default_route_per_family() {
        let l = bridge(&["10.244.3.0/24".into(), "fd00:10:244:3::/64".into()]).unwrap();
        let ipam = &l.plugins[0]["ipam"];
        assert_eq!(
            ipam["ranges"],
            json!([[{"subnet": "10.244.3.0/24"}], [{"subnet": "fd00:10:244:3::/64"}]])
        );
        assert_eq!(
            ipam["routes"],
            json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}])
        );
        assert!(bridge(&["10.0.0.0".into()]).is_err());
        assert!(bridge(&[]).is_err());
    }

    #[test]
    fn subnets_follow_config_then_pod_cidrs_then_the_local_default() {
        let local = Fallback::default();
        assert_eq!(local.subnets(), Some(vec![LOCAL_SUBNET.to_string()]));
        let cluster = Fallback {
            cluster: true,
            ..Fallback::default()
        };
        assert_eq!(
            cluster.subnets(),
            None,
            "a cluster node waits for its podCIDR"
        );
        let assigned = Fallback {
            cluster: true,
            pod_cidrs: vec!["10.244.1.0/24".into()],
            ..Fallback::default()
        };
        assert_eq!(assigned.subnets(), Some(vec!["10.244.1.0/24".to_string()]));
        let set = Fallback {
            configured: Some("192.168.50.0/24".into()),
            ..assigned
        };
        assert_eq!(set.subnets(), Some(vec!["192.168.50.0/24".to_string()]));
    }

    #[test]
    fn a_file_in_the_directory_wins() {
        let dir = std::env::temp_dir().join(format!("podunit-defnet-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let local = Fallback::default();
        assert_eq!(load(&dir, &local).unwrap().name, NAME);
        let cluster = Fallback {
            cluster: true,
            ..Fallback::default()
        };
        assert!(matches!(
            load(&dir, &cluster),
            Err(ConfigError::Uninitialized { .. })
        ));
        std::fs::write(
            dir.join("10-flannel.conflist"),
            r#"{"cniVersion":"0.4.0","name":"cbr0","plugins":[{"type":"flannel"}]}"#,
        )
        .unwrap();
        assert_eq!(load(&dir, &local).unwrap().name, "cbr0");
        assert_eq!(load(&dir, &cluster).unwrap().name, "cbr0");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
