//! Real systemd, end to end: every test boots its own throwaway machine
//! (tests/support/nspawn.rs), drops manifests into it and asserts on what really ran, as recorded by
//! the probe (tests/machine/probe.sh) or seen in the machine's unit states and files.
//!
//! Needs root and systemd-nspawn; fails (never skips) without them. Run: `make test-e2e`.

mod support;

use std::time::Duration;

use support::nspawn::Machine;
use support::pods::{
    Probe, SOON, ctr_unit, failed_podunit_units, known_units, pod_slice, pod_unit, start_pods,
    wait_state, yaml_str,
};

const NS: &str = "default";
/// Restarts wait for RestartSec= between attempts, possibly growing: allow several of them.
const RESTARTS: Duration = Duration::from_secs(180);

/// A pod with one probe container: `PROBE=<probe>`, `PROBE_THEN=<then>`, extra YAML under `spec:`.
fn probe_pod(pod: &str, probe: &str, then: &str, extra_env: &str, spec_extra: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {pod}
spec:
{spec_extra}  containers:
  - name: main
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: {probe}
    - name: PROBE_THEN
      value: "{then}"
{extra_env}"#
    )
}

// ---------------------------------------------------------------------------------------------
// The user's workflow: files and `systemctl daemon-reload`, nothing else.

#[test]
fn drop_edit_remove_manifest_with_daemon_reload_only() {
    let m = Machine::boot("workflow");
    let web = |version: &str| {
        probe_pod(
            "web",
            "wf-web",
            "term-log",
            &format!("    - name: VERSION\n      value: {version}\n"),
            "  terminationGracePeriodSeconds: 20\n",
        )
    };
    m.write("/etc/pods.d/web.yaml", web("v1").as_bytes());
    m.write(
        "/etc/pods.d/other.yaml",
        probe_pod("other", "wf-other", "sleep", "", "").as_bytes(),
    );
    m.daemon_reload();

    // Dropped + reloaded: both run, nobody typed `systemctl start`.
    let webp = Probe::new(&m, "wf-web");
    let other = Probe::new(&m, "wf-other");
    webp.wait_starts(1);
    other.wait_starts(1);
    assert_eq!(webp.env("VERSION").as_deref(), Some(&b"v1"[..]));
    let other_unit = ctr_unit(NS, "other", "main");
    wait_state(&m, &other_unit, &["active"]);
    let other_pid = m.prop(&other_unit, "MainPID");

    // Edited + reloaded: web restarts with the new spec; its neighbour is untouched.
    m.write("/etc/pods.d/web.yaml", web("v2").as_bytes());
    m.daemon_reload();
    m.wait_for("web to run with VERSION=v2", SOON, || {
        (webp.starts() >= 2 && webp.env("VERSION").as_deref() == Some(&b"v2"[..])).then_some(())
    });
    assert_eq!(
        webp.text("signals").as_deref(),
        Some("term\n"),
        "the old web got SIGTERM"
    );
    assert_eq!(
        other.starts(),
        1,
        "the untouched neighbour must not restart"
    );
    assert_eq!(m.prop(&other_unit, "MainPID"), other_pid);

    // Removed + reloaded: web is stopped (gracefully: SIGTERM, within its grace period) and gone.
    m.sh_ok("rm /etc/pods.d/web.yaml");
    m.daemon_reload();
    m.wait_for("web's units to be gone", SOON, || {
        known_units(&m, NS, "web").is_empty().then_some(())
    });
    // SIGTERM reached it at the removal too. Once under a kubelet; here, for a unit whose file
    // is gone, systemd's stop falls back to signalling every process of the unit (its KillMode=
    // went with the file), so the command, PID 1 behind pid-init, gets it directly and again
    // through pid-init: twice (docs/mapping.md, terminationGracePeriodSeconds).
    let signals = webp.text("signals").unwrap_or_default();
    assert!(
        signals.starts_with("term\nterm\n") && signals.lines().all(|l| l == "term"),
        "web was stopped with SIGTERM: {signals:?}"
    );
    assert_eq!(failed_podunit_units(&m), "", "no failed units left behind");
    assert_eq!(other.starts(), 1);
    assert_eq!(m.prop(&other_unit, "ActiveState"), "active");
}

// ---------------------------------------------------------------------------------------------
// Encoding: what the manifest says is exactly what the process gets.

#[test]
fn hostile_argv_and_env_arrive_byte_exact() {
    let m = Machine::boot("hostile");
    // (manifest value, what the process must receive after Kubernetes' $(VAR) expansion)
    let cases: &[(&str, &str)] = &[
        ("plain", "plain"),
        ("", ""),
        ("with space", "with space"),
        ("  leading and trailing  ", "  leading and trailing  "),
        ("double\"quote", "double\"quote"),
        ("single'quote", "single'quote"),
        ("back\\slash\\", "back\\slash\\"),
        ("\\n \\x41 \\\"", "\\n \\x41 \\\""),
        ("$HOME ${HOME} $", "$HOME ${HOME} $"),
        ("%n %h %% %", "%n %h %% %"),
        (
            "a; rm -rf / && echo pwned | cat",
            "a; rm -rf / && echo pwned | cat",
        ),
        ("line1\nline2\n", "line1\nline2\n"),
        ("tab\there\r\u{7}\u{1b}[31m", "tab\there\r\u{7}\u{1b}[31m"),
        ("ünïcödé ☃ 🦀 \u{202e}", "ünïcödé ☃ 🦀 \u{202e}"),
        ("`id` *glob? ~tilde {a,b}", "`id` *glob? ~tilde {a,b}"),
        ("-dash", "-dash"),
        ("@at", "@at"),
        ("+plus :colon !bang", "+plus :colon !bang"),
        // Kubernetes expansion: defined names expand, $$ escapes, unknown references stay.
        ("$(FOO)", "foo-value"),
        ("x$(FOO)y", "xfoo-valuey"),
        ("$$(FOO)", "$(FOO)"),
        ("$$", "$"),
        ("$(UNDEFINED)", "$(UNDEFINED)"),
        ("$(FOO", "$(FOO"),
        (
            "\n[Service]\nExecStartPre=/bin/touch /pwned",
            "\n[Service]\nExecStartPre=/bin/touch /pwned",
        ),
    ];
    let args: String = cases
        .iter()
        .map(|(v, _)| format!("    - {}\n", yaml_str(v)))
        .collect();
    let mut env = String::from("    - name: FOO\n      value: foo-value\n");
    for (i, (v, _)) in cases.iter().enumerate() {
        env += &format!("    - name: HOSTILE_{i}\n      value: {}\n", yaml_str(v));
    }
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: hostile
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: host
    command: ["/usr/local/bin/probe"]
    args:
{args}    env:
    - name: PROBE
      value: hostile
    - name: PROBE_THEN
      value: "exit:0"
{env}"#
    );
    m.write("/etc/pods.d/hostile.yaml", manifest.as_bytes());
    start_pods(&m);
    let p = Probe::new(&m, "hostile");
    p.wait_starts(1);

    let got = p.args();
    let want: Vec<Vec<u8>> = cases.iter().map(|(_, w)| w.as_bytes().to_vec()).collect();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(g),
            String::from_utf8_lossy(w),
            "argv[{i}] (manifest {:?})",
            cases[i].0
        );
    }
    assert_eq!(got.len(), want.len(), "argument count: {got:?}");
    for (i, (v, w)) in cases.iter().enumerate() {
        assert_eq!(
            p.env(&format!("HOSTILE_{i}"))
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            Some(w.to_string()),
            "env HOSTILE_{i} (manifest {v:?})"
        );
    }
    assert!(
        m.read("/pwned").is_none(),
        "a manifest value became a command"
    );
}

