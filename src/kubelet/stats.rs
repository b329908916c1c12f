//! `/stats/summary` and `/metrics/resource`: CPU and memory from the pods' cgroups (v2, or the
//! v1 `cpuacct` and `memory` hierarchies), the node's from its root cgroup and /proc/meminfo, the
//! volumes' filesystem use from their directories, a pod's network counters from its own network
//! namespace (`/proc/<pid>/net/dev` of one of its processes). Working set is usage less inactive file pages,
//! as cAdvisor counts it.

use crate::common::paths::Paths;
use crate::generate::output::GeneratedPod;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// A cgroup's CPU and memory, as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_ns: u64,
    pub memory_bytes: u64,
    pub working_set_bytes: u64,
    pub rss_bytes: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
}

/// `key value` lines (cpu.stat, memory.stat) as a map.
pub fn flat_keyed(text: &str) -> HashMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k, v.trim().parse().ok()?))
        })
        .collect()
}

/// Usage from cgroup v2 files: `cpu.stat`, `memory.current`, `memory.stat`.
pub fn usage_v2(cpu_stat: &str, memory_current: &str, memory_stat: &str) -> Usage {
    let cpu = flat_keyed(cpu_stat);
    let mem = flat_keyed(memory_stat);
    let current: u64 = memory_current.trim().parse().unwrap_or(0);
    let inactive = mem.get("inactive_file").copied().unwrap_or(0);
    Usage {
        cpu_ns: cpu.get("usage_usec").copied().unwrap_or(0) * 1000,
        memory_bytes: current,
        working_set_bytes: current.saturating_sub(inactive),
        rss_bytes: mem.get("anon").copied().unwrap_or(0),
        page_faults: mem.get("pgfault").copied().unwrap_or(0),
        major_page_faults: mem.get("pgmajfault").copied().unwrap_or(0),
    }
}

/// Usage from cgroup v1 files: `cpuacct.usage`, `memory.usage_in_bytes`, `memory.stat`.
pub fn usage_v1(cpuacct_usage: &str, usage_in_bytes: &str, memory_stat: &str) -> Usage {
    let mem = flat_keyed(memory_stat);
    let usage: u64 = usage_in_bytes.trim().parse().unwrap_or(0);
    let inactive = mem.get("total_inactive_file").copied().unwrap_or(0);
    Usage {
        cpu_ns: cpuacct_usage.trim().parse().unwrap_or(0),
        memory_bytes: usage,
        working_set_bytes: usage.saturating_sub(inactive),
        rss_bytes: mem.get("total_rss").copied().unwrap_or(0),
        page_faults: mem.get("total_pgfault").copied().unwrap_or(0),
        major_page_faults: mem.get("total_pgmajfault").copied().unwrap_or(0),
    }
}

/// The node's memory from /proc/meminfo: (total, available, usage, working set), in bytes.
pub fn node_memory(meminfo: &str) -> (u64, u64, u64, u64) {
    let kb = |key: &str| -> u64 {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
            * 1024
    };
    let (total, free, avail) = (kb("MemTotal"), kb("MemFree"), kb("MemAvailable"));
    let usage = total.saturating_sub(free);
    (
        total,
        avail,
        usage,
        usage.saturating_sub(kb("Inactive(file)")),
    )
}

/// Where the cgroup tree is and which layout it has.
#[derive(Debug, Clone)]
pub enum Cgroups {
    V2(PathBuf),
    /// The hierarchies that may hold `cpuacct` (mounted by name, which differs between hosts
    /// and containers) and the `memory` one.
    /// In the hybrid layout, the v2 tree beside them: its `cpu.stat` has CPU time whether or
    /// not a controller is on, where v1's cpuacct may not hold the unit at all.
    V1 {
        unified: PathBuf,
        cpu: Vec<PathBuf>,
        memory: PathBuf,
    },
}

