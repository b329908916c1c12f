//! The kubelet API served by podunit-sync, used the way operators use it: kubectl through a real
//! kube-apiserver (tests/support/controlplane.rs), which authenticates to the node with its
//! `--kubelet-client-certificate` and proxies `kubectl logs` and `get --raw .../proxy/...` to it.
//! The auth cases talk to the node's port directly with curl. Needs root, systemd-nspawn and the
//! built kube-apiserver; fails (never skips) without them.

mod support;

// Further cases, one file each.
#[path = "kubelet_e2e/cni_network.rs"]
mod cni_network;
#[path = "kubelet_e2e/exec_resize.rs"]
mod exec_resize;
#[path = "kubelet_e2e/kube_proxy.rs"]
mod kube_proxy;
#[path = "kubelet_e2e/node_logs.rs"]
mod node_logs;
#[path = "kubelet_e2e/private_network.rs"]
mod private_network;
#[path = "kubelet_e2e/service_env.rs"]
mod service_env;
#[path = "kubelet_e2e/serving_cert.rs"]
mod serving_cert;
#[path = "kubelet_e2e/websocket.rs"]
mod websocket;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use support::controlplane::{ControlPlane, NODE_KUBECONFIG};
use support::nspawn::Machine;
use support::pods::{SOON, container_pid, ctr_unit, wait_state};

const NODE: &str = "kubelet-node";
const PORT: u16 = 10250;

/// Configures podunit-sync for cluster mode and (re)starts it.
fn start_sync(m: &Machine) {
    m.write(
        "/etc/podunit/config.yaml",
        format!("nodeName: {NODE}\nkubeconfig: {NODE_KUBECONFIG}\n").as_bytes(),
    );
    support::pods::start_sync(m);
}

fn pod_yaml(name: &str, restart: &str, script: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "restartPolicy": restart, "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "host", "command": ["/bin/sh", "-c", script]}]}})
    .to_string()
}

/// kubectl's output, or its error output when it fails.
fn kubectl(cp: &ControlPlane, args: &[&str]) -> Result<String, String> {
    let out = cp.kubectl().args(args).output().expect("run kubectl");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `program` in the machine's network namespace (the host's other namespaces).
fn in_machine_net(m: &Machine, program: &str) -> Command {
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/proc/{}/ns/net", m.leader()))
        .args(["--", program])
        .stdin(Stdio::null());
    c
}

/// The HTTP status of `GET https://127.0.0.1:10250{path}` from the machine's network, with
/// extra curl arguments (credentials).
fn status_of(m: &Machine, path: &str, extra: &[&str]) -> String {
    let out = in_machine_net(m, "curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(extra)
        .arg(format!("https://127.0.0.1:{PORT}{path}"))
        .output()
        .expect("run curl");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn cert_args<'a>(crt: &'a Path, key: &'a Path) -> [String; 4] {
    [
        "--cert".into(),
        crt.display().to_string(),
        "--key".into(),
        key.display().to_string(),
    ]
}

/// CPU time (ns) and working set (bytes) of a unit, from its cgroup's own files in the machine
/// (cgroup v2, or the v1 cpuacct and memory hierarchies).
fn cgroup_numbers(m: &Machine, unit: &str) -> (u64, u64) {
    let cg = m.prop(unit, "ControlGroup");
    assert!(!cg.is_empty(), "{unit} has no cgroup");
    let read = |p: String| {
        m.read_string(&p).unwrap_or_else(|| {
            panic!(
                "{p} missing:\n{}",
                m.sh("ls -l /sys/fs/cgroup").stdout.escape_ascii()
            )
        })
    };
    let number = |text: &str| text.trim().parse::<u64>().expect("a number");
    let field = |text: &str, key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .map(number)
            .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
    };
    if m.read("/sys/fs/cgroup/cgroup.controllers").is_some() {
        let d = format!("/sys/fs/cgroup{cg}");
        let cpu = field(&read(format!("{d}/cpu.stat")), "usage_usec") * 1000;
        let current = number(&read(format!("{d}/memory.current")));
        let inactive = field(&read(format!("{d}/memory.stat")), "inactive_file");
        (cpu, current.saturating_sub(inactive))
    } else {
        // Hybrid: CPU time in the v2 tree (there whether or not a controller is on).
        let cpu = field(
            &read(format!("/sys/fs/cgroup/unified{cg}/cpu.stat")),
            "usage_usec",
        ) * 1000;
        let d = format!("/sys/fs/cgroup/memory{cg}");
        let usage = number(&read(format!("{d}/memory.usage_in_bytes")));
        let inactive = field(&read(format!("{d}/memory.stat")), "total_inactive_file");
        (cpu, usage.saturating_sub(inactive))
    }
}