// ---------------------------------------------------------------------------------------------
// Init containers and native sidecars.

#[test]
fn init_containers_run_in_order_and_once() {
    let m = Machine::boot("init-order");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: init
spec:
  restartPolicy: Always
  initContainers:
  - name: first
    image: host
    command: ["/bin/sh", "-c", "echo first >> /srv/probe/init-order"]
  - name: second
    image: host
    command: ["/bin/sh", "-c", "echo second >> /srv/probe/init-order"]
  containers:
  - name: app
    image: host
    command: ["/bin/sh", "-c", "echo app >> /srv/probe/init-order; PROBE=init-app exec /usr/local/bin/probe"]
  - name: sibling
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: init-sibling
"#;
    m.write("/etc/pods.d/init.yaml", manifest.as_bytes());
    start_pods(&m);
    let app = Probe::new(&m, "init-app");
    let sibling = Probe::new(&m, "init-sibling");
    app.wait_starts(1);
    sibling.wait_starts(1);
    assert_eq!(
        m.read_string("/srv/probe/init-order").as_deref(),
        Some("first\nsecond\napp\n"),
        "init containers run in order, before the app"
    );

    // The app container dies and is restarted: init containers do not run again, the sibling
    // keeps running.
    let app_unit = ctr_unit(NS, "init", "app");
    m.sh_ok(&format!(
        "systemctl kill --signal=KILL --kill-whom=main -- {app_unit}"
    ));
    m.wait_for("the app to be restarted", RESTARTS, || {
        (app.starts() >= 2).then_some(())
    });
    assert_eq!(
        m.read_string("/srv/probe/init-order").as_deref(),
        Some("first\nsecond\napp\napp\n"),
        "init containers run once per pod start"
    );
    assert_eq!(sibling.starts(), 1, "a restart never restarts siblings");
    assert_eq!(m.prop(&ctr_unit(NS, "init", "sibling"), "NRestarts"), "0");
}

#[test]
fn failing_init_container_keeps_app_containers_from_starting() {
    let m = Machine::boot("init-fail");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: initfail
spec:
  restartPolicy: Never
  initContainers:
  - name: ok
    image: host
    command: ["/bin/true"]
  - name: broken
    image: host
    command: ["/bin/sh", "-c", "exit 3"]
  containers:
  - name: app
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: initfail-app
"#;
    m.write("/etc/pods.d/initfail.yaml", manifest.as_bytes());
    m.daemon_reload();
    let _ = m.systemctl(&["start", "podunit.target"]);
    let broken = ctr_unit(NS, "initfail", "broken");
    let app = ctr_unit(NS, "initfail", "app");
    wait_state(&m, &broken, &["failed"]);
    assert_eq!(m.prop(&broken, "ExecMainStatus"), "3");
    // Nothing is left queued that could still start the app later.
    m.wait_for("no pending jobs for the app", SOON, || {
        let jobs = m.sh_ok("systemctl list-jobs --no-legend --plain");
        (!jobs.contains(&app)).then_some(())
    });
    let state = m.prop(&app, "ActiveState");
    assert!(state == "inactive" || state == "failed", "app is {state}");
    assert_eq!(
        Probe::new(&m, "initfail-app").starts(),
        0,
        "the app container must never have run"
    );
}

#[test]
fn native_sidecar_runs_beside_the_app_containers() {
    let m = Machine::boot("sidecar");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: sidecar
spec:
  initContainers:
  - name: side
    image: host
    restartPolicy: Always
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: sc-side
  - name: after
    image: host
    command: ["/bin/sh", "-c", "cp /srv/probe/sc-side/starts /srv/probe/sc-after-saw"]
  containers:
  - name: app
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: sc-app
"#;
    m.write("/etc/pods.d/sidecar.yaml", manifest.as_bytes());
    start_pods(&m);
    let side = Probe::new(&m, "sc-side");
    let app = Probe::new(&m, "sc-app");
    app.wait_starts(1);
    assert_eq!(side.starts(), 1);
    assert!(
        m.read("/srv/probe/sc-after-saw").is_some(),
        "the sidecar was running before the next init container"
    );
    assert!(side.start_times()[0] <= app.start_times()[0]);
    assert_eq!(
        m.prop(&ctr_unit(NS, "sidecar", "side"), "ActiveState"),
        "active"
    );
    assert_eq!(
        m.prop(&ctr_unit(NS, "sidecar", "app"), "ActiveState"),
        "active"
    );
    assert_eq!(
        m.prop(&ctr_unit(NS, "sidecar", "side"), "SubState"),
        "running"
    );
}

// ---------------------------------------------------------------------------------------------
// restartPolicy with real exit codes.

fn restart_pod(pod: &str, policy: &str, containers: &[(&str, &str)]) -> String {
    let mut s = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\nspec:\n  restartPolicy: {policy}\n  containers:\n"
    );
    for (name, then) in containers {
        s += &format!(
            "  - name: {name}\n    image: host\n    command: [\"/usr/local/bin/probe\"]\n    env:\n    - name: PROBE\n      value: {pod}-{name}\n    - name: PROBE_THEN\n      value: \"{then}\"\n"
        );
    }
    s
}

/// Restarts are spaced out (back-off), not a tight loop.
fn assert_backs_off(p: &Probe) {
    let t = p.start_times();
    for w in t.windows(2) {
        assert!(
            w[1] - w[0] >= 1.0,
            "{} restarted after {:.3}s: restarts must back off, not spin ({t:?})",
            p.name,
            w[1] - w[0]
        );
    }
}

