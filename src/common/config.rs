//! The node configuration, `/etc/podunit/config.yaml`.
//!
//! Every key is optional: an empty or missing file means local mode (no API server) with the default
//! policy. Drop-ins in `/etc/podunit/config.d/*.yaml` are merged over it in lexical order, as the
//! kubelet merges its `--config-dir`: a mapping merges key by key, any other value replaces. They
//! let a package or a fleet tool set a key without editing the administrator's file (the packages'
//! first install writes `network: cni` there, so an upgraded host keeps what its file says). Unknown keys are not fatal (a newer config on an older podunit must still boot the node) but
//! are reported with their path, so a typo does not silently fall back to a default.

use crate::common::policy::Policy;
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// The whole file. Field names are the YAML keys in camelCase.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Config {
    /// This node's name in the cluster; defaults to the host name (lower-cased, as the kubelet does).
    pub node_name: Option<String>,
    /// A kubeconfig with the node's credentials. Absent: local mode, the API server is never contacted.
    pub kubeconfig: Option<PathBuf>,
    /// The node IP to report (InternalIP, pods' hostIP/podIP); default: the default route's address.
    #[serde(rename = "nodeIP")]
    pub node_ip: Option<String>,
    /// Extra labels for the Node object (the standard ones are always set).
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// Taints the Node is registered with (KubeletConfiguration's `registerWithTaints`); here
    /// too, a DaemonSet whose pods do not tolerate one has no pod on this node.
    pub register_with_taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// Image references that mean the host root filesystem (besides `host`); also the policy's.
    pub host_images: Vec<String>,
    /// podunit-sync's local mode: watch /etc/pods.d and reload on changes (see watch.rs).
    pub watch_manifests: bool,
    /// Timing of the node agent (cluster mode).
    pub cluster: ClusterTiming,
    /// What pods may do on this node.
    pub policy: Policy,
    /// `host` (default): pods share the host's network. `private`: each pod gets a network
    /// namespace of its own with only loopback, shared by its containers (hostNetwork pods excepted).
    /// `cni`: that namespace is attached to the network by the CNI plugins (docs/networking.md).
    pub network: Network,
    /// Where `network: cni` finds its configuration, plugins and ADD results.
    pub cni: Cni,
    /// The cluster DNS servers pods with `dnsPolicy: ClusterFirst` use (KubeletConfiguration's
    /// `clusterDNS`); none: such pods fall back to `Default`, as the kubelet's do.
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    /// The cluster's DNS domain, for pods' search lists and FQDNs (`clusterDomain`).
    pub cluster_domain: String,
    /// The resolver configuration `Default` pods get, and ClusterFirst pods take their search
    /// list from (`resolvConf`; on a host with systemd-resolved's stub, use
    /// /run/systemd/resolve/resolv.conf, whose servers a pod's own network can reach).
    pub resolv_conf: PathBuf,
    /// systemd 254 or newer: restart delays grow like CrashLoopBackOff (`RestartSteps=`,
    /// `RestartMaxDelaySec=`). systemd 252 knows only a fixed `RestartSec=`.
    pub restart_backoff_steps: bool,
    /// Registry mirrors, CA files, insecure registries, the credentials file (docs/images.md).
    pub registries: crate::common::registries::Registries,
    /// The kubelet API (logs, stats) that the API server proxies to: cluster mode only.
    pub kubelet_server: KubeletServer,
    /// Storage classes whose PersistentVolumeClaims podunit provisions, by name: the directory
    /// each claim's directory is made in (docs/workloads.md). Unset: `local-path`, in
    /// /var/lib/podunit/volumes.
    pub storage_classes: Option<std::collections::BTreeMap<String, PathBuf>>,
    /// The class a claim without `storageClassName` gets; default `local-path` when that class
    /// is one of `storageClasses`.
    pub default_storage_class: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_name: Default::default(),
            kubeconfig: Default::default(),
            node_ip: Default::default(),
            node_labels: Default::default(),
            register_with_taints: Default::default(),
            host_images: Default::default(),
            watch_manifests: Default::default(),
            cluster: Default::default(),
            policy: Default::default(),
            network: Default::default(),
            cni: Default::default(),
            cluster_dns: Default::default(),
            cluster_domain: "cluster.local".into(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            restart_backoff_steps: Default::default(),
            registries: Default::default(),
            kubelet_server: Default::default(),
            storage_classes: None,
            default_storage_class: None,
        }
    }
}

