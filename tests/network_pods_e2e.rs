//! Pods as network citizens on a real systemd (`network: cni`): Debian's CNI plugins
//! (bridge, host-local, portmap, loopback) give each pod a namespace and an address of its own, so
//! two pods listen on one port; a hostPort reaches its pod; a pod reaches another by its IP; the
//! downward API and `podunit status -o wide` carry the address; `/etc/resolv.conf`, `/etc/hosts`
//! and `/etc/hostname` are the kubelet's, and a Service name resolves through the search list
//! with dnsmasq as the cluster DNS; a removed pod's address and port
//! rules go, and after a reboot or a power cut the IPAM store holds exactly the live pods; a pod on
//! one node reaches a pod on another node by its pod IP, unmasqueraded. All traffic stays in the
//! test's machines and the network namespaces the test makes.
//!
//! Needs root and systemd-nspawn; fails, never skips. Run: `cargo test --test network_pods_e2e`
//! (part of `make test-e2e`).

mod support;

use std::process::Command;

use support::nspawn::Machine;
use support::pods::{SOON, ctr_unit, pod_unit, start_pods, start_sync, wait_state};
use support::run_ok;
use support::status::pods_named;

const NS: &str = "default";
const SUBNET: &str = "10.88.7.";
/// The cluster DNS (dnsmasq in the machine).
const CLUSTER_DNS: &str = "10.99.0.10";
/// The network's name in the conflist: host-local keeps its addresses under
/// /var/lib/cni/networks/<name>.
const NET: &str = "podunit-test";

/// The bridge network the packages ship by default, on a subnet of the test's own.
fn conflist() -> String {
    bridge_conflist(SUBNET, true)
}

/// A bridge network on `subnet` (`10.88.N.`, a /24), its pods' traffic to other networks
/// masqueraded or not.
fn bridge_conflist(subnet: &str, ip_masq: bool) -> String {
    format!(
        r#"{{"cniVersion": "1.0.0", "name": "{NET}", "plugins": [
  {{"type": "bridge", "bridge": "podunit0", "isGateway": true, "ipMasq": {ip_masq}, "hairpinMode": true,
   "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{subnet}0/24"}}]],
            "routes": [{{"dst": "0.0.0.0/0"}}]}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}}
]}}
"#
    )
}

/// A pod whose container answers every connection on port 8080 with its name and its POD_IP
/// (the first line), then `peer <the client's address>`, published on the node's `host_port`.
fn web(name: &str, host_port: u16) -> String {
    let script = format!(
        "exec perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 8080, \
         Listen => 8, ReuseAddr => 1) or die \"listen: $!\"; while ($c = $s->accept) \
         {{ print $c \"{name} $ENV{{POD_IP}} $ENV{{POD_IPS}}\\npeer \", $c->peerhost, \
         \"\\n\"; close $c }}'"
    );
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: host\n    \
         command: [/bin/sh, -c, {script:?}]\n    ports:\n    - containerPort: 8080\n      \
         hostPort: {host_port}\n    env:\n    - name: POD_IP\n      valueFrom: {{fieldRef: \
         {{fieldPath: status.podIP}}}}\n    - name: POD_IPS\n      valueFrom: {{fieldRef: \
         {{fieldPath: status.podIPs}}}}\n"
    )
}

/// What a TCP connection to `addr` (`ip:port`) answers first, from `where_` (a shell prefix).
fn ask(m: &Machine, prefix: &str, addr: &str) -> String {
    let (ip, port) = addr.split_once(':').unwrap();
    let client = format!(
        "perl -MIO::Socket::INET -e '$c = IO::Socket::INET->new(PeerAddr => \"{ip}\", PeerPort \
         => {port}, Timeout => 5) or die \"connect {addr}: $!\"; print scalar <$c>'"
    );
    m.sh_ok(&format!("{prefix}{client}")).trim().to_string()
}

/// The first line a pod answers at `addr` (`ip:port`) from the node, once it listens.
fn answer(m: &Machine, addr: &str) -> String {
    let (ip, port) = addr.split_once(':').unwrap();
    m.wait_for(&format!("an answer from {addr}"), SOON, || {
        let out = m.sh(&format!(
            "perl -MIO::Socket::INET -e '$c = IO::Socket::INET->new(PeerAddr => \"{ip}\", \
             PeerPort => {port}, Timeout => 2) or exit 1; print scalar <$c>'"
        ));
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    })
}

