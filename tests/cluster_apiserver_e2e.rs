//! Cluster mode against a real control plane: etcd and kube-apiserver (tests/support/controlplane.rs,
//! built by tests/controlplane/install.sh) in the machine's network namespace, podunit-sync in the
//! machine as the node's kubelet with a client certificate for `system:node:<node>`, the Node
//! authorizer, RBAC and NodeRestriction deciding what it may do, pods on real systemd.
//! Needs root, systemd-nspawn and the built kube-apiserver; fails (never skips) without them.

mod image;
mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
use podunit::kube::client::{self, Client};
use serde_json::{Value, json};
use support::api::join_machine_network;
use support::controlplane::{ControlPlane, NODE_KUBECONFIG, Options, pod_phase};
use support::nspawn::Machine;
use support::pods::{SOON, ctr_unit, known_units, pod_unit, wait_state};

const NODE: &str = "e2e-node";

/// Boots a machine with a control plane in its network; podunit-sync is not yet in cluster mode
/// (see [`start_sync`]).
fn machine_with_control_plane(name: &str, opts: Options) -> (Machine, ControlPlane) {
    let m = Machine::boot(name);
    let cp = ControlPlane::start_with(&m, NODE, opts);
    (m, cp)
}

/// Configures podunit-sync for cluster mode (`extra` appended to its config) and (re)starts it.
fn start_sync(m: &Machine, extra: &str) {
    m.write(
        "/etc/podunit/config.yaml",
        format!("nodeName: {NODE}\nkubeconfig: {NODE_KUBECONFIG}\n{extra}").as_bytes(),
    );
    support::pods::start_sync(m);
}

/// Runs `f` on a thread inside the machine's network (where the API server listens); a failure
/// shows the machine's and the control plane's state.
fn on_machine_network(m: &Machine, cp: &ControlPlane, f: impl FnOnce(&Client) + Send) {
    std::thread::scope(|s| {
        s.spawn(|| {
            join_machine_network(m);
            f(&cp.admin());
        })
        .join()
        .unwrap_or_else(|_| panic!("{}\n{}", m.diagnostics(), cp.logs()));
    });
}

fn get<K: k8s_openapi::Resource + serde::de::DeserializeOwned>(
    api: &Client,
    ns: Option<&str>,
    name: &str,
) -> Option<K> {
    match api.get::<K>(&client::path::<K>(ns, Some(name))) {
        Ok(o) => Some(o),
        Err(e) if e.is_not_found() || e.is_transient() => None,
        Err(e) => panic!("{e}"),
    }
}

fn pod(api: &Client, name: &str) -> Option<Pod> {
    get::<Pod>(api, Some("default"), name)
}

/// A pod manifest for this node running `script` with /bin/sh on the host image.
fn pod_yaml(name: &str, restart: &str, script: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "restartPolicy": restart, "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "host", "command": ["/bin/sh", "-c", script]}]}})
    .to_string()
}

/// The status of the pod's one container.
fn main_status(p: &Pod) -> &ContainerStatus {
    &p.status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
}

fn condition(p: &Pod, kind: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.status.clone())
}

/// podunit-sync's journal lines since `since` (machine's epoch seconds) that contain `needle`.
fn sync_log_lines(m: &Machine, since: &str, until: Option<&str>, needle: &str) -> Vec<String> {
    let until = until.map(|u| format!("--until=@{u}")).unwrap_or_default();
    m.sh_ok(&format!(
        "journalctl --no-pager -o cat -u podunit-sync.service --since=@{since} {until}"
    ))
    .lines()
    .filter(|l| l.contains(needle))
    .map(str::to_string)
    .collect()
}

fn machine_now(m: &Machine) -> String {
    m.sh_ok("date +%s.%N").trim().to_string()
}