impl Config {
    /// The node's storage classes, as claims are provisioned by them.
    pub fn storage_classes(&self) -> crate::common::storage_classes::StorageClasses {
        use crate::common::storage_classes::{DEFAULT_CLASS, StorageClasses};
        let Some(classes) = &self.storage_classes else {
            let mut c = StorageClasses::default();
            if let Some(d) = &self.default_storage_class {
                c.default = Some(d.clone());
            }
            return c;
        };
        let classes: std::collections::BTreeMap<String, String> = classes
            .iter()
            .map(|(k, v)| (k.clone(), v.display().to_string()))
            .collect();
        let default = self.default_storage_class.clone().or_else(|| {
            classes
                .contains_key(DEFAULT_CLASS)
                .then(|| DEFAULT_CLASS.to_string())
        });
        StorageClasses { classes, default }
    }

    pub fn cluster_domain(&self) -> &str {
        &self.cluster_domain
    }

    pub fn resolv_conf(&self) -> &Path {
        &self.resolv_conf
    }
}

/// The node's kubelet API server (docs/cluster-mode.md). Serves in cluster mode only: requests are
/// authenticated and authorised through the API server, which local mode has none of.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletServer {
    /// The port (kubelet: 10250); 0 turns the server off.
    pub port: u16,
    /// The address to listen on (all of the node's by default).
    pub address: String,
    /// A serving certificate (PEM, chain) and its key; both or neither. Without them the node makes
    /// its own key and a self-signed certificate for its addresses.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// The CA that client certificates must chain to; default: the kubeconfig's CA.
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: Option<PathBuf>,
    /// Ask the cluster for the serving certificate (`certificates.k8s.io`, signer
    /// `kubernetes.io/kubelet-serving`) and renew it before it expires, as the kubelet's
    /// `serverTLSBootstrap`. The certificate files above win over it.
    #[serde(rename = "serverTLSBootstrap")]
    pub server_tls_bootstrap: bool,
}

impl Default for KubeletServer {
    fn default() -> Self {
        KubeletServer {
            port: 10250,
            address: "0.0.0.0".into(),
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            server_tls_bootstrap: false,
        }
    }
}

/// The pods' network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    #[default]
    Host,
    Private,
    Cni,
}

/// The CNI configuration, as containerd's `conf_dir`/`bin_dir` name it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Cni {
    /// The first `.conflist`, `.conf` or `.json` in lexical order is the pods' network.
    pub conf_dir: PathBuf,
    /// Searched in order for plugin binaries.
    pub bin_dirs: Vec<PathBuf>,
    /// ADD results, kept for DEL and CHECK.
    pub cache_dir: PathBuf,
    /// The subnet of podunit's own bridge network, used when `conf_dir` holds no configuration
    /// (`cni::default_network`); unset: 10.88.0.0/16 in local mode, the Node's podCIDRs in
    /// cluster mode.
    pub pod_subnet: Option<String>,
}

impl Default for Cni {
    fn default() -> Self {
        Cni {
            conf_dir: PathBuf::from("/etc/cni/net.d"),
            bin_dirs: ["/opt/cni/bin", "/usr/lib/cni"].map(PathBuf::from).to_vec(),
            cache_dir: PathBuf::from("/var/lib/podunit/cni"),
            pod_subnet: None,
        }
    }
}

