//! The pods a Job stands for on a node with no control plane, named and labelled as the Job
//! controller names and labels them, and the terms its controller runs them by ([`JobTerms`],
//! carried by each pod's unit to podunit-sync, which is this node's Job controller; see
//! [`super::job_controller`]).
//!
//! One pod per completion: with `completionMode: Indexed` pod `i` is index `i`
//! (`<job>-<i>-<5 chars>`, hostname `<job>-<i>`, `JOB_COMPLETION_INDEX`), otherwise the pods are
//! `<job>-<5 chars>`; a work queue (`parallelism` without `completions`) has `parallelism` pods.
//! A failed attempt is run again in the same pod (the controller makes a new one): the names stay
//! stable, so a pod's state survives reloads and reboots as every workload pod's does.
//!
//! The Job's UID is derived from what the API server does not let change on a Job (its
//! template, `completions`, `completionMode`): a changed template is a new Job, with new pods and
//! a new record, as deleting and creating the Job would be; `parallelism`, `suspend`,
//! `activeDeadlineSeconds` and `backoffLimit` change the running Job.

use super::replicas::{FieldProblem, error, generate_prefix, matches, pod_names, warning};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, ObjectFieldSelector, Pod, PodSpec, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::fmt;

/// The labels the Job controller's selector is made of (`batch/v1`'s `ControllerUidLabel`,
/// `JobNameLabel` and their legacy twins, all four set since Kubernetes 1.27).
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
pub const LEGACY_CONTROLLER_UID: &str = "controller-uid";
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
pub const LEGACY_JOB_NAME: &str = "job-name";
/// An Indexed Job's pod index: annotation and label.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The variable the controller gives every container of an Indexed Job's pod.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// `backoffLimit`'s default (`SetDefaults_Job`).
pub const DEFAULT_BACKOFF_LIMIT: u32 = 6;
/// The API server's bound on an Indexed Job's `completions` and `parallelism`.
const MAX_INDEXED: i32 = 100_000;

/// What the Job controller runs a Job's pods by; one pod's copy names its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobTerms {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// This pod's place among the Job's pods (its completion index when `indexed`).
    pub index: usize,
    /// None: a work queue, done once a pod has succeeded and none runs.
    pub completions: Option<u32>,
    pub parallelism: u32,
    pub backoff_limit: u32,
    pub active_deadline_seconds: Option<u64>,
    pub suspend: bool,
    pub indexed: bool,
    /// `restartPolicy: OnFailure`: containers restart in their pod (systemd's `Restart=`), and
    /// their restarts count against `backoffLimit`; otherwise (`Never`) a failed pod is one failure.
    pub on_failure: bool,
    /// The CronJob whose runs this Job is: its pods run when a schedule is due, not at once.
    pub cron: Option<CronTerms>,
}

/// What the CronJob controller runs a CronJob's Job by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronTerms {
    /// `spec.schedule`, valid (see [`super::cron::parse`]).
    pub schedule: String,
    pub time_zone: Option<String>,
    /// `Allow`, `Forbid` or `Replace`.
    pub concurrency_policy: String,
    pub starting_deadline_seconds: Option<u64>,
    pub suspend: bool,
}

impl JobTerms {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// How many pods the Job has.
    pub fn pods(&self) -> usize {
        self.completions.unwrap_or(self.parallelism) as usize
    }

