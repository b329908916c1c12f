//! Cluster mode end to end on a real systemd (tests/support/nspawn.rs): the API server double runs
//! inside the machine (its network is private, loopback only), podunit-sync is the node's kubelet,
//! and the test talks to the API server from a thread that joined the machine's network namespace.
//! Needs root and systemd-nspawn; fails (never skips) without them.

mod support;

use k8s_openapi::api::core::v1::Pod;
use podunit::kube::client::{self, Client, DeleteOptions};
use serde_json::json;
use support::api::{self, API_DIR, admin, join_machine_network};
use support::nspawn::Machine;
use support::pods::{SOON, ctr_unit, pod_unit, start_sync, wait_state};
use support::status::status_row;

const NODE: &str = "e2e-node";

/// Starts (or restarts) the API server double with its state on disk.
fn start_api(m: &Machine) {
    api::start(
        m,
        NODE,
        &format!("--state-file {API_DIR}/state.json --bookmark-interval-ms 1000"),
    );
}

/// Runs `f` with an admin client on a thread inside the machine's network (the API server listens
/// on the machine's loopback); a failure shows the machine's state.
fn on_machine_network(m: &Machine, f: impl FnOnce(&Client) + Send) {
    std::thread::scope(|s| {
        s.spawn(|| {
            join_machine_network(m);
            f(&admin(m));
        })
        .join()
        .unwrap_or_else(|_| panic!("{}", m.diagnostics()));
    });
}

fn get_pod(api: &Client, name: &str) -> Option<Pod> {
    match api.get::<Pod>(&client::path::<Pod>(Some("default"), Some(name))) {
        Ok(p) => Some(p),
        Err(e) if e.is_not_found() => None,
        Err(e) if e.is_transient() => None,
        Err(e) => panic!("{e}"),
    }
}

fn create(api: &Client, name: &str, restart: &str, script: &str) -> Pod {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "restartPolicy": restart, "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "host", "command": ["/bin/sh", "-c", script]}]}});
    api.create(&client::path::<Pod>(Some("default"), None), &pod)
        .unwrap()
}

fn main_status(api: &Client, name: &str) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    get_pod(api, name)?
        .status?
        .container_statuses?
        .into_iter()
        .next()
}

/// Boots a machine with the API server double running and podunit-sync in cluster mode; `extra`
/// is appended to /etc/podunit/config.yaml.
fn cluster_machine(name: &str, extra: &str) -> Machine {
    let m = Machine::boot(name);
    api::install(&m);
    start_api(&m);
    m.write(
        "/etc/podunit/config.yaml",
        format!("nodeName: {NODE}\nkubeconfig: {API_DIR}/node-{NODE}.kubeconfig\n{extra}")
            .as_bytes(),
    );
    // It may already run in local mode (enabled at boot): restart it to read the config.
    start_sync(&m);
    m
}