/// Periods of the node agent, in seconds. The defaults are the kubelet's.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterTiming {
    /// Lease renewal period (kubelet: 10 s, a quarter of the lease duration).
    pub lease_renew_seconds: u64,
    /// Lease duration written into the Lease (kubelet: 40 s).
    pub lease_duration_seconds: i32,
    /// Node status is posted at least this often even when nothing changed (kubelet: 5 min with leases;
    /// podunit posts every minute so `kubectl get node` ages stay fresh).
    pub node_status_report_seconds: u64,
    /// Quiet time before a burst of spool changes turns into one `daemon-reload`, in milliseconds.
    pub reload_debounce_millis: u64,
    /// Upper bound of the watch back-off, in seconds.
    pub max_backoff_seconds: u64,
    /// How often the ConfigMaps and Secrets pods use are read again (kubelet: its sync period, 1 min).
    pub object_refresh_seconds: u64,
}

impl Default for ClusterTiming {
    fn default() -> Self {
        ClusterTiming {
            lease_renew_seconds: 10,
            lease_duration_seconds: 40,
            node_status_report_seconds: 60,
            reload_debounce_millis: 300,
            max_backoff_seconds: 30,
            object_refresh_seconds: 60,
        }
    }
}

/// Why the configuration could not be used.
#[derive(Debug)]
pub enum ConfigError {
    Read(PathBuf, std::io::Error),
    Parse(PathBuf, String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read(p, e) => write!(f, "{}: {e}", p.display()),
            ConfigError::Parse(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A parsed configuration plus the keys that were not understood (as dotted paths).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    pub config: Config,
    pub unknown_keys: Vec<String>,
}

impl Config {
    /// Parses the YAML text of the config file.
    pub fn parse(text: &str) -> Result<Loaded, String> {
        if text.trim().is_empty() {
            return Ok(Loaded::default());
        }
        let mut unknown = Vec::new();
        let config: Config = serde_saphyr::with_deserializer_from_str(text, |de| {
            serde_ignored::deserialize(de, |path| unknown.push(path.to_string()))
        })
        .map_err(|e| e.to_string())?;
        Ok(Loaded {
            config,
            unknown_keys: unknown,
        })
    }

    /// Reads `path` and the drop-ins of `config.d` beside it; a missing file is the default
    /// configuration (local mode).
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        let base = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(ConfigError::Read(path.to_path_buf(), e)),
        };
        let dropins = dropins(&path.with_file_name(DROPIN_DIR))?;
        if dropins.is_empty() {
            return Config::parse(&base).map_err(|e| ConfigError::Parse(path.to_path_buf(), e));
        }
        let mut merged =
            yaml_mapping(&base).map_err(|e| ConfigError::Parse(path.to_path_buf(), e))?;
        for (p, text) in &dropins {
            let layer = yaml_mapping(text).map_err(|e| ConfigError::Parse(p.clone(), e))?;
            merge(&mut merged, layer);
        }
        let mut unknown = Vec::new();
        let config: Config = serde_ignored::deserialize(merged, |p| unknown.push(p.to_string()))
            .map_err(|e| {
                ConfigError::Parse(
                    path.to_path_buf(),
                    format!("{e} (with the drop-ins of {DROPIN_DIR}/)"),
                )
            })?;
        Ok(Loaded {
            config,
            unknown_keys: unknown,
        })
    }

    /// The policy with the top-level `hostImages` applied.
    pub fn effective_policy(&self) -> Policy {
        let mut p = self.policy.clone();
        for h in &self.host_images {
            if !p.host_images.contains(h) {
                p.host_images.push(h.clone());
            }
        }
        p
    }

    /// The node name: configured, else the host name lower-cased (kubelet's default).
    pub fn node_name(&self) -> String {
        if let Some(n) = self.node_name.as_deref().filter(|n| !n.is_empty()) {
            return n.to_string();
        }
        host_name()
    }
}

/// The drop-in directory beside the configuration file.
pub const DROPIN_DIR: &str = "config.d";

/// The `*.yaml` files of `dir` in lexical order, with their text; none when there is no `dir`.
/// Dotfiles and editors' and package managers' leftovers are not `*.yaml`, so they are skipped.
fn dropins(dir: &Path) -> Result<Vec<(PathBuf, String)>, ConfigError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ConfigError::Read(dir.to_path_buf(), e)),
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.ends_with(".yaml") && !name.starts_with('.')
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| match std::fs::read_to_string(&p) {
            Ok(t) => Ok((p, t)),
            Err(e) => Err(ConfigError::Read(p, e)),
        })
        .collect()
}