    /// The terms as one line of `key=value` words (the pod unit's `X-PodunitJob=`): every value
    /// is a DNS name, a UID or a number, so the line needs no quoting.
    pub fn to_line(&self) -> String {
        let mut s = format!(
            "{}/{} uid={} index={} parallelism={} backoffLimit={} completionMode={} restartPolicy={}",
            self.namespace,
            self.name,
            self.uid,
            self.index,
            self.parallelism,
            self.backoff_limit,
            if self.indexed {
                "Indexed"
            } else {
                "NonIndexed"
            },
            if self.on_failure {
                "OnFailure"
            } else {
                "Never"
            },
        );
        if let Some(c) = self.completions {
            s.push_str(&format!(" completions={c}"));
        }
        if let Some(d) = self.active_deadline_seconds {
            s.push_str(&format!(" activeDeadlineSeconds={d}"));
        }
        if self.suspend {
            s.push_str(" suspend=true");
        }
        if let Some(c) = &self.cron {
            // A schedule's fields are separated by spaces, and hold no `_`.
            s.push_str(&format!(
                " schedule={} concurrencyPolicy={}",
                c.schedule.replace(' ', "_"),
                c.concurrency_policy
            ));
            if let Some(z) = &c.time_zone {
                s.push_str(&format!(" timeZone={z}"));
            }
            if let Some(d) = c.starting_deadline_seconds {
                s.push_str(&format!(" startingDeadlineSeconds={d}"));
            }
            if c.suspend {
                s.push_str(" cronSuspend=true");
            }
        }
        s
    }

    /// Reads [`JobTerms::to_line`]'s line back; None for anything else.
    pub fn from_line(line: &str) -> Option<JobTerms> {
        let mut words = line.split_whitespace();
        let (namespace, name) = words.next()?.split_once('/')?;
        let mut t = JobTerms {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: String::new(),
            index: 0,
            completions: None,
            parallelism: 1,
            backoff_limit: DEFAULT_BACKOFF_LIMIT,
            active_deadline_seconds: None,
            suspend: false,
            indexed: false,
            on_failure: false,
            cron: None,
        };
        let mut cron = CronTerms {
            schedule: String::new(),
            time_zone: None,
            concurrency_policy: "Allow".into(),
            starting_deadline_seconds: None,
            suspend: false,
        };
        for w in words {
            let (k, v) = w.split_once('=')?;
            match k {
                "uid" => t.uid = v.to_string(),
                "index" => t.index = v.parse().ok()?,
                "parallelism" => t.parallelism = v.parse().ok()?,
                "backoffLimit" => t.backoff_limit = v.parse().ok()?,
                "completions" => t.completions = Some(v.parse().ok()?),
                "activeDeadlineSeconds" => t.active_deadline_seconds = Some(v.parse().ok()?),
                "suspend" => t.suspend = v == "true",
                "completionMode" => t.indexed = v == "Indexed",
                "restartPolicy" => t.on_failure = v == "OnFailure",
                "schedule" => cron.schedule = v.replace('_', " "),
                "timeZone" => cron.time_zone = Some(v.to_string()),
                "concurrencyPolicy" => cron.concurrency_policy = v.to_string(),
                "startingDeadlineSeconds" => cron.starting_deadline_seconds = Some(v.parse().ok()?),
                "cronSuspend" => cron.suspend = v == "true",
                _ => return None,
            }
        }
        if !cron.schedule.is_empty() {
            t.cron = Some(cron);
        }
        (!t.uid.is_empty()).then_some(t)
    }
}

impl fmt::Display for JobTerms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_line())
    }
}

