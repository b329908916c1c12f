//! `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf` of a pod whose containers have roots of
//! their own (or networks of their own, `network: cni`), written by `pod-prepare` as the kubelet
//! writes them: its `etc-hosts` file, and the resolver configuration it composes, in the form
//! containerd writes it.

use crate::translate::plan::{DnsKind, DnsPlan, EtcPlan};

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

/// The kubelet's limits (pkg/apis/core/validation): nameservers, search domains, and the
/// characters of the search line; a search domain longer than a DNS name is dropped (glibc
/// aborts on it).
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;
const MAX_SEARCH_CHARS: usize = 2048;
const MAX_SEARCH_LEN: usize = 253;

/// What a resolv.conf says, as the kubelet's `parseResolvConf` reads it: every `nameserver`,
/// the last `search` line (trailing dots dropped, `.` skipped), every `options` entry.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resolver {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

pub fn parse_resolv_conf(text: &str) -> Resolver {
    let mut r = Resolver::default();
    for line in text.lines() {
        if line.starts_with(['#', ';']) {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["nameserver", ip, ..] => r.nameservers.push(ip.to_string()),
            ["search", rest @ ..] => {
                r.searches = rest
                    .iter()
                    .filter(|s| **s != ".")
                    .map(|s| s.trim_end_matches('.').to_string())
                    .collect();
            }
            ["options", rest @ ..] => r.options = merge_options(&r.options, rest),
            _ => {}
        }
    }
    r
}

/// Options by name, a later one replacing an earlier one of the same name in its place.
fn merge_options(existing: &[String], more: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = existing.to_vec();
    for o in more {
        let name = o.split(':').next().unwrap_or(o);
        match out
            .iter_mut()
            .find(|e| e.split(':').next().unwrap_or(e) == name)
        {
            Some(e) => *e = o.to_string(),
            None => out.push(o.to_string()),
        }
    }
    out
}

fn omit_duplicates(v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

/// The pod's `/etc/resolv.conf` from its plan and the node's resolv.conf (`node`), as the kubelet
/// composes it (`GetPodDNS`, `formDNSConfigFitsLimits`) and containerd writes it: the search line,
/// one line per nameserver, the options line.
pub fn resolv_conf(dns: &DnsPlan, node: &str) -> String {
    let host = parse_resolv_conf(node);
    let (mut servers, mut searches, mut options) = match dns.kind {
        DnsKind::None => (Vec::new(), Vec::new(), Vec::new()),
        DnsKind::Host => (host.nameservers, host.searches, host.options),
        DnsKind::Cluster => (
            dns.nameservers.clone(),
            omit_duplicates(dns.searches.iter().cloned().chain(host.searches).collect()),
            dns.options.clone(),
        ),
    };
    servers = omit_duplicates(
        servers
            .into_iter()
            .chain(dns.extra_nameservers.iter().cloned())
            .collect(),
    );
    searches = omit_duplicates(
        searches
            .into_iter()
            .chain(dns.extra_searches.iter().cloned())
            .collect(),
    );
    let extra: Vec<String> = dns
        .extra_options
        .iter()
        .map(|(n, v)| match v {
            Some(v) if !v.is_empty() => format!("{n}:{v}"),
            _ => n.clone(),
        })
        .collect();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    options = merge_options(&options, &extra);
    servers.truncate(MAX_NAMESERVERS);
    searches.truncate(MAX_SEARCHES);
    searches.retain(|s| s.len() <= MAX_SEARCH_LEN);
    while searches.len() > 1 && searches.join(" ").len() > MAX_SEARCH_CHARS {
        searches.pop();
    }
    let mut out = String::new();
    if !searches.is_empty() {
        out.push_str(&format!("search {}\n", searches.join(" ")));
    }
    for s in &servers {
        out.push_str(&format!("nameserver {s}\n"));
    }
    if !options.is_empty() {
        out.push_str(&format!("options {}\n", options.join(" ")));
    }
    out
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
            dns: DnsPlan::default(),
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

    const NODE: &str = "# from DHCP\nnameserver 192.0.2.53\nnameserver 192.0.2.54\nsearch lab.example. .\noptions edns0 ndots:2\n";

    fn cluster() -> DnsPlan {
        DnsPlan {
            kind: DnsKind::Cluster,
            nameservers: vec!["10.96.0.10".into()],
            searches: [
                "shop.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
            ]
            .map(String::from)
            .to_vec(),
            options: vec!["ndots:5".into()],
            ..DnsPlan::default()
        }
    }

    #[test]
    fn cluster_first_as_the_kubelet_composes_it() {
        assert_eq!(
            resolv_conf(&cluster(), NODE),
            "search shop.svc.cluster.local svc.cluster.local cluster.local lab.example\n\
             nameserver 10.96.0.10\noptions ndots:5\n"
        );
    }

    #[test]
    fn default_is_the_node_s_and_none_only_the_pod_s() {
        let host = DnsPlan::default();
        assert_eq!(
            resolv_conf(&host, NODE),
            "search lab.example\nnameserver 192.0.2.53\nnameserver 192.0.2.54\noptions edns0 ndots:2\n"
        );
        let none = DnsPlan {
            kind: DnsKind::None,
            extra_nameservers: vec!["1.1.1.1".into()],
            extra_searches: vec!["a.example".into()],
            extra_options: vec![("ndots".into(), Some("1".into())), ("rotate".into(), None)],
            ..DnsPlan::default()
        };
        assert_eq!(
            resolv_conf(&none, NODE),
            "search a.example\nnameserver 1.1.1.1\noptions ndots:1 rotate\n"
        );
    }

    #[test]
    fn dns_config_is_appended_and_limits_hold() {
        let mut d = cluster();
        d.extra_nameservers = ["10.96.0.10", "8.8.8.8", "9.9.9.9", "1.1.1.1"]
            .map(String::from)
            .to_vec();
        d.extra_searches = vec![
            "svc.cluster.local".into(),
            "x".repeat(254),
            "extra.example".into(),
        ];
        d.extra_options = vec![("ndots".into(), Some("2".into())), ("edns0".into(), None)];
        let r = resolv_conf(&d, NODE);
        assert_eq!(
            r,
            "search shop.svc.cluster.local svc.cluster.local cluster.local lab.example extra.example\n\
             nameserver 10.96.0.10\nnameserver 8.8.8.8\nnameserver 9.9.9.9\noptions ndots:2 edns0\n"
        );
        let long = DnsPlan {
            kind: DnsKind::None,
            extra_searches: (0..40)
                .map(|i| format!("{i}.{}", "d".repeat(100)))
                .collect(),
            ..DnsPlan::default()
        };
        let r = resolv_conf(&long, "");
        let line = r.lines().next().unwrap();
        let n = line.split(' ').count() - 1;
        assert!(
            n <= 32 && line.len() - "search ".len() <= 2048,
            "{n} {}",
            line.len()
        );
    }
}
