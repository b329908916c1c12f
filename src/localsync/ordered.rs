//! podunit-sync as the StatefulSet controller of the manifests' `OrderedReady` StatefulSets: pod
//! `i` is started only once every pod before it is Running and Ready (its readiness probes
//! passed), as the controller creates pod `i` only then. A pod that stops being Ready holds the
//! ones after it that have not started, and stops none. Parallel sets' pods start with the node.
//!
//! Readiness has no signal of its own here (the prober publishes its results to a file), so
//! while a set is coming up its pods are looked at every [`super::jobs::POLL`].

use super::{Error, Syncer, log};
use crate::generate::output::GeneratedPod;
use crate::status::phase::Phase;
use crate::status::probes::{self, Results};
use std::collections::BTreeMap;

impl Syncer {
    /// Starts the next pod of each OrderedReady StatefulSet whose pods before it are Ready.
    /// Returns whether a set is still coming up (to be looked at again).
    pub(super) fn run_ordered_of(&mut self, desired: &[GeneratedPod]) -> Result<bool, Error> {
        let mut sets: BTreeMap<&str, Vec<(u32, &GeneratedPod)>> = BTreeMap::new();
        for pod in desired {
            if let Some(o) = &pod.ordered {
                sets.entry(o.set.as_str())
                    .or_default()
                    .push((o.ordinal, pod));
            }
        }
        if sets.is_empty() {
            return Ok(false);
        }
        let mut coming_up = false;
        for (set, mut pods) in sets {
            pods.sort_by_key(|(ordinal, _)| *ordinal);
            for (ordinal, pod) in pods {
                let Some(unit) = pod.pod_unit.as_deref() else {
                    break;
                };
                let (up, ready) = self.up_and_ready(pod)?;
                if !up {
                    log(&format!(
                        "statefulset {set}: starting pod {} (ordinal {ordinal})",
                        pod.key
                    ));
                    match self.client.start(unit) {
                        Ok(_) => {}
                        // The reload that rendered it is still under way.
                        Err(e) if e.is_no_such_unit() => {}
                        Err(e) => log(&format!("statefulset {set}: {e}")),
                    }
                    coming_up = true;
                    break;
                }
                if !ready {
                    coming_up = true;
                    break;
                }
            }
        }
        Ok(coming_up)
    }

    /// Whether the pod's unit is up, and whether the pod is Running and Ready (its probes'
    /// published results overlaid, as `podunit status` shows it).
    fn up_and_ready(&self, pod: &GeneratedPod) -> Result<(bool, bool), Error> {
        let (units, up) = self.unit_states(pod)?;
        if !up {
            return Ok((false, false));
        }
        let mut obs = crate::status::pod::observe(pod, &units);
        if let Some(unit) = &pod.pod_unit {
            let published = self.opts.paths.host(probes::RESULTS_FILE);
            probes::overlay_planned(&mut obs, &self.opts.generator_dir, unit, &|| {
                Results::load(&published)
            });
        }
        Ok((true, obs.phase == Phase::Running && obs.all_ready()))
    }
}
