//! `make bench`: time from `systemctl daemon-reload` to every container running, for 1, 10 and
//! 100 pods, next to the same for hand-written equivalent units started by hand right after the
//! reload (the floor: systemd's own cost), once bare and once with the sandbox directives podunit
//! gives the container (its mount, IPC and UTS namespaces, capability bounding set, CPU weight),
//! which says what that sandbox costs systemd. Runs on the nspawn harness (root, systemd-nspawn).
//!
//! The podunit side runs again with `network: cni` and no file in /etc/cni/net.d, so on podunit's
//! own bridge network (`src/cni/default_network.rs`: Debian's bridge with host-local, portmap,
//! firewall and bandwidth plugins): every pod then gets a network namespace, an address and a CNI
//! ADD at start and a DEL at removal; its column beside the host network's says what that costs.
//!
//! Both sides are measured with systemd's own clock: t0 is the wall clock just before the reload
//! (taken inside the machine), the end is the latest `ActiveEnterTimestamp` of the container
//! units, so polling latency never counts.
//!
//! Two more parts (`cargo test --release --test bench_reload -- cni`; `reload` runs the table
//! above alone; no argument, all):
//! - One pod's ADD and DEL: running pods stopped and started again one at a time, and the run
//!   time of the pod unit's `pod-prepare` (its `ExecStart`, which runs ADD) and `pod-cleanup`
//!   (its `ExecStopPost`, which runs DEL) as systemd recorded them, with `network: cni` against
//!   `network: private` (the same units and namespaces, no CNI): the difference is ADD, and DEL.
//!   Beside it, the same plugins run by hand from bash (Debian has no `cnitool`): their own cost.
//! - podunit-sync's idle memory with [`IDLE_PODS`] pods, `network: cni` against `host`.

mod support;

use support::mem::anon_by_kind;
use support::nspawn::Machine;
use support::reload::{all_active_at, median, now_us, reload_to_running, wait_gone, write_all};

const SIZES: [usize; 3] = [1, 10, 100];
const ROUNDS: usize = 3;

/// The benchmark pod: one container sleeping. As its PID 1 `sleep` ignores SIGTERM, so the
/// removal of each round would wait out the default grace period of 30 s: 0 makes that the
/// shortest podunit gives (2 s), outside every figure.
fn pod_manifest(i: usize) -> String {
    manifest(i, r#"["/bin/sleep", "infinity"]"#)
}

/// A pod whose container `command` is given (YAML flow sequence).
fn manifest(i: usize, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i}\n  namespace: bench\nspec:\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: host\n    command: {command}\n"
    )
}

/// The pods of the ADD and DEL part: a container that exits on SIGTERM, so each stop is as
/// quick as the pod's own commands.
fn quick_stop_manifest(i: usize) -> String {
    manifest(
        i,
        r#"["/bin/sh", "-c", "trap 'exit 0' TERM; sleep infinity & wait"]"#,
    )
}

/// What the generator makes of a pod, reduced to what systemd must do: a slice, a oneshot pod
/// unit, a container service bound to it, with `sandbox` (unit file lines) added to the container.
/// With a sandbox the pod unit gets the pod's namespaces too, as podunit's does (`PrivateIPC=`,
/// and `PrivateTmp=`, which systemd 252 hands to a unit that joins it), and the container joins
/// them (`JoinsNamespaceOf=`): the same units, so the same work for systemd.
fn floor_units(i: usize, sandbox: &str) -> Vec<(String, String)> {
    let (pod_ns, join) = if sandbox.is_empty() {
        (String::new(), String::new())
    } else {
        (
            "PrivateIPC=yes\nPrivateTmp=yes\n".to_string(),
            format!("JoinsNamespaceOf=floor{i}.service\n"),
        )
    };
    vec![
        (
            format!("floor{i}.slice"),
            "[Unit]\nDescription=floor pod\n".to_string(),
        ),
        (
            format!("floor{i}.service"),
            format!(
                "[Unit]\nDescription=floor pod\n[Service]\nType=oneshot\nRemainAfterExit=yes\nSlice=floor{i}.slice\nExecStart=/bin/true\n{pod_ns}"
            ),
        ),
        (
            format!("floor{i}-c.service"),
            format!(
                "[Unit]\nRequires=floor{i}.service\nAfter=floor{i}.service\nPartOf=floor{i}.service\n{join}[Service]\nType=exec\nSlice=floor{i}.slice\nExecStart=/bin/sleep infinity\n{sandbox}"
            ),
        ),
    ]
}

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

