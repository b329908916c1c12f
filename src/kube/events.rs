//! Events as the kubelet posts them (core/v1 `Event`, source `kubelet` + node), through a
//! correlator that does what client-go's `EventCorrelator` does for every kubelet:
//!
//! - **dedup** (`eventLogger`): the same event again (same object, type, reason, message) patches
//!   the one already posted: `count` + 1, a new `lastTimestamp`, the same name;
//! - **aggregation** (`EventAggregator`): more than 10 events within 10 minutes that differ only in
//!   their message become one event "(combined from similar events): <latest message>";
//! - **spam filter** (`EventSourceObjectSpamFilter`): a token bucket per object (burst 25, one
//!   token back every 5 minutes); an event without a token is dropped.
//!
//! Pure (the time is passed in); the agent posts what [`Correlator::correlate`] returns.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;

/// client-go's defaults (`defaultAggregateMaxEvents`, `defaultAggregateIntervalInSeconds`,
/// `defaultSpamBurst`, `defaultSpamQPS` = 1/300).
const AGGREGATE_MAX_EVENTS: usize = 10;
const AGGREGATE_INTERVAL_S: i64 = 600;
const SPAM_BURST: f64 = 25.0;
const SPAM_QPS: f64 = 1.0 / 300.0;
/// How many keys each cache holds (client-go's LRU size is 4096).
const CACHE: usize = 4096;

/// What an event is about: a pod, or one of its containers (`fieldPath`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Involved {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.containers{web}`, `spec.initContainers{init}`, or empty for the pod.
    pub field_path: String,
}

impl Involved {
    /// The kubelet's `fieldPath` for a container of `pod` (`spec.containers{name}`).
    pub fn container(pod: &core::Pod, container: &str) -> Involved {
        let spec = pod.spec.as_ref();
        let init = spec
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|l| l.iter().any(|c| c.name == container));
        let list = if init { "initContainers" } else { "containers" };
        Involved {
            field_path: format!("spec.{list}{{{container}}}"),
            ..Involved::pod(pod)
        }
    }

    pub fn pod(pod: &core::Pod) -> Involved {
        Involved {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            field_path: String::new(),
        }
    }
}

/// What to send.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// POST this new event.
    Create(Box<core::Event>),
    /// PATCH (merge) the event of this name: its new count, message and lastTimestamp.
    Patch {
        namespace: String,
        name: String,
        patch: serde_json::Value,
    },
}

#[derive(Debug, Clone)]
struct Seen {
    name: String,
    count: i32,
    first: Timestamp,
}

#[derive(Debug, Clone)]
struct Aggregate {
    messages: Vec<String>,
    since: Timestamp,
}

#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    at: Timestamp,
}

/// Remembers what was posted, per node agent.
#[derive(Debug, Default)]
pub struct Correlator {
    node: String,
    seen: HashMap<String, Seen>,
    aggregates: HashMap<String, Aggregate>,
    buckets: HashMap<String, Bucket>,
}

fn trim<V>(m: &mut HashMap<String, V>) {
    // Coarser than an LRU: when full, start over (the worst case is a few duplicate events).
    if m.len() >= CACHE {
        m.clear();
    }
}

impl Correlator {
    pub fn new(node: &str) -> Self {
        Correlator {
            node: node.to_string(),
            ..Default::default()
        }
    }

