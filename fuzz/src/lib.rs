//! What the `manifest` and `render` fuzz targets share: an in-memory image store, and the check
//! that every rendered pod parses back, through the reference parser (`podunit::escape::parse`,
//! itself checked against systemd 252), to exactly what its manifest says: no key that podunit
//! does not write, no line joined or split, the argv, environment and paths of the manifest, and
//! dependencies on nothing but the pod's own units.
//!
//! The expected values are computed here from the manifest, independently of the translation
//! (Kubernetes `$(VAR)` expansion is reimplemented from the kubelet's code), so a translation bug
//! and an escaping bug both show.

use k8s_openapi::api::core::v1::{Container, Pod};
use podunit::common::paths::Paths;
use podunit::escape::parse;
use podunit::generate::Generated;
use podunit::manifest::{Catalog, PodEntry};
use podunit::translate::image::{ImageResolver, Probe};
use podunit::translate::naming;
use podunit::translate::{NodeFacts, Output, PodUnits};
use std::collections::BTreeMap;

/// Whether an open finding is to be let through (`PODUNIT_FUZZ_KNOWN=name,...`), so that fuzzing
/// can go on past it until it is fixed. Without the variable every check is made.
fn known(finding: &str) -> bool {
    static KNOWN: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    KNOWN
        .get_or_init(|| {
            std::env::var("PODUNIT_FUZZ_KNOWN")
                .unwrap_or_default()
                .split(',')
                .map(str::to_string)
                .collect()
        })
        .iter()
        .any(|k| k == finding)
}

/// The images the golden fixtures use: rootfs directories under `/srv/rootfs/`, disk images
/// `/srv/images/*.raw`, and the store's `registry.example/team/app:1.2`.
pub struct Images;

impl ImageResolver for Images {
    fn probe(&self, path: &str) -> Probe {
        if path.starts_with("/srv/rootfs/")
            || path == "/var/lib/podunit/images/registry.example/team/app/1.2/rootfs"
        {
            Probe::Directory
        } else if path.starts_with("/srv/images/") && path.ends_with(".raw") {
            Probe::File
        } else {
            Probe::Missing
        }
    }
}

/// Every key podunit writes. A rendered line with any other key was injected.
const KEYS: &[&str] = &[
    "After",
    "AmbientCapabilities",
    "BindPaths",
    "BindReadOnlyPaths",
    "CPUQuota",
    "CPUWeight",
    "CapabilityBoundingSet",
    "Description",
    "DeviceAllow",
    "DevicePolicy",
    "Documentation",
    "Environment",
    "EnvironmentFile",
    "ExecStart",
    "ExecStartPost",
    "ExecSearchPath",
    "ExecStartPre",
    "ExecStop",
    "ExecStopPost",
    "Group",
    "JoinsNamespaceOf",
    "KillMode",
    "KillSignal",
    "LockPersonality",
    "LogExtraFields",
    "MemoryMax",
    "MemorySwapMax",
    "NoNewPrivileges",
    "PartOf",
    "PrivateIPC",
    "PrivateMounts",
    "PrivateNetwork",
    "PrivateTmp",
    "ProtectClock",
    "ProtectControlGroups",
    "ProtectHostname",
    "ProtectKernelLogs",
    "ProtectKernelModules",
    "ProtectKernelTunables",
    "ProtectProc",
    "ProtectSystem",
    "ReadOnlyPaths",
    "RemainAfterExit",
    "Requires",
    "Restart",
    "RestartForceExitStatus",
    "RestartMaxDelaySec",
    "RestartSec",
    "RestartSteps",
    "RestrictNamespaces",
    "RestrictSUIDSGID",
    "RootDirectory",
    "RootImage",
    "SendSIGKILL",
    "Slice",
    "SourcePath",
    "StartLimitIntervalSec",
    "SupplementaryGroups",
    "SyslogIdentifier",
    "SystemCallArchitectures",
    "SystemCallErrorNumber",
    "SystemCallFilter",
    "TimeoutStartSec",
    "TimeoutStopSec",
    "Type",
    "User",
    "Wants",
    "WorkingDirectory",
    "X-PodunitContainer",
    "X-PodunitPod",
    "X-PodunitUid",
];

const SECTIONS: &[&str] = &["Unit", "Service", "Slice"];

/// One `Key=value` of a unit, as systemd's `config_parse()` reads it.
#[derive(Debug)]
pub struct Entry {
    pub section: String,
    pub key: String,
    pub value: String,
}