#[test]
fn node_pods_status_deletion_mirrors_and_tokens_through_a_real_apiserver() {
    let (m, mut cp) = machine_with_control_plane("real-api", Options::default());

    // A pod already terminal in the API, bound to this node before podunit-sync ever ran (its
    // spool is empty: a new or reinstalled node). It must never run, and nothing the API refuses
    // may be posted for it.
    cp.kubectl_ok(
        &["create", "-f", "-"],
        Some(&pod_yaml(
            "done",
            "Never",
            "touch /srv/probe/done-ran; exec sleep 1000",
        )),
    );
    let failed = json!({"status": {"phase": "Failed", "containerStatuses": [{
        "name": "main", "image": "host", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "reason": "Error",
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}}}]}});
    cp.kubectl_ok(
        &[
            "patch",
            "pod",
            "done",
            "--subresource=status",
            "--type=merge",
            "-p",
            &failed.to_string(),
        ],
        None,
    );

    // A static pod: its mirror pod appears in the API, owned by the Node.
    m.write(
        "/etc/pods.d/local.yaml",
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: local, namespace: default}\nspec:\n  containers: [{name: app, image: host, command: [/bin/sleep, '100000']}]\n",
    );
    let since = machine_now(&m);
    start_sync(&m, "cluster:\n  objectRefreshSeconds: 2\n");

    on_machine_network(&m, &cp, |api| {
        // Registration: the Node, Ready, with the node's own credentials (Node authorizer and
        // NodeRestriction let it create only itself).
        let node = m.wait_for("the Node Ready", SOON, || {
            let n = get::<Node>(api, None, NODE)?;
            let ready = n
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(n)
        });
        let info = node.status.as_ref().unwrap().node_info.as_ref().unwrap();
        assert!(
            info.kubelet_version.contains("podunit"),
            "{}",
            info.kubelet_version
        );
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], NODE);
        let listed = cp.kubectl_ok(&["get", "node", NODE, "--no-headers"], None);
        assert!(listed.contains(" Ready "), "kubectl get node: {listed}");

        // The Lease, held by the node and renewed.
        let renew = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
        let first = m.wait_for("the node's Lease", SOON, || {
            get::<Lease>(api, Some("kube-node-lease"), NODE)
        });
        assert_eq!(
            first.spec.as_ref().unwrap().holder_identity.as_deref(),
            Some(NODE)
        );
        m.wait_for("the Lease renewed", SOON, || {
            let l = get::<Lease>(api, Some("kube-node-lease"), NODE)?;
            (renew(&l) != renew(&first)).then_some(())
        });

        // A pod created with kubectl runs on systemd and is Running and Ready; kubectl shows 1/1.
        cp.kubectl_ok(
            &["apply", "-f", "-"],
            Some(&pod_yaml("web", "Always", "exec sleep 100000")),
        );
        let p = m.wait_for("web Running and Ready", SOON, || {
            let p = pod(api, "web")?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")
                && condition(&p, "Ready").as_deref() == Some("True"))
            .then_some(p)
        });
        wait_state(&m, &ctr_unit("default", "web", "main"), &["active"]);
        let cs = main_status(&p);
        assert!(cs.ready && cs.state.as_ref().unwrap().running.is_some());
        let row = cp.kubectl_ok(&["get", "pod", "web", "--no-headers"], None);
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&cols[1..3], &["1/1", "Running"], "kubectl get pod: {row}");

        // Its service account token: a JWT bound to this pod, which the API server accepts.
        let token = m.sh_ok(&format!(
            "nsenter -t $(systemctl show -p MainPID --value {}) -m cat /var/run/secrets/kubernetes.io/serviceaccount/token",
            ctr_unit("default", "web", "main")
        ));
        let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token.trim()}});
        let out: Value = api
            .create("/apis/authentication.k8s.io/v1/tokenreviews", &review)
            .unwrap();
        assert_eq!(out["status"]["authenticated"], true, "{out}");
        assert_eq!(
            out["status"]["user"]["username"],
            "system:serviceaccount:default:default"
        );
        assert_eq!(
            out["status"]["user"]["extra"]["authentication.kubernetes.io/pod-name"][0],
            "web"
        );

        // Exit codes: a failed and a completed run-once pod.
        cp.kubectl_ok(
            &["create", "-f", "-"],
            Some(&pod_yaml("fails", "Never", "exit 3")),
        );
        cp.kubectl_ok(
            &["create", "-f", "-"],
            Some(&pod_yaml("ok", "Never", "exit 0")),
        );
        for (name, phase, code, reason) in [
            ("fails", "Failed", 3, "Error"),
            ("ok", "Succeeded", 0, "Completed"),
        ] {
            let t = m.wait_for(&format!("{name} {phase}"), SOON, || {
                let p = pod(api, name)?;
                let st = p.status?;
                (st.phase.as_deref() == Some(phase)).then_some(())?;
                st.container_statuses?.into_iter().next()?.state?.terminated
            });
            assert_eq!((t.exit_code, t.reason.as_deref()), (code, Some(reason)));
        }

        // The mirror pod of the static pod, owned by the Node, Running.
        let mirror = format!("local-{NODE}");
        let mp = m.wait_for("the mirror pod Running", SOON, || {
            let p = pod(api, &mirror)?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
        });
        let a = mp.metadata.annotations.clone().unwrap();
        assert_eq!(a["kubernetes.io/config.source"], "file");
        assert_eq!(
            a["kubernetes.io/config.mirror"],
            a["kubernetes.io/config.hash"]
        );
        let o = &mp.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((o.kind.as_str(), o.name.as_str()), ("Node", NODE));

        // The pod that was terminal before the node started: never run, never patched, its
        // status as it was (podunit-sync had a few refresh rounds meanwhile).
        std::thread::sleep(Duration::from_secs(6));
        assert!(
            m.read("/srv/probe/done-ran").is_none(),
            "a pod terminal in the API was started"
        );
        assert!(
            known_units(&m, "default", "done").is_empty(),
            "units of a terminal pod: {:?}",
            known_units(&m, "default", "done")
        );
        assert!(m.read("/var/lib/podunit/spool/default_done.yaml").is_none());
        let done = pod(api, "done").unwrap();
        assert_eq!(
            done.status.as_ref().unwrap().phase.as_deref(),
            Some("Failed")
        );
        let refused = sync_log_lines(&m, &since, None, "422");
        assert!(refused.is_empty(), "statuses the API refused: {refused:#?}");

        // A status the API server refuses is logged once, not resent on every tick: a
        // run-once pod marked Failed (terminated) in the API while podunit-sync was away, which
        // then finds it running (a terminated container of such a pod may not run again).
        cp.kubectl_ok(
            &["create", "-f", "-"],
            Some(&pod_yaml("once", "Never", "exec sleep 100000")),
        );
        m.wait_for("once Running", SOON, || {
            (pod_phase(api, "default", "once")? == "Running").then_some(())
        });
        m.sh_ok("systemctl stop podunit-sync.service");
        cp.kubectl_ok(
            &[
                "patch",
                "pod",
                "once",
                "--subresource=status",
                "--type=merge",
                "-p",
                &failed.to_string(),
            ],
            None,
        );
        let restarted = machine_now(&m);
        m.sh_ok("systemctl start podunit-sync.service");
        let invalid = "Pod \"once\" is invalid";
        m.wait_for("once's running status refused", SOON, || {
            (!sync_log_lines(&m, &restarted, None, invalid).is_empty()).then_some(())
        });
        std::thread::sleep(Duration::from_secs(6));
        let refused = sync_log_lines(&m, &restarted, None, invalid);
        assert!(
            refused.len() <= 2,
            "a refused status was sent again and again:\n{refused:#?}"
        );

        // Graceful deletion with kubectl: the units stop, then the node deletes the object.
        cp.kubectl_ok(&["delete", "pod", "web", "--wait=false"], None);
        m.wait_for("web gone from the API", SOON, || {
            pod(api, "web").is_none().then_some(())
        });
        let st = m.prop(&ctr_unit("default", "web", "main"), "ActiveState");
        assert!(
            st == "inactive" || st == "failed",
            "stopped before the object went: {st}"
        );
        assert!(m.read("/var/lib/podunit/spool/default_web.yaml").is_none());
        assert_eq!(
            m.prop(&pod_unit("default", "local"), "ActiveState"),
            "active",
            "the static pod is untouched"
        );
    });

    // The API server down: the pod watch backs off exponentially (with jitter) instead of
    // reconnecting at a fixed short interval. Counted over a window, so a slow host can only make
    // the count smaller: with the default 30 s ceiling, at most 6 tries fit in 20 s
    // (0.25 + 0.5 + 1 + 2 + 4 + 8 s at the least); a fixed 0.25-0.5 s retry makes 40 or more.
    let t0 = machine_now(&m);
    cp.kill_apiserver();
    std::thread::sleep(Duration::from_secs(20));
    let t1 = machine_now(&m);
    let tries = sync_log_lines(&m, &t0, Some(&t1), "watching pods:");
    assert!(
        (1..=8).contains(&tries.len()),
        "{} watch attempts in 20 s without an API server:\n{tries:#?}",
        tries.len()
    );
    cp.start_apiserver();
    on_machine_network(&m, &cp, |api| {
        // And it comes back: a pod created now runs.
        cp.kubectl_ok(
            &["create", "-f", "-"],
            Some(&pod_yaml("late", "Always", "exec sleep 100000")),
        );
        m.wait_for("late Running after the outage", SOON, || {
            (pod_phase(api, "default", "late")? == "Running").then_some(())
        });
    });
}

