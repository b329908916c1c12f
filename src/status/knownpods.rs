//! The pods podunit knows of but systemd does not run as they should, as `podunit status` rows:
//! pods the generator refused (its [`crate::generate::report`]), pods waiting on something
//! ([`crate::status::waiting`]), and what to tell people under the table. Pure.

use crate::common::paths::Source;
use crate::generate::output::ContainerKind;
use crate::generate::report::{RefusedFile, RefusedPod, Report, WaitingPod, one_line};
use crate::status::container::State;
use crate::status::model::ContainerStatus;
use crate::status::phase::Phase;
use crate::status::pod::PodStatus;
use crate::status::waiting::Record;

/// How to see every problem of `file`.
fn check_hint(file: &std::path::Path, errors: usize) -> String {
    let rest = if errors > 1 {
        format!("{} more: ", errors - 1)
    } else {
        String::new()
    };
    format!("{rest}podunit check {}", file.display())
}

/// The row of a pod the generator refused: phase Failed, its reason as STATUS, the first problem
/// and where to find the others as its message.
pub fn refused(r: &RefusedPod, source: Option<Source>) -> PodStatus {
    let containers = r.containers.unwrap_or(0);
    PodStatus {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        uid: None,
        source,
        phase: Phase::Failed,
        display: r.reason.clone(),
        ready_containers: 0,
        total_containers: containers,
        restarts: 0,
        start_time: 0,
        terminating: false,
        conditions: Vec::new(),
        init_container_statuses: Vec::new(),
        container_statuses: Vec::new(),
        pod_unit: String::new(),
        pod_unit_state: "not generated".into(),
        reason: Some(r.reason.clone()),
        message: Some(format!("{} ({})", r.message, check_hint(&r.file, r.errors))),
        pod_ips: Vec::new(),
    }
}

/// The line under the table for a file refused before any pod in it could be named.
pub fn refused_file(f: &RefusedFile) -> String {
    one_line(&format!(
        "{} ({})",
        f.message,
        check_hint(&f.file, f.errors)
    ))
}

fn waiting_on(c: &mut ContainerStatus, reason: &str) {
    if matches!(c.state, State::Waiting { .. }) {
        c.state = State::Waiting {
            reason: reason.to_string(),
        };
    }
}

/// A rendered pod that a record says is waiting: its waiting containers show the record's
/// reason, the pod its message (the caller checked [`crate::status::waiting::applies`]).
pub fn apply_waiting(st: &mut PodStatus, rec: &Record) {
    let concerns =
        |name: &str| rec.containers.is_empty() || rec.containers.iter().any(|c| c == name);
    let mut init_waits = false;
    for c in st.init_container_statuses.iter_mut() {
        if concerns(&c.name) {
            waiting_on(c, &rec.reason);
            init_waits |= matches!(c.state, State::Waiting { .. }) && c.kind == ContainerKind::Init;
        }
    }
    for c in st
        .container_statuses
        .iter_mut()
        .filter(|c| concerns(&c.name))
    {
        waiting_on(c, &rec.reason);
    }
    if !st.terminating {
        // kubectl shows an init container's wait as `Init:<reason>`.
        st.display = if init_waits {
            format!("Init:{}", rec.reason)
        } else {
            rec.reason.clone()
        };
    }
    st.message = Some(rec.message.clone());
}

/// A container without a unit (its pod is not rendered).
fn not_started(name: &str, kind: ContainerKind, state: State) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        unit: String::new(),
        kind,
        state,
        last_state: None,
        ready: false,
        started: false,
        restart_count: 0,
        active_state: "inactive".into(),
        sub_state: "dead".into(),
    }
}

/// The row of a pod the node agent holds back (not in the spool, so without units).
pub fn unspooled(rec: &Record) -> PodStatus {
    let containers = rec
        .all_containers
        .iter()
        .map(|name| {
            let reason = if rec.containers.is_empty() || rec.containers.contains(name) {
                rec.reason.clone()
            } else {
                "ContainerCreating".into()
            };
            not_started(name, ContainerKind::App, State::Waiting { reason })
        })
        .collect::<Vec<_>>();
    PodStatus {
        namespace: rec.namespace.clone(),
        name: rec.name.clone(),
        uid: Some(rec.uid.clone()),
        source: Some(Source::Spool),
        phase: if rec.refused {
            Phase::Failed
        } else {
            Phase::Pending
        },
        display: rec.reason.clone(),
        ready_containers: 0,
        total_containers: containers.len(),
        restarts: 0,
        start_time: 0,
        terminating: false,
        conditions: Vec::new(),
        init_container_statuses: Vec::new(),
        container_statuses: containers,
        pod_unit: String::new(),
        pod_unit_state: "not spooled".into(),
        reason: rec.refused.then(|| rec.reason.clone()),
        message: Some(rec.message.clone()),
        pod_ips: Vec::new(),
    }
}

