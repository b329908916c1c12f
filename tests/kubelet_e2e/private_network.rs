//! `kubectl port-forward` to a pod with a network namespace of its own (`network: private`):
//! the node connects inside that namespace, where the pod's loopback is, not the host's.

use super::support::controlplane::{ControlPlane, NODE_KUBECONFIG};
use super::support::nspawn::Machine;
use super::support::pods::{SOON, ctr_unit, wait_state};
use super::{NODE, forward_pong, kubectl, pong_pod, through};

/// The dialer units of port-forward sessions still loaded in the machine.
fn dialers(m: &Machine) -> String {
    m.sh_ok("systemctl list-units --all --no-legend --plain 'podunit-portforward-*'")
}

#[test]
fn port_forward_reaches_a_pod_in_its_own_network_namespace() {
    let m = Machine::boot("kubelet-pfnet");
    let cp = ControlPlane::start(&m, NODE);
    m.write(
        "/etc/podunit/config.yaml",
        format!("nodeName: {NODE}\nkubeconfig: {NODE_KUBECONFIG}\nnetwork: private\n").as_bytes(),
    );
    super::support::pods::start_sync(&m);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&pong_pod("pong")));
    let unit = ctr_unit("default", "pong", "main");
    wait_state(&m, &unit, &["active"]);
    m.wait_for("the pod listening", SOON, || {
        kubectl(&cp, &["logs", "pong"])
            .is_ok_and(|l| l.contains("listening"))
            .then_some(())
    });
    // Its own namespace: another one than the host's, and its port not on the host's loopback.
    let ns = |pid: &str| m.sh_ok(&format!("readlink /proc/{pid}/ns/net"));
    let pid = m.prop(&unit, "MainPID");
    assert_ne!(
        ns(&pid),
        ns("1"),
        "the pod's network namespace is the host's"
    );
    assert!(
        through(&m, 8089, "direct").is_err(),
        "the pod's port answers on the host's loopback"
    );

    // Three connections through one dialer, and the refused port with the kubelet's reason.
    let diagnostics = || {
        m.sh("journalctl --no-pager -n 40 -u podunit-sync -u 'podunit-portforward-*'")
            .stdout
            .escape_ascii()
            .to_string()
    };
    let one_dialer = || {
        let running = dialers(&m);
        assert_eq!(
            running.lines().count(),
            1,
            "one dialer per session:\n{running}"
        );
    };
    let mut pf = forward_pong(&m, &cp, &diagnostics, &one_dialer);
    // The session over, its dialer goes.
    let _ = pf.kill();
    let _ = pf.wait();
    m.wait_for("the dialer gone with its session", SOON, || {
        dialers(&m).trim().is_empty().then_some(())
    });
}
