//! Workloads that run to completion on a standalone node, on a real systemd
//! (tests/support/nspawn.rs): Jobs, with podunit-sync as their controller. Needs root and
//! systemd-nspawn; fails (never skips) without them.

mod support;

use std::time::Duration;
use support::nspawn::Machine;
use support::pods::{SOON, ctr_unit, pod_unit, start_sync};
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

/// A StatefulSet of `replicas` pods, OrderedReady, each Ready 3 s after it starts; each pod
/// records its start time in /var/lib/ststest/starts and keeps its identity in its claim.
fn web_set(replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: web}}
spec:
  serviceName: nginx
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      volumes: [{{name: log, hostPath: {{path: /var/lib/ststest, type: DirectoryOrCreate}}}}]
      containers:
      - name: web
        image: host
        readinessProbe: {{exec: {{command: ["true"]}}, initialDelaySeconds: 3, periodSeconds: 1}}
        volumeMounts: [{{name: www, mountPath: /www}}, {{name: log, mountPath: /log}}]
        command:
        - sh
        - -c
        - |
          echo "$(hostname) $(date +%s.%N)" >> /log/starts
          [ -e /www/id ] || hostname > /www/id
          hostname >> /www/boots
          exec sleep infinity
  volumeClaimTemplates:
  - metadata: {{name: www}}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 1Gi}}}}
"#
    )
}

/// The Kubernetes documentation's PersistentVolume walkthrough (PV, claim, pod), the pod
/// copying what it finds on the volume into a file of the test's.
const TASK_PV: &str = r#"apiVersion: v1
kind: PersistentVolume
metadata: {name: task-pv-volume, labels: {type: local}}
spec:
  storageClassName: manual
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /mnt/data}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: task-pv-claim}
spec:
  storageClassName: manual
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 3Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: task-pv-pod}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: task-pv-storage, persistentVolumeClaim: {claimName: task-pv-claim}}]
  containers:
  - name: task-pv-container
    image: host
    command: [sh, -c, "cat /usr/share/nginx/html/index.html > /var/lib/task-pv-seen; exec sleep infinity"]
    volumeMounts: [{mountPath: /usr/share/nginx/html, name: task-pv-storage}]
"#;

/// Volumes bound by what names them: a `local` volume by the claim's selector (its twin for
/// another node binds nothing), one by its `claimRef`, one by the claim's `volumeName`; the pod
/// leaves a file in each.
const BY_NAME_AND_LABEL: &str = r#"apiVersion: v1
kind: PersistentVolume
metadata: {name: near, labels: {disk: near}}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  volumeMode: Filesystem
  local: {path: /mnt/near}
  nodeAffinity:
    required:
      nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]}]
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: far, labels: {disk: near}}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  local: {path: /mnt/far}
  nodeAffinity:
    required:
      nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [elsewhere]}]}]
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: reserved}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  claimRef: {namespace: default, name: by-ref}
  hostPath: {path: /mnt/reserved, type: DirectoryOrCreate}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: named}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /mnt/named, type: DirectoryOrCreate}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: by-label}
spec:
  storageClassName: ""
  volumeMode: Filesystem
  selector: {matchLabels: {disk: near}}
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: by-ref}
spec:
  storageClassName: ""
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: by-name}
spec:
  storageClassName: ""
  volumeName: named
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: binder}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: a, persistentVolumeClaim: {claimName: by-label}}
  - {name: b, persistentVolumeClaim: {claimName: by-ref}}
  - {name: c, persistentVolumeClaim: {claimName: by-name}}
  containers:
  - name: c
    image: host
    command: [sh, -c, "touch /a/x /b/x /c/x; exec sleep infinity"]
    volumeMounts: [{name: a, mountPath: /a}, {name: b, mountPath: /b}, {name: c, mountPath: /c}]
"#;

const DATA_CLAIM: &str = r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"#;

const DATA_POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]
  containers:
  - name: c
    image: host
    command: [sh, -c, "date +%s.%N >> /d/runs; exec sleep infinity"]
    volumeMounts: [{name: d, mountPath: /d}]