/// Reads a unit the way systemd does, asserting the stricter form podunit always writes: lines
/// end only at `\n` (systemd also ends them at `\r` and NUL), no line continues onto the next
/// (an odd number of trailing backslashes), no comment or key hidden behind leading whitespace or
/// `;`, only known sections and keys.
pub fn read_unit(name: &str, text: &str) -> Vec<Entry> {
    assert!(
        !text.contains(['\r', '\0']),
        "{name}: a line ends inside a value: {text:?}"
    );
    let mut section: Option<String> = None;
    let mut out = Vec::new();
    for line in text.split('\n') {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        assert!(
            !line.starts_with([' ', '\t', ';', '\u{feff}']),
            "{name}: unexpected line {line:?}"
        );
        if let Some(s) = line.strip_prefix('[') {
            let s = s
                .strip_suffix(']')
                .unwrap_or_else(|| panic!("{name}: bad section line {line:?}"));
            assert!(SECTIONS.contains(&s), "{name}: injected section {line:?}");
            section = Some(s.to_string());
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{name}: line without '=': {line:?}"));
        assert!(
            KEYS.contains(&key),
            "{name}: injected key {key:?} in {line:?}"
        );
        let trailing = value.chars().rev().take_while(|c| *c == '\\').count();
        assert!(
            trailing % 2 == 0,
            "{name}: {key}= continues onto the next line: {line:?}"
        );
        let section = section
            .clone()
            .unwrap_or_else(|| panic!("{name}: key before any section: {line:?}"));
        out.push(Entry {
            section,
            key: key.to_string(),
            value: value.to_string(),
        });
    }
    out
}

/// What a name is bound to in a container's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bound {
    Known(String),
    /// Only known when the pod starts (Secret, ConfigMap, host IP, or a value using one).
    Runtime,
}

/// What an expanded string is: text and references to runtime variables.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Runtime(String),
}

/// k8s.io/kubernetes third_party/forked/golang/expansion `Expand`, transcribed: `$$` is `$`,
/// `$(NAME)` the value when NAME is bound and itself when not, `$(` without `)` and `$x` stay.
/// (The Go code copies one byte after a lone `$`; on UTF-8 input that cuts a character in two,
/// podunit copies the whole character, which is what the manifest's author meant.)
fn k8s_expand(input: &str, lookup: &dyn Fn(&str) -> Option<Bound>) -> Vec<Part> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        text.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if after.is_empty() {
            text.push('$');
            rest = after;
            break;
        }
        if let Some(a) = after.strip_prefix('$') {
            text.push('$');
            rest = a;
        } else if let Some(a) = after.strip_prefix('(') {
            match a.find(')') {
                Some(end) => {
                    let name = &a[..end];
                    match lookup(name) {
                        Some(Bound::Known(v)) => text.push_str(&v),
                        Some(Bound::Runtime) => {
                            if !text.is_empty() {
                                out.push(Part::Text(std::mem::take(&mut text)));
                            }
                            out.push(Part::Runtime(name.to_string()));
                        }
                        None => {
                            text.push_str("$(");
                            text.push_str(name);
                            text.push(')');
                        }
                    }
                    rest = &a[end + 1..];
                }
                None => {
                    text.push_str("$(");
                    rest = a;
                }
            }
        } else {
            let c = after.chars().next().expect("not empty");
            text.push('$');
            text.push(c);
            rest = &after[c.len_utf8()..];
        }
    }
    text.push_str(rest);
    if !text.is_empty() {
        out.push(Part::Text(text));
    }
    out
}

/// A container's final environment, as the kubelet would build it: names in order, each bound to
/// its last definition. `open` = envFrom may bind any name at start.
struct Env {
    bound: BTreeMap<String, Bound>,
    open: bool,
    /// Some definition, maybe overridden later, is only known at start.
    any_runtime: bool,
}

impl Env {
    fn lookup(&self, name: &str) -> Option<Bound> {
        match self.bound.get(name) {
            Some(b) => Some(b.clone()),
            None if self.open => Some(Bound::Runtime),
            None => None,
        }
    }
}

fn container_env(pod: &Pod, c: &Container, node: &NodeFacts) -> Env {
    let mut env = Env {
        bound: BTreeMap::new(),
        open: c
            .env_from
            .iter()
            .flatten()
            .any(|e| e.config_map_ref.is_some() || e.secret_ref.is_some()),
        any_runtime: false,
    };
    for e in c.env.iter().flatten() {
        let b = match &e.value_from {
            None => {
                let parts = k8s_expand(e.value.as_deref().unwrap_or(""), &|n| env.lookup(n));
                match parts.as_slice() {
                    [] => Bound::Known(String::new()),
                    [Part::Text(t)] => Bound::Known(t.clone()),
                    _ => Bound::Runtime,
                }
            }
            Some(vf) => {
                if let Some(f) = &vf.field_ref {
                    expected_field(pod, node, &f.field_path)
                } else if let Some(r) = &vf.resource_field_ref {
                    Bound::Known(expected_resource(
                        c,
                        node,
                        &r.resource,
                        r.divisor.as_ref().map(|d| &*d.0),
                    ))
                } else {
                    Bound::Runtime
                }
            }
        };
        env.any_runtime |= b == Bound::Runtime;
        env.bound.insert(e.name.clone(), b);
    }
    env
}

