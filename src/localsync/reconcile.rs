//! The reconcile decision (local mode): what the generator rendered (desired), what podunit-sync
//! last started (recorded), what systemd runs (actual) -> the jobs to queue. Pure; the sync loop
//! runs the actions and persists the new record.
//!
//! The rules, in kubelet terms:
//! - a pod that is rendered and not running is started (its pod unit pulls in its containers);
//! - a pod whose rendered files changed since it was started is restarted, in this boot only:
//!   after a reboot every running pod was started from the files of this boot;
//! - a pod that is running and was never recorded is adopted as it is (never restarted);
//! - an untouched pod is never restarted;
//! - a unit whose file is gone (`not-found`) is stopped if it runs, and reset if it failed, so no
//!   leftovers stay behind. Units with a file that the generator did not write are not ours to stop;
//! - a removed pod stays in the record (`removed`) until its directories are gone, so a restart of
//!   podunit-sync at any moment still enforces its grace period and removes them.

use crate::generate::output::{GeneratedPod, PodKey};
use crate::systemd::unit::ListedUnit;
use crate::translate::naming;
use std::collections::{BTreeMap, BTreeSet};

/// What podunit-sync last did for one pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Recorded {
    /// Content hash of the rendered units the pod was (re)started or adopted with.
    pub hash: String,
    /// The pod's units at that time.
    pub units: Vec<String>,
    /// Grace period (`TimeoutStopSec=`, seconds) per container unit. Once a pod's files are gone
    /// systemd forgets its units' settings (a stop would wait the default 90 s), so podunit-sync
    /// enforces the grace period itself.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grace: BTreeMap<String, u64>,
    /// The pod's uid: names its state and runtime directories, removed with the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

fn record(pod: &GeneratedPod) -> Recorded {
    Recorded {
        uid: pod.uid.clone(),
        hash: pod.hash.clone(),
        units: pod.units(),
        grace: pod
            .containers
            .iter()
            .filter_map(|c| Some((c.unit.clone(), c.stop_timeout_s?)))
            .collect(),
    }
}

/// The persisted state of podunit-sync (`/var/lib/podunit/sync-state.json`).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct State {
    /// `/proc/sys/kernel/random/boot_id` of the boot the record was made in.
    #[serde(default)]
    pub boot_id: String,
    /// Keyed by `namespace/name`.
    #[serde(default)]
    pub pods: BTreeMap<String, Recorded>,
    /// The spool content (`boot_id` + file list) podunit-sync last reloaded for, so that a
    /// spool file that never renders (broken) costs one reload per boot, not one per start.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spool_reloaded_for: String,
    /// Pods whose files are gone and whose directories have not been seen removed yet, keyed by
    /// `namespace/name`: their grace periods and uids outlive a restart of podunit-sync.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub removed: BTreeMap<String, Recorded>,
    /// The Jobs of the manifests, keyed by `namespace/name`: what their controller has seen.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub jobs: BTreeMap<String, crate::workload::job_controller::JobRecord>,
    /// The CronJobs of the manifests, keyed by `namespace/name`; the Job of each (its last run)
    /// is in `jobs` under the same key.
    #[serde(
        default,
        rename = "cronJobs",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub cron_jobs: BTreeMap<String, crate::workload::cron_controller::CronRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// StartUnit(pod unit, "replace").
    Start { pod: PodKey, unit: String },
    /// RestartUnit(pod unit, "replace"): the containers follow through PartOf=.
    Restart { pod: PodKey, unit: String },
    /// StopUnit(unit, "replace") for a unit whose file is gone; SIGKILL after `grace` seconds.
    /// `stopping`: a stop is already under way (queued before a restart of podunit-sync, or by
    /// an earlier reconcile), so the grace period counts from when systemd began it.
    Stop {
        unit: String,
        grace: Option<u64>,
        stopping: bool,
    },
    /// ResetFailedUnit(unit) for a failed unit whose file is gone.
    ResetFailed { unit: String },
    /// Remove a removed pod's state and runtime directories once its units have stopped:
    /// systemd forgot the pod unit's ExecStopPost= cleanup with its file. The pod stays in
    /// `State::removed` until that has succeeded.
    Cleanup { pod: PodKey, uid: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// The record to persist once the actions are queued.
    pub next: State,
}

