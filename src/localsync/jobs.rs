//! podunit-sync as the Job and CronJob controller of the manifests' Jobs and CronJobs: it watches
//! each Job's pods through their units, runs [`crate::workload::job_controller::decide`] (and,
//! for a CronJob, [`crate::workload::cron_controller::decide`] first), starts and stops pod
//! units as they say, and keeps their records in podunit-sync's record (`jobs`, `cronJobs`), so
//! a finished Job stays finished across restarts, reloads and reboots.
//!
//! Local mode has no signal for a container's exit (podunit-sync subscribes to the manager's
//! signals only), so while a Job runs its pods are looked at every [`POLL`]: a few D-Bus calls
//! per pod, and none once every Job is finished. A CronJob's timer wakes podunit-sync through
//! the start job of the unit it activates ([`is_cron_target`]).

use super::{Error, Syncer, log, statefile};
use crate::generate::output::GeneratedPod;
use crate::status::phase::Phase;
use crate::systemd::unit::UnitState;
use crate::workload::cron_controller::{self, CronRecord, Next};
use crate::workload::job::JobTerms;
use crate::workload::job_controller::{self, JobRecord, PodState};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often a running Job's pods are looked at.
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

/// Whether `unit` is what a CronJob's timer activates: its start says a run may be due.
pub fn is_cron_target(unit: &str) -> bool {
    unit.starts_with("podunit-") && unit.ends_with(".target") && unit != "podunit.target"
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A pod as the controller sees it, and whether its pod unit is up (a new attempt restarts it).
struct Seen {
    state: PodState,
    up: bool,
}

impl Syncer {
    /// Runs every Job's and CronJob's controller once. Called after each reconcile, when a
    /// CronJob's timer fires, and whenever [`Syncer::jobs_due`] says so.
    pub fn run_jobs(&mut self) -> Result<(), Error> {
        let desired = self.desired()?;
        self.run_jobs_of(&desired)
    }

    /// [`Syncer::run_jobs`] over the pods the generator rendered, already read.
    pub(super) fn run_jobs_of(&mut self, desired: &[GeneratedPod]) -> Result<(), Error> {
        self.jobs_at = None;
        // The StatefulSets' controller too: it polls as a running Job does.
        let sets_coming_up = self.run_ordered_of(desired)?;
        let jobs = rendered(desired);
        self.sync_timers()?;
        let mut state = statefile::load(&self.opts.state_file)?;
        if jobs.is_empty() && state.jobs.is_empty() && state.cron_jobs.is_empty() {
            if sets_coming_up {
                self.jobs_at = Some(Instant::now() + POLL);
            }
            return Ok(());
        }
        let now = now_s();
        let mut next_jobs: BTreeMap<String, JobRecord> = BTreeMap::new();
        let mut next_crons: BTreeMap<String, CronRecord> = BTreeMap::new();
        let mut wake: Option<u64> = None;
        let mut running = false;
        for (key, job) in &jobs {
            let mut record = state.jobs.get(key).cloned();
            if let Some(r) = record.as_mut()
                && r.boot != self.boot_id
            {
                job_controller::after_reboot(r);
                r.boot = self.boot_id.clone();
            }
            let mut terms = job.terms.clone();
            if terms.cron.is_some() {
                let cron = state
                    .cron_jobs
                    .get(key)
                    .cloned()
                    .unwrap_or_else(|| CronRecord {
                        first_seen: now as i64,
                        ..Default::default()
                    });
                let (cron, run) = self.cron_step(key, job, cron, record.as_ref(), now);
                next_crons.insert(key.clone(), cron);
                match run {
                    // This run's Job: its own UID, its own record.
                    Some(uid) => {
                        if record.as_ref().is_none_or(|r| r.uid != uid) {
                            record = Some(JobRecord::new(&uid, now));
                        }
                        terms.uid = uid;
                    }
                    // No run yet (or one of a template since changed): nothing to do.
                    None => continue,
                }
            }
            let seen: Vec<Seen> = job
                .pods
                .iter()
                .enumerate()
                .map(|(i, p)| match p {
                    None => Ok(Seen {
                        state: PodState::Inactive,
                        up: false,
                    }),
                    Some(p) => self.seen(p, record.as_ref().and_then(|r| r.started.get(&i))),
                })
                .collect::<Result<_, _>>()?;
            let states: Vec<PodState> = seen.iter().map(|s| s.state).collect();
            let was_going = record.as_ref().is_some_and(|r| r.finished.is_none());
            let d = job_controller::decide(&terms, record.as_ref(), &states, now);
            for said in &d.said {
                log(&format!("job {key}: {said}"));
            }
            for &i in &d.stop {
                self.stop_job_pod(key, job.pods[i]);
            }
            let mut rec = d.record;
            rec.boot = self.boot_id.clone();
            for &i in &d.start {
                let Some(pod) = job.pods[i] else {
                    // Not rendered (its image is still being pulled): tried at a later look.
                    rec.started.remove(&i);
                    continue;
                };
                if let Err(e) = self.start_job_pod(pod, seen[i].up) {
                    log(&format!("job {key}: pod {}: {e}", pod.key));
                }
            }
            // A CronJob's run that just ended may have held the next: look again soon.
            let just_ended = was_going && rec.finished.is_some() && terms.cron.is_some();
            if (rec.finished.is_none() && !terms.suspend) || just_ended {
                running = true;
            }
            if let Some(w) = d.wake {
                wake = Some(wake.map_or(w, |x| x.min(w)));
            }
            next_jobs.insert(key.clone(), rec);
        }
        // A Job or CronJob whose document is gone is deleted: made again, it is a new one.
        state.jobs = next_jobs;
        state.cron_jobs = next_crons;
        statefile::save(&self.opts.state_file, &state)?;
        let mut at = wake.map(|w| Instant::now() + Duration::from_secs(w.saturating_sub(now)));
        if running || sets_coming_up {
            let poll = Instant::now() + POLL;
            at = Some(at.map_or(poll, |a| a.min(poll)));
        }
        self.jobs_at = at;
        Ok(())
    }

    /// The CronJob side of a CronJob's Job: whether a run is due (stopping the going one for
    /// `Replace`). Returns the record to keep and the UID of the run whose Job is to be driven:
    /// a new one, the going one, or the last (finished) one; None before the first.
    fn cron_step(
        &mut self,
        key: &str,
        job: &Rendered<'_>,
        cron: CronRecord,
        last: Option<&JobRecord>,
        now: u64,
    ) -> (CronRecord, Option<String>) {
        let terms = &job.terms;
        let Some(c) = terms.cron.as_ref() else {
            return (cron, None);
        };
        // A run's UID is the Job's and its scheduled time: a run of a changed template is
        // another Job's.
        let prefix = format!("{}@", terms.uid);
        let last = last.filter(|r| r.uid.starts_with(&prefix));
        let going = last.is_some_and(|r| r.finished.is_none());
        let Ok(schedule) = crate::workload::cron::parse(&c.schedule) else {
            return (cron, last.map(|r| r.uid.clone()));
        };
        let zone = match &c.time_zone {
            None => jiff::tz::TimeZone::system(),
            Some(z) => match jiff::tz::TimeZone::get(z) {
                Ok(tz) => tz,
                Err(e) => {
                    log(&format!("cronjob {key}: time zone {z}: {e}"));
                    return (cron, last.map(|r| r.uid.clone()));
                }
            },
        };
        let (next, cron) = cron_controller::decide(c, &schedule, &zone, &cron, going, now as i64);
        match next {
            Next::Nothing => (cron, last.map(|r| r.uid.clone())),
            Next::Held {
                reason, message, ..
            } => {
                log(&format!("cronjob {key}: {reason}: {message}"));
                (cron, last.map(|r| r.uid.clone()))
            }
            Next::Run { scheduled, replace } => {
                if replace {
                    log(&format!(
                        "cronjob {key}: stopping the going run (concurrency policy Replace)"
                    ));
                    for pod in &job.pods {
                        self.stop_job_pod(key, *pod);
                    }
                }
                log(&format!(
                    "cronjob {key}: starting the run scheduled for {}",
                    cron_controller::rfc1123z(scheduled)
                ));
                (cron, Some(format!("{prefix}{scheduled}")))
            }
        }
    }

    /// Starts the CronJobs' timers the generator rendered and stops those whose CronJob is
    /// gone (a unit without its file keeps running until stopped).
    fn sync_timers(&mut self) -> Result<(), Error> {
        let rendered: BTreeSet<String> = crate::generate::output::timers(&self.opts.generator_dir)?;
        let listed = self.client.list_units("podunit-*.timer")?;
        let mut running = BTreeSet::new();
        for u in &listed {
            if u.is_running() {
                running.insert(u.name.clone());
            }
            if u.load_state != "not-found" || rendered.contains(&u.name) {
                continue;
            }
            // Gone with its CronJob: stopped if it runs, forgotten if it failed (it does when
            // its target went first), so `systemctl list-timers --all` holds no leftover.
            let done = if u.is_running() {
                log(&format!("stopping {}: its CronJob is gone", u.name));
                self.client.stop(&u.name).map(|_| ())
            } else if u.active_state == "failed" {
                self.client.reset_failed(&u.name)
            } else {
                Ok(())
            };
            if let Err(e) = done
                && !e.is_no_such_unit()
            {
                log(&format!("{e}"));
            }
        }
        for t in rendered.difference(&running) {
            log(&format!("starting {t}"));
            match self.client.start(t) {
                Ok(_) => {}
                // The reload that rendered it is still under way.
                Err(e) if e.is_no_such_unit() => {}
                Err(e) => log(&format!("{e}")),
            }
        }
        Ok(())
    }

    /// Whether the Jobs are due to be looked at.
    pub fn jobs_due(&self, now: Instant) -> bool {
        self.jobs_at.is_some_and(|at| at <= now)
    }

    /// A Job's pod, as its units show it. A pod's end counts only once its pod unit came up
    /// for the attempt started at `started` (unix seconds): until then what the units show is
    /// the previous attempt's, or the previous run's.
    fn seen(&self, pod: &GeneratedPod, started: Option<&u64>) -> Result<Seen, Error> {
        let (units, up) = self.unit_states(pod)?;
        let pod_unit = pod.pod_unit.as_ref().and_then(|u| units.get(u));
        if !up {
            return Ok(Seen {
                state: PodState::Inactive,
                up,
            });
        }
        let since = pod_unit.map_or(0, |u| u.active_enter_us / 1_000_000);
        let obs = crate::status::pod::observe(pod, &units);
        let state = match (obs.phase, started) {
            (Phase::Succeeded | Phase::Failed, None) => PodState::Inactive,
            (Phase::Succeeded | Phase::Failed, Some(&at)) if since < at => {
                PodState::Active { restarts: 0 }
            }
            (Phase::Succeeded, _) => PodState::Succeeded,
            (Phase::Failed, _) => PodState::Failed,
            _ => PodState::Active {
                restarts: obs.restarts(),
            },
        };
        Ok(Seen { state, up })
    }

    /// The states of a pod's units, and whether its pod unit is up.
    pub(super) fn unit_states(
        &self,
        pod: &GeneratedPod,
    ) -> Result<(HashMap<String, UnitState>, bool), Error> {
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
        Ok((units, up))
    }

    /// Runs a Job's pod: a first start, or a new attempt (after a failure, or a CronJob's next
    /// run), whose containers count restarts from 0 as a new pod's do.
    fn start_job_pod(&mut self, pod: &GeneratedPod, up: bool) -> Result<(), Error> {
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
        if up {
            log(&format!("job pod {}: running it again ({unit})", pod.key));
            self.client.restart(unit)?;
        } else {
            log(&format!("job pod {}: starting ({unit})", pod.key));
            self.client.start(unit)?;
        }
        Ok(())
    }

    fn stop_job_pod(&mut self, key: &str, pod: Option<&GeneratedPod>) {
        let Some(unit) = pod.and_then(|p| p.pod_unit.as_deref()) else {
            return;
        };
        match self.client.stop(unit) {
            Ok(_) => {}
            Err(e) if e.is_no_such_unit() => {}
            Err(e) => log(&format!("job {key}: {e}")),
        }
    }
}