impl Cgroups {
    pub fn detect(root: &Path) -> Cgroups {
        if root.join("cgroup.controllers").exists() {
            return Cgroups::V2(root.to_path_buf());
        }
        let cpu = ["cpu,cpuacct", "cpuacct,cpu", "cpuacct", "cpu"]
            .iter()
            .map(|d| root.join(d))
            .filter(|p| p.join("cpuacct.usage").exists())
            .collect();
        Cgroups::V1 {
            unified: root.join("unified"),
            cpu,
            memory: root.join("memory"),
        }
    }

    /// The usage of the cgroup at `rel` (`podunit.slice/...`; empty: the root); None when it is
    /// not there (a pod that stopped).
    pub fn usage(&self, rel: &str) -> Option<Usage> {
        let read = |p: PathBuf| std::fs::read_to_string(p).ok();
        match self {
            Cgroups::V2(root) => {
                let d = root.join(rel);
                let cpu = read(d.join("cpu.stat"))?;
                // The root cgroup has no memory files: its memory is the node's (meminfo).
                Some(usage_v2(
                    &cpu,
                    &read(d.join("memory.current")).unwrap_or_default(),
                    &read(d.join("memory.stat")).unwrap_or_default(),
                ))
            }
            Cgroups::V1 {
                unified,
                cpu,
                memory,
            } => {
                let cpu_ns = match read(unified.join(rel).join("cpu.stat")) {
                    Some(stat) => usage_v2(&stat, "", "").cpu_ns,
                    None => cpu
                        .iter()
                        .find_map(|h| read(h.join(rel).join("cpuacct.usage")))?
                        .trim()
                        .parse()
                        .unwrap_or(0),
                };
                let m = memory.join(rel);
                Some(usage_v1(
                    &cpu_ns.to_string(),
                    &read(m.join("memory.usage_in_bytes")).unwrap_or_default(),
                    &read(m.join("memory.stat")).unwrap_or_default(),
                ))
            }
        }
    }

    /// When the cgroup was made (its directory's change time), as the start time.
    fn started(&self, rel: &str) -> Option<i64> {
        let d = match self {
            Cgroups::V2(root) => root.join(rel),
            Cgroups::V1 {
                unified, memory, ..
            } => Some(unified.join(rel))
                .filter(|d| d.exists())
                .unwrap_or_else(|| memory.join(rel)),
        };
        std::fs::metadata(d).ok().map(|m| m.ctime())
    }
}

impl Cgroups {
    /// The processes in the cgroup at `rel` (itself, not below).
    pub fn processes(&self, rel: &str) -> Vec<u32> {
        let dirs = match self {
            Cgroups::V2(root) => vec![root.join(rel)],
            Cgroups::V1 {
                unified, memory, ..
            } => vec![unified.join(rel), memory.join(rel)],
        };
        dirs.iter()
            .find_map(|d| {
                let procs: Vec<u32> = std::fs::read_to_string(d.join("cgroup.procs"))
                    .ok()?
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                (!procs.is_empty()).then_some(procs)
            })
            .unwrap_or_default()
    }
}

/// One network interface's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetDev {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
}

/// The interfaces of `/proc/<pid>/net/dev` (two header lines, then `name: ` and 8 receive and 8
/// transmit counters), loopback left out as cAdvisor leaves it out.
pub fn net_dev(text: &str) -> Vec<NetDev> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|n| n.parse().unwrap_or(0))
                .collect();
            (name != "lo" && f.len() >= 16).then(|| NetDev {
                name: name.to_string(),
                rx_bytes: f[0],
                rx_errors: f[2],
                tx_bytes: f[8],
                tx_errors: f[10],
            })
        })
        .collect()
}

/// The interfaces of a pod's network namespace, read through one of its processes (`pid`).
fn pod_network(pid: u32) -> Vec<NetDev> {
    net_dev(&std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap_or_default())
}

/// The cgroup of a pod (its slice) and of one of its units, relative to the cgroup root.
pub fn pod_cgroup(slice: &str) -> String {
    format!("podunit.slice/{slice}")
}

/// Files walked at most when measuring a volume (a huge volume is reported as far as counted).
const MAX_WALK: usize = 100_000;

