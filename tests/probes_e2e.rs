//! Probes on a real systemd (tests/support/nspawn.rs): readiness drives READY, a failing liveness
//! probe restarts only its container (its preStop hook first, once), exec probes run as the container's user in its mount
//! namespace, with its capabilities (a root container's reduced set too), httpGet and tcpSocket
//! reach a server in the pod. Needs root and systemd-nspawn;
//! fails (never skips) without them.

mod support;

use support::nspawn::Machine;
use support::pods::{SOON, container_pid, ctr_unit, start_sync, wait_state};

const NS: &str = "default";

/// An HTTP server in perl (the test rootfs has no python): `/healthz` answers 200 while
/// /data/ready exists, 503 otherwise; every request line is appended to /data/requests.
const SERVER: &str = r#"use IO::Socket::INET;
my $s = IO::Socket::INET->new(LocalAddr => "0.0.0.0", LocalPort => 18080, Listen => 16, ReuseAddr => 1) or die "listen: $!";
while (my $c = $s->accept) {
  my $req = <$c>;
  next unless defined $req;
  while (my $l = <$c>) { last if $l =~ /^\r?\n$/ }
  open(my $f, ">>", "/data/requests"); print $f $req; close $f;
  my $code = -e "/data/ready" ? "200 OK" : "503 Service Unavailable";
  print $c "HTTP/1.1 $code\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  close $c;
}
"#;

/// The liveness command of `side`: records who and where it runs; fails once per
/// /data/kill-side (which it removes, so the restarted container is healthy again).
const SIDE_LIVENESS: &str = "id -u > /data/exec-uid; readlink /proc/self/ns/mnt > /data/exec-mnt; \
     echo \"$MARK\" > /data/exec-env; \
     if [ -e /data/kill-side ]; then rm -f /data/kill-side; echo side-is-sick; exit 1; fi";

/// The preStop hook of `side`: marks in the container's record of signals that it ran, and when,
/// takes 2 s and fails, which must not stop the kill.
const SIDE_PRE_STOP: &str =
    "echo prestop >> /data/side/signals; date +%s.%N > /data/prestop-at; sleep 2; exit 3";

fn pod() -> String {
    let indent = |s: &str| {
        s.lines()
            .map(|l| format!("        {l}\n"))
            .collect::<String>()
    };
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  terminationGracePeriodSeconds: 5
  volumes:
  - name: data
    hostPath: {{path: /srv/pe, type: Directory}}
  containers:
  - name: server
    image: host
    command:
    - /usr/bin/perl
    - -e
    - |
{server}    volumeMounts: [{{name: data, mountPath: /data}}]
    readinessProbe:
      httpGet: {{path: /healthz, port: 18080}}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      tcpSocket: {{port: 18080}}
      initialDelaySeconds: 2
      periodSeconds: 2
  - name: side
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - {{name: PROBE, value: side}}
    - {{name: PROBE_DIR, value: /data}}
    - {{name: PROBE_THEN, value: term-log}}
    - {{name: MARK, value: from-the-manifest}}
    securityContext:
      runAsUser: 1234
      runAsGroup: 1234
    volumeMounts: [{{name: data, mountPath: /data}}]
    livenessProbe:
      exec:
        command: ["/bin/sh", "-c", {side}]
      periodSeconds: 1
      failureThreshold: 1
    lifecycle:
      preStop:
        exec:
          command: ["/bin/sh", "-c", {pre_stop}]
"#,
        server = indent(SERVER),
        side = serde_json::to_string(SIDE_LIVENESS).unwrap(),
        pre_stop = serde_json::to_string(SIDE_PRE_STOP).unwrap(),
    )
}

/// The READY and RESTARTS columns of `podunit status` for pod `web`.
fn ready_and_restarts(m: &Machine) -> (String, String) {
    let table = m.sh_ok("podunit status");
    let row: Vec<String> = table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("web"))
        .unwrap_or_else(|| panic!("no web row in\n{table}"))
        .split_whitespace()
        .map(String::from)
        .collect();
    (row[2].clone(), row[4].clone())
}

