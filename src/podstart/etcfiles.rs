//! `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf` of a pod whose containers have roots of
//! their own, written by `pod-prepare` as the kubelet writes them (its `etc-hosts` file, the
//! host's `resolv.conf` under the `Default` DNS policy: podunit has no cluster DNS).

use crate::translate::plan::EtcPlan;

/// The kubelet's managed hosts file (`managedHostsFileContent`); on the host network the node's
/// own hosts file under the kubelet's header.
pub fn hosts(etc: &EtcPlan, pod_ip: &str, node_hosts: &str) -> String {
    let mut out = String::new();
    if etc.host_network {
        out.push_str("# Kubernetes-managed hosts file (host network).\n");
        out.push_str(node_hosts);
        if !node_hosts.is_empty() && !node_hosts.ends_with('\n') {
            out.push('\n');
        }
    } else {
        out.push_str("# Kubernetes-managed hosts file.\n");
        out.push_str("127.0.0.1\tlocalhost\n");
        out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\n");
        out.push_str("fe00::0\tip6-mcastprefix\n");
        out.push_str("fe00::1\tip6-allnodes\n");
        out.push_str("fe00::2\tip6-allrouters\n");
        match &etc.fqdn {
            Some(f) => out.push_str(&format!("{pod_ip}\t{f}\t{}\n", etc.hostname)),
            None => out.push_str(&format!("{pod_ip}\t{}\n", etc.hostname)),
        }
    }
    if !etc.host_aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for (ip, names) in &etc.host_aliases {
            out.push_str(&format!("{ip}\t{}\n", names.join("\t")));
        }
    }
    out
}

pub fn hostname(etc: &EtcPlan) -> String {
    format!("{}\n", etc.hostname)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_as_the_kubelet_writes_it() {
        let mut etc = EtcPlan {
            hostname: "web".into(),
            fqdn: Some("web.sub.default.svc.cluster.local".into()),
            host_network: false,
            host_aliases: vec![("10.1.2.3".into(), vec!["foo.local".into(), "bar".into()])],
        };
        let h = hosts(&etc, "192.0.2.7", "ignored");
        assert!(h.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(h.contains("192.0.2.7\tweb.sub.default.svc.cluster.local\tweb\n"));
        assert!(h.ends_with("\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar\n"));
        assert!(!h.contains("ignored"));
        etc.host_network = true;
        etc.host_aliases.clear();
        assert_eq!(
            hosts(&etc, "x", "127.0.0.1 localhost"),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
        );
        assert_eq!(hostname(&etc), "web\n");
    }
}