/// The Job's pods, each with its copy of the terms; none when a problem is an error.
pub fn job_pods(job: &Job) -> (Vec<(Pod, JobTerms)>, Vec<FieldProblem>) {
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let Some(spec) = job.spec.as_ref() else {
        return (Vec::new(), vec![error("spec", "Required value")]);
    };
    let mut problems = Vec::new();
    let non_negative = |v: Option<i64>, path: &str, problems: &mut Vec<FieldProblem>| {
        if let Some(v) = v.filter(|v| *v < 0) {
            problems.push(error(
                path,
                format!("Invalid value: {v}: must be greater than or equal to 0"),
            ));
        }
    };
    non_negative(
        spec.parallelism.map(i64::from),
        "spec.parallelism",
        &mut problems,
    );
    non_negative(
        spec.completions.map(i64::from),
        "spec.completions",
        &mut problems,
    );
    non_negative(
        spec.backoff_limit.map(i64::from),
        "spec.backoffLimit",
        &mut problems,
    );
    non_negative(
        spec.active_deadline_seconds,
        "spec.activeDeadlineSeconds",
        &mut problems,
    );
    non_negative(
        spec.ttl_seconds_after_finished.map(i64::from),
        "spec.ttlSecondsAfterFinished",
        &mut problems,
    );
    let indexed = match spec.completion_mode.as_deref() {
        None | Some("NonIndexed") => false,
        Some("Indexed") => true,
        Some(other) => {
            problems.push(error(
                "spec.completionMode",
                format!(
                    "Unsupported value: \"{other}\": supported values: \"NonIndexed\", \"Indexed\""
                ),
            ));
            false
        }
    };
    if indexed {
        match spec.completions {
            None => problems.push(error(
                "spec.completions",
                "Required value: when completion mode is Indexed",
            )),
            Some(c) if c > MAX_INDEXED => problems.push(error(
                "spec.completions",
                format!(
                    "Invalid value: {c}: must be less than or equal to {MAX_INDEXED} when \
                     completion mode is Indexed"
                ),
            )),
            Some(_) => {}
        }
        if let Some(p) = spec.parallelism.filter(|p| *p > MAX_INDEXED) {
            problems.push(error(
                "spec.parallelism",
                format!(
                    "Invalid value: {p}: must be less than or equal to {MAX_INDEXED} when \
                     completion mode is Indexed"
                ),
            ));
        }
    }
    let restart = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    if restart != "OnFailure" && restart != "Never" {
        problems.push(error(
            "spec.template.spec.restartPolicy",
            format!("Unsupported value: \"{restart}\": supported values: \"OnFailure\", \"Never\""),
        ));
    }
    if spec.template.spec.is_none() {
        problems.push(error("spec.template.spec", "Required value"));
    }
    let manual = spec.manual_selector == Some(true);
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    match (&spec.selector, manual) {
        // The API server generates the selector; one given without `manualSelector` is not it.
        (Some(sel), false) => problems.push(error(
            "spec.selector",
            format!(
                "Invalid value: {}: `selector` not auto-generated",
                serde_json::to_string(sel).unwrap_or_default()
            ),
        )),
        (None, true) => problems.push(error("spec.selector", "Required value")),
        (Some(sel), true) => match matches(sel, &labels) {
            Ok(true) => {}
            Ok(false) => problems.push(error(
                "spec.template.metadata.labels",
                "Invalid value: `selector` does not match template `labels`",
            )),
            Err(e) => problems.push(error("spec.selector", e)),
        },
        (None, false) => {}
    }
    // The job-name label's value is the name: a label value is at most 63 characters.
    if name.len() > 63 {
        problems.push(error(
            "spec.template.labels",
            format!(
                "Invalid value: {name:?}: must be no more than 63 characters (the {JOB_NAME} label)"
            ),
        ));
    }
    if problems.iter().any(|p| !p.warning) {
        return (Vec::new(), problems);
    }
    // What changes a Job's outcome and is not run here: said, so no one is surprised.
    let not_run = [
        (
            spec.pod_failure_policy.is_some(),
            "spec.podFailurePolicy",
            "every failed pod counts against backoffLimit",
        ),
        (
            spec.success_policy.is_some(),
            "spec.successPolicy",
            "the Job is complete when its completions have succeeded",
        ),
        (
            spec.backoff_limit_per_index.is_some(),
            "spec.backoffLimitPerIndex",
            "failures count against backoffLimit, for all indexes together",
        ),
        (
            spec.max_failed_indexes.is_some(),
            "spec.maxFailedIndexes",
            "failures count against backoffLimit, for all indexes together",
        ),
        (
            spec.ttl_seconds_after_finished.is_some(),
            "spec.ttlSecondsAfterFinished",
            "a finished Job's pods stay until its document is removed",
        ),
        (
            spec.managed_by
                .as_deref()
                .is_some_and(|m| m != "kubernetes.io/job-controller"),
            "spec.managedBy",
            "podunit-sync is this Job's controller on a standalone node",
        ),
    ];
    for (set, path, instead) in not_run {
        if set {
            problems.push(warning(path, format!("not run by podunit: {instead}")));
        }
    }

    let (completions, parallelism) = match (spec.completions, spec.parallelism) {
        (None, None) => (Some(1), 1),
        (c, p) => (c.map(|c| c as u32), p.unwrap_or(1) as u32),
    };
    let uid = job_uid(&namespace, &name, &spec.template, completions, indexed);
    let terms = JobTerms {
        namespace: namespace.clone(),
        name: name.clone(),
        uid: uid.clone(),
        index: 0,
        completions,
        parallelism,
        backoff_limit: spec
            .backoff_limit
            .map_or(DEFAULT_BACKOFF_LIMIT, |b| b as u32),
        active_deadline_seconds: spec.active_deadline_seconds.map(|d| d as u64),
        suspend: spec.suspend == Some(true),
        indexed,
        on_failure: restart == "OnFailure",
        cron: None,
    };
    let mut meta = spec.template.metadata.clone().unwrap_or_default();
    let l = meta.labels.get_or_insert_with(Default::default);
    for (k, v) in [
        (CONTROLLER_UID, &uid),
        (LEGACY_CONTROLLER_UID, &uid),
        (JOB_NAME, &name),
        (LEGACY_JOB_NAME, &name),
    ] {
        l.insert(k.into(), v.clone());
    }
    let owner = OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: name.clone(),
        uid: uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let names: Vec<(String, String)> = if indexed {
        (0..terms.pods())
            .map(|i| {
                let prefix = generate_prefix(&format!("{name}-{i}"));
                let n = pod_names(&format!("{name}/{uid}/{i}"), &prefix, 1).remove(0);
                (n, prefix)
            })
            .collect()
    } else {
        let prefix = generate_prefix(&name);
        pod_names(&format!("{name}/{uid}"), &prefix, terms.pods())
            .into_iter()
            .map(|n| (n, prefix.clone()))
            .collect()
    };
    let pods = names
        .into_iter()
        .enumerate()
        .map(|(i, (pod_name, prefix))| {
            let mut meta = ObjectMeta {
                name: Some(pod_name),
                generate_name: Some(prefix),
                namespace: Some(namespace.clone()),
                owner_references: Some(vec![owner.clone()]),
                ..meta.clone()
            };
            let mut pod_spec = spec.template.spec.clone().unwrap_or_default();
            if indexed {
                index_pod(&mut meta, &mut pod_spec, &name, i);
            }
            let pod = Pod {
                metadata: meta,
                spec: Some(pod_spec),
                status: None,
            };
            (
                pod,
                JobTerms {
                    index: i,
                    ..terms.clone()
                },
            )
        })
        .collect();
    (pods, problems)
}