/// Bytes (allocated blocks) and inodes used under `dir`, not following symlinks nor leaving the
/// filesystem.
pub fn dir_usage(dir: &Path) -> (u64, u64) {
    let Ok(top) = std::fs::symlink_metadata(dir) else {
        return (0, 0);
    };
    let dev = top.dev();
    let (mut bytes, mut inodes) = (top.blocks() * 512, 1u64);
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            seen += 1;
            if seen > MAX_WALK {
                return (bytes, inodes);
            }
            let Ok(m) = e.metadata() else { continue };
            if m.dev() != dev {
                continue;
            }
            bytes += m.blocks() * 512;
            inodes += 1;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    (bytes, inodes)
}

fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .unwrap_or_default()
        .to_string()
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64
}

/// The rate of CPU use between calls, per cgroup.
#[derive(Default)]
pub struct CpuRates {
    last: Mutex<HashMap<String, (Instant, u64)>>,
}

impl CpuRates {
    /// Nanocores since the last sample of `key`; None on the first.
    pub fn rate(&self, key: &str, cpu_ns: u64) -> Option<u64> {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap();
        let prev = last.insert(key.to_string(), (now, cpu_ns));
        if last.len() > 4096 {
            last.clear();
        }
        let (t, ns) = prev?;
        let dt = now.duration_since(t).as_nanos() as u64;
        (dt > 0 && cpu_ns >= ns).then(|| (cpu_ns - ns).saturating_mul(1_000_000_000) / dt)
    }
}

fn cpu_json(u: &Usage, rate: Option<u64>, time: &str) -> Value {
    let mut v = json!({"time": time, "usageCoreNanoSeconds": u.cpu_ns});
    if let Some(r) = rate {
        v["usageNanoCores"] = json!(r);
    }
    v
}

fn memory_json(u: &Usage, time: &str) -> Value {
    json!({"time": time, "usageBytes": u.memory_bytes, "workingSetBytes": u.working_set_bytes,
        "rssBytes": u.rss_bytes, "pageFaults": u.page_faults, "majorPageFaults": u.major_page_faults})
}

/// One pod's numbers, as read.
pub struct PodStats {
    pub pod: GeneratedPod,
    pub started: i64,
    pub usage: Usage,
    /// (container, start, usage)
    pub containers: Vec<(String, i64, Usage)>,
    /// (volume name, used bytes, used inodes, fs capacity, fs available, fs inodes, fs inodes free)
    pub volumes: Vec<(String, u64, u64, u64, u64, u64, u64)>,
    /// The interfaces of its network namespace, when it has one of its own.
    pub network: Vec<NetDev>,
}

/// Everything the summary and the metrics are made of.
pub struct Sample {
    pub node: Usage,
    pub node_memory: (u64, u64, u64, u64),
    pub node_started: i64,
    pub pods: Vec<PodStats>,
    pub time: i64,
}