#[test]
fn logs_stats_and_auth_through_a_real_apiserver() {
    let m = Machine::boot("kubelet-api");
    // On a cgroup v1 host, systemd keeps CPU time (cpuacct) only with CPU accounting on, which
    // is its default on v2 alone.
    if m.read("/sys/fs/cgroup/cgroup.controllers").is_none() {
        m.write(
            "/etc/systemd/system.conf.d/podunit-cpu-accounting.conf",
            b"[Manager]\nDefaultCPUAccounting=yes\n",
        );
        m.sh_ok("systemctl daemon-reexec");
    }
    let cp = ControlPlane::start(&m, NODE);
    start_sync(&m);

    // The Node reports the port the API server dials.
    m.wait_for("daemonEndpoints on the Node", SOON, || {
        let port = kubectl(
            &cp,
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}",
            ],
        )
        .ok()?;
        (port.trim() == PORT.to_string()).then_some(())
    });

    m.sh_ok("rm -f /srv/probe/go");
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&pod_yaml(
            "talker",
            "Always",
            "echo one; echo two; echo three; while [ ! -e /srv/probe/go ]; do sleep 0.2; done; \
             echo appended; exec sleep 100000",
        )),
    );
    wait_state(&m, &ctr_unit("default", "talker", "main"), &["active"]);

    // Plain, --tail, --timestamps: what the container wrote, through the API server.
    let plain = m.wait_for("kubectl logs talker", SOON, || {
        kubectl(&cp, &["logs", "talker"])
            .ok()
            .filter(|s| s.lines().count() == 3)
    });
    assert_eq!(plain, "one\ntwo\nthree\n");
    assert_eq!(
        kubectl(&cp, &["logs", "talker", "--tail=1"]).unwrap(),
        "three\n"
    );
    assert_eq!(
        kubectl(&cp, &["logs", "talker", "-c", "main", "--limit-bytes=6"]).unwrap(),
        "one\ntw"
    );
    let stamped = kubectl(&cp, &["logs", "talker", "--timestamps"]).unwrap();
    let lines: Vec<&str> = stamped.lines().collect();
    assert_eq!(lines.len(), 3, "{stamped}");
    for (l, want) in lines.iter().zip(["one", "two", "three"]) {
        let (ts, msg) = l.split_once(' ').unwrap();
        assert_eq!(msg, want);
        assert!(
            ts.len() >= 20 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
            "not an RFC 3339 time: {ts}"
        );
    }
    // sinceTime after every line: nothing.
    let later = "2100-01-01T00:00:00Z";
    assert_eq!(
        kubectl(&cp, &["logs", "talker", &format!("--since-time={later}")]).unwrap(),
        ""
    );
    let missing = kubectl(&cp, &["logs", "nosuchpod"]).unwrap_err();
    assert!(missing.contains("not found"), "{missing}");

    // -f: a line written while following arrives; the stream ends when kubectl goes away.
    let mut follow = cp
        .kubectl()
        .args(["logs", "-f", "talker"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let next = || rx.recv_timeout(SOON).expect("a followed line");
    assert_eq!([next(), next(), next()], ["one", "two", "three"]);
    m.sh_ok("touch /srv/probe/go");
    assert_eq!(next(), "appended");
    let _ = follow.kill();
    let _ = follow.wait();
    // The API server hangs up on the node when its client goes away: the node closes its end
    // (a connection it kept serving would stay in CLOSE-WAIT).
    m.wait_for("the followed stream closed by the node", SOON, || {
        let out = in_machine_net(&m, "ss")
            .args(["-Htn", "state", "close-wait", "sport", "=", ":10250"])
            .output()
            .unwrap();
        (out.status.success() && out.stdout.is_empty()).then_some(())
    });

    // /stats/summary and /metrics/resource, checked against the cgroup's own numbers read
    // before and after (CPU time only grows; a sleeping shell's memory barely moves).
    let unit = ctr_unit("default", "talker", "main");
    let before = cgroup_numbers(&m, &unit);
    let raw = cp.kubectl_ok(
        &[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{NODE}/proxy/stats/summary"),
        ],
        None,
    );
    let metrics = cp.kubectl_ok(
        &[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{NODE}/proxy/metrics/resource"),
        ],
        None,
    );
    let after = cgroup_numbers(&m, &unit);
    let summary: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(summary["node"]["nodeName"], NODE);
    let pod = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "talker")
        .unwrap_or_else(|| panic!("talker not in the summary: {raw}"));
    let ctr = &pod["containers"][0];
    assert_eq!(ctr["name"], "main");
    let cpu = ctr["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap();
    assert!(
        before.0 <= cpu && cpu <= after.0,
        "cpu {cpu} not within the cgroup's {} .. {}",
        before.0,
        after.0
    );
    let ws = ctr["memory"]["workingSetBytes"].as_u64().unwrap();
    let (lo, hi) = (before.1.min(after.1), before.1.max(after.1));
    let slack = 256 * 1024;
    assert!(
        lo.saturating_sub(slack) <= ws && ws <= hi + slack,
        "working set {ws} not near the cgroup's {lo} .. {hi}"
    );
    assert!(pod["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() >= cpu);
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with(
                "container_cpu_usage_seconds_total{container=\"main\",namespace=\"default\",pod=\"talker\"} ",
            )
        })
        .unwrap_or_else(|| panic!("no container_cpu_usage_seconds_total for talker:\n{metrics}"));
    let secs: f64 = line.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(
        before.0 as f64 / 1e9 - 1e-9 <= secs && secs <= after.0 as f64 / 1e9 + 1e-9,
        "{line}"
    );
    assert!(metrics.contains("# TYPE container_memory_working_set_bytes gauge\n"));
    assert!(metrics.contains("\nnode_memory_working_set_bytes "));

    // --previous: the run before the current one.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&pod_yaml(
            "crasher",
            "Always",
            "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 1; exit 3",
        )),
    );
    let current = m.wait_for("crasher restarted", Duration::from_secs(120), || {
        let restarts = kubectl(
            &cp,
            &[
                "get",
                "pod",
                "crasher",
                "-o",
                "jsonpath={.status.containerStatuses[0].restartCount}",
            ],
        )
        .ok()?;
        if restarts.trim().parse::<u32>().ok()? < 1 {
            return None;
        }
        kubectl(&cp, &["logs", "crasher"])
            .ok()
            .filter(|s| s.starts_with("run-"))
    });
    let previous = kubectl(&cp, &["logs", "crasher", "--previous"]).unwrap();
    assert!(
        previous.starts_with("run-") && previous.lines().count() == 1,
        "{previous}"
    );
    assert_ne!(previous, current, "--previous shows the current run");

    // Authentication and authorisation at the node's port.
    assert_eq!(status_of(&m, "/pods", &[]), "401", "anonymous");
    let (fcrt, fkey) = cp.foreign_client_cert("podunit-test-admin");
    let foreign = cert_args(&fcrt, &fkey);
    let foreign: Vec<&str> = foreign.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        status_of(&m, "/pods", &foreign),
        "401",
        "a certificate from another CA"
    );
    assert_eq!(
        status_of(
            &m,
            "/pods",
            &["-H", "Authorization: Bearer forged.token.value"]
        ),
        "401",
        "a forged token"
    );
    let (ncrt, nkey) = cp.client_cert("nobody", "nobody", "");
    let nobody = cert_args(&ncrt, &nkey);
    let nobody: Vec<&str> = nobody.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        status_of(&m, "/pods", &nobody),
        "403",
        "a user without RBAC"
    );
    assert_eq!(status_of(&m, "/stats/summary", &nobody), "403");
    // A real token (TokenReview) of a service account without rights, then with them.
    let token = cp.kubectl_ok(&["create", "token", "default"], None);
    let bearer = format!("Authorization: Bearer {}", token.trim());
    assert_eq!(status_of(&m, "/healthz", &["-H", &bearer]), "403");
    cp.kubectl_ok(
        &[
            "create",
            "clusterrolebinding",
            "sa-kubelet-stats",
            "--clusterrole=system:kubelet-api-admin",
            "--serviceaccount=default:default",
        ],
        None,
    );
    // A denial is cached for 30 s, as the kubelet's webhook authorizer does.
    m.wait_for(
        "the bound service account allowed",
        Duration::from_secs(90),
        || (status_of(&m, "/healthz", &["-H", &bearer]) == "200").then_some(()),
    );
    let (acrt, akey) = cp.client_cert("kubelet-admin", "kubelet-admin", "system:masters");
    let admin = cert_args(&acrt, &akey);
    let admin: Vec<&str> = admin.iter().map(|s| s.as_str()).collect();
    assert_eq!(status_of(&m, "/pods", &admin), "200");
    assert_eq!(status_of(&m, "/nosuch", &admin), "404");
}

