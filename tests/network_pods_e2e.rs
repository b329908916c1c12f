//! Pods as network citizens on a real systemd (`network: cni`): Debian's CNI plugins
//! (bridge, host-local, portmap, loopback) give each pod a namespace and an address of its own, so
//! two pods listen on one port; a hostPort reaches its pod; a pod reaches another by its IP; the
//! downward API and `podunit status -o wide` carry the address; `/etc/resolv.conf`, `/etc/hosts`
//! and `/etc/hostname` are the kubelet's, and a Service name resolves through the search list
//! with dnsmasq as the cluster DNS; a removed pod's address and port
//! rules go, and after a reboot or a power cut the IPAM store holds exactly the live pods. All traffic stays in
//! the test's machine (its own network namespace).
//!
//! Needs root and systemd-nspawn; fails, never skips. Run: `cargo test --test network_pods_e2e`
//! (part of `make test-e2e`).

mod support;

use support::nspawn::Machine;
use support::pods::{SOON, ctr_unit, pod_unit, start_pods, start_sync, wait_state};

const NS: &str = "default";
const SUBNET: &str = "10.88.7.";
/// The cluster DNS (dnsmasq in the machine).
const CLUSTER_DNS: &str = "10.99.0.10";
/// The network's name in the conflist: host-local keeps its addresses under
/// /var/lib/cni/networks/<name>.
const NET: &str = "podunit-test";

/// The bridge network the packages ship by default, on a subnet of the test's own.
fn conflist() -> String {
    format!(
        r#"{{"cniVersion": "1.0.0", "name": "{NET}", "plugins": [
  {{"type": "bridge", "bridge": "podunit0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{SUBNET}0/24"}}]],
            "routes": [{{"dst": "0.0.0.0/0"}}]}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}}
]}}
"#
    )
}

/// A pod whose container answers every connection on port 8080 with its name and its POD_IP,
/// published on the node's `host_port`.
fn web(name: &str, host_port: u16) -> String {
    let script = format!(
        "exec perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 8080, \
         Listen => 8, ReuseAddr => 1) or die \"listen: $!\"; while ($c = $s->accept) \
         {{ print $c \"{name} $ENV{{POD_IP}} $ENV{{POD_IPS}}\\n\"; close $c }}'"
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
    let out = m.sh_ok(&format!(
        "ls /var/lib/cni/networks/{NET} 2>/dev/null | grep '^{SUBNET}' || true"
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
    assert!(nat.contains("18080"), "web-a's hostPort rules:\n{nat}");
    assert_eq!(
        m.sh_ok("ls /var/lib/podunit/cni | wc -l").trim(),
        "1",
        "one cached attachment"
    );

    // No network configuration: a new pod waits, says why, and never runs on the host network;
    // the running pod keeps serving.
    m.sh_ok("mv /etc/cni/net.d/10-podunit.conflist /root/");
    m.write("/etc/pods.d/c.yaml", web("web-c", 18082).as_bytes());
    m.daemon_reload();
    let detail = m.wait_for("web-c to say why it waits", SOON, || {
        let out = m.sh_ok("podunit status web-c 2>&1 || true");
        out.contains("cni config uninitialized").then_some(out)
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
    // The configuration appears (as a network add-on writes its own once it runs): the pod
    // starts at its next try, with no reload.
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
    m.power_cut();
    start_sync(&m);
    m.sh_ok("systemctl start podunit.target");
    wait_state(&m, &ctr_unit(NS, "web-a", "main"), &["active"]);
    let ip_a3 = status_ip(&m, "web-a");
    assert_eq!(ipam_leases(&m), std::slice::from_ref(&ip_a3));
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
