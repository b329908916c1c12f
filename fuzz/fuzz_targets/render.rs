//! Pods built from typed fuzz input, with hostile strings where a manifest may put any text
//! (command, args, env values, workingDir, hooks, mount paths, names, labels), so that far more of
//! them get past validation than from raw YAML. Every pod that renders must parse back to exactly
//! its manifest (see the `podunit_fuzz` checks): argv, environment, paths, dependencies.
#![no_main]

use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapKeySelector, ConfigMapVolumeSource, Container,
    EmptyDirVolumeSource, EnvFromSource, EnvVar, EnvVarSource, ExecAction, HTTPGetAction,
    HTTPHeader, HostPathVolumeSource, Lifecycle, LifecycleHandler, ObjectFieldSelector, Pod,
    PodSpec, SecretKeySelector, SleepAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use podunit::common::paths::Source;
use podunit::generate::generate;
use podunit::manifest::{Catalog, PodEntry, static_uid};
use podunit::translate::NodeFacts;
use std::path::PathBuf;

/// Pieces that matter to one of the syntaxes involved (systemd's quoting, C escapes, specifiers,
/// `$` expansion, unit file lines; Kubernetes `$(VAR)`), so the fuzzer combines them quickly.
const TOKENS: &[&str] = &[
    "$(A)",
    "$(B_1)",
    "$(SECRET)",
    "$(HOST_IP)",
    "$(POD)",
    "$(UNSET)",
    "$$",
    "$",
    "$(",
    ")",
    "${A}",
    "${",
    "}",
    "$A",
    "%",
    "%n",
    "%%",
    "\\",
    "\\\\",
    "\n",
    "\r",
    "\t",
    " ",
    "\0",
    ";",
    " ; ",
    "\\;",
    "\"",
    "'",
    "=",
    "[Service]",
    "\nExecStartPre=/bin/evil",
    "-",
    "+",
    "!",
    "@",
    ":",
    "/",
    "..",
    "/bin/sh",
    "\u{1}",
    "\u{7f}",
    "\u{85}",
    "\u{2028}",
    "\u{feff}",
    "é",
    "#",
];

#[derive(Arbitrary, Debug)]
enum Frag {
    Tok(u8),
    Text(String),
}

#[derive(Arbitrary, Debug)]
struct Hostile(Vec<Frag>);

impl Hostile {
    fn text(&self) -> String {
        self.0
            .iter()
            .map(|f| match f {
                Frag::Tok(i) => TOKENS[*i as usize % TOKENS.len()].to_string(),
                Frag::Text(t) => t.clone(),
            })
            .collect()
    }
}

/// A name: usually a valid one (to get past validation), sometimes anything.
#[derive(Arbitrary, Debug)]
enum Name {
    Fixed(u8),
    Any(Hostile),
}

impl Name {
    fn text(&self, fixed: &[&str]) -> String {
        match self {
            Name::Fixed(i) => fixed[*i as usize % fixed.len()].to_string(),
            Name::Any(h) => h.text(),
        }
    }
}

const DNS_NAMES: &[&str] = &["a", "web", "x-y", "default", "kube-system", "a1.b2", "z9"];
const ENV_NAMES: &[&str] = &["A", "B_1", "SECRET", "HOST_IP", "POD", "HOME", "PATH", "_x"];
const IMAGES: &[&str] = &[
    "host",
    "/srv/rootfs/alpine",
    "/srv/images/app.raw",
    "registry.example/team/app:1.2",
];
const FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "metadata.labels['l']",
    "metadata.annotations['l']",
    "status.hostIP",
    "status.podIP",
];

#[derive(Arbitrary, Debug)]
enum Env {
    Value(Name, Hostile),
    Field(Name, u8),
    SecretKey(Name),
    ConfigMapKey(Name),
}

#[derive(Arbitrary, Debug)]
struct Mount {
    volume: u8,
    path: Hostile,
    absolute: bool,
    sub_path: Option<Hostile>,
    read_only: bool,
}

#[derive(Arbitrary, Debug)]
enum VolumeKind {
    EmptyDir,
    HostPath(Hostile),
    ConfigMap,
}

#[derive(Arbitrary, Debug)]
struct Ctr {
    name: Name,
    image: Name,
    /// Put a valid executable first, so the rest gets past the executable checks.
    valid_executable: bool,
    command: Vec<Hostile>,
    args: Vec<Hostile>,
    env: Vec<Env>,
    env_from: bool,
    working_dir: Option<Hostile>,
    mounts: Vec<Mount>,
    post_start: Option<Vec<Hostile>>,
    pre_stop: Option<Vec<Hostile>>,
    sidecar: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    namespace: Name,
    name: Name,
    uid: Option<Hostile>,
    label: Option<Hostile>,
    annotation: Option<Hostile>,
    restart_policy: u8,
    init: Vec<Ctr>,
    containers: Vec<Ctr>,
    volumes: Vec<(Name, VolumeKind)>,
    private_network: bool,
    restart_steps: bool,
}

fn strings(v: &[Hostile]) -> Vec<String> {
    v.iter().map(Hostile::text).collect()
}

