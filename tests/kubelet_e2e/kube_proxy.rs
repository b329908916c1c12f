//! Services on a podunit node: kube-proxy (built from the same source as the API server) runs as
//! the static pod of examples/static-pods/kube-proxy.yaml, with the real endpoint controllers
//! feeding it. A ClusterIP Service with two pods behind it on the node answers from inside a
//! pod (both pods seen), and a pod with its service account's token reaches the API server
//! through `KUBERNETES_SERVICE_HOST`, as client-go's in-cluster config does (`kubectl` run in the
//! pod with no kubeconfig). All traffic stays in the test's machine.

use super::support::controlplane::{self, ControlPlane, NODE_KUBECONFIG, Options};
use super::support::nspawn::Machine;
use super::support::pods::SOON;
use super::{NODE, kubectl};
use serde_json::json;

const SUBNET: &str = "10.88.11.";
/// An address of the machine's own, where the API server listens: the `kubernetes` Service's
/// endpoint (a loopback address may not be one).
const API_ADDR: &str = "10.77.0.1";

/// The example, with the binary from the host (`image: host`: no registry here has the
/// kube-proxy image) and the conntrack settings a container's network namespace cannot change
/// left alone.
fn kube_proxy_pod() -> String {
    let example = include_str!("../../examples/static-pods/kube-proxy.yaml");
    let pod = example
        .replace("image: registry.k8s.io/kube-proxy:v1.20.2", "image: host")
        .replace(
            "    - --proxy-mode=iptables\n",
            "    - --proxy-mode=iptables\n    - --conntrack-max-per-core=0\n    \
             - --conntrack-tcp-timeout-established=0\n    \
             - --conntrack-tcp-timeout-close-wait=0\n",
        );
    assert!(pod.contains("image: host") && pod.contains("conntrack-max-per-core"));
    pod
}

/// A pod of the `web` Service: answers every connection on port 8080 with its name.
fn web(name: &str) -> String {
    let script = format!(
        "exec perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 8080, \
         Listen => 8, ReuseAddr => 1) or die \"listen: $!\"; while ($c = $s->accept) \
         {{ print $c \"{name}\\n\"; close $c }}'"
    );
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "host", "command": ["/bin/sh", "-c", script],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}})
    .to_string()
}

/// The client: 20 connections to the `web` Service by its variables, then the pods of its
/// namespace through the API server, by the in-cluster config.
fn client() -> String {
    let script = "export HOME=/tmp; for i in $(seq 20); do perl -MIO::Socket::INET -e '$c = \
        IO::Socket::INET->new(PeerAddr => $ENV{WEB_SERVICE_HOST}, PeerPort => \
        $ENV{WEB_SERVICE_PORT}, Timeout => 5) or die \"connect: $!\"; print scalar <$c>'; \
        done | sort -u; kubectl get pods -o name | sort";
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "client", "namespace": "default"},
        "spec": {"nodeName": NODE, "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "host",
                "command": ["/bin/sh", "-c", script]}]}})
    .to_string()
}