#[test]
fn cluster_mode_on_real_systemd() {
    let m = cluster_machine("cluster", "");

    on_machine_network(&m, |api| {
        // Created in the API -> running on systemd -> Running with the real start time.
        create(api, "web", "Always", "exec sleep 1000");
        let p = m.wait_for("web Running in the API", SOON, || {
            get_pod(api, "web")
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        });
        wait_state(&m, &ctr_unit("default", "web", "main"), &["active"]);
        let started = p.status.unwrap().container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .running
            .unwrap()
            .started_at
            .unwrap()
            .0
            .as_second();
        let unit_start = m.prop(
            &ctr_unit("default", "web", "main"),
            "ExecMainStartTimestamp",
        );
        let unit_secs = m
            .sh_ok(&format!("date -d '{unit_start}' +%s"))
            .trim()
            .parse::<i64>()
            .unwrap();
        assert_eq!(started, unit_secs, "startedAt is the unit's real start");
        // The kube-api-access volume: a token bound to this pod is in the container's view.
        let token = m.sh_ok(&format!(
                "nsenter -t $(systemctl show -p MainPID --value {}) -m cat /var/run/secrets/kubernetes.io/serviceaccount/token",
                ctr_unit("default", "web", "main")
            ));
        assert_eq!(token.trim().split('.').count(), 3, "a JWT: {token}");

        // A container that exits 3: the exit code and restarts are posted.
        create(api, "crash", "Always", "exit 3");
        let cs = m.wait_for("crash restarted with exit code 3", SOON, || {
            let cs = main_status(api, "crash")?;
            let last = cs.last_state.as_ref()?.terminated.as_ref()?;
            (last.exit_code == 3 && cs.restart_count >= 1).then_some(cs)
        });
        assert_eq!(
            cs.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            3
        );
        // restartCount is systemd's NRestarts: equal, once a posted status has caught up with the
        // restarts (the container keeps restarting, so both are read around the status).
        let crash = ctr_unit("default", "crash", "main");
        let restarts = |m: &Machine| m.prop(&crash, "NRestarts").parse::<i32>().unwrap();
        m.wait_for("restartCount to equal NRestarts", SOON, || {
            let before = restarts(&m);
            let posted = main_status(api, "crash")?.restart_count;
            let after = restarts(&m);
            (before == after && posted == after).then_some(())
        });

        // The API server is killed mid-watch; meanwhile the web container is killed and restarted.
        // The main process only (each is a single process either way): on this harness's cgroup
        // v1 hosts, systemd's cgroup-wide kill was seen failing with EIO ("Failed
        // to send signal SIGKILL to auxiliary processes") while another test's machine ran a unit
        // of the same name.
        api::kill(&m);
        m.wait_for("the API server to be gone", SOON, || {
            (!m.exec(&["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/6443"])
                .status
                .success())
            .then_some(())
        });
        m.sh_ok(&format!(
            "systemctl kill -s KILL --kill-whom=main {}",
            ctr_unit("default", "web", "main")
        ));
        m.wait_for("web restarted by systemd", SOON, || {
            (m.prop(&ctr_unit("default", "web", "main"), "NRestarts")
                .trim()
                != "0")
                .then_some(())
        });
        assert_eq!(
            m.prop(&pod_unit("default", "web"), "ActiveState").trim(),
            "active",
            "pods keep running without the API server"
        );
        start_api(&m);
        m.wait_for(
            "web's restart posted after the API server is back",
            SOON,
            || (main_status(api, "web")?.restart_count >= 1).then_some(()),
        );
        // Nothing lost: a pod created now (the watch re-listed) runs.
        create(api, "late", "Always", "exec sleep 1000");
        m.wait_for("late Running", SOON, || {
            get_pod(api, "late")
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        });

        // Delete: units stopped, then the object is gone.
        let web = ctr_unit("default", "web", "main");
        assert_eq!(m.prop(&web, "LoadState"), "loaded");
        let web_pid = m.prop(&web, "MainPID");
        assert_ne!(web_pid, "0", "web runs before the delete");
        api.delete(
            &client::path::<Pod>(Some("default"), Some("web")),
            &DeleteOptions::default(),
        )
        .unwrap();
        m.wait_for("web removed from the API", SOON, || {
            get_pod(api, "web").is_none().then_some(())
        });
        // An unknown unit also says `inactive`: what shows the stop is that its process is gone
        // and that systemd stopped the unit (its own message for that unit).
        let st = m.prop(&web, "ActiveState");
        assert!(
            st == "inactive" || st == "failed",
            "stopped before the object went: {st}"
        );
        assert!(
            !m.sh(&format!("test -e /proc/{web_pid}")).status.success(),
            "web's process {web_pid} is gone"
        );
        let stopped = m.sh_ok(&format!("journalctl --no-pager -o cat _PID=1 UNIT={web}"));
        assert!(
            stopped.lines().any(|l| l.starts_with("Stopped ")),
            "systemd stopped {web}:\n{stopped}"
        );
        assert!(
            m.read("/var/lib/podunit/spool/default_web.yaml").is_none(),
            "spool cleaned"
        );
    });
}

