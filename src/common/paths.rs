//! Where podunit reads and writes. Every path can be moved under a root prefix for tests, the way
//! zram-generator honours `ZRAM_GENERATOR_ROOT`.

use std::path::{Path, PathBuf};

/// Environment variable that prefixes every host path podunit *reads or writes itself*.
/// Paths written *into units* stay absolute host paths: they are resolved by systemd, not by us.
pub const ROOT_ENV: &str = "PODUNIT_ROOT";

/// The host paths of DESIGN.md §3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// Prefix applied to every path below when podunit itself touches it ("/" on a real host).
    pub root: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            root: PathBuf::from("/"),
        }
    }
}

impl Paths {
    /// Paths under `root` (tests) or the real host (`/`).
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        Paths { root: root.into() }
    }

    /// Honours `PODUNIT_ROOT` when set and not empty.
    pub fn from_env() -> Self {
        match std::env::var_os(ROOT_ENV) {
            Some(r) if !r.is_empty() => Paths::with_root(r),
            _ => Paths::default(),
        }
    }

    /// `host` (an absolute host path) as podunit must open it.
    pub fn host(&self, host: &str) -> PathBuf {
        self.root.join(host.trim_start_matches('/'))
    }

    /// Admin-written manifests.
    pub const ETC_PODS: &'static str = "/etc/pods.d";
    /// Runtime manifests, gone at reboot.
    pub const RUN_PODS: &'static str = "/run/pods.d";
    /// Pods (and their ConfigMaps and Secrets) written by podunit-sync.
    pub const SPOOL: &'static str = "/var/lib/podunit/spool";
    /// Per-pod persistent state (emptyDir volumes).
    pub const STATE: &'static str = "/var/lib/podunit/pods";
    /// Per-pod runtime state on tmpfs (secret/configMap volume files, env files).
    pub const RUNTIME: &'static str = "/run/podunit/pods";
    /// `<uid>`: the PID namespace of a pod with `shareProcessNamespace` (a bind mount of it),
    /// outside the root-only `/run/podunit`: containers open it as their own users (joining it
    /// takes `CAP_SYS_ADMIN`, which only `pid-init` has).
    pub const PID_NAMESPACES: &'static str = "/run/podunit-pidns";
    /// Pods' UTS namespaces, with the pod's hostname, pinned by `pod-prepare` for the containers'
    /// `pid-init --uts` to join: one per pod, as the sandbox's under a kubelet.
    pub const UTS_NAMESPACES: &'static str = "/run/podunit-utsns";
    /// Pinned network namespaces (`network: cni`), as `ip netns` keeps them: `podunit-<uid>`.
    pub const NETNS: &'static str = "/run/netns";
    /// Service account tokens podunit-sync requested, by pod UID: kept apart from the pod's
    /// runtime directory, which `pod-cleanup` empties whenever the pod stops.
    pub const TOKENS: &'static str = "/run/podunit/tokens";
    /// The cluster's Services as podunit-sync last saw them (cluster mode), for the environment
    /// the kubelet gives containers (`KUBERNETES_SERVICE_HOST`, ...): written by the node agent,
    /// read by `pod-prepare`.
    pub const SERVICES: &'static str = "/var/lib/podunit/services.json";
    /// The Node's `spec.podCIDRs` as the node agent last saw them (cluster mode), for podunit's
    /// own bridge network (`cni::default_network`): written by the node agent, read by
    /// `pod-prepare`.
    pub const POD_CIDRS: &'static str = "/var/lib/podunit/pod-cidrs.json";
    /// The local image store: `<store>/<escaped reference>/` holds a root filesystem or an image file.
    pub const IMAGES: &'static str = "/var/lib/podunit/images";
    /// Pulled images: content-addressed blobs, unpacked layers, name records (docs/images.md).
    pub const STORE: &'static str = "/var/lib/podunit/store";
    /// Node configuration.
    pub const CONFIG: &'static str = "/etc/podunit/config.yaml";
    /// The installed CLI, which units call to prepare and clean up pods.
    pub const PODUNIT_BIN: &'static str = "/usr/bin/podunit";

    /// Manifest directories in precedence order (DESIGN.md §3).
    pub fn manifest_dirs(&self) -> Vec<(Source, PathBuf)> {
        vec![
            (Source::Etc, self.host(Self::ETC_PODS)),
            (Source::Run, self.host(Self::RUN_PODS)),
            (Source::Spool, self.host(Self::SPOOL)),
        ]
    }

    pub fn config_file(&self) -> PathBuf {
        self.host(Self::CONFIG)
    }

    pub fn spool(&self) -> PathBuf {
        self.host(Self::SPOOL)
    }
}

/// Which directory a manifest came from: decides trust (policy) and mirror-pod behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// `/etc/pods.d`: written by root, a static pod.
    Etc,
    /// `/run/pods.d`: written by root at runtime, a static pod.
    Run,
    /// The spool: a pod from the API server.
    Spool,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Etc => "etc",
            Source::Run => "run",
            Source::Spool => "api",
        }
    }

    /// Static pods are the ones a local admin wrote (kubelet's "file" source).
    pub fn is_static(self) -> bool {
        !matches!(self, Source::Spool)
    }
}

/// Joins `rel` under `base` refusing anything that would leave it (`..`, absolute parts).
pub fn join_inside(base: &Path, rel: &str) -> Option<PathBuf> {
    let mut out = base.to_path_buf();
    for part in Path::new(rel).components() {
        match part {
            std::path::Component::Normal(p) => out.push(p),
            std::path::Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}