/// A `fieldRef` the kubelet resolves, from the Pod itself (k8s.io/kubernetes
/// pkg/fieldpath, `podFieldSelectorRuntimeValue`): known before start for the pod's own metadata
/// and spec, only at start for its IPs (which podunit takes from the node at start).
fn expected_field(pod: &Pod, node: &NodeFacts, path: &str) -> Bound {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let map_key = |prefix: &str| path.strip_prefix(prefix).and_then(|k| k.strip_suffix("']"));
    Bound::Known(match path {
        "metadata.name" => m.name.clone().expect("a rendered pod has a name"),
        // A pod without a namespace is in "default".
        "metadata.namespace" => m.namespace.clone().unwrap_or_else(|| "default".into()),
        "metadata.uid" => m.uid.clone().expect("a loaded pod has a UID"),
        // The node the pod runs on: this one (a pod naming another node is not run here).
        "spec.nodeName" => node.node_name.clone(),
        // The ServiceAccount admission's default, as for any pod that names none; the deprecated
        // `serviceAccount` is the same field under its old name.
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone().or(s.service_account.clone()))
            .unwrap_or_else(|| "default".into()),
        "status.hostIP" | "status.hostIPs" | "status.podIP" | "status.podIPs" => {
            return Bound::Runtime;
        }
        _ => {
            // A missing key is the empty string, as the kubelet's `metadata.labels['k']`.
            let (map, key) = if let Some(k) = map_key("metadata.labels['") {
                (&m.labels, k)
            } else if let Some(k) = map_key("metadata.annotations['") {
                (&m.annotations, k)
            } else {
                panic!("a pod with fieldRef {path:?}, which Kubernetes refuses, was rendered")
            };
            map.as_ref()
                .and_then(|l| l.get(key))
                .cloned()
                .unwrap_or_default()
        }
    })
}

/// A Kubernetes quantity as an exact fraction (numerator, denominator), or None when it is not
/// one (apimachinery's resource.Quantity grammar: a decimal number, then an SI or binary suffix
/// or a decimal exponent). Negative quantities are not resources.
fn quantity(q: &str) -> Option<(i128, i128)> {
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let num = num.strip_prefix('+').unwrap_or(num);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        || int.len() + frac.len() > 30
    {
        return None;
    }
    let mut n: i128 = format!("{int}{frac}").parse().ok()?;
    let mut d: i128 = 10i128.checked_pow(frac.len() as u32)?;
    let pow = |b: i128, e: u32| b.checked_pow(e);
    let (mul, div) = match suffix {
        "" => (1, 1),
        "n" => (1, pow(10, 9)?),
        "u" => (1, pow(10, 6)?),
        "m" => (1, 1000),
        "k" => (1000, 1),
        "M" => (pow(10, 6)?, 1),
        "G" => (pow(10, 9)?, 1),
        "T" => (pow(10, 12)?, 1),
        "P" => (pow(10, 15)?, 1),
        "E" => (pow(10, 18)?, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        s => {
            let e = s.strip_prefix(['e', 'E'])?;
            let e = e.strip_prefix('+').unwrap_or(e);
            let exp: i32 = e.parse().ok()?;
            if exp.unsigned_abs() > 30 {
                return None;
            }
            if exp >= 0 {
                (pow(10, exp as u32)?, 1)
            } else {
                (1, pow(10, exp.unsigned_abs())?)
            }
        }
    };
    n = n.checked_mul(mul)?;
    d = d.checked_mul(div)?;
    Some((n, d))
}

/// `ceil(n / d)` of a fraction times `scale`.
fn ceil_scaled((n, d): (i128, i128), scale: i128) -> i128 {
    (n * scale + d - 1) / d
}

/// A `resourceFieldRef` value as the kubelet computes it (pkg/api/v1/resource,
/// `ExtractContainerResourceValue`): cpu as ceil(MilliValue / divisor's MilliValue), memory and
/// ephemeral-storage as ceil(Value / divisor's Value), each value rounded up to a whole milli or
/// byte first; an unset limit is the node's allocatable amount, an unset request the limit
/// when there is one (API defaulting), else 0; the default divisor is 1.
fn expected_resource(
    c: &Container,
    node: &NodeFacts,
    resource: &str,
    divisor: Option<&str>,
) -> String {
    let (kind, name) = resource
        .split_once('.')
        .unwrap_or_else(|| panic!("resourceFieldRef {resource:?} was rendered"));
    let res = c.resources.as_ref();
    let get = |k: &str| {
        let map = match k {
            "limits" => res.and_then(|r| r.limits.as_ref()),
            _ => res.and_then(|r| r.requests.as_ref()),
        };
        map.and_then(|m| m.get(name))
            .map(|q| quantity(&q.0).unwrap_or_else(|| panic!("{resource}: {:?} was rendered", q.0)))
    };
    let set = match kind {
        "limits" => get("limits"),
        "requests" => get("requests").or_else(|| get("limits")),
        _ => panic!("resourceFieldRef {resource:?} was rendered"),
    };
    if kind == "limits" && name == "ephemeral-storage" && set.is_none() {
        // The node's allocatable ephemeral storage, which the translation is not told; open
        // finding `ephemeral-storage-capacity`: podunit gives the node's memory.
        assert!(
            known("ephemeral-storage-capacity"),
            "{resource} unset: the kubelet gives the node's allocatable ephemeral storage"
        );
    }
    let div = quantity(divisor.unwrap_or("1"))
        .unwrap_or_else(|| panic!("divisor {divisor:?} was rendered"));
    let (value, div) = match name {
        "cpu" => (
            set.map(|q| ceil_scaled(q, 1000))
                .unwrap_or(if kind == "limits" {
                    node.cpu_millis as i128
                } else {
                    0
                }),
            ceil_scaled(div, 1000),
        ),
        "memory" | "ephemeral-storage" => (
            set.map(|q| ceil_scaled(q, 1))
                .unwrap_or(if kind == "limits" {
                    node.memory_bytes as i128
                } else {
                    0
                }),
            ceil_scaled(div, 1),
        ),
        _ => panic!("resourceFieldRef {resource:?} was rendered"),
    };
    assert!(div > 0, "a divisor of {divisor:?} was rendered");
    ((value + div - 1) / div).to_string()
}

/// Stands for a runtime variable's value when comparing argv: a unit that references any other
/// variable, or references this one where the manifest does not, gets a different argv.
fn marker(name: &str) -> String {
    format!("\u{1}runtime:{name}\u{1}")
}

fn resolve(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|p| match p {
            Part::Text(t) => t.clone(),
            Part::Runtime(n) => marker(n),
        })
        .collect()
}

