//! The kubelet's NodePorts admission (pkg/kubelet/lifecycle/predicate.go, the scheduler's
//! `nodeports` filter): pods are admitted in order, and a pod asking for a host port that an
//! admitted pod holds (same protocol and port, on the same IP or either on 0.0.0.0) is refused.
//! With no scheduler in local mode this is the only check: two pods may not both publish 80.

use k8s_openapi::api::core::v1::Pod;

/// The kubelet's reason, and its message (without the status's `Pod was rejected: `).
pub const NODE_PORTS: &str = "NodePorts";
pub const MESSAGE: &str =
    "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports";

/// One host port a pod asks for, with the field that asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub path: String,
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    fn clashes(&self, other: &HostPort) -> bool {
        let any = |ip: &str| ip == "0.0.0.0" || ip == "::";
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || any(&self.ip) || any(&other.ip))
    }
}

/// The host ports of `pod`'s app and init containers. On the host network every container port
/// is a host port (the API server defaults `hostPort` to `containerPort` there).
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let host_network = spec.host_network == Some(true);
    let lists = [
        ("spec.containers", Some(&spec.containers)),
        ("spec.initContainers", spec.init_containers.as_ref()),
    ];
    let mut out = Vec::new();
    for (base, list) in lists {
        for (i, c) in list.into_iter().flatten().enumerate() {
            for (j, p) in c.ports.iter().flatten().enumerate() {
                let port = match p.host_port {
                    Some(h) if h > 0 => h,
                    _ if host_network => p.container_port,
                    _ => continue,
                };
                out.push(HostPort {
                    path: format!("{base}[{i}].ports[{j}].hostPort"),
                    ip: p
                        .host_ip
                        .clone()
                        .filter(|ip| !ip.is_empty())
                        .unwrap_or_else(|| "0.0.0.0".into()),
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    port,
                });
            }
        }
    }
    out
}

/// A pod refused for a port an earlier one holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clash {
    /// The refused pod's field.
    pub path: String,
    /// `port/protocol` and the pod (`namespace/name`) that holds it.
    pub port: String,
    pub holder: String,
}

/// Admits `pods` (`namespace/name`, pod) in order: for each, the first port an admitted pod
/// holds, if any.
pub fn admit<'a>(pods: impl IntoIterator<Item = (String, &'a Pod)>) -> Vec<Option<Clash>> {
    let mut held: Vec<(HostPort, String)> = Vec::new();
    let mut out = Vec::new();
    for (key, pod) in pods {
        let ports = host_ports(pod);
        let clash = ports.iter().find_map(|p| {
            held.iter()
                .find(|(h, _)| h.clashes(p))
                .map(|(h, holder)| Clash {
                    path: p.path.clone(),
                    port: format!("{}/{}", h.port, h.protocol),
                    holder: holder.clone(),
                })
        });
        if clash.is_none() {
            held.extend(ports.into_iter().map(|p| (p, key.clone())));
        }
        out.push(clash);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_json::from_value(serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap()).unwrap()
    }

    #[test]
    fn first_come_holds_the_port_as_the_kubelet_admits() {
        let a =
            pod("spec: {containers: [{name: a, ports: [{containerPort: 80, hostPort: 8080}]}]}");
        let b = pod(
            "spec: {containers: [{name: b, ports: [{containerPort: 81}, {containerPort: 80, hostPort: 8080, hostIP: 10.0.0.1}]}]}",
        );
        let udp = pod(
            "spec: {containers: [{name: u, ports: [{containerPort: 80, hostPort: 8080, protocol: UDP}]}]}",
        );
        let hostnet = pod(
            "spec: {hostNetwork: true, containers: [{name: h, ports: [{containerPort: 8080}]}]}",
        );
        let r = admit([
            ("default/a".into(), &a),
            ("default/b".into(), &b),
            ("default/udp".into(), &udp),
            ("default/hostnet".into(), &hostnet),
        ]);
        assert_eq!(r[0], None);
        assert_eq!(
            r[1],
            Some(Clash {
                path: "spec.containers[0].ports[1].hostPort".into(),
                port: "8080/TCP".into(),
                holder: "default/a".into()
            })
        );
        assert_eq!(r[2], None, "another protocol");
        assert_eq!(
            r[3].as_ref().map(|c| c.holder.as_str()),
            Some("default/a"),
            "hostNetwork ports are host ports"
        );
        // Distinct IPs do not clash; a refused pod holds nothing.
        let x = pod(
            "spec: {containers: [{name: cx, ports: [{containerPort: 1, hostPort: 9, hostIP: 10.0.0.1}]}]}",
        );
        let y = pod(
            "spec: {containers: [{name: cy, ports: [{containerPort: 1, hostPort: 9, hostIP: 10.0.0.2}]}]}",
        );
        assert_eq!(
            admit([("d/x".into(), &x), ("d/y".into(), &y)]),
            [None, None]
        );
    }
}