fn requests(m: &Machine) -> usize {
    m.read_string("/srv/pe/requests")
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn readiness_liveness_exec_http_and_tcp_probes() {
    let m = Machine::boot("probes");
    m.sh_ok("mkdir -p /srv/pe && chmod 0777 /srv/pe");
    start_sync(&m);
    m.write("/etc/pods.d/web.yaml", pod().as_bytes());
    m.daemon_reload();
    let server = ctr_unit(NS, "web", "server");
    let side = ctr_unit(NS, "web", "side");
    wait_state(&m, &server, &["active"]);
    wait_state(&m, &side, &["active"]);

    // Readiness fails while /data/ready is missing: the pod shows 1/2 (side has no readiness
    // probe), however often the probe ran.
    m.wait_for("three failed readiness probes", SOON, || {
        (requests(&m) >= 3).then_some(())
    });
    assert_eq!(
        ready_and_restarts(&m).0,
        "1/2",
        "{}\n{}",
        m.sh_ok("podunit status web"),
        m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service -u 'podunit-probe-*' | tail -40")
    );
    let json = m.sh_ok("podunit status -o json");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let web = v
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "web")
        .unwrap();
    let cond = |t: &str| {
        web["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| c["status"].clone())
    };
    assert_eq!(cond("Ready"), Some("False".into()), "{web}");
    assert_eq!(cond("ContainersReady"), Some("False".into()), "{web}");
    let server_status = &web["containerStatuses"][0];
    assert_eq!(server_status["name"], "server");
    assert_eq!(server_status["ready"], false, "{server_status}");
    let requests_seen = m.read_string("/srv/pe/requests").unwrap();
    assert!(
        requests_seen
            .lines()
            .all(|l| l.starts_with("GET /healthz HTTP/1.1")),
        "{requests_seen}"
    );

    // It passes: the pod becomes ready.
    m.sh_ok("touch /srv/pe/ready");
    m.wait_for("web to be 2/2 ready", SOON, || {
        (ready_and_restarts(&m).0 == "2/2").then_some(())
    });

    // The exec probe ran as the container's user, in the container's mount namespace, with the
    // container's environment.
    let side_pid = container_pid(&m, &side);
    m.wait_for("the exec probe to have run", SOON, || {
        m.read_string("/srv/pe/exec-mnt").filter(|s| !s.is_empty())
    });
    assert_eq!(m.read_string("/srv/pe/exec-uid").unwrap().trim(), "1234");
    let container_mnt = m.sh_ok(&format!("readlink /proc/{side_pid}/ns/mnt"));
    let host_mnt = m.sh_ok("readlink /proc/1/ns/mnt");
    assert_eq!(
        m.read_string("/srv/pe/exec-mnt").unwrap().trim(),
        container_mnt.trim()
    );
    assert_ne!(
        container_mnt.trim(),
        host_mnt.trim(),
        "the container has a mount namespace"
    );
    assert_eq!(
        m.read_string("/srv/pe/exec-env").unwrap().trim(),
        "from-the-manifest"
    );

    // A failing liveness probe restarts that container only.
    let server_pid = m.prop(&server, "MainPID");
    m.sh_ok("touch /srv/pe/kill-side");
    m.wait_for("side to be restarted once", SOON, || {
        (m.prop(&side, "NRestarts") == "1" && m.prop(&side, "SubState") == "running").then_some(())
    });
    assert_eq!(
        m.prop(&server, "MainPID"),
        server_pid,
        "server must not restart"
    );
    assert_eq!(m.prop(&server, "NRestarts"), "0");
    // As the kubelet's killContainer: the preStop hook ran first, once (systemd's ExecStop= after
    // the killed process exited did not run it again), SIGTERM came when it ended (it takes 2 s),
    // within the grace period (5 s), and its failure did not stop the kill.
    assert_eq!(
        m.read_string("/srv/pe/side/signals").as_deref(),
        Some("prestop\nterm\n"),
        "preStop once, then SIGTERM\n{}",
        m.sh_ok(&format!(
            "journalctl -b --no-pager -o cat -u {side} -u podunit-sync.service | tail -40"
        ))
    );
    let time = |f: &str| -> f64 {
        let t = m.read_string(f).unwrap_or_else(|| panic!("no {f}"));
        t.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{f}: {t:?}: {e}"))
    };
    let waited = time("/srv/pe/side/term-at") - time("/srv/pe/prestop-at");
    assert!(
        (2.0..5.0).contains(&waited),
        "SIGTERM {waited:.2} s after the preStop hook started"
    );
    m.wait_for("RESTARTS 1 and 2/2 again", SOON, || {
        (ready_and_restarts(&m) == ("2/2".into(), "1".into())).then_some(())
    });

    // The journal has transitions and kills, not a line per probe run.
    let log = m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service");
    let probe_lines: Vec<&str> = log.lines().filter(|l| l.contains(" probe ")).collect();
    assert!(
        log.contains("Container side failed liveness probe, will be restarted"),
        "{log}"
    );
    assert!(
        log.contains(
            "container side: FailedPreStopHook: Exec lifecycle hook ([/bin/sh -c echo prestop"
        ) && log.contains("exited with 3: , message: \"\""),
        "{log}"
    );
    assert!(
        probe_lines.len() <= 6,
        "{} probe lines for {} probe runs:\n{}",
        probe_lines.len(),
        requests(&m),
        probe_lines.join("\n")
    );
    assert_eq!(
        m.sh_ok("systemctl list-units --failed --plain --no-legend 'podunit-*'"),
        ""
    );
}

/// A plain root container (the default sandbox: the Kubernetes default capabilities, fewer than
/// the manager has) whose exec readiness probe records the capability sets it runs with.
const ROOT_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: rooted
spec:
  terminationGracePeriodSeconds: 2
  volumes:
  - name: data
    hostPath: {path: /srv/pr, type: Directory}
  containers:
  - name: main
    image: host
    command: ["/bin/sleep", "infinity"]
    volumeMounts: [{name: data, mountPath: /data}]
    readinessProbe:
      exec:
        command: ["/bin/sh", "-c", "grep ^Cap /proc/self/status > /data/caps.new && mv /data/caps.new /data/caps"]
      periodSeconds: 1
"#;

#[test]
fn exec_probe_enters_a_root_container_with_its_capabilities() {
    let m = Machine::boot("probes-root");
    m.sh_ok("mkdir -p /srv/pr");
    start_sync(&m);
    m.write("/etc/pods.d/rooted.yaml", ROOT_POD.as_bytes());
    m.daemon_reload();
    let main = ctr_unit(NS, "rooted", "main");
    wait_state(&m, &main, &["active"]);
    m.wait_for("the root pod to be 1/1 ready", SOON, || {
        let table = m.sh_ok("podunit status");
        table
            .lines()
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(1) == Some(&"rooted") && f.get(2) == Some(&"1/1")
            })
            .then_some(())
    });
    let pid = container_pid(&m, &main);
    let caps = |status: &str| -> Vec<String> {
        status
            .lines()
            .filter(|l| l.starts_with("Cap"))
            .map(String::from)
            .collect()
    };
    let container = caps(&m.sh_ok(&format!("cat /proc/{pid}/status")));
    let manager = caps(&m.sh_ok("cat /proc/1/status"));
    let probe = caps(&m.read_string("/srv/pr/caps").unwrap());
    assert_eq!(container.len(), 5, "{container:?}");
    assert_eq!(
        probe, container,
        "the probe has exactly the container's sets"
    );
    let eff = |v: &[String]| v.iter().find(|l| l.starts_with("CapEff")).cloned();
    assert_ne!(
        eff(&container),
        eff(&manager),
        "the container's capabilities are reduced"
    );
    assert_eq!(
        m.sh_ok("systemctl list-units --failed --plain --no-legend 'podunit-*'"),
        ""
    );
}