fn container(c: &Ctr, volumes: &[String]) -> Container {
    let mut command = strings(&c.command);
    if c.valid_executable {
        command.insert(0, "/usr/bin/app".into());
    }
    let env = c
        .env
        .iter()
        .map(|e| {
            let (name, value, value_from) = match e {
                Env::Value(n, v) => (n, Some(v.text()), None),
                Env::Field(n, f) => (
                    n,
                    None,
                    Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: FIELDS[*f as usize % FIELDS.len()].into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                ),
                Env::SecretKey(n) => (
                    n,
                    None,
                    Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "s".into(),
                            key: "k".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                ),
                Env::ConfigMapKey(n) => (
                    n,
                    None,
                    Some(EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "c".into(),
                            key: "k".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                ),
            };
            EnvVar {
                name: name.text(ENV_NAMES),
                value,
                value_from,
            }
        })
        .collect();
    // The number of words picks the handler: exec (most), httpGet with hostile host, path and header,
    // or sleep.
    let hook = |h: &Option<Vec<Hostile>>| {
        h.as_ref().map(|cmd| match cmd.len() % 4 {
            1 => LifecycleHandler {
                http_get: Some(HTTPGetAction {
                    host: cmd.first().map(Hostile::text),
                    path: cmd.get(1).map(Hostile::text),
                    port: IntOrString::Int(8080),
                    scheme: (cmd.len() > 4).then(|| "HTTPS".into()),
                    http_headers: cmd.get(2).map(|v| {
                        vec![HTTPHeader {
                            name: "X-Fuzz".into(),
                            value: v.text(),
                        }]
                    }),
                }),
                ..Default::default()
            },
            2 => LifecycleHandler {
                sleep: Some(SleepAction { seconds: 1 }),
                ..Default::default()
            },
            _ => LifecycleHandler {
                exec: Some(ExecAction {
                    command: Some(strings(cmd)),
                }),
                ..Default::default()
            },
        })
    };
    let mounts = c
        .mounts
        .iter()
        .filter(|_| !volumes.is_empty())
        .map(|m| {
            let path = m.path.text();
            VolumeMount {
                name: volumes[m.volume as usize % volumes.len()].clone(),
                mount_path: if m.absolute { format!("/{path}") } else { path },
                sub_path: m.sub_path.as_ref().map(Hostile::text),
                read_only: Some(m.read_only),
                ..Default::default()
            }
        })
        .collect();
    Container {
        name: c.name.text(DNS_NAMES),
        image: Some(c.image.text(IMAGES)),
        command: Some(command),
        args: Some(strings(&c.args)),
        env: Some(env),
        env_from: c.env_from.then(|| {
            vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "c".into(),
                    optional: Some(true),
                }),
                ..Default::default()
            }]
        }),
        working_dir: c.working_dir.as_ref().map(|w| format!("/{}", w.text())),
        volume_mounts: Some(mounts),
        lifecycle: (c.post_start.is_some() || c.pre_stop.is_some()).then(|| Lifecycle {
            post_start: hook(&c.post_start),
            pre_stop: hook(&c.pre_stop),
            ..Default::default()
        }),
        restart_policy: c.sidecar.then(|| "Always".into()),
        ..Default::default()
    }
}

fuzz_target!(|input: Input| {
    if input.init.len() + input.containers.len() > 6 || input.volumes.len() > 4 {
        return;
    }
    let namespace = input.namespace.text(DNS_NAMES);
    let name = input.name.text(DNS_NAMES);
    let file = PathBuf::from("/etc/pods.d/fuzz.yaml");
    let volume_names: Vec<String> = input
        .volumes
        .iter()
        .map(|(n, _)| n.text(DNS_NAMES))
        .collect();
    let volumes = input
        .volumes
        .iter()
        .zip(&volume_names)
        .map(|((_, kind), name)| Volume {
            name: name.clone(),
            empty_dir: matches!(kind, VolumeKind::EmptyDir).then(EmptyDirVolumeSource::default),
            host_path: match kind {
                VolumeKind::HostPath(p) => Some(HostPathVolumeSource {
                    path: format!("/{}", p.text()),
                    type_: None,
                }),
                _ => None,
            },
            config_map: matches!(kind, VolumeKind::ConfigMap).then(|| ConfigMapVolumeSource {
                name: "c".into(),
                optional: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let mut pod = Pod::default();
    pod.metadata.namespace = Some(namespace.clone());
    pod.metadata.name = Some(name.clone());
    // As the loader does: a pod without a UID gets one derived from its name and file.
    pod.metadata.uid = Some(
        input
            .uid
            .as_ref()
            .map(Hostile::text)
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| static_uid(&namespace, &name, &file)),
    );
    pod.metadata.labels = input
        .label
        .as_ref()
        .map(|l| [("l".to_string(), l.text())].into());
    pod.metadata.annotations = input
        .annotation
        .as_ref()
        .map(|l| [("l".to_string(), l.text())].into());
    pod.spec = Some(PodSpec {
        restart_policy: ["Always", "OnFailure", "Never"]
            .get(input.restart_policy as usize)
            .map(|s| s.to_string()),
        init_containers: Some(
            input
                .init
                .iter()
                .map(|c| container(c, &volume_names))
                .collect(),
        ),
        containers: input
            .containers
            .iter()
            .map(|c| container(c, &volume_names))
            .collect(),
        volumes: Some(volumes),
        ..Default::default()
    });
    let catalog = Catalog {
        pods: vec![PodEntry {
            pod,
            file,
            source: Source::Etc,
        }],
        ..Default::default()
    };
    let node = NodeFacts {
        private_network: input.private_network,
        restart_steps: input.restart_steps,
        ..NodeFacts::default()
    };
    let g = generate(&catalog, &node, &podunit_fuzz::Images);
    podunit_fuzz::check_generated(&catalog, &g, &node);
});
