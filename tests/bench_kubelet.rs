//! `make bench-kubelet`: the kubelet API's costs in podunit-sync, on the nspawn harness with the
//! real kube-apiserver (tests/support/controlplane.rs) so that every request is authenticated
//! and authorised as in a cluster (root, systemd-nspawn, the control plane built once).
//!
//! 1. Memory: podunit-sync's `VmRSS`, `RssAnon`, `RssFile` and threads, idle, with the kubelet
//!    server off (`kubeletServer.port: 0`), then on, then after a round of requests (`/healthz`,
//!    `/stats/summary`, `/pods`, 8 clients at once); and where the anonymous memory is
//!    (/proc/PID/smaps: heap, thread stacks, malloc arenas).
//! 2. Log streaming: a container's log of `BENCH_LOG_LINES` (default 200 000) lines of 100 bytes
//!    read through `/containerLogs` at the node's port, plain and `follow=true` (until the last
//!    line), against `journalctl` reading the same entries directly (`-o cat`, and `-o json`, what
//!    the server reads). MB/s and lines/s, and the CPU time spent: podunit-sync's with the
//!    journalctl it runs, or journalctl's alone.
//!
//! Each number is printed with the host's load average: the machine is shared, so prefer the
//! counts (bytes, CPU time) over the rates.

mod support;

use std::time::{Duration, Instant};
use support::controlplane::{ControlPlane, NODE_KUBECONFIG};
use support::mem::anon_by_kind;
use support::nspawn::Machine;
use support::pods::{SOON, ctr_unit, start_sync, wait_state};

const NODE: &str = "bench-kubelet";
const PORT: u16 = 10250;
const LINE_BYTES: usize = 100;

fn config(m: &Machine, extra: &str) {
    m.write(
        "/etc/podunit/config.yaml",
        format!("nodeName: {NODE}\nkubeconfig: {NODE_KUBECONFIG}\n{extra}").as_bytes(),
    );
    start_sync(m);
}

fn sync_pid(m: &Machine) -> String {
    m.prop("podunit-sync.service", "MainPID")
}

/// utime + stime of a process in the machine and of its children it waited for (podunit-sync's
/// journalctl), in clock ticks.
fn cpu_ticks(m: &Machine, pid: &str) -> u64 {
    let stat = m.sh_ok(&format!("cat /proc/{pid}/stat"));
    let after = &stat[stat.rfind(')').expect("stat") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11..15].iter().map(|v| v.parse::<u64>().unwrap()).sum()
}

/// One memory line: VmRSS, RssAnon, RssFile, threads, and the anonymous memory by kind.
fn memory(m: &Machine, what: &str) {
    let pid = sync_pid(m);
    let status = m.sh_ok(&format!("cat /proc/{pid}/status"));
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    println!(
        "{what:<34} VmRSS {:>9}  RssAnon {:>9}  RssFile {:>9}  threads {:>3}  (load {})",
        field("VmRSS:"),
        field("RssAnon:"),
        field("RssFile:"),
        field("Threads:"),
        support::load_average()
    );
    println!("{:<34} {}", "", anon_by_kind(m, &pid));
}

/// curl at the node's port as the cluster admin, in the machine's network (a shell snippet).
fn curl(cp: &ControlPlane) -> String {
    let (crt, key) = cp.client_cert("bench-admin", "bench-admin", "system:masters");
    format!("curl -sk --cert {} --key {}", crt.display(), key.display())
}

