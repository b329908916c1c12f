//! Running a plugin list as libcni does: ADD in order, each plugin given the previous one's
//! result as `prevResult`; DEL in reverse with the result ADD cached; CHECK against it; GC and
//! STATUS where the list's version has them. Each plugin is an exec with the `CNI_*` environment
//! and its configuration on stdin, bounded in output and time; its error JSON becomes
//! [`InvokeError::Plugin`], whose message is what the pod's FailedCreatePodSandBox event shows.

use super::cache::{self, Cache, CacheError, Entry};
use super::config::{NetworkConfigList, plugin_type};
use super::plugins::{self, MissingPlugin};
use super::result::{self, CniResult, ResultError};
use super::version_at_least;
use serde_json::{Map, Value, json};
use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a plugin may run (the kubelet gives a whole sandbox start four minutes; a plugin
/// that hangs must not hold a pod that long).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// What podunit keeps of a plugin's stderr (the rest is read and dropped).
const MAX_STDERR: usize = 64 << 10;
/// Environment variables podunit sets or clears for every plugin.
const CNI_VARS: &[&str] = &[
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_ARGS",
    "CNI_PATH",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    Add,
    Del,
    Check,
    Gc,
    Status,
}

impl Cmd {
    pub fn as_str(self) -> &'static str {
        match self {
            Cmd::Add => "ADD",
            Cmd::Del => "DEL",
            Cmd::Check => "CHECK",
            Cmd::Gc => "GC",
            Cmd::Status => "STATUS",
        }
    }
}

/// The pod a network attachment is for (`CNI_ARGS`, as the kubelet's CRI runtime sets them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One pod's attachment to the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// The sandbox's ID: `CNI_CONTAINERID`, `K8S_POD_INFRA_CONTAINER_ID`, the cache's key.
    pub container_id: String,
    /// The network namespace's path (`/var/run/netns/NAME`).
    pub netns: PathBuf,
    pub ifname: String,
    pub pod: PodRef,
}

/// A hostPort, as containerd hands it to plugins with the `portMappings` capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
    pub host_ip: Option<String>,
}

/// Traffic shaping (the `bandwidth` capability), in bits per second and bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bandwidth {
    pub ingress_rate: u64,
    pub ingress_burst: u64,
    pub egress_rate: u64,
    pub egress_burst: u64,
}

/// What the runtime offers the plugins that declare the capability.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapabilityArgs {
    pub port_mappings: Vec<PortMapping>,
    pub bandwidth: Option<Bandwidth>,
}

impl CapabilityArgs {
    /// By capability name, as `runtimeConfig` carries them; what is not set is absent.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        if !self.port_mappings.is_empty() {
            let ports = self.port_mappings.iter().map(|p| {
                let mut o = json!({
                    "hostPort": p.host_port,
                    "containerPort": p.container_port,
                    "protocol": p.protocol.to_ascii_lowercase(),
                });
                if let Some(ip) = p.host_ip.as_deref().filter(|ip| !ip.is_empty()) {
                    o["hostIP"] = json!(ip);
                }
                o
            });
            m.insert("portMappings".into(), Value::Array(ports.collect()));
        }
        if let Some(b) = self.bandwidth {
            m.insert(
                "bandwidth".into(),
                json!({
                    "ingressRate": b.ingress_rate,
                    "ingressBurst": b.ingress_burst,
                    "egressRate": b.egress_rate,
                    "egressBurst": b.egress_burst,
                }),
            );
        }
        m
    }
}

#[derive(Debug)]
pub enum InvokeError {
    MissingPlugin(MissingPlugin),
    /// A container ID, interface name or pod field the CNI spec or `CNI_ARGS` cannot carry.
    InvalidAttachment(String),
    Spawn {
        plugin: String,
        error: io::Error,
    },
    /// The plugin's own error (its error JSON): the message a pod's event shows.
    Plugin {
        plugin: String,
        network: String,
        command: Cmd,
        code: u64,
        msg: String,
        details: String,
    },
    /// A plugin that failed without an error JSON.
    Failed {
        plugin: String,
        network: String,
        command: Cmd,
        status: String,
        output: String,
    },
    Timeout {
        plugin: String,
        command: Cmd,
        after: Duration,
    },
    OutputTooLarge {
        plugin: String,
        command: Cmd,
    },
    BadResult {
        plugin: String,
        error: ResultError,
    },
    Cache(CacheError),
    /// CHECK with no ADD result cached for the container.
    NotAdded {
        container_id: String,
    },
}

