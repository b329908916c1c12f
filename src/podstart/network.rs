//! The pod's attachment to the CNI network (node config `network: cni`), made by `pod-prepare`
//! and undone by `pod-cleanup`, or by `pod-forget` for a pod whose unit files are gone.
//!
//! Both start in the pod unit, inside the network namespace systemd made for it
//! (`PrivateNetwork=yes`, which the containers join with `JoinsNamespaceOf=`). That namespace is
//! pinned as `/run/netns/podunit-<uid>` (as containerd and `ip netns` pin theirs), so DEL finds
//! the pod's interface even after systemd let the namespace go: a removed pod's unit stops with
//! none of its commands (its file is gone), and podunit-sync's cleanup detaches it later. Plugins
//! run from the host's namespace, where they create the host end of the link. Nothing ever hands
//! a plugin the host's own namespace: a DEL there would delete the host's `eth0`.

use crate::cni::cache::Cache;
use crate::cni::config::NetworkConfigList;
use crate::cni::default_network::{self, Fallback};
use crate::cni::invoke::{Attachment, Bandwidth, CapabilityArgs, PodRef, PortMapping, Runtime};
use crate::common::atomicfile;
use crate::common::config::Cni;
use crate::common::paths::Paths;
use crate::translate::plan::{NetworkPlan, PodPlan};
use std::fmt;
use std::fs::File;
use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

/// The pod's interface, as the kubelet names it.
pub const IFNAME: &str = "eth0";

#[derive(Debug)]
pub enum NetworkError {
    /// No (valid) network configuration: the node's network is not ready.
    Config(crate::cni::config::ConfigError),
    /// The pod unit is not in a network namespace of its own.
    HostNamespace,
    Namespace(String),
    Plugin(crate::cni::invoke::InvokeError),
    /// The plugins succeeded but gave the pod no address.
    NoAddress,
    Record(atomicfile::Error),
}

impl fmt::Display for NetworkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetworkError::Config(e) => write!(f, "network is not ready: {e}"),
            NetworkError::HostNamespace => f.write_str(
                "the pod unit runs in the host's network namespace (no PrivateNetwork=): \
                 refusing to run CNI plugins on the host's interfaces",
            ),
            NetworkError::Namespace(e) => write!(f, "network namespace: {e}"),
            NetworkError::Plugin(e) => write!(f, "failed to set up the pod's network: {e}"),
            NetworkError::NoAddress => f.write_str(
                "failed to set up the pod's network: the CNI plugins gave interface eth0 no IP address",
            ),
            NetworkError::Record(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for NetworkError {}

/// The pod's addresses, as `pod-prepare` records them for status (`network.json` in the pod's
/// runtime directory).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub pod_ips: Vec<String>,
}

/// Where [`Record`] is kept.
pub fn record_path(plan: &PodPlan) -> String {
    crate::common::text::concat(&[&plan.runtime_dir, "/network.json"])
}

/// The pod's IPs recorded when it started, if it is on the CNI network.
pub fn recorded_ips(paths: &Paths, runtime_dir: &str) -> Option<Vec<String>> {
    let path = paths.host(&crate::common::text::concat(&[
        runtime_dir,
        "/network.json",
    ]));
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice::<Record>(&bytes)
        .ok()
        .map(|r| r.pod_ips)
}

/// Where the pod's network namespace is pinned while it is attached.
pub fn pin_path(uid: &str) -> String {
    crate::common::text::concat(&[Paths::NETNS, "/podunit-", uid])
}

/// (device, inode) of a namespace file.
fn ns_id(f: &File) -> Option<(u64, u64)> {
    f.metadata().map(|m| (m.dev(), m.ino())).ok()
}

/// The host's network namespace (PID 1's), entered by this thread.
fn enter_host() -> Result<File, NetworkError> {
    let host = File::open("/proc/1/ns/net")
        .map_err(|e| NetworkError::Namespace(format!("/proc/1/ns/net: {e}")))?;
    setns(&host)?;
    Ok(host)
}

fn setns(f: &File) -> Result<(), NetworkError> {
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| NetworkError::Namespace(format!("setns: {e}")))
}

/// The pinned namespace at `pin`, if it is one and not the host's; anything else there (a file
/// left by a failed pin, a namespace gone with a reboot) is no namespace.
fn pinned(pin: &std::path::Path) -> Option<File> {
    let f = File::open(pin).ok()?;
    let host = File::open("/proc/1/ns/net").ok()?;
    const NSFS_MAGIC: i64 = 0x6e73_6673;
    let fs = nix::sys::statfs::fstatfs(&f).ok()?;
    let is_ns = fs.filesystem_type().0 as i64 == NSFS_MAGIC;
    (is_ns && ns_id(&f).is_some() && ns_id(&f) != ns_id(&host)).then_some(f)
}