fn values<'a>(entries: &'a [Entry], key: &str) -> Vec<&'a str> {
    entries
        .iter()
        .filter(|e| e.key == key)
        .map(|e| e.value.as_str())
        .collect()
}

fn one<'a>(unit: &str, entries: &'a [Entry], key: &str) -> Option<&'a str> {
    let v = values(entries, key);
    assert!(v.len() <= 1, "{unit}: {key}= written {} times", v.len());
    v.first().copied()
}

fn plain(unit: &str, key: &str, value: &str) -> String {
    parse::plain(value).unwrap_or_else(|e| panic!("{unit}: {key}={value:?} does not parse: {e}"))
}

/// Parses one command line; asserts it has no prefix and returns its argv as the process gets it,
/// runtime variables replaced by their markers.
fn exec_argv(unit: &str, key: &str, value: &str, runtime: &[String]) -> Vec<String> {
    let cmd = parse::exec_line(value)
        .unwrap_or_else(|e| panic!("{unit}: {key}={value:?} does not parse: {e}"));
    assert_eq!(
        cmd.prefixes, "",
        "{unit}: {key}= gained a prefix: {value:?}"
    );
    let env: Vec<(String, String)> = runtime.iter().map(|n| (n.clone(), marker(n))).collect();
    parse::expand_argv(&cmd.argv, &env)
        .unwrap_or_else(|e| panic!("{unit}: {key}={value:?} does not expand: {e}"))
}

/// A hook's command line: its prefix (`+` for podunit's own `hook` helper) and its words, which
/// expand to nothing at exec time (hooks run as written).
fn hook_line(unit: &str, key: &str, value: &str, prefix: &str) -> Vec<String> {
    let cmd = parse::exec_line(value)
        .unwrap_or_else(|e| panic!("{unit}: {key}={value:?} does not parse: {e}"));
    assert_eq!(cmd.prefixes, prefix, "{unit}: {key}= prefix: {value:?}");
    parse::expand_argv(&cmd.argv, &[])
        .unwrap_or_else(|e| panic!("{unit}: {key}={value:?} does not expand: {e}"))
}

/// What a lifecycle handler must run, written out here from the manifest (not by the code under
/// test): an exec postStart's command; `podunit hook ...` for an exec preStop, httpGet and sleep.
fn hook_argv(
    c: &k8s_openapi::api::core::v1::Container,
    h: &k8s_openapi::api::core::v1::LifecycleHandler,
    pre_stop: bool,
    uid: &str,
    bin: &str,
) -> Option<(&'static str, Vec<String>)> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let mut argv = vec![bin.to_string(), "hook".into()];
    if pre_stop {
        argv.push("--pre-stop".into());
    }
    if let Some(e) = &h.exec {
        let cmd = e.command.clone().unwrap_or_default();
        if !pre_stop {
            return Some(("", cmd));
        }
        argv.extend(["exec".into(), "--".into()]);
        argv.extend(cmd);
        return Some(("+", argv));
    }
    // Its record, under /run/podunit/hooks/<uid>/, when the uid is fit for a path.
    let fit = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    };
    if fit(uid) && fit(&c.name) {
        let stage = if pre_stop { "preStop" } else { "postStart" };
        argv.push(format!(
            "--record=/run/podunit/hooks/{uid}/{}.{stage}",
            c.name
        ));
    }
    if let Some(s) = &h.sleep {
        argv.extend(["sleep".into(), format!("--seconds={}", s.seconds)]);
    } else if let Some(g) = &h.http_get {
        argv.push("http".into());
        if g.scheme.as_deref() == Some("HTTPS") {
            argv.push("--https".into());
        }
        let port = match &g.port {
            IntOrString::Int(n) => *n,
            IntOrString::String(s) => s.parse().unwrap_or_else(|_| {
                c.ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref() == Some(s.as_str()))
                    .map_or(0, |p| p.container_port)
            }),
        };
        argv.push(format!("--host={}", g.host.as_deref().unwrap_or("")));
        argv.push(format!("--port={port}"));
        argv.push(format!(
            "--path={}",
            g.path.as_deref().filter(|p| !p.is_empty()).unwrap_or("/")
        ));
        for hd in g.http_headers.iter().flatten() {
            argv.push(format!("--header={}:{}", hd.name, hd.value));
        }
    } else {
        return None;
    }
    Some(("+", argv))
}