/// The container's sandbox as podunit renders it for the benchmark pod on the host network: its
/// `[Service]` lines except what runs and logs the process and ties it to its pod.
fn podunit_sandbox(m: &Machine) -> String {
    m.write("/etc/podunit/config.yaml", b"network: host\n");
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

/// `release` or `debug`, for the tables' titles.
fn build() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The reload table: podunit (host network and `network: cni`) against the hand-written floor.
fn reload_table(m: &Machine) {
    let t = std::time::Instant::now();
    let load_before = support::load_average();
    println!();
    println!(
        "daemon-reload to all containers running (median of {ROUNDS} rounds, ms; {} build)",
        build()
    );
    let sandbox = podunit_sandbox(m);
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
            ours.push(podunit_round_on(m, n, "host"));
            floor.push(floor_round(m, n, ""));
            sandboxed.push(floor_round(m, n, &sandbox));
            cni.push(podunit_round_on(m, n, "cni"));
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
    // The last cni round's removal runs a DEL per pod in podunit-sync's cleanup units.
    wait_gone(m, "podunit-cleanup-*");
    println!(
        "(load average {load_before} -> {}; took {:.0} s)",
        support::load_average(),
        t.elapsed().as_secs_f64()
    );
}

/// Pods per network in the ADD and DEL part, each stopped and started again once per round.
const CYCLED_PODS: usize = 10;
/// Rounds of the ADD and DEL part, `network: private` and `cni` taking turns.
const CYCLE_ROUNDS: usize = 3;
/// Pods running while podunit-sync's idle memory is read.
const IDLE_PODS: usize = 10;
/// How long after the last container started podunit-sync's memory is read.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

fn pod_unit(i: usize) -> String {
    podunit::translate::naming::pod_service("bench", &format!("p{i}"))
}

fn container_unit(i: usize) -> String {
    podunit::translate::naming::container_service("bench", &format!("p{i}"), "c")
}

/// Sets the node config's `network:`, writes `n` pods (`pod`), reloads and waits for every
/// container.
fn pods_up(m: &Machine, n: usize, network: &str, pod: fn(usize) -> String) {
    m.write(
        "/etc/podunit/config.yaml",
        format!("network: {network}\n").as_bytes(),
    );
    let files: Vec<(String, String)> = (0..n).map(|i| (format!("p{i}.yaml"), pod(i))).collect();
    write_all(m, "/etc/pods.d", &files);
    m.sh_ok("systemctl daemon-reload");
    all_active_at(m, &(0..n).map(container_unit).collect::<Vec<_>>());
}

/// Removes the `n` pods and waits until their units and podunit-sync's cleanup units (which
/// run their DELs) are gone.
fn pods_down(m: &Machine, n: usize) {
    let names: Vec<String> = (0..n).map(|i| format!("p{i}.yaml")).collect();
    m.sh_ok(&format!(
        "cd /etc/pods.d && rm -f {} && systemctl daemon-reload",
        names.join(" ")
    ));
    wait_gone(m, "podunit-bench_*");
    wait_gone(m, "podunit-cleanup-*");
}

/// The run time (ms) of a command of a service, from a `busctl get-property` line of an
/// `ExecStart`-like property (`a(sasbttttuii) 1 PATH N ARGV... IGNORE START_REALTIME
/// START_MONOTONIC EXIT_REALTIME EXIT_MONOTONIC PID CODE STATUS`): the monotonic µs from fork
/// to exit, as systemd recorded them. Panics unless it ran once and exited 0.
fn run_ms(line: &str) -> f64 {
    let t: Vec<&str> = line.split_whitespace().collect();
    assert!(
        t.len() >= 9 && t[1] == "1",
        "not one command's record: {line:?}"
    );
    let n = |k: usize| -> u64 {
        t[t.len() - k]
            .parse()
            .unwrap_or_else(|_| panic!("field {k} from the end of {line:?}"))
    };
    // CLD_EXITED (1), status 0.
    assert!(n(2) == 1 && n(1) == 0, "the command failed: {line:?}");
    let (start, exit) = (n(6), n(4));
    assert!(exit > start, "no exit recorded: {line:?}");
    (exit - start) as f64 / 1000.0
}

/// Stops running pod `i` and starts it again, on its own; returns the run times (ms) of its
/// `pod-cleanup` (`ExecStopPost`) and `pod-prepare` (`ExecStart`).
fn cycle(m: &Machine, i: usize) -> (f64, f64) {
    let (pod, c) = (pod_unit(i), container_unit(i));
    let path = podunit::systemd::props::unit_path(&pod);
    let prop = |p: &str| {
        format!(
            "busctl get-property org.freedesktop.systemd1 {path} org.freedesktop.systemd1.Service {p}"
        )
    };
    let out = m.sh_ok(&format!(
        "set -e\nsystemctl stop {pod}\n{}\nsystemctl start {pod}\n\
         n=0; until systemctl is-active -q {c}; do n=$((n+1)); [ $n -lt 3000 ]; sleep 0.01; done\n{}\n",
        prop("ExecStopPost"),
        prop("ExecStart"),
    ));
    let mut lines = out.lines();
    let (stop, start) = (
        lines.next().expect("ExecStopPost"),
        lines.next().expect("ExecStart"),
    );
    (run_ms(stop), run_ms(start))
}

/// podunit's own network in local mode, as `pod-prepare` makes it with no file in /etc/cni/net.d.
fn own_network() -> podunit::cni::config::NetworkConfigList {
    use podunit::cni::default_network::{LOCAL_SUBNET, bridge};
    bridge(&[LOCAL_SUBNET.to_string()]).expect("podunit's own network")
}

/// The same ADD and DEL without podunit: podunit's own network configuration, each plugin run
/// by a bash script as libcni runs it (stdin from podunit's own `plugin_config`, each ADD result
/// the next plugin's `prevResult`, DEL in reverse with the last result), in a namespace from
/// `ip netns add`, with the 'bench-floor-N' container ID: what the plugins themselves cost, the
/// floor of any CNI runtime. Returns each plugin's ADD and DEL (ms, in the list's order), timed
/// with bash's `$EPOCHREALTIME`.
fn plugins_by_hand(m: &Machine, n: usize) -> (Vec<f64>, Vec<f64>) {
    use podunit::cni::invoke::plugin_config;
    let list = own_network();
    let none = serde_json::Map::new();
    let prev = serde_json::Value::String("@PREV@".into());
    let id = format!("bench-floor-{n}");
    let mut script = format!(
        "set -e\nshopt -u patsub_replacement 2>/dev/null || true\n\
         bin() {{ for d in /opt/cni/bin /usr/lib/cni; do if [ -x $d/$1 ]; then echo $d/$1; return; fi; done; return 1; }}\n\
         ip netns add {id}\n\
         export CNI_CONTAINERID={id} CNI_NETNS=/run/netns/{id} CNI_IFNAME=eth0 \
         CNI_PATH=/opt/cni/bin:/usr/lib/cni \
         CNI_ARGS='IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME={id};K8S_POD_INFRA_CONTAINER_ID={id};K8S_POD_UID={id}'\n"
    );
    let mut add = String::new();
    let mut del = String::new();
    for (k, plugin) in list.plugins.iter().enumerate() {
        let kind = plugin["type"].as_str().expect("plugin type");
        let conf = |p: Option<&serde_json::Value>| {
            let c = plugin_config(&list, plugin, p, &none)
                .to_string()
                .replace("\"@PREV@\"", "@PREV@");
            assert!(!c.contains('\''), "{c}");
            c
        };
        script.push_str(&format!(
            "p{k}=$(bin {kind})\na{k}='{}'\nd{k}='{}'\n",
            conf((k > 0).then_some(&prev)),
            conf(Some(&prev))
        ));
        add.push_str(&format!(
            "r=$(CNI_COMMAND=ADD $p{k} <<<\"${{a{k}/@PREV@/$r}}\")\nt=\"$t $EPOCHREALTIME\"\n"
        ));
        del.insert_str(
            0,
            &format!(
                "CNI_COMMAND=DEL $p{k} <<<\"${{d{k}/@PREV@/$r}}\" >/dev/null\nt=\"$t $EPOCHREALTIME\"\n"
            ),
        );
    }
    script.push_str(&format!(
        "r=\nt=$EPOCHREALTIME\n{add}{del}ip netns del {id}\necho $t\n"
    ));
    let out = m.sh_ok(&format!("exec bash -c {}", shell_quote(&script)));
    let t: Vec<f64> = out
        .split_whitespace()
        .map(|v| v.parse().expect("$EPOCHREALTIME"))
        .collect();
    assert_eq!(t.len(), 2 * list.plugins.len() + 1, "{out}");
    let mut steps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]) * 1000.0).collect();
    let mut dels = steps.split_off(list.plugins.len());
    dels.reverse();
    (steps, dels)
}