/// The pod's IP as `podunit status -o wide` shows it.
fn status_ip(m: &Machine, name: &str) -> String {
    let out = m.sh_ok("podunit status -o wide");
    let row = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("{name} in:\n{out}"));
    row.split_whitespace().last().unwrap().to_string()
}

/// The pod's UID, as `podunit status -o json` has it.
fn uid_of(m: &Machine, name: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(&m.sh_ok("podunit status -o json")).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["uid"].as_str())
        .unwrap_or_else(|| panic!("{name}'s uid in {v}"))
        .to_string()
}

/// The addresses host-local holds, sorted.
fn ipam_leases(m: &Machine) -> Vec<String> {
    ipam_leases_of(m, NET)
        .into_iter()
        .filter(|l| l.starts_with(SUBNET))
        .collect()
}

/// The addresses host-local has leased on network `net`, sorted.
fn ipam_leases_of(m: &Machine, net: &str) -> Vec<String> {
    let out = m.sh_ok(&format!(
        "ls /var/lib/cni/networks/{net} 2>/dev/null | grep '^[0-9a-f.:]*$' || true"
    ));
    let mut v: Vec<String> = out.lines().map(str::to_string).collect();
    v.sort();
    v
}

#[test]
fn pods_get_addresses_of_their_own_ports_and_nothing_leaks() {
    let mut m = Machine::boot("network-cni");
    // A real DNS server as the cluster DNS, on an address of the machine's own.
    m.write(
        "/etc/podunit/config.yaml",
        format!(
            "network: cni\nclusterDNS: [{CLUSTER_DNS}]\nresolvConf: /etc/podunit/node-resolv.conf\n"
        )
        .as_bytes(),
    );
    m.write(
        "/etc/podunit/node-resolv.conf",
        b"nameserver 192.0.2.53\nsearch lab.example\noptions edns0\n",
    );
    m.sh_ok(&format!(
        "ip addr add {CLUSTER_DNS}/32 dev lo && systemd-run --unit cluster-dns dnsmasq --keep-in-foreground --listen-address={CLUSTER_DNS} \
         --bind-interfaces --no-resolv --no-hosts --user=nobody --pid-file= \
         --host-record=my-svc.default.svc.cluster.local,10.1.2.3"
    ));
    m.write("/etc/cni/net.d/10-podunit.conflist", conflist().as_bytes());
    // Two ordinary pods on one port: on the host network the second could not bind.
    m.write("/etc/pods.d/a.yaml", web("web-a", 18080).as_bytes());
    m.write("/etc/pods.d/b.yaml", web("web-b", 18081).as_bytes());
    start_sync(&m);
    start_pods(&m);
    for p in ["web-a", "web-b"] {
        wait_state(&m, &ctr_unit(NS, p, "main"), &["active"]);
    }
    let (ip_a, ip_b) = (status_ip(&m, "web-a"), status_ip(&m, "web-b"));
    assert!(
        ip_a.starts_with(SUBNET) && ip_b.starts_with(SUBNET),
        "{ip_a} {ip_b}"
    );
    assert_ne!(ip_a, ip_b);
    // Each answers on its own address, port 8080, and knows that address (status.podIP(s)).
    assert_eq!(
        answer(&m, &format!("{ip_a}:8080")),
        format!("web-a {ip_a} {ip_a}")
    );
    assert_eq!(
        answer(&m, &format!("{ip_b}:8080")),
        format!("web-b {ip_b} {ip_b}")
    );
    // hostPort: the node's port leads to the pod (the bridge's address is the node's here).
    assert_eq!(
        answer(&m, &format!("{SUBNET}1:18081")),
        format!("web-b {ip_b} {ip_b}")
    );
    // Pod to pod, by IP, from inside web-a's namespace.
    assert_eq!(
        ask(&m, "podunit exec web-a -- ", &format!("{ip_b}:8080")),
        format!("web-b {ip_b} {ip_b}")
    );
    // The name files as the kubelet writes them, and a Service name through the search list.
    assert_eq!(
        m.sh_ok("podunit exec web-a -- cat /etc/resolv.conf"),
        format!(
            "search default.svc.cluster.local svc.cluster.local cluster.local lab.example\n\
             nameserver {CLUSTER_DNS}\noptions ndots:5\n"
        )
    );
    assert_eq!(
        m.sh_ok("podunit exec web-a -- cat /etc/hostname"),
        "web-a\n"
    );
    // The name in the pod's UTS namespace too (what `hostname`, uname(2) and the kubelet's
    // containers see), and the node's unchanged.
    let pid_a = m.prop(&ctr_unit(NS, "web-a", "main"), "MainPID");
    assert_eq!(
        m.sh_ok(&format!(
            "nsenter --uts --target $(cat /proc/{pid_a}/task/{pid_a}/children | cut -d' ' -f1) hostname"
        )),
        "web-a\n"
    );
    assert_eq!(m.sh_ok("podunit exec web-a -- hostname"), "web-a\n");
    assert_ne!(m.sh_ok("hostname"), "web-a\n");
    // One UTS namespace per pod, as the sandbox's: the one pod-prepare pinned.
    let uid_a = uid_of(&m, "web-a");
    let ns_of_container = m.sh_ok(&format!(
        "readlink /proc/$(cut -d' ' -f1 /proc/{pid_a}/task/{pid_a}/children)/ns/uts"
    ));
    let pinned = m.sh_ok(&format!("stat -L -c %i /run/podunit-utsns/{uid_a}"));
    assert_eq!(ns_of_container.trim(), format!("uts:[{}]", pinned.trim()));
    let hosts = m.sh_ok("podunit exec web-a -- cat /etc/hosts");
    assert!(
        hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
            && hosts.ends_with(&format!("\n{ip_a}\tweb-a\n")),
        "{hosts}"
    );
    let found = m.sh_ok("podunit exec web-a -- getent hosts my-svc");
    assert_eq!(
        found.split_whitespace().collect::<Vec<_>>(),
        ["10.1.2.3", "my-svc.default.svc.cluster.local"]
    );
    // The containers are in the pod's namespace, not the host's.
    let host_ns = m.sh_ok("readlink /proc/1/ns/net");
    let pid = m.prop(&ctr_unit(NS, "web-a", "main"), "MainPID");
    assert_ne!(m.sh_ok(&format!("readlink /proc/{pid}/ns/net")), host_ns);
    assert_eq!(ipam_leases(&m), sorted(&[&ip_a, &ip_b]));

    // A third pod asking for web-a's host port: refused as the kubelet refuses it, naming web-a;
    // web-a keeps serving.
    m.write("/etc/pods.d/d.yaml", web("web-dup", 18080).as_bytes());
    m.daemon_reload();
    let detail = m.sh_ok("podunit status web-dup 2>&1 || true");
    assert!(
        detail.contains("NodePorts") && detail.contains("18080/TCP is held by pod default/web-a"),
        "{detail}"
    );
    let (code, out) = {
        let o = m.sh("podunit check");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("default/web-dup: spec.containers[0].ports[0].hostPort"),
        "{out}"
    );
    m.sh_ok("rm /etc/pods.d/d.yaml");
    m.daemon_reload();
    assert_eq!(
        answer(&m, &format!("{SUBNET}1:18080")),
        format!("web-a {ip_a} {ip_a}")
    );

    // A removed pod: its address, its cache entry, its masquerade and port rules and its pinned
    // namespace go with it.
    let uid_b = uid_of(&m, "web-b");
    assert!(
        m.sh_ok("iptables -t nat -S").contains(&uid_b),
        "web-b's masquerade rule names its uid"
    );
    assert!(
        m.sh_ok("ls /run/netns")
            .contains(&format!("podunit-{uid_b}"))
    );
    m.sh_ok("rm /etc/pods.d/b.yaml");
    m.daemon_reload();
    m.wait_for("web-b's address freed", SOON, || {
        (ipam_leases(&m) == [ip_a.clone()]).then_some(())
    });
    let nat = m.sh_ok("iptables -t nat -S");
    assert!(
        !nat.contains("18081"),
        "web-b's hostPort rules stay:\n{nat}"
    );
    assert!(
        !nat.contains(&uid_b),
        "web-b's masquerade rules stay:\n{nat}"
    );
    assert!(!m.sh_ok("ls /run/netns").contains(&uid_b));
    assert!(!m.sh_ok("ls /run/podunit-utsns").contains(&uid_b));
    assert!(nat.contains("18080"), "web-a's hostPort rules:\n{nat}");
    assert_eq!(
        m.sh_ok("ls /var/lib/podunit/cni | wc -l").trim(),
        "1",
        "one cached attachment"
    );

    // A broken network configuration (a file cut short): a new pod waits, says why, and never
    // runs on the host network or on podunit's own network instead; the running pod keeps
    // serving.
    m.sh_ok(
        "cp /etc/cni/net.d/10-podunit.conflist /root/ && \
         truncate -s 60 /etc/cni/net.d/10-podunit.conflist",
    );
    m.write("/etc/pods.d/c.yaml", web("web-c", 18082).as_bytes());
    m.daemon_reload();
    let detail = m.wait_for("web-c to say why it waits", SOON, || {
        let out = m.sh_ok("podunit status web-c 2>&1 || true");
        out.contains("10-podunit.conflist: invalid CNI config: not JSON")
            .then_some(out)
    });
    assert!(detail.contains("ContainerCreating"), "{detail}");
    assert_eq!(
        m.prop(&ctr_unit(NS, "web-c", "main"), "ActiveState"),
        "inactive"
    );
    assert_eq!(
        answer(&m, &format!("{ip_a}:8080")),
        format!("web-a {ip_a} {ip_a}")
    );
    // The configuration is whole again (as a network add-on rewrites its own): the pod starts
    // at its next try, with no reload.
    m.sh_ok("mv /root/10-podunit.conflist /etc/cni/net.d/");
    wait_state(&m, &ctr_unit(NS, "web-c", "main"), &["active"]);
    let ip_c = status_ip(&m, "web-c");
    assert_eq!(
        answer(&m, &format!("{ip_c}:8080")),
        format!("web-c {ip_c} {ip_c}")
    );
    m.sh_ok("rm /etc/pods.d/c.yaml");
    m.daemon_reload();
    m.wait_for("web-c's address freed", SOON, || {
        (ipam_leases(&m) == [ip_a.clone()]).then_some(())
    });

    // podunit-sync killed (SIGKILL) right after a pod was removed, before or while it stops and
    // detaches it: once it is back, the address is freed and nothing of the pod is left.
    m.write("/etc/pods.d/k.yaml", web("web-k", 18083).as_bytes());
    m.daemon_reload();
    wait_state(&m, &ctr_unit(NS, "web-k", "main"), &["active"]);
    let uid_k = uid_of(&m, "web-k");
    m.sh_ok(
        "rm /etc/pods.d/k.yaml && systemctl daemon-reload && \
         kill -KILL $(systemctl show -P MainPID podunit-sync)",
    );
    start_sync(&m);
    m.wait_for(
        "web-k's address freed after podunit-sync's kill",
        SOON,
        || (ipam_leases(&m) == [ip_a.clone()]).then_some(()),
    );
    m.wait_for("web-k's namespace unpinned", SOON, || {
        (!m.sh_ok("ls /run/netns").contains(&uid_k)).then_some(())
    });
    assert!(!m.sh_ok("iptables -t nat -S").contains("18083"));

    // A reboot: the pod comes back with an address, and the store holds exactly it.
    m.reboot();
    start_sync(&m);
    m.sh_ok("systemctl start podunit.target");
    wait_state(&m, &ctr_unit(NS, "web-a", "main"), &["active"]);
    let ip_a2 = status_ip(&m, "web-a");
    assert_eq!(ipam_leases(&m), std::slice::from_ref(&ip_a2));
    assert_eq!(
        answer(&m, &format!("{ip_a2}:8080")),
        format!("web-a {ip_a2} {ip_a2}")
    );
    assert_eq!(m.prop(&pod_unit(NS, "web-a"), "ActiveState"), "active");

    // A power cut: no stop command ran, so the cache holds web-a's ADD and the store its address.
    // The next start deletes that (no namespace: the old one died with the machine) before its
    // own ADD, which must land in the pod's new namespace, not the host's.
    // web-d runs too, and while the machine is down its manifest goes and podunit-sync's record
    // is lost (a disk error): nothing will ever stop or forget web-d, so its attachment is an
    // orphan only the sweep at podunit-sync's start finds.
    m.write("/etc/pods.d/d.yaml", web("web-d", 18084).as_bytes());
    m.daemon_reload();
    wait_state(&m, &ctr_unit(NS, "web-d", "main"), &["active"]);
    let uid_d = uid_of(&m, "web-d");
    assert_eq!(ipam_leases(&m).len(), 2);
    m.power_cut_and(|root| {
        for f in ["etc/pods.d/d.yaml", "var/lib/podunit/sync-state.json"] {
            std::fs::remove_file(root.join(f)).unwrap();
        }
    });
    start_sync(&m);
    m.sh_ok("systemctl start podunit.target");
    wait_state(&m, &ctr_unit(NS, "web-a", "main"), &["active"]);
    let ip_a3 = status_ip(&m, "web-a");
    m.wait_for("web-d's orphaned address freed by the sweep", SOON, || {
        (ipam_leases(&m) == [ip_a3.clone()]).then_some(())
    });
    assert_eq!(
        m.sh_ok("ls /var/lib/podunit/cni"),
        format!("{}-eth0.json\n", uid_of(&m, "web-a")),
        "the cache holds exactly the live pod"
    );
    let swept = m.sh_ok("journalctl --no-pager -o cat -u podunit-cni-sweep.service");
    assert!(
        swept.contains(&format!("pod {uid_d}: deleted its network attachment")),
        "{swept}"
    );
    assert!(!m.sh_ok("iptables -t nat -S").contains("18084"));
    assert_eq!(
        answer(&m, &format!("{ip_a3}:8080")),
        format!("web-a {ip_a3} {ip_a3}")
    );
    let host_addrs = m.sh_ok("ip -o addr show");
    assert!(
        !host_addrs.contains(&format!(" {ip_a3}/")) && !host_addrs.contains(" eth0 "),
        "the pod's address or interface is in the machine's own namespace:\n{host_addrs}"
    );
}

