//! The workloads of `podunit status`, as `kubectl get` shows them: Deployments, ReplicaSets,
//! StatefulSets and DaemonSets from their pods' states, Jobs and CronJobs from the terms their
//! pods' units carry and podunit-sync's record of them.

use crate::common::timefmt::human_duration;
use crate::generate::output::GeneratedPod;
use crate::localsync::reconcile::State;
use crate::workload::cron_controller::CronRecord;
use crate::workload::job::JobTerms;
use crate::workload::job_controller::JobRecord;
use std::collections::BTreeMap;

/// One Job's or CronJob's line, as JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// kubectl's columns after NAME, by their headers.
    pub columns: BTreeMap<&'static str, String>,
}

const JOB_COLUMNS: [&str; 4] = ["STATUS", "COMPLETIONS", "DURATION", "AGE"];
const CRON_COLUMNS: [&str; 6] = [
    "SCHEDULE",
    "TIMEZONE",
    "SUSPEND",
    "ACTIVE",
    "LAST SCHEDULE",
    "AGE",
];

const DEPLOYMENT_COLUMNS: [&str; 4] = ["READY", "UP-TO-DATE", "AVAILABLE", "AGE"];
const REPLICA_SET_COLUMNS: [&str; 4] = ["DESIRED", "CURRENT", "READY", "AGE"];
const STATEFUL_SET_COLUMNS: [&str; 2] = ["READY", "AGE"];
const DAEMON_SET_COLUMNS: [&str; 6] = [
    "DESIRED",
    "CURRENT",
    "READY",
    "UP-TO-DATE",
    "AVAILABLE",
    "AGE",
];

/// One pod of a Deployment, ReplicaSet, StatefulSet or DaemonSet, as its status shows it.
pub struct Member {
    pub namespace: String,
    /// (kind, name) of its workload.
    pub workload: (String, String),
    /// Its pod unit is up (kubectl's CURRENT: the pod exists).
    pub current: bool,
    pub ready: bool,
    /// When its manifest was written (unix seconds): the workload's age.
    pub created: Option<u64>,
}

/// The controllers' rows, from their pods: every rendered pod is desired and up to date (a
/// changed template replaces them all), a Ready one is available (`minReadySeconds` is not
/// kept). `now` in unix seconds.
pub fn controller_rows(members: &[Member], now: u64) -> Vec<Workload> {
    #[derive(Default)]
    struct Count {
        desired: usize,
        current: usize,
        ready: usize,
        created: Option<u64>,
    }
    let mut by: BTreeMap<(String, String, String), Count> = BTreeMap::new();
    for m in members {
        let c = by
            .entry((
                m.workload.0.clone(),
                m.namespace.clone(),
                m.workload.1.clone(),
            ))
            .or_default();
        c.desired += 1;
        c.current += usize::from(m.current);
        c.ready += usize::from(m.ready);
        c.created = match (c.created, m.created) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    by.into_iter()
        .filter_map(|((kind, namespace, name), c)| {
            let age = c.created.map_or("<unknown>".into(), |t| {
                human_duration(now as i64 - t as i64)
            });
            let (kind, columns): (&'static str, Vec<(&'static str, String)>) = match kind.as_str() {
                "Deployment" => (
                    "Deployment",
                    DEPLOYMENT_COLUMNS
                        .into_iter()
                        .zip([
                            format!("{}/{}", c.ready, c.desired),
                            c.desired.to_string(),
                            c.ready.to_string(),
                            age,
                        ])
                        .collect(),
                ),
                "ReplicaSet" => (
                    "ReplicaSet",
                    REPLICA_SET_COLUMNS
                        .into_iter()
                        .zip([
                            c.desired.to_string(),
                            c.current.to_string(),
                            c.ready.to_string(),
                            age,
                        ])
                        .collect(),
                ),
                "StatefulSet" => (
                    "StatefulSet",
                    STATEFUL_SET_COLUMNS
                        .into_iter()
                        .zip([format!("{}/{}", c.ready, c.desired), age])
                        .collect(),
                ),
                "DaemonSet" => (
                    "DaemonSet",
                    DAEMON_SET_COLUMNS
                        .into_iter()
                        .zip([
                            c.desired.to_string(),
                            c.current.to_string(),
                            c.ready.to_string(),
                            c.desired.to_string(),
                            c.ready.to_string(),
                            age,
                        ])
                        .collect(),
                ),
                _ => return None,
            };
            Some(Workload {
                kind,
                namespace,
                name,
                columns: columns.into_iter().collect(),
            })
        })
        .collect()
}