/// Checks the dependencies of a unit: only the pod's own units, `network.target` and
/// `podunit.target`.
fn check_dependencies(unit: &str, entries: &[Entry], own: &dyn Fn(&str) -> bool) {
    for key in ["Requires", "After", "Wants", "PartOf", "JoinsNamespaceOf"] {
        for v in values(entries, key) {
            for dep in v.split_ascii_whitespace() {
                assert!(
                    own(dep) || dep == "network.target" || dep == naming::TARGET,
                    "{unit}: {key}= names {dep:?}, not a unit of this pod"
                );
            }
        }
    }
}

/// Every pod of `g` against its manifest in `catalog`.
pub fn check_generated(catalog: &Catalog, g: &Generated, node: &NodeFacts) {
    for pod in &g.pods {
        let mut same = catalog
            .pods
            .iter()
            .filter(|e| e.namespace() == pod.plan.namespace && e.name() == pod.plan.name);
        let entry = same.next().expect("a rendered pod comes from the catalog");
        // Catalog::load refuses a pod defined twice; add_text alone does not.
        if same.next().is_none() {
            check_pod(entry, pod, node);
            if std::env::var_os("PODUNIT_FUZZ_VERBOSE").is_some() {
                eprintln!("checked pod {}", entry.key());
            }
        }
    }
}

