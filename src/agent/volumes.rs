//! Updating a running pod's files volumes when its ConfigMaps, Secrets or tokens change.

use super::context::log;
use super::worker::Worker;

impl Worker {
    /// Has the files volumes of the pod, if it runs, rewritten from the spool (its ConfigMaps and
    /// Secrets now) and its issued tokens: `podunit pod-refresh` with the plan the generator wrote
    /// for it, run as a transient unit (the files belong to the pod's users, which podunit-sync's
    /// own sandbox may not chown to). A pod that does not run yet gets its files from pod-prepare.
    pub(super) fn refresh_volumes(&mut self, k: &(String, String)) {
        let Some(rec) = self.pods.get(k) else { return };
        let unit = crate::translate::naming::pod_service(&k.0, &k.1);
        let plan_path = format!(
            "{}/{}/{}",
            crate::translate::plan::GENERATOR_DIR,
            crate::translate::plan::PLAN_DIR,
            crate::translate::plan::PodPlan::file_name(&unit)
        );
        let Some(plan) = std::fs::read_to_string(self.cfg.paths.host(&plan_path))
            .ok()
            .and_then(|t| serde_json::from_str::<crate::translate::plan::PodPlan>(&t).ok())
        else {
            return;
        };
        // The plan of an older pod of the same name, or a pod that is not running: nothing to do.
        if plan.uid != rec.uid || !self.cfg.paths.host(&plan.runtime_dir).is_dir() {
            return;
        }
        self.refresh_runs += 1;
        // A new name each time: a refresh still running never blocks the next one (the volume's
        // lock orders them, and each writes what is current when it runs).
        let mut name = format!(
            "{}-refresh-{}.service",
            unit.trim_end_matches(".service"),
            self.refresh_runs
        );
        if name.len() > crate::translate::naming::UNIT_NAME_MAX {
            // A pod unit name near the limit: the UID names the pod as well, in 36 characters.
            name = format!("podunit-refresh-{}-{}.service", plan.uid, self.refresh_runs);
        }
        let bin = crate::generate::podunit_bin(&self.cfg.paths);
        let argv = [bin.as_str(), "pod-refresh", &plan_path].map(String::from);
        match self.units.run_once(
            &name,
            &format!("Update the volumes of pod {}/{}", k.0, k.1),
            &argv,
        ) {
            Ok(()) => log(format!("{}/{}: updating its volumes ({name})", k.0, k.1)),
            Err(e) => log(format!("{}/{}: updating its volumes: {e}", k.0, k.1)),
        }
    }
}
