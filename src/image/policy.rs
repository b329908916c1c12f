//! `imagePullPolicy` at a container's start, as the kubelet's image manager decides it
//! (`EnsureImageExists` and `shouldPullImage` in pkg/kubelet/images/image_manager.go, called by
//! `startContainer` for every start of a container, its restarts included): `Never` uses only
//! what is present, `IfNotPresent` pulls when absent, `Always` pulls every time. Pure; the
//! callers (the cluster agent, podunit-sync's local pulls) do the pulls and post what it says.

/// `imagePullPolicy` as the API server defaults it: `Always` for `:latest` or no tag (without a
/// digest), else `IfNotPresent`; a policy the manifest gives wins.
pub fn pull_policy(reference: &str, given: Option<&str>) -> String {
    if let Some(p) = given.filter(|p| !p.is_empty()) {
        return p.to_string();
    }
    if reference.contains('@') {
        return "IfNotPresent".into();
    }
    let last = reference.rsplit('/').next().unwrap_or(reference);
    match last.rsplit_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent".into(),
        _ => "Always".into(),
    }
}

/// What a container's start asks of its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtStart {
    /// Present and not to be pulled: `Container image "X" already present on machine`.
    Present,
    /// Absent under `Never`: `ErrImageNeverPull`.
    NeverPull,
    /// Pull (for `Always`: ask the registry what the tag is now).
    Pull,
}

/// The kubelet's decision for one start. `policy` is the defaulted one
/// ([`pull_policy`]); an unknown value acts as `IfNotPresent`, as
/// `shouldPullImage` only tests for `Never` and `Always`.
pub fn at_start(policy: &str, present: bool) -> AtStart {
    match (policy, present) {
        ("Never", true) => AtStart::Present,
        ("Never", false) => AtStart::NeverPull,
        ("Always", _) | (_, false) => AtStart::Pull,
        (_, true) => AtStart::Present,
    }
}

/// The restart a container waits for, if it waits for one: systemd's `auto-restart` between two
/// runs, which the status calls `CrashLoopBackOff`, numbered by the restarts so far. One restart
/// is one start to the image manager, however often its status is looked at.
pub fn pending_restart(waiting_reason: Option<&str>, restart_count: i32) -> Option<i32> {
    (waiting_reason == Some("CrashLoopBackOff")).then_some(restart_count)
}

/// Whether a job of a container's unit that just ended was an attempt to start it that the image
/// manager stands before, for the next start: the unit is up (`active`) or on its way to its next
/// run (`activating`, which covers systemd's `auto-restart` between two runs), whatever the job's
/// `result`. A start whose process could not be executed (exit status 203/EXEC) fails its job,
/// and the kubelet still pulls an `Always` image before the next attempt: that pull is what lets
/// a fixed image pushed under the same tag end the crash loop. A stop leaves the unit
/// `inactive`/`failed`, a cancelled or skipped job started nothing.
pub fn start_attempted(job_result: &str, active_state: &str) -> bool {
    matches!(job_result, "done" | "failed" | "timeout")
        && matches!(active_state, "active" | "activating")
}

/// Whether a pull made at a start brought another image than the one the container's root is
/// made of: then the pod is rendered again from the new one.
pub fn moved(running_image_id: &str, pulled_image_id: &str) -> bool {
    !running_image_id.is_empty() && running_image_id != pulled_image_id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelet_should_pull_image_table() {
        // (policy, present) -> decision, as shouldPullImage and EnsureImageExists.
        let table = [
            ("Always", true, AtStart::Pull),
            ("Always", false, AtStart::Pull),
            ("IfNotPresent", true, AtStart::Present),
            ("IfNotPresent", false, AtStart::Pull),
            ("Never", true, AtStart::Present),
            ("Never", false, AtStart::NeverPull),
        ];
        for (policy, present, want) in table {
            assert_eq!(
                at_start(policy, present),
                want,
                "{policy} present={present}"
            );
        }
    }

    #[test]
    fn latest_and_untagged_images_are_pulled_at_every_start() {
        for image in ["busybox", "busybox:latest", "localhost:5000/app"] {
            assert_eq!(at_start(&pull_policy(image, None), true), AtStart::Pull);
        }
        assert_eq!(
            at_start(&pull_policy("busybox:1.36", None), true),
            AtStart::Present
        );
        assert_eq!(
            at_start(&pull_policy("busybox:1.36", Some("Always")), true),
            AtStart::Pull
        );
    }

    #[test]
    fn a_restart_is_one_start_whatever_the_number_of_looks() {
        assert_eq!(pending_restart(Some("CrashLoopBackOff"), 2), Some(2));
        assert_eq!(pending_restart(Some("ContainerCreating"), 2), None);
        assert_eq!(pending_restart(None, 2), None);
    }

    #[test]
    fn every_start_attempt_counts_whatever_it_did() {
        // A start that ran the process, and one that could not execute it (203/EXEC: the job
        // fails, systemd waits in auto-restart, which is `activating`).
        assert!(start_attempted("done", "active"));
        assert!(start_attempted("failed", "activating"));
        assert!(start_attempted("timeout", "activating"));
        // Stops and jobs that never started anything.
        assert!(!start_attempted("done", "inactive"));
        assert!(!start_attempted("failed", "failed"));
        assert!(!start_attempted("canceled", "activating"));
        assert!(!start_attempted("dependency", "inactive"));
    }

    #[test]
    fn a_moved_tag_is_another_digest() {
        assert!(moved("r/a@sha256:01", "r/a@sha256:02"));
        assert!(!moved("r/a@sha256:01", "r/a@sha256:01"));
        assert!(
            !moved("", "r/a@sha256:01"),
            "no image root: nothing to switch"
        );
    }

    #[test]
    fn pull_policy_defaults_as_the_api_server() {
        assert_eq!(pull_policy("busybox", None), "Always");
        assert_eq!(pull_policy("busybox:latest", None), "Always");
        assert_eq!(pull_policy("busybox:1.36", None), "IfNotPresent");
        assert_eq!(pull_policy("reg:5000/app", None), "Always");
        assert_eq!(pull_policy("reg:5000/app:v1", None), "IfNotPresent");
        assert_eq!(pull_policy("app@sha256:00ff", None), "IfNotPresent");
        assert_eq!(pull_policy("busybox:1.36", Some("Never")), "Never");
        assert_eq!(pull_policy("busybox", Some("")), "Always");
    }
}