/// One rendered pod against its manifest.
pub fn check_pod(entry: &PodEntry, units: &PodUnits, node: &NodeFacts) {
    let (ns, name, uid) = (entry.namespace(), entry.name(), entry.uid());
    let pod = &entry.pod;
    let spec = pod.spec.as_ref().expect("a rendered pod has a spec");
    let source = entry.file.display().to_string();
    let pod_unit = naming::pod_service(ns, name);
    let slice = naming::pod_slice(ns, name);

    // Where the pod keeps its files: one directory per pod, directly under podunit's own
    // (pod-cleanup removes the runtime one).
    for (dir, base) in [
        (&units.plan.state_dir, Paths::STATE),
        (&units.plan.runtime_dir, Paths::RUNTIME),
    ] {
        let leaf = dir.strip_prefix(base).and_then(|d| d.strip_prefix('/'));
        assert!(
            known("uid-path")
                || leaf.is_some_and(|l| !l.is_empty() && l != "." && l != ".." && !l.contains('/')),
            "pod {ns}/{name}: its directory {dir:?} is not one directory under {base}"
        );
    }

    let containers: Vec<(&Container, bool)> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (c, true))
        .chain(spec.containers.iter().map(|c| (c, false)))
        .collect();
    let mut expected_units: Vec<String> = vec![slice.clone(), pod_unit.clone()];
    expected_units.extend(
        containers
            .iter()
            .map(|(c, _)| naming::container_service(ns, name, &c.name)),
    );
    // The pod's own units are exactly these (long names are shortened, so no prefix test).
    let own = |u: &str| expected_units.iter().any(|n| n == u);
    let mut rendered = BTreeMap::new();
    for o in &units.outputs {
        match o {
            Output::Unit(u) => {
                let text = u
                    .render()
                    .unwrap_or_else(|e| panic!("a translated unit does not render: {e}"));
                assert_eq!(text, u.text, "{}: rendered twice, differently", u.name);
                assert!(
                    rendered.insert(u.name.clone(), text).is_none(),
                    "{} written twice",
                    u.name
                );
            }
            Output::Symlink { link, target } => {
                let (dir, file) = link.rsplit_once('/').expect("a link in a .wants directory");
                let wanted_by = dir.strip_suffix(".wants").expect("a .wants directory");
                assert!(
                    wanted_by == naming::TARGET || wanted_by == pod_unit,
                    "symlink {link:?} hangs the pod off {wanted_by:?}"
                );
                assert_eq!(target, &format!("../{file}"), "symlink {link:?}");
                assert!(
                    own(file),
                    "symlink {link:?} wants {file:?}, not a unit of this pod"
                );
            }
            Output::File { path, content } => {
                assert!(
                    path.starts_with("podunit/")
                        && !path[8..].contains('/')
                        && !path.contains(".."),
                    "file {path:?} outside the plan directory"
                );
                assert!(!content.is_empty());
            }
        }
    }
    let mut names: Vec<&String> = rendered.keys().collect();
    names.sort();
    let mut want: Vec<&String> = expected_units.iter().collect();
    want.sort();
    assert_eq!(names, want, "pod {ns}/{name}: units written");

    let header_ok = |unit: &str, e: &[Entry]| {
        let v = one(unit, e, "SourcePath").unwrap_or_else(|| panic!("{unit}: no SourcePath="));
        assert_eq!(plain(unit, "SourcePath", v), source, "{unit}: SourcePath=");
        if let Some(d) = one(unit, e, "Description") {
            plain(unit, "Description", d);
        }
        check_dependencies(unit, e, &own);
    };

    // The slice.
    let e = read_unit(&slice, &rendered[&slice]);
    header_ok(&slice, &e);

    // The pod unit: podunit's own commands on the pod's plan, nothing else.
    let e = read_unit(&pod_unit, &rendered[&pod_unit]);
    header_ok(&pod_unit, &e);
    let plan_file = format!(
        "{}/podunit/{}",
        podunit::translate::plan::GENERATOR_DIR,
        podunit::translate::plan::PodPlan::file_name(&pod_unit)
    );
    for (key, verb) in [
        ("ExecStart", "pod-prepare"),
        ("ExecStopPost", "pod-cleanup"),
    ] {
        let v = one(&pod_unit, &e, key).unwrap_or_else(|| panic!("{pod_unit}: no {key}="));
        assert_eq!(
            exec_argv(&pod_unit, key, v, &[]),
            vec![
                Paths::PODUNIT_BIN.to_string(),
                verb.into(),
                plan_file.clone()
            ],
            "{pod_unit}: {key}="
        );
    }
    assert!(values(&e, "ExecStartPost").is_empty() && values(&e, "ExecStop").is_empty());
    let x = one(&pod_unit, &e, "X-PodunitPod").expect("X-PodunitPod=");
    assert_eq!(plain(&pod_unit, "X-PodunitPod", x), format!("{ns}/{name}"));
    let x = one(&pod_unit, &e, "X-PodunitUid").expect("X-PodunitUid=");
    assert_eq!(plain(&pod_unit, "X-PodunitUid", x), uid);
    check_log_fields(&pod_unit, &e, ns, name, uid, None);

    // Containers.
    for (c, init) in &containers {
        let unit = naming::container_service(ns, name, &c.name);
        let e = read_unit(&unit, &rendered[&unit]);
        header_ok(&unit, &e);
        check_log_fields(&unit, &e, ns, name, uid, Some(&c.name));
        let x = one(&unit, &e, "X-PodunitContainer").expect("X-PodunitContainer=");
        assert_eq!(plain(&unit, "X-PodunitContainer", x), c.name);
        let x = one(&unit, &e, "SyslogIdentifier").expect("SyslogIdentifier=");
        assert_eq!(
            plain(&unit, "SyslogIdentifier", x),
            format!("{name}/{}", c.name)
        );
        assert_eq!(
            one(&unit, &e, "Slice"),
            Some(slice.as_str()),
            "{unit}: Slice="
        );

        // (c) The environment.
        let env = container_env(pod, c, node);
        let mut got: BTreeMap<String, String> = BTreeMap::new();
        for v in values(&e, "Environment") {
            for (k, val) in parse::environment(v)
                .unwrap_or_else(|err| panic!("{unit}: Environment={v:?} does not parse: {err}"))
            {
                assert!(
                    got.insert(k.clone(), val).is_none(),
                    "{unit}: {k} assigned twice in Environment="
                );
            }
        }
        let want: BTreeMap<String, String> = env
            .bound
            .iter()
            .filter_map(|(k, b)| match b {
                Bound::Known(v) => Some((k.clone(), v.clone())),
                Bound::Runtime => None,
            })
            .collect();
        assert_eq!(got, want, "{unit}: Environment=");
        let runtime: Vec<String> = env
            .bound
            .iter()
            .filter(|(_, b)| **b == Bound::Runtime)
            .map(|(k, _)| k.clone())
            .collect();
        let env_file = one(&unit, &e, "EnvironmentFile");
        // Required when a final value is only known at start; allowed when an overridden
        // definition was (pod-prepare leaves the overridden names out of the file).
        if env.open || !runtime.is_empty() {
            assert!(
                env_file.is_some(),
                "{unit}: runtime variables, no EnvironmentFile="
            );
        } else if !env.any_runtime {
            assert_eq!(
                env_file, None,
                "{unit}: EnvironmentFile= without runtime variables"
            );
        }
        if let Some(f) = env_file {
            assert_eq!(
                plain(&unit, "EnvironmentFile", f),
                format!("{}/env/{}.env", units.plan.runtime_dir, c.name),
                "{unit}: EnvironmentFile="
            );
        }

        // (b) The command line: command + args after $(VAR) expansion, runtime variables by
        // reference. Variables envFrom may bind are only known at start: collect them from argv.
        let expected: Vec<Vec<Part>> = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .map(|a| k8s_expand(a, &|n| env.lookup(n)))
            .collect();
        let mut refs = runtime.clone();
        for p in expected.iter().flatten() {
            if let Part::Runtime(n) = p {
                refs.push(n.clone());
            }
        }
        let v = one(&unit, &e, "ExecStart").unwrap_or_else(|| panic!("{unit}: no ExecStart="));
        assert_eq!(
            exec_argv(&unit, "ExecStart", v, &refs),
            expected.iter().map(|a| resolve(a)).collect::<Vec<_>>(),
            "{unit}: ExecStart={v}"
        );

        // Hooks run as written. An init container followed by others also restarts them.
        let lc = c.lifecycle.as_ref();
        let hook = |h: Option<&k8s_openapi::api::core::v1::LifecycleHandler>, pre_stop: bool| {
            hook_argv(c, h?, pre_stop, &units.plan.uid, &node.podunit_bin)
        };
        let post = hook(lc.and_then(|l| l.post_start.as_ref()), false);
        let mut posts = values(&e, "ExecStartPost");
        if *init {
            posts.retain(|v| {
                let Some(units) = v.strip_prefix("+-systemctl --no-block start ") else {
                    return true;
                };
                for u in units.split(' ') {
                    assert!(
                        own(u),
                        "{unit}: ExecStartPost= starts {u:?}, not a unit of this pod"
                    );
                }
                false
            });
        }
        assert_eq!(
            posts.len(),
            usize::from(post.is_some()),
            "{unit}: ExecStartPost="
        );
        if let (Some((prefix, want)), Some(v)) = (post, posts.first()) {
            assert_eq!(hook_line(&unit, "ExecStartPost", v, prefix), want);
        }
        let stop = hook(lc.and_then(|l| l.pre_stop.as_ref()), true);
        let stops = values(&e, "ExecStop");
        assert_eq!(
            stops.len(),
            usize::from(stop.is_some()),
            "{unit}: ExecStop="
        );
        if let (Some((prefix, want)), Some(v)) = (stop, stops.first()) {
            assert_eq!(hook_line(&unit, "ExecStop", v, prefix), want);
        }
        assert!(
            values(&e, "ExecStopPost").is_empty(),
            "{unit}: ExecStopPost="
        );

        // Paths.
        let wd = one(&unit, &e, "WorkingDirectory").map(|v| plain(&unit, "WorkingDirectory", v));
        assert_eq!(
            wd.as_deref(),
            c.working_dir.as_deref().filter(|w| !w.is_empty()),
            "{unit}: WorkingDirectory="
        );
        let mut binds = Vec::new();
        for key in ["BindPaths", "BindReadOnlyPaths"] {
            for v in values(&e, key) {
                let b = parse::bind_paths(v)
                    .unwrap_or_else(|err| panic!("{unit}: {key}={v:?} does not parse: {err}"));
                assert_eq!(b.len(), 1, "{unit}: {key}={v:?} holds {} entries", b.len());
                let b = &b[0];
                assert!(b.recursive, "{unit}: {key}={v:?}");
                // `-` (missing source skipped) only on a subPath, which ExecStartPre= makes.
                binds.push((b.source.clone(), b.destination.clone(), b.ignore_enoent));
            }
        }
        let mut want_binds = Vec::new();
        let mut want_pre = Vec::new();
        for m in c.volume_mounts.iter().flatten() {
            let plan = units
                .plan
                .volumes
                .iter()
                .find(|p| p.name == m.name)
                .expect("a mounted volume is planned");
            let mut src = plan.path.clone();
            let sub = m.sub_path.as_deref().filter(|s| !s.is_empty());
            if let Some(sp) = sub {
                src = format!("{}/{}", src.trim_end_matches('/'), sp.trim_matches('/'));
                want_pre.push(vec![
                    node.podunit_bin.clone(),
                    "subpath".to_string(),
                    plan.path.clone(),
                    sp.trim_matches('/').to_string(),
                ]);
            }
            let dst = m.mount_path.trim_end_matches('/');
            let dst = if dst.is_empty() { "/" } else { dst }.to_string();
            want_binds.push((src, dst, sub.is_some()));
        }
        binds.sort();
        want_binds.sort();
        assert_eq!(binds, want_binds, "{unit}: BindPaths=");
        // A subPath is made by podunit's own helper, privileged, with the literal subPath.
        let mut pre = Vec::new();
        for v in values(&e, "ExecStartPre") {
            let cmd = parse::exec_line(v)
                .unwrap_or_else(|err| panic!("{unit}: ExecStartPre={v:?} does not parse: {err}"));
            assert_eq!(cmd.prefixes, "+", "{unit}: ExecStartPre={v:?}");
            pre.push(
                parse::expand_argv(&cmd.argv, &[])
                    .unwrap_or_else(|err| panic!("{unit}: ExecStartPre={v:?}: {err}")),
            );
        }
        pre.sort();
        want_pre.sort();
        assert_eq!(pre, want_pre, "{unit}: ExecStartPre=");
        for key in ["RootDirectory", "RootImage"] {
            if let Some(v) = one(&unit, &e, key) {
                let p = plain(&unit, key, v);
                assert!(
                    p.starts_with("/srv/") || p.starts_with("/var/lib/podunit/images/"),
                    "{unit}: {key}={p:?}"
                );
            }
        }
    }
}

