//! The environment the kubelet gives every container for the cluster's Services
//! (pkg/kubelet/envvars, `getServiceEnvVarMap`): the `kubernetes` Service of `default` always, so
//! that in-cluster clients find the API server, and with `enableServiceLinks` (the default) every
//! Service of the pod's own namespace, in the form of Docker links. Only in cluster mode: a
//! kubelet without an API server sets none.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The namespace and names of the services every pod gets (the kubelet's `masterServices`).
pub const MASTER_NAMESPACE: &str = "default";
pub const MASTER_SERVICE: &str = "kubernetes";

/// What of a Service the environment needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    /// `spec.clusterIP`: empty or `None` (headless) gives no variables.
    pub cluster_ip: String,
    pub ports: Vec<ServicePort>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServicePort {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub port: i32,
    /// Empty is TCP.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
}

impl ServiceRef {
    fn ip_set(&self) -> bool {
        !self.cluster_ip.is_empty() && self.cluster_ip != "None"
    }
}

/// The variables for a pod in `namespace` (`links`: its `enableServiceLinks`), sorted by name.
pub fn env(services: &[ServiceRef], namespace: &str, links: bool) -> Vec<(String, String)> {
    // The pod's namespace's Service of a master name wins over the master one, whatever the order.
    let mut chosen: BTreeMap<&str, &ServiceRef> = BTreeMap::new();
    for s in services
        .iter()
        .filter(|s| s.ip_set() && !s.ports.is_empty())
    {
        if s.namespace == MASTER_NAMESPACE && s.name == MASTER_SERVICE {
            chosen.entry(&s.name).or_insert(s);
        } else if s.namespace == namespace && links {
            chosen.insert(&s.name, s);
        }
    }
    let mut out = BTreeMap::new();
    for s in chosen.values() {
        from_service(s, &mut out);
    }
    out.into_iter().collect()
}

/// Whether `name` has the shape of a Service's variable (`<NAME>_SERVICE_HOST`,
/// `<NAME>_SERVICE_PORT[_<PORT NAME>]`, `<NAME>_PORT[_<n>_<PROTO>[_PROTO|_PORT|_ADDR]]`): a
/// `$(NAME)` of that shape is expanded when the container starts, any other unknown one stays as
/// written (`$(hostname)` in a shell command).
pub fn may_be_service_var(name: &str) -> bool {
    name.bytes()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && (name.ends_with("_SERVICE_HOST")
            || name.contains("_SERVICE_PORT")
            || name.ends_with("_PORT")
            || name.contains("_PORT_"))
}

fn var_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