/// A ConfigMap read the API server forbids (403) is retried soon, with back-off, not at the next
/// refresh round (an hour away here). Right after a node registers, or a pod is bound to it, the
/// Node authorizer can deny such a read for a moment (its graph of pods and their objects has not
/// caught up); that moment cannot be made on demand, so this API server authorizes with RBAC only
/// and the node may read ConfigMaps once the test grants it: a real 403, then a real 200.
#[test]
fn a_forbidden_configmap_read_is_retried_with_backoff() {
    let (m, cp) = machine_with_control_plane(
        "real-api-403",
        Options {
            authorization: "RBAC".into(),
            ..Options::default()
        },
    );
    // What the Node authorizer would grant, from the system:node role, except ConfigMaps.
    let role: Value = serde_json::from_str(
        &cp.kubectl_ok(&["get", "clusterrole", "system:node", "-o", "json"], None),
    )
    .unwrap();
    let rules: Vec<Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| {
            let mut r = r.clone();
            let res: Vec<Value> = r["resources"]
                .as_array()?
                .iter()
                .filter(|x| *x != "configmaps")
                .cloned()
                .collect();
            (!res.is_empty()).then(|| {
                r["resources"] = Value::from(res);
                r
            })
        })
        .collect();
    let user = format!("system:node:{NODE}");
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "test-node-without-configmaps"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "test-node-without-configmaps"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "test-node-without-configmaps"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "app-config", "namespace": "default"}, "data": {"greeting": "hello"}},
    ]});
    cp.kubectl_ok(&["create", "-f", "-"], Some(&objects.to_string()));
    let since = machine_now(&m);
    start_sync(&m, "cluster:\n  objectRefreshSeconds: 3600\n");
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "cfg", "namespace": "default"},
        "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "host", "command": ["/bin/sleep", "100000"],
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}],
            "volumes": [{"name": "cfg", "configMap": {"name": "app-config"}}]}});
    cp.kubectl_ok(&["create", "-f", "-"], Some(&pod.to_string()));
    let denied = "reading a configmap: API server: 403";
    m.wait_for("the ConfigMap read forbidden", SOON, || {
        (!sync_log_lines(&m, &since, None, denied).is_empty()).then_some(())
    });
    // Retried with back-off meanwhile: from 0.2 s doubling, at most 8 tries fit in 10 s (a fixed
    // short interval makes 20 or more; a slow host only makes fewer).
    std::thread::sleep(Duration::from_secs(10));
    let tries = sync_log_lines(&m, &since, None, denied).len();
    assert!(
        (2..=10).contains(&tries),
        "{tries} forbidden reads in about 10 s"
    );
    let grant = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "node-configmaps", "namespace": "default"},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "node-configmaps", "namespace": "default"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "node-configmaps"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
    ]});
    cp.kubectl_ok(&["create", "-f", "-"], Some(&grant.to_string()));
    on_machine_network(&m, &cp, |api| {
        m.wait_for("cfg Running once the read is allowed", SOON, || {
            (pod_phase(api, "default", "cfg")? == "Running").then_some(())
        });
    });
    wait_state(&m, &ctr_unit("default", "cfg", "main"), &["active"]);
}