fn sorted(v: &[&String]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// A plugin that never answers (a test double: no real plugin hangs on demand), chained after
/// the bridge: the pod's start is bounded (the plugin and what it started are killed after 60 s),
/// the pod waits saying so, the bridge's half-done ADD is undone (no address leaks), a running
/// pod keeps serving, and the pod starts by itself once the configuration is good again.
#[test]
fn a_plugin_that_hangs_is_killed_and_leaks_nothing() {
    let m = Machine::boot("network-hang");
    m.write("/etc/podunit/config.yaml", b"network: cni\n");
    m.write("/etc/cni/net.d/10-podunit.conflist", conflist().as_bytes());
    m.write("/etc/pods.d/a.yaml", web("web-a", 18080).as_bytes());
    start_sync(&m);
    start_pods(&m);
    wait_state(&m, &ctr_unit(NS, "web-a", "main"), &["active"]);
    let ip_a = status_ip(&m, "web-a");

    m.write(
        "/usr/lib/cni/hang",
        b"#!/bin/sh\n[ \"$CNI_COMMAND\" = ADD ] && exec sleep 100000\nexit 0\n",
    );
    m.sh_ok("chmod 755 /usr/lib/cni/hang");
    let hanging = conflist().replace(
        "{\"type\": \"portmap\"",
        "{\"type\": \"hang\"}, {\"type\": \"portmap\"",
    );
    assert_ne!(hanging, conflist());
    m.write("/etc/cni/net.d/10-podunit.conflist", hanging.as_bytes());
    m.write("/etc/pods.d/h.yaml", web("web-h", 18084).as_bytes());
    m.daemon_reload();
    let detail = m.wait_for(
        "web-h to say its plugin was killed",
        std::time::Duration::from_secs(120),
        || {
            let out = m.sh_ok("podunit status web-h 2>&1 || true");
            out.contains(r#"plugin type="hang" (add) killed after 60s"#)
                .then_some(out)
        },
    );
    assert!(detail.contains("ContainerCreating"), "{detail}");
    assert_eq!(
        ipam_leases(&m),
        std::slice::from_ref(&ip_a),
        "the bridge's address is freed"
    );
    assert!(
        !m.sh_ok(
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done 2>/dev/null || true"
        )
        .contains("sleep 100000"),
        "the plugin's process is gone"
    );
    assert_eq!(
        answer(&m, &format!("{ip_a}:8080")),
        format!("web-a {ip_a} {ip_a}")
    );

    m.write("/etc/cni/net.d/10-podunit.conflist", conflist().as_bytes());
    wait_state(&m, &ctr_unit(NS, "web-h", "main"), &["active"]);
    let ip_h = status_ip(&m, "web-h");
    assert_eq!(ipam_leases(&m), sorted(&[&ip_a, &ip_h]));
}

/// The nodes' own network (on the test's bridge): node i is `{NODE_NET}{i + 1}`.
const NODE_NET: &str = "192.168.231.";

/// Network namespaces on the host, made by the test and deleted on Drop (also on a panic): a
/// "lan" one with a bridge, and one per node whose `eth0` is a veth to that bridge with the
/// address `{NODE_NET}{i + 1}/24`. Names carry the test's PID, so runs never collide; those of
/// runs that died without unwinding are deleted first. The host's own namespace is not touched.
struct Lan {
    prefix: String,
    names: Vec<String>,
}

impl Lan {
    const PREFIX: &str = "podunit-e2e-net-";

    fn new(nodes: usize) -> Lan {
        let ip = |args: &[&str]| run_ok(Command::new("ip").args(args));
        let listed = String::from_utf8_lossy(&ip(&["netns", "list"]).stdout).into_owned();
        for ns in listed.lines().filter_map(|l| l.split_whitespace().next()) {
            let dead = ns
                .strip_prefix(Lan::PREFIX)
                .and_then(|rest| rest.split('-').next())
                .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
            if dead {
                let _ = Command::new("ip").args(["netns", "del", ns]).status();
            }
        }
        let prefix = format!("{}{}-", Lan::PREFIX, std::process::id());
        let mut lan = Lan {
            prefix,
            names: Vec::new(),
        };
        let hub = lan.add("lan");
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &hub, "link", "set", "br0", "up"]);
        for i in 0..nodes {
            let node = lan.add(&format!("node{i}"));
            let port = format!("port{i}");
            ip(&[
                "-n", &hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &node,
            ]);
            ip(&["-n", &hub, "link", "set", &port, "master", "br0", "up"]);
            let addr = format!("{NODE_NET}{}/24", i + 1);
            ip(&["-n", &node, "addr", "add", &addr, "dev", "eth0"]);
            ip(&["-n", &node, "link", "set", "eth0", "up"]);
            ip(&["-n", &node, "link", "set", "lo", "up"]);
        }
        lan
    }

    fn add(&mut self, role: &str) -> String {
        let name = format!("{}{role}", self.prefix);
        run_ok(Command::new("ip").args(["netns", "add", &name]));
        self.names.push(name.clone());
        name
    }

    /// Node i's namespace, for `Machine::boot_in_netns`.
    fn node(&self, i: usize) -> String {
        format!("/run/netns/{}node{i}", self.prefix)
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for ns in self.names.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Everything a connection from one pod to another depends on, on every node.
fn explain(nodes: &[&Machine]) -> String {
    nodes
        .iter()
        .map(|m| {
            let net = m.sh(
                "ip -br addr; ip route; cat /proc/sys/net/ipv4/ip_forward; iptables -S FORWARD; \
                 podunit status -o wide",
            );
            format!(
                "=== {} ===\n{}{}\n{}",
                m.name,
                String::from_utf8_lossy(&net.stdout),
                String::from_utf8_lossy(&net.stderr),
                m.diagnostics()
            )
        })
        .collect()
}

/// All a TCP connection to `addr` (`ip:port`) answers, from inside pod `pod` on `m`, lines
/// trimmed; panics with what every node knows when it cannot connect.
fn ask_from_pod(m: &Machine, pod: &str, addr: &str, nodes: &[&Machine]) -> String {
    let (ip, port) = addr.split_once(':').unwrap();
    let out = m.sh(&format!(
        "podunit exec {pod} -- perl -MIO::Socket::INET -e '$c = IO::Socket::INET->new(PeerAddr \
         => \"{ip}\", PeerPort => {port}, Timeout => 5) or die \"connect {addr}: $!\\n\"; \
         print <$c>'"
    ));
    assert!(
        out.status.success(),
        "{pod} on {} cannot reach {addr}: {}\n{}",
        m.name,
        String::from_utf8_lossy(&out.stderr),
        explain(nodes)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Two nodes on one bridge (network namespaces the test makes), each with a pod subnet of its
/// own and a route to the other's through the other node, as a cluster's routing add-on sets
/// them: a pod on one node reaches a pod on the other by its pod IP, both ways, and is seen
/// there under its own pod IP (no masquerading between pods: the Kubernetes network model).
#[test]
fn a_pod_reaches_a_pod_on_another_node_by_its_ip() {
    const NODES: usize = 2;
    let lan = Lan::new(NODES);
    let subnet = |i: usize| format!("10.88.{}.", i + 1);
    // Booted and set up in parallel: each node is a machine of its own.
    let nodes: Vec<Machine> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..NODES)
            .map(|i| {
                let (lan, subnet) = (&lan, &subnet);
                s.spawn(move || {
                    let m = Machine::boot_in_netns(&format!("two-nodes-{i}"), lan.node(i));
                    m.write("/etc/podunit/config.yaml", b"network: cni\n");
                    m.write(
                        "/etc/cni/net.d/10-podunit.conflist",
                        bridge_conflist(&subnet(i), false).as_bytes(),
                    );
                    for j in (0..NODES).filter(|&j| j != i) {
                        m.sh_ok(&format!(
                            "ip route add {}0/24 via {NODE_NET}{}",
                            subnet(j),
                            j + 1
                        ));
                    }
                    m.write(
                        "/etc/pods.d/web.yaml",
                        web(&format!("web-{i}"), 18080).as_bytes(),
                    );
                    start_sync(&m);
                    start_pods(&m);
                    m
                })
            })
            .collect();
        // Every thread joined before a panic goes on, so no machine outlives the scope unowned.
        let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        joined
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let all: Vec<&Machine> = nodes.iter().collect();
    let mut ips = Vec::new();
    for (i, m) in nodes.iter().enumerate() {
        let pod = format!("web-{i}");
        wait_state(m, &ctr_unit(NS, &pod, "main"), &["active"]);
        let ip = status_ip(m, &pod);
        assert!(ip.starts_with(&subnet(i)), "{pod}'s address {ip}");
        // It answers on its own node (it listens) before anyone else asks.
        assert!(
            answer(m, &format!("{ip}:8080")).starts_with(&format!("{pod} {ip} {ip}")),
            "{pod}"
        );
        // Routing between pods needs forwarding on every node; the bridge plugin (isGateway)
        // turns it on.
        assert_eq!(
            m.sh_ok("cat /proc/sys/net/ipv4/ip_forward").trim(),
            "1",
            "{}",
            explain(&all)
        );
        ips.push(ip);
    }
    for (from, to) in [(0, 1), (1, 0)] {
        assert_eq!(
            ask_from_pod(
                &nodes[from],
                &format!("web-{from}"),
                &format!("{}:8080", ips[to]),
                &all
            ),
            format!(
                "web-{to} {ip} {ip}\npeer {peer}",
                ip = ips[to],
                peer = ips[from]
            ),
            "web-{from} on node {from} to web-{to} on node {to}, seen there under its pod IP\n{}",
            explain(&all)
        );
    }
}

/// A Deployment (beside its Service, which a standalone node skips) with `replicas` pods whose
/// container answers on port 8080 with its pod's name and address; `version` is in the template.
fn deployment(replicas: usize, version: &str) -> String {
    let script = "exec perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 8080, \
         Listen => 8, ReuseAddr => 1) or die \"listen: $!\"; while ($c = $s->accept) \
         { print $c \"$ENV{POD_NAME} $ENV{POD_IP} $ENV{VERSION}\\n\"; close $c }'";
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web}}\nspec:\n  selector: {{app: web}}\n  \
         ports: [{{port: 8080}}]\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\n\
         spec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    \
         metadata: {{labels: {{app: web}}}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      \
         containers:\n      - name: main\n        image: host\n        command: [/bin/sh, -c, {script:?}]\n        \
         ports: [{{containerPort: 8080}}]\n        env:\n        - {{name: VERSION, value: {version:?}}}\n        \
         - name: POD_NAME\n          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}\n        \
         - name: POD_IP\n          valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}\n"
    )
}