/// What the main process of a container unit sees at `path` (its mount namespace).
fn inside(m: &Machine, unit: &str, path: &str) -> Option<String> {
    let out = m.sh(&format!(
        "nsenter -t $(systemctl show -p MainPID --value {unit}) -m cat {path}"
    ));
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn phase(api: &Client, name: &str) -> Option<String> {
    get_pod(api, name)?.status?.phase
}

#[test]
fn cluster_volumes_follow_the_api_and_a_killed_spool_writer_leaves_no_partial_file() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let m = cluster_machine("cluster-spool", "cluster:\n  objectRefreshSeconds: 2\n");
    on_machine_network(&m, |api| {
        let ns = Some("default");

        // The pod comes before the ConfigMap and Secret it needs: it waits, and `podunit status`
        // says on what. A pod this node does not fit is refused, and said there too.
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "cfg", "namespace": "default"},
                "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 5,
                    "securityContext": {"runAsUser": 1234, "fsGroup": 2345},
                    "containers": [{"name": "main", "image": "host", "command": ["/bin/sleep", "100000"],
                        "env": [{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "greeting"}}}],
                        "volumeMounts": [
                            {"name": "cfg", "mountPath": "/etc/cfg"},
                            {"name": "sec", "mountPath": "/etc/sec"},
                            {"name": "cfg", "mountPath": "/etc/greeting-sub", "subPath": "greeting"}]}],
                    "volumes": [{"name": "cfg", "configMap": {"name": "app-config"}},
                                {"name": "sec", "secret": {"secretName": "app-secret"}}]}});
        api.create::<_, Pod>(&client::path::<Pod>(ns, None), &pod)
            .unwrap();
        api.create::<_, Pod>(
            &client::path::<Pod>(ns, None),
            &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "elsewhere", "namespace": "default"},
                "spec": {"nodeName": NODE, "nodeSelector": {"kubernetes.io/os": "windows"},
                    "containers": [{"name": "main", "image": "host", "command": ["/bin/sleep", "1"]}]}}),
        )
        .unwrap();
        let status = m.wait_for("podunit status to show both", SOON, || {
            let t = m.sh_ok("podunit status");
            (t.contains("CreateContainerConfigError") && t.contains("NodeAffinity")).then_some(t)
        });
        let row = |name: &str| status_row(&status, name);
        let cfg_row = row("cfg");
        assert_eq!(
            (cfg_row[2].as_str(), cfg_row[3].as_str()),
            ("0/1", "CreateContainerConfigError"),
            "{status}"
        );
        assert_eq!(row("elsewhere")[3], "NodeAffinity", "{status}");
        assert!(
            status
                .lines()
                .any(|l| l == "default/cfg: configmap \"app-config\" not found"),
            "{status}"
        );
        assert!(
            status
                .lines()
                .any(|l| l.starts_with("default/elsewhere: Pod was rejected: ")),
            "{status}"
        );
        assert!(
            m.sh_ok("podunit status cfg")
                .contains("CreateContainerConfigError"),
            "one pod by name"
        );

        // They arrive: the pod runs, and its configMap and secret volumes follow the API; env
        // and subPath do not.
        api.create::<_, ConfigMap>(
            &client::path::<ConfigMap>(ns, None),
            &json!({"metadata": {"name": "app-config"}, "data": {"greeting": "hello"}}),
        )
        .unwrap();
        api.create::<_, Secret>(
            &client::path::<Secret>(ns, None),
            &json!({"metadata": {"name": "app-secret"}, "data": {"password": "b25l"}}),
        )
        .unwrap();
        let unit = ctr_unit("default", "cfg", "main");
        m.wait_for("cfg Running", SOON, || {
            (phase(api, "cfg")? == "Running").then_some(())
        });
        wait_state(&m, &unit, &["active"]);
        let status = m.sh_ok("podunit status");
        assert!(
            !status.contains("default/cfg:"),
            "the wait is over: {status}"
        );
        assert!(
            status
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some("cfg") && l.contains("Running")),
            "{status}"
        );
        assert_eq!(
            inside(&m, &unit, "/etc/cfg/greeting").as_deref(),
            Some("hello")
        );
        assert_eq!(
            inside(&m, &unit, "/etc/sec/password").as_deref(),
            Some("one")
        );
        assert_eq!(
            inside(&m, &unit, "/etc/greeting-sub").as_deref(),
            Some("hello")
        );
        let pid = m.prop(&unit, "MainPID");
        let stat = |p: &str| m.sh_ok(&format!("nsenter -t {pid} -m stat -L -c '%a %u %g' {p}"));
        // fsGroup on configMap and secret volumes as the kubelet's SetVolumeOwnership sets it:
        // group 2345 and group read added (mode | 0440 for a read-only volume). The owner is
        // the container's user (1234) and a secret's default mode 0400: podunit's documented
        // choices (docs/mapping.md, Volume and SecretVolumeSource), where the kubelet leaves
        // root and 0644.
        let (cm_file, secret_file) = ("644 1234 2345\n", "440 1234 2345\n");
        assert_eq!(stat("/etc/cfg/greeting"), cm_file, "configMap file");
        assert_eq!(stat("/etc/sec/password"), secret_file, "secret file");

        api.merge_patch::<ConfigMap>(
            &client::path::<ConfigMap>(ns, Some("app-config")),
            &json!({"data": {"greeting": "hi there"}}),
        )
        .unwrap();
        api.merge_patch::<Secret>(
            &client::path::<Secret>(ns, Some("app-secret")),
            &json!({"data": {"password": "dHdv"}}),
        )
        .unwrap();
        m.wait_for("the running container to see the new files", SOON, || {
            (inside(&m, &unit, "/etc/cfg/greeting")? == "hi there"
                && inside(&m, &unit, "/etc/sec/password")? == "two")
                .then_some(())
        });
        assert_eq!(
            m.prop(&unit, "MainPID"),
            pid,
            "the container was not restarted"
        );
        assert_eq!(stat("/etc/cfg/greeting"), cm_file, "owner and mode kept");
        assert_eq!(
            stat("/etc/sec/password"),
            secret_file,
            "owner and mode kept"
        );
        assert_eq!(
            inside(&m, &unit, "/etc/greeting-sub").as_deref(),
            Some("hello"),
            "a subPath mount keeps its version, as in Kubernetes"
        );
        let environ = m.sh_ok(&format!("tr '\\0' '\\n' < /proc/{pid}/environ"));
        assert!(
            environ.lines().any(|l| l == "GREETING=hello"),
            "env keeps the start value: {environ}"
        );

        // A burst of large spool files; podunit-sync is SIGKILLed while one is being written.
        let blob = "x".repeat(512 * 1024);
        api.create::<_, ConfigMap>(
            &client::path::<ConfigMap>(ns, None),
            &json!({"metadata": {"name": "big"}, "data": {"blob": blob}}),
        )
        .unwrap();
        // Inside the machine: SIGKILL podunit-sync while a spool temp file exists, once a
        // third of the burst is written, then (before its restart cleans up) snapshot the
        // spool and let the generator read it.
        m.write(
            "/usr/local/bin/kill-mid-write",
            br#"#!/bin/sh
while :; do
  for f in /var/lib/podunit/spool/.tmp-*; do
    if [ -e "$f" ] && [ "$(ls /var/lib/podunit/spool | grep -c '^default_b')" -ge 10 ]; then
      systemctl kill -s KILL --kill-whom=main podunit-sync.service
      rm -rf /run/snap && cp -a /var/lib/podunit/spool /run/snap
      systemctl daemon-reload
      grep -rh '^SourcePath=' /run/systemd/generator > /run/snap-sources || true
      echo "$f" > /run/killed-at
      exit 0
    fi
  done
done
"#,
        );
        m.sh_ok("chmod 0755 /usr/local/bin/kill-mid-write");
        let restarts_before = m.prop("podunit-sync.service", "NRestarts");
        m.sh_ok("systemd-run --unit=kill-mid-write --collect /usr/local/bin/kill-mid-write");
        let n = 30;
        for i in 0..n {
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("b{i}"), "namespace": "default"},
                    "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
                        "containers": [{"name": "main", "image": "host", "command": ["/bin/sleep", "100000"],
                            "volumeMounts": [{"name": "big", "mountPath": "/big"}]}],
                        "volumes": [{"name": "big", "configMap": {"name": "big"}}]}});
            api.create::<_, Pod>(&client::path::<Pod>(ns, None), &pod)
                .unwrap();
        }
        let killed_at = m.wait_for("podunit-sync killed mid-write", SOON, || {
            m.read_string("/run/killed-at")
        });
        eprintln!("SIGKILL while {} existed", killed_at.trim());
        m.wait_for("podunit-sync restarted after the SIGKILL", SOON, || {
            (m.prop("podunit-sync.service", "NRestarts") != restarts_before).then_some(())
        });
        // What the generator read right after the kill: whole files only, never a temp file.
        let sources = m.read_string("/run/snap-sources").unwrap_or_default();
        assert!(
            !sources.contains("/.tmp-"),
            "the generator read a temp file:\n{sources}"
        );
        let files = m.sh_ok("ls -A /run/snap");
        let mut whole = 0;
        for f in files.lines().filter(|f| !f.starts_with('.')) {
            let text = m.read_string(&format!("/run/snap/{f}")).unwrap();
            let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| panic!("{f} does not parse after the kill: {e}"));
            assert_eq!(docs[0]["kind"], "Pod", "{f}");
            if f.starts_with("default_b") {
                assert_eq!(docs.len(), 2, "{f}: the pod and its ConfigMap");
                assert_eq!(
                    docs[1]["data"]["blob"].as_str().map(str::len),
                    Some(blob.len()),
                    "{f} is whole"
                );
                whole += 1;
            }
        }
        assert!(whole >= 10, "killed mid-burst: {whole} files written");
        eprintln!("{whole} whole spool files of the burst at the kill");
        let generated = sources
            .lines()
            .filter(|l| l.contains("/var/lib/podunit/spool/"))
            .count();
        assert!(generated > 0, "the generator read the spool after the kill");

        // Restarted by systemd, it converges: every pod runs, no temp file is left.
        wait_state(&m, "podunit-sync.service", &["active"]);
        for i in 0..n {
            m.wait_for(&format!("b{i} Running"), SOON, || {
                (phase(api, &format!("b{i}"))? == "Running").then_some(())
            });
            wait_state(
                &m,
                &ctr_unit("default", &format!("b{i}"), "main"),
                &["active"],
            );
        }
        let left = m.sh_ok("ls -A /var/lib/podunit/spool");
        assert!(
            left.lines().all(|f| !f.starts_with('.')),
            "temp files left after the restart: {left}"
        );
        assert_eq!(
            left.lines().filter(|f| f.starts_with("default_b")).count(),
            n,
            "{left}"
        );
        m.sh_ok("podunit check /var/lib/podunit/spool");
    });
}