/// The events of pod `name` in the API, as (reason, type, message, source component, source host,
/// count).
fn pod_events(cp: &ControlPlane, name: &str) -> Vec<(String, String, String, String, String, i64)> {
    let list: Value = serde_json::from_str(&cp.kubectl_ok(
        &[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={name}"),
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                s(&e["reason"]),
                s(&e["type"]),
                s(&e["message"]),
                s(&e["source"]["component"]),
                s(&e["source"]["host"]),
                e["count"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

/// The uid of pod `name` (empty when there is none).
fn pod_uid(cp: &ControlPlane, name: &str) -> String {
    cp.kubectl_ok(
        &["get", "pod", name, "-o", "jsonpath={.metadata.uid}"],
        None,
    )
    .trim()
    .to_string()
}

/// `kubectl get pod NAME`: its READY and RESTARTS columns.
fn kubectl_ready(cp: &ControlPlane, name: &str) -> (String, String) {
    let row = cp.kubectl_ok(&["get", "pod", name, "--no-headers"], None);
    let cols: Vec<&str> = row.split_whitespace().collect();
    (cols[1].to_string(), cols[3].to_string())
}

/// Probes as the API shows them: `kubectl get pods` READY follows a readiness probe that fails
/// and then passes; a failing liveness probe restarts the container (restartCount, lastState)
/// after its preStop hook ran once; the kubelet's events (Created, Started, Unhealthy counted,
/// Killing, FailedPreStopHook) are there with source kubelet and the node, and in `kubectl
/// describe pod`.
#[test]
fn probes_and_kubelet_events_through_a_real_apiserver() {
    let (m, cp) = machine_with_control_plane("real-api-probes", Options::default());
    m.sh_ok("mkdir -p /srv/ap && chmod 0777 /srv/ap");
    // The node's policy allows this hostPath (none is allowed by default).
    start_sync(&m, "policy:\n  hostPaths:\n  - {path: /srv/ap}\n");
    let manifest = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probed", "namespace": "default"},
        "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "data", "hostPath": {"path": "/srv/ap", "type": "Directory"}}],
            // A non-root container (probes_e2e enters a root one with its capabilities).
            "securityContext": {"runAsUser": 1234, "runAsGroup": 1234},
            "containers": [{"name": "main", "image": "host",
                "command": ["/bin/sh", "-c", "echo $$ >> /data/runs; exec sleep 100000"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "readinessProbe": {"exec": {"command": ["/bin/sh", "-c",
                    "test -e /data/ready || { echo not-ready-yet; exit 1; }"]},
                    "periodSeconds": 1, "failureThreshold": 1},
                "livenessProbe": {"exec": {"command": ["/bin/sh", "-c",
                    "if [ -e /data/kill ]; then rm -f /data/kill; echo sick; exit 1; fi"]},
                    "periodSeconds": 1, "failureThreshold": 1},
                "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c",
                    "echo prestop >> /data/prestops; exit 4"]}}}}]}});
    cp.kubectl_ok(&["create", "-f", "-"], Some(&manifest.to_string()));
    let unit = ctr_unit("default", "probed", "main");
    wait_state(&m, &unit, &["active"]);

    // Running, but its readiness probe fails: 0/1, Ready False, and Unhealthy events.
    on_machine_network(&m, &cp, |api| {
        m.wait_for("probed Running", SOON, || {
            (pod_phase(api, "default", "probed")? == "Running").then_some(())
        });
    });
    m.wait_for("a failed readiness probe", SOON, || {
        pod_events(&cp, "probed")
            .iter()
            .any(|e| e.2.starts_with("Readiness probe failed: not-ready-yet"))
            .then_some(())
    });
    // A repeated failure is the same event counted up (a PATCH of `count`), not a new one.
    m.wait_for("the readiness failure counted twice", SOON, || {
        pod_events(&cp, "probed")
            .iter()
            .any(|e| e.2.starts_with("Readiness probe failed: not-ready-yet") && e.5 >= 2)
            .then_some(())
    });
    assert_eq!(kubectl_ready(&cp, "probed"), ("0/1".into(), "0".into()));
    on_machine_network(&m, &cp, |api| {
        let p = pod(api, "probed").unwrap();
        assert_eq!(condition(&p, "Ready").as_deref(), Some("False"));
        assert_eq!(condition(&p, "ContainersReady").as_deref(), Some("False"));
        let cs = main_status(&p);
        assert!(!cs.ready && cs.started == Some(true), "{cs:?}");
    });

    // It passes: 1/1 and Ready True.
    m.sh_ok("touch /srv/ap/ready");
    let deadline = std::time::Instant::now() + SOON;
    while kubectl_ready(&cp, "probed").0 != "1/1" {
        assert!(
            std::time::Instant::now() < deadline,
            "not 1/1: {:?}\nevents: {:#?}\n{}\n{}",
            kubectl_ready(&cp, "probed"),
            pod_events(&cp, "probed"),
            cp.kubectl_ok(&["get", "pod", "probed", "-o", "yaml"], None),
            m.sh_ok("journalctl --no-pager -o cat -u podunit-sync.service | tail -60; ls -la /srv/ap; cat /run/podunit/probes.json")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    on_machine_network(&m, &cp, |api| {
        let p = pod(api, "probed").unwrap();
        assert_eq!(condition(&p, "Ready").as_deref(), Some("True"));
    });

    // The liveness probe fails once: that container is killed and restarted; the API shows the
    // restart and the run before it.
    m.sh_ok("touch /srv/ap/kill");
    m.wait_for("RESTARTS 1 and READY 1/1 again", SOON, || {
        (kubectl_ready(&cp, "probed") == ("1/1".into(), "1".into())).then_some(())
    });
    on_machine_network(&m, &cp, |api| {
        let p = pod(api, "probed").unwrap();
        let cs = main_status(&p);
        assert_eq!(cs.restart_count, 1);
        let last = cs
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .unwrap_or_else(|| panic!("no lastState.terminated: {cs:?}"));
        // The command is PID 1 of its PID namespace, as in any container, and has no SIGTERM
        // handler: SIGTERM does nothing, SIGKILL comes after the grace period, 128 + 9, as the
        // kubelet reports it.
        assert_eq!(last.exit_code, 137, "{last:?}");
        assert!(cs.state.as_ref().unwrap().running.is_some(), "{cs:?}");
    });
    assert_eq!(
        m.read_string("/srv/ap/runs").unwrap().lines().count(),
        2,
        "one restart"
    );
    assert_eq!(
        m.read_string("/srv/ap/prestops").as_deref(),
        Some("prestop\n"),
        "the preStop hook ran once, for the kill"
    );
    let uid = pod_uid(&cp, "probed");
    let failed_pre_stop = format!(
        "Exec lifecycle hook ([/bin/sh -c echo prestop >> /data/prestops; exit 4]) for Container \"main\" in Pod \"probed_default({})\" failed - error: command '/bin/sh -c echo prestop >> /data/prestops; exit 4' exited with 4: , message: \"\"",
        uid
    );
    m.wait_for("FailedPreStopHook", SOON, || {
        pod_events(&cp, "probed")
            .iter()
            .any(|e| e.0 == "FailedPreStopHook" && e.1 == "Warning" && e.2 == failed_pre_stop)
            .then_some(())
    });

    // The kubelet's events, each from the kubelet on this node.
    let events = pod_events(&cp, "probed");
    let has = |reason: &str, ty: &str, msg: &str| {
        events
            .iter()
            .any(|e| e.0 == reason && e.1 == ty && e.2.contains(msg))
    };
    assert!(
        has("Created", "Normal", "Created container main"),
        "{events:#?}"
    );
    assert!(
        has("Started", "Normal", "Started container main"),
        "{events:#?}"
    );
    assert!(
        has(
            "Unhealthy",
            "Warning",
            "Readiness probe failed: not-ready-yet"
        ),
        "{events:#?}"
    );
    assert!(
        has("Unhealthy", "Warning", "Liveness probe failed: sick"),
        "{events:#?}"
    );
    assert!(
        has(
            "Killing",
            "Normal",
            "Container main failed liveness probe, will be restarted"
        ),
        "{events:#?}"
    );
    for e in &events {
        assert_eq!((e.3.as_str(), e.4.as_str()), ("kubelet", NODE), "{e:?}");
    }
    // Failed readiness runs are one event, counted, not one event each.
    let unhealthy_ready = events
        .iter()
        .filter(|e| e.2.starts_with("Readiness probe failed"))
        .count();
    assert_eq!(unhealthy_ready, 1, "{events:#?}");
    let described = cp.kubectl_ok(&["describe", "pod", "probed"], None);
    for want in [
        "Readiness probe failed: not-ready-yet",
        "Liveness probe failed: sick",
        "Started container main",
        "Container main failed liveness probe, will be restarted",
        "FailedPreStopHook",
        "kubelet",
    ] {
        assert!(described.contains(want), "{want:?} not in\n{described}");
    }
}

/// A registry (Debian's docker-registry, TLS and htpasswd Basic auth) in the machine's network,
/// where podunit-sync reaches it on loopback as a node reaches its registry, with busybox built
/// from busybox-static pushed as `library/busybox` under `tags`. The node mirrors docker.io to
/// it and trusts its CA. Returns the registry and the image.
fn registry_in_machine(
    m: &Machine,
    tags: &[&str],
) -> (image::registry::Registry, image::oci::Image) {
    use image::oci::{self, Comp, Layer};
    let img = oci::image(
        support::registry::host_arch(),
        &[Layer {
            tar: oci::busybox_layer(),
            comp: Comp::Gzip,
            declared_size: None,
        }],
        json!({"Cmd": ["sh"], "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}),
    );
    let pushes: Vec<(&str, &str, &oci::Image)> =
        tags.iter().map(|t| ("library/busybox", *t, &img)).collect();
    let (reg, _) = image::registry::Registry::serving(&m.dir().join("registry"), Some(m), &pushes);
    (reg, img)
}

/// Every (phase, waiting reason, message) the pod's first container showed since resourceVersion
/// `rv`, in order and without repeats: a watch from that version replays the pod's changes.
fn waiting_history(cp: &ControlPlane, pod: &str, rv: &str) -> Vec<(String, String, String)> {
    let path = format!(
        "/api/v1/namespaces/default/pods?watch=1&fieldSelector=metadata.name%3D{pod}\
         &resourceVersion={rv}&timeoutSeconds=2"
    );
    let out = cp.kubectl_ok(&["get", "--raw", &path], None);
    let mut seen: Vec<(String, String, String)> = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let ev: serde_json::Value = serde_json::from_str(line).expect("a watch event");
        let status = &ev["object"]["status"];
        let w = &status["containerStatuses"][0]["state"]["waiting"];
        let (Some(reason), Some(phase)) = (w["reason"].as_str(), status["phase"].as_str()) else {
            continue;
        };
        let item = (
            phase.to_string(),
            reason.to_string(),
            w["message"].as_str().unwrap_or_default().to_string(),
        );
        if seen.last() != Some(&item) {
            seen.push(item);
        }
    }
    seen
}

/// A pod running busybox from the registry as `image`, with `secret` as its imagePullSecret.
fn image_pod(name: &str, image: &str, secret: Option<&str>) -> String {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": image,
                "command": ["sh", "-c", "echo running-in-the-image; exec sleep 100000"]}]}});
    if let Some(s) = secret {
        p["spec"]["imagePullSecrets"] = json!([{"name": s}]);
    }
    p.to_string()
}