/// Lifecycle hooks of type httpGet and sleep (`podunit hook`, on the probes' HTTP client): the
/// postStart GET reaches the pod's server before the container counts as started; a postStart
/// that gets no answer kills its container, which restarts; a preStop GET is sent when the
/// container is stopped, not when its main process dies on its own; a preStop sleep runs.
const HOOKS_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: hooks
spec:
  terminationGracePeriodSeconds: 5
  volumes:
  - name: data
    hostPath: {path: /srv/hk, type: Directory}
  containers:
  - name: server
    image: host
    command: [/usr/bin/perl, -e, SERVER]
    volumeMounts: [{name: data, mountPath: /data}]
  - name: app
    image: host
    command: [/bin/sleep, infinity]
    ports: [{name: web, containerPort: 18080}]
    lifecycle:
      postStart:
        httpGet: {path: "/started?x=%n$HOME", port: web, host: 127.0.0.1, httpHeaders: [{name: X-Hook, value: "a b"}]}
      preStop:
        httpGet: {path: /stopping, port: 18080, host: 127.0.0.1}
  - name: napper
    image: host
    command: [/bin/sleep, infinity]
    lifecycle:
      preStop: {sleep: {seconds: 1}}
  - name: bad
    image: host
    command: [/bin/sleep, infinity]
    lifecycle:
      postStart:
        httpGet: {path: /nobody, port: 18099, host: 127.0.0.1}
"#;

