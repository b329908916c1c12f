//! Two-phase deletion: stop the units on deletionTimestamp, kill at the end of the grace period,
//! remove the pod's directories, then the final DELETE; and forgetting a pod locally.

use super::context::log;
use super::state::Phase;
use super::worker::Worker;
use crate::agent::spool;
use crate::common::paths::Paths;
use crate::kube::client::{self, DeleteOptions};
use crate::status::observe;
use k8s_openapi::api::core::v1::Pod;
use std::time::{Duration, Instant};

impl Worker {
    pub(super) fn begin_termination(&mut self, k: &(String, String)) {
        let Some(rec) = self.pods.get_mut(k) else {
            return;
        };
        let pod = rec.pod.get();
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30)
            .max(0) as u64;
        rec.phase = Phase::Terminating {
            deadline: Instant::now() + Duration::from_secs(grace),
            killed: false,
        };
        let units = rec.units.clone();
        log(format!("{}/{}: deleting (grace {grace}s)", k.0, k.1));
        let running: Vec<String> = rec
            .posted
            .as_ref()
            .map(|p| p.get())
            .iter()
            .flat_map(|st| {
                st.init_container_statuses
                    .iter()
                    .flatten()
                    .chain(st.container_statuses.iter().flatten())
            })
            .filter(|cs| cs.state.as_ref().is_some_and(|s| s.running.is_some()))
            .map(|cs| cs.name.clone())
            .collect();
        for c in running {
            let obj = crate::kube::events::Involved::container(&pod, &c);
            self.post_event(
                &obj,
                "Normal",
                "Killing",
                &crate::kube::events::message::killing(&c),
            );
        }
        // Stop now (the pod unit's stop propagates to its containers with their TimeoutStopSec),
        // then drop the manifest so the next reload forgets the units.
        if let Err(e) = self.units.stop(&units[..1], false) {
            log(format!("{}/{}: stop: {e}", k.0, k.1));
        }
        if self
            .spool
            .remove(&spool::file_name(&k.0, &k.1))
            .unwrap_or(false)
        {
            self.mark_dirty(k);
        }
    }

    pub(super) fn progress_terminations(&mut self) {
        let keys: Vec<(String, String)> = self
            .pods
            .iter()
            .filter(|(_, r)| matches!(r.phase, Phase::Terminating { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            let Some(rec) = self.pods.get_mut(&k) else {
                continue;
            };
            let Phase::Terminating { deadline, killed } = rec.phase.clone() else {
                continue;
            };
            let units = rec.units.clone();
            let stopped = match self.units.props(&units) {
                Ok(p) => observe::all_stopped(units.iter().filter_map(|u| p.get(u))),
                Err(e) => {
                    log(format!("{}/{}: {e}", k.0, k.1));
                    false
                }
            };
            if !stopped {
                if Instant::now() >= deadline && !killed {
                    log(format!("{}/{}: grace period over, killing", k.0, k.1));
                    let _ = self.units.stop(&units, true);
                    rec.phase = Phase::Terminating {
                        deadline,
                        killed: true,
                    };
                }
                continue;
            }
            // Volumes go before the object does (the kubelet unmounts before its final DELETE), so
            // whoever sees the pod gone also sees its state gone.
            let uid = rec.uid.clone();
            let pod = rec.pod.get();
            // The preStop hooks ran during this stop: their failures are events before it goes.
            // Read from the journal and the hooks' records, which outlive the units: the local
            // reconciler resets and unloads them as soon as they have stopped.
            self.hook_events(&pod, true);
            self.remove_pod_dirs(&uid);
            let path = client::path::<Pod>(Some(&k.0), Some(&k.1));
            let opts = DeleteOptions {
                grace_period_seconds: Some(0),
                uid: Some(uid.clone()),
                resource_version: None,
            };
            match self.client.delete(&path, &opts) {
                Ok(()) => {}
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => {
                    self.api_failed("deleting a pod", &e);
                    return;
                }
            }
            self.forget(&k, false);
        }
    }

    /// Drops all local traces of a pod: spool file, tokens, state and runtime dirs.
    pub(super) fn forget(&mut self, k: &(String, String), stop: bool) {
        let Some(rec) = self.pods.remove(k) else {
            return;
        };
        if stop {
            self.stop_units_of_file(k);
        }
        if self
            .spool
            .remove(&spool::file_name(&k.0, &k.1))
            .unwrap_or(false)
        {
            self.mark_dirty(k);
        }
        crate::agent::waitrecord::release(&self.cfg.paths, &rec.uid);
        crate::agent::waitrecord::status_accepted(&self.cfg.paths, &rec.uid);
        self.hooks_seen.forget(&rec.uid);
        self.forget_pulls(&rec.uid, &rec.pod.get());
        self.remove_pod_dirs(&rec.uid);
    }

    /// Removes /var/lib/podunit/pods/<uid>, /run/podunit/pods/<uid> and the hooks' records.
    fn remove_pod_dirs(&self, uid: &str) {
        if !uid.is_empty() && !uid.contains('/') && !uid.contains("..") {
            let hooks = crate::probe::hook::RECORDS;
            for base in [Paths::STATE, Paths::RUNTIME, Paths::TOKENS, hooks] {
                let _ = std::fs::remove_dir_all(self.cfg.paths.host(&format!("{base}/{uid}")));
            }
        }
    }
}