    /// The action for an event of `type_` (`Normal`, `Warning`) and `reason` about `obj`, at
    /// `now`; None when the spam filter drops it.
    pub fn correlate(
        &mut self,
        obj: &Involved,
        type_: &str,
        reason: &str,
        message: &str,
        now: Timestamp,
    ) -> Option<Action> {
        let object_key = format!(
            "{}/{}/{}/{}",
            obj.namespace, obj.name, obj.uid, obj.field_path
        );
        // Spam filter first, as client-go's `filterFunc` runs before aggregation.
        let source_key = format!(
            "kubelet/{}/{}/{}/{}",
            self.node, obj.namespace, obj.name, obj.uid
        );
        trim(&mut self.buckets);
        let b = self.buckets.entry(source_key).or_insert(Bucket {
            tokens: SPAM_BURST,
            at: now,
        });
        let elapsed = (now.as_millisecond() - b.at.as_millisecond()).max(0) as f64 / 1000.0;
        b.tokens = (b.tokens + elapsed * SPAM_QPS).min(SPAM_BURST);
        b.at = now;
        if b.tokens < 1.0 {
            return None;
        }
        b.tokens -= 1.0;

        // Aggregation: same object, type and reason, any message.
        let agg_key = format!("{object_key}/{type_}/{reason}");
        trim(&mut self.aggregates);
        let a = self.aggregates.entry(agg_key).or_insert(Aggregate {
            messages: Vec::new(),
            since: now,
        });
        if now.as_second() - a.since.as_second() > AGGREGATE_INTERVAL_S {
            *a = Aggregate {
                messages: Vec::new(),
                since: now,
            };
        }
        if !a.messages.iter().any(|m| m == message) {
            a.messages.push(message.to_string());
        }
        let (message, key_message) = if a.messages.len() >= AGGREGATE_MAX_EVENTS {
            // client-go keys the combined event by the aggregate key: one event, counted up.
            (
                format!("(combined from similar events): {message}"),
                String::new(),
            )
        } else {
            (message.to_string(), message.to_string())
        };

        // Dedup: the very same event again patches the one posted.
        let key = format!("{object_key}/{type_}/{reason}/{key_message}");
        trim(&mut self.seen);
        let t = Time(now);
        if let Some(s) = self.seen.get_mut(&key) {
            s.count += 1;
            return Some(Action::Patch {
                namespace: obj.namespace.clone(),
                name: s.name.clone(),
                patch: serde_json::json!({
                    "count": s.count,
                    "message": message,
                    "lastTimestamp": t,
                    "firstTimestamp": Time(s.first),
                }),
            });
        }
        let name = format!("{}.{:x}", obj.name, now.as_nanosecond() as u64);
        self.seen.insert(
            key,
            Seen {
                name: name.clone(),
                count: 1,
                first: now,
            },
        );
        Some(Action::Create(Box::new(
            self.event(obj, &name, type_, reason, &message, t),
        )))
    }

    fn event(
        &self,
        obj: &Involved,
        name: &str,
        type_: &str,
        reason: &str,
        message: &str,
        t: Time,
    ) -> core::Event {
        core::Event {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(obj.namespace.clone()),
                ..Default::default()
            },
            involved_object: core::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(obj.name.clone()),
                namespace: Some(obj.namespace.clone()),
                uid: (!obj.uid.is_empty()).then(|| obj.uid.clone()),
                field_path: (!obj.field_path.is_empty()).then(|| obj.field_path.clone()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(type_.into()),
            count: Some(1),
            first_timestamp: Some(t.clone()),
            last_timestamp: Some(t),
            source: Some(core::EventSource {
                component: Some("kubelet".into()),
                host: Some(self.node.clone()),
            }),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(self.node.clone()),
            ..Default::default()
        }
    }
}