#[test]
fn lifecycle_http_and_sleep_hooks() {
    let m = Machine::boot("hooks");
    m.sh_ok("mkdir -p /srv/hk && chmod 0777 /srv/hk");
    // The probes' server, also keeping every header line in /data/headers.
    let server = SERVER.replace(
        r#"last if $l =~ /^\r?\n$/ }"#,
        r#"last if $l =~ /^\r?\n$/; open(my $g, ">>", "/data/headers"); print $g $l; close $g }"#,
    );
    assert_ne!(server, SERVER);
    let pod = HOOKS_POD.replace("SERVER", &support::pods::yaml_str(&server));
    m.write("/etc/pods.d/hooks.yaml", pod.as_bytes());
    support::pods::start_pods(&m);
    let requests = || m.read_string("/srv/hk/requests").unwrap_or_default();
    let app = ctr_unit(NS, "hooks", "app");
    let bad = ctr_unit(NS, "hooks", "bad");
    let napper = ctr_unit(NS, "hooks", "napper");
    wait_state(&m, &ctr_unit(NS, "hooks", "server"), &["active"]);
    // The server may start after app's hook ran: then app restarts until its hook is answered.
    m.wait_for("app's postStart GET", SOON, || {
        requests()
            .lines()
            .any(|l| l.starts_with("GET /started?x=%n$HOME HTTP/1.1"))
            .then_some(())
    });
    wait_state(&m, &app, &["active"]);

    // Nobody answers bad's postStart: its start fails (systemd keeps the hook's exit status
    // until the restart resets it), and systemd restarts it.
    let post = m.wait_for("bad's postStart to fail", SOON, || {
        let p = m.prop(&bad, "ExecStartPost");
        (p.contains("code=exited") && p.contains("status=1")).then_some(p)
    });
    eprintln!("ExecStartPost of bad: {post}");
    m.wait_for(
        "bad to be restarted after its failed postStart",
        SOON,
        || (m.prop(&bad, "NRestarts").parse::<u32>().unwrap_or(0) >= 1).then_some(()),
    );
    assert!(
        m.sh_ok(&format!("journalctl -b --no-pager -o cat -u {bad}"))
            .contains("podunit hook: Get \"http://127.0.0.1:18099/nobody\": "),
    );

    // app's main process dies on its own: preStop does not run (the kubelet's rule), the
    // container restarts.
    let before = requests().lines().count();
    let pid = m.prop(&app, "MainPID");
    m.sh_ok(&format!("kill -KILL {pid}"));
    m.wait_for("app to be restarted", SOON, || {
        (m.prop(&app, "NRestarts").parse::<u32>().unwrap_or(0) >= 1
            && m.prop(&app, "ActiveState") == "active")
            .then_some(())
    });
    assert!(
        !requests().contains("GET /stopping"),
        "preStop ran after a crash:\n{}",
        requests()
    );
    assert!(requests().lines().count() > before, "postStart ran again");

    // Stopped: the preStop GET is sent; napper's preStop sleep runs and succeeds.
    m.sh_ok(&format!("systemctl stop {app} {napper}"));
    assert!(
        requests().contains("GET /stopping HTTP/1.1"),
        "{}",
        requests()
    );
    let stop = m.prop(&napper, "ExecStop");
    eprintln!("ExecStop of napper: {stop}");
    assert!(
        stop.contains("code=exited") && stop.contains("status=0"),
        "{stop}"
    );
    // (Header names are case-insensitive; the client sends them in lower case.)
    let headers = m
        .read_string("/srv/hk/headers")
        .unwrap_or_default()
        .to_lowercase();
    assert!(headers.contains("x-hook: a b\r\n"), "{headers}");
    assert!(
        headers.contains("user-agent: kube-lifecycle/1.33\r\n"),
        "{headers}"
    );
}

/// A postStart that fails once, then succeeds in the restarted container, and an exec preStop
/// that fails when the container is stopped, whose unit is then reset (unloaded): systemd's own
/// record of the runs has only the last run, and none once the unit is gone, but the journal
/// keeps both failures, which is where podunit-sync's hook events come from however late it
/// looks (`podunit::kube::hook_events`).
const ONCE_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: once
spec:
  terminationGracePeriodSeconds: 5
  volumes:
  - name: data
    hostPath: {path: /srv/once, type: Directory}
  containers:
  - name: app
    image: host
    command: [/bin/sleep, infinity]
    volumeMounts: [{name: data, mountPath: /data}]
    lifecycle:
      postStart:
        exec: {command: [/bin/sh, -c, "test -e /data/ran || { touch /data/ran; exit 1; }"]}
      preStop:
        exec: {command: [/bin/sh, -c, "exit 3"]}
