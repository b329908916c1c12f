//! Workloads that run to completion on a standalone node, on a real systemd
//! (tests/support/nspawn.rs): Jobs, with podunit-sync as their controller. Needs root and
//! systemd-nspawn; fails (never skips) without them.

mod support;

use std::time::Duration;
use support::nspawn::Machine;
use support::pods::{SOON, pod_unit, start_sync};
use support::status::pods_named;

const NS: &str = "default";

/// Long enough for a pod's failure, the controller's first back-off (10 s) and the retry.
const JOB_TIME: Duration = Duration::from_secs(120);

/// An Indexed Job of 3 completions, 2 at a time, whose index 1 fails its first attempt; each
/// pod records its index, its hostname and how many of them ran at once in /var/lib/jobtest.
/// `version` changes the template.
fn counting_job(version: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata: {{name: count}}
spec:
  completions: 3
  parallelism: 2
  backoffLimit: 2
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      volumes: [{{name: data, hostPath: {{path: /var/lib/jobtest, type: DirectoryOrCreate}}}}]
      containers:
      - name: work
        image: host
        env: [{{name: VERSION, value: "{version}"}}]
        volumeMounts: [{{name: data, mountPath: /data}}]
        command:
        - sh
        - -c
        - |
          i=$JOB_COMPLETION_INDEX
          if [ "$i" = 1 ] && [ ! -e /data/failed-once-$VERSION ]; then
            touch /data/failed-once-$VERSION; exit 3
          fi
          mkdir /data/running.$i
          ls -d /data/running.* | wc -l >> /data/concurrency
          sleep 2
          rmdir /data/running.$i
          echo "$VERSION $i $(hostname)" >> /data/done
"#
    )
}

/// A Job whose only pod fails, with no retry allowed.
const DOOMED: &str = r#"apiVersion: batch/v1
kind: Job
metadata: {name: doomed}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: fail, image: host, command: [sh, -c, "echo trying >> /var/lib/doomed-tries; exit 1"]}]
"#;

/// A Job that runs past its deadline, and a suspended one with a selector of its own.
const DEADLINE_AND_HELD: &str = r#"apiVersion: batch/v1
kind: Job
metadata: {name: deadline}
spec:
  activeDeadlineSeconds: 5
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      containers: [{name: slow, image: host, command: [sleep, "300"]}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: held}
spec:
  suspend: true
  manualSelector: true
  selector: {matchLabels: {app: held}}
  template:
    metadata: {labels: {app: held}}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: host, command: [touch, /var/lib/held-ran]}]
"#;

fn sync_log(m: &Machine) -> String {
    m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service")
}