#[test]
fn restart_policy_always_restarts_any_exit_and_never_gives_up() {
    let m = Machine::boot("restart-always");
    m.write(
        "/etc/pods.d/ra.yaml",
        restart_pod(
            "ra",
            "Always",
            &[("ok", "exit:0"), ("bad", "exit:1"), ("steady", "sleep")],
        )
        .as_bytes(),
    );
    start_pods(&m);
    let ok = Probe::new(&m, "ra-ok");
    let bad = Probe::new(&m, "ra-bad");
    m.wait_for("both to have restarted twice", RESTARTS, || {
        (ok.starts() >= 3 && bad.starts() >= 3).then_some(())
    });
    for (p, c) in [(&ok, "ok"), (&bad, "bad")] {
        let unit = ctr_unit(NS, "ra", c);
        assert_backs_off(p);
        assert!(m.prop(&unit, "NRestarts").parse::<u32>().unwrap() >= 2);
        assert_ne!(m.prop(&unit, "Result"), "start-limit-hit");
        assert_ne!(m.prop(&unit, "ActiveState"), "failed");
        // systemd's default start limit (5 starts in 10s) would stop a crash-looping pod for good.
        assert_eq!(m.prop(&unit, "StartLimitIntervalUSec"), "0", "{unit}");
    }
    assert_eq!(m.prop(&ctr_unit(NS, "ra", "bad"), "ExecMainStatus"), "1");
    assert_eq!(
        Probe::new(&m, "ra-steady").starts(),
        1,
        "siblings do not restart"
    );
}

#[test]
fn restart_policy_on_failure_restarts_only_failures() {
    let m = Machine::boot("restart-onfailure");
    m.write(
        "/etc/pods.d/rf.yaml",
        restart_pod("rf", "OnFailure", &[("ok", "exit:0"), ("bad", "exit:3")]).as_bytes(),
    );
    start_pods(&m);
    let ok = Probe::new(&m, "rf-ok");
    let bad = Probe::new(&m, "rf-bad");
    m.wait_for("the failing container to restart twice", RESTARTS, || {
        (bad.starts() >= 3).then_some(())
    });
    assert_backs_off(&bad);
    let ok_unit = ctr_unit(NS, "rf", "ok");
    wait_state(&m, &ok_unit, &["inactive"]);
    assert_eq!(ok.starts(), 1, "a container that exited 0 is not restarted");
    assert_eq!(m.prop(&ok_unit, "ExecMainStatus"), "0");
    assert_eq!(m.prop(&ok_unit, "NRestarts"), "0");
    assert_eq!(m.prop(&ctr_unit(NS, "rf", "bad"), "ExecMainStatus"), "3");
}

#[test]
fn restart_policy_never_keeps_real_exit_codes() {
    let m = Machine::boot("restart-never");
    m.write(
        "/etc/pods.d/rn.yaml",
        restart_pod("rn", "Never", &[("ok", "exit:0"), ("bad", "exit:7")]).as_bytes(),
    );
    start_pods(&m);
    let bad_unit = ctr_unit(NS, "rn", "bad");
    let ok_unit = ctr_unit(NS, "rn", "ok");
    wait_state(&m, &bad_unit, &["failed"]);
    wait_state(&m, &ok_unit, &["inactive"]);
    assert_eq!(m.prop(&bad_unit, "ExecMainStatus"), "7");
    assert_eq!(m.prop(&bad_unit, "Result"), "exit-code");
    assert_eq!(m.prop(&ok_unit, "ExecMainStatus"), "0");
    assert_eq!(Probe::new(&m, "rn-bad").starts(), 1);
    assert_eq!(Probe::new(&m, "rn-ok").starts(), 1);
    assert_eq!(m.prop(&bad_unit, "NRestarts"), "0");
}

// ---------------------------------------------------------------------------------------------
// Stopping: preStop, SIGTERM, SIGKILL after terminationGracePeriodSeconds.

#[test]
fn grace_period_ends_in_sigkill_and_prestop_runs_before_sigterm() {
    let m = Machine::boot("grace");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: grace
spec:
  terminationGracePeriodSeconds: 3
  containers:
  - name: stubborn
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: grace
    - name: PROBE_THEN
      value: ignore-term
    lifecycle:
      preStop:
        exec:
          command: ["/bin/sh", "-c", "echo \"prestop $PROBE_THEN${MAINPID:+ MAINPID}\" >> /srv/probe/grace/signals"]
"#;
    m.write("/etc/pods.d/grace.yaml", manifest.as_bytes());
    start_pods(&m);
    let p = Probe::new(&m, "grace");
    p.wait_starts(1);
    let unit = ctr_unit(NS, "grace", "stubborn");
    wait_state(&m, &unit, &["active"]);
    let pid = m.prop(&unit, "MainPID");

    m.sh_ok(&format!("systemctl stop -- {}", pod_unit(NS, "grace")));
    wait_state(&m, &unit, &["inactive", "failed"]);
    assert_eq!(
        p.text("signals").as_deref(),
        Some("prestop ignore-term\nterm\n"),
        "preStop runs first, with the container's environment (not systemd's $MAINPID), then SIGTERM"
    );
    assert!(
        m.read(&format!("/proc/{pid}/stat")).is_none(),
        "the process is gone"
    );
    let journal = m.sh_ok(&format!("journalctl -b --no-pager -o cat -u {unit}"));
    assert!(
        journal.contains("State 'stop-sigterm' timed out. Killing."),
        "SIGKILL after the grace period:\n{journal}"
    );
}

// ---------------------------------------------------------------------------------------------
// Volumes.

#[test]
fn emptydir_is_shared_within_a_pod_and_not_across_pods() {
    let m = Machine::boot("emptydir");
    let pod = |name: &str, script: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  volumes:
  - name: data
    emptyDir: {{}}
  containers:
{script}"#
        )
    };
    let a = pod(
        "ea",
        r#"  - name: writer
    image: host
    command: ["/bin/sh", "-c", "echo from-ea > /data/f.tmp && mv /data/f.tmp /data/f && exec sleep infinity"]
    volumeMounts:
    - name: data
      mountPath: /data
  - name: reader
    image: host
    command: ["/bin/sh", "-c", "while [ ! -e /data/f ]; do sleep 0.2; done; cp /data/f /srv/probe/ea-read.tmp && mv /srv/probe/ea-read.tmp /srv/probe/ea-read; exec sleep infinity"]
    volumeMounts:
    - name: data
      mountPath: /data
"#,
    );
    m.write("/etc/pods.d/ea.yaml", a.as_bytes());
    start_pods(&m);
    m.wait_for("the reader to see the writer's file", SOON, || {
        m.read_string("/srv/probe/ea-read")
    });
    assert_eq!(
        m.read_string("/srv/probe/ea-read").as_deref(),
        Some("from-ea\n")
    );

    let b = pod(
        "eb",
        r#"  - name: main
    image: host
    command: ["/bin/sh", "-c", "ls -A /data > /srv/probe/eb-ls.tmp && mv /srv/probe/eb-ls.tmp /srv/probe/eb-ls; exec sleep infinity"]
    volumeMounts:
    - name: data
      mountPath: /data
"#,
    );
    m.write("/etc/pods.d/eb.yaml", b.as_bytes());
    start_pods(&m);
    let seen = m.wait_for("the other pod to list its emptyDir", SOON, || {
        m.read_string("/srv/probe/eb-ls")
    });
    assert_eq!(seen, "", "another pod's emptyDir is its own, and empty");
    assert!(
        m.read("/data/f").is_none(),
        "the emptyDir is not the host's /data"
    );
}

