//! What the worker keeps per pod and per static pod, and which statuses are due. Data only: the
//! jobs that change it are `impl Worker` blocks in the sibling modules.

use crate::kube::compact::Compact;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodStatus, Secret};
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Phase {
    /// Written to the spool; its units run (or will, after the next reload).
    Active,
    /// Not run: policy, validation or image; the reason and message were posted.
    Rejected { reason: String, message: String },
    /// Waiting for something it needs (a ConfigMap, Secret, token or image); retried. `only`: the
    /// containers the reason is about (empty: all of them).
    Blocked {
        reason: String,
        message: String,
        only: Vec<String>,
    },
    /// deletionTimestamp seen: units stopping; DELETE once they are down or the grace ran out.
    Terminating { deadline: Instant, killed: bool },
    /// Already `Succeeded` or `Failed` in the API when first seen, and not in the spool: it ran
    /// elsewhere or before a reinstall. Never run (the kubelet never restarts a terminal pod) and
    /// its status left as it is (the API forbids a terminated container to become anything else).
    Finished,
}

#[derive(Debug)]
pub(super) struct PodRec {
    /// Without its status and managedFields (see [`Worker::upsert`]).
    pub(super) pod: Compact<Pod>,
    pub(super) uid: String,
    /// Its units, the pod unit first ([`observe::pod_units`]).
    pub(super) units: Vec<String>,
    pub(super) phase: Phase,
    pub(super) posted: Option<Compact<PodStatus>>,
    /// token file path -> when to refresh it
    pub(super) tokens: HashMap<String, Timestamp>,
    pub(super) event_sent: bool,
    /// When the pod-prepare record whose Event was last posted was written (`at_us`): each
    /// failed try is posted once (the correlator counts the repeats).
    pub(super) prepare_event_at: u64,
    /// Hash of the spool text that last passed validation: the periodic re-admission skips the
    /// generator run when nothing changed.
    pub(super) validated: Option<u64>,
    /// The resourceVersions of the ConfigMaps and Secrets it was last spooled with: the periodic
    /// refresh leaves the pod alone while they are the same.
    pub(super) refs_seen: Option<String>,
    /// A status the API server refused (422 and the like): not sent again until it changes.
    pub(super) refused: Option<Compact<PodStatus>>,
    /// Its images: what each pull brought, what each last showed, what each container runs.
    pub(super) images: PodImages,
}

/// A pod's image pulls (see `images.rs`).
#[derive(Debug, Default)]
pub(super) struct PodImages {
    /// Images pulled for this pod, with their imageID: `imagePullPolicy: Always` is met by the
    /// pull made for it, not by every admission pulling again.
    pub(super) pulled: HashMap<String, String>,
    /// What each image last showed (a waiting reason, or `Pulled`): one Event per change.
    pub(super) shown: HashMap<String, String>,
    /// When a wait changes next (a failed pull becomes a back-off, a back-off ends).
    pub(super) recheck_at: Option<Instant>,
    /// The imageID each container's image resolved to when the pod was spooled.
    pub(super) ids: BTreeMap<String, String>,
    /// The restart each container last waited for when its image was looked at: one restart is
    /// one start to the image manager, however often the status is computed meanwhile.
    pub(super) restarts: HashMap<String, i32>,
}

/// ConfigMaps and Secrets read during one batch of work (a burst of new pods, a refresh round), so
/// 110 pods using `kube-root-ca.crt` mean one GET, not 110. `None`: not found.
#[derive(Default)]
pub(super) struct RefCache {
    pub(super) config_maps: HashMap<(String, String), Option<ConfigMap>>,
    pub(super) secrets: HashMap<(String, String), Option<Secret>>,
}

/// A static pod and its mirror (keyed by the static pod's namespace and name).
pub(super) struct MirrorRec {
    pub(super) hash: String,
    pub(super) mirror_name: String,
    pub(super) static_pod: Pod,
    pub(super) posted: Option<PodStatus>,
}

/// Whose status is to be recomputed: asking systemd about every pod on every unit change would
/// cost each change a few D-Bus round trips per pod.
#[derive(Debug, Default)]
pub(super) struct Due {
    pub(super) all: bool,
    /// A daemon-reload finished: also the pods whose units it changed (see
    /// [`Worker::changed_by_reload`]).
    pub(super) reloaded: bool,
    pub(super) pods: BTreeSet<(String, String)>,
}

impl Due {
    pub(super) fn everything() -> Due {
        Due {
            all: true,
            reloaded: false,
            pods: BTreeSet::new(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        !self.all && !self.reloaded && self.pods.is_empty()
    }

    /// Whether `k` is due; a reload must have been turned into the pods it changed first.
    pub(super) fn has(&self, k: &(String, String)) -> bool {
        debug_assert!(!self.reloaded, "resolve the reload first (post_statuses)");
        self.all || self.pods.contains(k)
    }
}
