//! The Node object and its Lease: what the host has (gathered once, at the edge) and the pure
//! builders that turn it into the API objects the kubelet would post.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::path::Path;

/// The namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The kubelet's default pod capacity.
pub const MAX_PODS: u32 = 110;

/// What the host has: read once at start (and on each status post for what can change).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostInfo {
    pub hostname: String,
    pub cpus: u32,
    pub memory_bytes: u64,
    pub ephemeral_storage_bytes: u64,
    /// Node IPs, the preferred one first.
    pub addresses: Vec<String>,
    pub machine_id: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    /// Go's GOARCH spelling (amd64, arm64, ...), as the label `kubernetes.io/arch` wants.
    pub arch: String,
    /// `systemd://<version>`: our container runtime.
    pub runtime_version: String,
    /// The kubelet API's port (daemonEndpoints); 0 when it is not served.
    pub kubelet_port: u16,
    /// Why the pods' network is not ready (`network: cni` without a usable configuration): the
    /// node is then not Ready, as a kubelet whose runtime reports `NetworkReady=false`.
    pub network_error: Option<String>,
}

/// The kubelet's Ready message for a runtime whose network is not ready, with containerd's
/// words for a node without a CNI configuration.
pub fn network_not_ready(cni_error: &crate::cni::config::ConfigError) -> String {
    let why = match cni_error {
        crate::cni::config::ConfigError::Uninitialized { .. } => {
            "cni plugin not initialized".into()
        }
        e => e.to_string(),
    };
    format!(
        "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady \
         message:Network plugin returns error: {why}"
    )
}

/// `v1.33.0-podunit-<version>`: the API version the types are from, and that this is podunit.
pub fn kubelet_version() -> String {
    format!("v1.33.0-podunit-{}", env!("CARGO_PKG_VERSION"))
}

pub use crate::manifest::admission::go_arch;

/// The labels a kubelet sets on its Node, plus the configured ones.
pub fn labels(
    node_name: &str,
    info: &HostInfo,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    crate::manifest::admission::node_labels(node_name, &info.arch, extra)
}

fn q(s: String) -> Quantity {
    Quantity(s)
}

fn resources(info: &HostInfo) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), q(info.cpus.to_string())),
        (
            "memory".to_string(),
            q(format!("{}Ki", info.memory_bytes / 1024)),
        ),
        (
            "ephemeral-storage".to_string(),
            q(format!("{}Ki", info.ephemeral_storage_bytes / 1024)),
        ),
        ("pods".to_string(), q(MAX_PODS.to_string())),
    ])
}

fn condition(
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    prev: Option<&NodeStatus>,
    now: Timestamp,
) -> NodeCondition {
    let status = if ok { "True" } else { "False" }.to_string();
    let old = prev
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind));
    let since = match old {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => None,
    }
    .unwrap_or(Time(now));
    NodeCondition {
        type_: kind.to_string(),
        status,
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(since),
    }
}

/// The addresses the Node reports: its IPs as InternalIP, then its host name.
pub fn addresses(info: &HostInfo) -> Vec<NodeAddress> {
    let mut addresses: Vec<NodeAddress> = info
        .addresses
        .iter()
        .map(|a| NodeAddress {
            type_: "InternalIP".into(),
            address: a.clone(),
        })
        .collect();
    addresses.push(NodeAddress {
        type_: "Hostname".into(),
        address: info.hostname.clone(),
    });
    addresses
}

/// The node's status. `prev` keeps condition transition times.
pub fn status(info: &HostInfo, prev: Option<&NodeStatus>, now: Timestamp) -> NodeStatus {
    let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
    let addresses = addresses(info);
    NodeStatus {
        capacity: Some(resources(info)),
        allocatable: Some(resources(info)),
        addresses: Some(addresses),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
                prev,
                now,
            ),
            condition(
                "DiskPressure",
                false,
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
                prev,
                now,
            ),
            condition(
                "PIDPressure",
                false,
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
                prev,
                now,
            ),
            match &info.network_error {
                None => condition(
                    "Ready",
                    true,
                    "KubeletReady",
                    "podunit is posting ready status",
                    prev,
                    now,
                ),
                Some(why) => condition("Ready", false, "KubeletNotReady", why, prev, now),
            },
        ]),
        node_info: Some(NodeSystemInfo {
            architecture: info.arch.clone(),
            boot_id: info.boot_id.clone(),
            container_runtime_version: info.runtime_version.clone(),
            kernel_version: info.kernel_version.clone(),
            kube_proxy_version: String::new(),
            kubelet_version: kubelet_version(),
            machine_id: info.machine_id.clone(),
            operating_system: "linux".into(),
            os_image: info.os_image.clone(),
            system_uuid: info.machine_id.clone(),
            ..Default::default()
        }),
        daemon_endpoints: (info.kubelet_port != 0).then(|| NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(info.kubelet_port),
            }),
        }),
        ..Default::default()
    }
}