/// Decides the actions. `actual` is every loaded `podunit-*` unit systemd lists.
pub fn plan(
    desired: &[GeneratedPod],
    recorded: &State,
    actual: &[ListedUnit],
    boot_id: &str,
) -> Plan {
    let same_boot = !recorded.boot_id.is_empty() && recorded.boot_id == boot_id;
    let by_name: BTreeMap<&str, &ListedUnit> =
        actual.iter().map(|u| (u.name.as_str(), u)).collect();
    let mut actions = Vec::new();
    let mut next = State {
        boot_id: boot_id.to_string(),
        pods: BTreeMap::new(),
        spool_reloaded_for: recorded.spool_reloaded_for.clone(),
        removed: BTreeMap::new(),
        jobs: recorded.jobs.clone(),
        cron_jobs: recorded.cron_jobs.clone(),
    };
    let mut desired_units: BTreeSet<String> = BTreeSet::new();
    for pod in desired {
        desired_units.extend(pod.units());
        let Some(unit) = pod.pod_unit.clone() else {
            continue; // no pod unit rendered: nothing that could start it
        };
        let running = by_name.get(unit.as_str()).is_some_and(|u| u.is_running());
        let previous = recorded.pods.get(&pod.key.to_string());
        let changed = previous.is_some_and(|r| r.hash != pod.hash);
        let key = pod.key.clone();
        if pod.job.is_some() || (pod.ordered.is_some() && !running) {
            // A Job's pods are its controller's to start (`localsync/jobs.rs`), and so are an
            // OrderedReady StatefulSet's (`localsync/ordered.rs`).
        } else if running && changed && same_boot {
            actions.push(Action::Restart { pod: key, unit });
        } else if !running {
            actions.push(Action::Start { pod: key, unit });
        }
        next.pods.insert(pod.key.to_string(), record(pod));
    }
    for u in actual {
        if desired_units.contains(&u.name) || naming::parse(&u.name).is_none() || !u.is_not_found()
        {
            continue;
        }
        // A queued job (a start that waits out a reload) would run the pod after its cleanup.
        if u.is_running() || u.job_queued {
            let grace = recorded
                .pods
                .values()
                .chain(recorded.removed.values())
                .find_map(|r| r.grace.get(&u.name).copied());
            actions.push(Action::Stop {
                unit: u.name.clone(),
                grace,
                stopping: u.active_state == "deactivating",
            });
        } else if u.active_state == "failed" {
            actions.push(Action::ResetFailed {
                unit: u.name.clone(),
            });
        }
    }
    let desired_keys: BTreeSet<String> = desired.iter().map(|p| p.key.to_string()).collect();
    // A uid that a rendered pod has (the same pod back before its cleanup ran) is never removed.
    let desired_uids: BTreeSet<&str> = desired.iter().filter_map(|p| p.uid.as_deref()).collect();
    // systemd still has a unit file of the pod: the generator's output is newer than what
    // systemd has loaded (a daemon-reload is under way, and systemd empties that directory before
    // it runs the generator). Not removed yet: its files are the running pod's.
    let still_loaded = |r: &Recorded| {
        r.units.iter().any(|u| {
            by_name
                .get(u.as_str())
                .is_some_and(|l| l.load_state == "loaded" && !l.is_not_found())
        })
    };
    for (key, r) in recorded.removed.iter().chain(&recorded.pods) {
        if desired_keys.contains(key)
            || next.removed.contains_key(key)
            || next.pods.contains_key(key)
        {
            continue;
        }
        if still_loaded(r) {
            let keep = if recorded.removed.contains_key(key) {
                &mut next.removed
            } else {
                &mut next.pods
            };
            keep.insert(key.clone(), r.clone());
            continue;
        }
        let Some(uid) = r.uid.clone() else { continue };
        if desired_uids.contains(uid.as_str()) {
            continue;
        }
        if let Some(pod) = PodKey::parse(key) {
            next.removed.insert(key.clone(), r.clone());
            actions.push(Action::Cleanup { pod, uid });
        }
    }
    Plan { actions, next }
}

/// Units that still need a reset-failed once their stop jobs are done: failed and file gone.
pub fn leftovers(actual: &[ListedUnit], desired: &[GeneratedPod]) -> Vec<String> {
    let desired_units: BTreeSet<String> = desired.iter().flat_map(|p| p.units()).collect();
    actual
        .iter()
        .filter(|u| {
            u.is_not_found()
                && u.active_state == "failed"
                && !desired_units.contains(&u.name)
                && naming::parse(&u.name).is_some()
        })
        .map(|u| u.name.clone())
        .collect()
}

