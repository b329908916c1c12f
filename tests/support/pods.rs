//! Pods in a machine: unit names, unit states and what the probe recorded.

use std::collections::HashMap;
use std::time::Duration;

use super::nspawn::{Machine, PROBE_DIR};

/// Generous upper bound for anything that should happen "now" on a loaded CI host.
pub const SOON: Duration = Duration::from_secs(60);

/// What podunit-sync.service does, for machines whose packaging/ does not ship it yet.
const SYNC_STAND_IN: &str = "[Unit]\nDescription=podunit-sync (test stand-in)\nAfter=dbus.service\n\
[Service]\nType=notify\nExecStart=/usr/bin/podunit-sync\nRestart=always\nRestartSec=1\n";

/// (Re)starts podunit-sync (the package's unit, or the stand-in) and waits until it is ready. A
/// restart, not a start: the package enables it at boot, and the tests need its start-time work
/// (configuration, spool check) to see what they prepared.
pub fn start_sync(m: &Machine) {
    if m.read("/usr/lib/systemd/system/podunit-sync.service")
        .is_none()
    {
        m.write(
            "/etc/systemd/system/podunit-sync.service",
            SYNC_STAND_IN.as_bytes(),
        );
        m.daemon_reload();
    }
    m.sh_ok("systemctl restart podunit-sync.service");
    wait_state(m, "podunit-sync.service", &["active"]);
}

pub fn pod_unit(ns: &str, pod: &str) -> String {
    podunit::translate::naming::pod_service(ns, pod)
}

pub fn ctr_unit(ns: &str, pod: &str, container: &str) -> String {
    podunit::translate::naming::container_service(ns, pod, container)
}

pub fn pod_slice(ns: &str, pod: &str) -> String {
    podunit::translate::naming::pod_slice(ns, pod)
}

/// A YAML scalar holding exactly `s`: a JSON string is a valid YAML 1.2 double-quoted scalar.
pub fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).expect("string to JSON")
}

/// What the probe named `name` recorded (see tests/machine/probe.sh).
pub struct Probe<'a> {
    pub m: &'a Machine,
    pub name: String,
}

