//! The local pods `podunit status` and `podunit logs` look up: as the generator rendered them, and
//! as systemd still runs them after their files are gone.

use crate::common::paths::Paths;
use crate::generate::output::{self, GeneratedPod, PodKey};
use crate::status::pod::PodStatus;
use crate::status::probes;
use crate::status::{self, knownpods, waiting};
use crate::systemd::unit::UnitState;
use crate::systemd::{self, Client};
use std::collections::HashMap;

/// Every pod podunit knows: rendered ones, then ones whose files are gone but still run.
pub fn gather(client: &Client, paths: &Paths) -> Result<Vec<(GeneratedPod, bool)>, String> {
    let dir = paths.host(output::GENERATOR_DIR);
    let desired = output::scan(&dir);
    // systemd answers no call during a daemon-reload: once this one is answered, a tree that
    // was being rewritten while it was read is whole again, and is read once more.
    let actual = client
        .list_units(systemd::UNIT_PATTERN)
        .map_err(|e| e.to_string())?;
    let desired = match desired {
        Err(e) if e.is_reload_under_way() => output::scan(&dir),
        d => d,
    }
    .map_err(|e| e.to_string())?;
    let orphans = status::pod::orphan_pods(&actual, &desired);
    let mut all: Vec<(GeneratedPod, bool)> = desired.into_iter().map(|p| (p, false)).collect();
    all.extend(orphans.into_iter().map(|p| (p, true)));
    Ok(all)
}

/// The status of one pod, querying systemd for each of its units.
pub fn pod_status(
    client: &Client,
    paths: &Paths,
    pod: &GeneratedPod,
    orphan: bool,
    records: &[waiting::Record],
) -> Result<PodStatus, String> {
    let mut units: HashMap<String, UnitState> = HashMap::new();
    for u in pod
        .pod_unit
        .iter()
        .chain(pod.containers.iter().map(|c| &c.unit))
    {
        let s = client.unit_state(u).map_err(|e| e.to_string())?;
        units.insert(u.clone(), s);
    }
    status::start_detail::fill(&mut units);
    let terminating = orphan
        || pod
            .pod_unit
            .as_ref()
            .and_then(|u| units.get(u))
            .is_some_and(|s| s.active_state == "deactivating");
    let source = pod
        .source_path
        .as_deref()
        .and_then(|s| status::pod::source_of(s, paths));
    let mut obs = status::pod::observe(pod, &units);
    if let Some(uid) = pod
        .uid
        .as_deref()
        .filter(|u| !u.is_empty() && !u.contains('/'))
    {
        let dir = crate::common::text::concat(&[Paths::RUNTIME, "/", uid]);
        obs.pod_ips = crate::podstart::network::recorded_ips(paths, &dir).unwrap_or_default();
    }
    if let Some(pod_unit) = &pod.pod_unit {
        probes::overlay_planned(
            &mut obs,
            &paths.host(output::GENERATOR_DIR),
            pod_unit,
            &|| probes::Results::load(&paths.host(probes::RESULTS_FILE)),
        );
    }
    let mut st = status::pod::pod_status(pod, obs, &units, source, terminating);
    // What pod-prepare found missing, while the pod unit is down because of it.
    let pod_unit = pod.pod_unit.as_ref().and_then(|u| units.get(u));
    let of_pod = |w: waiting::Writer| {
        records.iter().find(|r| {
            Some(&r.uid) == pod.uid.as_ref()
                && (r.writer == waiting::Writer::Status) == (w == waiting::Writer::Status)
        })
    };
    if let (Some(rec), Some(u)) = (of_pod(waiting::Writer::Agent), pod_unit)
        && waiting::applies(rec, &u.active_state, u.exec_main_start_us)
    {
        knownpods::apply_waiting(&mut st, rec);
    }
    // The API server refused what the node says of the pod.
    if let Some(rec) = of_pod(waiting::Writer::Status) {
        st.message = Some(match st.message.take() {
            Some(m) => format!("{m}; {}", rec.message),
            None => rec.message.clone(),
        });
    }
    Ok(st)
}

/// Finds `NAME` (any namespace; `default` wins) or `NAMESPACE/NAME`.
/// The pod `want` (`NAME` or `NAMESPACE/NAME`) among every pod podunit knows. A daemon-reload
/// under way rewrites the generator's tree, so a pod missing from it is looked for again, after
/// a call to systemd (answered only once the reload is done); a few times, for reloads that
/// come back to back.
pub fn lookup(client: &Client, paths: &Paths, want: &str) -> Result<(GeneratedPod, bool), String> {
    const TRIES: usize = 4;
    let mut tries = 1;
    loop {
        let pods = gather(client, paths)?;
        match find(&pods, want) {
            Ok(found) => return Ok(found.clone()),
            Err(e) if tries == TRIES => return Err(e),
            Err(_) => tries += 1,
        }
    }
}

pub fn find<'a>(
    pods: &'a [(GeneratedPod, bool)],
    want: &str,
) -> Result<&'a (GeneratedPod, bool), String> {
    find_by(pods, |(p, _)| p.key.clone(), want)
}

/// As [`find`], over anything with a pod key.
pub fn find_by<'a, T>(
    items: &'a [T],
    key: impl Fn(&T) -> PodKey,
    want: &str,
) -> Result<&'a T, String> {
    if let Some(wanted) = PodKey::parse(want) {
        return items
            .iter()
            .find(|i| key(i) == wanted)
            .ok_or_else(|| format!("pod {want} not found"));
    }
    let hits: Vec<_> = items.iter().filter(|i| key(i).name == want).collect();
    match hits.as_slice() {
        [] => Err(format!("pod {want} not found")),
        [one] => Ok(one),
        many => many
            .iter()
            .find(|i| key(i).namespace == "default")
            .copied()
            .ok_or_else(|| {
                let keys: Vec<String> = many.iter().map(|i| key(i).to_string()).collect();
                format!(
                    "pod name {want} is ambiguous: {}; use NAMESPACE/NAME",
                    keys.join(", ")
                )
            }),
    }
}