/// The row of a local pod the generator left waiting for images (its report's `waiting`):
/// Pending from the first moment, as the kubelet shows a static pod whose image it pulls. Its
/// containers wait with what podunit-sync's pull says (`rec`, once it has written one:
/// `ErrImagePull`, `ImagePullBackOff`, ...), `ContainerCreating` until then. `since_us` is
/// when the manifest was written: the pod's age.
pub fn waiting_for_images(
    w: &WaitingPod,
    rec: Option<&Record>,
    source: Option<Source>,
    since_us: u64,
) -> PodStatus {
    let fallback = Record {
        uid: w.uid.clone(),
        namespace: w.namespace.clone(),
        name: w.name.clone(),
        writer: crate::status::waiting::Writer::Agent,
        reason: "ContainerCreating".into(),
        message: String::new(),
        containers: Vec::new(),
        all_containers: Vec::new(),
        refused: false,
        at_us: 0,
        event: None,
    };
    let rec = rec.unwrap_or(&fallback);
    let mut st = unspooled(&Record {
        all_containers: w.containers.clone(),
        ..rec.clone()
    });
    st.source = source;
    st.start_time = since_us;
    st.pod_unit = crate::translate::naming::pod_service(&w.namespace, &w.name);
    st.pod_unit_state = "not generated: waiting for its images".into();
    st.message = (!rec.message.is_empty()).then(|| rec.message.clone());
    st
}

/// What podunit-sync's status says, if it says that the last reconcile failed.
pub fn sync_failure(status_text: &str) -> Option<String> {
    status_text
        .starts_with("Reconcile failed")
        .then(|| format!("podunit-sync: {}", one_line(status_text)))
}

