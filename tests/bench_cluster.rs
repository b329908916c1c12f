//! `make bench-cluster`: cluster mode at the kubelet's default maximum of 110 pods, on the nspawn
//! harness (root, systemd-nspawn). The API server double runs inside the machine (as in
//! tests/cluster_e2e.rs) and podunit-sync is the node's kubelet.
//!
//! 1. Steady state, the view of Kubernetes' pod startup SLO: 110 pods created one at a time, each
//!    waited for until the API shows it Running and Ready, so the node fills up to 110 as it goes.
//! 2. A burst: the last 80 of them are deleted, and 80 new pods are created at once (podunit-sync
//!    must coalesce the reloads). For each it measures, from the wall clock just before its
//!    create request was sent:
//!    - the latest `ActiveEnterTimestamp` of its container units (systemd's own clock);
//!    - the time the API server double received the status write that made it `Running` and
//!      `Ready` (its access log, µs; the write is found by the resourceVersion of the watch event
//!      it caused).
//!
//!    Host and machine share CLOCK_REALTIME, so these clocks compare.
//! 3. Idle: with the 110 pods running and nothing changing, podunit-sync's VmRSS/VmHWM and its CPU
//!    time over `BENCH_IDLE_SECS` (default 60) seconds.

mod support;

use k8s_openapi::api::core::v1::Pod;
use podunit::kube::client::{self, Client, DeleteOptions, ListParams};
use podunit::kube::watch::Event;
use podunit::systemd::props::unit_path;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::api::{self, API_DIR, admin, join_machine_network};
use support::mem::{anon_by_kind, file_by_name};
use support::nspawn::Machine;
use support::pods::{SOON, active_since, ctr_unit, pod_unit, wait_state};

const NODE: &str = "bench-node";
const ACCESS_LOG: &str = "/var/lib/fake-api/access.log";
const NS: &str = "default";
/// The kubelet's default `maxPods`.
const PODS: usize = 110;
/// Pods deleted after the steady-state phase and then created again at once.
const BURST: usize = 80;
/// Pods of the steady-state phase that stay through the burst.
const KEPT: usize = PODS - BURST;
const CONTAINERS: [&str; 2] = ["app", "sidecar"];
/// Generous: the bench fails with the stragglers named when a pod is not up by then.
const LIMIT: Duration = Duration::from_secs(300);

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_micros() as i64
}

/// The API server double in the machine: no state file (its rewrite after every change would be
/// the double's cost, not podunit's), a watch history long enough to replay the whole burst.
fn start_api(m: &Machine) {
    api::start(
        m,
        NODE,
        &format!("--history-window 1000000 --access-log {ACCESS_LOG}"),
    );
}

fn pod_name(i: usize) -> String {
    format!("bench-{i}")
}

/// A small realistic pod: two long-running containers on the host image, an env var, a shared
/// emptyDir.
fn pod(i: usize) -> serde_json::Value {
    pod_named(&pod_name(i))
}

/// The pods of the steady-state phase.
fn one_name(i: usize) -> String {
    format!("one-{i}")
}

fn pod_named(name: &str) -> serde_json::Value {
    let containers: Vec<serde_json::Value> = CONTAINERS
        .iter()
        .map(|c| {
            json!({"name": c, "image": "host", "command": ["/bin/sleep", "infinity"],
                "env": [{"name": "ROLE", "value": c}],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "bench"}},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 5,
            "containers": containers,
            "volumes": [{"name": "scratch", "emptyDir": {}}]}})
}

fn is_running_ready(p: &Pod) -> bool {
    let Some(st) = &p.status else { return false };
    st.phase.as_deref() == Some("Running")
        && st
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// `ExecMainStartTimestamp` (µs: when systemd forked the main process) of each service.
fn forked_at(m: &Machine, units: &[String]) -> Vec<i64> {
    let script: String = units
        .iter()
        .map(|u| {
            format!(
                "busctl get-property org.freedesktop.systemd1 {} org.freedesktop.systemd1.Service ExecMainStartTimestamp\n",
                unit_path(u)
            )
        })
        .collect();
    m.sh_ok(&script)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("t ")?.parse().ok())
        .collect()
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The access log's status writes: resourceVersion -> when it was received (µs).
fn status_writes(m: &Machine) -> HashMap<String, i64> {
    let log = m.read_string(ACCESS_LOG).expect("access log");
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| {
            r["method"] == "PATCH"
                && r["code"] == 200
                && r["path"].as_str().is_some_and(|p| p.ends_with("/status"))
        })
        .filter_map(|r| {
            Some((
                r["resourceVersion"].as_str()?.to_string(),
                r["timeUs"].as_i64()?,
            ))
        })
        .collect()
}