fn check_log_fields(
    unit: &str,
    e: &[Entry],
    ns: &str,
    name: &str,
    uid: &str,
    container: Option<&str>,
) {
    // One assignment a line (no line nears systemd's 1 MiB limit): the fields are all the lines'.
    let lines = values(e, "LogExtraFields");
    assert!(!lines.is_empty(), "{unit}: no LogExtraFields=");
    let mut got = Vec::new();
    for v in lines {
        got.extend(
            parse::log_extra_fields(v)
                .unwrap_or_else(|err| panic!("{unit}: LogExtraFields={v:?} does not parse: {err}")),
        );
    }
    let mut want = vec![
        ("POD_NAMESPACE".to_string(), ns.to_string()),
        ("POD_NAME".to_string(), name.to_string()),
        ("POD_UID".to_string(), uid.to_string()),
    ];
    if let Some(c) = container {
        want.push(("CONTAINER_NAME".to_string(), c.to_string()));
    }
    assert_eq!(got, want, "{unit}: LogExtraFields=");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_as_apimachinery_reads_them() {
        assert_eq!(quantity("1"), Some((1, 1)));
        assert_eq!(quantity("250m"), Some((250, 1000)));
        assert_eq!(quantity("0.5"), Some((5, 10)));
        assert_eq!(quantity("1.5Gi"), Some((15 << 30, 10)));
        assert_eq!(quantity("64Mi"), Some((64 << 20, 1)));
        assert_eq!(quantity("2k"), Some((2000, 1)));
        assert_eq!(quantity("1e3"), Some((1000, 1)));
        assert_eq!(quantity("1E-3"), Some((1, 1000)));
        assert_eq!(quantity("+3"), Some((3, 1)));
        for bad in ["", "-1", "1x", "Mi", "1.2.3", "1e", "e3"] {
            assert_eq!(quantity(bad), None, "{bad:?}");
        }
        assert_eq!(ceil_scaled(quantity("1.0001m").unwrap(), 1000), 2);
        assert_eq!(ceil_scaled(quantity("250m").unwrap(), 1000), 250);
    }

    #[test]
    fn resource_values_as_the_kubelet_computes_them() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "resources": {"limits": {"cpu": "1500m", "memory": "100Mi"}, "requests": {"memory": "10Mi"}}
        }))
        .unwrap();
        let node = NodeFacts::default();
        let v = |r: &str, d: Option<&str>| expected_resource(&c, &node, r, d);
        assert_eq!(v("limits.cpu", None), "2");
        assert_eq!(v("limits.cpu", Some("1m")), "1500");
        assert_eq!(
            v("requests.cpu", Some("1m")),
            "1500",
            "the request defaults to the limit"
        );
        assert_eq!(v("limits.memory", Some("1Mi")), "100");
        assert_eq!(v("requests.memory", Some("1Mi")), "10");
        let bare: Container = serde_json::from_value(serde_json::json!({"name": "c"})).unwrap();
        assert_eq!(expected_resource(&bare, &node, "requests.cpu", None), "0");
        assert_eq!(
            expected_resource(&bare, &node, "limits.cpu", Some("1m")),
            node.cpu_millis.to_string()
        );
    }

    #[test]
    fn field_values_from_the_pod() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u-1", "labels": {"app": "web"}},
            "spec": {"containers": [], "serviceAccount": "old"}
        }))
        .unwrap();
        let node = NodeFacts::default();
        let f = |p: &str| expected_field(&pod, &node, p);
        assert_eq!(f("metadata.name"), Bound::Known("p".into()));
        assert_eq!(f("metadata.namespace"), Bound::Known("default".into()));
        assert_eq!(f("metadata.uid"), Bound::Known("u-1".into()));
        assert_eq!(f("metadata.labels['app']"), Bound::Known("web".into()));
        assert_eq!(f("metadata.annotations['x']"), Bound::Known(String::new()));
        assert_eq!(f("spec.nodeName"), Bound::Known(node.node_name.clone()));
        assert_eq!(f("spec.serviceAccountName"), Bound::Known("old".into()));
        assert_eq!(f("status.podIP"), Bound::Runtime);
    }
}