impl fmt::Display for InvokeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lower = |c: &Cmd| c.as_str().to_ascii_lowercase();
        match self {
            InvokeError::MissingPlugin(m) => m.fmt(f),
            InvokeError::InvalidAttachment(why) => write!(f, "invalid CNI attachment: {why}"),
            InvokeError::Spawn { plugin, error } => {
                write!(f, "plugin type={plugin:?} could not be run: {error}")
            }
            // containerd's wording, so the event reads as it does on a containerd node.
            InvokeError::Plugin {
                plugin,
                network,
                command,
                msg,
                details,
                ..
            } => {
                write!(
                    f,
                    "plugin type={plugin:?} name={network:?} failed ({}): {msg}",
                    lower(command)
                )?;
                if details.is_empty() {
                    Ok(())
                } else {
                    write!(f, "; {details}")
                }
            }
            InvokeError::Failed {
                plugin,
                network,
                command,
                status,
                output,
            } => write!(
                f,
                "plugin type={plugin:?} name={network:?} failed ({}): {status}: {output:?}",
                lower(command)
            ),
            InvokeError::Timeout {
                plugin,
                command,
                after,
            } => write!(
                f,
                "plugin type={plugin:?} ({}) killed after {}s",
                lower(command),
                after.as_secs()
            ),
            InvokeError::OutputTooLarge { plugin, command } => write!(
                f,
                "plugin type={plugin:?} ({}) wrote more than {} bytes",
                lower(command),
                result::MAX_BYTES
            ),
            InvokeError::BadResult { plugin, error } => {
                write!(f, "plugin type={plugin:?}: {error}")
            }
            InvokeError::Cache(e) => e.fmt(f),
            InvokeError::NotAdded { container_id } => {
                write!(f, "no cached CNI result for container {container_id:?}")
            }
        }
    }
}

impl std::error::Error for InvokeError {}

impl From<CacheError> for InvokeError {
    fn from(e: CacheError) -> Self {
        InvokeError::Cache(e)
    }
}

impl From<MissingPlugin> for InvokeError {
    fn from(e: MissingPlugin) -> Self {
        InvokeError::MissingPlugin(e)
    }
}

/// What CHECK, GC and STATUS did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// Not run, and why: the list's version has no such command, or it disables it.
    Skipped(String),
}

/// The configuration a plugin gets on stdin, as libcni builds it: the plugin's own, with the
/// list's `name` and `cniVersion`, `prevResult` when there is one, and `runtimeConfig` holding the
/// capability arguments the plugin declares in `capabilities` (replacing any it had).
pub fn plugin_config(
    list: &NetworkConfigList,
    plugin: &Map<String, Value>,
    prev: Option<&Value>,
    caps: &Map<String, Value>,
) -> Value {
    let mut conf = plugin.clone();
    conf.insert("name".into(), json!(list.name));
    conf.insert("cniVersion".into(), json!(list.cni_version));
    if let Some(p) = prev {
        conf.insert("prevResult".into(), p.clone());
    }
    let mut rc = Map::new();
    if let Some(Value::Object(declared)) = plugin.get("capabilities") {
        for (cap, on) in declared {
            if on == &Value::Bool(true)
                && let Some(arg) = caps.get(cap)
            {
                rc.insert(cap.clone(), arg.clone());
            }
        }
    }
    if !rc.is_empty() {
        conf.insert("runtimeConfig".into(), Value::Object(rc));
    }
    Value::Object(conf)
}

/// `CNI_ARGS` as the kubelet's CRI runtimes set it.
pub fn cni_args(a: &Attachment) -> Result<String, InvokeError> {
    let pairs = [
        ("K8S_POD_NAMESPACE", &a.pod.namespace),
        ("K8S_POD_NAME", &a.pod.name),
        ("K8S_POD_INFRA_CONTAINER_ID", &a.container_id),
        ("K8S_POD_UID", &a.pod.uid),
    ];
    let mut out = String::from("IgnoreUnknown=1");
    for (k, v) in pairs {
        if v.contains([';', '=', '\0']) {
            return Err(InvokeError::InvalidAttachment(format!(
                "{k} {v:?} cannot be carried in CNI_ARGS"
            )));
        }
        out.push_str(&format!(";{k}={v}"));
    }
    Ok(out)
}

