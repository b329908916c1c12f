//! `make bench`: what probes cost podunit-sync. 110 pods (the kubelet's default pod limit), each
//! with a liveness and a readiness `httpGet` probe every 10 s against a server on the node, on the
//! nspawn harness in local mode: podunit-sync's CPU time and VmRSS/VmHWM over `BENCH_IDLE_SECS`
//! (default 60), next to the same 110 pods without probes. httpGet is the probe podunit-sync runs
//! itself (an exec probe is a transient unit: systemd's cost more than podunit-sync's).

mod support;

use std::time::Duration;
use support::nspawn::Machine;
use support::pods::{active_since, ctr_unit, start_sync, wait_state};

const PODS: usize = 110;
const LIMIT: Duration = Duration::from_secs(600);

/// One HTTP/1.1 answer per connection, 200 for everything.
const SERVER: &str = r#"use IO::Socket::INET;
my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 18080, Listen => 128, ReuseAddr => 1) or die "listen: $!";
while (my $c = $s->accept) {
  while (my $l = <$c>) { last if $l =~ /^\r?\n$/ }
  print $c "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  close $c;
}
"#;

fn pod(i: usize, probes: bool) -> String {
    let probes = if probes {
        "    livenessProbe: {httpGet: {host: 127.0.0.1, port: 18080, path: /live}, periodSeconds: 10}\n    readinessProbe: {httpGet: {host: 127.0.0.1, port: 18080, path: /ready}, periodSeconds: 10}\n"
    } else {
        ""
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: bench}}\nspec:\n  containers:\n  - name: c\n    image: host\n    command: [/bin/sleep, infinity]\n{probes}"
    )
}

/// (CPU time in ns of podunit-sync's cgroup as systemd accounts it, VmRSS kB, VmHWM kB of its
/// main process).
fn usage(m: &Machine, pid: &str) -> (u64, u64, u64) {
    let ns: u64 = m
        .prop("podunit-sync.service", "CPUUsageNSec")
        .parse()
        .expect("CPUUsageNSec (CPU accounting)");
    let kb = m.sh_ok(&format!(
        "awk '/^VmRSS:/ {{ r = $2 }} /^VmHWM:/ {{ h = $2 }} END {{ print r, h }}' /proc/{pid}/status"
    ));
    let mut f = kb.split_whitespace().map(|v| v.parse::<u64>().expect("kB"));
    (ns, f.next().expect("VmRSS"), f.next().expect("VmHWM"))
}

/// Writes the pods, waits for all of them, lets them settle, then measures `secs`.
fn phase(m: &Machine, probes: bool, secs: u64) -> (f64, u64, u64) {
    let mut script = String::from("set -e\n");
    for i in 0..PODS {
        script.push_str(&format!(
            "cat > /etc/pods.d/p{i}.yaml <<'EOF'\n{}EOF\n",
            pod(i, probes)
        ));
    }
    m.sh_ok(&script);
    m.sh_ok("systemctl daemon-reload && systemctl start podunit.target");
    let units: Vec<String> = (0..PODS)
        .map(|i| ctr_unit("bench", &format!("p{i}"), "c"))
        .collect();
    m.wait_for("all containers running", LIMIT, || {
        (active_since(m, &units).len() == PODS).then_some(())
    });
    std::thread::sleep(Duration::from_secs(15));
    let pid = m.prop("podunit-sync.service", "MainPID");
    let (t0, _, _) = usage(m, &pid);
    std::thread::sleep(Duration::from_secs(secs));
    let (t1, rss, hwm) = usage(m, &pid);
    assert_eq!(
        pid,
        m.prop("podunit-sync.service", "MainPID"),
        "podunit-sync restarted during the bench"
    );
    if probes {
        // The readiness probes ran and passed: every bench pod is ready.
        let status = m.sh_ok("podunit status");
        let ready = status
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.get(1).is_some_and(|n| n.starts_with('p')) && f.get(2) == Some(&"1/1"))
            .count();
        assert!(ready >= PODS, "not all pods ready:\n{status}");
    }
    ((t1 - t0) as f64 / 1e9, rss, hwm)
}

fn main() {
    let secs: u64 = std::env::var("BENCH_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let m = Machine::boot("bench-probes");
    start_sync(&m);
    m.write(
        "/etc/pods.d/server.yaml",
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: server, namespace: bench}}\nspec:\n  containers:\n  - name: s\n    image: host\n    command: [/usr/bin/perl, -e, {}]\n",
            support::pods::yaml_str(SERVER)
        )
        .as_bytes(),
    );
    m.sh_ok("systemctl daemon-reload && systemctl start podunit.target");
    wait_state(&m, &ctr_unit("bench", "server", "s"), &["active"]);
    let without = phase(&m, false, secs);
    let with = phase(&m, true, secs);
    println!(
        "probes: {PODS} pods, liveness + readiness httpGet every 10 s, podunit-sync over {secs} s ({} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    for (what, (cpu, rss, hwm)) in [("without probes", without), ("with probes", with)] {
        println!(
            "{what:<16} CPU {cpu:>6.2} s ({:.2} %)  VmRSS {:.1} MiB  VmHWM {:.1} MiB",
            100.0 * cpu / secs as f64,
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
    }
}