"#;

/// (pod, start time) from /var/lib/ststest/starts, in file order.
fn set_starts(m: &Machine) -> Vec<(String, f64)> {
    m.read_string("/var/lib/ststest/starts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (pod, t) = l.split_once(' ')?;
            Some((pod.to_string(), t.parse().ok()?))
        })
        .collect()
}

fn claim_file(m: &Machine, claim: &str, file: &str) -> String {
    m.read_string(&format!("/var/lib/podunit/volumes/default/{claim}/{file}"))
        .unwrap_or_default()
}

/// One machine for StatefulSets and claims: OrderedReady start (each pod after the one before
/// it is Ready), stable hostnames, per-ordinal claims whose data survives a pod's stop and the
/// controller's start of it again, a scale-down and a reboot; the PersistentVolume walkthrough;
/// a claim outliving its pod's document and its own, until `podunit volume rm`.
#[test]
fn stateful_sets_and_claims_keep_their_data() {
    let mut m = Machine::boot("statefulsets");
    // A UTS namespace per pod: a StatefulSet pod's hostname is its name.
    m.write("/etc/podunit/config.yaml", b"network: private\n");
    start_sync(&m);
    m.sh_ok("mkdir -p /mnt/data /mnt/near && echo 'Hello from Kubernetes storage' > /mnt/data/index.html");
    m.write("/etc/pods.d/binding.yaml", BY_NAME_AND_LABEL.as_bytes());
    m.write("/etc/pods.d/web.yaml", web_set(3).as_bytes());
    m.write("/etc/pods.d/task-pv.yaml", TASK_PV.as_bytes());
    m.write(
        "/etc/pods.d/data.yaml",
        format!("{DATA_CLAIM}---\n{DATA_POD}").as_bytes(),
    );
    m.daemon_reload();

    let starts = m.wait_for("the set's three pods, in order", SOON, || {
        let s = set_starts(&m);
        (s.len() >= 3).then_some(s)
    });
    let order: Vec<&str> = starts.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(order, ["web-0", "web-1", "web-2"], "{starts:?}");
    for w in starts.windows(2) {
        assert!(
            w[1].1 >= w[0].1 + 3.0,
            "{} starts once {} is Ready (3 s after its start): {starts:?}",
            w[1].0,
            w[0].0
        );
    }
    for i in 0..3 {
        assert_eq!(
            claim_file(&m, &format!("www-web-{i}"), "id").trim(),
            format!("web-{i}")
        );
    }
    let log = sync_log(&m);
    assert!(
        log.contains("statefulset default/web: starting pod default/web-1 (ordinal 1)"),
        "{log}"
    );
    m.wait_for("the set 3/3 Ready in podunit status", SOON, || {
        let text = m.sh_ok("podunit status --workloads");
        let row = text
            .lines()
            .find(|l| l.contains("statefulset.apps/web"))
            .map(|l| l.split_whitespace().nth(2).map(str::to_string));
        (row == Some(Some("3/3".into()))).then_some(())
    });
    let json: serde_json::Value =
        serde_json::from_str(&m.sh_ok("podunit status --workloads -o json")).unwrap();
    assert!(
        json.as_array()
            .unwrap()
            .iter()
            .any(|w| w["kind"] == "StatefulSet"
                && w["name"] == "web"
                && w["columns"]["READY"] == "3/3"),
        "{json}"
    );
    m.wait_for("the walkthrough's pod to read the volume", SOON, || {
        m.read_string("/var/lib/task-pv-seen")
            .filter(|s| s.contains("Hello from Kubernetes storage"))
    });
    m.wait_for("the writer's first run", SOON, || {
        (claim_file(&m, "data", "runs").lines().count() == 1).then_some(())
    });
    m.wait_for("the binder's files on its three volumes", SOON, || {
        ["/mnt/near/x", "/mnt/reserved/x", "/mnt/named/x"]
            .iter()
            .all(|f| m.read(f).is_some())
            .then_some(())
    });
    let volumes = m.sh_ok("podunit volume ls");
    let bound = |claim: &str| -> Vec<String> {
        support::status::status_row(&volumes, claim)[2..5].to_vec()
    };
    assert_eq!(
        bound("data"),
        ["Bound", "<provisioned>", "1Gi"],
        "{volumes}"
    );
    assert_eq!(bound("task-pv-claim"), ["Bound", "task-pv-volume", "10Gi"]);
    assert_eq!(bound("www-web-0"), ["Bound", "<provisioned>", "1Gi"]);
    assert_eq!(bound("by-label"), ["Bound", "near", "1Gi"]);
    assert_eq!(bound("by-ref"), ["Bound", "reserved", "1Gi"]);
    assert_eq!(bound("by-name"), ["Bound", "named", "1Gi"]);

    // A pod stopped (as a node loses one) is started again by its controller, on its data.
    m.sh_ok(&format!("systemctl stop {}", pod_unit(NS, "web-1")));
    m.wait_for("web-1 back on its claim", SOON, || {
        (claim_file(&m, "www-web-1", "boots").lines().count() == 2).then_some(())
    });
    assert_eq!(claim_file(&m, "www-web-1", "id").trim(), "web-1");

    // Scaled down: web-2 stops, its claim's data stays; the writer's document goes, its
    // claim's stays.
    m.write("/etc/pods.d/web.yaml", web_set(2).as_bytes());
    m.write("/etc/pods.d/data.yaml", DATA_CLAIM.as_bytes());
    m.daemon_reload();
    // Their containers gone too, before the reboot below: the unit of a removed pod has no
    // file left, so a shutdown would give it systemd's default stop timeout.
    for unit in [ctr_unit(NS, "web-2", "web"), ctr_unit(NS, "writer", "c")] {
        support::pods::wait_state(&m, &unit, &["inactive", "failed"]);
    }
    assert_eq!(claim_file(&m, "www-web-2", "id").trim(), "web-2");
    let volumes = m.sh_ok("podunit volume ls");
    assert_eq!(
        support::status::status_row(&volumes, "www-web-2")[2],
        "Released",
        "{volumes}"
    );

    // A reboot: the set comes back in order, each pod on its own data; the writer's claim
    // comes back with its pod.
    m.write(
        "/etc/pods.d/data.yaml",
        format!("{DATA_CLAIM}---\n{DATA_POD}").as_bytes(),
    );
    m.sh_ok("rm /var/lib/ststest/starts");
    m.reboot();
    start_sync(&m);
    let starts = m.wait_for("the set back after the reboot", SOON, || {
        let s = set_starts(&m);
        (s.len() >= 2).then_some(s)
    });
    let order: Vec<&str> = starts.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(order, ["web-0", "web-1"], "{starts:?}");
    assert!(starts[1].1 >= starts[0].1 + 3.0, "{starts:?}");
    for i in 0..2 {
        assert_eq!(
            claim_file(&m, &format!("www-web-{i}"), "id").trim(),
            format!("web-{i}")
        );
    }
    m.wait_for("the writer's second run on the same claim", SOON, || {
        (claim_file(&m, "data", "runs").lines().count() == 2).then_some(())
    });

    // The claim's document gone too: Released, then deleted by hand only.
    m.sh_ok("rm /etc/pods.d/data.yaml");
    m.daemon_reload();
    support::pods::wait_state(&m, &ctr_unit(NS, "writer", "c"), &["inactive", "failed"]);
    let volumes = m.sh_ok("podunit volume ls");
    assert_eq!(
        support::status::status_row(&volumes, "data")[2],
        "Released",
        "{volumes}"
    );
    let refused = m.sh("podunit volume rm default/www-web-0");
    assert!(!refused.status.success(), "a claimed volume is not deleted");
    m.sh_ok("podunit volume rm default/data");
    assert!(
        m.read("/var/lib/podunit/volumes/default/data/runs")
            .is_none()
    );
    assert!(!m.sh_ok("podunit volume ls").contains(" data "));
}