/// Whether a process with `exec-flood` in its command line runs in the machine (the pattern is
/// written so that it does not match the grep itself; the machine has no pgrep).
fn flood_running(m: &Machine) -> bool {
    m.sh("grep -qs 'exec-floo[d]' /proc/[0-9]*/cmdline")
        .status
        .success()
}

fn shell_pod(name: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 2,
            "securityContext": {"runAsUser": 1234},
            "containers": [{"name": "main", "image": "host",
                "env": [{"name": "MARK", "value": "from-the-pod"}],
                "command": ["/bin/sh", "-c", "exec sleep 100000"]}]}})
    .to_string()
}

/// A command printing each of its arguments in brackets, with arguments that a shell or systemd
/// would change, and what it must print.
fn exact_args() -> (Vec<&'static str>, String) {
    let args = [
        "a$$b",
        "$HOME",
        "${MARK}",
        "$(MARK)",
        "$$(MARK)",
        "%n",
        "100%%",
        "back\\slash",
        "",
        "'\"",
        "two\nlines",
        "-n",
    ];
    let printed = args.iter().map(|a| format!("[{a}]\n")).collect();
    let mut argv = vec!["printf", "[%s]\\n"];
    argv.extend(args);
    (argv, printed)
}

#[test]
fn exec_locally_and_through_a_real_apiserver() {
    let m = Machine::boot("kubelet-exec");
    let cp = ControlPlane::start(&m, NODE);
    start_sync(&m);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&shell_pod("shell")));
    wait_state(&m, &ctr_unit("default", "shell", "main"), &["active"]);

    // `podunit exec` on the node: the container's user, environment and mount namespace, the
    // command's stdout, stderr and exit code.
    let script = "echo out; echo err >&2; id -u; echo $MARK; exit 3";
    let out = m.exec(&["podunit", "exec", "shell", "--", "sh", "-c", script]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "err\n",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "out\n1234\nfrom-the-pod\n"
    );
    assert_eq!(out.status.code(), Some(3));
    // The command gets its arguments exactly, as the kubelet passes them to the runtime: systemd
    // expands none of `$$`, `${VAR}`, a lone `$VAR` or `%` on the way, and drops no empty one.
    let (exact, printed) = exact_args();
    let mut argv = vec!["podunit", "exec", "shell", "--"];
    argv.extend(exact.iter().copied());
    let out = m.exec(&argv);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        printed,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let main_mnt = m.sh_ok(&format!(
        "readlink /proc/{}/ns/mnt",
        container_pid(&m, &ctr_unit("default", "shell", "main"))
    ));
    let exec_mnt = m.sh_ok("podunit exec shell -- readlink /proc/self/ns/mnt");
    assert_eq!(exec_mnt, main_mnt, "the container's mount namespace");
    // -i passes stdin; without it the command's stdin is empty.
    assert_eq!(
        m.sh_ok("echo piped | podunit exec -i shell -c main -- cat"),
        "piped\n"
    );
    assert_eq!(m.sh_ok("echo piped | podunit exec shell -- cat"), "");
    let bad = m.sh("podunit exec nosuch -- true");
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("pod nosuch not found"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let bad = m.sh("podunit exec shell -c nope -- true");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("container nope is not in pod default/shell"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    // `kubectl exec` through the API server: WebSocket (v5.channel.k8s.io) to the node's kubelet
    // port, kubectl's default (tests/kubelet_e2e/websocket.rs proves which was spoken), and SPDY
    // where said.
    let out = cp
        .kubectl()
        .args([
            "exec",
            "shell",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    // kubectl 1.32's WebSocket client reads messages while it still sets up its streams and may
    // log that it dropped the node's first, empty one (the kubelet's and the API server's
    // "connection established"; client-go fixed the race later): not the command's output.
    let stderr: String = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains("Unknown stream id"))
        .map(|l| format!("{l}\n"))
        .collect();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "out\n", "stderr: {stderr}");
    assert!(stderr.starts_with("err\n"), "{stderr}");
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(
        kubectl(
            &cp,
            &[
                "exec",
                "shell",
                "-c",
                "main",
                "--",
                "sh",
                "-c",
                "id -u; echo $MARK"
            ]
        )
        .unwrap(),
        "1234\nfrom-the-pod\n"
    );
    for spdy in [false, true] {
        let mut k = cp.kubectl();
        if spdy {
            k.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");
        }
        let out = k
            .args(["exec", "shell", "--"])
            .args(&exact)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            printed,
            "spdy {spdy}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // -i: stdin through, to its end (WebSocket: v5's close signal; SPDY: the stream's FIN).
    for spdy in [false, true] {
        let mut k = cp.kubectl();
        if spdy {
            k.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");
        }
        let mut cat = k
            .args(["exec", "-i", "shell", "--", "sh", "-c", "cat; echo end"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let big: String = (0..20000).map(|i| format!("line {i}\n")).collect();
        let feed = {
            let mut w = cat.stdin.take().unwrap();
            let big = big.clone();
            std::thread::spawn(move || std::io::Write::write_all(&mut w, big.as_bytes()))
        };
        let out = cat.wait_with_output().unwrap();
        feed.join().unwrap().unwrap();
        assert!(
            out.status.success(),
            "spdy {spdy}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{big}end\n"),
            "spdy {spdy}"
        );
    }

    // The gate: exec is nodes/proxy `create`; a user without it is refused.
    let (ncrt, nkey) = cp.client_cert("nobody", "nobody", "");
    let nobody = cert_args(&ncrt, &nkey);
    let mut args: Vec<&str> = nobody.iter().map(|s| s.as_str()).collect();
    args.extend(["-X", "POST"]);
    assert_eq!(
        status_of(&m, "/exec/default/shell/main?command=true&stdout=1", &args),
        "403"
    );
    assert_eq!(
        status_of(
            &m,
            "/exec/default/shell/main?command=true&stdout=1",
            &["-X", "POST"]
        ),
        "401"
    );

    // -t: a terminal of the command's own, of the caller's size (util-linux `script` gives
    // kubectl and podunit a terminal to start from).
    let k = cp.kubectl();
    let quote = |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy());
    let mut line = quote(k.get_program());
    for a in k.get_args() {
        line.push(' ');
        line.push_str(&quote(a));
    }
    let tty_script = "tty; stty size; exit 4";
    for env in ["", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false "] {
        let out = Command::new("script")
            .args([
                "-qec",
                &format!(
                    "stty cols 100 rows 30; {env}{line} exec -it shell -- sh -c '{tty_script}'"
                ),
                "/dev/null",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("/dev/pts/"), "{env}{text}");
        assert!(text.contains("30 100"), "{env}{text}");
        assert_eq!(out.status.code(), Some(4), "{env}{text}");
    }
    let local = m.sh(&format!(
        "script -qec \"stty cols 90 rows 20; podunit exec -it shell -- sh -c '{tty_script}'\" /dev/null"
    ));
    let text = String::from_utf8_lossy(&local.stdout);
    assert!(text.contains("/dev/pts/"), "{text}");
    assert!(text.contains("20 90"), "{text}");
    assert_eq!(local.status.code(), Some(4), "{text}");

    // A client that never reads its output holds up nobody else; when it goes, so does the
    // command.
    let mut stuck = cp
        .kubectl()
        .args(["exec", "shell", "--", "sh", "-c", "exec yes exec-flood"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    m.wait_for("the flooding command running", SOON, || {
        flood_running(&m).then_some(())
    });
    assert_eq!(
        kubectl(&cp, &["exec", "shell", "--", "echo", "still-served"]).unwrap(),
        "still-served\n"
    );
    let _ = stuck.kill();
    let _ = stuck.wait();
    m.wait_for("the flooding command gone with its client", SOON, || {
        (!flood_running(&m)).then_some(())
    });
}

/// A pod answering each connection on 127.0.0.1:8089 with `pong:` and the line it read, then
/// closing it.
fn pong_pod(name: &str) -> String {
    let script = "exec perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => \
        \"127.0.0.1\", LocalPort => 8089, Listen => 8, ReuseAddr => 1) or die \"listen: $!\"; \
        $| = 1; print \"listening\\n\"; while ($c = $s->accept) { $l = <$c>; \
        print $c \"pong:$l\"; close $c }'";
    pod_yaml(name, "Always", script)
}

/// Lines of `r` as they come, on a channel.
fn lines_of(r: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// The first line from `rx` that contains `what`; else why not, with every line seen.
fn next_line(rx: &mpsc::Receiver<String>, what: &str) -> Result<String, String> {
    let mut seen = String::new();
    loop {
        match rx.recv_timeout(SOON) {
            Ok(l) if l.contains(what) => return Ok(l),
            Ok(l) => {
                seen.push_str(&l);
                seen.push('\n');
            }
            Err(e) => return Err(format!("no line with {what:?} ({e}); saw:\n{seen}")),
        }
    }
}

fn wait_line(rx: &mpsc::Receiver<String>, what: &str) -> String {
    next_line(rx, what).unwrap_or_else(|e| panic!("{e}"))
}

/// Sends one line through a forwarded local port in the machine's network (where kubectl runs)
/// and reads the answer to its end.
fn through(m: &Machine, local: u16, line: &str) -> std::io::Result<String> {
    use std::io::Write;
    let client = "$s = IO::Socket::INET->new(PeerAddr => \"127.0.0.1:$ARGV[0]\") or die \
        \"connect: $!\\n\"; local $/; $in = <STDIN>; print $s $in; print while <$s>";
    let mut c = in_machine_net(m, "perl")
        .args(["-MIO::Socket::INET", "-e", client, &local.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut w = c.stdin.take().expect("piped");
    w.write_all(line.as_bytes())?;
    w.write_all(b"\n")?;
    drop(w);
    let out = c.wait_with_output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `kubectl port-forward pod/pong 18089:8089 18090:8090` (see [`pong_pod`]): three connections
/// through the one session come back byte for byte (one of 110 KB each way), and 18090, where
/// nothing listens, gives kubectl's error with the node's connection-refused reason (after which
/// kubectl ends the session); `between` runs before that. Returns kubectl; a failure shows
/// kubectl's errors and `diagnostics()`.
fn forward_pong(
    m: &Machine,
    cp: &ControlPlane,
    diagnostics: &dyn Fn() -> String,
    between: &dyn Fn(),
) -> Child {
    let mut pf = cp
        .kubectl()
        .args(["port-forward", "pod/pong", "18089:8089", "18090:8090"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = lines_of(pf.stdout.take().unwrap());
    let err = lines_of(pf.stderr.take().unwrap());
    let failed = |e: String| -> ! {
        std::thread::sleep(Duration::from_secs(1));
        let rest: Vec<String> = err.try_iter().collect();
        panic!(
            "{e}\nkubectl port-forward: {}\n{}",
            rest.join("\n"),
            diagnostics()
        )
    };
    if let Err(e) = next_line(&out, "Forwarding from 127.0.0.1:18090") {
        failed(e);
    }
    let fetch = |line: &str| {
        let got = through(m, 18089, line).unwrap_or_else(|e| failed(e.to_string()));
        if got != format!("pong:{line}\n") {
            failed(format!("sent {} bytes, got back {got:?}", line.len()));
        }
    };
    fetch("hello");
    fetch(&(0..20000).map(|i| format!("{i},")).collect::<String>());
    fetch("again");
    between();
    // A port nothing listens on: the node's reason, as kubectl prints it.
    let refused = through(m, 18090, "hi");
    assert!(
        matches!(&refused, Ok(s) if s.is_empty()) || refused.is_err(),
        "{refused:?}"
    );
    let line =
        next_line(&err, "an error occurred forwarding 18090 -> 8090").unwrap_or_else(|e| failed(e));
    assert!(
        line.contains("error forwarding port 8090 to pod default/pong, uid ")
            && line.contains("failed to connect to localhost:8090 in the pod's network")
            && line.contains("onnection refused"),
        "{line}"
    );
    pf
}

#[test]
fn port_forward_and_attach_through_a_real_apiserver() {
    let m = Machine::boot("kubelet-pfwd");
    let cp = ControlPlane::start(&m, NODE);
    start_sync(&m);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&pong_pod("pong")));
    let ticker = "i=0; while :; do echo tick-$i; i=$((i+1)); sleep 0.2; done";
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&pod_yaml("ticker", "Always", ticker)),
    );
    wait_state(&m, &ctr_unit("default", "pong", "main"), &["active"]);
    m.wait_for("the pod listening", SOON, || {
        kubectl(&cp, &["logs", "pong"])
            .is_ok_and(|l| l.contains("listening"))
            .then_some(())
    });

    m.wait_for("the pod Running", SOON, || {
        kubectl(
            &cp,
            &["get", "pod", "pong", "-o", "jsonpath={.status.phase}"],
        )
        .is_ok_and(|p| p == "Running")
        .then_some(())
    });
    // port-forward: one session, a connection per fetch, the bytes both ways whole.
    let mut pf = forward_pong(&m, &cp, &String::new, &|| {});
    let _ = pf.kill();
    let _ = pf.wait();

    // The gate: port-forward is nodes/proxy `create`.
    let (ncrt, nkey) = cp.client_cert("nobody", "nobody", "");
    let nobody = cert_args(&ncrt, &nkey);
    let mut args: Vec<&str> = nobody.iter().map(|s| s.as_str()).collect();
    args.extend(["-X", "POST"]);
    assert_eq!(status_of(&m, "/portForward/default/pong", &args), "403");
    assert_eq!(
        status_of(&m, "/attach/default/ticker/main?stdout=1", &args),
        "403"
    );
    assert_eq!(
        status_of(&m, "/portForward/default/pong", &["-X", "POST"]),
        "401"
    );

    // attach: the lines written from now on, in order, until the container's run ends.
    let unit = ctr_unit("default", "ticker", "main");
    wait_state(&m, &unit, &["active"]);
    let tick = |l: &str| -> u64 {
        l.trim()
            .strip_prefix("tick-")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a tick: {l:?}"))
    };
    let logged = m.wait_for("the ticker logging", SOON, || {
        kubectl(&cp, &["logs", "ticker", "--tail=1"])
            .ok()
            .filter(|l| l.starts_with("tick-"))
    });
    let before = tick(&logged);
    let mut at = cp
        .kubectl()
        .args(["attach", "ticker", "-c", "main"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let seen = lines_of(at.stdout.take().unwrap());
    let at_err = lines_of(at.stderr.take().unwrap());
    let first = next_line(&seen, "tick-").unwrap_or_else(|e| {
        let rest: Vec<String> = at_err.try_iter().collect();
        panic!(
            "{e}\nkubectl attach: {}\n{}",
            rest.join("\n"),
            m.sh("journalctl -u podunit-sync --no-pager | tail -n 30")
                .stdout
                .escape_ascii()
        )
    });
    let first = tick(&first);
    assert!(
        first > before,
        "attach began at {first}, before it {before}"
    );
    for n in first + 1..first + 5 {
        assert_eq!(tick(&wait_line(&seen, "tick-")), n);
    }
    // The run ends: so does the attach, successfully.
    m.sh_ok(&format!("systemctl kill -s KILL --kill-who=main {unit}"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(at.wait());
    });
    let status = rx.recv_timeout(SOON).expect("attach ends with the run");
    assert!(status.unwrap().success());

    // Stdin: refused with the reason, never connected to nothing.
    let out = cp
        .kubectl()
        .args(["attach", "-i", "ticker"])
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("has no stdin to attach to"), "{stderr}");
    let (acrt, akey) = cp.client_cert("kubelet-admin", "kubelet-admin", "system:masters");
    let at_port = in_machine_net(&m, "curl")
        .args(["-sk", "-X", "POST", "-w", "\n%{http_code}"])
        .args(cert_args(&acrt, &akey))
        .arg(format!(
            "https://127.0.0.1:{PORT}/attach/default/ticker/main?input=1&output=1"
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&at_port.stdout);
    assert!(text.ends_with("\n400"), "{text}");
    let status: Value = serde_json::from_str(text.trim_end_matches("\n400")).unwrap();
    assert_eq!(status["reason"], "BadRequest");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("container main in pod default/ticker has no stdin to attach to"),
        "{status}"
    );
}