/// The events about the pod `name`'s container `main`, as (reason, type, message).
fn container_events(api: &Client, name: &str) -> Vec<(String, String, String)> {
    let list: k8s_openapi::List<k8s_openapi::api::core::v1::Event> = api
        .get(&client::path::<k8s_openapi::api::core::v1::Event>(
            Some("default"),
            None,
        ))
        .unwrap();
    list.items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(name)
                && e.involved_object.field_path.as_deref() == Some("spec.containers{main}")
        })
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

/// A pull secret made by kubectl as a user makes one (`kubernetes.io/dockerconfigjson`).
fn registry_secret(cp: &ControlPlane, name: &str, host: &str, password: &str) {
    cp.kubectl_ok(
        &[
            "create",
            "secret",
            "docker-registry",
            name,
            "--docker-server",
            host,
            "--docker-username",
            image::registry::USER,
            "--docker-password",
            password,
        ],
        None,
    );
}

fn said(events: &[(String, String, String)], reason: &str, kind: &str, message: &str) -> bool {
    events
        .iter()
        .any(|(r, t, m)| r == reason && t == kind && m == message)
}

#[test]
fn api_pods_pull_their_images_with_image_pull_secrets() {
    use image::registry::{PASSWORD, USER};
    let (m, cp) = machine_with_control_plane("pull", Options::default());
    let (reg, img) = registry_in_machine(&m, &["1.28", "1.29", "latest"]);
    let host = reg.host.clone();
    let digest = img.digest();
    start_sync(
        &m,
        &support::registry::node_config(&host, support::registry::MACHINE_CA),
    );
    // The pull secrets, made by kubectl as a user makes them: dockerconfigjson with the right
    // password, another with a wrong one, and the legacy dockercfg type.
    registry_secret(&cp, "regcred", &host, PASSWORD);
    registry_secret(&cp, "badcred", &host, "not-the-password");
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let dockercfg = format!(
        r#"{{"{host}":{{"auth":"{}"}}}}"#,
        b64(&format!("{USER}:{PASSWORD}"))
    );
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockercfg",
                "metadata": {"name": "oldcred", "namespace": "default"},
                "data": {".dockercfg": b64(&dockercfg)}})
            .to_string(),
        ),
    );

    // IfNotPresent (a tag), not on the node: pulled with the secret, then it runs.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&image_pod("pulled", "busybox:1.28", Some("regcred"))),
    );
    let image_id = format!("docker.io/library/busybox@{digest}");
    on_machine_network(&m, &cp, |api| {
        let p = m.wait_for("the pulled pod Running", SOON, || {
            let p = pod(api, "pulled")?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
        });
        let st = main_status(&p);
        assert_eq!(st.image, "busybox:1.28", "image as given");
        assert_eq!(st.image_id, image_id, "imageID with the resolved digest");
        assert!(st.state.as_ref().unwrap().running.is_some());
        let ev = container_events(api, "pulled");
        assert!(
            said(&ev, "Pulling", "Normal", "Pulling image \"busybox:1.28\""),
            "{ev:?}"
        );
        assert!(
            ev.iter().any(|(r, t, msg)| r == "Pulled"
                && t == "Normal"
                && msg.starts_with("Successfully pulled image \"busybox:1.28\" in ")),
            "{ev:?}"
        );
    });
    let unit = ctr_unit("default", "pulled", "main");
    m.wait_for("the container's output", SOON, || {
        m.sh_ok(&format!("journalctl --no-pager -o cat -u {unit}"))
            .contains("running-in-the-image")
            .then_some(())
    });
    let pid = m.prop(&unit, "MainPID");
    assert!(
        m.sh(&format!("test -e /proc/{pid}/root/usr/bin/systemctl"))
            .status
            .code()
            == Some(1),
        "it runs in the image's root, not the host's"
    );
    // Nothing of the secret is left on the node in a file others can read, nor in the journal.
    let leaks = m.sh_ok(&format!(
        "grep -rl -- '{PASSWORD}' /etc/pods.d /run /var/lib/podunit 2>/dev/null | \
         xargs -r stat -c '%a %n' | grep -v '^600 ' || true; \
         journalctl --no-pager -o cat | grep -c -- '{PASSWORD}' || true"
    ));
    assert_eq!(leaks.trim(), "0", "the password is in the open: {leaks}");

    // IfNotPresent with the image on the node: no pull, and the kubelet's event says so.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&image_pod("present", "busybox:1.28", None)),
    );
    // Always (no tag): the tag is resolved again at the registry, with a dockercfg secret.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&image_pod("always", "busybox", Some("oldcred"))),
    );
    // A wrong password: ErrImagePull with the registry's answer, then ImagePullBackOff.
    let denied_rv = cp.kubectl_ok(
        &[
            "apply",
            "-f",
            "-",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
        Some(&image_pod("denied", "busybox:1.29", Some("badcred"))),
    );
    on_machine_network(&m, &cp, |api| {
        for name in ["present", "always"] {
            let p = m.wait_for(&format!("{name} Running"), SOON, || {
                let p = pod(api, name)?;
                (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
            });
            assert_eq!(main_status(&p).image_id, image_id);
        }
        let ev = container_events(api, "present");
        let present = "Container image \"busybox:1.28\" already present on machine";
        assert!(said(&ev, "Pulled", "Normal", present), "{ev:?}");
        assert!(!ev.iter().any(|(r, _, _)| r == "Pulling"), "{ev:?}");
        let ev = container_events(api, "always");
        assert!(
            ev.iter().any(|(r, _, _)| r == "Pulling"),
            "Always pulls: {ev:?}"
        );

        m.wait_for("denied waiting with ImagePullBackOff", SOON, || {
            let p = pod(api, "denied")?;
            let w = main_status(&p).state.clone()?.waiting?;
            (w.reason.as_deref() == Some("ImagePullBackOff")).then_some(())
        });
        // ErrImagePull shows only until the next sync (about 2 s, as on a kubelet), too short to
        // poll for on a loaded machine: the pod's every version since its creation tells.
        let seen = waiting_history(&cp, "denied", denied_rv.trim());
        let first = seen
            .iter()
            .find(|w| w.1 != "ContainerCreating")
            .expect("a pull's waiting reason");
        assert_eq!(first.0, "Pending", "{seen:?}");
        assert_eq!(first.1, "ErrImagePull", "ErrImagePull first: {seen:?}");
        let msg = &first.2;
        assert!(
            msg.contains("pull access denied") && msg.contains("UNAUTHORIZED"),
            "the registry's message: {msg}"
        );
        assert!(!msg.contains("not-the-password"), "{msg}");
        let backoff = seen
            .iter()
            .find(|w| w.1 == "ImagePullBackOff")
            .expect("then ImagePullBackOff");
        assert_eq!(backoff.2, "Back-off pulling image \"busybox:1.29\"");
        let ev = container_events(api, "denied");
        for (reason, kind, start) in [
            ("Pulling", "Normal", "Pulling image \"busybox:1.29\""),
            (
                "Failed",
                "Warning",
                "Failed to pull image \"busybox:1.29\": ",
            ),
            ("Failed", "Warning", "Error: ErrImagePull"),
            (
                "BackOff",
                "Normal",
                "Back-off pulling image \"busybox:1.29\"",
            ),
            ("Failed", "Warning", "Error: ImagePullBackOff"),
        ] {
            assert!(
                ev.iter()
                    .any(|(r, t, msg)| r == reason && t == kind && msg.starts_with(start)),
                "{reason} {start}: {ev:?}"
            );
        }
    });
    assert!(
        !m.sh_ok("ls /var/lib/podunit/spool").contains("denied"),
        "a pod whose image did not come is not spooled"
    );
    drop(reg);
}

/// Failed lifecycle hooks as the API shows them: a postStart that gets no answer is
/// `FailedPostStartHook` ("PostStartHook failed", then `Killing` "FailedPostStartHook") and kills
/// the container, which restarts (restartCount); a container that keeps exiting is `BackOff`
/// ("Back-off restarting failed container"); from the kubelet on this node, in `kubectl describe
/// pod`. (The other containers' failing preStop hooks run at deletion; their
/// `FailedPreStopHook` events are not asserted: see docs/cluster-mode.md.)
#[test]
fn failed_lifecycle_hooks_are_kubelet_events() {
    let (m, cp) = machine_with_control_plane("real-api-hooks", Options::default());
    start_sync(&m, "");
    let manifest = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "hooked", "namespace": "default"},
        "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {"name": "poststart", "image": "host", "command": ["/bin/sleep", "100000"],
                 "lifecycle": {"postStart": {"httpGet": {"host": "127.0.0.1", "port": 18097, "path": "/hello"}}}},
                {"name": "prestop", "image": "host", "command": ["/bin/sleep", "100000"],
                 "lifecycle": {"preStop": {"httpGet": {"host": "127.0.0.1", "port": 18098, "path": "/bye"}}}},
                {"name": "execstop", "image": "host", "command": ["/bin/sleep", "100000"],
                 "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "exit 3"]}}}},
                {"name": "crash", "image": "host", "command": ["/bin/sh", "-c", "exit 1"]}]}});
    cp.kubectl_ok(&["create", "-f", "-"], Some(&manifest.to_string()));
    let has = |reason: &str, ty: &str, msg: &str| {
        pod_events(&cp, "hooked")
            .iter()
            .any(|e| e.0 == reason && e.1 == ty && e.2.contains(msg))
    };
    m.wait_for("FailedPostStartHook", SOON, || {
        has("FailedPostStartHook", "Warning", "PostStartHook failed").then_some(())
    });
    assert!(
        has("Killing", "Normal", "FailedPostStartHook"),
        "{:#?}",
        pod_events(&cp, "hooked")
    );
    m.wait_for("poststart restarted in the API", SOON, || {
        let restarts = cp.kubectl_ok(
            &[
                "get",
                "pod",
                "hooked",
                "-o",
                "jsonpath={.status.containerStatuses[?(@.name==\"poststart\")].restartCount}",
            ],
            None,
        );
        (restarts.trim().parse::<u32>().unwrap_or(0) >= 1).then_some(())
    });
    let uid = pod_uid(&cp, "hooked");
    let back_off = format!(
        "Back-off restarting failed container crash in pod hooked_default({})",
        uid
    );
    m.wait_for("BackOff of the crashing container", SOON, || {
        has("BackOff", "Warning", &back_off).then_some(())
    });
    let events = pod_events(&cp, "hooked");
    for e in &events {
        assert_eq!((e.3.as_str(), e.4.as_str()), ("kubelet", NODE), "{e:?}");
    }
    let described = cp.kubectl_ok(&["describe", "pod", "hooked"], None);
    assert!(
        described.contains("FailedPostStartHook") && described.contains("PostStartHook failed"),
        "{described}"
    );

    // Deleted through the API: the preStop hooks run during the graceful stop, and their
    // failures are events before the pod goes, although the local reconciler resets and unloads
    // the stopped units at once. The httpGet hook's error is the one `podunit hook` met.
    let uid = pod_uid(&cp, "hooked");
    assert!(!uid.is_empty());
    let uid = uid.as_str();
    cp.kubectl_ok(&["delete", "pod", "hooked", "--wait=false"], None);
    m.wait_for("hooked gone from the API", SOON, || {
        cp.kubectl_ok(
            &["get", "pod", "hooked", "--ignore-not-found", "-o", "name"],
            None,
        )
        .trim()
        .is_empty()
        .then_some(())
    });
    let pod_ref = format!("hooked_default({uid})");
    let events = pod_events(&cp, "hooked");
    let pre_stop: Vec<_> = events
        .iter()
        .filter(|e| e.0 == "FailedPreStopHook")
        .collect();
    let http = format!(
        "HTTP lifecycle hook (/bye) for Container \"prestop\" in Pod \"{pod_ref}\" failed - error: Get \"http://127.0.0.1:18098/bye\": dial tcp 127.0.0.1:18098: connect: connection refused"
    );
    let exec = format!(
        "Exec lifecycle hook ([/bin/sh -c exit 3]) for Container \"execstop\" in Pod \"{pod_ref}\" failed - error: command '/bin/sh -c exit 3' exited with 3: , message: \"\""
    );
    for want in [&http, &exec] {
        assert!(
            pre_stop
                .iter()
                .any(|e| e.1 == "Warning" && &e.2 == want && e.3 == "kubelet" && e.4 == NODE),
            "no FailedPreStopHook {want:?} in {events:#?}\n{}",
            m.diagnostics()
        );
    }
    assert_eq!(pre_stop.len(), 2, "{events:#?}");
    // The graceful deletion's kill of each running container, as `kubectl describe pod` shows it.
    for c in ["prestop", "execstop"] {
        assert!(
            events.iter().any(|e| e.0 == "Killing"
                && e.1 == "Normal"
                && e.2 == format!("Stopping container {c}")),
            "no Killing for {c}: {events:#?}"
        );
    }
    assert!(
        m.sh_ok(&format!(
            "ls -A /run/podunit/hooks/{uid} 2>/dev/null || true"
        ))
        .trim()
        .is_empty(),
        "the hooks' records outlived the pod"
    );
}