fn check_attachment(a: &Attachment) -> Result<(), InvokeError> {
    if !cache::valid_container_id(&a.container_id) {
        return Err(InvokeError::InvalidAttachment(format!(
            "container ID {:?} is not alphanumerics, '_', '.' and '-'",
            a.container_id
        )));
    }
    if !cache::valid_ifname(&a.ifname) {
        return Err(InvokeError::InvalidAttachment(format!(
            "interface name {:?} is not a Linux interface name",
            a.ifname
        )));
    }
    Ok(())
}

/// Where plugins are found, how long they may run, and where ADD results are kept.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub search_path: Vec<PathBuf>,
    pub timeout: Duration,
    pub cache: Cache,
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime {
            search_path: plugins::DEFAULT_PATH.iter().map(PathBuf::from).collect(),
            timeout: DEFAULT_TIMEOUT,
            cache: Cache::new(cache::DEFAULT_DIR),
        }
    }
}

struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Runtime {
    /// ADD: each plugin in order, its result the next one's `prevResult`; the last result is
    /// cached with the list and `caps`, and returned. When a plugin fails, the attachment is
    /// deleted again (as containerd tears down a sandbox whose network failed), which frees what
    /// the earlier plugins took, and the plugin's error is returned.
    pub fn add(
        &self,
        list: &NetworkConfigList,
        a: &Attachment,
        caps: &CapabilityArgs,
    ) -> Result<CniResult, InvokeError> {
        check_attachment(a)?;
        let capm = caps.to_map();
        let mut prev: Option<Value> = None;
        let mut parsed = None;
        for (k, plugin) in list.plugins.iter().enumerate() {
            let run = self
                .run(Cmd::Add, list, plugin, Some(a), prev.as_ref(), &capm, None)
                .and_then(|out| {
                    let r =
                        CniResult::parse(&out.stdout).map_err(|error| InvokeError::BadResult {
                            plugin: plugin_type(plugin).to_string(),
                            error,
                        })?;
                    // Parsed once already, so it is JSON.
                    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
                    Ok((r, v))
                });
            match run {
                Ok((r, v)) => {
                    parsed = Some(r);
                    prev = Some(v);
                }
                Err(e) => {
                    self.undo_add(list, k, a, &capm, prev.as_ref());
                    return Err(e);
                }
            }
        }
        let (Some(result), Some(raw)) = (parsed, prev) else {
            unreachable!("a parsed list has a plugin");
        };
        let entry = Entry {
            container_id: a.container_id.clone(),
            ifname: a.ifname.clone(),
            config: list.to_json(),
            result: raw,
            capability_args: Value::Object(capm.clone()),
        };
        if let Err(e) = self.cache.store(&entry) {
            self.undo_add(list, list.plugins.len() - 1, a, &capm, Some(&entry.result));
            return Err(e.into());
        }
        Ok(result)
    }

    /// DEL: each plugin in reverse order, with the configuration, capability arguments and
    /// result ADD cached (`list` and `caps` only when nothing is cached: DEL must undo what ADD
    /// did, even if the node's configuration changed since); then the cache entry goes. DEL of
    /// what is not there succeeds, as the spec requires of plugins.
    pub fn del(
        &self,
        list: &NetworkConfigList,
        a: &Attachment,
        caps: &CapabilityArgs,
    ) -> Result<(), InvokeError> {
        check_attachment(a)?;
        match self.cache.load(&a.container_id, &a.ifname)? {
            Some(e) => {
                let cached = cached_list(&self.cache, &e)?;
                let capm = match &e.capability_args {
                    Value::Object(m) => m.clone(),
                    _ => Map::new(),
                };
                self.del_with(&cached, a, &capm, Some(&e.result))?;
            }
            None => self.del_with(list, a, &caps.to_map(), None)?,
        }
        self.cache.remove(&a.container_id, &a.ifname)?;
        Ok(())
    }

    /// DEL of plugins `0..=last` (the one that failed may have done part of its work), in
    /// reverse, each one whatever the others answer: what matters is freeing what was taken.
    fn undo_add(
        &self,
        list: &NetworkConfigList,
        last: usize,
        a: &Attachment,
        capm: &Map<String, Value>,
        prev: Option<&Value>,
    ) {
        let prev = prev.filter(|_| version_at_least(&list.cni_version, "0.4.0"));
        for plugin in list.plugins[..=last].iter().rev() {
            let _ = self.run(Cmd::Del, list, plugin, Some(a), prev, capm, None);
        }
    }

    fn del_with(
        &self,
        list: &NetworkConfigList,
        a: &Attachment,
        capm: &Map<String, Value>,
        prev: Option<&Value>,
    ) -> Result<(), InvokeError> {
        // Before 0.4.0 DEL had no prevResult.
        let prev = prev.filter(|_| version_at_least(&list.cni_version, "0.4.0"));
        for plugin in list.plugins.iter().rev() {
            self.run(Cmd::Del, list, plugin, Some(a), prev, capm, None)?;
        }
        Ok(())
    }

    /// CHECK: each plugin in order against the cached ADD result. Skipped before 0.4.0 and
    /// when the list sets `disableCheck`.
    pub fn check(&self, list: &NetworkConfigList, a: &Attachment) -> Result<Outcome, InvokeError> {
        check_attachment(a)?;
        if !version_at_least(&list.cni_version, "0.4.0") {
            return Ok(Outcome::Skipped(format!(
                "CHECK needs CNI 0.4.0; {} is {}",
                list.name, list.cni_version
            )));
        }
        if list.disable_check {
            return Ok(Outcome::Skipped(format!("{} sets disableCheck", list.name)));
        }
        let e = self
            .cache
            .load(&a.container_id, &a.ifname)?
            .ok_or_else(|| InvokeError::NotAdded {
                container_id: a.container_id.clone(),
            })?;
        let capm = match &e.capability_args {
            Value::Object(m) => m.clone(),
            _ => Map::new(),
        };
        for plugin in &list.plugins {
            self.run(
                Cmd::Check,
                list,
                plugin,
                Some(a),
                Some(&e.result),
                &capm,
                None,
            )?;
        }
        Ok(Outcome::Done)
    }

    /// GC (CNI 1.1.0): each plugin told which attachments are still valid, so it may free the
    /// rest. Skipped before 1.1.0.
    pub fn gc(
        &self,
        list: &NetworkConfigList,
        valid: &[(String, String)],
    ) -> Result<Outcome, InvokeError> {
        if !version_at_least(&list.cni_version, "1.1.0") {
            return Ok(Outcome::Skipped(format!(
                "GC needs CNI 1.1.0; {} is {}",
                list.name, list.cni_version
            )));
        }
        let attachments: Vec<Value> = valid
            .iter()
            .map(|(id, ifname)| json!({"containerID": id, "ifname": ifname}))
            .collect();
        let extra = ("cni.dev/valid-attachments", Value::Array(attachments));
        for plugin in &list.plugins {
            self.run(Cmd::Gc, list, plugin, None, None, &Map::new(), Some(&extra))?;
        }
        Ok(Outcome::Done)
    }

    /// STATUS (CNI 1.1.0): whether every plugin is ready to ADD. Skipped before 1.1.0.
    pub fn status(&self, list: &NetworkConfigList) -> Result<Outcome, InvokeError> {
        if !version_at_least(&list.cni_version, "1.1.0") {
            return Ok(Outcome::Skipped(format!(
                "STATUS needs CNI 1.1.0; {} is {}",
                list.name, list.cni_version
            )));
        }
        for plugin in &list.plugins {
            self.run(Cmd::Status, list, plugin, None, None, &Map::new(), None)?;
        }
        Ok(Outcome::Done)
    }

    /// One plugin, one command: its output when it exited 0, else its error.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        cmd: Cmd,
        list: &NetworkConfigList,
        plugin: &Map<String, Value>,
        a: Option<&Attachment>,
        prev: Option<&Value>,
        capm: &Map<String, Value>,
        extra: Option<&(&str, Value)>,
    ) -> Result<Output, InvokeError> {
        let name = plugin_type(plugin);
        let path = plugins::find(name, &self.search_path)?;
        let mut conf = plugin_config(list, plugin, prev, capm);
        if let (Some((k, v)), Value::Object(o)) = (extra, &mut conf) {
            o.insert((*k).to_string(), v.clone());
        }
        let mut env = vec![
            ("CNI_COMMAND", cmd.as_str().to_string()),
            ("CNI_PATH", plugins::cni_path(&self.search_path)),
        ];
        if let Some(a) = a {
            env.push(("CNI_CONTAINERID", a.container_id.clone()));
            env.push(("CNI_NETNS", a.netns.display().to_string()));
            env.push(("CNI_IFNAME", a.ifname.clone()));
            env.push(("CNI_ARGS", cni_args(a)?));
        }
        let stdin = serde_json::to_vec(&conf).unwrap_or_default();
        let out = self.exec(name, cmd, &path, &env, stdin)?;
        if out.status.success() {
            return Ok(out);
        }
        Err(failure(name, &list.name, cmd, &out))
    }

    /// Runs the plugin in a process group of its own, so a timeout kills whatever it started.
    fn exec(
        &self,
        name: &str,
        cmd: Cmd,
        path: &std::path::Path,
        env: &[(&str, String)],
        stdin: Vec<u8>,
    ) -> Result<Output, InvokeError> {
        let mut c = Command::new(path);
        for v in CNI_VARS {
            c.env_remove(v);
        }
        c.envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = c.spawn().map_err(|error| InvokeError::Spawn {
            plugin: name.to_string(),
            error,
        })?;
        let (Some(mut input), Some(out), Some(err)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            unreachable!("all three are piped");
        };
        // A plugin that writes before it reads must not block on our write: each pipe its thread.
        std::thread::spawn(move || {
            let _ = input.write_all(&stdin);
        });
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send((true, bounded(out, result::MAX_BYTES)));
        });
        std::thread::spawn(move || {
            let _ = tx2.send((false, bounded(err, MAX_STDERR)));
        });
        let deadline = Instant::now() + self.timeout;
        let pgid = child.id() as i32;
        let kill = |child: &mut std::process::Child| {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(-pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
        };
        let timeout = || InvokeError::Timeout {
            plugin: name.to_string(),
            command: cmd,
            after: self.timeout,
        };
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                _ => {
                    kill(&mut child);
                    return Err(timeout());
                }
            }
        };
        let (mut stdout, mut stderr) = (None, None);
        for _ in 0..2 {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((true, r)) => stdout = Some(r),
                Ok((false, r)) => stderr = Some(r),
                // Something the plugin left behind holds its output open.
                Err(_) => {
                    kill(&mut child);
                    return Err(timeout());
                }
            }
        }
        let (Some((stdout, over)), Some((stderr, _))) = (stdout, stderr) else {
            unreachable!("both readers answered");
        };
        if over {
            return Err(InvokeError::OutputTooLarge {
                plugin: name.to_string(),
                command: cmd,
            });
        }
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }
}

