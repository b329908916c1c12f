//! Lifecycle hooks (`postStart`, `preStop`) as the plan carries them: the API server's rules
//! (`validateLifecycle`, `validateHandler`) and the command a unit runs for each. Pure.
//!
//! An `exec` hook is the container unit's own `ExecStartPost=`/`ExecStop=` command, run in the
//! container's sandbox. `httpGet` and `sleep` hooks are `podunit hook` in the same places
//! ([`crate::prober::hook_run`]): its HTTP client is the probes' (`src/prober/check.rs`).

use super::handler::{self, Handler, Problem, problem};
use k8s_openapi::api::core::v1 as core;
use serde::{Deserialize, Serialize};

/// Where a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// After the main process was started (`ExecStartPost=`): a failure kills the container.
    PostStart,
    /// Before SIGTERM when the container is stopped (`ExecStop=`).
    PreStop,
}

impl Stage {
    /// The `lifecycle` field.
    pub fn field(self) -> &'static str {
        match self {
            Stage::PostStart => "postStart",
            Stage::PreStop => "preStop",
        }
    }
}

/// One hook, as it is run (and as the plan carries a probed container's preStop, which
/// podunit-sync runs before a liveness or startup kill).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Hook {
    /// The command, as written (no `$(VAR)` expansion, as the kubelet).
    Exec(Vec<String>),
    /// A [`Handler::HttpGet`]: the probes' request.
    Http(Handler),
    /// Waits this long.
    Sleep(i64),
}

/// The API server's rules for one handler. `grace`: the pod's `terminationGracePeriodSeconds`
/// (defaulted to 30), the most a `sleep` may wait.
pub fn check(ctr: &core::Container, h: &core::LifecycleHandler, grace: i64) -> Vec<Problem> {
    let mut out = Vec::new();
    let set: Vec<&str> = [
        ("exec", h.exec.is_some()),
        ("httpGet", h.http_get.is_some()),
        ("tcpSocket", h.tcp_socket.is_some()),
        ("sleep", h.sleep.is_some()),
    ]
    .iter()
    .filter(|h| h.1)
    .map(|h| h.0)
    .collect();
    match set.len() {
        0 => out.push(problem("", "must specify a handler type")),
        1 => {}
        _ => out.push(problem(set[1], "may not specify more than 1 handler type")),
    }
    if let Some(e) = &h.exec
        && e.command.as_deref().unwrap_or_default().is_empty()
    {
        out.push(problem("exec.command", "Required value"));
    }
    if let Some(g) = &h.http_get {
        handler::check_http_get(ctr, g, "httpGet", &mut out);
    }
    if h.tcp_socket.is_some() {
        // Accepted by the API server for old clients, but the kubelet cannot run it: every run
        // fails ("Cannot run handler: invalid handler"), so a postStart never lets it start.
        out.push(problem(
            "tcpSocket",
            "not supported: the kubelet cannot run tcpSocket hooks (use exec, httpGet or sleep)",
        ));
    }
    if let Some(s) = &h.sleep
        && !(0..=grace).contains(&s.seconds)
    {
        // Kubernetes 1.33 (PodLifecycleSleepActionAllowZero, on by default): zero is allowed.
        out.push(problem(
            "sleep.seconds",
            format!(
                "Invalid value: {}: must be non-negative and less than terminationGracePeriodSeconds ({grace})",
                s.seconds
            ),
        ));
    }
    out
}

/// A handler that passed [`check`], as it is run.
pub fn hook(ctr: &core::Container, h: &core::LifecycleHandler) -> Option<Hook> {
    if let Some(e) = &h.exec {
        return Some(Hook::Exec(e.command.clone().unwrap_or_default()));
    }
    if let Some(g) = &h.http_get {
        return Some(Hook::Http(handler::http_get(ctr, g)));
    }
    h.sleep.as_ref().map(|s| Hook::Sleep(s.seconds))
}

/// The arguments of `podunit hook` (after the program) for a hook; `None` for an exec postStart, which is the unit's own command. `record`: where the run leaves
/// what podunit-sync reports of it ([`record_path`]). Every value from the manifest is one
/// `--name=value` word, or follows `--`, so none can pass for an option.
///
/// An exec preStop goes through `podunit hook` too: systemd runs `ExecStop=` after the main
/// process exited on its own as well, and only `podunit hook` can tell (`$MAINPID`) and skip it,
/// as the kubelet runs preStop only when it kills a container, and once per kill.
pub fn helper_args(hook: &Hook, stage: Stage, record: Option<&str>) -> Option<Vec<String>> {
    let mut a = vec!["hook".to_string()];
    if stage == Stage::PreStop {
        a.push("--pre-stop".into());
    }
    match hook {
        Hook::Exec(_) if stage == Stage::PostStart => return None,
        Hook::Exec(cmd) => {
            // Its failure is systemd's journal entry for the command: no record.
            a.push("exec".into());
            a.push("--".into());
            a.extend(cmd.iter().cloned());
            return Some(a);
        }
        _ => {}
    }
    if let Some(r) = record {
        a.push(format!("--record={r}"));
    }
    match hook {
        Hook::Exec(_) => return None,
        Hook::Sleep(s) => {
            a.push("sleep".into());
            a.push(format!("--seconds={s}"));
        }
        Hook::Http(Handler::HttpGet {
            https,
            host,
            port,
            path,
            headers,
        }) => {
            a.push("http".into());
            if *https {
                a.push("--https".into());
            }
            a.push(format!("--host={host}"));
            a.push(format!("--port={port}"));
            a.push(format!("--path={path}"));
            for (k, v) in headers {
                a.push(format!("--header={k}:{v}"));
            }
        }
        Hook::Http(_) => return None,
    }
    Some(a)
}