/// envvars.FromServices for one Service.
fn from_service(s: &ServiceRef, out: &mut BTreeMap<String, String>) {
    let prefix = var_name(&s.name);
    let ip = &s.cluster_ip;
    out.insert(format!("{prefix}_SERVICE_HOST"), ip.clone());
    let port_var = format!("{prefix}_SERVICE_PORT");
    out.insert(port_var.clone(), s.ports[0].port.to_string());
    for p in s.ports.iter().filter(|p| !p.name.is_empty()) {
        out.insert(
            format!("{port_var}_{}", var_name(&p.name)),
            p.port.to_string(),
        );
    }
    // makeLinkVariables: Docker's link variables.
    for (i, p) in s.ports.iter().enumerate() {
        let proto = if p.protocol.is_empty() {
            "TCP".to_string()
        } else {
            p.protocol.clone()
        };
        let lower = proto.to_lowercase();
        let host_port = match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V6(_)) => format!("[{ip}]:{}", p.port),
            _ => format!("{ip}:{}", p.port),
        };
        let url = format!("{lower}://{host_port}");
        if i == 0 {
            out.insert(format!("{prefix}_PORT"), url.clone());
        }
        let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
        out.insert(format!("{pp}_PROTO"), lower);
        out.insert(format!("{pp}_PORT"), p.port.to_string());
        out.insert(format!("{pp}_ADDR"), ip.clone());
        out.insert(pp, url);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ns: &str, name: &str, ip: &str, ports: &[(&str, i32, &str)]) -> ServiceRef {
        ServiceRef {
            namespace: ns.into(),
            name: name.into(),
            cluster_ip: ip.into(),
            ports: ports
                .iter()
                .map(|(n, p, proto)| ServicePort {
                    name: n.to_string(),
                    port: *p,
                    protocol: proto.to_string(),
                })
                .collect(),
        }
    }

    /// The `kubernetes` Service and a Service of `team-a` with two ports, one unnamed.
    fn api_and_db(second_port: (&str, i32, &str)) -> Vec<ServiceRef> {
        vec![
            svc("default", "kubernetes", "10.0.0.1", &[("https", 443, "")]),
            svc(
                "team-a",
                "my-db",
                "10.0.0.7",
                &[("", 5432, ""), second_port],
            ),
        ]
    }

    fn names(v: &[(String, String)]) -> Vec<&str> {
        v.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn every_variable_made_has_the_shape_and_shell_words_do_not() {
        let all = api_and_db(("m-1", 9187, "UDP"));
        for (k, _) in env(&all, "team-a", true) {
            assert!(may_be_service_var(&k), "{k}");
        }
        for k in ["hostname", "date", "HOME", "POD_NAME", "PATH", "MY_SERVICE"] {
            assert!(!may_be_service_var(k), "{k}");
        }
    }

    #[test]
    fn the_kubernetes_service_as_every_pod_sees_it() {
        let all = [svc(
            "default",
            "kubernetes",
            "10.0.0.1",
            &[("https", 443, "TCP")],
        )];
        let want: Vec<(String, String)> = [
            ("KUBERNETES_PORT", "tcp://10.0.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.0.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.1"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env(&all, "team-a", true), want);
        assert_eq!(env(&all, "team-a", false), want);
    }

    #[test]
    fn links_are_the_namespaces_services_only_and_skip_headless_ones() {
        let mut all = api_and_db(("metrics", 9187, "TCP"));
        all.extend([
            svc("team-a", "dns", "10.0.0.9", &[("dns", 53, "UDP")]),
            svc("team-a", "headless", "None", &[("", 80, "")]),
            svc("team-b", "other", "10.0.0.8", &[("", 80, "")]),
        ]);
        let e = env(&all, "team-a", true);
        let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("MY_DB_SERVICE_HOST"), Some("10.0.0.7"));
        assert_eq!(get("MY_DB_SERVICE_PORT"), Some("5432"));
        assert_eq!(get("MY_DB_SERVICE_PORT_METRICS"), Some("9187"));
        assert_eq!(get("MY_DB_PORT"), Some("tcp://10.0.0.7:5432"));
        assert_eq!(get("MY_DB_PORT_9187_TCP"), Some("tcp://10.0.0.7:9187"));
        assert_eq!(get("DNS_PORT"), Some("udp://10.0.0.9:53"));
        assert_eq!(get("DNS_PORT_53_UDP_PROTO"), Some("udp"));
        assert!(
            !names(&e)
                .iter()
                .any(|n| n.starts_with("HEADLESS") || n.starts_with("OTHER"))
        );
        assert!(
            names(&env(&all, "team-a", false))
                .iter()
                .all(|n| n.starts_with("KUBERNETES_"))
        );
    }

    #[test]
    fn a_namespaces_own_kubernetes_service_wins_and_ipv6_is_bracketed() {
        for order in [false, true] {
            let mut all = vec![
                svc("default", "kubernetes", "10.0.0.1", &[("", 443, "")]),
                svc("team-a", "kubernetes", "fd00::5", &[("", 8443, "")]),
            ];
            if order {
                all.reverse();
            }
            let e = env(&all, "team-a", true);
            let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
            assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("fd00::5"));
            assert_eq!(get("KUBERNETES_PORT"), Some("tcp://[fd00::5]:8443"));
        }
    }
}