#[test]
fn hostpath_configmap_and_secret_volumes_have_content_owner_and_mode() {
    let m = Machine::boot("volumes");
    m.sh_ok(
        "mkdir -p /srv/hostdata && printf 'hello from host\\n' > /srv/hostdata/hello.txt \
         && chown 1234:1234 /srv/hostdata/hello.txt && chmod 640 /srv/hostdata/hello.txt",
    );
    // Modes in decimal: 416 = 0640, 256 = 0400, 288 = 0440.
    let manifest = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
data:
  app.conf: "key=value\n"
  other: "x"
---
apiVersion: v1
kind: Secret
metadata:
  name: sec
type: Opaque
stringData:
  password: "s3cr3t-Pa55"
data:
  token: dG9rCg==
---
apiVersion: v1
kind: Pod
metadata:
  name: vols
spec:
  restartPolicy: Never
  volumes:
  - name: host
    hostPath:
      path: /srv/hostdata
      type: Directory
  - name: cfg
    configMap:
      name: cfg
      defaultMode: 416
  - name: sec
    secret:
      secretName: sec
      defaultMode: 256
      items:
      - key: password
        path: password
      - key: token
        path: nested/token
        mode: 288
  containers:
  - name: main
    image: host
    command:
    - /bin/sh
    - -c
    - |
      for f in /host/hello.txt /cfg/app.conf /cfg/other /sec/password /sec/nested/token; do
        stat -L -c '%n %a %u %g' "$f"
      done > /srv/probe/vols-stat
      cat /host/hello.txt /cfg/app.conf /sec/password /sec/nested/token > /srv/probe/vols-content
      PROBE=vols PROBE_THEN=exit:0 exec /usr/local/bin/probe
    volumeMounts:
    - name: host
      mountPath: /host
    - name: cfg
      mountPath: /cfg
    - name: sec
      mountPath: /sec
"#;
    m.write("/etc/pods.d/vols.yaml", manifest.as_bytes());
    start_pods(&m);
    let p = Probe::new(&m, "vols");
    p.wait_starts(1);
    assert_eq!(
        m.read_string("/srv/probe/vols-stat").as_deref(),
        Some(
            "/host/hello.txt 640 1234 1234\n\
             /cfg/app.conf 640 0 0\n\
             /cfg/other 640 0 0\n\
             /sec/password 400 0 0\n\
             /sec/nested/token 440 0 0\n"
        )
    );
    assert_eq!(
        m.read_string("/srv/probe/vols-content").as_deref(),
        Some("hello from host\nkey=value\ns3cr3t-Pa55tok\n")
    );
    // Secret files live on tmpfs (never on disk).
    let mountinfo = p.text("mountinfo").unwrap();
    let sec_fs = mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/sec"))
        .and_then(|l| l.split(" - ").nth(1))
        .and_then(|l| l.split_whitespace().next().map(str::to_string));
    assert_eq!(sec_fs.as_deref(), Some("tmpfs"), "/sec mount:\n{mountinfo}");
    // Secret values are never written into unit files.
    let leaked =
        m.sh("grep -rl -e s3cr3t-Pa55 -e dG9rCg== /run/systemd/generator /etc/systemd/system");
    assert!(
        !leaked.status.success(),
        "secret in unit files: {}",
        String::from_utf8_lossy(&leaked.stdout)
    );
}

#[test]
fn readonly_mounts_are_really_read_only() {
    let m = Machine::boot("readonly");
    m.sh_ok("mkdir -p /srv/rohost");
    let manifest = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: rocfg
data:
  k: v
---
apiVersion: v1
kind: Pod
metadata:
  name: ro
spec:
  restartPolicy: Never
  volumes:
  - name: data
    emptyDir: {}
  - name: host
    hostPath:
      path: /srv/rohost
  - name: cfg
    configMap:
      name: rocfg
  containers:
  - name: main
    image: host
    command:
    - /bin/sh
    - -c
    - |
      for d in /rw /ro /hro /cfg; do
        if touch "$d/new" 2>/dev/null; then echo "$d writable"; else echo "$d read-only"; fi
      done > /srv/probe/ro-result.tmp
      mv /srv/probe/ro-result.tmp /srv/probe/ro-result
    volumeMounts:
    - name: data
      mountPath: /rw
    - name: data
      mountPath: /ro
      readOnly: true
    - name: host
      mountPath: /hro
      readOnly: true
    - name: cfg
      mountPath: /cfg
"#;
    m.write("/etc/pods.d/ro.yaml", manifest.as_bytes());
    start_pods(&m);
    let got = m.wait_for("the container's result", SOON, || {
        m.read_string("/srv/probe/ro-result")
    });
    assert_eq!(
        got,
        "/rw writable\n/ro read-only\n/hro read-only\n/cfg read-only\n"
    );
    assert!(m.read("/srv/rohost/new").is_none());
}

/// hostPaths are the host's, whatever the pod unit keeps private (its /tmp and /var/tmp), and
/// fsGroup owns the pod's own volumes with the kubelet's permissions.
#[test]
fn hostpaths_are_the_hosts_and_fsgroup_owns_the_pods_volumes() {
    let m = Machine::boot("hostfs");
    let manifest = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: fscfg}
data: {k: v}
---
apiVersion: v1
kind: Secret
metadata: {name: fssec}
stringData: {s: hidden}
---
apiVersion: v1
kind: Pod
metadata:
  name: fsg
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 1000, fsGroup: 2000, fsGroupChangePolicy: OnRootMismatch}
  volumes:
  - {name: demo, emptyDir: {}}
  - {name: cfg, configMap: {name: fscfg}}
  - {name: sec, secret: {secretName: fssec}}
  - name: dapi
    downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}
  - name: proj
    projected: {sources: [{configMap: {name: fscfg}}]}
  - {name: vt, hostPath: {path: /var/tmp/x, type: DirectoryOrCreate}}
  - {name: t, hostPath: {path: /tmp/y/z, type: DirectoryOrCreate}}
  - {name: f, hostPath: {path: /var/tmp/f.txt, type: FileOrCreate}}
  - {name: old, hostPath: {path: /tmp/old}}
  containers:
  - name: user
    image: host
    command:
    - /bin/sh
    - -c
    - |
      touch /data/demo/new
      mkdir /data/demo/sub
      stat -L -c '%n %a %g' /data/demo /data/demo/new /data/demo/sub /cfg/k /cfg/..data /sec/s /dapi/name /proj/k > /srv/probe/fsg-stat
      grep '^Groups:' /proc/self/status > /srv/probe/fsg-groups
    volumeMounts:
    - {name: demo, mountPath: /data/demo}
    - {name: cfg, mountPath: /cfg}
    - {name: sec, mountPath: /sec}
    - {name: dapi, mountPath: /dapi}
    - {name: proj, mountPath: /proj}
  - name: root
    image: host
    securityContext: {runAsUser: 0}
    command:
    - /bin/sh
    - -c
    - |
      echo to-var-tmp > /out/file && echo to-tmp > /outy/file && echo to-file > /outf && cat /old/before > /srv/probe/fsg-old
      stat -c '%a %u %g' /out /outy /outf > /srv/probe/fsg-hostpaths
    volumeMounts:
    - {name: vt, mountPath: /out}
    - {name: t, mountPath: /outy}
    - {name: f, mountPath: /outf}
    - {name: old, mountPath: /old}