"#;

#[test]
fn failed_hooks_stay_in_the_journal() {
    use podunit::kube::hook_events::{self, Exit, HookExit};
    use podunit::probe::hook::Stage;
    let m = Machine::boot("hooks-journal");
    m.sh_ok("mkdir -p /srv/once && chmod 0777 /srv/once");
    m.write("/etc/pods.d/once.yaml", ONCE_POD.as_bytes());
    support::pods::start_pods(&m);
    let app = ctr_unit(NS, "once", "app");
    m.wait_for("app restarted after its failed postStart", SOON, || {
        (m.prop(&app, "NRestarts").parse::<u32>().unwrap_or(0) >= 1
            && m.prop(&app, "ActiveState") == "active")
            .then_some(())
    });
    // systemd's exec status shows only the run that succeeded.
    let post = m.prop(&app, "ExecStartPost");
    assert!(post.contains("status=0"), "{post}");
    // systemd's own record of each hook run that failed, read here without podunit's code:
    // PID 1's "process exited" entries (SD_MESSAGE_UNIT_PROCESS_EXIT, sd-messages.h) for the
    // unit, as (COMMAND, EXIT_CODE, EXIT_STATUS); a successful run is only logged at debug level.
    let journal = || -> Vec<(String, String, String, String)> {
        m.sh_ok(&format!(
            "journalctl --no-pager -o json _PID=1 \
             MESSAGE_ID=98e322203f7a4ed290d09fe03c09fe15 UNIT={app}"
        ))
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let f = |k: &str| {
                v[k].as_str()
                    .unwrap_or_else(|| panic!("{k} in {l}"))
                    .to_string()
            };
            (
                f("COMMAND"),
                f("EXIT_CODE"),
                f("EXIT_STATUS"),
                f("__CURSOR"),
            )
        })
        .collect()
    };
    let runs = |j: &[(String, String, String, String)]| -> Vec<(String, String, String)> {
        j.iter()
            .map(|(c, code, st, _)| (c.clone(), code.clone(), st.clone()))
            .collect()
    };
    let own = |c: &str, code: &str, st: &str| (c.to_string(), code.to_string(), st.to_string());
    // The hooks' entries; the main process's own are checked apart: `sleep`, PID 1 of its
    // namespace with no SIGTERM handler, ignores the SIGTERM of each stop and ends by SIGKILL
    // after the grace period, as under a kubelet (137).
    let hooks = |j: Vec<(String, String, String, String)>| {
        let (main, hooks): (Vec<_>, Vec<_>) = j.into_iter().partition(|e| e.0 == "ExecStart");
        for e in &main {
            assert_eq!((e.1.as_str(), e.2.as_str()), ("killed", "9"), "{e:?}");
        }
        hooks
    };
    let seen = hooks(journal());
    assert_eq!(runs(&seen), [own("ExecStartPost", "exited", "1")]);
    // podunit's reading of the same journal (what it posts as hook events) agrees.
    let after = |cursor: Option<&str>| {
        let args = hook_events::journal_args(std::slice::from_ref(&app), cursor, 0);
        let mut script = "journalctl".to_string();
        for a in &args {
            script.push_str(&format!(" '{a}'"));
        }
        hook_events::parse_journal(&m.sh_ok(&script))
    };
    let got = after(None);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].stage, &got[0].exit, &got[0].unit, &got[0].cursor),
        (Stage::PostStart, &Exit::Status(1), &app, &seen[0].3)
    );

    // Stopped, failed (its preStop exited 3) and reset: systemd forgets the unit.
    m.systemctl(&["stop", &app]);
    m.systemctl(&["reset-failed", &app]);
    let seen = m.wait_for("the preStop failure in the journal", SOON, || {
        let j = hooks(journal());
        (j.len() == 2).then_some(j)
    });
    assert_eq!(
        runs(&seen),
        [
            own("ExecStartPost", "exited", "1"),
            own("ExecStop", "exited", "3")
        ]
    );
    let got: Vec<HookExit> = after(None);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        (got[1].stage, &got[1].exit, &got[1].cursor),
        (Stage::PreStop, &Exit::Status(3), &seen[1].3)
    );
    // A look after the last cursor finds nothing new.
    assert!(after(Some(&got[1].cursor)).is_empty());
}