impl<'a> Probe<'a> {
    pub fn new(m: &'a Machine, name: &str) -> Probe<'a> {
        Probe {
            m,
            name: name.to_string(),
        }
    }

    fn path(&self, file: &str) -> String {
        format!("{PROBE_DIR}/{}/{file}", self.name)
    }

    pub fn file(&self, file: &str) -> Option<Vec<u8>> {
        self.m.read(&self.path(file))
    }

    pub fn text(&self, file: &str) -> Option<String> {
        self.m.read_string(&self.path(file))
    }

    /// How many times the probe started (0 when never).
    pub fn starts(&self) -> usize {
        self.text("starts").map(|s| s.lines().count()).unwrap_or(0)
    }

    /// Start times (seconds since the epoch, as the probe saw them), oldest first.
    pub fn start_times(&self) -> Vec<f64> {
        self.text("starts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    }

    /// The arguments after `/bin/sh /usr/local/bin/probe`, byte-exact.
    pub fn args(&self) -> Vec<Vec<u8>> {
        let raw = self.file("argv").expect("probe recorded argv");
        let mut parts: Vec<Vec<u8>> = raw
            .strip_suffix(b"\0")
            .unwrap_or(&raw)
            .split(|b| *b == 0)
            .map(|p| p.to_vec())
            .collect();
        assert!(
            parts.len() >= 2 && parts[1].ends_with(b"/probe"),
            "unexpected argv {:?}",
            String::from_utf8_lossy(&raw)
        );
        parts.drain(..2);
        parts
    }

    /// The value of `key` in the environment the probe received, byte-exact.
    pub fn env(&self, key: &str) -> Option<Vec<u8>> {
        let raw = self.file("environ").expect("probe recorded environ");
        let prefix = format!("{key}=");
        raw.split(|b| *b == 0)
            .find(|e| e.starts_with(prefix.as_bytes()))
            .map(|e| e[prefix.len()..].to_vec())
    }

    /// A field of /proc/self/status as the probe saw it, e.g. "Uid" -> "1000\t1000\t1000\t1000".
    pub fn status(&self, field: &str) -> String {
        let s = self.text("status").expect("probe recorded status");
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or_else(|| panic!("no {field} in status"))
            .trim()
            .to_string()
    }

    /// "memory" or "cpu" from the limits file.
    pub fn limit(&self, what: &str) -> String {
        let s = self.text("limits").expect("probe recorded limits");
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("{what}=")))
            .unwrap_or_else(|| panic!("no {what} in limits: {s}"))
            .to_string()
    }

    /// Waits until the probe has started at least `n` times.
    pub fn wait_starts(&self, n: usize) {
        self.m.wait_for(
            &format!("probe {} to start {n} time(s)", self.name),
            SOON,
            || (self.starts() >= n).then_some(()),
        );
    }
}

/// `ActiveEnterTimestamp` (µs, systemd's own clock) of each of `units` that is active, by unit,
/// in one shell run (one `busctl` per unit).
pub fn active_since(m: &Machine, units: &[String]) -> HashMap<String, i64> {
    let script: String = units
        .iter()
        .map(|u| {
            format!(
                "busctl get-property org.freedesktop.systemd1 {} org.freedesktop.systemd1.Unit ActiveState ActiveEnterTimestamp\n",
                podunit::systemd::props::unit_path(u)
            )
        })
        .collect();
    let out = m.sh_ok(&script);
    let mut lines = out.lines();
    let mut res = HashMap::new();
    for u in units {
        let (Some(state), Some(ts)) = (lines.next(), lines.next()) else {
            break;
        };
        if state.trim() == "s \"active\""
            && let Some(t) = ts.trim().strip_prefix("t ").and_then(|t| t.parse().ok())
        {
            res.insert(u.clone(), t);
        }
    }
    res
}

/// Waits until `unit` is in one of `states` (ActiveState).
pub fn wait_state(m: &Machine, unit: &str, states: &[&str]) -> String {
    m.wait_for(&format!("{unit} to be {states:?}"), SOON, || {
        let s = m.prop(unit, "ActiveState");
        states.contains(&s.as_str()).then_some(s)
    })
}

/// The container's own first process: its unit's main process is `podunit pid-init`, which starts
/// the command as its child in the container's PID namespace (the main process itself with
/// `hostPID: true`).
pub fn container_pid(m: &Machine, unit: &str) -> String {
    let main = m.prop(unit, "MainPID");
    let child = m.sh_ok(&format!(
        "for p in /proc/[0-9]*; do read -r pid comm state ppid rest < $p/stat 2>/dev/null && [ \"$ppid\" = {main} ] && echo $pid; done; true"
    ));
    match child.split_whitespace().next() {
        Some(c) => c.to_string(),
        None => main,
    }
}

/// After a reload, start what the generator made wanted (what podunit-sync does for the user).
pub fn start_pods(m: &Machine) {
    m.daemon_reload();
    m.sh_ok("systemctl start podunit.target");
}

/// Units named podunit-<ns>_<pod>* that systemd still has: loaded, running, stopping or failed.
///
/// A unit whose file is gone and that is inactive is left out: it runs nothing and systemd keeps
/// nothing of it but the name. systemd drops such a unit once it sees its cgroup empty, which in
/// a container on a cgroup v1 host can wait long after the processes are gone.
pub fn known_units(m: &Machine, ns: &str, pod: &str) -> Vec<String> {
    let pattern = format!("podunit-{ns}_{pod}*");
    let out = m.systemctl(&["list-units", "--all", "--no-legend", "--plain", &pattern]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let forgotten = f.get(1..3) == Some(&["not-found", "inactive"][..]);
            f.first().filter(|_| !forgotten).map(|u| u.to_string())
        })
        .collect()
}

/// The podunit units systemd lists as failed, one per line (empty: none).
pub fn failed_podunit_units(m: &Machine) -> String {
    let out = m.systemctl(&[
        "list-units",
        "--failed",
        "--no-legend",
        "--plain",
        "podunit*",
    ]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