/// Reads the node's and the pods' numbers: volumes below the pods' state directories
/// (`<uid>/volumes/<name>`), network counters of the pods CNI attached (on the host network the
/// node's counters are not the pod's).
pub fn sample(cg: &Cgroups, pods: Vec<GeneratedPod>, paths: &Paths) -> Sample {
    let volume_base = paths.host(Paths::STATE);
    let mut node = cg.usage("").unwrap_or_default();
    let node_memory = node_memory(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default());
    node.memory_bytes = node_memory.2;
    node.working_set_bytes = node_memory.3;
    let boot = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split('.').next()?.parse::<i64>().ok())
        .map(|up| now_secs() - up)
        .unwrap_or(0);
    let mut out = Vec::new();
    for pod in pods {
        let Some(slice) = pod.slice.clone() else {
            continue;
        };
        let rel = pod_cgroup(&slice);
        let Some(usage) = cg.usage(&rel) else {
            continue;
        };
        let started = cg.started(&rel).unwrap_or(0);
        let containers = pod
            .containers
            .iter()
            .filter_map(|c| {
                let r = format!("{rel}/{}", c.unit);
                Some((c.name.clone(), cg.started(&r)?, cg.usage(&r)?))
            })
            .collect();
        let attached = pod.uid.as_deref().is_some_and(|uid| {
            let runtime_dir = crate::common::text::concat(&[Paths::RUNTIME, "/", uid]);
            crate::podstart::network::recorded_ips(paths, &runtime_dir).is_some()
        });
        let network = pod
            .containers
            .iter()
            .filter(|_| attached)
            .flat_map(|c| cg.processes(&format!("{rel}/{}", c.unit)))
            // A process may be gone by the time its counters are read (an exec session
            // ending): the next one's are the same namespace's.
            .map(pod_network)
            .find(|ifs| !ifs.is_empty())
            .unwrap_or_default();
        let mut volumes = Vec::new();
        if let Some(uid) = &pod.uid {
            let dir = volume_base.join(uid).join("volumes");
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let (used, inodes) = dir_usage(&e.path());
                let fs = nix::sys::statvfs::statvfs(&e.path()).ok();
                let f = |g: fn(&nix::sys::statvfs::Statvfs) -> u64| fs.as_ref().map(g).unwrap_or(0);
                volumes.push((
                    e.file_name().to_string_lossy().into_owned(),
                    used,
                    inodes,
                    f(|s| s.blocks() * s.fragment_size()),
                    f(|s| s.blocks_available() * s.fragment_size()),
                    f(|s| s.files()),
                    f(|s| s.files_free()),
                ));
            }
            volumes.sort();
        }
        out.push(PodStats {
            pod,
            started,
            usage,
            containers,
            volumes,
            network,
        });
    }
    Sample {
        node,
        node_memory,
        node_started: boot,
        pods: out,
        time: now_secs(),
    }
}

/// The kubelet's NetworkStats: the default interface (`eth0`, as the kubelet's CRI stats name
/// it) inline, and every interface in `interfaces`.
fn network_json(ifs: &[NetDev], time: &str) -> Option<Value> {
    let one = |i: &NetDev| {
        json!({"name": i.name, "rxBytes": i.rx_bytes, "rxErrors": i.rx_errors,
            "txBytes": i.tx_bytes, "txErrors": i.tx_errors})
    };
    let default = ifs.iter().find(|i| i.name == "eth0").or(ifs.first())?;
    let mut v = one(default);
    v["time"] = json!(time);
    v["interfaces"] = ifs.iter().map(one).collect();
    Some(v)
}

/// The kubelet's `stats/v1alpha1` Summary.
pub fn summary(node_name: &str, s: &Sample, rates: &CpuRates) -> Value {
    let time = rfc3339(s.time);
    let pods: Vec<Value> = s
        .pods
        .iter()
        .map(|p| {
            let key = &p.pod.key;
            let containers: Vec<Value> = p
                .containers
                .iter()
                .map(|(name, started, u)| {
                    let rate = rates.rate(&format!("{key}/{name}"), u.cpu_ns);
                    json!({"name": name, "startTime": rfc3339(*started),
                        "cpu": cpu_json(u, rate, &time), "memory": memory_json(u, &time)})
                })
                .collect();
            let volumes: Vec<Value> = p
                .volumes
                .iter()
                .map(|(name, used, inodes_used, cap, avail, inodes, free)| {
                    json!({"time": time, "name": name, "usedBytes": used, "inodesUsed": inodes_used,
                        "capacityBytes": cap, "availableBytes": avail, "inodes": inodes,
                        "inodesFree": free})
                })
                .collect();
            let rate = rates.rate(&key.to_string(), p.usage.cpu_ns);
            let mut pod = json!({
                "podRef": {"name": key.name, "namespace": key.namespace,
                    "uid": p.pod.uid.clone().unwrap_or_default()},
                "startTime": rfc3339(p.started),
                "containers": containers,
                "cpu": cpu_json(&p.usage, rate, &time),
                "memory": memory_json(&p.usage, &time),
                "volume": volumes,
            });
            if let Some(net) = network_json(&p.network, &time) {
                pod["network"] = net;
            }
            pod
        })
        .collect();
    let (_, available, _, _) = s.node_memory;
    let mut memory = memory_json(&s.node, &time);
    memory["availableBytes"] = json!(available);
    json!({
        "node": {
            "nodeName": node_name,
            "startTime": rfc3339(s.node_started),
            "cpu": cpu_json(&s.node, rates.rate("", s.node.cpu_ns), &time),
            "memory": memory,
        },
        "pods": pods,
    })
}

