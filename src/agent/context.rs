//! What every part of the agent shares: its configuration, the state the loops share, and small
//! helpers (the clock, the log, a stoppable sleep, a pod's key).

use crate::common::config::ClusterTiming;
use crate::common::paths::Paths;
use crate::common::policy::Policy;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The kubelet's waiting reason (and Event reason) for an image that is not on the node when its
/// `imagePullPolicy` is `Never`.
pub const IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";

/// What the agent needs besides the API client and systemd.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node_name: String,
    pub timing: ClusterTiming,
    pub policy: Policy,
    pub labels: BTreeMap<String, String>,
    /// Taints the Node is registered with (`registerWithTaints`).
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
    pub paths: Paths,
    /// The node IP to report instead of the detected one.
    pub node_ip: Option<String>,
    /// `systemd://<version>` for nodeInfo.
    pub runtime_version: String,
    /// The port the kubelet API listens on (daemonEndpoints); 0: not served.
    pub kubelet_port: u16,
    /// With `network: cni`: where the network's configuration must be for the node to be Ready.
    pub cni_conf_dir: Option<std::path::PathBuf>,
    /// With `network: cni`: `cni.podSubnet`, podunit's own network without the Node's podCIDRs.
    pub cni_pod_subnet: Option<String>,
}

/// State shared between the loops.
#[derive(Default)]
pub struct Shared {
    pub node_uid: Mutex<Option<String>>,
    pub node_ips: Mutex<Vec<String>>,
    pub stop: AtomicBool,
}

impl Shared {
    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// Sleeps up to `d`, waking early when the agent stops. False when stopping.
pub(super) fn nap(shared: &Shared, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if shared.stopping() {
            return false;
        }
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
    }
    !shared.stopping()
}

pub(super) fn now() -> Timestamp {
    // jiff is built without its clock (k8s-openapi leaves `std` off): read the system clock here.
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::new(d.as_secs() as i64, d.subsec_nanos() as i32).unwrap_or_default()
}

/// One journal line per message, whatever names it holds (see [`crate::common::diag::one_line`]).
pub(super) fn log(msg: impl AsRef<str>) {
    eprintln!(
        "podunit-sync: {}",
        crate::common::diag::one_line(msg.as_ref())
    );
}

pub(super) fn key_of(p: &Pod) -> (String, String) {
    (
        p.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

pub(super) fn uid_of(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}