/// The Jobs, then the CronJobs, of the rendered pods; `now` in unix seconds.
pub fn workloads(pods: &[GeneratedPod], state: &State, now: u64) -> Vec<Workload> {
    let mut terms: BTreeMap<String, &JobTerms> = BTreeMap::new();
    for p in pods {
        if let Some(t) = &p.job {
            terms.entry(t.key()).or_insert(t);
        }
    }
    let mut jobs = Vec::new();
    let mut crons = Vec::new();
    for (key, t) in terms {
        let record = state.jobs.get(&key).filter(|r| {
            r.uid == t.uid || (t.cron.is_some() && r.uid.starts_with(&format!("{}@", t.uid)))
        });
        if let Some(c) = &t.cron {
            let cron = state.cron_jobs.get(&key);
            crons.push(cron_row(t, c, cron, record, now));
            if record.is_none() {
                continue; // no run yet
            }
        }
        jobs.push(job_row(t, record, now));
    }
    jobs.extend(crons);
    jobs
}

fn job_row(t: &JobTerms, rec: Option<&JobRecord>, now: u64) -> Workload {
    let succeeded = rec.map_or(0, |r| r.succeeded.len());
    let finished = rec.and_then(|r| r.finished.as_ref());
    let status = match finished {
        Some(f) => f.type_.clone(),
        None if t.suspend => "Suspended".into(),
        None => "Running".into(),
    };
    let completions = match t.completions {
        Some(c) => format!("{succeeded}/{c}"),
        None if t.parallelism > 1 => format!("{succeeded}/1 of {}", t.parallelism),
        None => format!("{succeeded}/1"),
    };
    let start = rec.and_then(|r| r.start_time);
    let duration = match (start, finished) {
        (Some(s), Some(f)) => human_duration(f.at as i64 - s as i64),
        (Some(s), None) => human_duration(now as i64 - s as i64),
        (None, _) => String::new(),
    };
    let age = rec
        .map(|r| r.created)
        .filter(|c| *c > 0)
        .map_or("<unknown>".into(), |c| {
            human_duration(now as i64 - c as i64)
        });
    Workload {
        kind: "Job",
        namespace: t.namespace.clone(),
        name: t.name.clone(),
        columns: JOB_COLUMNS
            .into_iter()
            .zip([status, completions, duration, age])
            .collect(),
    }
}

fn cron_row(
    t: &JobTerms,
    c: &crate::workload::job::CronTerms,
    cron: Option<&CronRecord>,
    run: Option<&JobRecord>,
    now: u64,
) -> Workload {
    let active = run.is_some_and(|r| r.finished.is_none());
    let last = cron
        .and_then(|r| r.last_schedule)
        .map_or("<none>".into(), |s| human_duration(now as i64 - s));
    let age = cron.map_or("<unknown>".into(), |r| {
        human_duration(now as i64 - r.first_seen)
    });
    Workload {
        kind: "CronJob",
        namespace: t.namespace.clone(),
        name: t.name.clone(),
        columns: CRON_COLUMNS
            .into_iter()
            .zip([
                c.schedule.clone(),
                c.time_zone.clone().unwrap_or_else(|| "<none>".into()),
                if c.suspend { "True" } else { "False" }.into(),
                u8::from(active).to_string(),
                last,
                age,
            ])
            .collect(),
    }
}