/// A YAML document that must be a mapping (or empty).
fn yaml_mapping(text: &str) -> Result<serde_json::Value, String> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    match serde_saphyr::from_str::<serde_json::Value>(text).map_err(|e| e.to_string())? {
        v @ serde_json::Value::Object(_) => Ok(v),
        serde_json::Value::Null => Ok(serde_json::Value::Object(Default::default())),
        _ => Err("not a mapping of keys to values".into()),
    }
}

/// `layer` over `base`: mappings merge key by key, anything else replaces.
fn merge(base: &mut serde_json::Value, layer: serde_json::Value) {
    match (base, layer) {
        (serde_json::Value::Object(b), serde_json::Value::Object(l)) => {
            for (k, v) in l {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The kernel's host name, lower-cased, without a trailing newline.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_ascii_lowercase())
        .unwrap_or_else(|_| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_parse() {
        let l = Config::parse(
            "registries:\n  mirrors:\n    docker.io: [mirror.local:5000]\n  ca:\n    mirror.local:5000: /etc/podunit/ca.pem\n  insecure: [lab:5000]\npolicy:\n  registries: [docker.io]\n",
        )
        .unwrap();
        assert!(l.unknown_keys.is_empty(), "{:?}", l.unknown_keys);
        let r = &l.config.registries;
        assert_eq!(
            r.endpoints("docker.io")[0].base,
            "https://mirror.local:5000"
        );
        assert!(r.is_insecure("lab:5000"));
        assert_eq!(
            l.config.policy.registries,
            Some(vec!["docker.io".to_string()])
        );
    }

    #[test]
    fn empty_file_is_local_mode() {
        let l = Config::parse("").unwrap();
        assert_eq!(l.config.kubeconfig, None);
        assert!(l.unknown_keys.is_empty());
    }

    #[test]
    fn keys_parse_and_unknown_are_reported() {
        let l = Config::parse(
            "nodeName: edge-1\nkubeconfig: /etc/podunit/kubeconfig\nnodeLables: {a: b}\n\
             cluster:\n  leaseRenewSeconds: 5\n  bogus: 1\n",
        )
        .unwrap();
        assert_eq!(l.config.node_name(), "edge-1");
        assert_eq!(
            l.config.kubeconfig.as_deref(),
            Some(Path::new("/etc/podunit/kubeconfig"))
        );
        assert_eq!(l.config.cluster.lease_renew_seconds, 5);
        assert_eq!(l.config.cluster.lease_duration_seconds, 40);
        assert_eq!(l.unknown_keys, vec!["nodeLables", "cluster.bogus"]);
    }

    /// packaging/config.yaml with every key uncommented, as an admin would: a line `#key:` or
    /// `#  key:` is a setting, `# prose` stays a comment.
    fn shipped_config_uncommented() -> String {
        include_str!("../../packaging/config.yaml")
            .lines()
            .map(|l| match l.strip_prefix('#') {
                Some(rest) if rest.starts_with("  ") || !rest.starts_with([' ', '#']) => rest,
                Some(_) if !l.starts_with("#  ") => "",
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The field names serde's derive asks for, read by a deserializer that only listens.
    fn fields_of<T: for<'de> Deserialize<'de>>() -> Vec<&'static str> {
        struct Listen(Vec<&'static str>);
        #[derive(Debug)]
        struct Stop;
        impl std::fmt::Display for Stop {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("stop")
            }
        }
        impl std::error::Error for Stop {}
        impl serde::de::Error for Stop {
            fn custom<M: fmt::Display>(_: M) -> Self {
                Stop
            }
        }
        impl<'de> serde::Deserializer<'de> for &mut Listen {
            type Error = Stop;
            fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
                Err(Stop)
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Stop> {
                self.0.extend(fields);
                Err(Stop)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        let mut l = Listen(Vec::new());
        let _ = T::deserialize(&mut l);
        l.0
    }

    #[test]
    fn the_shipped_config_documents_every_key_with_its_default() {
        let text = shipped_config_uncommented();
        let l = Config::parse(&text).unwrap();
        assert!(l.unknown_keys.is_empty(), "{:?}", l.unknown_keys);
        // "every value shown is the default"
        assert_eq!(l.config, Config::default());
        let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let check = |at: &str, node: &serde_json::Value, fields: Vec<&'static str>| {
            assert!(!fields.is_empty(), "no fields read for {at}");
            for f in fields {
                // Commented-out examples inside a section count (`# registries: []`).
                let shown = node.get(f).is_some() || text.contains(&format!("# {f}:"));
                assert!(shown, "packaging/config.yaml does not document {at}{f}");
            }
        };
        check("", &doc, fields_of::<Config>());
        check("cluster.", &doc["cluster"], fields_of::<ClusterTiming>());
        check("cni.", &doc["cni"], fields_of::<Cni>());
        check("policy.", &doc["policy"], fields_of::<Policy>());
        check(
            "registries.",
            &doc["registries"],
            fields_of::<crate::common::registries::Registries>(),
        );
        check(
            "registries.limits.",
            &doc["registries"]["limits"],
            fields_of::<crate::common::pull_limits::Limits>(),
        );
        check(
            "kubeletServer.",
            &doc["kubeletServer"],
            fields_of::<KubeletServer>(),
        );
    }

    #[test]
    fn the_shipped_config_uncommented_parses_as_written() {
        // The same keys with other values, as an admin would set them.
        let l = Config::parse("hostImages: [host, debian]\nwatchManifests: true\n").unwrap();
        assert!(l.unknown_keys.is_empty(), "{:?}", l.unknown_keys);
        assert_eq!(
            l.config.effective_policy().host_images,
            vec!["host", "debian"]
        );
    }

    #[test]
    fn dropins_merge_over_the_file_in_lexical_order() {
        let dir = std::env::temp_dir().join(format!("podunit-config-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.yaml");
        std::fs::write(
            &file,
            "network: host\ncluster:\n  leaseRenewSeconds: 5\nclusterDNS: [10.0.0.10]\n",
        )
        .unwrap();
        let d = dir.join(DROPIN_DIR);
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("50-network.yaml"), "# first install\nnetwork: cni\n").unwrap();
        std::fs::write(
            d.join("60-site.yaml"),
            "cluster:\n  maxBackoffSeconds: 9\nclusterDNS: [10.0.0.53]\nbogus: 1\n",
        )
        .unwrap();
        std::fs::write(d.join("70-x.yaml~"), "network: private\n").unwrap();
        std::fs::write(d.join("empty.yaml"), "").unwrap();
        let l = Config::load(&file).unwrap();
        assert_eq!(l.config.network, Network::Cni);
        // Mappings merge key by key; lists replace.
        assert_eq!(l.config.cluster.lease_renew_seconds, 5);
        assert_eq!(l.config.cluster.max_backoff_seconds, 9);
        assert_eq!(l.config.cluster_dns, vec!["10.0.0.53"]);
        assert_eq!(l.unknown_keys, vec!["bogus"]);

        // A broken drop-in is an error naming it, not a silent default.
        std::fs::write(d.join("80-bad.yaml"), "- a list\n").unwrap();
        let e = Config::load(&file).unwrap_err().to_string();
        assert!(e.contains("80-bad.yaml"), "{e}");
        std::fs::write(d.join("80-bad.yaml"), "network: wifi\n").unwrap();
        assert!(Config::load(&file).is_err());

        // Drop-ins alone (no file) apply too.
        std::fs::remove_file(d.join("80-bad.yaml")).unwrap();
        std::fs::remove_file(&file).unwrap();
        let l = Config::load(&file).unwrap();
        assert_eq!(l.config.network, Network::Cni);
        assert_eq!(l.config.cluster.lease_renew_seconds, 10);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wrong_type_is_an_error() {
        assert!(Config::parse("cluster:\n  leaseRenewSeconds: soon\n").is_err());
    }
}