---
apiVersion: v1
kind: Pod
metadata:
  name: nodir
spec:
  volumes:
  - {name: v, hostPath: {path: /var/tmp/missing, type: Directory}}
  containers:
  - name: main
    image: host
    command: [/bin/true]
    volumeMounts: [{name: v, mountPath: /v}]
"#;
    m.sh_ok("mkdir -p /tmp/old && echo from-host > /tmp/old/before");
    m.write("/etc/pods.d/fsg.yaml", manifest.as_bytes());
    start_pods(&m);
    let ran = |file: &str| m.wait_for(file, SOON, || m.read_string(&format!("/srv/probe/{file}")));
    // Seen from the machine itself: the host's /var/tmp and /tmp, not the pod's private ones.
    assert_eq!(ran("fsg-hostpaths"), "755 0 0\n755 0 0\n644 0 0\n");
    assert_eq!(ran("fsg-old"), "from-host\n");
    assert_eq!(
        m.sh_ok("cat /var/tmp/x/file /tmp/y/z/file /var/tmp/f.txt"),
        "to-var-tmp\nto-tmp\nto-file\n"
    );
    assert_eq!(
        m.sh_ok("stat -c '%a %u %g' /var/tmp/x /tmp/y /tmp/y/z /var/tmp/f.txt"),
        "755 0 0\n755 0 0\n755 0 0\n644 0 0\n"
    );
    // fsGroup: the emptyDir is group 2000 with setgid, so what the container makes is group 2000;
    // the read-only volumes' files are group-readable, their directories setgid.
    assert_eq!(
        ran("fsg-stat"),
        "/data/demo 2777 2000\n/data/demo/new 644 2000\n/data/demo/sub 2755 2000\n\
         /cfg/k 644 2000\n/cfg/..data 2755 2000\n/sec/s 440 2000\n/dapi/name 644 2000\n\
         /proj/k 644 2000\n"
    );
    let groups = ran("fsg-groups");
    assert!(
        groups.split_whitespace().any(|g| g == "2000"),
        "fsGroup in the supplementary groups: {groups}"
    );

    // A hostPath that must be a directory and is not there: the pod never starts, and says why.
    wait_state(&m, &pod_unit(NS, "nodir"), &["failed"]);
    let status = m.sh_ok("podunit status");
    assert!(
        status
            .lines()
            .any(|l| l
                == r#"default/nodir: hostPath "/var/tmp/missing" is not an existing directory"#),
        "{status}"
    );
    assert!(m.read("/var/tmp/missing").is_none());
}

#[test]
fn subpath_mounts_only_the_sub_directory_or_file() {
    let m = Machine::boot("subpath");
    m.sh_ok(
        "mkdir -p /srv/hp/inner && echo inner-f > /srv/hp/inner/f && echo outer > /srv/hp/outer",
    );
    let manifest = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: subcfg
data:
  app.conf: "only this key\n"
  unrelated: "no"
---
apiVersion: v1
kind: Pod
metadata:
  name: sub
spec:
  restartPolicy: Never
  volumes:
  - name: data
    emptyDir: {}
  - name: host
    hostPath:
      path: /srv/hp
  - name: cfg
    configMap:
      name: subcfg
  initContainers:
  - name: prep
    image: host
    command: ["/bin/sh", "-c", "mkdir -p /data/sub && echo in-sub > /data/sub/file && echo top > /data/top"]
    volumeMounts:
    - name: data
      mountPath: /data
  containers:
  - name: main
    image: host
    command:
    - /bin/sh
    - -c
    - |
      { ls -A /only; cat /only/file; ls -A /hp-inner; cat /hp-inner/f; cat /etc/sub-app.conf; } > /srv/probe/sub-result.tmp
      mv /srv/probe/sub-result.tmp /srv/probe/sub-result
    volumeMounts:
    - name: data
      mountPath: /only
      subPath: sub
    - name: host
      mountPath: /hp-inner
      subPath: inner
    - name: cfg
      mountPath: /etc/sub-app.conf
      subPath: app.conf
"#;
    m.write("/etc/pods.d/sub.yaml", manifest.as_bytes());
    start_pods(&m);
    let got = m.wait_for("the container's result", SOON, || {
        m.read_string("/srv/probe/sub-result")
    });
    assert_eq!(got, "file\nin-sub\nf\ninner-f\nonly this key\n");
}

/// The kubelet's subPath rules at container start: a missing subPath is made (in the volume,
/// with its mode), and one that a container turned into a symlink out of the volume keeps the
/// next container from starting instead of binding the host's directory.
#[test]
fn subpath_is_made_when_missing_and_never_leads_out_of_the_volume() {
    let m = Machine::boot("subpath-escape");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: subesc
spec:
  restartPolicy: Never
  volumes:
  - name: data
    emptyDir: {}
  initContainers:
  - name: plant
    image: host
    command: ["/bin/sh", "-c", "ln -s /etc /data/escape"]
    volumeMounts:
    - name: data
      mountPath: /data
  containers:
  - name: fresh
    image: host
    command: ["/bin/sh", "-c", "{ ls -A /fresh; echo made; } > /srv/probe/fresh.tmp && mv /srv/probe/fresh.tmp /srv/probe/fresh"]
    volumeMounts:
    - name: data
      mountPath: /fresh
      subPath: new/dir
  - name: evil
    image: host
    command: ["/bin/sh", "-c", "ls /mnt > /srv/probe/evil"]
    volumeMounts:
    - name: data
      mountPath: /mnt
      subPath: escape
"#;
    m.write("/etc/pods.d/subesc.yaml", manifest.as_bytes());
    start_pods(&m);
    let got = m.wait_for("the fresh container's result", SOON, || {
        m.read_string("/srv/probe/fresh")
    });
    assert_eq!(got, "made\n", "the made subPath is an empty directory");
    let evil = ctr_unit("default", "subesc", "evil");
    wait_state(&m, &evil, &["failed"]);
    assert_eq!(m.prop(&evil, "ExecMainPID"), "0", "its command never ran");
    assert!(
        m.read("/srv/probe/evil").is_none(),
        "the container with the escaping subPath ran"
    );
    let journal = m.sh_ok(&format!("journalctl -b --no-pager -o cat -u {evil}"));
    assert!(
        journal.contains("is a symlink that leads out of the volume: refused"),
        "{journal}"
    );
    let made = m.sh_ok(
        "stat -c '%F %a' /var/lib/podunit/pods/*/volumes/data/new/dir /var/lib/podunit/pods/*/volumes/data",
    );
    let lines: Vec<&str> = made.lines().collect();
    assert_eq!(lines.len(), 2, "{made}");
    assert!(lines[0].starts_with("directory "), "{made}");
    assert_eq!(
        lines[0].split(' ').nth(1),
        lines[1].split(' ').nth(1),
        "the made directory has the volume's mode: {made}"
    );
}

