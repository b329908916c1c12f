//! The pod's DNS as the kubelet composes it (pkg/kubelet/network/dns): `dnsPolicy` picks the
//! cluster's DNS (`ClusterFirst`, `ClusterFirstWithHostNet`), the node's (`Default`, and
//! `ClusterFirst` on the host network or with no `clusterDNS` configured) or none (`None`), and
//! `dnsConfig` is appended. What the node's resolv.conf says is added when the pod starts
//! ([`crate::podstart::etcfiles::resolv_conf`]).

use super::NodeFacts;
use super::plan::{DnsKind, DnsPlan};
use k8s_openapi::api::core::v1::Pod;

/// The options the kubelet gives `ClusterFirst` pods.
pub const CLUSTER_OPTIONS: &[&str] = &["ndots:5"];

pub fn plan(pod: &Pod, node: &NodeFacts) -> DnsPlan {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network) == Some(true);
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let wants_cluster = match policy {
        "None" => None,
        "ClusterFirstWithHostNet" => Some(true),
        "Default" => Some(false),
        // ClusterFirst falls back to Default on the host network.
        _ => Some(!host_network),
    };
    let mut d = DnsPlan::default();
    match wants_cluster {
        None => d.kind = DnsKind::None,
        // No cluster DNS: the kubelet's MissingClusterDNS fallback to Default.
        Some(true) if !node.cluster_dns.is_empty() => {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let domain = &node.cluster_domain;
            d.kind = DnsKind::Cluster;
            d.nameservers = node.cluster_dns.clone();
            if !domain.is_empty() {
                d.searches = vec![
                    format!("{ns}.svc.{domain}"),
                    format!("svc.{domain}"),
                    domain.clone(),
                ];
            }
            d.options = CLUSTER_OPTIONS.iter().map(|o| o.to_string()).collect();
        }
        Some(_) => d.kind = DnsKind::Host,
    }
    if let Some(c) = spec.and_then(|s| s.dns_config.as_ref()) {
        d.extra_nameservers = c.nameservers.clone().unwrap_or_default();
        d.extra_searches = c.searches.clone().unwrap_or_default();
        d.extra_options = c
            .options
            .iter()
            .flatten()
            .map(|o| (o.name.clone().unwrap_or_default(), o.value.clone()))
            .collect();
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_json::from_value(serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap()).unwrap()
    }

    fn node(dns: &[&str]) -> NodeFacts {
        NodeFacts {
            cluster_dns: dns.iter().map(|s| s.to_string()).collect(),
            ..NodeFacts::default()
        }
    }

    #[test]
    fn policies_and_their_fallbacks() {
        let kind = |spec: &str, dns: &[&str]| {
            plan(
                &pod(&format!(
                    "metadata: {{name: p, namespace: shop}}\nspec: {spec}\n"
                )),
                &node(dns),
            )
            .kind
        };
        let c = &["10.96.0.10"];
        assert_eq!(kind("{}", c), DnsKind::Cluster);
        assert_eq!(kind("{}", &[]), DnsKind::Host, "MissingClusterDNS");
        assert_eq!(kind("{hostNetwork: true}", c), DnsKind::Host);
        assert_eq!(
            kind("{hostNetwork: true, dnsPolicy: ClusterFirstWithHostNet}", c),
            DnsKind::Cluster
        );
        assert_eq!(kind("{dnsPolicy: Default}", c), DnsKind::Host);
        assert_eq!(kind("{dnsPolicy: None}", c), DnsKind::None);
        let p = plan(
            &pod("metadata: {name: p, namespace: shop}\nspec: {}\n"),
            &node(c),
        );
        assert_eq!(
            p.searches,
            [
                "shop.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ]
        );
        assert_eq!(
            (p.nameservers.as_slice(), p.options.as_slice()),
            (&c.map(String::from)[..], &["ndots:5".to_string()][..])
        );
    }
}
