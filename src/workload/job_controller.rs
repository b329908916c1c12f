//! The Job controller's decisions for one Job on a node with no control plane, pure: from the
//! Job's terms, its record and what its pods are doing now, which pods to start and stop, the
//! record to keep, and when to look again. podunit-sync runs them (`localsync/jobs.rs`).
//!
//! The kubelet-side facts the controller works from are the pods' phases and, for
//! `restartPolicy: OnFailure`, their containers' restart counts. The rules are
//! `pkg/controller/job`'s:
//! - at most `parallelism` pods run, and no more than the completions still missing;
//! - a pod that failed (`Never`) is one failure, and is run again after the controller's
//!   back-off (10 s, doubling with each failure, at most 10 min); with `OnFailure` the
//!   containers' restarts are the failures;
//! - more failures than `backoffLimit` fail the Job (`BackoffLimitExceeded`), as does running
//!   past `activeDeadlineSeconds` (`DeadlineExceeded`); the running pods are then stopped;
//! - `completions` succeeded pods (each index once, when Indexed) complete it; a work queue is
//!   complete once a pod has succeeded and none runs;
//! - `suspend` stops the running pods without counting a failure and holds the deadline.
//!
//! A finished Job stays finished: its record outlives reboots and reloads, so it is not run
//! again until its template changes (a new Job).

use super::job::JobTerms;
use std::collections::{BTreeMap, BTreeSet};

/// The controller's back-off after a pod's failure (`DefaultJobPodFailureBackOff`) and its cap
/// (`MaxJobPodFailureBackOff`), in seconds.
pub const BACKOFF_INITIAL_S: u64 = 10;
pub const BACKOFF_MAX_S: u64 = 600;
/// How soon a pod whose start did not take (its pod unit failed) is started again.
pub const START_RETRY_S: u64 = 10;

/// What a Job's pod is doing, from its units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodState {
    /// Its pod unit is not active: never started, stopped, or its start failed.
    Inactive,
    /// Started and not finished.
    Active {
        restarts: u32,
    },
    Succeeded,
    Failed,
}

/// How a Job ended: its condition's type, reason and message, as the controller sets them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Finished {
    /// `Complete` or `Failed`.
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
    /// Unix seconds.
    pub at: u64,
}

/// What podunit-sync keeps of a Job (in its record, keyed by `namespace/name`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    pub uid: String,
    /// When the controller first saw the Job (unix seconds): its creation, for AGE.
    #[serde(default)]
    pub created: u64,
    /// The boot the record's `started` and `counted` were made in (kept by the caller).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub boot: String,
    /// `status.startTime` (unix seconds): when the Job first ran a pod since it was last resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// The pods (by index) that succeeded.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub succeeded: BTreeSet<usize>,
    /// Failed pods counted so far (`status.failed`).
    #[serde(default)]
    pub failed: u32,
    /// The pods whose present failure is counted already; a pod leaves once it runs again.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub counted: BTreeSet<usize>,
    /// When the last failure was seen (unix seconds): the back-off counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<u64>,
    /// When each pod was last started (unix seconds).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub started: BTreeMap<usize, u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<Finished>,
}

impl JobRecord {
    /// A new Job's record, seen first at `now`.
    pub fn new(uid: &str, now: u64) -> Self {
        JobRecord {
            uid: uid.to_string(),
            created: now,
            ..Default::default()
        }
    }
}

/// What to do for one Job now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// Pods (by index) to run: a first start, or a new attempt after a failure.
    pub start: Vec<usize>,
    /// Running pods to stop (the Job failed, was suspended, or has all its completions).
    pub stop: Vec<usize>,
    pub record: JobRecord,
    /// When to decide again although nothing changed (unix seconds): a back-off or a deadline.
    pub wake: Option<u64>,
    /// What happened, for the journal.
    pub said: Vec<String>,
}