/// A Prometheus label value, escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The kubelet's `/metrics/resource`, in the Prometheus text format metrics-server reads.
pub fn resource_metrics(s: &Sample) -> String {
    let ms = s.time * 1000;
    let secs = |ns: u64| ns as f64 / 1e9;
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, String)>| {
        out += &format!("# HELP {name} [ALPHA] {help}\n# TYPE {name} {kind}\n");
        for (labels, value) in rows {
            out += &format!("{name}{labels} {value} {ms}\n");
        }
    };
    let ctr = |p: &PodStats, c: &str| {
        format!(
            "{{container=\"{}\",namespace=\"{}\",pod=\"{}\"}}",
            label(c),
            label(&p.pod.key.namespace),
            label(&p.pod.key.name)
        )
    };
    let pod = |p: &PodStats| {
        format!(
            "{{namespace=\"{}\",pod=\"{}\"}}",
            label(&p.pod.key.namespace),
            label(&p.pod.key.name)
        )
    };
    let each_ctr = |f: &dyn Fn(&Usage) -> String| -> Vec<(String, String)> {
        s.pods
            .iter()
            .flat_map(|p| p.containers.iter().map(move |(n, _, u)| (ctr(p, n), f(u))))
            .collect()
    };
    family(
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
        each_ctr(&|u| secs(u.cpu_ns).to_string()),
    );
    family(
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set of the container in bytes",
        each_ctr(&|u| u.working_set_bytes.to_string()),
    );
    family(
        "node_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
        vec![(String::new(), secs(s.node.cpu_ns).to_string())],
    );
    family(
        "node_memory_working_set_bytes",
        "gauge",
        "Current working set of the node in bytes",
        vec![(String::new(), s.node.working_set_bytes.to_string())],
    );
    family(
        "pod_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the pod in core-seconds",
        s.pods
            .iter()
            .map(|p| (pod(p), secs(p.usage.cpu_ns).to_string()))
            .collect(),
    );
    family(
        "pod_memory_working_set_bytes",
        "gauge",
        "Current working set of the pod in bytes",
        s.pods
            .iter()
            .map(|p| (pod(p), p.usage.working_set_bytes.to_string()))
            .collect(),
    );
    out += "# HELP scrape_error [ALPHA] 1 if there was an error while getting container metrics, 0 otherwise\n# TYPE scrape_error gauge\nscrape_error 0\n";
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::output::PodKey;

    #[test]
    fn v2_and_v1_files_give_the_same_usage() {
        let v2 = usage_v2(
            "usage_usec 1500\nuser_usec 1000\n",
            "10485760\n",
            "anon 4096\ninactive_file 1048576\npgfault 7\npgmajfault 1\n",
        );
        assert_eq!(v2.cpu_ns, 1_500_000);
        assert_eq!(v2.memory_bytes, 10 << 20);
        assert_eq!(v2.working_set_bytes, 9 << 20);
        assert_eq!(v2.rss_bytes, 4096);
        let v1 = usage_v1(
            "1500000\n",
            "10485760\n",
            "rss 1\ntotal_rss 4096\ninactive_file 5\ntotal_inactive_file 1048576\ntotal_pgfault 7\ntotal_pgmajfault 1\n",
        );
        assert_eq!(v1, v2);
        // More inactive file pages than usage (a race between the two files): never negative.
        assert_eq!(usage_v2("", "1", "inactive_file 5").working_set_bytes, 0);
    }

    #[test]
    fn node_memory_from_meminfo() {
        let m = "MemTotal:       1000 kB\nMemFree:         200 kB\nMemAvailable:    600 kB\nInactive(file):  300 kB\n";
        assert_eq!(node_memory(m), (1_024_000, 614_400, 819_200, 512_000));
    }

    #[test]
    fn cpu_rate_needs_two_samples() {
        let r = CpuRates::default();
        assert_eq!(r.rate("a", 100), None);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(r.rate("a", 1_000_000_100).is_some());
        // A counter that went back (a new cgroup of the same name) gives no rate.
        assert_eq!(r.rate("a", 5), None);
    }

    fn sample_with_one_pod() -> Sample {
        let u = Usage {
            cpu_ns: 2_500_000_000,
            memory_bytes: 300,
            working_set_bytes: 200,
            ..Default::default()
        };
        Sample {
            node: u,
            node_memory: (1000, 500, 300, 200),
            node_started: 0,
            pods: vec![PodStats {
                pod: GeneratedPod {
                    key: PodKey::new("default", "we\"b"),
                    uid: Some("u1".into()),
                    pod_unit: None,
                    slice: None,
                    containers: vec![],
                    source_path: None,
                    hash: String::new(),
                    job: None,
                    ordered: None,
                    workload: None,
                },
                started: 0,
                usage: u,
                containers: vec![("main".into(), 0, u)],
                volumes: vec![("data".into(), 4096, 2, 10, 5, 100, 50)],
                network: net_dev(NET_DEV),
            }],
            time: 1_700_000_000,
        }
    }

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     640       8    0    0    0     0          0         0      640       8    0    0    0     0       0          0
  eth0:    1496      12    1    0    0     0          0         0      866       9    2    0    0     0       0          0