/// Pins this thread's network namespace at `pin` (in the service manager's mount namespace,
/// which `pod-prepare` has entered).
fn pin(pin: &std::path::Path) -> Result<(), NetworkError> {
    let ns_err = |what: &str, e: &dyn fmt::Display| {
        NetworkError::Namespace(format!("pinning at {}: {what}: {e}", pin.display()))
    };
    if let Some(dir) = pin.parent() {
        std::fs::create_dir_all(dir).map_err(|e| ns_err("creating its directory", &e))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o444)
        .open(pin)
        .map_err(|e| ns_err("creating the file", &e))?;
    let none: Option<&str> = None;
    nix::mount::mount(
        Some("/proc/thread-self/ns/net"),
        pin,
        none,
        nix::mount::MsFlags::MS_BIND,
        none,
    )
    .map_err(|e| ns_err("bind mount", &e))
}

fn unpin(pin: &std::path::Path) {
    let _ = nix::mount::umount2(pin, nix::mount::MntFlags::MNT_DETACH);
    let _ = std::fs::remove_file(pin);
}

/// A configured path, under the test root when there is one.
fn host(paths: &Paths, p: &std::path::Path) -> PathBuf {
    paths.host(&p.to_string_lossy())
}

fn runtime(cfg: &Cni, paths: &Paths) -> Runtime {
    Runtime {
        search_path: cfg.bin_dirs.iter().map(|d| host(paths, d)).collect(),
        cache: Cache::new(host(paths, &cfg.cache_dir)),
        ..Runtime::default()
    }
}

fn attachment(plan_uid: &str, ns: &str, name: &str, netns: PathBuf) -> Attachment {
    Attachment {
        container_id: plan_uid.to_string(),
        netns,
        ifname: IFNAME.into(),
        pod: PodRef {
            namespace: ns.to_string(),
            name: name.to_string(),
            uid: plan_uid.to_string(),
        },
    }
}

/// What the runtime offers the plugins for this pod (containerd's `toCNIPortMappings` and
/// `toCNIBandWidth`: no burst limit beyond the largest 32-bit value).
fn capabilities(net: &NetworkPlan) -> CapabilityArgs {
    CapabilityArgs {
        port_mappings: net
            .port_mappings
            .iter()
            .map(|p| PortMapping {
                host_port: p.host_port,
                container_port: p.container_port,
                protocol: p.protocol.to_ascii_lowercase(),
                host_ip: Some(p.host_ip.clone()).filter(|ip| !ip.is_empty()),
            })
            .collect(),
        bandwidth: net.bandwidth.as_ref().map(|b| Bandwidth {
            ingress_rate: b.ingress_bps.unwrap_or(0),
            ingress_burst: if b.ingress_bps.is_some() {
                u32::MAX.into()
            } else {
                0
            },
            egress_rate: b.egress_bps.unwrap_or(0),
            egress_burst: if b.egress_bps.is_some() {
                u32::MAX.into()
            } else {
                0
            },
        }),
    }
}

/// Runs `f` in the host's network namespace (at once when this thread is in it already).
pub fn in_host_namespace<T>(f: impl FnOnce() -> T) -> Result<T, NetworkError> {
    let own = File::open("/proc/thread-self/ns/net")
        .map_err(|e| NetworkError::Namespace(format!("/proc/thread-self/ns/net: {e}")))?;
    let host = enter_host()?;
    let v = f();
    if ns_id(&own) != ns_id(&host) {
        setns(&own)?;
    }
    Ok(v)
}

/// Attaches the pod's namespace (this thread's) to the network: what a previous start left (a
/// crash, `kill -9`, a reboot) is deleted first, then the namespace is pinned and ADD runs.
/// Returns the pod's IPs, IPv4 first, and records them. This thread is back in the pod's
/// namespace afterwards.
pub fn attach(
    plan: &PodPlan,
    net: &NetworkPlan,
    cfg: &Cni,
    fallback: &Fallback,
    paths: &Paths,
) -> Result<Vec<IpAddr>, NetworkError> {
    let own = File::open("/proc/thread-self/ns/net")
        .map_err(|e| NetworkError::Namespace(format!("/proc/thread-self/ns/net: {e}")))?;
    let host_id = File::open("/proc/1/ns/net").ok().and_then(|f| ns_id(&f));
    if ns_id(&own).is_none() || ns_id(&own) == host_id {
        return Err(NetworkError::HostNamespace);
    }
    let list = default_network::load(&host(paths, &cfg.conf_dir), fallback)
        .map_err(NetworkError::Config)?;
    // What a start before this one left: its DEL runs in the namespace it pinned, if that is
    // still there (the same boot), else with none (a reboot took it and what was in it).
    detach(&plan.uid, cfg, fallback, paths)?;
    let pin_at = paths.host(&pin_path(&plan.uid));
    pin(&pin_at)?;
    enter_host()?;
    let result = add(plan, net, cfg, paths, &pin_at, &list);
    setns(&own)?;
    let ips = match result {
        Ok(ips) => ips,
        Err(e) => {
            unpin(&pin_at);
            return Err(e);
        }
    };
    let record = Record {
        pod_ips: ips.iter().map(IpAddr::to_string).collect(),
    };
    let text = serde_json::to_vec(&record).unwrap_or_default();
    atomicfile::write(
        &paths.host(&record_path(plan)),
        &text,
        atomicfile::Options::new(0o644).owner(0, 0),
    )
    .map_err(NetworkError::Record)?;
    Ok(ips)
}