/// `pods[i]` is pod `i`'s state; `now` is unix seconds.
pub fn decide(
    terms: &JobTerms,
    record: Option<&JobRecord>,
    pods: &[PodState],
    now: u64,
) -> Decision {
    let mut rec = match record {
        Some(r) if r.uid == terms.uid => r.clone(),
        _ => JobRecord::new(&terms.uid, now),
    };
    let active: Vec<usize> = (0..pods.len())
        .filter(|&i| matches!(pods[i], PodState::Active { .. }))
        .collect();
    let mut d = Decision::default();
    if rec.finished.is_some() {
        // A Failed Job's pods were stopped; one started since (by hand) is stopped again.
        if rec.finished.as_ref().is_some_and(|f| f.type_ == "Failed") {
            d.stop = active;
        }
        d.record = rec;
        return d;
    }
    for (i, p) in pods.iter().enumerate() {
        match p {
            PodState::Succeeded if rec.succeeded.insert(i) => {
                d.said.push(format!("pod {i} succeeded"));
            }
            PodState::Failed if !rec.counted.contains(&i) && !rec.succeeded.contains(&i) => {
                rec.counted.insert(i);
                rec.failed += 1;
                rec.last_failure = Some(now);
                d.said
                    .push(format!("pod {i} failed ({} failures)", rec.failed));
            }
            _ => {}
        }
    }
    if terms.suspend {
        if !active.is_empty() {
            d.said.push("suspended: stopping its pods".into());
        }
        d.stop = active;
        rec.start_time = None;
        d.record = rec;
        return d;
    }
    let restarts: u32 = pods
        .iter()
        .map(|p| match p {
            PodState::Active { restarts } if terms.on_failure => *restarts,
            _ => 0,
        })
        .sum();
    let past_limit = rec.failed > terms.backoff_limit
        || (terms.on_failure && restarts > 0 && rec.failed + restarts > terms.backoff_limit);
    if past_limit {
        return fail(
            d,
            rec,
            active,
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            now,
        );
    }
    if let (Some(start), Some(limit)) = (rec.start_time, terms.active_deadline_seconds) {
        if now >= start + limit {
            return fail(
                d,
                rec,
                active,
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
                now,
            );
        }
        d.wake = Some(start + limit);
    }
    let succeeded = rec.succeeded.len();
    let complete = match terms.completions {
        Some(c) => succeeded >= c as usize,
        None => succeeded > 0 && active.is_empty(),
    };
    if complete {
        rec.finished = Some(Finished {
            type_: "Complete".into(),
            reason: "CompletionsReached".into(),
            message: "Reached expected number of succeeded pods".into(),
            at: now,
        });
        d.said.push("complete".into());
        d.stop = active;
        d.wake = None;
        d.record = rec;
        return d;
    }
    // A work queue starts no pod once one has succeeded: the others finish the queue.
    let missing = match terms.completions {
        Some(c) => (c as usize).saturating_sub(succeeded),
        None if succeeded > 0 => 0,
        None => pods.len(),
    };
    let want = (terms.parallelism as usize).min(missing);
    let mut room = want.saturating_sub(active.len());
    if room > 0 {
        let backoff_over = match rec.last_failure {
            Some(at) if rec.failed > 0 => {
                let until = at + backoff_s(rec.failed);
                if now < until {
                    d.wake = Some(d.wake.map_or(until, |w| w.min(until)));
                }
                now >= until
            }
            _ => true,
        };
        for (i, p) in pods.iter().enumerate() {
            if room == 0 {
                break;
            }
            if rec.succeeded.contains(&i) {
                continue;
            }
            let retry = match p {
                PodState::Active { .. } | PodState::Succeeded => continue,
                PodState::Failed => true,
                PodState::Inactive => false,
            };
            if retry && !backoff_over {
                continue;
            }
            // A start that did not take is tried again after a pause, not at every look.
            if !retry
                && let Some(at) = rec.started.get(&i).copied()
                && now < at + START_RETRY_S
            {
                let due = at + START_RETRY_S;
                d.wake = Some(d.wake.map_or(due, |w| w.min(due)));
                room -= 1;
                continue;
            }
            rec.counted.remove(&i);
            rec.started.insert(i, now);
            rec.start_time.get_or_insert(now);
            d.start.push(i);
            room -= 1;
        }
        if let (Some(start), Some(limit)) = (rec.start_time, terms.active_deadline_seconds) {
            d.wake = Some(d.wake.map_or(start + limit, |w| w.min(start + limit)));
        }
    }
    d.record = rec;
    d
}

fn fail(
    mut d: Decision,
    mut rec: JobRecord,
    active: Vec<usize>,
    reason: &str,
    message: &str,
    now: u64,
) -> Decision {
    rec.finished = Some(Finished {
        type_: "Failed".into(),
        reason: reason.into(),
        message: message.into(),
        at: now,
    });
    d.said.push(format!("failed: {reason}: {message}"));
    d.stop = active;
    d.wake = None;
    d.record = rec;
    d
}

/// The controller's delay before a new pod after `failures` failures.
pub fn backoff_s(failures: u32) -> u64 {
    let exp = failures.saturating_sub(1).min(16);
    (BACKOFF_INITIAL_S << exp).min(BACKOFF_MAX_S)
}

