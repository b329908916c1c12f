//! The Services' environment, through the real API server: every container gets the
//! `kubernetes` Service's variables, and with `enableServiceLinks` (the default) those of every
//! Service of its namespace, as the kubelet writes them (pkg/kubelet/envvars); a pod's own `env`
//! wins, `$(VAR)` expands to them, and a Service made after the node agent started counts.

use super::support::controlplane::{ControlPlane, NODE_KUBECONFIG};
use super::support::nspawn::Machine;
use super::support::pods::SOON;
use super::{NODE, kubectl};
use serde_json::json;

/// The environment a finished pod printed (the lines of interest, sorted).
fn printed_env(m: &Machine, cp: &ControlPlane, name: &str) -> String {
    m.wait_for(&format!("{name} to finish"), SOON, || {
        kubectl(cp, &["get", "pod", name, "-o", "jsonpath={.status.phase}"])
            .ok()
            .filter(|p| p == "Succeeded")
    });
    kubectl(cp, &["logs", name]).unwrap()
}

fn env_pod(name: &str, links: bool, env: serde_json::Value) -> String {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "restartPolicy": "Never", "enableServiceLinks": links,
            "containers": [{"name": "main", "image": "host", "env": env,
                "command": ["/bin/sh", "-c",
                    "env | grep -E '^(KUBERNETES|MY_WEB|OTHER|WEB)' | sort"]}]}})
    .to_string()
}

#[test]
fn containers_get_the_services_environment() {
    let m = Machine::boot("kubelet-svcenv");
    let cp = ControlPlane::start(&m, NODE);
    m.write(
        "/etc/podunit/config.yaml",
        format!("nodeName: {NODE}\nkubeconfig: {NODE_KUBECONFIG}\n").as_bytes(),
    );
    super::support::pods::start_sync(&m);
    // After the agent started: the watch brings them.
    cp.kubectl_ok(
        &[
            "create",
            "service",
            "clusterip",
            "my-web",
            "--tcp=80:8080,8443:443",
        ],
        None,
    );
    cp.kubectl_ok(&["create", "namespace", "elsewhere"], None);
    cp.kubectl_ok(
        &[
            "create",
            "service",
            "clusterip",
            "other",
            "-n",
            "elsewhere",
            "--tcp=80:80",
        ],
        None,
    );
    let ip = |ns: &str, name: &str| {
        kubectl(
            &cp,
            &[
                "get",
                "service",
                "-n",
                ns,
                name,
                "-o",
                "jsonpath={.spec.clusterIP}",
            ],
        )
        .unwrap()
    };
    let (api, web) = (ip("default", "kubernetes"), ip("default", "my-web"));
    assert_eq!(api, "10.96.0.1");
    // Give the watch a moment to write the new Service before the pods start.
    m.wait_for("my-web in the node's list", SOON, || {
        m.read_string("/var/lib/podunit/services.json")
            .filter(|s| s.contains("\"my-web\""))
    });

    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&env_pod(
            "linked",
            true,
            json!([{"name": "WEB", "value": "$(MY_WEB_SERVICE_HOST):$(MY_WEB_SERVICE_PORT)"},
                   {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]),
        )),
    );
    let want = format!(
        "KUBERNETES_PORT=tcp://{api}:443\n\
         KUBERNETES_PORT_443_TCP=tcp://{api}:443\n\
         KUBERNETES_PORT_443_TCP_ADDR={api}\n\
         KUBERNETES_PORT_443_TCP_PORT=443\n\
         KUBERNETES_PORT_443_TCP_PROTO=tcp\n\
         KUBERNETES_SERVICE_HOST={api}\n\
         KUBERNETES_SERVICE_PORT=6443\n\
         KUBERNETES_SERVICE_PORT_HTTPS=443\n\
         MY_WEB_PORT=tcp://{web}:80\n\
         MY_WEB_PORT_80_TCP=tcp://{web}:80\n\
         MY_WEB_PORT_80_TCP_ADDR={web}\n\
         MY_WEB_PORT_80_TCP_PORT=80\n\
         MY_WEB_PORT_80_TCP_PROTO=tcp\n\
         MY_WEB_PORT_8443_TCP=tcp://{web}:8443\n\
         MY_WEB_PORT_8443_TCP_ADDR={web}\n\
         MY_WEB_PORT_8443_TCP_PORT=8443\n\
         MY_WEB_PORT_8443_TCP_PROTO=tcp\n\
         MY_WEB_SERVICE_HOST={web}\n\
         MY_WEB_SERVICE_PORT=80\n\
         MY_WEB_SERVICE_PORT_80_8080=80\n\
         MY_WEB_SERVICE_PORT_8443_443=8443\n\
         WEB={web}:80\n"
    );
    assert_eq!(printed_env(&m, &cp, "linked"), want);

    // enableServiceLinks: false: the kubernetes Service only.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&env_pod("unlinked", false, json!([]))),
    );
    let got = printed_env(&m, &cp, "unlinked");
    assert!(
        got.contains(&format!("KUBERNETES_SERVICE_HOST={api}\n"))
            && got.contains("KUBERNETES_SERVICE_PORT=443\n")
            && !got.contains("MY_WEB"),
        "{got}"
    );
}