/// Replays the namespace's watch history from `since`: per pod, the resourceVersion of the first
/// event showing it Running and Ready.
fn ready_versions(api: &Client, since: &str) -> HashMap<String, String> {
    let params = ListParams {
        resource_version: Some(since.to_string()),
        timeout_seconds: Some(20),
        ..Default::default()
    };
    let stream = api
        .watch::<Pod>(&client::path::<Pod>(Some(NS), None), &params)
        .expect("watch the burst's history");
    let mut found = HashMap::new();
    for ev in stream {
        let p = match ev.expect("watch event") {
            Event::Added(p) | Event::Modified(p) => p,
            _ => continue,
        };
        let name = p.metadata.name.clone().unwrap_or_default();
        if name.starts_with("bench-") && is_running_ready(&p) && !found.contains_key(&name) {
            found.insert(
                name,
                p.metadata.resource_version.clone().unwrap_or_default(),
            );
            if found.len() == BURST {
                break;
            }
        }
    }
    found
}

/// A `kB` field of /proc/PID/status.
fn status_kb(m: &Machine, pid: &str, key: &str) -> u64 {
    m.sh_ok(&format!("cat /proc/{pid}/status"))
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{key} in /proc/{pid}/status"))
}

/// (utime + stime in clock ticks, VmRSS kB, VmHWM kB) of the machine's podunit-sync.
fn sync_usage(m: &Machine, pid: &str) -> (u64, u64, u64) {
    let stat = m.sh_ok(&format!("cat /proc/{pid}/stat"));
    let after = &stat[stat.rfind(')').expect("stat") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of proc(5) (utime, stime) are 12 and 13 after "pid (comm)".
    let ticks = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    let status = m.sh_ok(&format!("cat /proc/{pid}/status"));
    let kb = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{key} in /proc/{pid}/status"))
    };
    (ticks, kb("VmRSS:"), kb("VmHWM:"))
}

/// When systemd started each daemon-reload so far (µs, from its journal).
fn reload_times(m: &Machine) -> Vec<i64> {
    m.sh_ok("journalctl -b _PID=1 -o short-unix --no-pager | grep ' Reloading' || true")
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse::<f64>().ok())
        .map(|t| (t * 1e6) as i64)
        .collect()
}

/// Modification times (µs) of the spool's pod files.
fn spool_times(m: &Machine) -> Vec<i64> {
    m.sh_ok("find /var/lib/podunit/spool -name '*.yaml' -printf '%T@\\n'")
        .lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .map(|t| (t * 1e6) as i64)
        .collect()
}

/// CPU ticks (utime + stime) of each thread of process `pid`, by "tid comm".
fn thread_ticks(m: &Machine, pid: &str) -> BTreeMap<String, u64> {
    m.sh_ok(&format!("cat /proc/{pid}/task/*/stat"))
        .lines()
        .filter_map(|stat| {
            let open = stat.find('(')?;
            let close = stat.rfind(')')?;
            let f: Vec<&str> = stat[close + 2..].split_whitespace().collect();
            let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            Some((
                format!("{} {}", stat[..open].trim(), &stat[open + 1..close]),
                ticks,
            ))
        })
        .collect()
}

