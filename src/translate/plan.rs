//! What must happen on the host when a pod starts, written by the generator next to the units and
//! carried out by `podunit pod-prepare` (DESIGN.md §6: the generator itself never touches the host).
//!
//! A plan never holds a Secret's or ConfigMap's values, only references to them: it lives in the
//! world-readable generator directory. Values are resolved when the pod starts.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where the generator puts plans, relative to its output directory.
pub const PLAN_DIR: &str = "podunit";
/// The normal generator directory of the system manager, where the pod unit finds its plan.
pub const GENERATOR_DIR: &str = "/run/systemd/generator";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPlan {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The manifest, for messages.
    pub source: String,
    /// `/var/lib/podunit/pods/<uid>`: survives reboots (emptyDir on disk).
    pub state_dir: String,
    /// `/run/podunit/pods/<uid>`: tmpfs, 0700 (files of secret and configMap volumes, env files).
    pub runtime_dir: String,
    pub volumes: Vec<VolumePlan>,
    /// `securityContext.fsGroup`: the group of the emptyDir, configMap, secret, downwardAPI and
    /// projected volumes, with the kubelet's group permissions (see `podstart::prepare`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_group: Option<u32>,
    /// `shareProcessNamespace`: one PID namespace for the pod, made by `pod-prepare`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub share_process_namespace: bool,
    pub env_files: Vec<EnvFilePlan>,
    /// Numeric users (uid, primary gid) and groups the containers run with. Kubernetes needs no
    /// user database entry for them, systemd does: those the host does not know get a record in
    /// /run/userdb (nss-systemd) when the pod starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<(u32, u32)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<u32>,
    /// The containers' probes, which podunit-sync runs (`src/probe`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<crate::probe::spec::ContainerProbes>,
    /// The containers whose root is a pulled image, mounted when the pod starts by `pod-prepare`
    /// (see [`crate::podstart::root`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roots: Vec<RootPlan>,
    /// The pod's `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf`, written at start for the
    /// containers that have a root of their own, as the kubelet writes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etc: Option<EtcPlan>,
    /// The names of the pod's `imagePullSecrets` (never their values), for the pulls podunit-sync
    /// makes at the starts of its `Always` containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<String>,
    /// The pod's attachment by the CNI plugins (node config `network: cni`), made by
    /// `pod-prepare` in the pod's network namespace and undone by `pod-cleanup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkPlan>,
    /// The hostname of the pod's UTS namespace, which `pod-prepare` makes and pins at
    /// [`PodPlan::uts_namespace`] for its containers to join (pods with a network of their own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uts_hostname: Option<String>,
}

/// What the plugins are given besides the pod's identity (see [`crate::translate::network`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPlan {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_mappings: Vec<PortMappingPlan>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<BandwidthPlan>,
}

/// A container's `hostPort`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMappingPlan {
    pub host_port: u16,
    pub container_port: u16,
    /// `TCP`, `UDP` or `SCTP`, as the pod spells it.
    pub protocol: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

/// The pod's bandwidth annotations, in bits per second.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BandwidthPlan {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_bps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_bps: Option<u64>,
}

/// One container's root: the image's layers under a writable layer of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RootPlan {
    pub container: String,
    /// The image's `imageID`, for messages.
    pub image: String,
    /// Layer directories in the store, lowest first.
    pub layers: Vec<String>,
    /// Created in the root when missing, as container runtimes create the working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// The image as the manifest names it, and its `imagePullPolicy` (defaulted): podunit-sync
    /// asks the registry again at every start of an `Always` container.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reference: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pull_policy: String,
    /// Device nodes in the image are usable (a privileged container); otherwise the root is
    /// mounted `nodev`. Absent (an older plan): not usable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub devices: bool,
    /// Set-user-ID and file capabilities in the image take effect (the container may gain
    /// privileges); otherwise the root is mounted `nosuid`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub setuid: bool,
}

/// What the kubelet puts in a pod's name files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcPlan {
    /// `spec.hostname`, else the pod's name; the node's with hostNetwork.
    pub hostname: String,
    /// `hostname.subdomain.namespace.svc.cluster.local` when the pod has a subdomain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fqdn: Option<String>,
    /// The node's /etc/hosts is the base (hostNetwork), not the managed file.
    pub host_network: bool,
    /// `spec.hostAliases`: (ip, hostnames).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_aliases: Vec<(String, Vec<String>)>,
    /// What `/etc/resolv.conf` is made of (see [`crate::translate::dns`]).
    #[serde(default)]
    pub dns: DnsPlan,
}