/// The list ADD used, from its cache entry.
fn cached_list(c: &Cache, e: &Entry) -> Result<NetworkConfigList, InvokeError> {
    let bytes = serde_json::to_vec(&e.config).unwrap_or_default();
    NetworkConfigList::parse(&bytes, true).map_err(|reason| {
        InvokeError::Cache(CacheError::Malformed {
            path: c.path(&e.container_id, &e.ifname).unwrap_or_default(),
            reason,
        })
    })
}

/// Up to `limit` bytes of `r`, read to its end; whether there was more.
fn bounded(mut r: impl Read, limit: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let _ = (&mut r).take(limit as u64).read_to_end(&mut kept);
    let rest = io::copy(&mut r, &mut io::sink()).unwrap_or(0);
    (kept, rest > 0)
}

/// A plugin that exited non-zero: its error JSON if it printed one (libcni reads the same).
fn failure(plugin: &str, network: &str, command: Cmd, out: &Output) -> InvokeError {
    if let Some((code, msg, details)) = error_json(&out.stdout) {
        return InvokeError::Plugin {
            plugin: plugin.to_string(),
            network: network.to_string(),
            command,
            code,
            msg,
            details,
        };
    }
    let shown = if out.stdout.iter().all(u8::is_ascii_whitespace) {
        &out.stderr
    } else {
        &out.stdout
    };
    InvokeError::Failed {
        plugin: plugin.to_string(),
        network: network.to_string(),
        command,
        status: out.status.to_string(),
        output: String::from_utf8_lossy(shown).trim().to_string(),
    }
}

