//! podunit-sync, `podunit status` and `podunit logs` on a real systemd (tests/support/nspawn.rs).
//! Needs root and systemd-nspawn; fails (never skips) without them.

mod support;

use std::time::Duration;
use support::nspawn::Machine;
use support::pods::{
    Probe, SOON, ctr_unit, failed_podunit_units, known_units, pod_slice, pod_unit, start_sync,
    wait_state,
};
use support::status::{pods_named, status_row};

const NS: &str = "default";

/// How many reconciles podunit-sync has logged in this boot.
fn reconciles(m: &Machine) -> usize {
    m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service")
        .lines()
        .filter(|l| l.contains("reconciled:"))
        .count()
}

/// `daemon-reload`, then wait until podunit-sync has reconciled after it.
fn reload_and_wait_reconcile(m: &Machine) {
    let before = reconciles(m);
    m.daemon_reload();
    m.wait_for("podunit-sync to reconcile after the reload", SOON, || {
        (reconciles(m) > before).then_some(())
    });
}

/// Pod `stubborn`, whose container ignores SIGTERM (recording it), so only a SIGKILL stops it;
/// written and started, its probe returned.
fn start_stubborn<'a>(m: &'a Machine, grace: u32, probe: &str) -> Probe<'a> {
    let y = probe_pod_then("stubborn", probe, "ignore-term", grace, "v1");
    m.write("/etc/pods.d/stubborn.yaml", y.as_bytes());
    m.daemon_reload();
    let p = Probe::new(m, probe);
    p.wait_starts(1);
    p
}

/// SIGKILLs podunit-sync and waits until systemd has restarted it.
fn kill_sync(m: &Machine) {
    let old = m.prop("podunit-sync.service", "MainPID");
    m.sh_ok(&format!("kill -KILL {old}"));
    m.wait_for("podunit-sync to be restarted", SOON, || {
        let p = m.prop("podunit-sync.service", "MainPID");
        (p != old && p != "0" && m.prop("podunit-sync.service", "ActiveState") == "active")
            .then_some(())
    });
}

fn probe_pod(pod: &str, probe: &str, version: &str) -> String {
    probe_pod_then(pod, probe, "term-log", 10, version)
}

fn probe_pod_then(pod: &str, probe: &str, then: &str, grace: u32, version: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {pod}
spec:
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: main
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - name: PROBE
      value: {probe}
    - name: PROBE_THEN
      value: {then}
    - name: VERSION
      value: "{version}"
"#
    )
}

#[test]
fn sync_starts_restarts_and_stops_pods_after_reload_only() {
    let m = Machine::boot("sync-workflow");
    start_sync(&m);
    m.write(
        "/etc/pods.d/a.yaml",
        probe_pod("a", "sync-a", "v1").as_bytes(),
    );
    m.write(
        "/etc/pods.d/b.yaml",
        probe_pod("b", "sync-b", "v1").as_bytes(),
    );
    m.daemon_reload();

    let a = Probe::new(&m, "sync-a");
    let b = Probe::new(&m, "sync-b");
    a.wait_starts(1);
    b.wait_starts(1);
    let b_unit = ctr_unit(NS, "b", "main");
    wait_state(&m, &b_unit, &["active"]);
    let b_pid = m.prop(&b_unit, "MainPID");

    // An unrelated reload restarts nothing.
    reload_and_wait_reconcile(&m);
    assert_eq!((a.starts(), b.starts()), (1, 1));
    // Edit a: only a restarts, with its new spec.
    m.write(
        "/etc/pods.d/a.yaml",
        probe_pod("a", "sync-a", "v2").as_bytes(),
    );
    m.daemon_reload();
    m.wait_for("a to run with VERSION=v2", SOON, || {
        (a.starts() >= 2 && a.env("VERSION").as_deref() == Some(&b"v2"[..])).then_some(())
    });
    assert_eq!(a.starts(), 2, "a restarted exactly once");
    assert_eq!(b.starts(), 1, "b must not restart");
    assert_eq!(m.prop(&b_unit, "MainPID"), b_pid);

    // Remove a: stopped with SIGTERM, no units left, nothing failed.
    m.sh_ok("rm /etc/pods.d/a.yaml");
    m.daemon_reload();
    m.wait_for("a's units to be gone", SOON, || {
        known_units(&m, NS, "a").is_empty().then_some(())
    });
    assert_eq!(a.text("signals").as_deref(), Some("term\nterm\n"));
    assert_eq!(failed_podunit_units(&m), "");
    assert_eq!(b.starts(), 1);
    assert_eq!(m.prop(&b_unit, "ActiveState"), "active");
}