// ---------------------------------------------------------------------------------------------
// securityContext and resources, as the process sees them.

#[test]
fn run_as_user_group_no_new_privs_and_capabilities() {
    let m = Machine::boot("security");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: sec
spec:
  securityContext:
    supplementalGroups: [4000]
  containers:
  - name: user
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: sec-user
    securityContext:
      runAsUser: 1000
      runAsGroup: 3000
      allowPrivilegeEscalation: false
  - name: caps
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: sec-caps
    securityContext:
      capabilities:
        drop: ["ALL"]
        add: ["NET_BIND_SERVICE", "CHOWN"]
"#;
    m.write("/etc/pods.d/sec.yaml", manifest.as_bytes());
    start_pods(&m);
    let user = Probe::new(&m, "sec-user");
    let caps = Probe::new(&m, "sec-caps");
    user.wait_starts(1);
    caps.wait_starts(1);
    assert_eq!(user.status("Uid"), "1000\t1000\t1000\t1000");
    assert_eq!(user.status("Gid"), "3000\t3000\t3000\t3000");
    assert!(
        user.status("Groups")
            .split_whitespace()
            .any(|g| g == "4000"),
        "supplementalGroups: {}",
        user.status("Groups")
    );
    assert_eq!(user.status("NoNewPrivs"), "1");
    // CAP_CHOWN = bit 0, CAP_NET_BIND_SERVICE = bit 10.
    assert_eq!(caps.status("CapBnd"), "0000000000000401");
    assert_eq!(caps.status("CapEff"), "0000000000000401");
    assert_eq!(caps.status("Uid"), "0\t0\t0\t0");
}

#[test]
fn memory_and_cpu_limits_seen_from_inside() {
    let m = Machine::boot("limits");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: lim
spec:
  containers:
  - name: main
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: lim
    resources:
      requests:
        cpu: 250m
        memory: 32Mi
      limits:
        cpu: 500m
        memory: 64Mi
"#;
    m.write("/etc/pods.d/lim.yaml", manifest.as_bytes());
    start_pods(&m);
    let p = Probe::new(&m, "lim");
    p.wait_starts(1);
    assert_eq!(p.limit("memory"), "67108864");
    assert_eq!(p.limit("cpu"), "50000 100000");
    let cgroup = p.text("cgroup").unwrap();
    assert!(
        cgroup.contains(&pod_slice(NS, "lim")),
        "the container runs in its pod's slice:\n{cgroup}"
    );
}

#[test]
fn pod_level_limits_apply_to_the_pod_slice() {
    let m = Machine::boot("pod-limits");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: plim
spec:
  resources:
    limits:
      memory: 128Mi
      cpu: "1"
  containers:
  - name: a
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: plim-a
  - name: b
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: plim-b
"#;
    m.write("/etc/pods.d/plim.yaml", manifest.as_bytes());
    start_pods(&m);
    Probe::new(&m, "plim-a").wait_starts(1);
    Probe::new(&m, "plim-b").wait_starts(1);
    let slice = pod_slice(NS, "plim");
    // Read the kernel's value for the slice's cgroup, cgroup v2 or v1.
    let script = format!(
        r#"cg=$(systemctl show -p ControlGroup --value -- '{slice}')
if [ -f "/sys/fs/cgroup$cg/memory.max" ]; then
  echo "memory=$(cat /sys/fs/cgroup$cg/memory.max)"; echo "cpu=$(cat /sys/fs/cgroup$cg/cpu.max)"
else
  echo "memory=$(cat /sys/fs/cgroup/memory$cg/memory.limit_in_bytes)"
  echo "cpu=$(cat /sys/fs/cgroup/cpu$cg/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu$cg/cpu.cfs_period_us)"
fi"#
    );
    assert_eq!(m.sh_ok(&script), "memory=134217728\ncpu=100000 100000\n");
    for probe in ["plim-a", "plim-b"] {
        let cg = Probe::new(&m, probe).text("cgroup").unwrap();
        assert!(cg.contains(&slice), "{probe} is in the pod's slice:\n{cg}");
    }
}

// ---------------------------------------------------------------------------------------------
// Boot and bad input.

#[test]
fn reboot_brings_pods_back_from_etc_and_spool() {
    let mut m = Machine::boot("reboot");
    m.write(
        "/etc/pods.d/bootetc.yaml",
        probe_pod("bootetc", "boot-etc", "sleep", "", "").as_bytes(),
    );
    m.write(
        "/var/lib/podunit/spool/bootspool.yaml",
        probe_pod("bootspool", "boot-spool", "sleep", "", "").as_bytes(),
    );
    start_pods(&m);
    Probe::new(&m, "boot-etc").wait_starts(1);
    Probe::new(&m, "boot-spool").wait_starts(1);

    m.reboot();
    // Nobody starts anything after boot: podunit.target is wanted by multi-user.target.
    Probe::new(&m, "boot-etc").wait_starts(2);
    Probe::new(&m, "boot-spool").wait_starts(2);
    assert_eq!(
        m.prop(&ctr_unit(NS, "bootetc", "main"), "ActiveState"),
        "active"
    );
    assert_eq!(
        m.prop(&ctr_unit(NS, "bootspool", "main"), "ActiveState"),
        "active"
    );
}