/// A CNI error (`code`, `msg`, `details`) from a plugin's stdout.
pub fn error_json(stdout: &[u8]) -> Option<(u64, String, String)> {
    let v: Value = serde_json::from_slice(stdout).ok()?;
    let code = v.get("code")?.as_u64()?;
    let text = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some((code, text("msg"), text("details")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(plugins: Value) -> NetworkConfigList {
        let body = json!({"cniVersion": "1.0.0", "name": "podnet", "plugins": plugins});
        NetworkConfigList::parse(body.to_string().as_bytes(), true).unwrap()
    }

    fn caps() -> CapabilityArgs {
        CapabilityArgs {
            port_mappings: vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: "TCP".into(),
                host_ip: None,
            }],
            bandwidth: Some(Bandwidth {
                ingress_rate: 1_000_000,
                ingress_burst: 2_000_000,
                egress_rate: 3_000_000,
                egress_burst: 4_000_000,
            }),
        }
    }

    #[test]
    fn runtime_config_holds_only_what_a_plugin_declares() {
        let l = list(json!([
            {"type": "bridge", "bridge": "cni0", "runtimeConfig": {"stale": 1}},
            {"type": "portmap", "capabilities": {"portMappings": true, "bandwidth": false}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true, "ips": true}},
        ]));
        let m = caps().to_map();
        let prev = json!({"cniVersion": "1.0.0", "ips": []});
        let bridge = plugin_config(&l, &l.plugins[0], None, &m);
        assert_eq!(
            bridge,
            json!({"type": "bridge", "bridge": "cni0", "runtimeConfig": {"stale": 1},
                   "name": "podnet", "cniVersion": "1.0.0"})
        );
        let portmap = plugin_config(&l, &l.plugins[1], Some(&prev), &m);
        assert_eq!(portmap["prevResult"], prev);
        assert_eq!(
            portmap["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
        );
        let bw = plugin_config(&l, &l.plugins[2], Some(&prev), &m);
        assert_eq!(
            bw["runtimeConfig"],
            json!({"bandwidth": {"ingressRate": 1_000_000, "ingressBurst": 2_000_000,
                                 "egressRate": 3_000_000, "egressBurst": 4_000_000}})
        );
        // Nothing offered: no runtimeConfig at all.
        let none = plugin_config(&l, &l.plugins[1], None, &Map::new());
        assert!(none.get("runtimeConfig").is_none());
    }

    #[test]
    fn a_host_ip_is_passed_only_when_set() {
        let mut c = caps();
        c.port_mappings[0].host_ip = Some("127.0.0.1".into());
        c.bandwidth = None;
        let m = c.to_map();
        assert_eq!(m["portMappings"][0]["hostIP"], "127.0.0.1");
        assert!(!m.contains_key("bandwidth"));
        assert!(CapabilityArgs::default().to_map().is_empty());
    }

    fn attachment() -> Attachment {
        Attachment {
            container_id: "c0ffee".into(),
            netns: "/var/run/netns/x".into(),
            ifname: "eth0".into(),
            pod: PodRef {
                namespace: "default".into(),
                name: "web-0".into(),
                uid: "1234-5678".into(),
            },
        }
    }

    #[test]
    fn cni_args_are_the_kubelets() {
        assert_eq!(
            cni_args(&attachment()).unwrap(),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;\
             K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=1234-5678"
        );
        let mut a = attachment();
        a.pod.name = "a;b=c".into();
        assert!(matches!(
            cni_args(&a),
            Err(InvokeError::InvalidAttachment(_))
        ));
    }

    #[test]
    fn attachments_the_spec_cannot_carry_are_refused() {
        let mut a = attachment();
        a.container_id = "../etc".into();
        assert!(check_attachment(&a).is_err());
        for bad in ["", "a/b", "sixteen-chars-xx", "e th0", ".."] {
            let mut a = attachment();
            a.ifname = bad.into();
            assert!(check_attachment(&a).is_err(), "{bad:?}");
        }
        assert!(check_attachment(&attachment()).is_ok());
    }

    #[test]
    fn a_plugins_error_json_is_read_with_its_message() {
        let (code, msg, details) = error_json(
            br#"{"cniVersion":"1.0.0","code":11,"msg":"no IP addresses available","details":"range full"}"#,
        )
        .unwrap();
        assert_eq!(
            (code, msg.as_str(), details.as_str()),
            (11, "no IP addresses available", "range full")
        );
        assert_eq!(error_json(br#"{"code":7}"#).unwrap().1, "");
        for bad in [
            &b""[..],
            b"oops",
            b"[]",
            br#"{"msg":"x"}"#,
            br#"{"code":"7"}"#,
        ] {
            assert!(error_json(bad).is_none());
        }
        let e = InvokeError::Plugin {
            plugin: "host-local".into(),
            network: "podnet".into(),
            command: Cmd::Add,
            code: 11,
            msg: "no IP addresses available".into(),
            details: "range full".into(),
        };
        assert_eq!(
            e.to_string(),
            "plugin type=\"host-local\" name=\"podnet\" failed (add): no IP addresses available; range full"
        );
    }

    /// A plugin that is a shell script (the real ones run in tests/network_cni.rs).
    fn script_runtime(name: &str, body: &str) -> (Runtime, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let d =
            std::env::temp_dir().join(format!("podunit-cni-invoke-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let rt = Runtime {
            search_path: vec![d.clone()],
            timeout: Duration::from_secs(2),
            cache: Cache::new(d.join("cache")),
        };
        (rt, d)
    }

    #[test]
    fn a_failure_without_error_json_hangs_and_floods_are_typed() {
        let a = attachment();
        let (rt, d) = script_runtime("crash", "cat >/dev/null; echo 'panic: boom' >&2; exit 2");
        let e = rt.add(
            &list(json!([{"type": "crash"}])),
            &a,
            &CapabilityArgs::default(),
        );
        match e {
            Err(InvokeError::Failed { output, status, .. }) => {
                assert_eq!(output, "panic: boom");
                assert!(status.contains('2'), "{status}");
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&d).unwrap();

        // Its child keeps stdout open too: the timeout kills the whole process group.
        let (rt, d) = script_runtime("hang", "sleep 30 & sleep 30");
        let t = Instant::now();
        let e = rt.status(&NetworkConfigList {
            cni_version: "1.1.0".into(),
            ..list(json!([{"type": "hang"}]))
        });
        assert!(matches!(e, Err(InvokeError::Timeout { .. })), "{e:?}");
        assert!(t.elapsed() < Duration::from_secs(10));
        std::fs::remove_dir_all(&d).unwrap();

        let (rt, d) = script_runtime("flood", "head -c 3000000 /dev/zero");
        let e = rt.add(
            &list(json!([{"type": "flood"}])),
            &a,
            &CapabilityArgs::default(),
        );
        assert!(
            matches!(e, Err(InvokeError::OutputTooLarge { .. })),
            "{e:?}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_plugin_gets_the_environment_and_stdin_libcni_gives() {
        // Prints what it got as its result's DNS options, so ADD hands it back.
        let (rt, d) = script_runtime(
            "echoer",
            r#"conf=$(cat | tr -d '"\n')
printf '{"cniVersion":"1.0.0","dns":{"options":["%s","%s","%s","%s","%s","%s"]}}' \
  "$CNI_COMMAND" "$CNI_CONTAINERID" "$CNI_NETNS" "$CNI_IFNAME" "$CNI_ARGS" "$conf""#,
        );
        let l = list(json!([{"type": "echoer", "capabilities": {"portMappings": true}}]));
        let r = rt.add(&l, &attachment(), &caps()).unwrap();
        let o = &r.dns.options;
        assert_eq!(&o[..4], ["ADD", "c0ffee", "/var/run/netns/x", "eth0"]);
        assert_eq!(o[4], cni_args(&attachment()).unwrap());
        assert!(
            o[5].contains("name:podnet") && o[5].contains("hostPort:8080"),
            "{}",
            o[5]
        );
        let cached = rt.cache.load("c0ffee", "eth0").unwrap().unwrap();
        assert_eq!(cached.config, l.to_json());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn gc_and_status_are_skipped_before_1_1_0() {
        let r = Runtime {
            search_path: vec![],
            ..Runtime::default()
        };
        let l = list(json!([{"type": "bridge"}]));
        assert!(matches!(r.gc(&l, &[]).unwrap(), Outcome::Skipped(_)));
        assert!(matches!(r.status(&l).unwrap(), Outcome::Skipped(_)));
        // 1.1.0 runs them: here with no plugin to be found.
        let mut l = l;
        l.cni_version = "1.1.0".into();
        assert!(matches!(r.status(&l), Err(InvokeError::MissingPlugin(_))));
    }
}