#[test]
fn removed_pod_whose_container_failed_leaves_no_failed_unit() {
    let m = Machine::boot("sync-failed-leftover");
    start_sync(&m);
    let y = r#"apiVersion: v1
kind: Pod
metadata:
  name: crash
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "exit 3"]
"#;
    m.write("/etc/pods.d/crash.yaml", y.as_bytes());
    m.daemon_reload();
    let unit = ctr_unit(NS, "crash", "main");
    wait_state(&m, &unit, &["failed"]);
    m.sh_ok("rm /etc/pods.d/crash.yaml");
    m.daemon_reload();
    m.wait_for("crash's units to be gone", SOON, || {
        known_units(&m, NS, "crash").is_empty().then_some(())
    });
    assert_eq!(failed_podunit_units(&m), "");
}

#[test]
fn killing_sync_never_touches_pods_and_its_state_survives() {
    let m = Machine::boot("sync-kill");
    start_sync(&m);
    m.write(
        "/etc/pods.d/k.yaml",
        probe_pod("k", "sync-k", "v1").as_bytes(),
    );
    m.write(
        "/etc/pods.d/j.yaml",
        probe_pod("j", "sync-j", "v1").as_bytes(),
    );
    m.daemon_reload();
    let k = Probe::new(&m, "sync-k");
    let j = Probe::new(&m, "sync-j");
    k.wait_starts(1);
    j.wait_starts(1);
    let unit = ctr_unit(NS, "k", "main");
    wait_state(&m, &unit, &["active"]);
    let pid = m.prop(&unit, "MainPID");
    let state = m
        .read_string("/var/lib/podunit/sync-state.json")
        .expect("podunit-sync wrote its state");
    assert!(state.contains("\"default/k\""), "{state}");

    // SIGKILL: systemd restarts podunit-sync; the pod is neither stopped nor restarted.
    kill_sync(&m);
    reload_and_wait_reconcile(&m);
    assert_eq!(m.prop(&unit, "MainPID"), pid);
    assert_eq!(k.starts(), 1);

    // SIGTERM: a clean exit, and again the pod keeps running.
    m.sh_ok("systemctl stop podunit-sync.service");
    assert_eq!(m.prop("podunit-sync.service", "Result"), "success");
    assert_eq!(m.prop(&unit, "MainPID"), pid);
    assert_eq!(m.prop(&pod_unit(NS, "k"), "ActiveState"), "active");
    assert!(k.text("signals").is_none(), "k got no signal");

    // Edited while podunit-sync is down: nothing restarts k until podunit-sync is back, and then
    // its recorded state (which survived) tells that k changed and j did not.
    m.write(
        "/etc/pods.d/k.yaml",
        probe_pod("k", "sync-k", "v2").as_bytes(),
    );
    m.daemon_reload();
    assert_eq!(k.starts(), 1);
    start_sync(&m);
    m.wait_for("k to run with VERSION=v2", SOON, || {
        (k.starts() >= 2 && k.env("VERSION").as_deref() == Some(&b"v2"[..])).then_some(())
    });
    assert_eq!(j.starts(), 1, "j is unchanged and must not restart");
}

#[test]
fn spool_pods_not_rendered_yet_trigger_a_reload_at_start() {
    let m = Machine::boot("sync-spool");
    // As at boot with a late /var: a spool manifest the generator has not seen.
    m.write(
        "/var/lib/podunit/spool/s.yaml",
        probe_pod("s", "sync-s", "v1").as_bytes(),
    );
    assert!(known_units(&m, NS, "s").is_empty());
    start_sync(&m);
    Probe::new(&m, "sync-s").wait_starts(1);
    wait_state(&m, &pod_unit(NS, "s"), &["active"]);
}