/// `s` as one word for sh.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// One pod's CNI ADD and DEL: `pod-prepare` and `pod-cleanup` with `network: cni` against
/// `network: private`, each pod stopped and started again on its own; and the plugins by hand.
fn add_del(m: &Machine) {
    let t = std::time::Instant::now();
    let nets = ["private", "cni"];
    let mut prepare: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut cleanup: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut hand: Vec<(Vec<f64>, Vec<f64>)> = Vec::new();
    let load_before = support::load_average();
    for _ in 0..CYCLE_ROUNDS {
        for (k, net) in nets.iter().enumerate() {
            pods_up(m, CYCLED_PODS, net, quick_stop_manifest);
            for i in 0..CYCLED_PODS {
                let (stop, start) = cycle(m, i);
                cleanup[k].push(stop);
                prepare[k].push(start);
            }
            if *net == "cni" {
                // Beside the same running pods: the same bridge, address store and rules.
                for i in 0..CYCLED_PODS {
                    hand.push(plugins_by_hand(m, i));
                }
            }
            pods_down(m, CYCLED_PODS);
        }
    }
    // `ip netns add` made /run/netns a mount point; the pods' pins under it are gone.
    m.sh_ok("if mountpoint -q /run/netns; then umount /run/netns; fi");
    let samples = prepare[0].len();
    let [p_private, p_cni] = prepare.map(median);
    let [c_private, c_cni] = cleanup.map(median);
    println!();
    println!(
        "one pod's CNI ADD and DEL on podunit's own bridge network (no file in /etc/cni/net.d): \
         {CYCLED_PODS} running pods stopped and started again one at a time, {CYCLE_ROUNDS} rounds; \
         median of {samples} runs, ms; {} build; load average {load_before} -> {}",
        build(),
        support::load_average()
    );
    println!("{:<44}  {:>10}  {:>10}", "", "start/ADD", "stop/DEL");
    for (what, a, d) in [
        (
            "pod-prepare / pod-cleanup, network: private",
            p_private,
            c_private,
        ),
        ("pod-prepare / pod-cleanup, network: cni", p_cni, c_cni),
        (
            "podunit's ADD / DEL (cni - private)",
            p_cni - p_private,
            c_cni - c_private,
        ),
        (
            "the plugins alone, run by hand (bash)",
            median(hand.iter().map(|(a, _)| a.iter().sum()).collect()),
            median(hand.iter().map(|(_, d)| d.iter().sum()).collect()),
        ),
    ] {
        println!("{what:<44}  {a:>10.1}  {d:>10.1}");
    }
    for (k, plugin) in own_network().plugins.iter().enumerate() {
        println!(
            "{:<44}  {:>10.1}  {:>10.1}",
            format!("  of which {}", plugin["type"].as_str().unwrap_or("?")),
            median(hand.iter().map(|(a, _)| a[k]).collect()),
            median(hand.iter().map(|(_, d)| d[k]).collect()),
        );
    }
    println!(
        "(pod-prepare, pod-cleanup: the run time of the pod unit's ExecStart and ExecStopPost, \
         fork to exit, as systemd recorded them; took {:.0} s)",
        t.elapsed().as_secs_f64()
    );
}

