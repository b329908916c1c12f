//! `make bench`: time from `systemctl daemon-reload` to every container running, for 1, 10 and
//! 100 pods, next to the same for hand-written equivalent units started by hand right after the
//! reload (the floor: systemd's own cost), once bare and once with the sandbox directives podunit
//! gives the container (its mount, IPC and UTS namespaces, capability bounding set, CPU weight),
//! which says what that sandbox costs systemd. Runs on the nspawn harness (root, systemd-nspawn).
//!
//! The podunit side runs again with `network: cni` (Debian's bridge, host-local and portmap
//! plugins): every pod then gets a network namespace, an address and a CNI ADD at start and a DEL
//! at removal; its column beside the host network's says what that costs.
//!
//! Both sides are measured with systemd's own clock: t0 is the wall clock just before the reload
//! (taken inside the machine), the end is the latest `ActiveEnterTimestamp` of the container
//! units, so polling latency never counts.

mod support;

use support::nspawn::Machine;
use support::reload::{all_active_at, median, now_us, reload_to_running, wait_gone, write_all};

const SIZES: [usize; 3] = [1, 10, 100];
const ROUNDS: usize = 3;

fn pod_manifest(i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i}\n  namespace: bench\nspec:\n  containers:\n  - name: c\n    image: host\n    command: [\"/bin/sleep\", \"infinity\"]\n"
    )
}

/// What the generator makes of a pod, reduced to what systemd must do: a slice, a oneshot pod
/// unit, a container service bound to it, with `sandbox` (unit file lines) added to the container.
fn floor_units(i: usize, sandbox: &str) -> Vec<(String, String)> {
    vec![
        (
            format!("floor{i}.slice"),
            "[Unit]\nDescription=floor pod\n".to_string(),
        ),
        (
            format!("floor{i}.service"),
            format!(
                "[Unit]\nDescription=floor pod\n[Service]\nType=oneshot\nRemainAfterExit=yes\nSlice=floor{i}.slice\nExecStart=/bin/true\n"
            ),
        ),
        (
            format!("floor{i}-c.service"),
            format!(
                "[Unit]\nRequires=floor{i}.service\nAfter=floor{i}.service\nPartOf=floor{i}.service\n[Service]\nType=exec\nSlice=floor{i}.slice\nExecStart=/bin/sleep infinity\n{sandbox}"
            ),
        ),
    ]
}

/// The bridge network the CNI rounds use (a /16: rounds overlap while the last one's DELs run).
const CONFLIST: &str = r#"{"cniVersion": "1.0.0", "name": "bench", "plugins": [
  {"type": "bridge", "bridge": "podunit0", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.89.0.0/16"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}"#;

/// A podunit round with the node config's `network:` set to `network`.
fn podunit_round_on(m: &Machine, n: usize, network: &str) -> f64 {
    m.write(
        "/etc/podunit/config.yaml",
        format!("network: {network}\n").as_bytes(),
    );
    podunit_round(m, n)
}

fn podunit_round(m: &Machine, n: usize) -> f64 {
    let files: Vec<(String, String)> = (0..n)
        .map(|i| (format!("p{i}.yaml"), pod_manifest(i)))
        .collect();
    let units: Vec<String> = (0..n)
        .map(|i| podunit::translate::naming::container_service("bench", &format!("p{i}"), "c"))
        .collect();
    reload_to_running(m, "bench", &files, &units)
}

/// The container's sandbox as podunit renders it for the benchmark pod: its `[Service]` lines
/// except what runs and logs the process and ties it to its pod.
fn podunit_sandbox(m: &Machine) -> String {
    m.write("/tmp/sandbox-probe.yaml", pod_manifest(0).as_bytes());
    let out = m.sh_ok("podunit render /tmp/sandbox-probe.yaml");
    let unit = podunit::translate::naming::container_service("bench", "p0", "c");
    let body = out
        .split("# ==> ")
        .find(|part| part.starts_with(&format!("{unit} <==")))
        .expect("render prints the container unit");
    let not_sandbox = [
        "Type",
        "Restart",
        "RestartSec",
        "Slice",
        "ExecStart",
        "ExecStartPre",
        "ExecStopPost",
        "Environment",
        "EnvironmentFile",
        "SyslogIdentifier",
        "LogExtraFields",
        "KillMode",
        "KillSignal",
        "TimeoutStopSec",
        "SendSIGKILL",
        "WorkingDirectory",
    ];
    let lines: String = body
        .lines()
        .skip_while(|l| *l != "[Service]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| {
            l.split_once('=')
                .is_some_and(|(k, _)| !not_sandbox.contains(&k))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        lines.contains("PrivateTmp="),
        "no sandbox found in:\n{body}"
    );
    lines
}

fn floor_round(m: &Machine, n: usize, sandbox: &str) -> f64 {
    let files: Vec<(String, String)> = (0..n).flat_map(|i| floor_units(i, sandbox)).collect();
    write_all(m, "/etc/systemd/system", &files);
    let units: Vec<String> = (0..n).map(|i| format!("floor{i}-c.service")).collect();
    let t0 = now_us(m);
    m.sh_ok(&format!(
        "systemctl daemon-reload && systemctl start --no-block {}",
        units.join(" ")
    ));
    let end = all_active_at(m, &units);
    m.sh_ok(&format!(
        "systemctl stop {} && rm -f /etc/systemd/system/floor* && systemctl daemon-reload",
        (0..n)
            .map(|i| format!("floor{i}.service floor{i}.slice"))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    wait_gone(m, "floor*");
    (end.saturating_sub(t0)) as f64 / 1000.0
}

fn main() {
    let m = Machine::boot("bench-reload");
    if m.read("/usr/lib/systemd/system/podunit-sync.service")
        .is_none()
    {
        m.write(
            "/etc/systemd/system/podunit-sync.service",
            b"[Unit]\nAfter=dbus.service\n[Service]\nType=notify\nExecStart=/usr/bin/podunit-sync\n",
        );
        m.sh_ok("systemctl daemon-reload");
    }
    m.sh_ok("systemctl start podunit-sync.service");
    m.write("/etc/cni/net.d/87-bench.conflist", CONFLIST.as_bytes());
    println!(
        "daemon-reload to all containers running (median of {ROUNDS} rounds, ms; {} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    let sandbox = podunit_sandbox(&m);
    println!(
        "{:>5}  {:>10}  {:>10}  {:>16}  {:>6}  {:>12}  {:>8}",
        "pods", "podunit", "floor", "floor + sandbox", "ratio", "podunit cni", "cni/host"
    );
    for n in SIZES {
        let mut ours = Vec::new();
        let mut floor = Vec::new();
        let mut sandboxed = Vec::new();
        let mut cni = Vec::new();
        for _ in 0..ROUNDS {
            ours.push(podunit_round_on(&m, n, "host"));
            floor.push(floor_round(&m, n, ""));
            sandboxed.push(floor_round(&m, n, &sandbox));
            cni.push(podunit_round_on(&m, n, "cni"));
        }
        let (o, f, b, c) = (median(ours), median(floor), median(sandboxed), median(cni));
        println!(
            "{n:>5}  {o:>10.1}  {f:>10.1}  {b:>16.1}  {:>6.2}  {c:>12.1}  {:>8.2}",
            o / b,
            c / o
        );
    }
    println!(
        "(ratio: podunit / (floor + sandbox), the same work for systemd; cni/host: podunit with \
         network: cni over podunit on the host network)\nsandbox directives of the floor + sandbox column:\n{sandbox}"
    );
}