#[test]
fn status_and_logs_of_a_running_pod() {
    let m = Machine::boot("sync-status");
    start_sync(&m);
    let y = r#"apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  initContainers:
  - name: setup
    image: host
    command: ["/bin/sh", "-c", "echo setting-up"]
  containers:
  - name: app
    image: host
    command: ["/bin/sh", "-c", "echo hello-from-app; exec sleep infinity"]
  - name: flaky
    image: host
    command: ["/bin/sh", "-c", "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 1; exit 1"]
"#;
    m.write("/etc/pods.d/web.yaml", y.as_bytes());
    m.daemon_reload();
    wait_state(&m, &ctr_unit(NS, "web", "app"), &["active"]);
    m.wait_for("flaky to have restarted", SOON, || {
        let n: u32 = m
            .prop(&ctr_unit(NS, "web", "flaky"), "NRestarts")
            .parse()
            .unwrap_or(0);
        (n >= 1).then_some(())
    });

    // flaky runs a second, then waits RestartSec= to run again: read the table while it waits
    // (the kubelet's CrashLoopBackOff), and only keep a reading during which flaky did not move.
    let flaky = ctr_unit(NS, "web", "flaky");
    let (table, restarts) = m.wait_for("a status read while flaky waits to restart", SOON, || {
        let waiting = |m: &Machine| {
            (m.prop(&flaky, "SubState") == "auto-restart").then(|| m.prop(&flaky, "NRestarts"))
        };
        let before = waiting(&m)?;
        let table = m.sh_ok("podunit status");
        (waiting(&m)? == before).then_some((table, before))
    });
    // The table: what comes before the notes (after an empty line, if any).
    let lines: Vec<Vec<&str>> = table
        .lines()
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "SOURCE"
        ],
        "{table}"
    );
    assert_eq!(lines.len(), 2, "a header and web's row: {table}");
    // app ready, flaky waiting: 1/2; RESTARTS sums the containers' (app's and setup's are 0).
    let row = &lines[1];
    assert_eq!(
        [row[0], row[1], row[2], row[3], row[4], row[6]],
        [
            "default",
            "web",
            "1/2",
            "CrashLoopBackOff",
            restarts.as_str(),
            "etc"
        ],
        "{table}"
    );
    assert_eq!(row.len(), 7, "{table}");
    assert!(
        row[5].ends_with('s') && row[5].chars().all(|c| c.is_ascii_alphanumeric()),
        "AGE like 42s or 1m30s: {table}"
    );

    let json = m.sh_ok("podunit status -o json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("status json");
    let web = v
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "web")
        .expect("web in json");
    assert_eq!(web["phase"], "Running");
    assert_eq!(
        web["initContainerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );
    let app = &web["containerStatuses"][0];
    assert_eq!(app["name"], "app");
    assert!(app["state"]["running"]["startedAt"].is_string(), "{app}");
    assert_eq!(app["ready"], true);

    // One pod: its containers' table, then each container's last log lines under its name.
    let detail = m.sh_ok("podunit status default/web");
    let cells = |name: &str| -> Vec<String> {
        detail
            .lines()
            .map(|l| {
                l.split("  ")
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .find(|c| c.first().map(String::as_str) == Some(name))
            .unwrap_or_else(|| panic!("no {name} row in\n{detail}"))
    };
    let setup = cells("setup");
    assert_eq!(
        [&setup[2], &setup[3], &setup[4], &setup[6]],
        [
            "Terminated (Completed)",
            "0",
            "0",
            &ctr_unit(NS, "web", "setup")
        ],
        "{detail}"
    );
    let app = cells("app");
    assert_eq!(
        [&app[2], &app[3], &app[4], &app[6]],
        ["Running", "-", "0", &ctr_unit(NS, "web", "app")],
        "{detail}"
    );
    let logs_of = |name: &str| -> Vec<&str> {
        let head = format!("--- {name} (last 10 log lines) ---");
        detail
            .lines()
            .skip_while(|l| *l != head)
            .skip(1)
            .take_while(|l| !l.is_empty() && !l.starts_with("--- "))
            .collect()
    };
    assert_eq!(logs_of("setup"), ["setting-up"], "{detail}");
    assert_eq!(logs_of("app"), ["hello-from-app"], "{detail}");

    let logs = m.sh_ok("podunit logs web -c app");
    assert_eq!(logs.trim(), "hello-from-app");
    let current = m.sh_ok("podunit logs web -c flaky");
    let prev = m.sh_ok("podunit logs web -c flaky --previous");
    let prev_lines: Vec<&str> = prev.lines().collect();
    assert_eq!(prev_lines.len(), 1, "one line per run: {prev}");
    assert!(prev_lines[0].starts_with("run-"));
    assert!(
        current.contains(prev_lines[0]),
        "previous run is in the full log"
    );
    let bad = m.sh("podunit logs web -c nope");
    assert!(!bad.status.success());

    // A reader that has gone (`podunit status | head -1` once head exits): the read end of the
    // pipe is closed before podunit starts, so its first write fails. It ends quietly, with the
    // status of a tool stopped by SIGPIPE, for every command that prints.
    m.write(
        "/usr/local/bin/closed-pipe",
        b"#!/usr/bin/perl\npipe(R, W); close R; open(STDOUT, '>&', \\*W); exec @ARGV or die;\n",
    );
    m.sh_ok("chmod +x /usr/local/bin/closed-pipe");
    for cmd in ["status", "status web", "status -o json"] {
        let out = m.sh(&format!("closed-pipe podunit {cmd}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(141),
            "podunit {cmd} into a closed pipe: {err}"
        );
        assert_eq!(err, "", "podunit {cmd} into a closed pipe");
    }
    let head = m.sh_ok("podunit status | head -1");
    assert_eq!(head.lines().count(), 1, "{head}");
    // The packaged unit lets podunit-sync keep the parsed-manifest cache the generator reads.
    let journal = m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service");
    assert!(
        journal.contains("parsed-manifest cache: 1 written")
            && !journal.contains("parsed-manifest cache /"),
        "podunit-sync could not write its cache:\n{journal}"
    );
}

#[test]
fn watch_manifests_reloads_by_itself_and_skips_broken_files() {
    let m = Machine::boot("sync-watch");
    m.write("/etc/podunit/config.yaml", b"watchManifests: true\n");
    start_sync(&m);
    m.wait_for("the watch to be set up", SOON, || {
        m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service")
            .contains("watching /etc/pods.d")
            .then_some(())
    });
    // No daemon-reload typed: the watch reloads, and the reload starts the pod.
    m.write(
        "/etc/pods.d/w.yaml",
        probe_pod("w", "sync-w", "v1").as_bytes(),
    );
    Probe::new(&m, "sync-w").wait_starts(1);

    // A broken file is reported and does not cause a reload.
    let reloads = || {
        m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service")
            .lines()
            .filter(|l| l.contains("manifests changed: daemon-reload"))
            .count()
    };
    let before = reloads();
    m.write(
        "/etc/pods.d/broken.yaml",
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: x}]}\n",
    );
    m.wait_for("the broken file to be reported", SOON, || {
        m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service")
            .contains("not reloading")
            .then_some(())
    });
    assert_eq!(reloads(), before);
}

#[test]
fn removed_pod_that_fails_while_stopping_leaves_no_failed_unit() {
    let m = Machine::boot("sync-stop-fails");
    start_sync(&m);
    // Ignores SIGTERM: SIGKILLed after its grace period, so its stop ends in `failed`.
    let p = start_stubborn(&m, 2, "sync-stubborn");
    m.sh_ok("rm /etc/pods.d/stubborn.yaml");
    m.daemon_reload();
    m.wait_for("stubborn's units to be gone", SOON, || {
        known_units(&m, NS, "stubborn").is_empty().then_some(())
    });
    assert_eq!(
        p.text("signals").as_deref(),
        Some("term\n"),
        "SIGTERM came first"
    );
    assert_eq!(failed_podunit_units(&m), "");
}

/// The pod's state and runtime directories (`/var/lib/podunit/pods/<uid>`, `/run/podunit/pods/<uid>`)
/// that exist now, one per line.
fn pod_dirs(m: &Machine) -> Vec<String> {
    let out = m.sh_ok("ls -d /run/podunit/pods/* /var/lib/podunit/pods/* 2>/dev/null || true");
    out.lines().map(str::to_string).collect()
}

/// podunit-sync killed (SIGKILL) twice while a removed pod is in its grace period: the restarted
/// agent still SIGKILLs the pod when its grace period ends (systemd forgot the unit's
/// TimeoutStopSec= with its file and would wait its default 90 s) and removes the pod's
/// directories, secrets and environment files included.
#[test]
fn removal_survives_killing_sync_during_the_grace_period() {
    let m = Machine::boot("sync-kill-grace");
    start_sync(&m);
    let p = start_stubborn(&m, 6, "sync-kill-grace");
    let unit = ctr_unit(NS, "stubborn", "main");
    wait_state(&m, &unit, &["active"]);
    let dirs = pod_dirs(&m);
    assert_eq!(
        dirs.len(),
        2,
        "the pod's runtime and state directories: {dirs:?}"
    );

    m.sh_ok("rm /etc/pods.d/stubborn.yaml");
    m.daemon_reload();
    m.wait_for("stubborn to get its SIGTERM", SOON, || {
        (p.text("signals").as_deref() == Some("term\n")).then_some(())
    });
    kill_sync(&m);
    kill_sync(&m);
    m.wait_for("podunit-sync to SIGKILL stubborn", SOON, || {
        let journal = m.sh_ok("journalctl -b --no-pager -o cat");
        (journal.contains(&format!("podunit-sync: {unit}: grace period over, SIGKILL"))
            && journal.contains(&format!(
                "{unit}: Main process exited, code=killed, status=9/KILL"
            )))
        .then_some(())
    });
    // With its processes gone, systemd in a container on a cgroup v1 host can miss the cgroup's
    // "empty" event and keep the unit in final-sigterm until DefaultTimeoutStopSec= (90 s): the
    // harness's limit, not podunit-sync's, so that wait is allowed for here.
    m.wait_for(
        "stubborn's units to be gone",
        SOON + Duration::from_secs(90),
        || known_units(&m, NS, "stubborn").is_empty().then_some(()),
    );
    let journal = m.sh_ok("journalctl -b --no-pager -o cat");
    assert!(
        !journal.contains("State 'stop-sigterm' timed out. Killing"),
        "systemd's own stop timeout must not be what ended the grace period:\n{journal}"
    );
    m.wait_for("the pod's directories to be removed", SOON, || {
        pod_dirs(&m).is_empty().then_some(())
    });
    m.wait_for("the record to forget the pod", SOON, || {
        let state = m
            .read_string("/var/lib/podunit/sync-state.json")
            .unwrap_or_default();
        (!state.contains("stubborn")).then_some(())
    });
    assert_eq!(failed_podunit_units(&m), "");
}

/// podunit-sync's own journal lines (not systemd's about it) after `cursor` that are not what a
/// storm of replaced pods calls for: starting a pod, a start left to the reconcile after a reload
/// under way, stopping the units of a pod that is gone (pod units, slices and container units of
/// those pods, never its own cleanup units), deleting that pod's files, reloading for a manifest
/// change, the parsed-manifest cache's counts, and a reconcile's summary. Anything else,
/// whatever its wording (a failed call, an unknown unit, an error), is unexpected.
fn unexpected_storm_lines(lines: &[String]) -> Vec<String> {
    let pod = |name: &str| {
        name == "steady"
            || name
                .strip_prefix("storm-")
                .and_then(|n| n.strip_suffix("-x"))
                .is_some_and(|n| n.parse::<u32>().is_ok())
    };
    // The pod and container units of those pods, as the suite names them everywhere.
    let unit_of = |unit: &str| {
        (0..100)
            .map(|i| format!("storm-{i}-x"))
            .chain(["steady".to_string()])
            .any(|p| {
                unit == pod_unit(NS, &p)
                    || unit == ctr_unit(NS, &p, "main")
                    || unit == pod_slice(NS, &p)
            })
    };
    let expected = |l: &str| {
        let Some(l) = l.strip_prefix("podunit-sync: ") else {
            return false;
        };
        if let Some(rest) = l.strip_prefix("starting pod ") {
            // "starting pod default/NAME (UNIT)"
            return rest.split_once(" (").is_some_and(|(p, u)| {
                p.strip_prefix(&format!("{NS}/")).is_some_and(pod)
                    && u.strip_suffix(')').is_some_and(unit_of)
            });
        }
        if let Some(u) = l
            .strip_prefix("stopping ")
            .and_then(|r| r.strip_suffix(": its pod is gone"))
        {
            return unit_of(u);
        }
        // `sleep`, PID 1 of its container with no SIGTERM handler, ignores the stop's SIGTERM:
        // after the 2 s grace it is SIGKILLed, as under a kubelet, and the failed unit of the
        // gone pod is reset. True events, not false errors.
        if let Some(u) = l.strip_suffix(": grace period over, SIGKILL").or_else(|| {
            l.strip_prefix("resetting failed ")
                .and_then(|r| r.strip_suffix(": its pod is gone"))
        }) {
            return unit_of(u);
        }
        if let Some((p, u)) = l.strip_prefix("pod ").and_then(|r| {
            r.strip_suffix(
                " awaits the daemon-reload under way; the reconcile after it takes the pod up",
            )?
            .split_once(": ")
        }) {
            // A start that a later reload overtook: not a failure.
            return p.strip_prefix(&format!("{NS}/")).is_some_and(pod) && unit_of(u);
        }
        if let Some(counts) = l.strip_prefix("parsed-manifest cache: ") {
            // "N written, N kept, N removed"
            let words: Vec<&str> = counts.split(' ').collect();
            return words.len() == 6
                && [words[1], words[3], words[5]] == ["written,", "kept,", "removed"]
                && [words[0], words[2], words[4]]
                    .iter()
                    .all(|n| n.parse::<u32>().is_ok());
        }
        if let Some(rest) = l.strip_prefix("pod ") {
            // "pod default/NAME removed: deleting DIR DIR"
            return rest
                .split_once(" removed: deleting ")
                .is_some_and(|(p, dirs)| {
                    p.strip_prefix(&format!("{NS}/")).is_some_and(pod)
                        && dirs.split(' ').all(|d| {
                            d.starts_with("/run/podunit/pods/")
                                || d.starts_with("/var/lib/podunit/pods/")
                                || d.starts_with("/run/podunit/waiting/")
                        })
                });
        }
        l == "manifests changed: daemon-reload" || l.starts_with("reconciled: ")
    };
    lines.iter().filter(|l| !expected(l)).cloned().collect()
}

/// podunit-sync's own journal lines after `cursor`.
fn sync_lines_after(m: &Machine, cursor: &str) -> Vec<String> {
    m.sh_ok(&format!(
        "journalctl --no-pager -o cat --after-cursor='{cursor}' _SYSTEMD_UNIT=podunit-sync.service"
    ))
    .lines()
    .map(str::to_string)
    .collect()
}

/// podunit-sync's journal lines at warning level or worse in this boot.
fn sync_warnings(m: &Machine) -> String {
    m.sh_ok("journalctl -b --no-pager -o cat -p warning -u podunit-sync.service")
}

#[test]
fn refused_and_waiting_pods_are_in_status_with_why() {
    let m = Machine::boot("sync-visible");
    start_sync(&m);
    let sleeper = |name: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: main\n    image: host\n    command: [\"/bin/sleep\", \"infinity\"]\n{extra}"
        )
    };
    m.write("/etc/pods.d/good.yaml", sleeper("good", "").as_bytes());
    // A typo, as a new user makes one.
    m.write(
        "/etc/pods.d/typo.yaml",
        sleeper("typo", "")
            .replace("command:", "comand:")
            .as_bytes(),
    );
    // A ConfigMap that is not there (yet).
    m.write(
        "/etc/pods.d/app.yaml",
        sleeper(
            "app",
            "    env:\n    - name: LEVEL\n      valueFrom:\n        configMapKeyRef: {name: app-config, key: level}\n",
        )
        .as_bytes(),
    );
    reload_and_wait_reconcile(&m);
    wait_state(&m, &ctr_unit(NS, "good", "main"), &["active"]);
    wait_state(&m, &pod_unit(NS, "app"), &["failed"]);

    let table = m.sh_ok("podunit status");
    let typo = status_row(&table, "typo");
    assert_eq!(
        (
            typo[0].as_str(),
            typo[3].as_str(),
            typo.last().unwrap().as_str()
        ),
        ("default", "InvalidManifest", "etc"),
        "{table}"
    );
    let app = status_row(&table, "app");
    assert_eq!(app[2], "0/1", "{table}");
    assert_eq!(app[3], "CreateContainerConfigError", "{table}");
    assert_eq!(status_row(&table, "good")[3], "Running", "{table}");
    // Why, under the table: the first problem and where the rest are; what is missing.
    assert!(
        table.lines().any(|l| l.starts_with("default/typo: /etc/pods.d/typo.yaml: default/typo: spec.containers[0].comand: unknown field")
            && l.ends_with("(podunit check /etc/pods.d/typo.yaml)")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l == "default/app: key \"level\" of ConfigMap default/app-config not found"),
        "{table}"
    );

    // One pod by name, as `podunit status typo` was asked before it was visible.
    let one = m.sh_ok("podunit status typo");
    assert!(one.contains("InvalidManifest"), "{one}");
    assert!(one.contains("Message:     /etc/pods.d/typo.yaml"), "{one}");

    let json: serde_json::Value =
        serde_json::from_str(&m.sh_ok("podunit status -o json")).expect("status json");
    let pod = |name: &str| {
        json.as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {json}"))
            .clone()
    };
    let typo = pod("typo");
    assert_eq!(
        (&typo["phase"], &typo["reason"]),
        (&"Failed".into(), &"InvalidManifest".into())
    );
    assert!(
        typo["message"]
            .as_str()
            .unwrap()
            .contains("spec.containers[0].comand"),
        "{typo}"
    );
    let app = pod("app");
    assert_eq!(
        app["containerStatuses"][0]["state"]["waiting"]["reason"],
        "CreateContainerConfigError"
    );
    assert!(
        app["message"].as_str().unwrap().contains("app-config"),
        "{app}"
    );

    // podunit-sync said what was refused, at warning level, naming file, pod and field: once
    // for the reload, once more for the next.
    let refused = |m: &Machine| {
        sync_warnings(m)
            .lines()
            .filter(|l| {
                l.contains(
                    "manifest refused: /etc/pods.d/typo.yaml: default/typo: spec.containers[0].comand",
                )
            })
            .count()
    };
    assert_eq!(refused(&m), 1, "{}", sync_warnings(&m));
    reload_and_wait_reconcile(&m);
    assert_eq!(refused(&m), 2, "{}", sync_warnings(&m));

    // The ConfigMap arrives, the pod starts at its next try (every 10 s, as the kubelet's pod
    // worker tries again; no reload, no restart): its wait is over, and so is what status said.
    m.write(
        "/etc/pods.d/app-config.yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-config}\ndata: {level: debug}\n",
    );
    wait_state(&m, &ctr_unit(NS, "app", "main"), &["active"]);
    let table = m.sh_ok("podunit status");
    assert_eq!(status_row(&table, "app")[3], "Running", "{table}");
    assert!(!table.contains("default/app:"), "{table}");
}

