//! The pod's attachment by CNI (node config `network: cni`), as the kubelet asks containerd for it:
//! every app container's `hostPort` as a port mapping (the `portMappings` capability) and the
//! `kubernetes.io/ingress-bandwidth` / `egress-bandwidth` annotations as the `bandwidth`
//! capability. `pod-prepare` runs the plugins when the pod starts.

use super::Fault;
use super::plan::{BandwidthPlan, NetworkPlan, PortMappingPlan};
use k8s_openapi::api::core::v1::{Pod, PodSpec};

pub const INGRESS_BANDWIDTH: &str = "kubernetes.io/ingress-bandwidth";
pub const EGRESS_BANDWIDTH: &str = "kubernetes.io/egress-bandwidth";

/// The plan of a pod on the CNI network; None for a `hostNetwork` pod, which has no attachment.
pub fn plan(pod: &Pod, spec: &PodSpec) -> Result<Option<NetworkPlan>, Fault> {
    if spec.host_network == Some(true) {
        return Ok(None);
    }
    let mut port_mappings = Vec::new();
    // The kubelet's sandbox config lists the ports of `containers`, not of init containers.
    for c in &spec.containers {
        for p in c.ports.iter().flatten() {
            let (Ok(host_port), Ok(container_port)) = (
                u16::try_from(p.host_port.unwrap_or(0)),
                u16::try_from(p.container_port),
            ) else {
                continue; // out of range: validation refuses the pod
            };
            if host_port == 0 {
                continue;
            }
            port_mappings.push(PortMappingPlan {
                host_port,
                container_port,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    let annotations = pod.metadata.annotations.as_ref();
    let rate = |key: &str| -> Result<Option<u64>, Fault> {
        let Some(v) = annotations.and_then(|a| a.get(key)) else {
            return Ok(None);
        };
        let path = format!("metadata.annotations[{key}]");
        let bits = crate::common::quantity::bytes(v)
            .map_err(|e| Fault::new(path.clone(), format!("{v:?}: {e}")))?;
        // The kubelet's bounds (pkg/util/bandwidth): 1k to 1P bits per second.
        if bits < 1_000 {
            return Err(Fault::new(path, "resource is unreasonably small (< 1kbit)"));
        }
        if bits > 1_000_000_000_000_000 {
            return Err(Fault::new(path, "resource is unreasonably large (> 1Pbit)"));
        }
        Ok(Some(bits))
    };
    let (ingress, egress) = (rate(INGRESS_BANDWIDTH)?, rate(EGRESS_BANDWIDTH)?);
    let bandwidth = (ingress.is_some() || egress.is_some()).then_some(BandwidthPlan {
        ingress_bps: ingress,
        egress_bps: egress,
    });
    Ok(Some(NetworkPlan {
        port_mappings,
        bandwidth,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_json::from_value(serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap()).unwrap()
    }

    #[test]
    fn host_ports_of_app_containers_and_bandwidth() {
        let p = pod(
            "metadata:\n  name: w\n  annotations: {kubernetes.io/ingress-bandwidth: 10M}\nspec:\n  initContainers:\n  - {name: i, ports: [{containerPort: 1, hostPort: 1}]}\n  containers:\n  - name: a\n    ports:\n    - {containerPort: 80, hostPort: 8080}\n    - {containerPort: 81}\n    - {containerPort: 53, hostPort: 5353, protocol: UDP, hostIP: 127.0.0.1}\n",
        );
        let n = plan(&p, p.spec.as_ref().unwrap()).unwrap().unwrap();
        assert_eq!(
            n.port_mappings,
            [
                PortMappingPlan {
                    host_port: 8080,
                    container_port: 80,
                    protocol: "TCP".into(),
                    host_ip: String::new()
                },
                PortMappingPlan {
                    host_port: 5353,
                    container_port: 53,
                    protocol: "UDP".into(),
                    host_ip: "127.0.0.1".into()
                },
            ]
        );
        assert_eq!(
            n.bandwidth,
            Some(BandwidthPlan {
                ingress_bps: Some(10_000_000),
                egress_bps: None
            })
        );
    }

    #[test]
    fn host_network_has_no_attachment_and_bad_bandwidth_is_refused() {
        let p = pod("metadata: {name: w}\nspec: {hostNetwork: true, containers: [{name: a}]}\n");
        assert_eq!(plan(&p, p.spec.as_ref().unwrap()).unwrap(), None);
        for (v, want) in [
            ("10", "unreasonably small"),
            ("2P", "unreasonably large"),
            ("fast", "fast"),
        ] {
            let p = pod(&format!(
                "metadata: {{name: w, annotations: {{kubernetes.io/egress-bandwidth: \"{v}\"}}}}\nspec: {{containers: [{{name: a}}]}}\n"
            ));
            let f = plan(&p, p.spec.as_ref().unwrap()).unwrap_err();
            assert_eq!(
                f.path,
                "metadata.annotations[kubernetes.io/egress-bandwidth]"
            );
            assert!(f.message.contains(want), "{v}: {}", f.message);
        }
    }
}