/// podunit-sync's memory from /proc in the machine: VmRSS, Pss, RssAnon, RssFile (kB), and
/// its anonymous memory by kind.
fn sync_memory(m: &Machine) -> ([u64; 4], String) {
    let pid = m.prop("podunit-sync.service", "MainPID");
    let out = m.sh_ok(&format!("cat /proc/{pid}/status /proc/{pid}/smaps_rollup"));
    let kb = |key: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{key} of podunit-sync (PID {pid})"))
    };
    (
        [kb("VmRSS:"), kb("Pss:"), kb("RssAnon:"), kb("RssFile:")],
        anon_by_kind(m, &pid),
    )
}

/// podunit-sync's idle memory with [`IDLE_PODS`] pods, `network: host` against `cni`: a fresh
/// podunit-sync for each, the pods started by one reload, read [`SETTLE`] after the last
/// container started.
fn idle_memory(m: &Machine) {
    let t = std::time::Instant::now();
    println!();
    println!(
        "podunit-sync idle with {IDLE_PODS} pods, {} s after the last container started \
         (a fresh podunit-sync each; kB; {} build)",
        SETTLE.as_secs(),
        build()
    );
    println!(
        "{:<8}  {:>8}  {:>8}  {:>8}  {:>8}  anonymous by kind",
        "network", "VmRSS", "Pss", "RssAnon", "RssFile"
    );
    for net in ["host", "cni"] {
        m.sh_ok("systemctl restart podunit-sync.service");
        pods_up(m, IDLE_PODS, net, pod_manifest);
        std::thread::sleep(SETTLE);
        let ([rss, pss, anon, file], kinds) = sync_memory(m);
        println!("{net:<8}  {rss:>8}  {pss:>8}  {anon:>8}  {file:>8}  {kinds}");
        pods_down(m, IDLE_PODS);
    }
    println!(
        "(load average {}; took {:.0} s)",
        support::load_average(),
        t.elapsed().as_secs_f64()
    );
}

fn main() {
    // Arguments pick parts: `reload` (the table), `cni` (ADD and DEL, idle memory); none, all.
    let parts: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |p: &str| parts.is_empty() || parts.iter().any(|a| a == p);
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
    // podunit's own network: nothing in the configuration directory.
    let conf = m.sh_ok("ls -A /etc/cni/net.d 2>/dev/null || true");
    assert!(
        conf.trim().is_empty(),
        "/etc/cni/net.d is not empty: {conf}"
    );
    // The short parts first, on a machine not yet busy with the 100-pod rounds.
    if wanted("cni") {
        add_del(&m);
        idle_memory(&m);
    }
    if wanted("reload") {
        reload_table(&m);
    }
}