#[test]
fn a_failing_reconcile_is_said_in_status_text_and_podunit_status() {
    let m = Machine::boot("sync-disk-full");
    // A small filesystem for podunit's state, which the test fills once podunit-sync runs.
    m.sh_ok(
        "mount -t tmpfs -o size=4m,mode=0755 tmpfs /var/lib/podunit && mkdir -m 0700 /var/lib/podunit/spool",
    );
    start_sync(&m);
    m.write(
        "/etc/pods.d/one.yaml",
        probe_pod("one", "full-one", "v1").as_bytes(),
    );
    reload_and_wait_reconcile(&m);
    m.sh("dd if=/dev/zero of=/var/lib/podunit/fill bs=64k 2>/dev/null");
    m.write(
        "/etc/pods.d/two.yaml",
        probe_pod("two", "full-two", "v1").as_bytes(),
    );
    m.daemon_reload();
    let text = m.wait_for("podunit-sync to say the reconcile failed", SOON, || {
        let t = m.prop("podunit-sync.service", "StatusText");
        t.starts_with("Reconcile failed").then_some(t)
    });
    assert!(text.contains("No space left on device"), "{text}");
    let status = m.sh_ok("podunit status");
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("podunit-sync: Reconcile failed")
                && l.contains("No space left on device")),
        "{status}"
    );

    // Space again: the next reload reconciles, and both say so.
    m.sh_ok("rm /var/lib/podunit/fill");
    reload_and_wait_reconcile(&m);
    m.wait_for("podunit-sync to reconcile again", SOON, || {
        m.prop("podunit-sync.service", "StatusText")
            .starts_with("Reconciled")
            .then_some(())
    });
    assert!(!m.sh_ok("podunit status").contains("Reconcile failed"));
}