#[test]
fn broken_manifest_among_good_ones() {
    let m = Machine::boot("broken");
    m.write(
        "/etc/pods.d/good1.yaml",
        probe_pod("good1", "good1", "sleep", "", "").as_bytes(),
    );
    // `_` is not allowed in a container name (it separates the parts of unit names).
    m.write(
        "/etc/pods.d/bad.yaml",
        br#"apiVersion: v1
kind: Pod
metadata:
  name: bad
spec:
  containers:
  - name: Bad_Name
    image: host
    command: ["/bin/true"]
"#,
    );
    m.write(
        "/etc/pods.d/good2.yaml",
        probe_pod("good2", "good2", "sleep", "", "").as_bytes(),
    );
    m.daemon_reload();
    let _ = m.systemctl(&["start", "podunit.target"]);
    Probe::new(&m, "good1").wait_starts(1);
    Probe::new(&m, "good2").wait_starts(1);
    assert!(
        known_units(&m, NS, "bad").is_empty(),
        "no units for the bad pod"
    );

    let check = m.exec(&["podunit", "check", "/etc/pods.d/bad.yaml"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(!check.status.success(), "podunit check must fail: {said}");
    assert!(said.contains("bad.yaml"), "names the file: {said}");
    assert!(said.contains("Bad_Name"), "names the value: {said}");
    assert!(
        said.contains("containers[0].name"),
        "names the field: {said}"
    );
    let good = m.exec(&["podunit", "check", "/etc/pods.d/good1.yaml"]);
    assert!(
        good.status.success(),
        "podunit check on a good manifest: {}",
        String::from_utf8_lossy(&good.stderr)
    );

    let journal = m.sh_ok("journalctl -b --no-pager -o cat");
    assert!(
        journal
            .lines()
            .any(|l| l.contains("bad.yaml") && l.contains("containers[0].name")),
        "the journal says why bad.yaml was skipped:\n{}",
        m.diagnostics()
    );
}

// ---------------------------------------------------------------------------------------------
// Environment from objects and the downward API; the journal.

#[test]
fn env_from_configmap_secret_and_downward_api_reach_the_process_only() {
    let m = Machine::boot("env-objects");
    // A hostile secret: it must arrive byte-exact and never be expanded again.
    let secret = "p a$s\"w'o\\rd %n $HOME ${X} $(COLOR)\nline2 ✓";
    let manifest = format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  LOG_LEVEL: debug
  color: blue
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
stringData:
  password: {secret}
---
apiVersion: v1
kind: Pod
metadata:
  name: envpod
  labels:
    app: envlabel
spec:
  containers:
  - name: main
    image: host
    workingDir: /srv
    command: ["/usr/local/bin/probe"]
    args: ["$(PASSWORD)", "pw=$(PASSWORD)!", "$(COLOR)"]
    envFrom:
    - configMapRef:
        name: settings
    - prefix: S_
      secretRef:
        name: creds
    env:
    - name: PROBE
      value: envpod
    - name: PASSWORD
      valueFrom:
        secretKeyRef:
          name: creds
          key: password
    - name: COLOR
      valueFrom:
        configMapKeyRef:
          name: settings
          key: color
    - name: LOG_LEVEL
      value: info
    - name: MY_POD
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: MY_NS
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: MY_UID
      valueFrom:
        fieldRef:
          fieldPath: metadata.uid
    - name: MY_LABEL
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['app']
"#,
        secret = yaml_str(secret)
    );
    m.write("/etc/pods.d/envpod.yaml", manifest.as_bytes());
    start_pods(&m);
    let p = Probe::new(&m, "envpod");
    p.wait_starts(1);
    let env = |k: &str| p.env(k).map(|v| String::from_utf8_lossy(&v).into_owned());
    assert_eq!(env("PASSWORD").as_deref(), Some(secret));
    assert_eq!(env("S_password").as_deref(), Some(secret));
    assert_eq!(env("COLOR").as_deref(), Some("blue"));
    assert_eq!(env("color").as_deref(), Some("blue"));
    assert_eq!(
        env("LOG_LEVEL").as_deref(),
        Some("info"),
        "env wins over envFrom"
    );
    assert_eq!(env("MY_POD").as_deref(), Some("envpod"));
    assert_eq!(env("MY_NS").as_deref(), Some("default"));
    assert_eq!(env("MY_LABEL").as_deref(), Some("envlabel"));
    // A static pod's UID, derived as `podunit::manifest::static_uid` documents (stable across
    // reboots, as the kubelet derives one from a static pod's source): SHA-256 of "namespace NUL
    // name NUL file", its first 16 bytes in the 8-4-4-4-12 form. Computed here with the
    // machine's sha256sum, not podunit's code.
    let uid = m
        .sh_ok(
            "printf 'default\\0envpod\\0/etc/pods.d/envpod.yaml' | sha256sum \
             | sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12}).*/\\1-\\2-\\3-\\4-\\5/'",
        )
        .trim()
        .to_string();
    assert_eq!(uid.len(), 36, "{uid}");
    assert_eq!(env("MY_UID"), Some(uid.clone()));
    let args: Vec<String> = p
        .args()
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(
        args,
        vec![
            secret.to_string(),
            format!("pw={secret}!"),
            "blue".to_string()
        ]
    );
    assert_eq!(p.text("cwd").as_deref(), Some("/srv\n"));

    // The secret is in no unit file, and wherever podunit keeps it, only root can read it.
    let leaked =
        m.sh(
        "grep -rlF -e 'p a$s' -e 'line2 ✓' /run/systemd/generator /etc/systemd/system /run/systemd/system",
    );
    assert!(
        !leaked.status.success(),
        "secret in unit files: {}",
        String::from_utf8_lossy(&leaked.stdout)
    );
    let readable = m.sh_ok(
        "grep -rlF 'line2 ✓' /run/podunit /var/lib/podunit 2>/dev/null | while read -r f; do \
           stat -c '%a %U %n' \"$f\"; done",
    );
    // The container's environment file holds it (a check of nothing would pass otherwise).
    let env_dir = format!("/run/podunit/pods/{uid}/env/");
    assert!(
        readable
            .lines()
            .any(|l| l.split(' ').nth(2).is_some_and(|f| f.starts_with(&env_dir))),
        "the secret is in an environment file under {env_dir}: {readable:?}"
    );
    for line in readable.lines() {
        let mode = u32::from_str_radix(line.split(' ').next().unwrap(), 8).unwrap();
        assert_eq!(mode & 0o077, 0, "secret readable by others: {line}");
        assert_eq!(
            line.split(' ').nth(1),
            Some("root"),
            "secret not owned by root: {line}"
        );
    }
}

#[test]
fn container_output_is_in_the_journal_under_the_pod_fields() {
    let m = Machine::boot("journal");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: jr
spec:
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "echo journal-line-from-jr; exec sleep infinity"]
"#;
    m.write("/etc/pods.d/jr.yaml", manifest.as_bytes());
    start_pods(&m);
    let uid = m.sh_ok(&format!(
        "sed -n 's/^X-PodunitUid=//p' /run/systemd/generator/{}",
        pod_unit(NS, "jr")
    ));
    let query = format!(
        "journalctl --no-pager -o cat POD_NAMESPACE=default POD_NAME=jr CONTAINER_NAME=main POD_UID={}",
        uid.trim()
    );
    m.wait_for(
        "the container's line in the journal by pod fields",
        SOON,
        || {
            m.sh_ok(&query)
                .lines()
                .any(|l| l == "journal-line-from-jr")
                .then_some(())
        },
    );
}