/// Spool manifests (host paths) that no rendered pod came from. At boot the generator runs before
/// a separate /var is mounted, so spool pods are missing until the next reload: a non-empty answer
/// at podunit-sync's start means "reload now" (DESIGN.md §3). A spool file that is broken is
/// also unseen; the caller reloads at most once per boot and spool content for that reason.
pub fn unseen_spool(spool_files: &[String], desired: &[GeneratedPod]) -> Vec<String> {
    let seen: BTreeSet<&str> = desired
        .iter()
        .filter_map(|p| p.source_path.as_deref())
        .collect();
    spool_files
        .iter()
        .filter(|f| !seen.contains(f.as_str()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::output::{ContainerKind, GeneratedContainer};

    const BOOT: &str = "b1";

    fn pod(name: &str, hash: &str) -> GeneratedPod {
        GeneratedPod {
            key: PodKey::new("default", name),
            uid: None,
            pod_unit: Some(naming::pod_service("default", name)),
            slice: Some(naming::pod_slice("default", name)),
            containers: vec![GeneratedContainer {
                name: "c".into(),
                unit: naming::container_service("default", name, "c"),
                kind: ContainerKind::App,
                order: 0,
                restart: "always".into(),
                stop_timeout_s: Some(7),
            }],
            source_path: None,
            hash: hash.into(),
            job: None,
            ordered: None,
            workload: None,
        }
    }

    fn unit(name: &str, load: &str, active: &str) -> ListedUnit {
        ListedUnit {
            name: name.into(),
            load_state: load.into(),
            active_state: active.into(),
            sub_state: String::new(),
            fragment_path: None,
            job_queued: false,
        }
    }

    fn running(name: &str) -> ListedUnit {
        unit(&naming::pod_service("default", name), "loaded", "active")
    }

    fn rec(entries: &[(&str, &str)], boot: &str) -> State {
        State {
            boot_id: boot.into(),
            pods: entries
                .iter()
                .map(|(n, h)| (format!("default/{n}"), record(&pod(n, h))))
                .collect(),
            ..Default::default()
        }
    }

    /// A pod with a uid, and a record (this boot) of it alone.
    fn recorded_pod(name: &str, uid: &str) -> (GeneratedPod, State) {
        let mut p = pod(name, "h");
        p.uid = Some(uid.into());
        let mut recorded = rec(&[], BOOT);
        recorded.pods.insert(format!("default/{name}"), record(&p));
        (p, recorded)
    }

    fn start(n: &str) -> Action {
        Action::Start {
            pod: PodKey::new("default", n),
            unit: naming::pod_service("default", n),
        }
    }

    #[test]
    fn new_pod_is_started_and_recorded() {
        let p = plan(&[pod("web", "h1")], &State::default(), &[], BOOT);
        assert_eq!(p.actions, vec![start("web")]);
        assert_eq!(p.next.pods["default/web"].hash, "h1");
        assert_eq!(p.next.boot_id, BOOT);
    }

    #[test]
    fn untouched_running_pod_is_left_alone() {
        let p = plan(
            &[pod("web", "h1")],
            &rec(&[("web", "h1")], BOOT),
            &[running("web")],
            BOOT,
        );
        assert!(p.actions.is_empty(), "{:?}", p.actions);
    }

    #[test]
    fn changed_pod_is_restarted_and_only_it() {
        let p = plan(
            &[pod("web", "h2"), pod("db", "d1")],
            &rec(&[("web", "h1"), ("db", "d1")], BOOT),
            &[running("web"), running("db")],
            BOOT,
        );
        assert_eq!(
            p.actions,
            vec![Action::Restart {
                pod: PodKey::new("default", "web"),
                unit: naming::pod_service("default", "web")
            }]
        );
        assert_eq!(p.next.pods["default/web"].hash, "h2");
    }

    #[test]
    fn running_unrecorded_pod_is_adopted_not_restarted() {
        let p = plan(
            &[pod("web", "h1")],
            &State::default(),
            &[running("web")],
            BOOT,
        );
        assert!(p.actions.is_empty());
        assert_eq!(p.next.pods["default/web"].hash, "h1");
    }

    #[test]
    fn after_reboot_running_pods_are_adopted_even_if_changed() {
        let p = plan(
            &[pod("web", "h2")],
            &rec(&[("web", "h1")], "old"),
            &[running("web")],
            BOOT,
        );
        assert!(p.actions.is_empty());
        assert_eq!(p.next.boot_id, BOOT);
    }

    #[test]
    fn stopped_or_failed_pod_is_started() {
        for state in ["inactive", "failed"] {
            let actual = [unit(
                &naming::pod_service("default", "web"),
                "loaded",
                state,
            )];
            let p = plan(
                &[pod("web", "h1")],
                &rec(&[("web", "h1")], BOOT),
                &actual,
                BOOT,
            );
            assert_eq!(p.actions, vec![start("web")], "{state}");
        }
        // A changed pod that is not running is started, not restarted.
        let p = plan(&[pod("web", "h2")], &rec(&[("web", "h1")], BOOT), &[], BOOT);
        assert_eq!(p.actions, vec![start("web")]);
    }

    #[test]
    fn removed_pod_units_are_stopped_and_failed_ones_reset() {
        let gone = pod("old", "h");
        let actual = vec![
            unit(gone.pod_unit.as_deref().unwrap(), "not-found", "active"),
            unit(&gone.containers[0].unit, "not-found", "failed"),
            unit(gone.slice.as_deref().unwrap(), "not-found", "active"),
            unit(
                &naming::container_service("default", "web", "gone"),
                "not-found",
                "deactivating",
            ),
            unit("podunit-default_idle.service", "not-found", "inactive"),
            // A slice without its file is still `loaded`: its missing fragment tells.
            ListedUnit {
                fragment_path: Some(String::new()),
                ..unit("podunit-default_old2.slice", "loaded", "active")
            },
            // Not ours: a file exists (hand-written), or not a pod unit name.
            unit("podunit-default_hand.service", "loaded", "active"),
            ListedUnit {
                fragment_path: Some("/etc/systemd/system/podunit-default_hand2.service".into()),
                ..unit("podunit-default_hand2.service", "loaded", "active")
            },
            unit("podunit-sync.service", "not-found", "active"),
            running("web"),
        ];
        let p = plan(
            &[pod("web", "h1")],
            &rec(&[("web", "h1"), ("old", "h")], BOOT),
            &actual,
            BOOT,
        );
        assert_eq!(
            p.actions,
            vec![
                Action::Stop {
                    unit: gone.pod_unit.clone().unwrap(),
                    grace: None,
                    stopping: false,
                },
                Action::ResetFailed {
                    unit: gone.containers[0].unit.clone()
                },
                Action::Stop {
                    unit: gone.slice.clone().unwrap(),
                    grace: None,
                    stopping: false,
                },
                Action::Stop {
                    unit: naming::container_service("default", "web", "gone"),
                    grace: None,
                    stopping: true,
                },
                Action::Stop {
                    unit: "podunit-default_old2.slice".into(),
                    grace: None,
                    stopping: false,
                },
            ]
        );
        assert!(!p.next.pods.contains_key("default/old"));
        assert_eq!(
            leftovers(&actual, &[pod("web", "h1")]),
            vec![gone.containers[0].unit.clone()]
        );
    }

    #[test]
    fn stop_of_a_recorded_container_carries_its_grace_period() {
        let gone = pod("old", "h");
        let actual = vec![unit(&gone.containers[0].unit, "not-found", "active")];
        let p = plan(&[], &rec(&[("old", "h")], BOOT), &actual, BOOT);
        assert_eq!(
            p.actions,
            vec![Action::Stop {
                unit: gone.containers[0].unit.clone(),
                grace: Some(7),
                stopping: false,
            }]
        );
        assert!(p.next.pods.is_empty());
    }

    #[test]
    fn a_pod_whose_files_systemd_still_has_is_not_removed_yet() {
        // Mid-reload: systemd emptied the generator's directory, or has not loaded its new
        // content; the pod's units still have their files.
        let (_, recorded) = recorded_pod("web", "u-web");
        let loaded = ListedUnit {
            fragment_path: Some("/run/systemd/generator/podunit-default_web.service".into()),
            ..running("web")
        };
        let p = plan(&[], &recorded, std::slice::from_ref(&loaded), BOOT);
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        assert_eq!(p.next.pods, recorded.pods, "still recorded as it was");
        // Once systemd has no file for it either, it is removed.
        let gone = ListedUnit {
            load_state: "not-found".into(),
            fragment_path: None,
            ..loaded
        };
        let p = plan(&[], &recorded, &[gone], BOOT);
        assert!(
            p.actions
                .iter()
                .any(|a| matches!(a, Action::Cleanup { .. }))
        );
    }

    #[test]
    fn a_removed_unit_with_a_queued_start_is_stopped() {
        let gone = pod("old", "h");
        let queued = ListedUnit {
            job_queued: true,
            ..unit(gone.pod_unit.as_deref().unwrap(), "not-found", "inactive")
        };
        let p = plan(&[], &State::default(), &[queued], BOOT);
        assert_eq!(
            p.actions,
            vec![Action::Stop {
                unit: gone.pod_unit.clone().unwrap(),
                grace: None,
                stopping: false
            }]
        );
    }

    #[test]
    fn a_removed_pod_outlives_a_restart_until_its_directories_are_gone() {
        let (gone, recorded) = recorded_pod("old", "u-1");
        let cleanup = Action::Cleanup {
            pod: PodKey::new("default", "old"),
            uid: "u-1".into(),
        };
        // First reconcile without the pod: stop, clean up, and keep it as removed.
        let ctr = &gone.containers[0].unit;
        let p = plan(&[], &recorded, &[unit(ctr, "not-found", "active")], BOOT);
        assert!(p.actions.contains(&cleanup));
        assert_eq!(p.next.removed["default/old"], record(&gone));
        // podunit-sync restarted while the container is still in its grace period: the stop
        // under way keeps its grace period and the cleanup is planned again.
        let p2 = plan(
            &[],
            &p.next,
            &[unit(ctr, "not-found", "deactivating")],
            BOOT,
        );
        assert_eq!(
            p2.actions,
            vec![
                Action::Stop {
                    unit: ctr.clone(),
                    grace: Some(7),
                    stopping: true
                },
                cleanup.clone()
            ]
        );
        assert_eq!(p2.next.removed, p.next.removed);
        // Restarted again after the units are gone: still cleaned up, until that succeeded and
        // the entry is dropped (Syncer::job_removed), after which nothing is left to do.
        let p3 = plan(&[], &p2.next, &[], BOOT);
        assert_eq!(p3.actions, vec![cleanup]);
        let mut done = p3.next.clone();
        done.removed.clear();
        assert!(plan(&[], &done, &[], BOOT).actions.is_empty());
        // The pod is back before its cleanup ran: its directories are its own again.
        let p4 = plan(std::slice::from_ref(&gone), &p2.next, &[], BOOT);
        assert!(p4.next.removed.is_empty());
        assert!(
            !p4.actions
                .iter()
                .any(|a| matches!(a, Action::Cleanup { .. }))
        );
        // Another pod with the same uid is rendered: never removed either.
        let mut twin = pod("twin", "h");
        twin.uid = Some("u-1".into());
        let p5 = plan(&[twin], &p2.next, &[], BOOT);
        assert!(
            !p5.actions
                .iter()
                .any(|a| matches!(a, Action::Cleanup { .. }))
        );
    }

    #[test]
    fn removed_recorded_pod_is_cleaned_up_after_its_stops() {
        let (gone, recorded) = recorded_pod("old", "u-1");
        let actual = vec![unit(
            gone.pod_unit.as_deref().unwrap(),
            "not-found",
            "active",
        )];
        let p = plan(&[], &recorded, &actual, BOOT);
        assert_eq!(
            p.actions.last(),
            Some(&Action::Cleanup {
                pod: PodKey::new("default", "old"),
                uid: "u-1".into()
            })
        );
        assert!(matches!(p.actions[0], Action::Stop { .. }));
        // Still rendered: never cleaned up.
        let p = plan(&[gone], &recorded, &actual, BOOT);
        assert!(
            !p.actions
                .iter()
                .any(|a| matches!(a, Action::Cleanup { .. }))
        );
    }

    #[test]
    fn spool_files_without_pods_are_unseen() {
        let mut p = pod("web", "h");
        p.source_path = Some("/var/lib/podunit/spool/web.yaml".into());
        let files = vec![
            "/var/lib/podunit/spool/web.yaml".to_string(),
            "/var/lib/podunit/spool/db.yaml".to_string(),
        ];
        assert_eq!(unseen_spool(&files, &[p.clone()]), vec![files[1].clone()]);
        assert_eq!(unseen_spool(&files[..1], &[p]), Vec::<String>::new());
        assert_eq!(unseen_spool(&files[..1], &[]), files[..1].to_vec());
    }

    #[test]
    fn state_round_trips_through_json() {
        let s = rec(&[("web", "h1")], BOOT);
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<State>(&j).unwrap(), s);
        // Older or partial files still load.
        assert_eq!(
            serde_json::from_str::<State>("{}").unwrap(),
            State::default()
        );
    }
}