/// After a reboot nothing of a Job runs: a pod that was running when the node went down is
/// started again (the Job controller replaces a pod lost with its node), and a record made in
/// another boot says nothing about this boot's units.
pub fn after_reboot(rec: &mut JobRecord) {
    rec.started.clear();
    rec.counted.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use PodState::*;

    fn terms(completions: Option<u32>, parallelism: u32) -> JobTerms {
        JobTerms {
            namespace: "default".into(),
            name: "j".into(),
            uid: "u".into(),
            index: 0,
            completions,
            parallelism,
            backoff_limit: 1,
            active_deadline_seconds: None,
            suspend: false,
            indexed: false,
            on_failure: false,
            cron: None,
        }
    }

    #[test]
    fn runs_parallelism_pods_then_the_rest_as_they_succeed() {
        let t = terms(Some(3), 2);
        let d = decide(&t, None, &[Inactive, Inactive, Inactive], 100);
        assert_eq!(d.start, [0, 1]);
        assert_eq!(d.record.start_time, Some(100));
        let d = decide(
            &t,
            Some(&d.record),
            &[Succeeded, Active { restarts: 0 }, Inactive],
            110,
        );
        assert_eq!(d.start, [2]);
        let d = decide(&t, Some(&d.record), &[Succeeded, Succeeded, Succeeded], 120);
        assert_eq!(d.record.finished.as_ref().unwrap().type_, "Complete");
        // Finished stays finished: nothing runs again (a reboot: every pod inactive).
        let again = decide(&t, Some(&d.record), &[Inactive, Inactive, Inactive], 9999);
        assert!(again.start.is_empty() && again.stop.is_empty());
    }

    #[test]
    fn a_failed_pod_runs_again_after_the_backoff_and_the_limit_fails_the_job() {
        let t = terms(Some(1), 1);
        let d = decide(&t, None, &[Inactive], 0);
        let d = decide(&t, Some(&d.record), &[Failed], 5);
        assert!(d.start.is_empty(), "back-off first");
        assert_eq!(d.wake, Some(15));
        assert_eq!(d.record.failed, 1);
        // Looking again changes nothing, and counts nothing twice.
        let d = decide(&t, Some(&d.record), &[Failed], 10);
        assert_eq!(d.record.failed, 1);
        let d = decide(&t, Some(&d.record), &[Failed], 15);
        assert_eq!(d.start, [0]);
        let d = decide(&t, Some(&d.record), &[Failed], 30);
        let f = d.record.finished.unwrap();
        assert_eq!(
            (f.type_.as_str(), f.reason.as_str()),
            ("Failed", "BackoffLimitExceeded")
        );
        assert_eq!(backoff_s(2), 20);
        assert_eq!(backoff_s(30), BACKOFF_MAX_S);
    }

    #[test]
    fn on_failure_counts_restarts_and_stops_the_pods() {
        let mut t = terms(Some(2), 2);
        t.on_failure = true;
        let d = decide(&t, None, &[Inactive, Inactive], 0);
        let d = decide(
            &t,
            Some(&d.record),
            &[Active { restarts: 1 }, Active { restarts: 1 }],
            1,
        );
        assert_eq!(d.stop, [0, 1]);
        assert_eq!(d.record.finished.unwrap().reason, "BackoffLimitExceeded");
    }

    #[test]
    fn deadline_and_suspend() {
        let mut t = terms(Some(1), 1);
        t.active_deadline_seconds = Some(30);
        let d = decide(&t, None, &[Inactive], 100);
        assert_eq!(d.wake, Some(130));
        let mut s = t.clone();
        s.suspend = true;
        let sd = decide(&s, Some(&d.record), &[Active { restarts: 0 }], 110);
        assert_eq!(sd.stop, [0]);
        assert_eq!(
            sd.record.start_time, None,
            "the deadline counts anew on resume"
        );
        let d = decide(&t, Some(&d.record), &[Active { restarts: 0 }], 130);
        assert_eq!(d.stop, [0]);
        assert_eq!(d.record.finished.unwrap().reason, "DeadlineExceeded");
    }

    #[test]
    fn a_work_queue_is_complete_once_one_succeeded_and_none_runs() {
        let t = terms(None, 2);
        let d = decide(&t, None, &[Inactive, Inactive], 0);
        assert_eq!(d.start, [0, 1]);
        let d = decide(&t, Some(&d.record), &[Succeeded, Active { restarts: 0 }], 1);
        assert!(d.start.is_empty() && d.record.finished.is_none());
        let d = decide(&t, Some(&d.record), &[Succeeded, Succeeded], 2);
        assert!(d.record.finished.is_some());
    }

    #[test]
    fn a_new_uid_is_a_new_job() {
        let t = terms(Some(1), 1);
        let mut old = JobRecord::new("other", 0);
        old.succeeded.insert(0);
        old.finished = Some(Finished {
            type_: "Complete".into(),
            reason: String::new(),
            message: String::new(),
            at: 0,
        });
        assert_eq!(decide(&t, Some(&old), &[Inactive], 5).start, [0]);
    }
}