#[test]
fn cluster_ips_through_kube_proxy_as_a_static_pod() {
    let m = Machine::boot("kubelet-kproxy");
    m.sh_ok(&format!("ip addr add {API_ADDR}/32 dev lo"));
    let mut cp = ControlPlane::start_with(
        &m,
        NODE,
        Options {
            advertise: Some(API_ADDR.into()),
            ..Options::default()
        },
    );
    cp.start_endpoint_controllers();
    // kube-proxy's own user, which the cluster's bootstrap roles bind to system:node-proxier.
    cp.client_cert("kube-proxy", "system:kube-proxy", "");
    m.write(
        "/etc/kubernetes/kube-proxy.kubeconfig",
        cp.kubeconfig("kube-proxy").as_bytes(),
    );
    for (from, to) in [
        (controlplane::kube_proxy(), "/usr/local/bin/kube-proxy"),
        (controlplane::kubectl_binary(), "/usr/local/bin/kubectl"),
    ] {
        let dst = m.dir().join("root").join(to.trim_start_matches('/'));
        std::fs::copy(&from, &dst).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
    m.write(
        "/etc/cni/net.d/10-podunit.conflist",
        format!(
            r#"{{"cniVersion": "1.0.0", "name": "podunit", "plugins": [
  {{"type": "bridge", "bridge": "podunit0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{SUBNET}0/24"}}]],
            "routes": [{{"dst": "0.0.0.0/0"}}]}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}}]}}"#
        )
        .as_bytes(),
    );
    m.write(
        "/etc/podunit/config.yaml",
        format!("nodeName: {NODE}\nkubeconfig: {NODE_KUBECONFIG}\nnetwork: cni\n").as_bytes(),
    );
    m.write("/etc/pods.d/kube-proxy.yaml", kube_proxy_pod().as_bytes());
    super::support::pods::start_sync(&m);
    m.daemon_reload();

    // The static pod runs, its mirror pod says so, and it programs the kubernetes Service.
    let mirror = format!("kube-proxy-{NODE}");
    m.wait_for("kube-proxy's mirror pod Running", SOON, || {
        kubectl(
            &cp,
            &[
                "get",
                "pod",
                "-n",
                "kube-system",
                &mirror,
                "-o",
                "jsonpath={.status.phase}",
            ],
        )
        .ok()
        .filter(|p| p == "Running")
    });
    m.wait_for(
        "kube-proxy's rules for the kubernetes Service",
        SOON,
        || {
            m.sh_ok("iptables -t nat -S KUBE-SERVICES 2>/dev/null || true")
                .contains("10.96.0.1/32")
                .then_some(())
        },
    );

    // A Service with two pods behind it: a pod reaches both through its ClusterIP.
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&web("web-1")));
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&web("web-2")));
    cp.kubectl_ok(
        &["create", "service", "clusterip", "web", "--tcp=80:8080"],
        None,
    );
    // What the client's service account may do (no aggregation controller fills `view` here).
    cp.kubectl_ok(
        &[
            "create",
            "role",
            "pod-reader",
            "--verb=get,list",
            "--resource=pods",
        ],
        None,
    );
    cp.kubectl_ok(
        &[
            "create",
            "rolebinding",
            "pod-reader",
            "--role=pod-reader",
            "--serviceaccount=default:default",
        ],
        None,
    );
    m.wait_for("web's two endpoints", SOON, || {
        kubectl(
            &cp,
            &[
                "get",
                "endpoints",
                "web",
                "-o",
                "jsonpath={.subsets[*].addresses[*].ip}",
            ],
        )
        .ok()
        .filter(|ips| ips.split_whitespace().count() == 2)
    });
    m.wait_for("web's rules", SOON, || {
        m.sh_ok("iptables -t nat -S KUBE-SERVICES")
            .contains("default/web")
            .then_some(())
    });
    m.wait_for("web's ClusterIP in the node's Services", SOON, || {
        m.read_string("/var/lib/podunit/services.json")
            .filter(|s| s.contains("\"web\""))
    });
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&client()));
    let phase = m.wait_for("the client to finish", SOON, || {
        kubectl(
            &cp,
            &["get", "pod", "client", "-o", "jsonpath={.status.phase}"],
        )
        .ok()
        .filter(|p| p == "Succeeded" || p == "Failed")
    });
    // Its last lines may reach the journal a moment after the exit is posted.
    let want = "web-1\nweb-2\npod/client\npod/web-1\npod/web-2\n";
    let out = m.wait_for("the client's output", SOON, || {
        kubectl(&cp, &["logs", "client"])
            .ok()
            .filter(|o| o.ends_with("pod/web-2\n") || o.contains("rror"))
    });
    assert_eq!(
        (phase.as_str(), out.as_str()),
        ("Succeeded", want),
        "the client's phase and output; its journal:\n{}",
        m.sh("journalctl --no-pager -o json -u podunit-default_client_main.service | tail -3")
            .stdout
            .escape_ascii()
    );
}
