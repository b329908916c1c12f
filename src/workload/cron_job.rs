//! A CronJob on a node with no control plane: its Job's pods (made as [`super::job`] makes a
//! Job's, the Job named after the CronJob) with the CronJob's terms, which podunit-sync runs by
//! (see [`super::cron_controller`]); the schedule becomes a systemd timer (`OnCalendar=`, see
//! [`super::cron`]) that wakes podunit-sync when a run is due and that `systemctl list-timers`
//! shows.
//!
//! The CronJob controller makes a new Job per run (`<cronjob>-<minutes since the epoch>`); here
//! the runs of a CronJob take turns in one Job's pods, named `<cronjob>-<5 chars>` (stable), so
//! each run is that Job run anew and the last run's pods are the history.

use super::cron;
use super::job::{CronTerms, JobTerms, job_pods};
use super::replicas::{FieldProblem, error};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The API server's bound on a CronJob's name: a Job's name is the CronJob's, `-` and 10 digits
/// (`DNS1035LabelMaxLength - 11`).
const MAX_NAME: usize = 52;

/// The CronJob's pods, each with its Job's and the CronJob's terms; none when a problem is an
/// error.
pub fn cron_job_pods(cj: &CronJob) -> (Vec<(Pod, JobTerms)>, Vec<FieldProblem>) {
    let name = cj.metadata.name.clone().unwrap_or_default();
    let Some(spec) = cj.spec.as_ref() else {
        return (Vec::new(), vec![error("spec", "Required value")]);
    };
    let mut problems = Vec::new();
    if name.len() > MAX_NAME {
        problems.push(error(
            "metadata.name",
            format!("Invalid value: {name:?}: must be no more than {MAX_NAME} characters"),
        ));
    }
    if spec.schedule.is_empty() {
        problems.push(error("spec.schedule", "Required value"));
    } else if let Err(e) = cron::calendar_specs(&spec.schedule, spec.time_zone.as_deref()) {
        let path = e.field.path();
        let shown = e.to_string();
        let message = shown.strip_prefix(&format!("{path}: ")).unwrap_or(&shown);
        problems.push(error(path, message));
    }
    let concurrency = spec.concurrency_policy.as_deref().unwrap_or("Allow");
    if !["Allow", "Forbid", "Replace"].contains(&concurrency) {
        problems.push(error(
            "spec.concurrencyPolicy",
            format!(
                "Unsupported value: \"{concurrency}\": supported values: \"Allow\", \"Forbid\", \
                 \"Replace\""
            ),
        ));
    }
    for (v, path) in [
        (
            spec.starting_deadline_seconds,
            "spec.startingDeadlineSeconds",
        ),
        (
            spec.successful_jobs_history_limit.map(i64::from),
            "spec.successfulJobsHistoryLimit",
        ),
        (
            spec.failed_jobs_history_limit.map(i64::from),
            "spec.failedJobsHistoryLimit",
        ),
    ] {
        if let Some(v) = v.filter(|v| *v < 0) {
            problems.push(error(
                path,
                format!("Invalid value: {v}: must be greater than or equal to 0"),
            ));
        }
    }
    let template = &spec.job_template;
    let job = Job {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: cj.metadata.namespace.clone(),
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            annotations: template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.clone()),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    };
    let (pods, found) = job_pods(&job);
    // The Job's problems are the CronJob's, under its job template.
    problems.extend(found.into_iter().map(|p| FieldProblem {
        path: match p.path.strip_prefix("spec") {
            Some(rest) => format!("spec.jobTemplate.spec{rest}"),
            None => p.path,
        },
        ..p
    }));
    if problems.iter().any(|p| !p.warning) {
        return (Vec::new(), problems);
    }
    let terms = CronTerms {
        schedule: spec.schedule.clone(),
        time_zone: spec.time_zone.clone(),
        concurrency_policy: concurrency.to_string(),
        starting_deadline_seconds: spec.starting_deadline_seconds.map(|d| d as u64),
        suspend: spec.suspend == Some(true),
    };
    let pods = pods
        .into_iter()
        .map(|(pod, job)| {
            (
                pod,
                JobTerms {
                    cron: Some(terms.clone()),
                    ..job
                },
            )
        })
        .collect();
    (pods, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELLO: &str = "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: hello}\nspec:\n  schedule: '*/5 * * * *'\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: OnFailure\n          containers: [{name: hello, image: busybox:1.28, command: [date]}]\n";

    fn cron_job(yaml: &str) -> CronJob {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn the_documentations_example_is_one_job_pod_with_the_cron_terms() {
        let (pods, problems) = cron_job_pods(&cron_job(HELLO));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(pods.len(), 1);
        let (pod, terms) = &pods[0];
        assert!(pod.metadata.name.as_deref().unwrap().starts_with("hello-"));
        let cron = terms.cron.as_ref().unwrap();
        assert_eq!(cron.schedule, "*/5 * * * *");
        assert_eq!(cron.concurrency_policy, "Allow");
        assert_eq!(JobTerms::from_line(&terms.to_line()).as_ref(), Some(terms));
    }

    #[test]
    fn the_api_servers_checks_name_the_cron_jobs_fields() {
        let msgs = |y: &str| -> Vec<String> {
            let (pods, problems) = cron_job_pods(&cron_job(y));
            assert!(pods.is_empty());
            problems.iter().map(ToString::to_string).collect()
        };
        assert_eq!(
            msgs(&HELLO.replace("*/5 * * * *", "61 * * * *")),
            [
                "spec.schedule: Invalid value: \"61 * * * *\": end of range (61) above maximum (59): 61"
            ]
        );
        assert_eq!(
            msgs(&HELLO.replace("restartPolicy: OnFailure", "restartPolicy: Always")),
            [
                "spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
            ]
        );
        assert_eq!(
            msgs(&HELLO.replace(
                "spec:\n  schedule",
                "spec:\n  concurrencyPolicy: Sometimes\n  schedule"
            )),
            [
                "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\""
            ]
        );
        let long = "a".repeat(53);
        assert_eq!(
            msgs(&HELLO.replace("name: hello", &format!("name: {long}"))),
            [format!(
                "metadata.name: Invalid value: \"{long}\": must be no more than 52 characters"
            )]
        );
    }
}