/// The kubelet's messages (`pkg/kubelet/events` reasons, `kuberuntime` wording).
pub mod message {
    pub fn created(container: &str) -> String {
        format!("Created container {container}")
    }
    pub fn started(container: &str) -> String {
        format!("Started container {container}")
    }
    pub fn killing(container: &str) -> String {
        format!("Stopping container {container}")
    }
    /// `Back-off restarting failed container web in pod web_default(uid)`.
    pub fn back_off(container: &str, pod: &str, namespace: &str, uid: &str) -> String {
        format!("Back-off restarting failed container {container} in pod {pod}_{namespace}({uid})")
    }
    pub fn pulling(image: &str) -> String {
        format!("Pulling image {image:?}")
    }
    /// `Successfully pulled image "x" in 1.234567891s`: the text of the kubelet release the
    /// tests' API server is (v1.20; later ones add the waiting time and the size), with Go's
    /// duration format.
    pub fn pulled(image: &str, took: std::time::Duration) -> String {
        format!(
            "Successfully pulled image {image:?} in {}",
            go_duration(took)
        )
    }
    pub fn failed_to_pull(image: &str, error: &str) -> String {
        format!("Failed to pull image {image:?}: {error}")
    }
    pub fn back_off_pulling(image: &str) -> String {
        format!("Back-off pulling image {image:?}")
    }
    pub fn never_pull(image: &str) -> String {
        format!("Container image {image:?} is not present with pull policy of Never")
    }
    /// The kuberuntime's `Failed` Event for a container it could not start: `Error: ErrImagePull`.
    pub fn error(reason: &str) -> String {
        format!("Error: {reason}")
    }

    /// Go's `time.Duration` text: `1.5s`, `2m3.25s`, `812.5ms`, `40µs`.
    pub fn go_duration(d: std::time::Duration) -> String {
        let ns = d.as_nanos();
        let frac = |v: u128, unit: u128, suffix: &str| {
            let (whole, rest) = (v / unit, v % unit);
            let width = unit.ilog10() as usize;
            let rest = format!("{rest:0width$}");
            let rest = rest.trim_end_matches('0');
            if rest.is_empty() {
                format!("{whole}{suffix}")
            } else {
                format!("{whole}.{rest}{suffix}")
            }
        };
        match ns {
            0 => "0s".into(),
            n if n < 1_000 => format!("{n}ns"),
            n if n < 1_000_000 => frac(n, 1_000, "µs"),
            n if n < 1_000_000_000 => frac(n, 1_000_000, "ms"),
            n => {
                let secs = frac(n % 60_000_000_000, 1_000_000_000, "s");
                let mins = n / 60_000_000_000;
                match (mins / 60, mins % 60) {
                    (0, 0) => secs,
                    (0, m) => format!("{m}m{secs}"),
                    (h, m) => format!("{h}h{m}m{secs}"),
                }
            }
        }
    }
    pub fn already_present(image: &str) -> String {
        format!("Container image {image:?} already present on machine")
    }
    /// `Exec lifecycle hook ([cmd]) for Container "c" in Pod "p_ns(uid)" failed - error: ...,
    /// message: "..."` (`pkg/kubelet/lifecycle`), for FailedPreStopHook. `pod`: [`pod_ref`].
    pub fn failed_exec_hook(
        command: &[String],
        container: &str,
        pod: &str,
        error: &str,
        output: &str,
    ) -> String {
        format!(
            "Exec lifecycle hook ([{}]) for Container {container:?} in Pod {pod:?} failed - error: {error}, message: {output:?}",
            command.join(" "),
        )
    }
    /// A pod as the kubelet names it in messages (`format.Pod`): `name_namespace(uid)`.
    pub fn pod_ref(pod: &str, namespace: &str, uid: &str) -> String {
        format!("{pod}_{namespace}({uid})")
    }
}

/// A container event the kubelet would have recorded: (container, type, reason, message).
pub type ContainerEvent = (String, &'static str, &'static str, String);

fn run_start(cs: &core::ContainerStatus) -> Option<Time> {
    let s = cs.state.as_ref()?;
    s.running
        .as_ref()
        .and_then(|r| r.started_at.clone())
        .or_else(|| s.terminated.as_ref().and_then(|t| t.started_at.clone()))
}

/// The last run of a container, if systemd could not start it (`StartError`): when it ended
/// and why.
fn start_error(cs: &core::ContainerStatus) -> Option<(Option<Time>, String)> {
    let t = cs
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| cs.last_state.as_ref().and_then(|l| l.terminated.as_ref()))?;
    (t.reason.as_deref() == Some(crate::status::start_error::REASON))
        .then(|| (t.finished_at.clone(), t.message.clone().unwrap_or_default()))
}