/// Where `podunit hook` leaves what podunit-sync turns into events: a failed run's error, an
/// HTTPS request answered in HTTP. One directory per pod, written only when podunit-sync (the
/// node agent, which reads and removes them) has made this one, so a node without it keeps
/// nothing. Not in the pod's runtime directory: that goes as soon as the pod's units stopped,
/// before the agent may have read it.
pub const RECORDS: &str = "/run/podunit/hooks";

/// The record of `container`'s `stage` hook of pod `uid`; `None` for a uid unfit for a path.
pub fn record_path(uid: &str, container: &str, stage: Stage) -> Option<String> {
    let fit = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            && !s.starts_with('.')
    };
    (fit(uid) && fit(container)).then(|| format!("{RECORDS}/{uid}/{container}.{}", stage.field()))
}

/// Next to a record: where `podunit hook` leaves the `host:port` of an HTTPS request that was
/// answered in HTTP and retried in HTTP (`LifecycleHTTPFallback`).
pub fn fallback_path(record: &str) -> String {
    format!("{record}.fallback")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctr(yaml: &str) -> core::Container {
        serde_saphyr::from_str(yaml).unwrap()
    }

    /// A container with a port named `http` and these hooks (YAML flow mappings).
    fn web(post_start: &str, pre_stop: &str) -> core::Container {
        ctr(&format!(
            "{{name: web, ports: [{{name: http, containerPort: 8080}}], lifecycle: {{postStart: {post_start}, preStop: {pre_stop}}}}}"
        ))
    }

    fn paths(c: &core::Container, grace: i64) -> Vec<(String, String)> {
        let lc = c.lifecycle.as_ref().unwrap();
        [lc.post_start.as_ref(), lc.pre_stop.as_ref()]
            .into_iter()
            .flatten()
            .flat_map(|h| check(c, h, grace))
            .map(|p| (p.path, p.message))
            .collect()
    }

    #[test]
    fn api_server_rules() {
        let ok = web(
            "{httpGet: {port: http, path: /started}}",
            "{sleep: {seconds: 30}}",
        );
        assert!(paths(&ok, 30).is_empty());
        let zero = ctr("name: w\nlifecycle: {preStop: {sleep: {seconds: 0}}}\n");
        assert!(paths(&zero, 0).is_empty(), "1.33 allows a zero sleep");
        let long = ctr("name: w\nlifecycle: {preStop: {sleep: {seconds: 31}}}\n");
        assert_eq!(
            paths(&long, 30),
            [(
                "sleep.seconds".to_string(),
                "Invalid value: 31: must be non-negative and less than terminationGracePeriodSeconds (30)"
                    .to_string()
            )]
        );
        let neg = ctr("name: w\nlifecycle: {postStart: {sleep: {seconds: -1}}}\n");
        assert_eq!(paths(&neg, 30)[0].0, "sleep.seconds");
        let two =
            ctr("name: w\nlifecycle: {postStart: {exec: {command: [x]}, sleep: {seconds: 1}}}\n");
        assert_eq!(
            paths(&two, 30),
            [(
                "sleep".to_string(),
                "may not specify more than 1 handler type".to_string()
            )]
        );
        let none = ctr("name: w\nlifecycle: {postStart: {}}\n");
        assert_eq!(paths(&none, 30)[0].1, "must specify a handler type");
        let bad = ctr(
            "name: w\nlifecycle: {preStop: {httpGet: {port: 0, scheme: FTP}}, postStart: {tcpSocket: {port: 1}}}\n",
        );
        let got: Vec<String> = paths(&bad, 30).into_iter().map(|p| p.0).collect();
        assert_eq!(got, ["tcpSocket", "httpGet.port", "httpGet.scheme"]);
    }

    #[test]
    fn helper_arguments_are_one_word_each() {
        let c = web(
            r#"{httpGet: {port: http, host: "-x", path: "a b", scheme: HTTPS, httpHeaders: [{name: X-A, value: "v: 1"}]}}"#,
            "{sleep: {seconds: 5}}",
        );
        let lc = c.lifecycle.as_ref().unwrap();
        let post = hook(&c, lc.post_start.as_ref().unwrap()).unwrap();
        assert_eq!(
            helper_args(&post, Stage::PostStart, Some("/r")).unwrap(),
            [
                "hook",
                "--record=/r",
                "http",
                "--https",
                "--host=-x",
                "--port=8080",
                "--path=a b",
                "--header=X-A:v: 1"
            ]
        );
        let pre = hook(&c, lc.pre_stop.as_ref().unwrap()).unwrap();
        assert_eq!(pre, Hook::Sleep(5));
        assert_eq!(
            helper_args(
                &pre,
                Stage::PreStop,
                record_path("u-1", "web", Stage::PreStop).as_deref()
            )
            .unwrap(),
            [
                "hook",
                "--pre-stop",
                "--record=/run/podunit/hooks/u-1/web.preStop",
                "sleep",
                "--seconds=5"
            ]
        );
        let exec = Hook::Exec(vec!["--x".into(), "y".into()]);
        assert_eq!(helper_args(&exec, Stage::PostStart, None), None);
        assert_eq!(
            helper_args(&exec, Stage::PreStop, Some("/r")).unwrap(),
            ["hook", "--pre-stop", "exec", "--", "--x", "y"]
        );
        assert_eq!(record_path("../x", "web", Stage::PreStop), None);
        assert_eq!(record_path("", "web", Stage::PreStop), None);
    }
}