/// The lines under the table: each pod with a message (`ns/name: message`), each refused file,
/// the node configuration's problem, podunit-sync's failure.
pub fn notes(pods: &[PodStatus], report: Option<&Report>, sync: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = pods
        .iter()
        .filter_map(|p| {
            let m = p.message.as_deref()?;
            Some(one_line(&format!("{}/{}: {m}", p.namespace, p.name)))
        })
        .collect();
    if let Some(r) = report {
        out.extend(r.files.iter().map(refused_file));
        if let Some(c) = &r.config {
            out.push(one_line(&format!("node configuration: {c}")));
        }
    }
    out.extend(sync.and_then(sync_failure));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::waiting::Writer;
    use std::path::PathBuf;

    fn rec(containers: Vec<&str>) -> Record {
        Record {
            uid: "u".into(),
            namespace: "default".into(),
            name: "app".into(),
            writer: Writer::Prepare,
            reason: "CreateContainerConfigError".into(),
            message: "ConfigMap default/cfg not found".into(),
            containers: containers.into_iter().map(String::from).collect(),
            all_containers: vec!["a".into(), "b".into()],
            refused: false,
            at_us: 1,
            event: None,
        }
    }

    fn creating() -> State {
        State::Waiting {
            reason: "ContainerCreating".into(),
        }
    }

    #[test]
    fn a_refused_pod_is_failed_with_its_reason_first_problem_and_check() {
        let r = RefusedPod {
            namespace: "default".into(),
            name: "typo".into(),
            file: PathBuf::from("/etc/pods.d/bad.yaml"),
            reason: "InvalidManifest".into(),
            message: "/etc/pods.d/bad.yaml: default/typo: spec.containers[0].comand: unknown field"
                .into(),
            errors: 3,
            containers: Some(2),
        };
        let s = refused(&r, Some(Source::Etc));
        assert_eq!(
            (s.phase, s.display.as_str()),
            (Phase::Failed, "InvalidManifest")
        );
        assert_eq!((s.ready_containers, s.total_containers), (0, 2));
        let m = s.message.clone().unwrap();
        assert!(
            m.contains("spec.containers[0].comand: unknown field"),
            "{m}"
        );
        assert!(
            m.ends_with("(2 more: podunit check /etc/pods.d/bad.yaml)"),
            "{m}"
        );
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["reason"], "InvalidManifest");
        assert_eq!(j["phase"], "Failed");
        assert_eq!(notes(&[s], None, None), vec![format!("default/typo: {m}")]);
    }

    #[test]
    fn a_waiting_record_names_the_reason_on_the_waiting_containers() {
        let mut st = refused(
            &RefusedPod {
                namespace: "default".into(),
                name: "app".into(),
                file: PathBuf::from("/x"),
                reason: "x".into(),
                message: "x".into(),
                errors: 1,
                containers: None,
            },
            None,
        );
        st.message = None;
        st.container_statuses = vec![
            not_started("a", ContainerKind::App, creating()),
            not_started("b", ContainerKind::App, creating()),
        ];
        apply_waiting(&mut st, &rec(vec!["b"]));
        assert_eq!(st.display, "CreateContainerConfigError");
        assert_eq!(st.container_statuses[0].state, creating());
        assert_eq!(
            st.container_statuses[1].state,
            State::Waiting {
                reason: "CreateContainerConfigError".into()
            }
        );
        assert_eq!(
            st.message.as_deref(),
            Some("ConfigMap default/cfg not found")
        );

        // With an init container waiting too, kubectl's `Init:` form.
        st.init_container_statuses = vec![not_started("i", ContainerKind::Init, creating())];
        apply_waiting(&mut st, &rec(vec![]));
        assert_eq!(st.display, "Init:CreateContainerConfigError");
    }

    #[test]
    fn an_unspooled_pod_shows_every_container_waiting() {
        let mut r = rec(vec!["a"]);
        r.writer = Writer::Agent;
        let s = unspooled(&r);
        assert_eq!(
            (s.phase, s.display.as_str()),
            (Phase::Pending, "CreateContainerConfigError")
        );
        assert_eq!(s.total_containers, 2);
        assert_eq!(s.source, Some(Source::Spool));
        assert_eq!(s.container_statuses[1].state, creating());
        r.refused = true;
        r.reason = "InvalidPod".into();
        assert_eq!(unspooled(&r).phase, Phase::Failed);
    }

    #[test]
    fn a_local_pod_waiting_for_images_is_pending_from_its_file() {
        let w = WaitingPod {
            namespace: "default".into(),
            name: "app".into(),
            uid: "u".into(),
            file: PathBuf::from("/etc/pods.d/app.yaml"),
            containers: vec!["a".into(), "b".into()],
            images: Vec::new(),
            pull_secrets: Vec::new(),
        };
        // Right after the reload, before podunit-sync has looked at it.
        let s = waiting_for_images(&w, None, Some(Source::Etc), 7);
        assert_eq!(
            (s.phase, s.display.as_str()),
            (Phase::Pending, "ContainerCreating")
        );
        assert_eq!((s.source, s.start_time), (Some(Source::Etc), 7));
        assert_eq!(s.total_containers, 2);
        assert_eq!(s.pod_unit, "podunit-default_app.service");
        assert_eq!(s.message, None);
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["source"], "etc");
        // Then what the pull says.
        let mut r = rec(vec!["a"]);
        r.writer = Writer::Agent;
        r.reason = "ImagePullBackOff".into();
        r.message = "Back-off pulling image \"x\"".into();
        let s = waiting_for_images(&w, Some(&r), Some(Source::Etc), 7);
        assert_eq!(s.display, "ImagePullBackOff");
        assert_eq!(s.source, Some(Source::Etc));
        assert_eq!(s.message.as_deref(), Some("Back-off pulling image \"x\""));
        assert_eq!(s.container_statuses[1].state, creating());
    }

    #[test]
    fn notes_say_refused_files_config_and_a_failed_reconcile() {
        let report = Report {
            files: vec![RefusedFile {
                file: PathBuf::from("/etc/pods.d/junk.yaml"),
                message: "/etc/pods.d/junk.yaml: not YAML\nforged line".into(),
                errors: 1,
            }],
            config: Some("unknown key".into()),
            ..Report::default()
        };
        let n = notes(
            &[],
            Some(&report),
            Some("Reconcile failed: sync-state.json: No space left on device"),
        );
        assert_eq!(
            n,
            vec![
                "/etc/pods.d/junk.yaml: not YAML\\nforged line (podunit check /etc/pods.d/junk.yaml)",
                "node configuration: unknown key",
                "podunit-sync: Reconcile failed: sync-state.json: No space left on device",
            ]
        );
        assert!(sync_failure("Reconciled: 3 pods").is_none());
    }
}