/// Runs a host shell script in the machine's network namespace; returns stdout.
fn in_net(m: &Machine, script: &str) -> String {
    let out = support::run_ok(
        std::process::Command::new("nsenter")
            .arg(format!("--net=/proc/{}/ns/net", m.leader()))
            .args(["--", "sh", "-c", script]),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `MB/s, lines/s` of `bytes` and `lines` in `secs`.
fn rate(bytes: u64, lines: u64, secs: f64) -> String {
    format!(
        "{:>7.1} MB/s {:>9.0} lines/s",
        bytes as f64 / 1e6 / secs,
        lines as f64 / secs
    )
}

fn main() {
    let lines: u64 = std::env::var("BENCH_LOG_LINES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let m = Machine::boot("bench-kubelet");
    let cp = ControlPlane::start(&m, NODE);
    // journald keeps every line of the log writer (its default drops past 10 000 in 30 s).
    m.write(
        "/etc/systemd/journald.conf.d/bench.conf",
        b"[Journal]\nRateLimitBurst=0\nRateLimitIntervalSec=0\n",
    );
    m.sh_ok("systemctl restart systemd-journald");

    println!("== podunit-sync memory, idle (10 s after each step)");
    config(&m, "kubeletServer:\n  port: 0\n");
    std::thread::sleep(Duration::from_secs(10));
    memory(&m, "kubelet server off");
    config(&m, "");
    m.wait_for("the kubelet port", SOON, || {
        let code = in_net(
            &m,
            &format!(
                "curl -sk -o /dev/null -w '%{{http_code}}' https://127.0.0.1:{PORT}/healthz || true"
            ),
        );
        (code == "401").then_some(())
    });
    std::thread::sleep(Duration::from_secs(10));
    memory(&m, "kubelet server on");
    let c = curl(&cp);
    let round = format!(
        "for i in $(seq 8); do (for j in $(seq 25); do \
         {c} -o /dev/null https://127.0.0.1:{PORT}/healthz; \
         {c} -o /dev/null https://127.0.0.1:{PORT}/stats/summary; \
         {c} -o /dev/null https://127.0.0.1:{PORT}/pods; done) & done; wait"
    );
    in_net(&m, &round);
    std::thread::sleep(Duration::from_secs(10));
    memory(&m, "after 600 requests, 8 at once");
    in_net(&m, &round);
    std::thread::sleep(Duration::from_secs(10));
    memory(&m, "after 1200 requests");

    println!("== log streaming, {lines} lines of {LINE_BYTES} bytes");
    let line = "x".repeat(LINE_BYTES - 8);
    let script = format!(
        "i=0; while [ $i -lt {lines} ]; do printf '%07d {line}\\n' $i; i=$((i+1)); done; \
         exec sleep infinity"
    );
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "logger", "namespace": "default"},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "host",
                "command": ["/bin/bash", "-c", script]}]}});
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&pod.to_string()));
    wait_state(&m, &ctr_unit("default", "logger", "main"), &["active"]);
    let matches = "POD_NAMESPACE=default POD_NAME=logger CONTAINER_NAME=main";
    let last = format!("{:07}", lines - 1);
    m.wait_for(
        "every line in the journal",
        Duration::from_secs(600),
        || {
            m.sh(&format!(
                "journalctl -o cat -n 1 {matches} | grep -q '^{last} '"
            ))
            .status
            .success()
            .then_some(())
        },
    );
    let url = format!("https://127.0.0.1:{PORT}/containerLogs/default/logger/main");
    let bytes = lines * LINE_BYTES as u64;
    // Each reader: best of 3 wall times, and the CPU time of the process that served it.
    let timed = |what: &str, run: &dyn Fn() -> u64, server_ticks: &dyn Fn() -> u64| {
        let mut best = f64::MAX;
        let mut ticks = u64::MAX;
        for _ in 0..3 {
            let t0 = server_ticks();
            let start = Instant::now();
            let got = run();
            let secs = start.elapsed().as_secs_f64();
            let t = server_ticks() - t0;
            assert_eq!(got, lines, "{what}: lines read");
            best = best.min(secs);
            ticks = ticks.min(t);
        }
        println!(
            "{what:<44} {}  best {:>6.2} s  CPU {:>5.2} s  (load {})",
            rate(bytes, lines, best),
            best,
            ticks as f64 / 100.0,
            support::load_average()
        );
    };
    let pid = sync_pid(&m);
    let sync_ticks = || cpu_ticks(&m, &pid);
    let count = |out: String| out.trim().parse::<u64>().expect("a count");
    timed(
        "/containerLogs (podunit-sync)",
        &|| count(in_net(&m, &format!("{c} {url} | wc -l"))),
        &sync_ticks,
    );
    timed(
        "/containerLogs?follow=true, to the last line",
        &|| {
            count(in_net(
                &m,
                // A follow never ends by itself: curl goes once the last line is in.
                &format!(
                    "f=$(mktemp -u); mkfifo $f; {c} -N '{url}?follow=true' > $f & p=$!; \
                     n=$(head -n {lines} $f | wc -l); kill $p; rm -f $f; echo $n"
                ),
            ))
        },
        &sync_ticks,
    );
    // journalctl's own CPU time: the machine's shell reports its children's.
    let journal = |args: &str| {
        let script = format!(
            "n=$(journalctl --no-pager {args} {matches} | wc -l); \
             set -- $(cat /proc/$$/stat | cut -d' ' -f16,17); echo \"$n $(( $1 + $2 ))\""
        );
        m.sh_ok(&script)
    };
    let last_ticks = std::cell::Cell::new(0u64);
    for args in ["-o cat", "-o json --output-fields=MESSAGE"] {
        timed(
            &format!("journalctl {args}"),
            &|| {
                let out = journal(args);
                let mut f = out.split_whitespace();
                let n = f.next().unwrap().parse().unwrap();
                last_ticks.set(f.next().unwrap().parse().unwrap());
                n
            },
            &|| last_ticks.replace(0),
        );
    }
    memory(&m, "podunit-sync after the log reads");
}