/// The pod's resolver configuration as the kubelet composes it, less what only the node's
/// resolv.conf says (read when the pod starts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsPlan {
    /// `cluster`, `host` (the node's resolver) or `none` (only `dnsConfig`): the kubelet's DNS
    /// type after its fallbacks.
    pub kind: DnsKind,
    /// With `cluster`: the cluster DNS servers, the cluster's search domains (the node's follow
    /// them) and `ndots:5`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// `spec.dnsConfig`, appended as the kubelet appends it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_searches: Vec<String>,
    /// (name, value): an option of the pod's replaces one of the same name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_options: Vec<(String, Option<String>)>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DnsKind {
    #[default]
    Host,
    Cluster,
    None,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumePlan {
    pub name: String,
    /// The host directory (or hostPath) the containers bind.
    pub path: String,
    #[serde(flatten)]
    pub kind: VolumeKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum VolumeKind {
    /// A directory created empty for the pod (0777, as the kubelet makes it); `memory` = tmpfs.
    EmptyDir {
        memory: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size_limit: Option<u64>,
    },
    /// A host path checked (and maybe created) as its `type` says.
    HostPath {
        #[serde(default, skip_serializing_if = "String::is_empty")]
        host_type: String,
    },
    /// A PersistentVolumeClaim's directory: a bound volume's path, checked as its `host_type`
    /// says, or a provisioned directory made on first use (`host_type` "Provisioned").
    Claim {
        claim: String,
        host_type: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        read_only: bool,
    },
    /// Files written fresh at each pod start (configMap, secret, downwardAPI, projected).
    Files {
        sources: Vec<FileSource>,
        /// Owner of the files.
        uid: u32,
        gid: u32,
        /// The volume's defaultMode.
        mode: u32,
    },
}

/// One source of files in a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum FileSource {
    /// All keys (items None) or the listed ones of a ConfigMap or Secret.
    Object {
        secret: bool,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        items: Option<Vec<KeyFile>>,
        optional: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
    },
    /// A file whose content the generator knew (downward API fields: labels, names, limits).
    Literal {
        path: String,
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
    },
    /// A service account token, requested from the API server by podunit-sync (cluster mode).
    ServiceAccountToken {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audience: Option<String>,
        expiration_seconds: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyFile {
    pub key: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

/// The environment file of one container: the variables whose values exist only at start time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvFilePlan {
    pub container: String,
    pub path: String,
    /// In Kubernetes order (envFrom first, then env); later entries win.
    pub entries: Vec<EnvEntry>,
    /// Names that a later `Environment=` value overrides: never written to the file, since
    /// systemd lets EnvironmentFile= win over Environment= and Kubernetes lets the later entry win.
    pub overridden: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum EnvEntry {
    /// A value known at generation; kept here because later runtime values may reference it.
    Value { name: String, value: String },
    /// One key of a ConfigMap or Secret.
    Key {
        name: String,
        secret: bool,
        object: String,
        key: String,
        optional: bool,
    },
    /// Every key of a ConfigMap or Secret, prefixed.
    All {
        secret: bool,
        object: String,
        prefix: String,
        optional: bool,
    },
    /// The Services' variables (cluster mode), first and so overridden by everything after:
    /// `links` is the pod's `enableServiceLinks`.
    Services { links: bool },
    /// A value with `$(VAR)` references to runtime values, expanded at start.
    Template { name: String, template: String },
    /// The node's IP (status.hostIP, status.hostIPs).
    HostIp { name: String },
    /// The pod's IP (status.podIP), or all of them, comma-separated (status.podIPs): the node's
    /// on the host network, the one CNI gave it on `network: cni`.
    PodIp {
        name: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        all: bool,
    },
}

impl PodPlan {
    /// Where a container's root is mounted: on tmpfs, gone with the pod.
    pub fn root_dir(&self, container: &str) -> String {
        format!("{}/roots/{container}", self.runtime_dir)
    }

    /// A container's writable layer (`upper`, `work`): on disk, like a runtime's, made fresh at
    /// each pod start.
    pub fn root_state_dir(&self, container: &str) -> String {
        format!("{}/roots/{container}", self.state_dir)
    }

    /// The pod's PID namespace (`shareProcessNamespace`), bound there by `pod-prepare`.
    pub fn pid_namespace(&self) -> String {
        crate::common::text::concat(&[crate::common::paths::Paths::PID_NAMESPACES, "/", &self.uid])
    }

    /// Whether the pod reads ConfigMaps or Secrets when it starts (an env var or a files volume
    /// from one): only then does `pod-prepare` read the manifest directories for them.
    pub fn uses_objects(&self) -> bool {
        let env = self
            .env_files
            .iter()
            .flat_map(|f| &f.entries)
            .any(|e| matches!(e, EnvEntry::Key { .. } | EnvEntry::All { .. }));
        let files = self.volumes.iter().any(|v| match &v.kind {
            VolumeKind::Files { sources, .. } => sources
                .iter()
                .any(|s| matches!(s, FileSource::Object { .. })),
            _ => false,
        });
        env || files
    }

    /// Where `pod-prepare` pins the pod's UTS namespace (see [`PodPlan::uts_hostname`]).
    pub fn uts_namespace(&self) -> String {
        crate::common::text::concat(&[crate::common::paths::Paths::UTS_NAMESPACES, "/", &self.uid])
    }

    /// One of the files of [`EtcPlan`] (`hosts`, `hostname`, `resolv.conf`).
    pub fn etc_file(&self, name: &str) -> String {
        format!("{}/etc/{name}", self.runtime_dir)
    }

    /// The plan's file name in [`PLAN_DIR`].
    pub fn file_name(pod_unit: &str) -> String {
        crate::common::text::concat(&[pod_unit.trim_end_matches(".service"), ".json"])
    }
}

/// Labels and annotations formatted as the kubelet writes them into downward API files
/// (`fieldpath.FormatMap`): `key="value"` lines in key order, the value quoted as Go's `%q`
/// quotes it, and no newline after the last.
pub fn format_map(map: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (k, v) in map {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(k);
        out.push('=');
        push_go_quoted(&mut out, v);
    }
    out
}

/// Appends `s` as Go's `strconv.Quote` writes it: `"` and `\` escaped, the short escapes for the
/// C0 controls that have one, `\xHH` for the other ASCII controls, `\uHHHH` (`\UHHHHHHHH`) for
/// other characters that are not printable (controls, and spaces other than U+0020); everything
/// else as it is.
fn push_go_quoted(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_uses_objects_through_its_env_or_its_files_volumes() {
        let plan = |volumes: &str, env: &str| -> PodPlan {
            serde_json::from_str(&format!(
                r#"{{"namespace":"default","name":"web","uid":"u","source":"/etc/pods.d/web.yaml",
                "stateDir":"/s","runtimeDir":"/r","volumes":[{volumes}],"envFiles":[{{"container":"c",
                "path":"/r/env/c","entries":[{env}],"overridden":[]}}]}}"#
            ))
            .unwrap()
        };
        let value = r#"{"type":"value","name":"A","value":"1"}"#;
        let key =
            r#"{"type":"key","name":"A","secret":false,"object":"cm","key":"k","optional":false}"#;
        let empty_dir = r#"{"name":"w","path":"/w","type":"emptyDir","memory":false}"#;
        let config_map = r#"{"name":"c","path":"/c","type":"files","uid":0,"gid":0,"mode":420,
            "sources":[{"type":"object","secret":false,"name":"cm","optional":false}]}"#;
        assert!(!plan(empty_dir, value).uses_objects());
        assert!(plan("", key).uses_objects());
        assert!(plan(config_map, value).uses_objects());
    }

    #[test]
    fn maps_are_formatted_as_the_kubelet_formats_them() {
        let m: BTreeMap<String, String> = [
            ("tier", "a\"b\\c"),
            ("app", "web"),
            ("odd", "x\u{1b}y\u{0}\n\u{a0}\u{85}é"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        // What Go's fmt.Sprintf("%v=%q") gives for each, joined without a final newline.
        assert_eq!(
            format_map(&m),
            "app=\"web\"\nodd=\"x\\x1by\\x00\\n\\u00a0\\u0085é\"\ntier=\"a\\\"b\\\\c\""
        );
        assert_eq!(format_map(&BTreeMap::new()), "");
    }
}