fn done_lines(m: &Machine) -> Vec<String> {
    let mut v: Vec<String> = m
        .read_string("/var/lib/jobtest/done")
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// One machine for the Job checks: completions, parallelism, a failed attempt retried after
/// the back-off, the backoff limit, the Indexed pods' index and hostname, `podunit status`, a
/// reboot that runs nothing again, and a changed template that is a new Job.
#[test]
fn jobs_run_to_completion_once() {
    let mut m = Machine::boot("jobs");
    // A network namespace per pod, so an Indexed pod's hostname is its own (`<job>-<index>`).
    m.write("/etc/podunit/config.yaml", b"network: private\n");
    start_sync(&m);
    m.write(
        "/etc/pods.d/jobs.yaml",
        format!(
            "{}---\n{DOOMED}---\n{DEADLINE_AND_HELD}",
            counting_job("v1")
        )
        .as_bytes(),
    );
    m.daemon_reload();

    let want = |v: &str| -> Vec<String> { (0..3).map(|i| format!("{v} {i} count-{i}")).collect() };
    m.wait_for("the Indexed Job's three completions", JOB_TIME, || {
        (done_lines(&m) == want("v1")).then_some(())
    });
    m.wait_for("the controller to call the Job complete", SOON, || {
        sync_log(&m)
            .contains("job default/count: complete")
            .then_some(())
    });
    let log = sync_log(&m);
    assert!(
        log.contains("job default/count: pod 1 failed (1 failures)"),
        "{log}"
    );
    assert!(
        log.contains(
            "job default/doomed: failed: BackoffLimitExceeded: Job has reached the specified \
             backoff limit"
        ),
        "{log}"
    );
    m.wait_for("the deadline to fail its Job", SOON, || {
        sync_log(&m)
            .contains(
                "job default/deadline: failed: DeadlineExceeded: Job was active longer than \
                 specified deadline",
            )
            .then_some(())
    });
    let slow = pods_named(&m, "deadline-").pop().unwrap();
    support::pods::wait_state(&m, &pod_unit(NS, &slow), &["inactive", "failed"]);
    assert!(
        m.read("/var/lib/held-ran").is_none(),
        "a suspended Job runs nothing"
    );
    let status = m.sh_ok("podunit status");
    for line in [
        "job.batch/count      Complete",
        "job.batch/doomed     Failed",
        "job.batch/held       Suspended",
    ] {
        assert!(status.contains(line), "{line:?} in:\n{status}");
    }
    assert!(status.contains("3/3"), "{status}");
    let concurrency = m.read_string("/var/lib/jobtest/concurrency").unwrap();
    let most = concurrency
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .max();
    assert!(most.is_some_and(|n| n <= 2), "parallelism 2: {concurrency}");
    assert_eq!(
        m.read_string("/var/lib/doomed-tries")
            .unwrap()
            .lines()
            .count(),
        1,
        "backoffLimit 0: no second attempt"
    );
    let pods = pods_named(&m, "count-");
    assert_eq!(pods.len(), 3, "{pods:?}");
    for (i, p) in pods.iter().enumerate() {
        assert!(p.starts_with(&format!("count-{i}-")), "{pods:?}");
    }

    // A reboot: the record says both Jobs are finished, so nothing runs again.
    m.reboot();
    start_sync(&m);
    for p in pods_named(&m, "count-")
        .iter()
        .chain(&pods_named(&m, "doomed-"))
    {
        let unit = pod_unit(NS, p);
        assert_eq!(m.prop(&unit, "ActiveState"), "inactive", "{unit}");
        let job = m.prop(&unit, "Job");
        assert!(
            matches!(job.as_str(), "" | "0"),
            "{unit}: a start queued: {job}"
        );
    }
    assert_eq!(done_lines(&m), want("v1"));
    assert_eq!(
        m.read_string("/var/lib/doomed-tries")
            .unwrap()
            .lines()
            .count(),
        1
    );

    // A changed template is a new Job: new pods, run again.
    m.write(
        "/etc/pods.d/jobs.yaml",
        format!("{}---\n{DOOMED}", counting_job("v2")).as_bytes(),
    );
    m.daemon_reload();
    m.wait_for("the new Job's completions", JOB_TIME, || {
        done_lines(&m)
            .iter()
            .filter(|l| l.starts_with("v2 "))
            .count()
            .eq(&3)
            .then_some(())
    });
    let new_pods = pods_named(&m, "count-");
    assert_eq!(new_pods.len(), 3);
    assert!(
        new_pods.iter().all(|p| !pods.contains(p)),
        "{pods:?} {new_pods:?}"
    );
}

/// A CronJob as Kubernetes' documentation writes one, running every minute for 65 s.
fn every_minute(name: &str, policy: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: CronJob
metadata: {{name: {name}}}
spec:
  schedule: "* * * * *"
  concurrencyPolicy: {policy}
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          terminationGracePeriodSeconds: 1
          containers:
          - name: tick
            image: host
            command: [sh, -c, "date +%s >> /var/lib/{name}-runs; sleep 65"]
"#
    )
}

/// A CronJob due once a day at `minute hour` UTC, recording its runs in /var/lib/<name>-runs.
fn daily(name: &str, minute: u64, hour: u64, deadline: Option<u64>) -> String {
    let deadline = deadline.map_or(String::new(), |d| {
        format!("\n  startingDeadlineSeconds: {d}")
    });
    format!(
        r#"apiVersion: batch/v1
kind: CronJob
metadata: {{name: {name}}}
spec:
  schedule: "{minute} {hour} * * *"
  timeZone: Etc/UTC{deadline}
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{{name: once, image: host, command: [sh, -c, "date +%s >> /var/lib/{name}-runs"]}}]
"#
    )
}

