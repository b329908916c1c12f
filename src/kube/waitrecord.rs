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

/// At the agent's start: what an earlier run held back is decided again, pod by pod.
pub fn release_all(paths: &Paths) {
    for r in waiting::read_all(paths).unwrap_or_default() {
        if r.writer == Writer::Agent {
            release(paths, &r.uid);
        }
    }
}
