//! Probe results as the rest of podunit reads them. podunit-sync owns the probes; `podunit status`
//! is another process, so podunit-sync keeps `/run/podunit/probes.json` (root only, replaced
//! atomically whenever a published result changes), and status overlays it on the
//! status model ([`Observed`]) before any projection of it.
//!
//! A result belongs to one run of a container (its `ExecMainStartTimestamp`): a result from an
//! earlier run, or none at all, counts as the kubelet's initial value (not ready, not started).

use crate::probe::spec::ContainerProbes;
use crate::status::container::State;
use crate::status::model::Observed;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Where podunit-sync keeps the results (below `PODUNIT_ROOT`).
pub const RESULTS_FILE: &str = "/run/podunit/probes.json";

/// One container's published results.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerResult {
    /// The run these results are about: µs since the epoch when its main process started.
    pub run_started_us: u64,
    pub started: bool,
    pub ready: bool,
}

/// Every probed container's results, by container unit.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Results {
    pub containers: BTreeMap<String, ContainerResult>,
}

impl Results {
    pub fn load(path: &Path) -> Results {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    pub fn save(&self, path: &Path) -> Result<(), crate::common::atomicfile::Error> {
        use crate::common::atomicfile;
        let bytes = serde_json::to_vec(self).expect("plain data");
        atomicfile::write(path, &bytes, atomicfile::Options::new(0o600))
    }
}

/// `started` and `ready` of a container that has `probes` and whose unit's state is `state`,
/// given podunit-sync's `result` (None: not known). A container without probes keeps what its
/// unit says.
pub fn overlay(
    probes: Option<&ContainerProbes>,
    result: Option<&ContainerResult>,
    state: &State,
    started: &mut bool,
    ready: &mut bool,
) {
    let Some(p) = probes else {
        return;
    };
    let State::Running { started_at } = state else {
        return;
    };
    let current = result.filter(|r| r.run_started_us == *started_at && *started_at != 0);
    let probed_started = match (&p.startup, current) {
        (None, _) => true,
        (Some(_), Some(r)) => r.started,
        (Some(_), None) => false,
    };
    let probed_ready = probed_started
        && match (&p.readiness, current) {
            (None, _) => true,
            (Some(_), Some(r)) => r.ready,
            (Some(_), None) => false,
        };
    *started &= probed_started;
    *ready &= probed_ready;
}

/// Applies the results to a pod's status model: its containers' `ready` and `started`, from
/// which every projection of the model counts READY and sets `Ready` and `ContainersReady`.
pub fn overlay_observed(obs: &mut Observed, probes: &[ContainerProbes], results: &Results) {
    let find = |name: &str| probes.iter().find(|p| p.container == name);
    for c in obs
        .containers
        .iter_mut()
        .chain(obs.init_containers.iter_mut())
    {
        overlay(
            find(&c.name),
            results.containers.get(&c.unit),
            &c.state,
            &mut c.started,
            &mut c.ready,
        );
    }
}

/// Overlays on `obs` the published results of the probes `pod_unit`'s plan lists (in
/// `generator_dir`), as every local view of a pod (`podunit status`, the StatefulSet
/// controller) must; `results` is read only when the pod has probes.
pub fn overlay_planned(
    obs: &mut Observed,
    generator_dir: &Path,
    pod_unit: &str,
    results: &dyn Fn() -> Results,
) {
    let planned = plan_probes(generator_dir, pod_unit);
    if !planned.is_empty() {
        overlay_observed(obs, &planned, &results());
    }
}

/// The probes of a pod as its plan lists them (the generator wrote it next to the units).
pub fn plan_probes(generator_dir: &Path, pod_unit: &str) -> Vec<ContainerProbes> {
    let path = generator_dir
        .join(crate::translate::plan::PLAN_DIR)
        .join(crate::translate::plan::PodPlan::file_name(pod_unit));
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<crate::translate::plan::PodPlan>(&b).ok())
        .map(|p| p.probes)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::handler::Handler;
    use crate::probe::spec::Probe;

    fn probes(startup: bool, readiness: bool) -> ContainerProbes {
        let p = Probe {
            handler: Handler::Exec {
                command: vec!["true".into()],
            },
            initial_delay_seconds: 0,
            period_seconds: 10,
            timeout_seconds: 1,
            success_threshold: 1,
            failure_threshold: 3,
            termination_grace_period_seconds: None,
        };
        ContainerProbes {
            container: "c".into(),
            startup: startup.then(|| p.clone()),
            readiness: readiness.then(|| p.clone()),
            liveness: None,
            pre_stop: None,
        }
    }

    fn run(started_at: u64) -> State {
        State::Running { started_at }
    }

    fn apply(p: Option<&ContainerProbes>, r: Option<&ContainerResult>, s: &State) -> (bool, bool) {
        let (mut started, mut ready) = (true, true);
        overlay(p, r, s, &mut started, &mut ready);
        (started, ready)
    }

    #[test]
    fn results_count_for_their_own_run_only() {
        let p = probes(false, true);
        let r = ContainerResult {
            run_started_us: 5,
            started: true,
            ready: true,
        };
        assert_eq!(apply(Some(&p), Some(&r), &run(5)), (true, true));
        assert_eq!(apply(Some(&p), Some(&r), &run(6)), (true, false), "stale");
        assert_eq!(apply(Some(&p), None, &run(5)), (true, false), "unknown");
        assert_eq!(apply(None, None, &run(5)), (true, true), "no probes");
        let not_ready = ContainerResult {
            ready: false,
            ..r.clone()
        };
        assert_eq!(apply(Some(&p), Some(&not_ready), &run(5)), (true, false));
        let s = probes(true, false);
        let unstarted = ContainerResult {
            started: false,
            ..r
        };
        assert_eq!(apply(Some(&s), Some(&unstarted), &run(5)), (false, false));
    }
}