/// Whether two statuses differ in more than heartbeat times (decides an early post).
pub fn status_changed(a: &NodeStatus, b: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(a) != strip(b)
}

/// The Node to register.
pub fn node(
    name: &str,
    info: &HostInfo,
    extra_labels: &BTreeMap<String, String>,
    taints: &[k8s_openapi::api::core::v1::Taint],
    now: Timestamp,
) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels(name, info, extra_labels)),
            annotations: Some(BTreeMap::from([(
                "node.alpha.kubernetes.io/ttl".to_string(),
                "0".to_string(),
            )])),
            ..Default::default()
        },
        // As the kubelet registers them: on an existing Node (a restart) they are left alone.
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then(|| taints.to_vec()),
            ..NodeSpec::default()
        }),
        status: Some(status(info, None, now)),
    }
}

/// The node's Lease, owned by the Node so it goes away with it.
pub fn lease(
    node_name: &str,
    node_uid: Option<&str>,
    duration_seconds: i32,
    now: Timestamp,
) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node_name.to_string()),
            namespace: Some(LEASE_NAMESPACE.to_string()),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node_name.to_string(),
                    uid: uid.to_string(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node_name.to_string()),
            lease_duration_seconds: Some(duration_seconds),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Reads what the host has. `storage` is the filesystem whose size is ephemeral-storage.
pub fn gather(storage: &Path, override_ip: Option<&str>) -> HostInfo {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let memory_bytes = meminfo_total(&read("/proc/meminfo")).unwrap_or(0);
    let ephemeral_storage_bytes = nix::sys::statvfs::statvfs(storage)
        .map(|s| s.blocks() * s.fragment_size())
        .unwrap_or(0);
    let mut addresses = Vec::new();
    if let Some(ip) = override_ip {
        addresses.push(ip.to_string());
    } else {
        addresses = host_addresses(&read("/proc/net/route"));
    }
    HostInfo {
        hostname: crate::common::config::host_name(),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
        memory_bytes,
        ephemeral_storage_bytes,
        addresses,
        machine_id: read("/etc/machine-id"),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        kernel_version: read("/proc/sys/kernel/osrelease"),
        os_image: os_pretty_name(&read("/etc/os-release")),
        arch: go_arch(std::env::consts::ARCH).to_string(),
        runtime_version: String::new(),
        kubelet_port: 0,
        network_error: None,
    }
}

/// `MemTotal` from /proc/meminfo, in bytes.
pub fn meminfo_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `PRETTY_NAME` from os-release.
pub fn os_pretty_name(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".to_string())
}

/// The interface of the default route (from /proc/net/route), if any.
pub fn default_route_interface(route: &str) -> Option<String> {
    route.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_string())
    })
}

/// The node IP when none is configured, as the kubelet picks it without `--node-ip`
/// (`chooseHostInterface`): the first IPv4 address of the default route's interface. One
/// address: the API server takes at most one pod and host IP per family, and a host with a
/// second address (a VPN, a dummy interface, a secondary address) must not make every pod's
/// status invalid.
fn host_addresses(route: &str) -> Vec<String> {
    let mut found: Vec<(String, std::net::Ipv4Addr)> = Vec::new();
    if let Ok(ifs) = nix::ifaddrs::getifaddrs() {
        for i in ifs {
            if let Some(addr) = i.address.as_ref().and_then(|a| a.as_sockaddr_in()) {
                found.push((i.interface_name.clone(), addr.ip()));
            }
        }
    }
    vec![choose_node_ip(
        &found,
        default_route_interface(route).as_deref(),
    )]
}