/// `imagePullPolicy: Always` at every start of the container, as the kubelet's image manager
/// runs at each `startContainer`: a container systemd restarts makes podunit ask the registry
/// again, and once the tag moved the pod runs the new image. And a blob the registry serves
/// damaged is `ErrImagePull` naming its digest: the pod never runs and nothing of it is kept.
#[test]
fn api_pods_pull_always_images_at_restarts_and_refuse_damaged_blobs() {
    use image::oci::{self, Comp, Layer};
    use image::registry::PASSWORD;
    let (m, cp) = machine_with_control_plane("repull", Options::default());
    let (reg, first) = registry_in_machine(&m, &["latest"]);
    let host = reg.host.clone();
    // The tag's next version: one more layer, with a file the container looks for.
    let marker = oci::TarBuilder::new()
        .dir("etc")
        .file("etc/podunit-v2", b"2\n", 0o644)
        .finish();
    let layer = |tar: Vec<u8>| Layer {
        tar,
        comp: Comp::Gzip,
        declared_size: None,
    };
    let env = json!({"Cmd": ["sh"], "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]});
    let second = oci::image(
        support::registry::host_arch(),
        &[layer(oci::busybox_layer()), layer(marker)],
        env.clone(),
    );
    // An image whose only layer the registry's storage then holds damaged.
    let damaged_tar = oci::TarBuilder::new()
        .file("damaged", b"one byte will change\n", 0o644)
        .finish();
    let damaged_diff_id = oci::digest(&damaged_tar);
    let damaged = oci::image(support::registry::host_arch(), &[layer(damaged_tar)], env);
    support::registry::in_machine_network(&m, || reg.push("library/damaged", "1", &damaged));
    let blob = reg.blob_file(&damaged.layer_digests[0]);
    let mut b = std::fs::read(&blob).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0xff;
    std::fs::write(&blob, b).unwrap();

    start_sync(
        &m,
        &support::registry::node_config(&host, support::registry::MACHINE_CA),
    );
    registry_secret(&cp, "regcred", &host, PASSWORD);
    // No tag: Always. It exits after a while, so systemd restarts it (restartPolicy Always).
    let mut restarts: Value =
        serde_json::from_str(&image_pod("restarts", "busybox", Some("regcred"))).unwrap();
    restarts["spec"]["containers"][0]["command"] = json!([
        "sh",
        "-c",
        "if test -e /etc/podunit-v2; then echo running-v2; else echo running-v1; fi; sleep 2; exit 1"
    ]);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&restarts.to_string()));
    let damaged_rv = cp.kubectl_ok(
        &[
            "apply",
            "-f",
            "-",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
        Some(&image_pod("damaged", "damaged:1", Some("regcred"))),
    );
    let unit = ctr_unit("default", "restarts", "main");
    m.wait_for("the first version running", SOON, || {
        m.sh_ok(&format!("journalctl --no-pager -o cat -u {unit}"))
            .contains("running-v1")
            .then_some(())
    });
    // The tag moves while the container runs; a restart finds it.
    support::registry::in_machine_network(&m, || reg.push("library/busybox", "latest", &second));
    let new_id = format!("docker.io/library/busybox@{}", second.digest());
    on_machine_network(&m, &cp, |api| {
        let p = m.wait_for(
            "the restarted pod on the new digest",
            Duration::from_secs(240),
            || {
                let p = pod(api, "restarts")?;
                (main_status(&p).image_id == new_id).then_some(p)
            },
        );
        assert_ne!(
            main_status(&p).image_id,
            format!("docker.io/library/busybox@{}", first.digest())
        );
        let ev = container_events(api, "restarts");
        assert!(
            said(&ev, "Pulling", "Normal", "Pulling image \"busybox\""),
            "{ev:?}"
        );
        assert!(
            ev.iter().any(|(r, t, msg)| r == "Pulled"
                && t == "Normal"
                && msg.starts_with("Successfully pulled image \"busybox\" in ")),
            "{ev:?}"
        );

        // The damaged blob: ErrImagePull naming it, then the back-off; never running.
        m.wait_for("damaged waiting with ImagePullBackOff", SOON, || {
            let p = pod(api, "damaged")?;
            let w = main_status(&p).state.clone()?.waiting?;
            (w.reason.as_deref() == Some("ImagePullBackOff")).then_some(())
        });
        let seen = waiting_history(&cp, "damaged", damaged_rv.trim());
        assert!(
            seen.iter().all(|w| w.0 == "Pending"),
            "never runs: {seen:?}"
        );
        let failed = seen
            .iter()
            .find(|w| w.1 == "ErrImagePull")
            .unwrap_or_else(|| panic!("ErrImagePull: {seen:?}"));
        assert!(
            failed.2.contains(&damaged.layer_digests[0]),
            "the message names the blob: {}",
            failed.2
        );
        let ev = container_events(api, "damaged");
        assert!(
            ev.iter()
                .any(|(r, _, msg)| r == "Failed" && msg.contains(&damaged.layer_digests[0])),
            "{ev:?}"
        );
    });
    m.wait_for("the restarted container on the new image", SOON, || {
        m.sh_ok(&format!("journalctl --no-pager -o cat -u {unit}"))
            .contains("running-v2")
            .then_some(())
    });
    // Nothing of the damaged image is in the store: no layer, no record, no leftovers (an empty
    // lock file per layer, which only serialises pulls, may stay).
    let hex = |d: &str| d.trim_start_matches("sha256:").to_string();
    let store = "/var/lib/podunit/store";
    let found = m.sh_ok(&format!(
        "find {store} -path {store}/locks -prune -o \\( -name '*{}*' -o -name '*{}*' \\) -print; \
         ls -A {store}/tmp 2>/dev/null; ls {store}/refs/docker.io/library",
        hex(&damaged_diff_id),
        hex(&damaged.layer_digests[0])
    ));
    assert_eq!(found.trim(), "busybox", "only busybox is kept: {found}");
    assert!(
        !m.sh_ok("ls /var/lib/podunit/spool").contains("damaged"),
        "a pod whose image did not come is not spooled"
    );
    drop(reg);
}

/// Runs `ip ARGS` in the machine's own network namespace (it has a private network: nothing
/// here reaches the host's).
fn machine_ip(m: &Machine, args: &str) {
    let out = std::process::Command::new("nsenter")
        .args(["-t", &m.leader().to_string(), "-n", "--", "ip"])
        .args(args.split_whitespace())
        .output()
        .expect("nsenter ip");
    assert!(
        out.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Node addresses and pod IPs through a real API server:
/// - a node with two IPv4 addresses (an interface with a secondary address and the default
///   route, in the machine's own network namespace) reports one IP per family, the node IP (the
///   default route's interface's first address), as the kubelet does: the API server takes the
///   status and the pod runs;
/// - a container whose command does not exist is terminated with reason `StartError`, exit code
///   128 and the runtime's message, as the kubelet (containerd) reports it;
/// - a status the API server refuses (a `nodeIP` written as two addresses) is a Warning Event on
///   the pod and a message in `podunit status`, not only a journal line.
#[test]
fn pod_ips_start_errors_and_refused_statuses_through_a_real_apiserver() {
    let (m, cp) = machine_with_control_plane("pod-ips", Options::default());
    machine_ip(&m, "link add podunit-e2e type bridge");
    machine_ip(&m, "addr add 10.254.0.1/24 dev podunit-e2e");
    machine_ip(&m, "addr add 10.254.0.2/24 dev podunit-e2e");
    machine_ip(&m, "link set podunit-e2e up");
    machine_ip(&m, "route add default dev podunit-e2e");
    start_sync(&m, "");
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&pod_yaml("ips", "Always", "exec sleep 100000")),
    );
    let mut broken: Value = serde_json::from_str(&pod_yaml("broken", "Always", "")).unwrap();
    broken["spec"]["containers"][0]["command"] = json!(["/nonexistent/app"]);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&broken.to_string()));
    on_machine_network(&m, &cp, |api| {
        let p = m.wait_for("ips running in the API", SOON * 2, || {
            let p = pod(api, "ips")?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
        });
        let st = p.status.unwrap();
        let ips: Vec<String> = st.pod_ips.iter().flatten().map(|i| i.ip.clone()).collect();
        assert_eq!(ips, ["10.254.0.1"], "one IP per family: the node IP");
        assert_eq!(st.host_ip.as_deref(), Some("10.254.0.1"));

        let t = m.wait_for("broken's start error", SOON * 2, || {
            let p = pod(api, "broken")?;
            let cs = main_status(&p).clone();
            cs.last_state?.terminated
        });
        assert_eq!(
            (t.reason.as_deref(), t.exit_code),
            (Some("StartError"), 128),
            "{t:?}"
        );
        let msg = t.message.unwrap_or_default();
        assert!(
            msg.starts_with(
                "exec: \"/nonexistent/app\": stat /nonexistent/app: no such file or directory"
            ),
            "{msg}"
        );
    });
    let ev = pod_events(&cp, "broken");
    assert!(
        ev.iter().any(|e| e.0 == "Failed"
            && e.1 == "Warning"
            && e.2.starts_with("Error: exec: \"/nonexistent/app\"")),
        "the kubelet's Failed event: {ev:?}"
    );

    // A node IP the API server cannot take: every status is refused, and said so.
    start_sync(&m, "nodeIP: 10.254.0.1,10.254.0.2\n");
    m.wait_for("the refusal as an event on the pod", SOON * 2, || {
        pod_events(&cp, "ips")
            .into_iter()
            .find(|e| e.0 == "FailedToUpdatePodStatus")
    });
    let ev = pod_events(&cp, "ips");
    let refused = ev
        .iter()
        .find(|e| e.0 == "FailedToUpdatePodStatus")
        .unwrap();
    assert_eq!(refused.1, "Warning");
    assert!(refused.2.contains("10.254.0.1,10.254.0.2"), "{refused:?}");
    let shown = m.sh_ok("podunit status");
    assert!(
        shown.contains("default/ips: the API server refused this node's status"),
        "{shown}"
    );
}
