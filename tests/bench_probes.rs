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

/// What podunit-sync has used so far: CPU time in ns of its main process (utime + stime of
/// /proc/PID/stat, all threads) and of its cgroup as systemd accounts it (`CPUUsageNSec`, which
/// adds any child processes; None where systemd has no CPU accounting for it), VmRSS and VmHWM
/// in kB.
struct Usage {
    process_ns: u64,
    cgroup_ns: Option<u64>,
    rss_kb: u64,
    hwm_kb: u64,
}

fn usage(m: &Machine, pid: &str) -> Usage {
    let cgroup_ns = m.prop("podunit-sync.service", "CPUUsageNSec").parse().ok();
    let out = m.sh_ok(&format!(
        "getconf CLK_TCK; cut -d' ' -f14,15 /proc/{pid}/stat; \
         awk '/^VmRSS:/ {{ r = $2 }} /^VmHWM:/ {{ h = $2 }} END {{ print r, h }}' /proc/{pid}/status"
    ));
    let mut f = out
        .split_whitespace()
        .map(|v| v.parse::<u64>().expect("number"));
    let mut next = || f.next().expect("field");
    let (hz, utime, stime) = (next(), next(), next());
    Usage {
        process_ns: (utime + stime) * 1_000_000_000 / hz,
        cgroup_ns,
        rss_kb: next(),
        hwm_kb: next(),
    }
}

/// (process CPU s, cgroup CPU s, VmRSS kB, VmHWM kB) over a phase.
type Measured = (f64, Option<f64>, u64, u64);

/// Writes the pods, waits for all of them, lets them settle, then measures `secs`.
fn phase(m: &Machine, probes: bool, secs: u64) -> Measured {
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
    let u0 = usage(m, &pid);
    std::thread::sleep(Duration::from_secs(secs));
    let u1 = usage(m, &pid);
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
    let cgroup = u0
        .cgroup_ns
        .zip(u1.cgroup_ns)
        .map(|(a, b)| (b - a) as f64 / 1e9);
    (
        (u1.process_ns - u0.process_ns) as f64 / 1e9,
        cgroup,
        u1.rss_kb,
        u1.hwm_kb,
    )
}

fn main() {
    let secs: u64 = std::env::var("BENCH_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let m = Machine::boot("bench-probes");
    start_sync(&m);
    // CPUUsageNSec needs CPU accounting, which the machine's systemd may not default to.
    m.sh_ok("systemctl set-property --runtime podunit-sync.service CPUAccounting=yes");
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
    for (what, (cpu, cgroup, rss, hwm)) in [("without probes", without), ("with probes", with)] {
        println!(
            "{what:<16} CPU {cpu:>6.2} s ({:.2} %; cgroup {})  VmRSS {:.1} MiB  VmHWM {:.1} MiB",
            100.0 * cpu / secs as f64,
            cgroup.map_or("not accounted".to_string(), |c| format!("{c:.2} s")),
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
    }
}