/// The tables, one per kind, as kubectl prints them (`job.batch/NAME` with the namespace
/// first).
pub fn tables(workloads: &[Workload]) -> String {
    let mut out = String::new();
    // `kubectl get all`'s order.
    for (kind, word, columns) in [
        ("DaemonSet", "daemonset.apps", &DAEMON_SET_COLUMNS[..]),
        ("Deployment", "deployment.apps", &DEPLOYMENT_COLUMNS[..]),
        ("ReplicaSet", "replicaset.apps", &REPLICA_SET_COLUMNS[..]),
        ("StatefulSet", "statefulset.apps", &STATEFUL_SET_COLUMNS[..]),
        ("Job", "job.batch", &JOB_COLUMNS[..]),
        ("CronJob", "cronjob.batch", &CRON_COLUMNS[..]),
    ] {
        let of_kind: Vec<&Workload> = workloads.iter().filter(|w| w.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let mut rows = vec![
            ["NAMESPACE", "NAME"]
                .into_iter()
                .chain(columns.iter().copied())
                .map(str::to_string)
                .collect::<Vec<_>>(),
        ];
        for w in of_kind {
            let mut row = vec![w.namespace.clone(), format!("{word}/{}", w.name)];
            row.extend(columns.iter().map(|c| w.columns[c].clone()));
            rows.push(row);
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&super::output::table(&rows));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::output::PodKey;
    use crate::workload::job::CronTerms;
    use crate::workload::job_controller::Finished;

    fn pod(terms: JobTerms) -> GeneratedPod {
        GeneratedPod {
            key: PodKey::new(&terms.namespace, &format!("{}-x", terms.name)),
            uid: None,
            pod_unit: None,
            slice: None,
            containers: Vec::new(),
            source_path: None,
            hash: String::new(),
            job: Some(terms),
            ordered: None,
            workload: None,
        }
    }

    fn terms(name: &str, cron: Option<CronTerms>) -> JobTerms {
        JobTerms {
            namespace: "default".into(),
            name: name.into(),
            uid: "u".into(),
            index: 0,
            completions: Some(3),
            parallelism: 2,
            backoff_limit: 6,
            active_deadline_seconds: None,
            suspend: false,
            indexed: false,
            on_failure: false,
            cron,
        }
    }

    #[test]
    fn controllers_as_kubectl_lists_them() {
        let member = |kind: &str, name: &str, current: bool, ready: bool| Member {
            namespace: "default".into(),
            workload: (kind.into(), name.into()),
            current,
            ready,
            created: Some(1000),
        };
        let members = [
            member("Deployment", "web", true, true),
            member("Deployment", "web", true, false),
            member("StatefulSet", "db", true, true),
            member("StatefulSet", "db", false, false),
            member("DaemonSet", "agent", true, true),
        ];
        let text = tables(&controller_rows(&members, 1090));
        assert_eq!(
            text,
            "NAMESPACE   NAME                   DESIRED   CURRENT   READY   UP-TO-DATE   AVAILABLE   AGE\n\
             default     daemonset.apps/agent   1         1         1       1            1           90s\n\
             \n\
             NAMESPACE   NAME                  READY   UP-TO-DATE   AVAILABLE   AGE\n\
             default     deployment.apps/web   1/2     2            1           90s\n\
             \n\
             NAMESPACE   NAME                  READY   AGE\n\
             default     statefulset.apps/db   1/2     90s\n"
        );
    }

    #[test]
    fn jobs_and_cron_jobs_as_kubectl_lists_them() {
        let cron = CronTerms {
            schedule: "*/5 * * * *".into(),
            time_zone: None,
            concurrency_policy: "Forbid".into(),
            starting_deadline_seconds: None,
            suspend: false,
        };
        let pods = [pod(terms("pi", None)), pod(terms("hello", Some(cron)))];
        let mut state = State::default();
        let mut pi = JobRecord::new("u", 1000);
        pi.start_time = Some(1000);
        pi.succeeded = [0, 1, 2].into();
        pi.finished = Some(Finished {
            type_: "Complete".into(),
            reason: "CompletionsReached".into(),
            message: String::new(),
            at: 1023,
        });
        state.jobs.insert("default/pi".into(), pi);
        let mut run = JobRecord::new("u@960", 960);
        run.start_time = Some(960);
        state.jobs.insert("default/hello".into(), run);
        state.cron_jobs.insert(
            "default/hello".into(),
            CronRecord {
                first_seen: 700,
                last_schedule: Some(960),
                last_said: None,
            },
        );
        let text = tables(&workloads(&pods, &state, 1300));
        assert_eq!(
            text,
            "NAMESPACE   NAME              STATUS     COMPLETIONS   DURATION   AGE\n\
             default     job.batch/hello   Running    0/3           5m40s      5m40s\n\
             default     job.batch/pi      Complete   3/3           23s        5m\n\
             \n\
             NAMESPACE   NAME                  SCHEDULE      TIMEZONE   SUSPEND   ACTIVE   LAST SCHEDULE   AGE\n\
             default     cronjob.batch/hello   */5 * * * *   <none>     False     1        5m40s           10m\n"
        );
    }
}
