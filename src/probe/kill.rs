//! The timing of a kill after a failed liveness or startup probe, as the kubelet's
//! `killContainer` (`pkg/kubelet/kuberuntime/kuberuntime_container.go`): the grace period is the
//! probe's `terminationGracePeriodSeconds`, else the pod's; the preStop hook runs first and its
//! time comes out of the grace period (`executePreStopHook`); SIGTERM then gets what is left, and
//! never less than `minimumGracePeriodInSeconds`. Pure.

use std::time::Duration;

/// The kubelet's `minimumGracePeriodInSeconds`: the least a container gets after SIGTERM.
pub const MIN_GRACE_S: u64 = 2;

/// The API server's default `terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE_S: u64 = 30;

/// The grace period of the kill: the probe's own, else the pod's.
pub fn grace(probe_s: Option<u64>, pod_s: Option<u64>) -> u64 {
    probe_s.or(pod_s).unwrap_or(DEFAULT_GRACE_S)
}

/// Whether a preStop hook is run at all: only with time for it (`gracePeriod > 0`).
pub fn runs_hook(grace_s: u64) -> bool {
    grace_s > 0
}

/// The time between SIGTERM and SIGKILL, after a preStop hook that took `hook` (`None`: there
/// was none). The kubelet counts the hook's time in whole seconds (`int64(Seconds())`) and stops
/// waiting for it at the end of the grace period, which then leaves the minimum.
pub fn after_hook(grace_s: u64, hook: Option<Duration>) -> u64 {
    let spent = hook.map_or(0, |d| d.as_secs().min(grace_s));
    (grace_s - spent).max(MIN_GRACE_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_spends_the_grace_period() {
        assert_eq!(grace(Some(4), Some(30)), 4, "the probe's own first");
        assert_eq!(grace(None, Some(5)), 5);
        assert_eq!(grace(None, None), 30);
        assert!(!runs_hook(0) && runs_hook(1));
        assert_eq!(after_hook(10, None), 10);
        assert_eq!(
            after_hook(10, Some(Duration::from_millis(2999))),
            8,
            "whole seconds"
        );
        assert_eq!(after_hook(10, Some(Duration::from_secs(7))), 3);
        assert_eq!(after_hook(10, Some(Duration::from_secs(9))), 2);
        assert_eq!(
            after_hook(10, Some(Duration::from_secs(60))),
            2,
            "outlasted it"
        );
        assert_eq!(after_hook(1, None), 2, "never less than the minimum");
    }
}
