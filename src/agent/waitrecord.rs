//! The node agent's side of [`crate::status::waiting`]: pods it holds back (not spooled, so without
//! units) are left where `podunit status` shows them, with the reason and message it posts.

use crate::common::paths::Paths;
use crate::status::waiting::{self, Record, Writer};
use k8s_openapi::api::core::v1::Pod;

/// Records that `pod` waits (`refused`: is refused) with `reason` on the containers in `only`
/// (all when empty). A failure is only logged: status is for people, the pod's fate is not in it.
pub fn hold(paths: &Paths, pod: &Pod, reason: &str, message: &str, only: &[String], refused: bool) {
    let rec = Record {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        writer: Writer::Agent,
        reason: reason.into(),
        message: message.into(),
        containers: only.to_vec(),
        all_containers: pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| c.name.clone())
            .collect(),
        refused,
        at_us: waiting::now_us(),
        event: None,
    };
    if let Err(e) = waiting::write(paths, &rec) {
        crate::localsync::log(&format!(
            "{}/{}: cannot record why it waits: {e}",
            rec.namespace, rec.name
        ));
    }
}

/// The pod is spooled or gone: nothing of the agent's to show any more.
pub fn release(paths: &Paths, uid: &str) {
    if !uid.is_empty() {
        let _ = waiting::clear(paths, uid, Some(Writer::Agent));
    }
}

/// The API server refused the status of the pod `uid` (`namespace/name`) with `error`: left
/// where `podunit status` shows it, since the cluster cannot.
pub fn status_refused(paths: &Paths, uid: &str, namespace: &str, name: &str, error: &str) {
    let rec = Record {
        uid: uid.into(),
        namespace: namespace.into(),
        name: name.into(),
        writer: Writer::Status,
        reason: STATUS_REFUSED.into(),
        message: refused_message(error),
        containers: Vec::new(),
        all_containers: Vec::new(),
        refused: false,
        at_us: waiting::now_us(),
        event: None,
    };
    if let Err(e) = waiting::write(paths, &rec) {
        crate::localsync::log(&format!(
            "{namespace}/{name}: cannot record the refused status: {e}"
        ));
    }
}

/// The Event reason (and record reason) of a pod status the API server refused. The kubelet's
/// status manager only logs it; a node without a log in sight says it where people look.
pub const STATUS_REFUSED: &str = "FailedToUpdatePodStatus";

/// What `podunit status` and the pod's Event say of a refused status.
pub fn refused_message(error: &str) -> String {
    format!(
        "the API server refused this node's status of the pod, so the cluster does not see its \
         containers' state; it is sent again when it changes: {error}"
    )
}

/// A status of the pod `uid` was accepted: the refusal is over.
pub fn status_accepted(paths: &Paths, uid: &str) {
    if !uid.is_empty() {
        let _ = waiting::clear(paths, uid, Some(Writer::Status));
    }
}

/// At the agent's start: what an earlier run held back is decided again, pod by pod, and every
/// status is posted again.
pub fn release_all(paths: &Paths) {
    for r in waiting::read_all(paths).unwrap_or_default() {
        match r.writer {
            Writer::Agent => release(paths, &r.uid),
            Writer::Status => status_accepted(paths, &r.uid),
            Writer::Prepare => {}
        }
    }
}
