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
        format!("{}---\n{DOOMED}", counting_job("v1")).as_bytes(),
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