";

    #[test]
    fn net_dev_counters_without_loopback() {
        assert_eq!(
            net_dev(NET_DEV),
            vec![NetDev {
                name: "eth0".into(),
                rx_bytes: 1496,
                rx_errors: 1,
                tx_bytes: 866,
                tx_errors: 2
            }]
        );
        assert!(net_dev("").is_empty());
        assert!(
            net_dev("a\nb\n  eth0: 1 2 3\n").is_empty(),
            "short lines are no interface"
        );
    }

    #[test]
    fn the_summary_has_the_kubelets_shape() {
        let v = summary("edge-1", &sample_with_one_pod(), &CpuRates::default());
        assert_eq!(v["node"]["nodeName"], "edge-1");
        assert_eq!(v["node"]["memory"]["availableBytes"], 500);
        let p = &v["pods"][0];
        assert_eq!(p["podRef"]["uid"], "u1");
        assert_eq!(p["containers"][0]["name"], "main");
        assert_eq!(
            p["containers"][0]["cpu"]["usageCoreNanoSeconds"],
            2_500_000_000u64
        );
        assert_eq!(p["containers"][0]["memory"]["workingSetBytes"], 200);
        assert_eq!(p["volume"][0]["name"], "data");
        assert_eq!(p["volume"][0]["usedBytes"], 4096);
        assert_eq!(p["containers"][0]["cpu"]["time"], "2023-11-14T22:13:20Z");
        assert_eq!(p["network"]["name"], "eth0");
        assert_eq!(p["network"]["rxBytes"], 1496);
        assert_eq!(p["network"]["txErrors"], 2);
        assert_eq!(p["network"]["interfaces"][0]["txBytes"], 866);
    }

    #[test]
    fn resource_metrics_are_prometheus_text() {
        let t = resource_metrics(&sample_with_one_pod());
        assert!(t.contains(
            "container_cpu_usage_seconds_total{container=\"main\",namespace=\"default\",pod=\"we\\\"b\"} 2.5 1700000000000\n"
        ));
        assert!(t.contains("node_memory_working_set_bytes 200 1700000000000\n"));
        assert!(t.contains("# TYPE pod_cpu_usage_seconds_total counter\n"));
        assert!(t.ends_with("scrape_error 0\n"));
    }

    #[test]
    fn directory_usage_counts_files_below() {
        let d = std::env::temp_dir().join(format!("podunit-du-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/f"), vec![1u8; 10_000]).unwrap();
        let (bytes, inodes) = dir_usage(&d);
        assert_eq!(inodes, 3);
        assert!(bytes >= 10_000, "{bytes}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