fn add(
    plan: &PodPlan,
    net: &NetworkPlan,
    cfg: &Cni,
    paths: &Paths,
    pin_at: &std::path::Path,
    list: &NetworkConfigList,
) -> Result<Vec<IpAddr>, NetworkError> {
    let rt = runtime(cfg, paths);
    let a = attachment(&plan.uid, &plan.namespace, &plan.name, pin_at.to_path_buf());
    let caps = capabilities(net);
    let result = rt.add(list, &a, &caps).map_err(NetworkError::Plugin)?;
    let ips = result.pod_ips(IFNAME);
    if ips.is_empty() {
        let _ = rt.del(list, &a, &caps);
        return Err(NetworkError::NoAddress);
    }
    Ok(ips)
}

/// Detaches pod `uid` from the network with what its ADD cached (so a changed configuration
/// still undoes what was set up), in its pinned namespace if that is still there, else with
/// none; then unpins it. Nothing cached and nothing pinned is nothing to do. The plugins run
/// from the host's namespace; this thread is back in its own afterwards (`attach` pins that one
/// next).
pub fn detach(
    uid: &str,
    cfg: &Cni,
    fallback: &Fallback,
    paths: &Paths,
) -> Result<(), NetworkError> {
    let pin_at = paths.host(&pin_path(uid));
    let rt = runtime(cfg, paths);
    let cached = rt
        .cache
        .load(uid, IFNAME)
        .map_err(|e| NetworkError::Plugin(e.into()))?;
    let Some(entry) = cached else {
        unpin(&pin_at);
        return Ok(());
    };
    let list = match serde_json::to_vec(&entry.config)
        .ok()
        .and_then(|b| NetworkConfigList::parse(&b, true).ok())
    {
        Some(l) => l,
        None => default_network::load(&host(paths, &cfg.conf_dir), fallback)
            .map_err(NetworkError::Config)?,
    };
    let netns = match pinned(&pin_at) {
        Some(_) => pin_at.clone(),
        None => PathBuf::new(),
    };
    // The pod's namespace, uid and name only matter to ADD; DEL keys on the container ID.
    let a = attachment(uid, "", "", netns);
    in_host_namespace(|| rt.del(&list, &a, &CapabilityArgs::default()))?
        .map_err(NetworkError::Plugin)?;
    unpin(&pin_at);
    Ok(())
}

/// Whether any process is in network namespace `ns` (each one's `/proc/<pid>/ns/net` is
/// compared; a process that exits meanwhile is no process).
fn has_process(ns: &File) -> bool {
    let Some(want) = ns_id(ns) else {
        return false;
    };
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return true;
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .any(|e| {
            std::fs::metadata(e.path().join("ns/net")).is_ok_and(|m| (m.dev(), m.ino()) == want)
        })
}

/// What [`sweep`] did.
#[derive(Debug, Default)]
pub struct Sweep {
    /// Pods whose attachment was deleted: no pod has their UID any more.
    pub deleted: Vec<String>,
    /// Attachments that could not be deleted, and why (the next sweep tries again).
    pub failed: Vec<(String, NetworkError)>,
    /// What GC answered: None when it ran, else why not.
    pub gc: Option<String>,
}

/// Deletes the attachments of pods that are gone, as containerd's sandbox cleanup at its start:
/// every cached ADD whose container ID is not in `live` and whose namespace no process is in
/// gets DEL (a pod starting this moment has `pod-prepare` in its namespace, pinned before its
/// ADD; a pod whose units were stopped without their commands has a pin and nobody in it). Then, where the
/// network's version has it (CNI 1.1.0), GC tells the plugins which attachments are valid, so
/// they free what no cache entry recorded (an ADD cut off before its result was cached).
pub fn sweep(
    live: &std::collections::BTreeSet<String>,
    cfg: &Cni,
    fallback: &Fallback,
    paths: &Paths,
) -> Result<Sweep, NetworkError> {
    let rt = runtime(cfg, paths);
    let entries = rt
        .cache
        .entries()
        .map_err(|e| NetworkError::Plugin(e.into()))?;
    let mut out = Sweep::default();
    let mut valid = Vec::new();
    for (id, ifname) in entries {
        let in_use = pinned(&paths.host(&pin_path(&id))).is_some_and(|ns| has_process(&ns));
        if ifname != IFNAME || live.contains(&id) || in_use {
            valid.push((id, ifname));
            continue;
        }
        match detach(&id, cfg, fallback, paths) {
            Ok(()) => out.deleted.push(id),
            Err(e) => {
                out.failed.push((id.clone(), e));
                valid.push((id, ifname));
            }
        }
    }
    out.gc = match default_network::load(&host(paths, &cfg.conf_dir), fallback) {
        Ok(list) => match in_host_namespace(|| rt.gc(&list, &valid))? {
            Ok(crate::cni::invoke::Outcome::Done) => None,
            Ok(crate::cni::invoke::Outcome::Skipped(why)) => Some(why),
            Err(e) => Some(e.to_string()),
        },
        Err(e) => Some(e.to_string()),
    };
    Ok(out)
}
