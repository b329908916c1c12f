//! podunit-sync as the Job controller of the manifests' Jobs: it watches each Job's pods through
//! their units, runs [`crate::workload::job_controller::decide`], starts and stops pod units as it
//! says, and keeps each Job's record in podunit-sync's record (`jobs`), so a finished Job stays
//! finished across restarts, reloads and reboots.
//!
//! Local mode has no signal for a container's exit (podunit-sync subscribes to the manager's
//! signals only), so while a Job is unfinished its pods are looked at every [`POLL`]: a few
//! D-Bus calls per pod, and none once every Job is finished.

use super::{Error, Syncer, log, statefile};
use crate::generate::output::GeneratedPod;
use crate::status::phase::Phase;
use crate::systemd::unit::UnitState;
use crate::workload::job::JobTerms;
use crate::workload::job_controller::{self, JobRecord, PodState};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often an unfinished Job's pods are looked at.
pub const POLL: Duration = Duration::from_secs(2);

/// One Job as rendered: its terms and its pods by index (None: not rendered, e.g. waiting for
/// its image).
struct Rendered<'a> {
    terms: JobTerms,
    pods: Vec<Option<&'a GeneratedPod>>,
}

/// The Jobs of `desired`, by `namespace/name`. A Job whose pods disagree on its UID is being
/// rendered anew (a reload under way): left for the reconcile after it.
fn rendered(desired: &[GeneratedPod]) -> BTreeMap<String, Rendered<'_>> {
    let mut jobs: BTreeMap<String, Rendered<'_>> = BTreeMap::new();
    let mut torn = Vec::new();
    for pod in desired {
        let Some(t) = &pod.job else { continue };
        let r = jobs.entry(t.key()).or_insert_with(|| Rendered {
            terms: JobTerms {
                index: 0,
                ..t.clone()
            },
            pods: vec![None; t.pods()],
        });
        if r.terms.uid != t.uid || t.index >= r.pods.len() {
            torn.push(t.key());
            continue;
        }
        r.pods[t.index] = Some(pod);
    }
    for k in torn {
        jobs.remove(&k);
    }
    jobs
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Syncer {
    /// Runs every Job's controller once. Called after each reconcile and whenever
    /// [`Syncer::jobs_due`] says so.
    pub fn run_jobs(&mut self) -> Result<(), Error> {
        self.jobs_at = None;
        let desired = self.desired()?;
        let jobs = rendered(&desired);
        let mut state = statefile::load(&self.opts.state_file)?;
        if jobs.is_empty() && state.jobs.is_empty() {
            return Ok(());
        }
        let now = now_s();
        let mut next: BTreeMap<String, JobRecord> = BTreeMap::new();
        let mut wake: Option<u64> = None;
        let mut unfinished = false;
        for (key, job) in &jobs {
            let mut record = state.jobs.get(key).cloned();
            if let Some(r) = record.as_mut()
                && r.boot != self.boot_id
            {
                job_controller::after_reboot(r);
                r.boot = self.boot_id.clone();
            }
            let pods: Vec<PodState> = job
                .pods
                .iter()
                .map(|p| p.map_or(Ok(PodState::Inactive), |p| self.pod_state(p)))
                .collect::<Result<_, _>>()?;
            let d = job_controller::decide(&job.terms, record.as_ref(), &pods, now);
            for said in &d.said {
                log(&format!("job {key}: {said}"));
            }
            for &i in &d.stop {
                if let Some(unit) = job.pods[i].and_then(|p| p.pod_unit.as_deref()) {
                    match self.client.stop(unit) {
                        Ok(_) => {}
                        Err(e) if e.is_no_such_unit() => {}
                        Err(e) => log(&format!("job {key}: {e}")),
                    }
                }
            }
            let mut rec = d.record;
            rec.boot = self.boot_id.clone();
            for &i in &d.start {
                let Some(pod) = job.pods[i] else {
                    // Not rendered (its image is still being pulled): tried at a later look.
                    rec.started.remove(&i);
                    continue;
                };
                if let Err(e) = self.start_job_pod(pod, &pods[i]) {
                    log(&format!("job {key}: pod {}: {e}", pod.key));
                }
            }
            if rec.finished.is_none() && !job.terms.suspend {
                unfinished = true;
            }
            if let Some(w) = d.wake {
                wake = Some(wake.map_or(w, |x| x.min(w)));
            }
            next.insert(key.clone(), rec);
        }
        // A Job whose document is gone is deleted: made again, it is a new Job.
        state.jobs = next;
        statefile::save(&self.opts.state_file, &state)?;
        let mut at = wake.map(|w| Instant::now() + Duration::from_secs(w.saturating_sub(now)));
        if unfinished {
            let poll = Instant::now() + POLL;
            at = Some(at.map_or(poll, |a| a.min(poll)));
        }
        self.jobs_at = at;
        Ok(())
    }

    /// Whether the Jobs are due to be looked at.
    pub fn jobs_due(&self, now: Instant) -> bool {
        self.jobs_at.is_some_and(|at| at <= now)
    }

    /// A Job's pod, as its units show it.
    fn pod_state(&self, pod: &GeneratedPod) -> Result<PodState, Error> {
        let mut units: HashMap<String, UnitState> = HashMap::new();
        for u in pod
            .pod_unit
            .iter()
            .chain(pod.containers.iter().map(|c| &c.unit))
        {
            units.insert(u.clone(), self.client.unit_state(u)?);
        }
        let up = pod
            .pod_unit
            .as_ref()
            .and_then(|u| units.get(u))
            .is_some_and(|u| {
                matches!(
                    u.active_state.as_str(),
                    "active" | "activating" | "reloading"
                )
            });
        if !up {
            return Ok(PodState::Inactive);
        }
        let obs = crate::status::pod::observe(pod, &units);
        Ok(match obs.phase {
            Phase::Succeeded => PodState::Succeeded,
            Phase::Failed => PodState::Failed,
            _ => PodState::Active {
                restarts: obs.restarts(),
            },
        })
    }

    /// Runs a Job's pod: a first start, or a new attempt after a failure, whose containers count
    /// restarts from 0 as a new pod's do.
    fn start_job_pod(&mut self, pod: &GeneratedPod, state: &PodState) -> Result<(), Error> {
        let Some(unit) = pod.pod_unit.as_deref() else {
            return Ok(());
        };
        for c in &pod.containers {
            match self.client.reset_failed(&c.unit) {
                Ok(()) => {}
                Err(e) if e.is_no_such_unit() => {}
                Err(e) => return Err(e.into()),
            }
        }
        if *state == PodState::Inactive {
            log(&format!("job pod {}: starting ({unit})", pod.key));
            self.client.start(unit)?;
        } else {
            log(&format!("job pod {}: running it again ({unit})", pod.key));
            self.client.restart(unit)?;
        }
        Ok(())
    }
}
