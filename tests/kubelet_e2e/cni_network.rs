//! `network: cni` in cluster mode, through the real API server: without a CNI configuration the
//! Node is NotReady with the kubelet's message; once the controller manager's node IPAM gives the
//! Node a `podCIDR` it is Ready, and a pod gets an address from that range on podunit's own
//! bridge network (kubenet's way); with a configuration of its own it is Ready, a pod's `status.podIP` is
//! the address the plugins gave it (and what its downward API sees), `kubectl exec` runs in its
//! namespace, and `kubectl port-forward` reaches its loopback. A plugin that fails is the
//! kubelet's `FailedCreatePodSandBox` event, leaks no address, and the pod starts once the
//! network is good, with no reload.

use super::support::controlplane::{ControlPlane, NODE_KUBECONFIG};
use super::support::nspawn::Machine;
use super::support::pods::{SOON, ctr_unit, wait_state};
use super::{NODE, forward_pong, kubectl, pong_pod};
use serde_json::{Value, json};

const SUBNET: &str = "10.88.9.";
/// What the node IPAM controller divides into a /24 per Node.
const CLUSTER_CIDR: &str = "10.120.0.0/16";

/// The Node's Ready condition as kubectl reads it: (status, message).
fn ready(cp: &ControlPlane) -> Option<(String, String)> {
    let out = kubectl(
        cp,
        &[
            "get",
            "node",
            NODE,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}|{.status.conditions[?(@.type==\"Ready\")].message}",
        ],
    )
    .ok()?;
    let (s, m) = out.split_once('|')?;
    Some((s.to_string(), m.to_string()))
}

#[test]
fn cni_pods_through_a_real_apiserver() {
    let m = Machine::boot("kubelet-cni");
    let mut cp = ControlPlane::start(&m, NODE);
    m.write(
        "/etc/podunit/config.yaml",
        format!("nodeName: {NODE}\nkubeconfig: {NODE_KUBECONFIG}\nnetwork: cni\n").as_bytes(),
    );
    super::support::pods::start_sync(&m);
    let (_, message) = m.wait_for("the Node NotReady for its network", SOON, || {
        ready(&cp).filter(|(s, _)| s == "False")
    });
    assert_eq!(
        message,
        "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady \
         message:Network plugin returns error: cni plugin not initialized"
    );

    // The Node's podCIDR: podunit's own bridge network on it, with no configuration written.
    cp.start_node_ipam(CLUSTER_CIDR);
    let cidr = m.wait_for("the Node's podCIDR", SOON, || {
        kubectl(
            &cp,
            &["get", "node", NODE, "-o", "jsonpath={.spec.podCIDR}"],
        )
        .ok()
        .filter(|c| !c.is_empty())
    });
    assert!(
        cidr.starts_with("10.120.") && cidr.ends_with(".0/24"),
        "{cidr}"
    );
    let prefix = cidr.trim_end_matches("0/24").to_string();
    m.wait_for("the Node Ready on its podCIDR", SOON, || {
        ready(&cp).filter(|(s, _)| s == "True")
    });
    let kubenet: Value = serde_json::from_str(&pong_pod("kubenet")).unwrap();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&kubenet.to_string()));
    let ip = m.wait_for("kubenet's address in the API", SOON, || {
        kubectl(
            &cp,
            &["get", "pod", "kubenet", "-o", "jsonpath={.status.podIP}"],
        )
        .ok()
        .filter(|ip| !ip.is_empty())
    });
    assert!(
        ip.starts_with(&prefix) && ip != format!("{prefix}1"),
        "{ip} is not a pod address in {cidr}\n{}",
        m.diagnostics()
    );
    let gateway = m.sh_ok("ip -4 -o addr show dev podunit0");
    assert!(gateway.contains(&format!(" {prefix}1/24 ")), "{gateway}");
    assert!(
        m.sh_ok("ls /etc/cni/net.d 2>/dev/null || true")
            .trim()
            .is_empty(),
        "podunit wrote into the configuration directory"
    );
    cp.kubectl_ok(&["delete", "pod", "kubenet", "--wait=false"], None);
    m.wait_for("kubenet's address released", SOON, || {
        let leases = m.sh_ok("ls /var/lib/cni/networks/podunit");
        (!leases.lines().any(|l| l == ip)).then_some(())
    });

    // A configuration of the cluster's own wins over podunit's network (a bridge of its own,
    // as an add-on's would be).
    m.write(
        "/etc/cni/net.d/10-podunit.conflist",
        format!(
            r#"{{"cniVersion": "1.0.0", "name": "podunit", "plugins": [
  {{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
   "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{SUBNET}0/24"}}]]}}}}]}}"#
        )
        .as_bytes(),
    );
    m.wait_for("the Node Ready with a configuration", SOON, || {
        ready(&cp).filter(|(s, _)| s == "True")
    });

    let mut pod: Value = serde_json::from_str(&pong_pod("pong")).unwrap();
    pod["spec"]["containers"][0]["env"] =
        json!([{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&pod.to_string()));
    wait_state(&m, &ctr_unit("default", "pong", "main"), &["active"]);
    let ip = m.wait_for("the pod's CNI address in the API", SOON, || {
        kubectl(
            &cp,
            &["get", "pod", "pong", "-o", "jsonpath={.status.podIP}"],
        )
        .ok()
        .filter(|ip| ip.starts_with(SUBNET))
    });
    let host_ip = kubectl(
        &cp,
        &["get", "pod", "pong", "-o", "jsonpath={.status.hostIP}"],
    )
    .unwrap();
    assert_ne!(host_ip, ip, "hostIP stays the node's");
    // kubectl exec: in the pod's namespace, with its address on eth0 and in its environment.
    let seen = kubectl(
        &cp,
        &[
            "exec",
            "pong",
            "--",
            "sh",
            "-c",
            "echo $POD_IP; ip -4 -o addr show dev eth0",
        ],
    )
    .unwrap();
    let mut lines = seen.lines();
    assert_eq!(lines.next(), Some(ip.as_str()), "{seen}");
    assert!(
        lines
            .next()
            .is_some_and(|l| l.contains(&format!(" {ip}/24 "))),
        "{seen}"
    );

    // port-forward: to the pod's loopback, inside its namespace.
    m.wait_for("the pod listening", SOON, || {
        kubectl(&cp, &["logs", "pong"])
            .is_ok_and(|l| l.contains("listening"))
            .then_some(())
    });
    let diagnostics = || {
        m.sh("journalctl --no-pager -n 40 -u podunit-sync -u 'podunit-portforward-*'")
            .stdout
            .escape_ascii()
            .to_string()
    };
    let mut pf = forward_pong(&m, &cp, &diagnostics, &|| {});
    let _ = pf.kill();
    let _ = pf.wait();

    // /stats/summary: the pod's network counters are its eth0's, from its own namespace.
    let summary: Value = serde_json::from_str(
        &kubectl(
            &cp,
            &[
                "get",
                "--raw",
                &format!("/api/v1/nodes/{NODE}/proxy/stats/summary"),
            ],
        )
        .unwrap(),
    )
    .unwrap();
    let stats = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "pong")
        .unwrap_or_else(|| panic!("pong in {summary}"))
        .clone();
    let net = &stats["network"];
    assert_eq!(net["name"], "eth0", "{stats}");
    assert!(
        net["rxBytes"].as_u64().unwrap_or(0) > 0 && net["txBytes"].as_u64().unwrap_or(0) > 0,
        "{net}"
    );
    assert_eq!(net["interfaces"].as_array().map(Vec::len), Some(1), "{net}");

    // A plugin that answers ADD with garbage, chained after the bridge. It is a test double: no
    // real plugin misbehaves on demand. A new pod's sandbox fails with the kubelet's event and
    // the plugin named; the bridge's half-done ADD is undone (its address freed); the running
    // pod is untouched; once the configuration is good again the pod starts at its next try.
    m.write(
        "/usr/lib/cni/garbage",
        b"#!/bin/sh\n[ \"$CNI_COMMAND\" = ADD ] && echo 'this is not a CNI result'\nexit 0\n",
    );
    m.sh_ok("chmod 755 /usr/lib/cni/garbage && cp /etc/cni/net.d/10-podunit.conflist /root/");
    let good = m.read_string("/root/10-podunit.conflist").unwrap();
    let broken = good.replace("]}}]}", "]}}, {\"type\": \"garbage\"}]}");
    assert_ne!(good, broken);
    m.write("/etc/cni/net.d/10-podunit.conflist", broken.as_bytes());
    let pod2: Value = serde_json::from_str(&pong_pod("pong2")).unwrap();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&pod2.to_string()));
    let event = m.wait_for("pong2's FailedCreatePodSandBox event", SOON, || {
        kubectl(
            &cp,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=pong2,reason=FailedCreatePodSandBox",
                "-o",
                "jsonpath={.items[0].type}|{.items[0].message}|{.items[0].source.component}",
            ],
        )
        .ok()
        .filter(|e| !e.is_empty())
    });
    assert!(
        event.starts_with(
            "Warning|Failed to create pod sandbox: failed to setup network for sandbox \""
        ) && event.contains(r#"plugin type="garbage""#)
            && event.ends_with("|kubelet"),
        "{event}"
    );
    let waiting = kubectl(
        &cp,
        &[
            "get",
            "pod",
            "pong2",
            "-o",
            "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}",
        ],
    )
    .unwrap();
    assert_eq!(waiting, "Pending ContainerCreating");
    let leases = m.sh_ok(&format!(
        "ls /var/lib/cni/networks/podunit | grep '^{SUBNET}' || true"
    ));
    assert_eq!(leases.trim(), ip, "only pong holds an address");
    assert_eq!(
        kubectl(
            &cp,
            &["get", "pod", "pong", "-o", "jsonpath={.status.phase}"]
        )
        .unwrap(),
        "Running"
    );
    m.write("/etc/cni/net.d/10-podunit.conflist", good.as_bytes());
    m.wait_for("pong2 Running once the network is good", SOON, || {
        kubectl(
            &cp,
            &["get", "pod", "pong2", "-o", "jsonpath={.status.podIP}"],
        )
        .ok()
        .filter(|ip2| ip2.starts_with(SUBNET) && *ip2 != ip)
    });
}