fn runs(m: &Machine, name: &str) -> Vec<u64> {
    m.read_string(&format!("/var/lib/{name}-runs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// One machine for the CronJob checks: the timer in `systemctl list-timers`, a run every
/// minute, Forbid holding the next run while one goes and starting it once that one ends, the
/// timer stopped with its CronJob, and after a downtime the missed run caught up at boot, or
/// missed past `startingDeadlineSeconds`.
#[test]
fn cron_jobs_run_on_their_schedule() {
    let mut m = Machine::boot("cronjobs");
    start_sync(&m);
    let suspended = every_minute("paused", "Allow")
        .replace("spec:\n  schedule", "spec:\n  suspend: true\n  schedule");
    m.write(
        "/etc/pods.d/tick.yaml",
        format!("{}---\n{suspended}", every_minute("tick", "Forbid")).as_bytes(),
    );
    m.daemon_reload();
    m.wait_for("the timer in list-timers", SOON, || {
        m.sh_ok("systemctl list-timers --no-pager")
            .contains("podunit-default_tick.timer")
            .then_some(())
    });
    let wait_runs = |n: usize| {
        m.wait_for(
            &format!("{n} runs of tick"),
            Duration::from_secs(150),
            || {
                let r = runs(&m, "tick");
                (r.len() >= n).then_some(r)
            },
        )
    };
    let first = wait_runs(1);
    m.wait_for(
        "Forbid to hold the next run",
        Duration::from_secs(90),
        || {
            sync_log(&m)
                .contains(
                    "cronjob default/tick: JobAlreadyActive: Not starting job because prior \
                 execution is running and concurrency policy is Forbid",
                )
                .then_some(())
        },
    );
    let second = wait_runs(2);
    assert!(
        second[1] >= first[0] + 65,
        "the held run starts once the going one has ended: {second:?}"
    );
    assert!(
        runs(&m, "paused").is_empty(),
        "a suspended CronJob runs nothing"
    );
    let status = m.sh_ok("podunit status");
    assert!(
        status.contains("cronjob.batch/tick     * * * * *   <none>     False     1"),
        "{status}"
    );

    // Its CronJob gone, the timer stops.
    m.sh_ok("rm /etc/pods.d/tick.yaml");
    m.daemon_reload();
    m.wait_for("the timer to stop", SOON, || {
        (!m.sh_ok("systemctl list-timers --all --no-pager")
            .contains("podunit-default_tick.timer"))
        .then_some(())
    });

    // A downtime: two CronJobs that were due 3 minutes ago, and known to the node for 10.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let due = now - 180;
    let (minute, hour) = ((due / 60) % 60, (due / 3600) % 24);
    m.power_cut_and(|root| {
        let pods = root.join("etc/pods.d");
        let both = format!(
            "{}---\n{}",
            daily("catchup", minute, hour, None),
            daily("strict", minute, hour, Some(60))
        );
        std::fs::write(pods.join("daily.yaml"), both).unwrap();
        // What podunit-sync would have recorded had it seen them 10 minutes ago.
        let file = root.join("var/lib/podunit/sync-state.json");
        let mut state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let seen = serde_json::json!({"firstSeen": now - 600});
        state["cronJobs"] = serde_json::json!({"default/catchup": seen, "default/strict": seen});
        std::fs::write(&file, serde_json::to_vec(&state).unwrap()).unwrap();
    });
    start_sync(&m);
    let caught = m.wait_for("the missed run to be caught up", SOON, || {
        let r = runs(&m, "catchup");
        (!r.is_empty()).then_some(r)
    });
    assert_eq!(caught.len(), 1, "one run catches up a downtime: {caught:?}");
    let log = sync_log(&m);
    assert!(
        log.contains("cronjob default/strict: MissSchedule: Missed scheduled time to start a job:"),
        "{log}"
    );
    assert!(runs(&m, "strict").is_empty());
    let timers = m.sh_ok("systemctl list-timers --no-pager");
    assert!(timers.contains("podunit-default_catchup.timer"), "{timers}");
}