/// A Deployment dropped into /etc/pods.d runs its replicas, all on one port, each on an address
/// of its own from podunit's own network (no CNI configuration written); scaling up keeps the
/// running replicas, scaling down stops the newest, and a changed template replaces them all.
#[test]
fn a_deployment_runs_its_replicas_each_on_its_own_address() {
    let m = Machine::boot("network-deployment");
    m.write("/etc/podunit/config.yaml", b"network: cni\n");
    start_sync(&m);
    let running = |n: usize, version: &str| -> Vec<(String, String)> {
        m.wait_for(
            &format!("{n} replicas of {version} answering"),
            SOON,
            || {
                let names = pods_named(&m, "web-");
                if names.len() != n {
                    return None;
                }
                let mut seen = Vec::new();
                for name in &names {
                    let unit = ctr_unit(NS, name, "main");
                    if m.prop(&unit, "ActiveState") != "active" {
                        return None;
                    }
                    let ip = status_ip(&m, name);
                    let out = m.sh(&format!(
                    "perl -MIO::Socket::INET -e '$c = IO::Socket::INET->new(PeerAddr => \"{ip}\", \
                     PeerPort => 8080, Timeout => 2) or exit 1; print scalar <$c>'"
                ));
                    if String::from_utf8_lossy(&out.stdout).trim()
                        != format!("{name} {ip} {version}")
                    {
                        return None;
                    }
                    seen.push((name.clone(), ip));
                }
                Some(seen)
            },
        )
    };

    m.write("/etc/pods.d/web.yaml", deployment(2, "v1").as_bytes());
    m.daemon_reload();
    let two = running(2, "v1");
    let ips: Vec<&String> = two.iter().map(|(_, ip)| ip).collect();
    assert_ne!(ips[0], ips[1]);
    assert!(ips.iter().all(|ip| ip.starts_with("10.88.")), "{two:?}");
    // Named as the controllers name them: <deployment>-<pod-template-hash>-<5 characters>.
    let hash = two[0].0.split('-').nth(1).unwrap().to_string();
    for (name, _) in &two {
        let parts: Vec<&str> = name.split('-').collect();
        assert_eq!(parts.len(), 3, "{name}");
        assert_eq!(
            (parts[0], parts[1], parts[2].len()),
            ("web", hash.as_str(), 5)
        );
    }
    let first = ctr_unit(NS, &two[0].0, "main");
    let invocation = m.prop(&first, "InvocationID");

    m.write("/etc/pods.d/web.yaml", deployment(3, "v1").as_bytes());
    m.daemon_reload();
    let three = running(3, "v1");
    for (name, _) in &two {
        assert!(
            three.iter().any(|(n, _)| n == name),
            "{name} not kept: {three:?}"
        );
    }
    assert_eq!(
        m.prop(&first, "InvocationID"),
        invocation,
        "scaling up restarted a replica"
    );

    m.write("/etc/pods.d/web.yaml", deployment(1, "v1").as_bytes());
    m.daemon_reload();
    let one = running(1, "v1");
    m.wait_for("two replicas' addresses freed", SOON, || {
        (ipam_leases_of(&m, "podunit").len() == 1).then_some(())
    });

    m.write("/etc/pods.d/web.yaml", deployment(1, "v2").as_bytes());
    m.daemon_reload();
    let rolled = running(1, "v2");
    assert_ne!(rolled[0].0, one[0].0);
    assert!(!rolled[0].0.contains(&format!("-{hash}-")), "{rolled:?}");
}