#[test]
fn broken_manifest_at_boot_is_explained_in_that_boots_journal() {
    let mut m = Machine::boot("broken-at-boot");
    m.write(
        "/etc/pods.d/good.yaml",
        probe_pod("good", "boot-good", "sleep", "", "").as_bytes(),
    );
    m.write(
        "/etc/pods.d/bad.yaml",
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers:\n  - name: Bad_Name\n    image: host\n    command: [\"/bin/true\"]\n",
    );
    // No reload: the generator first sees these manifests at boot, before journald runs.
    m.reboot();
    Probe::new(&m, "boot-good").wait_starts(1);
    let journal = m.sh_ok("journalctl -b --no-pager -o cat");

    assert!(
        journal
            .lines()
            .any(|l| l.contains("bad.yaml") && l.contains("containers[0].name")),
        "this boot's journal says why bad.yaml was skipped:\n{}",
        m.diagnostics()
    );
}

#[test]
fn removed_pod_leaves_no_secret_or_state_behind() {
    let m = Machine::boot("cleanup");
    let manifest = r#"apiVersion: v1
kind: Secret
metadata:
  name: gone
stringData:
  token: tok-5f1e2d-must-vanish
---
apiVersion: v1
kind: Pod
metadata:
  name: tidy
spec:
  terminationGracePeriodSeconds: 5
  volumes:
  - name: sec
    secret:
      secretName: gone
  - name: scratch
    emptyDir: {}
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "echo data > /scratch/f && PROBE=tidy exec /usr/local/bin/probe"]
    env:
    - name: TOKEN
      valueFrom:
        secretKeyRef:
          name: gone
          key: token
    volumeMounts:
    - name: sec
      mountPath: /sec
    - name: scratch
      mountPath: /scratch
"#;
    m.write("/etc/pods.d/tidy.yaml", manifest.as_bytes());
    m.daemon_reload();
    Probe::new(&m, "tidy").wait_starts(1);
    let uid = m
        .sh_ok(&format!(
            "sed -n 's/^X-PodunitUid=//p' /run/systemd/generator/{}",
            pod_unit(NS, "tidy")
        ))
        .trim()
        .to_string();
    assert!(!uid.is_empty());
    assert!(
        m.sh(&format!("test -d /run/podunit/pods/{uid}"))
            .status
            .success(),
        "the pod's runtime directory exists while it runs"
    );

    m.sh_ok("rm /etc/pods.d/tidy.yaml");
    m.daemon_reload();
    m.wait_for("tidy's units to be gone", SOON, || {
        known_units(&m, NS, "tidy").is_empty().then_some(())
    });
    for dir in [
        format!("/run/podunit/pods/{uid}"),
        format!("/var/lib/podunit/pods/{uid}"),
    ] {
        assert!(
            !m.sh(&format!("test -e {dir}")).status.success(),
            "{dir} is left behind: {}\n{}",
            m.sh_ok(&format!("find {dir} | head -20")),
            m.sh_ok("journalctl -b --no-pager -o cat | grep -i -e cleanup -e tidy | tail -20")
        );
    }
    let found =
        m.sh("grep -rl tok-5f1e2d-must-vanish /run /var/lib/podunit /etc/systemd 2>/dev/null");
    assert!(
        String::from_utf8_lossy(&found.stdout).trim().is_empty(),
        "the secret outlives its pod in: {}",
        String::from_utf8_lossy(&found.stdout)
    );
}

// ---------------------------------------------------------------------------------------------
// Namespaces: as in Kubernetes, a pod's containers share one IPC namespace of their own.

/// `sysv=yes|no mq=yes|no`: whether the SysV queue `key` and the POSIX queue `name` are in sight.
fn ipc_look(who: &str, key: &str, name: &str) -> String {
    format!(
        "ipc-probe look {key} {name} > /srv/probe/{who}.tmp && mv /srv/probe/{who}.tmp /srv/probe/{who}"
    )
}

#[test]
fn containers_of_a_pod_share_one_ipc_namespace() {
    let m = Machine::boot("ipc");
    m.write(
        "/usr/local/bin/ipc-probe",
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/machine/ipc-probe"
        ))
        .unwrap(),
    );
    m.sh_ok("chmod 755 /usr/local/bin/ipc-probe");
    // The host's own queues: only a hostIPC pod may see them.
    m.sh_ok("ipc-probe make 0xbee2 hostq");
    let container = |name: &str, script: &str, extra: &str| {
        format!(
            "  - name: {name}\n    image: host\n    command: [\"/bin/sh\", \"-c\", {}]\n{extra}",
            yaml_str(script)
        )
    };
    let wait_made = "while [ ! -e /srv/probe/ipc-made ]; do sleep 0.2; done";
    let pod_of = |name: &str, spec_extra: &str, containers: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec_extra}  containers:\n{containers}"
        )
    };
    let pod = format!(
        "{}{}{}",
        pod_of(
            "ipc",
            "",
            &container(
                "maker",
                "ipc-probe make 0xbee1 podq && echo maker > /tmp/from-maker && touch /srv/probe/ipc-made; exec sleep infinity",
                "",
            )
        ),
        container(
            "seer",
            &format!(
                "{wait_made}; {} && {}; cat /tmp/from-maker > /srv/probe/seer-tmp; exec sleep infinity",
                ipc_look("seer", "0xbee1", "podq"),
                ipc_look("seer-host", "0xbee2", "hostq")
            ),
            "",
        ),
        // The IPC namespace is the pod's, privileged or not.
        container(
            "admin",
            &format!(
                "{wait_made}; {}; exec sleep infinity",
                ipc_look("admin", "0xbee1", "podq")
            ),
            "    securityContext: {privileged: true}\n",
        ),
    );
    m.write("/etc/pods.d/ipc.yaml", pod.as_bytes());
    start_pods(&m);
    let seen = |who: &str| {
        m.wait_for(&format!("{who} to look for the queues"), SOON, || {
            m.read_string(&format!("/srv/probe/{who}"))
        })
    };
    assert_eq!(
        seen("seer"),
        "sysv=yes mq=yes\n",
        "a sibling sees the queues its pod made"
    );
    assert_eq!(
        seen("admin"),
        "sysv=yes mq=yes\n",
        "a privileged sibling too"
    );
    assert_eq!(
        seen("seer-host"),
        "sysv=no mq=no\n",
        "the pod does not see the host's"
    );
    assert_eq!(
        m.sh_ok("ipc-probe look 0xbee1 podq"),
        "sysv=no mq=no\n",
        "the host does not see the pod's"
    );
    // /tmp goes with the namespace (systemd shares a joined unit's /tmp): the pod's, not the host's.
    assert_eq!(seen("seer-tmp"), "maker\n");
    assert!(
        m.read("/tmp/from-maker").is_none(),
        "the pod's /tmp is not the host's"
    );

    // Another pod: a namespace of its own. A hostIPC pod: the host's.
    let look = |who: &str, key: &str, name: &str| {
        container(
            "main",
            &format!(
                "test -e /tmp/from-maker && echo shared > /srv/probe/{who}-tmp; {}; exec sleep infinity",
                ipc_look(who, key, name)
            ),
            "",
        )
    };
    let other = pod_of("other", "", &look("other", "0xbee1", "podq"));
    let host = pod_of(
        "hostipc",
        "  hostIPC: true\n",
        &look("hostipc", "0xbee2", "hostq"),
    );
    m.write("/etc/pods.d/other.yaml", other.as_bytes());
    m.write("/etc/pods.d/hostipc.yaml", host.as_bytes());
    start_pods(&m);
    assert_eq!(
        seen("other"),
        "sysv=no mq=no\n",
        "another pod's are not in sight"
    );
    assert_eq!(
        seen("hostipc"),
        "sysv=yes mq=yes\n",
        "hostIPC: true is the host's"
    );
    assert!(
        m.read("/srv/probe/other-tmp").is_none(),
        "another pod's /tmp is its own"
    );
}