/// A storm of reloads, each replacing a pod by another, while podunit-sync reconciles: every
/// removed pod is stopped and cleaned up, and the journal carries no false error (a start of a
/// pod that a later reload replaced is not a failure; a cleanup unit is not a pod unit).
#[test]
fn reload_storm_leaves_no_false_errors_in_the_journal() {
    let m = Machine::boot("sync-storm");
    start_sync(&m);
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
             terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n    image: host\n    \
             command: [\"/bin/sleep\", \"infinity\"]\n"
        )
    };
    m.write("/etc/pods.d/steady.yaml", pod("steady").as_bytes());
    m.daemon_reload();
    wait_state(&m, &ctr_unit(NS, "steady", "main"), &["active"]);
    let steady_pid = m.prop(&ctr_unit(NS, "steady", "main"), "MainPID");

    let last = m.sh_ok("journalctl --no-pager -o cat -n 1 --show-cursor");
    let cursor = last
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("-- cursor: "))
        .unwrap_or_else(|| panic!("a journal cursor in {last:?}"))
        .to_string();
    // Every reload replaces the pod of the one before; one shell, so reloads come back to back.
    // Meanwhile `podunit exec` runs in the steady pod, again and again: a transient unit created
    // just before a reload must run its command as given (`$`, `%`, an empty argument).
    let rounds = 30;
    let execs = 15;
    let mut script = format!(
        "(for j in $(seq {execs}); do podunit exec steady -- /usr/bin/printf '[%s]' 'a$$b' \
         '${{HOME}}' '$X' '' >> /root/exec.out 2>&1; echo >> /root/exec.out; done) &\n"
    );
    for i in 0..rounds {
        script.push_str(&format!(
            "rm -f /etc/pods.d/storm-*.yaml; printf '%s' '{}' > /etc/pods.d/storm-{i}-x.yaml; \
             systemctl daemon-reload\n",
            pod(&format!("storm-{i}-x"))
        ));
    }
    script.push_str("wait\n");
    m.sh_ok(&script);
    let exec_out = m.sh_ok("cat /root/exec.out");
    assert_eq!(
        exec_out.lines().collect::<Vec<_>>(),
        vec!["[a$$b][${HOME}][$X][]"; execs],
        "every exec during the storm ran its command exactly"
    );
    reload_and_wait_reconcile(&m);
    let last = format!("storm-{}-x", rounds - 1);
    wait_state(&m, &ctr_unit(NS, &last, "main"), &["active"]);
    m.wait_for("every replaced pod's units to be gone", SOON, || {
        let left: Vec<String> = (0..rounds - 1)
            // (`-x`: known_units globs, and storm-2 would match storm-29.)
            .flat_map(|i| known_units(&m, NS, &format!("storm-{i}-x")))
            .collect();
        left.is_empty().then_some(())
    });
    // steady and the last storm pod: two directories each, and nothing else.
    let mut dirs = pod_dirs(&m);
    for _ in 0..SOON.as_secs() {
        if dirs.len() == 4 {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        dirs = pod_dirs(&m);
    }
    assert_eq!(
        dirs.len(),
        4,
        "only steady's and the last pod's directories stay: {dirs:?}\n{}",
        m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service")
    );
    assert_eq!(
        m.prop(&ctr_unit(NS, "steady", "main"), "MainPID"),
        steady_pid
    );
    let lines = sync_lines_after(&m, &cursor);
    assert_eq!(unexpected_storm_lines(&lines), Vec::<String>::new());
    // The lines read are the storm's: the last pod's start is among them.
    let started = format!(
        "podunit-sync: starting pod {NS}/{last} ({})",
        pod_unit(NS, &last)
    );
    assert!(lines.contains(&started), "{started:?} in {lines:#?}");
    assert_eq!(failed_podunit_units(&m), "");
}