/// What the controller adds to an Indexed Job's pod `i`: the index as annotation, label and
/// `JOB_COMPLETION_INDEX` (from the annotation, in every container that does not set it), and
/// the hostname `<job>-<i>`.
fn index_pod(meta: &mut ObjectMeta, spec: &mut PodSpec, job: &str, i: usize) {
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(COMPLETION_INDEX.into(), i.to_string());
    meta.labels
        .get_or_insert_with(Default::default)
        .insert(COMPLETION_INDEX.into(), i.to_string());
    if spec.hostname.is_none() {
        spec.hostname = Some(format!("{job}-{i}"));
    }
    let var = EnvVar {
        name: COMPLETION_INDEX_ENV.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
            }),
            ..Default::default()
        }),
    };
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for c in containers {
        let env = c.env.get_or_insert_with(Vec::new);
        if !env.iter().any(|e| e.name == COMPLETION_INDEX_ENV) {
            env.push(var.clone());
        }
    }
}

/// A UID for the Job from its namespace, name and the fields the API server keeps immutable.
fn job_uid(
    namespace: &str,
    name: &str,
    template: &PodTemplateSpec,
    completions: Option<u32>,
    indexed: bool,
) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(format!("batch/v1/Job/{namespace}/{name}\0{completions:?}\0{indexed}\0").as_bytes());
    h.update(serde_json::to_vec(template).unwrap_or_default());
    crate::common::text::uid_from_digest(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(yaml: &str) -> Job {
        serde_saphyr::from_str(yaml).unwrap()
    }

    const PI: &str = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: pi}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: pi, image: perl}]\n";

    #[test]
    fn one_pod_by_default_labelled_and_owned_as_the_controller_does() {
        let (pods, problems) = job_pods(&job(PI));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(pods.len(), 1);
        let (pod, terms) = &pods[0];
        let name = pod.metadata.name.as_deref().unwrap();
        assert!(name.starts_with("pi-") && name.len() == 8, "{name}");
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[JOB_NAME], "pi");
        assert_eq!(labels[LEGACY_JOB_NAME], "pi");
        assert_eq!(labels[CONTROLLER_UID], terms.uid);
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Job", terms.uid.as_str())
        );
        assert_eq!(terms.completions, Some(1));
        assert_eq!(terms.parallelism, 1);
        assert_eq!(terms.backoff_limit, 6);
        assert_eq!(JobTerms::from_line(&terms.to_line()).as_ref(), Some(terms));
    }

    #[test]
    fn a_changed_template_is_a_new_job_and_parallelism_is_not() {
        let uid = |y: &str| job_pods(&job(y)).0[0].1.uid.clone();
        let base = uid(PI);
        assert_eq!(base, uid(PI), "stable");
        assert_ne!(base, uid(&PI.replace("image: perl", "image: perl:5")));
        let parallel = PI.replace("spec:\n  template", "spec:\n  parallelism: 3\n  template");
        assert_eq!(
            base,
            uid(&parallel.replace("parallelism: 3", "completions: 1\n  parallelism: 3"))
        );
    }

    #[test]
    fn indexed_pods_carry_their_index_and_hostname() {
        let y = PI.replace(
            "spec:\n  template",
            "spec:\n  completions: 3\n  parallelism: 2\n  completionMode: Indexed\n  template",
        );
        let (pods, problems) = job_pods(&job(&y));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(pods.len(), 3);
        for (i, (pod, terms)) in pods.iter().enumerate() {
            assert_eq!(terms.index, i);
            assert!(terms.indexed);
            let name = pod.metadata.name.as_deref().unwrap();
            assert!(name.starts_with(&format!("pi-{i}-")), "{name}");
            assert_eq!(
                pod.metadata.annotations.as_ref().unwrap()[COMPLETION_INDEX],
                i.to_string()
            );
            let spec = pod.spec.as_ref().unwrap();
            assert_eq!(spec.hostname.as_deref(), Some(format!("pi-{i}").as_str()));
            let env = spec.containers[0].env.as_ref().unwrap();
            assert_eq!(env[0].name, COMPLETION_INDEX_ENV);
        }
    }

    #[test]
    fn a_work_queue_has_parallelism_pods() {
        let y = PI.replace("spec:\n  template", "spec:\n  parallelism: 3\n  template");
        let (pods, _) = job_pods(&job(&y));
        assert_eq!(pods.len(), 3);
        assert_eq!(pods[0].1.completions, None);
    }

    #[test]
    fn the_api_servers_checks() {
        let msgs = |y: &str| -> Vec<String> {
            let (pods, problems) = job_pods(&job(y));
            assert!(pods.is_empty());
            problems.iter().map(ToString::to_string).collect()
        };
        assert_eq!(
            msgs(&PI.replace("restartPolicy: Never\n", "")),
            [
                "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
            ]
        );
        assert_eq!(
            msgs(&PI.replace(
                "spec:\n  template",
                "spec:\n  completionMode: Indexed\n  template"
            )),
            ["spec.completions: Required value: when completion mode is Indexed"]
        );
        assert_eq!(
            msgs(&PI.replace("spec:\n  template", "spec:\n  backoffLimit: -1\n  template")),
            ["spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0"]
        );
        assert_eq!(
            msgs(&PI.replace(
                "spec:\n  template",
                "spec:\n  selector: {matchLabels: {a: b}}\n  template"
            )),
            [
                "spec.selector: Invalid value: {\"matchLabels\":{\"a\":\"b\"}}: `selector` not auto-generated"
            ]
        );
    }
}