/// The first usable address (not loopback, not link-local) of `preferred` (the default
/// route's interface), in the kernel's order (its primary address first); without one, the
/// first usable address of any interface; loopback as a last resort.
fn choose_node_ip(addrs: &[(String, std::net::Ipv4Addr)], preferred: Option<&str>) -> String {
    let usable = |ip: &std::net::Ipv4Addr| !ip.is_loopback() && !ip.is_link_local();
    addrs
        .iter()
        .find(|(i, ip)| Some(i.as_str()) == preferred && usable(ip))
        .or_else(|| addrs.iter().find(|(_, ip)| usable(ip)))
        .map_or_else(|| "127.0.0.1".to_string(), |(_, ip)| ip.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> HostInfo {
        HostInfo {
            hostname: "edge-1".into(),
            cpus: 4,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
            addresses: vec!["192.0.2.7".into()],
            machine_id: "m".into(),
            boot_id: "b".into(),
            kernel_version: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            arch: "amd64".into(),
            runtime_version: "systemd://252".into(),
            kubelet_port: 10250,
            network_error: None,
        }
    }

    #[test]
    fn not_ready_without_a_cni_configuration() {
        let e = crate::cni::config::ConfigError::Uninitialized {
            dir: "/etc/cni/net.d".into(),
        };
        let i = HostInfo {
            network_error: Some(network_not_ready(&e)),
            ..info()
        };
        let st = status(&i, None, Timestamp::from_second(1000).unwrap());
        let ready = st
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("KubeletNotReady"))
        );
        assert_eq!(
            ready.message.as_deref(),
            Some(
                "container runtime network not ready: NetworkReady=false \
                 reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin \
                 not initialized"
            )
        );
    }

    #[test]
    fn node_object() {
        let n = node(
            "edge-1",
            &info(),
            &BTreeMap::from([("zone".into(), "a".into())]),
            &[k8s_openapi::api::core::v1::Taint {
                key: "dedicated".into(),
                value: Some("edge".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }],
            Timestamp::from_second(1000).unwrap(),
        );
        assert_eq!(
            serde_json::to_value(&n).unwrap()["spec"]["taints"],
            serde_json::json!([{"key": "dedicated", "value": "edge", "effect": "NoSchedule"}])
        );
        let v = serde_json::to_value(&n).unwrap();
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/hostname"], "edge-1");
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/arch"], "amd64");
        assert_eq!(v["metadata"]["labels"]["zone"], "a");
        assert_eq!(v["status"]["capacity"]["cpu"], "4");
        assert_eq!(v["status"]["capacity"]["memory"], "8388608Ki");
        assert_eq!(v["status"]["allocatable"]["pods"], "110");
        assert_eq!(v["status"]["addresses"][0]["type"], "InternalIP");
        assert_eq!(v["status"]["addresses"][1]["address"], "edge-1");
        assert!(
            v["status"]["nodeInfo"]["kubeletVersion"]
                .as_str()
                .unwrap()
                .contains("podunit")
        );
        let ready = &v["status"]["conditions"][3];
        assert_eq!(ready["type"], "Ready");
        assert_eq!(ready["status"], "True");
        assert_eq!(
            v["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
            10250
        );
    }

    #[test]
    fn heartbeat_alone_is_no_change_and_transition_time_is_kept() {
        let a = status(&info(), None, Timestamp::from_second(1000).unwrap());
        let b = status(&info(), Some(&a), Timestamp::from_second(1060).unwrap());
        assert!(!status_changed(&a, &b));
        let ready = |s: &NodeStatus| s.conditions.as_ref().unwrap()[3].clone();
        assert_eq!(
            ready(&b).last_transition_time,
            Some(Time(Timestamp::from_second(1000).unwrap()))
        );
        assert_eq!(
            ready(&b).last_heartbeat_time,
            Some(Time(Timestamp::from_second(1060).unwrap()))
        );
        let mut i2 = info();
        i2.addresses = vec!["192.0.2.8".into()];
        assert!(status_changed(
            &a,
            &status(&i2, Some(&a), Timestamp::from_second(1060).unwrap())
        ));
    }

    #[test]
    fn lease_object() {
        let l = lease(
            "edge-1",
            Some("uid-1"),
            40,
            Timestamp::from_second(1000).unwrap(),
        );
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(v["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(v["spec"]["holderIdentity"], "edge-1");
        assert_eq!(v["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert!(
            v["spec"]["renewTime"]
                .as_str()
                .unwrap()
                .starts_with("1970-01-01T00:16:40")
        );
    }

    #[test]
    fn host_file_parsers() {
        assert_eq!(
            meminfo_total("MemTotal:       16314964 kB\nMemFree: 1 kB\n"),
            Some(16314964 * 1024)
        );
        assert_eq!(
            os_pretty_name("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
            "Debian GNU/Linux 12 (bookworm)"
        );
        let route = "Iface\tDestination\tGateway \tFlags\nens3\t0000A8C0\t00000000\t0001\neth0\t00000000\t0102A8C0\t0003\n";
        assert_eq!(default_route_interface(route).as_deref(), Some("eth0"));
        let a = |i: &str, ip: &str| (i.to_string(), ip.parse().unwrap());
        let addrs = [
            a("lo", "127.0.0.1"),
            a("dummy0", "10.0.0.1"),
            a("eth0", "169.254.1.1"),
            a("eth0", "192.168.2.7"),
            a("eth0", "192.168.2.8"),
        ];
        // One address, the default route interface's first usable one, as the kubelet.
        assert_eq!(choose_node_ip(&addrs, Some("eth0")), "192.168.2.7");
        assert_eq!(choose_node_ip(&addrs, None), "10.0.0.1");
        assert_eq!(choose_node_ip(&addrs[..1], Some("eth0")), "127.0.0.1");
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
    }
}