/// The container events between the status last posted and the next one: `Created` and
/// `Started` for each run not seen before, `Failed` for a run systemd could not start,
/// `BackOff` when a container starts waiting in CrashLoopBackOff.
pub fn lifecycle(
    pod: &core::Pod,
    prev: Option<&core::PodStatus>,
    next: &core::PodStatus,
) -> Vec<ContainerEvent> {
    let all = |st: &core::PodStatus| -> Vec<core::ContainerStatus> {
        st.init_container_statuses
            .iter()
            .flatten()
            .chain(st.container_statuses.iter().flatten())
            .cloned()
            .collect()
    };
    let before = prev.map(all).unwrap_or_default();
    let mut out = Vec::new();
    for cs in all(next) {
        let old = before.iter().find(|o| o.name == cs.name);
        let seen = |t: &Time| {
            old.is_some_and(|o| {
                run_start(o).as_ref() == Some(t)
                    || o.last_state
                        .as_ref()
                        .and_then(|l| l.terminated.as_ref())
                        .and_then(|t| t.started_at.as_ref())
                        == Some(t)
            })
        };
        if let Some(t) = run_start(&cs)
            && !seen(&t)
        {
            out.push((
                cs.name.clone(),
                "Normal",
                "Created",
                message::created(&cs.name),
            ));
            out.push((
                cs.name.clone(),
                "Normal",
                "Started",
                message::started(&cs.name),
            ));
        }
        // A run systemd could not start: the kubelet's `Failed` ("Error: " and the runtime's
        // message) where a run that started has `Started`, once per run.
        if let Some((at, msg)) = start_error(&cs)
            && old.and_then(start_error).map(|(a, _)| a) != Some(at)
        {
            out.push((
                cs.name.clone(),
                "Warning",
                "Failed",
                format!("Error: {msg}"),
            ));
        }
        let waiting = |c: &core::ContainerStatus| {
            c.state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.clone())
        };
        let backoff = Some("CrashLoopBackOff".to_string());
        if waiting(&cs) == backoff
            && (old.map(waiting) != Some(backoff.clone())
                || old.is_some_and(|o| o.restart_count != cs.restart_count))
        {
            let m = &pod.metadata;
            out.push((
                cs.name.clone(),
                "Warning",
                "BackOff",
                message::back_off(
                    &cs.name,
                    m.name.as_deref().unwrap_or(""),
                    m.namespace.as_deref().unwrap_or("default"),
                    m.uid.as_deref().unwrap_or(""),
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj() -> Involved {
        Involved {
            namespace: "default".into(),
            name: "web".into(),
            uid: "u1".into(),
            field_path: "spec.containers{nginx}".into(),
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    #[test]
    fn same_event_again_is_counted_on_the_first() {
        let mut c = Correlator::new("edge-1");
        let Some(Action::Create(ev)) = c.correlate(&obj(), "Warning", "Unhealthy", "m", at(0))
        else {
            panic!()
        };
        assert_eq!(ev.source.as_ref().unwrap().host.as_deref(), Some("edge-1"));
        assert_eq!(
            ev.involved_object.field_path.as_deref(),
            Some("spec.containers{nginx}")
        );
        let name = ev.metadata.name.clone().unwrap();
        match c.correlate(&obj(), "Warning", "Unhealthy", "m", at(10)) {
            Some(Action::Patch { name: n, patch, .. }) => {
                assert_eq!(n, name);
                assert_eq!(patch["count"], 2);
            }
            a => panic!("{a:?}"),
        }
        assert!(matches!(
            c.correlate(&obj(), "Warning", "Unhealthy", "other", at(11)),
            Some(Action::Create(_))
        ));
    }

    #[test]
    fn many_messages_are_combined() {
        let mut c = Correlator::new("n");
        let mut last = None;
        for i in 0..12 {
            last = c.correlate(&obj(), "Warning", "Unhealthy", &format!("m{i}"), at(i));
        }
        match last {
            Some(Action::Patch { patch, .. }) => {
                assert_eq!(patch["message"], "(combined from similar events): m11");
                assert_eq!(
                    patch["count"], 3,
                    "10th creates the combined event, 11th and 12th count"
                );
            }
            a => panic!("{a:?}"),
        }
    }

    #[test]
    fn lifecycle_events_once_per_run() {
        let pod: core::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .unwrap();
        let st = |state: serde_json::Value, restarts: i32| -> core::PodStatus {
            serde_json::from_value(serde_json::json!({
                "containerStatuses": [{"name": "c", "image": "", "imageID": "", "ready": false,
                    "restartCount": restarts, "state": state}]
            }))
            .unwrap()
        };
        let running = |t: &str| serde_json::json!({"running": {"startedAt": t}});
        let a = st(running("2026-01-01T00:00:00Z"), 0);
        let reasons = |v: Vec<ContainerEvent>| v.into_iter().map(|e| e.2).collect::<Vec<_>>();
        assert_eq!(reasons(lifecycle(&pod, None, &a)), ["Created", "Started"]);
        assert!(lifecycle(&pod, Some(&a), &a).is_empty());
        let crash = st(
            serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}}),
            1,
        );
        let ev = lifecycle(&pod, Some(&a), &crash);
        assert_eq!(
            ev[0].3,
            "Back-off restarting failed container c in pod web_default(u)"
        );
        assert!(lifecycle(&pod, Some(&crash), &crash).is_empty());
        let b = st(running("2026-01-01T00:01:00Z"), 1);
        assert_eq!(
            reasons(lifecycle(&pod, Some(&crash), &b)),
            ["Created", "Started"]
        );
        // A run systemd could not start: `Failed` with the runtime's message, once.
        let mut not_started = crash.clone();
        not_started.container_statuses.as_mut().unwrap()[0].last_state =
            serde_json::from_value(serde_json::json!({"terminated": {"exitCode": 128,
                "reason": "StartError", "message": "exec: \"/bin/app\": permission denied",
                "finishedAt": "2026-01-01T00:02:00Z"}}))
            .unwrap();
        let ev = lifecycle(&pod, Some(&b), &not_started);
        assert_eq!(
            (ev[0].1, ev[0].2, ev[0].3.as_str()),
            (
                "Warning",
                "Failed",
                "Error: exec: \"/bin/app\": permission denied"
            )
        );
        assert_eq!(reasons(ev), ["Failed", "BackOff"]);
        assert!(lifecycle(&pod, Some(&not_started), &not_started).is_empty());
    }

    #[test]
    fn spam_filter_burst_then_one_per_five_minutes() {
        let mut c = Correlator::new("n");
        let sent = (0..40)
            .filter(|i| {
                c.correlate(&obj(), "Normal", "Started", "m", at(*i))
                    .is_some()
            })
            .count();
        assert_eq!(sent, 25);
        assert!(
            c.correlate(&obj(), "Normal", "Started", "m", at(100))
                .is_none()
        );
        assert!(
            c.correlate(&obj(), "Normal", "Started", "m", at(40 + 300))
                .is_some()
        );
    }

    #[test]
    fn pull_messages_as_the_kubelet_writes_them() {
        use std::time::Duration;
        let d = message::go_duration;
        assert_eq!(d(Duration::ZERO), "0s");
        assert_eq!(d(Duration::from_nanos(1_234_567_891)), "1.234567891s");
        assert_eq!(d(Duration::from_micros(812_500)), "812.5ms");
        assert_eq!(d(Duration::from_micros(40)), "40µs");
        assert_eq!(d(Duration::from_millis(123_250)), "2m3.25s");
        assert_eq!(d(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(
            message::pulled("busybox:1.28", Duration::from_millis(1500)),
            "Successfully pulled image \"busybox:1.28\" in 1.5s"
        );
    }
}