fn main() {
    let idle_secs: u64 = std::env::var("BENCH_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let m = Machine::boot("bench-cluster");
    api::install(&m);
    start_api(&m);
    m.write(
        "/etc/podunit/config.yaml",
        format!("nodeName: {NODE}\nkubeconfig: {API_DIR}/node-{NODE}.kubeconfig\n").as_bytes(),
    );
    assert!(
        m.read("/usr/lib/systemd/system/podunit-sync.service")
            .is_some(),
        "the packaged podunit-sync.service is installed"
    );
    // BENCH_SYNC_ENV="K=V ..." runs podunit-sync with that environment (allocator experiments).
    if let Ok(env) = std::env::var("BENCH_SYNC_ENV") {
        m.write(
            "/etc/systemd/system/podunit-sync.service.d/bench.conf",
            format!("[Service]\nEnvironment={env}\n").as_bytes(),
        );
        m.daemon_reload();
    }
    m.sh_ok("systemctl restart podunit-sync.service");
    wait_state(&m, "podunit-sync.service", &["active"]);
    let mounts = m.sh_ok("wc -l < /proc/self/mountinfo").trim().to_string();
    let clk_tck: u64 = m.sh_ok("getconf CLK_TCK").trim().parse().unwrap();

    let units: Vec<(usize, String)> = (KEPT..PODS)
        .flat_map(|i| CONTAINERS.map(|c| (i, ctr_unit(NS, &pod_name(i), c))))
        .collect();
    let unit_names: Vec<String> = units.iter().map(|(_, u)| u.clone()).collect();

    std::thread::scope(|s| {
        s.spawn(|| {
            join_machine_network(&m);
            let api = admin(&m);
            // podunit-sync is watching this node's pods before the burst starts.
            m.wait_for("podunit-sync to watch its pods", SOON, || {
                let log = m.read_string(ACCESS_LOG)?;
                log.lines()
                    .any(|l| {
                        l.contains("\"path\":\"/api/v1/pods\"")
                            && l.contains("watch=")
                            && l.contains(&format!("system:node:{NODE}"))
                    })
                    .then_some(())
            });
            // Steady state: pods created one at a time, each waited for (API polled every 20 ms,
            // so "posted" is late by up to that much plus one request).
            let mut one_running = Vec::new();
            let mut one_posted = Vec::new();
            for i in 0..PODS {
                let name = one_name(i);
                let ctrs: Vec<String> = CONTAINERS.iter().map(|c| ctr_unit(NS, &name, c)).collect();
                let t = now_us();
                let _: Pod = api
                    .create(&client::path::<Pod>(Some(NS), None), &pod_named(&name))
                    .unwrap_or_else(|e| panic!("creating {name}: {e}"));
                let deadline = Instant::now() + LIMIT;
                let path = client::path::<Pod>(Some(NS), Some(&name));
                loop {
                    if api.get::<Pod>(&path).is_ok_and(|p| is_running_ready(&p)) {
                        one_posted.push((now_us() - t) as f64 / 1000.0);
                        break;
                    }
                    assert!(Instant::now() < deadline, "{name} not Running and Ready\n{}", m.diagnostics());
                    std::thread::sleep(Duration::from_millis(20));
                }
                let active = active_since(&m, &ctrs);
                assert_eq!(active.len(), ctrs.len(), "{name}: Ready before its containers ran");
                one_running.push((active.values().max().unwrap() - t) as f64 / 1000.0);
            }
            // By how full the node was: the median of each tenth, in creation order.
            let by_fill: Vec<String> = one_posted
                .chunks(PODS / 10)
                .enumerate()
                .map(|(i, c)| {
                    let mut c = c.to_vec();
                    c.sort_by(|a, b| a.partial_cmp(b).unwrap());
                    format!("{}+: {:.0}", i * (PODS / 10), c[c.len() / 2])
                })
                .collect();
            for v in [&mut one_running, &mut one_posted] {
                v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            }

            // Make room for the burst: the last BURST pods go, and their units with them.
            for i in KEPT..PODS {
                let path = client::path::<Pod>(Some(NS), Some(&one_name(i)));
                api.delete(&path, &DeleteOptions::default())
                    .unwrap_or_else(|e| panic!("deleting {}: {e}", one_name(i)));
            }
            let gone_units: Vec<String> = (KEPT..PODS).map(|i| pod_unit(NS, &one_name(i))).collect();
            m.wait_for("the deleted pods to be gone, units and objects", LIMIT, || {
                let left = api
                    .list::<Pod>(&client::path::<Pod>(Some(NS), None), &ListParams::default())
                    .ok()?
                    .items
                    .len();
                let loaded = m.sh_ok(&format!(
                    "systemctl list-units --all --plain --no-legend {}",
                    gone_units.join(" ")
                ));
                (left == KEPT && loaded.trim().is_empty()).then_some(())
            });
            let since = api
                .list::<Pod>(&client::path::<Pod>(Some(NS), None), &ListParams::default())
                .unwrap()
                .metadata
                .resource_version
                .expect("list resourceVersion");
            let reloads_before = reload_times(&m).len();
            let sync_pid = m.sh_ok("systemctl show -p MainPID --value podunit-sync.service");
            let (sync_ticks0, rss_before_burst, _) = sync_usage(&m, sync_pid.trim());
            let pid1_ticks0 = sync_usage(&m, "1").0;
            let load_before = support::load_average();

            // The burst: every pod created back to back.
            let mut created: BTreeMap<String, i64> = BTreeMap::new();
            for i in KEPT..PODS {
                let t = now_us();
                let _: Pod = api
                    .create(&client::path::<Pod>(Some(NS), None), &pod(i))
                    .unwrap_or_else(|e| panic!("creating {}: {e}", pod_name(i)));
                created.insert(pod_name(i), t);
            }
            let burst_ms = (now_us() - created[&pod_name(KEPT)]) as f64 / 1000.0;

            // Every container running (systemd's timestamps), then every pod Running in the API.
            let deadline = Instant::now() + LIMIT;
            let active = loop {
                let a = active_since(&m, &unit_names);
                if a.len() == unit_names.len() {
                    break a;
                }
                if Instant::now() > deadline {
                    let missing: Vec<&String> =
                        unit_names.iter().filter(|u| !a.contains_key(*u)).collect();
                    panic!(
                        "{} of {} container units not running after {LIMIT:?}: {:?}...\n{}",
                        missing.len(),
                        unit_names.len(),
                        &missing[..missing.len().min(10)],
                        m.diagnostics()
                    );
                }
                std::thread::sleep(Duration::from_millis(500));
            };
            let ready = loop {
                let list = api
                    .list::<Pod>(&client::path::<Pod>(Some(NS), None), &ListParams::default())
                    .unwrap();
                let n = list.items.iter().filter(|p| is_running_ready(p)).count();
                if n == PODS {
                    break n;
                }
                if Instant::now() > deadline {
                    let missing: Vec<String> = list
                        .items
                        .iter()
                        .filter(|p| !is_running_ready(p))
                        .filter_map(|p| p.metadata.name.clone())
                        .take(10)
                        .collect();
                    panic!(
                        "only {n} of {PODS} pods Running and Ready in the API after {LIMIT:?} \
                         (e.g. {missing:?})\n{}",
                        m.diagnostics()
                    );
                }
                std::thread::sleep(Duration::from_millis(500));
            };
            assert_eq!(ready, PODS);
            let load_burst = support::load_average();
            let sync_burst_s = (sync_usage(&m, sync_pid.trim()).0 - sync_ticks0) as f64 / clk_tck as f64;
            let pid1_burst_s = (sync_usage(&m, "1").0 - pid1_ticks0) as f64 / clk_tck as f64;
            let reload_at: Vec<i64> = reload_times(&m).split_off(reloads_before);
            let reloads = reload_at.len();
            let pod_units: Vec<String> = (KEPT..PODS)
                .map(|i| pod_unit(NS, &pod_name(i)))
                .collect();
            let pods_up = active_since(&m, &pod_units);
            let spooled = spool_times(&m);
            let forked = forked_at(&m, &unit_names);

            // Per pod: created -> all containers running, created -> Running+Ready posted.
            let writes = status_writes(&m);
            let versions = ready_versions(&api, &since);
            let mut to_running = Vec::new();
            let mut to_posted = Vec::new();
            let mut posted_at = Vec::new();
            for (name, t0) in &created {
                let last = units
                    .iter()
                    .filter(|(i, _)| pod_name(*i) == *name)
                    .map(|(_, u)| active[u])
                    .max()
                    .unwrap();
                to_running.push((last - t0) as f64 / 1000.0);
                let rv = versions.get(name).unwrap_or_else(|| {
                    panic!("no watch event shows {name} Running and Ready")
                });
                let at = writes.get(rv).unwrap_or_else(|| {
                    panic!("no status write of {name} produced resourceVersion {rv}")
                });
                to_posted.push((at - t0) as f64 / 1000.0);
                posted_at.push(*at);
            }
            for v in [&mut to_running, &mut to_posted] {
                v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            }

            // Idle: 110 pods running, nothing changing. Let the last status writes settle first.
            std::thread::sleep(Duration::from_secs(10));
            let pid = sync_pid.trim().to_string();
            let requests_before = m
                .read_string(ACCESS_LOG)
                .map(|l| l.lines().count())
                .unwrap_or(0);
            let load_idle_before = support::load_average();
            let threads0 = thread_ticks(&m, &pid);
            let (t0_ticks, _, _) = sync_usage(&m, &pid);
            let t0 = Instant::now();
            std::thread::sleep(Duration::from_secs(idle_secs));
            let (t1_ticks, rss, hwm) = sync_usage(&m, &pid);
            let (anon, file) = (
                status_kb(&m, &pid, "RssAnon:"),
                status_kb(&m, &pid, "RssFile:"),
            );
            let wall = t0.elapsed().as_secs_f64();
            let anon_kinds = anon_by_kind(&m, &pid);
            let file_names = file_by_name(&m, &pid);
            let threads: Vec<String> = thread_ticks(&m, &pid)
                .into_iter()
                .filter_map(|(t, v)| {
                    let d = v.saturating_sub(*threads0.get(&t)?);
                    (d > 0).then(|| format!("{t}: {} ms", d * 1000 / clk_tck))
                })
                .collect();
            let load_idle = support::load_average();
            let requests = m
                .read_string(ACCESS_LOG)
                .map(|l| l.lines().count())
                .unwrap_or(0)
                - requests_before;
            let pid_after = m.sh_ok("systemctl show -p MainPID --value podunit-sync.service");
            assert_eq!(pid, pid_after.trim(), "podunit-sync restarted during the bench");
            let cpu_s = (t1_ticks - t0_ticks) as f64 / clk_tck as f64;

            println!(
                "cluster mode: {PODS} pods ({} containers each) one at a time; then {BURST} of them deleted and {BURST} new ones created at once ({} build)",
                CONTAINERS.len(),
                if cfg!(debug_assertions) {
                    "debug"
                } else {
                    "release"
                }
            );
            println!(
                "  burst: {BURST} creates took {burst_ms:.1} ms; {reloads} daemon-reload(s)"
            );
            println!("  load average: before {load_before}, after the burst {load_burst}");
            println!(
                "  CPU time until all were Ready: podunit-sync {sync_burst_s:.2} s, systemd (PID 1) {pid1_burst_s:.2} s; {mounts} mounts in the machine"
            );
            // Where the time goes: each step's first and last occurrence after the first create.
            let start = created[&pod_name(KEPT)];
            let span = |what: &str, v: &[i64]| {
                let rel = |t: i64| format!("{:.0}", (t - start) as f64 / 1000.0);
                match (v.iter().min(), v.iter().max()) {
                    (Some(a), Some(b)) => println!("  {what:<38} {:>8} .. {:>8}", rel(*a), rel(*b)),
                    _ => println!("  {what:<38} {:>8}", "-"),
                }
            };
            println!("  timeline, ms after the first create (first .. last):");
            span("spool files written", &spooled);
            span("daemon-reload started", &reload_at);
            span("pod units active (pod-prepare done)", &pods_up.values().copied().collect::<Vec<_>>());
            span("container processes forked", &forked);
            span("container units active (exec done)", &active.values().copied().collect::<Vec<_>>());
            span("Running+Ready status received", &posted_at);
            println!();
            println!(
                "one at a time, Running+Ready seen, median by pods already running (ms): {}",
                by_fill.join(", ")
            );
            println!(
                "{:<40} {:>10} {:>10} {:>10}",
                "per pod, from its create request (ms)", "p50", "p99", "max"
            );
            for (what, v) in [
                ("one at a time: all containers running", &one_running),
                ("one at a time: Running+Ready seen", &one_posted),
                ("burst: all containers running", &to_running),
                ("burst: status Running+Ready posted", &to_posted),
            ] {
                println!(
                    "{what:<40} {:>10.1} {:>10.1} {:>10.1}",
                    pct(v, 50.0),
                    pct(v, 99.0),
                    v[v.len() - 1]
                );
            }
            println!();
            println!(
                "podunit-sync idle with {PODS} pods, {wall:.0} s (load average {load_idle_before} -> {load_idle}):"
            );
            println!("{:<40} {:>10}", "VmRSS", format!("{:.1} MiB", rss as f64 / 1024.0));
            println!(
                "{:<40} {:>10}",
                "  of which RssAnon (heap, stacks)",
                format!("{:.1} MiB", anon as f64 / 1024.0)
            );
            println!(
                "{:<40} {:>10}",
                "  of which RssFile (the program's pages)",
                format!("{:.1} MiB", file as f64 / 1024.0)
            );
            println!(
                "{:<40} {:>10}",
                "VmRSS before the burst (30 pods)",
                format!("{:.1} MiB", rss_before_burst as f64 / 1024.0)
            );
            println!("{:<40} {:>10}", "VmHWM", format!("{:.1} MiB", hwm as f64 / 1024.0));
            println!(
                "{:<40} {:>10}",
                "CPU (user+sys / wall)",
                format!("{:.2} %", 100.0 * cpu_s / wall)
            );
            println!("{:<40} {:>10}", "API requests while idle", requests);
            println!("  CPU by thread while idle: {}", threads.join(", "));
            let names: Vec<String> = threads0.keys().cloned().collect();
            println!("  {} threads: {}", names.len(), names.join(", "));
            println!("  anonymous: {anon_kinds}");
            println!("  file pages: {file_names}");
        })
        .join()
        .unwrap_or_else(|_| panic!("{}", m.diagnostics()));
    });
}