/// A DaemonSet has its one pod on a node its node selector matches (the node's labels come from
/// the node config), and none on another, which `podunit check` says (not an error); once the
/// node carries the label, a reload starts it.
#[test]
fn a_daemon_set_runs_on_the_nodes_it_selects() {
    let m = Machine::boot("daemon-set");
    start_sync(&m);
    let ds = |name: &str, selector: &str| {
        format!(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: {name}}}\nspec:\n  \
             selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: \
             {{app: {name}}}}}\n    spec:\n      nodeSelector: {{{selector}}}\n      \
             terminationGracePeriodSeconds: 1\n      containers: [{{name: c, image: host, \
             command: [sleep, infinity]}}]\n"
        )
    };
    m.write(
        "/etc/pods.d/agents.yaml",
        format!(
            "{}---\n{}",
            ds("everywhere", "kubernetes.io/os: linux"),
            ds("ssd-only", "disktype: ssd")
        )
        .as_bytes(),
    );
    m.daemon_reload();
    let pod = m.wait_for("everywhere's pod", SOON, || {
        pods_named(&m, "everywhere-").pop()
    });
    assert_eq!(pod.len(), "everywhere-".len() + 5, "{pod}");
    wait_state(&m, &ctr_unit(NS, &pod, "c"), &["active"]);
    assert!(pods_named(&m, "ssd-only").is_empty());
    let check = m.sh("podunit check /etc/pods.d/agents.yaml");
    let said = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{said}");
    assert!(
        said.contains(
            "default/ssd-only: spec.nodeSelector: note: DaemonSet default/ssd-only has no pod on \
             this node: Predicate NodeAffinity failed"
        ),
        "{said}"
    );

    m.write("/etc/podunit/config.yaml", b"nodeLabels: {disktype: ssd}\n");
    m.daemon_reload();
    let ssd = m.wait_for("ssd-only's pod", SOON, || pods_named(&m, "ssd-only-").pop());
    wait_state(&m, &ctr_unit(NS, &ssd, "c"), &["active"]);
    assert_eq!(
        pods_named(&m, "everywhere-"),
        std::slice::from_ref(&pod),
        "the other DaemonSet's pod is kept"
    );

    // A taint on the node: the DaemonSets that do not tolerate it lose their pods, one that
    // does gets its pod.
    m.write(
        "/etc/podunit/config.yaml",
        b"nodeLabels: {disktype: ssd}\n\
          registerWithTaints: [{key: dedicated, value: edge, effect: NoSchedule}]\n",
    );
    let tolerant = ds("tolerant", "kubernetes.io/os: linux").replace(
        "      containers:",
        "      tolerations: [{key: dedicated, operator: Equal, value: edge, effect: NoSchedule}]\n      containers:",
    );
    m.write(
        "/etc/pods.d/agents.yaml",
        format!(
            "{}---\n{}---\n{tolerant}",
            ds("everywhere", "kubernetes.io/os: linux"),
            ds("ssd-only", "disktype: ssd")
        )
        .as_bytes(),
    );
    m.daemon_reload();
    let tolerated = m.wait_for("tolerant's pod", SOON, || pods_named(&m, "tolerant-").pop());
    wait_state(&m, &ctr_unit(NS, &tolerated, "c"), &["active"]);
    for gone in [&pod, &ssd] {
        wait_state(&m, &ctr_unit(NS, gone, "c"), &["inactive", "failed"]);
    }
    let check = m.sh("podunit check /etc/pods.d/agents.yaml");
    let said = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(
        said.contains(
            "DaemonSet default/everywhere has no pod on this node: node(s) had untolerated \
             taint {dedicated: edge}"
        ),
        "{said}"
    );
}
