//! `FailedPostStartHook` and `FailedPreStopHook`, as the kubelet posts them
//! (`pkg/kubelet/kuberuntime/kuberuntime_container.go`), from what systemd keeps of each hook's
//! last run: a container unit's `ExecStartPost=` and `ExecStop=` exec status (path, argv, start,
//! pid, `code=exited|killed|dumped`, `status=`). Pure: the agent reads the properties.

use crate::probe::hook::{Hook, Stage};

/// The last run of one hook command, as `systemctl show` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// `start_time=[...]` and `pid=`: what tells one run from the next.
    pub key: String,
    /// When it started (seconds since the epoch), when systemd said.
    pub start_s: Option<i64>,
    /// `None` while it runs (or never ran).
    pub failed: Option<Exit>,
    pub ok: bool,
}

/// How a failed run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Status(i32),
    /// Killed by this signal (`TERM`): systemd's timeout.
    Signal(String),
}

/// Both hooks' last runs of one container unit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runs {
    pub post_start: Option<Run>,
    pub pre_stop: Option<Run>,
}

/// The `-p` list for [`parse_show`].
pub const SHOW_PROPERTIES: &str = "Id,ExecStartPost,ExecStop";

/// One exec status: `{ path=... ; argv[]=... ; ignore_errors=no ; start_time=[...] ;
/// stop_time=[...] ; pid=N ; code=exited ; status=1/FAILURE }`. The argv is the manifest's and
/// may hold anything, so the fields are read after the last `start_time=[`.
fn parse_run(v: &str) -> Option<Run> {
    let tail = &v[v.rfind(" ; start_time=[")? + 3..];
    let field = |name: &str| -> Option<&str> {
        tail.split(" ; ")
            .find_map(|f| f.trim().trim_end_matches('}').trim().strip_prefix(name))
            .map(str::trim)
    };
    let start = field("start_time=")?;
    let pid = field("pid=").unwrap_or("0");
    if start == "[n/a]" || start.is_empty() {
        return None;
    }
    let status = field("status=").unwrap_or("");
    let number = status.split('/').next().unwrap_or("");
    let (failed, ok) = match field("code=") {
        Some("exited") => match number.parse::<i32>() {
            Ok(0) => (None, true),
            Ok(n) => (Some(Exit::Status(n)), false),
            Err(_) => (None, false),
        },
        Some("killed" | "dumped") => (
            Some(Exit::Signal(
                status.split('/').nth(1).unwrap_or(number).to_string(),
            )),
            false,
        ),
        _ => (None, false),
    };
    Some(Run {
        key: format!("{start} {pid}"),
        start_s: start
            .trim_start_matches("[@")
            .trim_end_matches(']')
            .split('.')
            .next()
            .and_then(|n| n.parse().ok()),
        failed,
        ok,
    })
}

/// `systemctl show -p Id,ExecStartPost,ExecStop` of several units, by unit: one block per unit,
/// its properties in systemd's order (`Id=` after the service's). A hook is the last command of
/// its key (an init container's own `ExecStartPost=` comes before it).
pub fn parse_show(text: &str) -> Vec<(String, Runs)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut id = None;
        let mut runs = Runs::default();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("Id=") {
                id = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("ExecStartPost=") {
                runs.post_start = parse_run(v);
            } else if let Some(v) = line.strip_prefix("ExecStop=") {
                runs.pre_stop = parse_run(v);
            }
        }
        out.extend(id.map(|id| (id, runs)));
    }
    out
}

/// The hook runs already reported, so each failed run is one event, and none from before
/// podunit-sync started (their events were posted then, or are too old to matter).
#[derive(Debug, Default)]
pub struct Seen {
    since_s: i64,
    seen: std::collections::HashMap<(String, &'static str), String>,
}

impl Seen {
    pub fn new(since_s: i64) -> Self {
        Seen {
            since_s,
            seen: Default::default(),
        }
    }

    /// Whether `run` of `unit`'s `stage` hook is a failure not reported yet (and now is).
    pub fn fresh_failure(&mut self, unit: &str, stage: Stage, run: &Run) -> bool {
        if run.failed.is_none() || run.start_s.is_some_and(|s| s < self.since_s) {
            return false;
        }
        let key = (unit.to_string(), stage.field());
        if self.seen.get(&key) == Some(&run.key) {
            return false;
        }
        if self.seen.len() >= 4096 {
            self.seen.clear();
        }
        self.seen.insert(key, run.key.clone());
        true
    }
}

/// What one failed hook posts: (type, reason, message), each as the kubelet's. `pod`:
/// `name_namespace(uid)` (`format.Pod`). `error`: what `podunit hook` left for a failed preStop
/// httpGet (its error), when it could.
pub fn events(
    stage: Stage,
    hook: &Hook,
    container: &str,
    pod: &str,
    exit: &Exit,
    error: Option<&str>,
) -> Vec<(&'static str, &'static str, String)> {
    match stage {
        // The kubelet leaves the handler's message out, so that secrets do not leak; then it
        // kills the container with this message.
        Stage::PostStart => vec![
            (
                "Warning",
                "FailedPostStartHook",
                "PostStartHook failed".into(),
            ),
            ("Normal", "Killing", "FailedPostStartHook".into()),
        ],
        Stage::PreStop => {
            let message = match hook {
                Hook::Exec(cmd) => {
                    let error = match exit {
                        Exit::Status(n) => format!("command '{}' exited with {n}: ", cmd.join(" ")),
                        Exit::Signal(s) => format!("command '{}' killed by SIG{s}", cmd.join(" ")),
                    };
                    crate::kube::events::message::failed_exec_hook(cmd, container, pod, &error, "")
                }
                Hook::Http(crate::probe::spec::Handler::HttpGet { path, .. }) => {
                    let fallback = match exit {
                        Exit::Status(n) => format!("exit status {n}"),
                        Exit::Signal(s) => format!("killed by SIG{s}"),
                    };
                    format!(
                        "HTTP lifecycle hook ({path}) for Container {container:?} in Pod {pod:?} failed - error: {}",
                        error.unwrap_or(&fallback)
                    )
                }
                Hook::Http(_) => return Vec::new(),
                Hook::Sleep(s) => format!(
                    "Sleep lifecycle hook ({s}) for Container {container:?} in Pod {pod:?} failed - error: container terminated before sleep hook finished"
                ),
            };
            vec![("Warning", "FailedPreStopHook", message)]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_systemctl_exec_status() {
        // As systemd 252 prints it: the service's properties, then the unit's.
        let text = "ExecStartPost={ path=/usr/bin/podunit ; argv[]=/usr/bin/podunit hook http --path=/x ; start_time=[y] ; ignore_errors=no ; start_time=[@1700000000] ; stop_time=[@1700000001] ; pid=42 ; code=exited ; status=1 }\n\
ExecStop={ path=/usr/bin/podunit ; argv[]=/usr/bin/podunit hook --pre-stop sleep --seconds=3 ; ignore_errors=no ; start_time=[@1700000005] ; stop_time=[@1700000008] ; pid=50 ; code=killed ; status=15/TERM }\n\
Id=a.service\n\
\n\
ExecStartPost={ path=/bin/true ; argv[]=/bin/true ; ignore_errors=no ; start_time=[@1700000000] ; stop_time=[@1700000000] ; pid=7 ; code=exited ; status=0/SUCCESS }\n\
ExecStop={ path=/bin/true ; argv[]=/bin/true ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n\
Id=b.service\n";
        let got = parse_show(text);
        assert_eq!(got.len(), 2);
        let a = &got[0].1;
        assert_eq!(got[0].0, "a.service");
        let post = a.post_start.as_ref().unwrap();
        assert_eq!(post.failed, Some(Exit::Status(1)));
        assert_eq!(post.key, "[@1700000000] 42");
        assert_eq!(
            a.pre_stop.as_ref().unwrap().failed,
            Some(Exit::Signal("TERM".into()))
        );
        let b = &got[1].1;
        assert!(b.post_start.as_ref().unwrap().ok);
        assert_eq!(b.pre_stop, None, "never ran");
    }

    #[test]
    fn each_failed_run_once_and_none_from_before() {
        let run = |start: i64, pid: u32, failed: bool| Run {
            key: format!("[@{start}] {pid}"),
            start_s: Some(start),
            failed: failed.then_some(Exit::Status(1)),
            ok: !failed,
        };
        let mut seen = Seen::new(100);
        assert!(!seen.fresh_failure("a", Stage::PostStart, &run(99, 1, true)));
        assert!(seen.fresh_failure("a", Stage::PostStart, &run(101, 2, true)));
        assert!(!seen.fresh_failure("a", Stage::PostStart, &run(101, 2, true)));
        assert!(seen.fresh_failure("a", Stage::PreStop, &run(101, 3, true)));
        assert!(!seen.fresh_failure("a", Stage::PostStart, &run(102, 4, false)));
        assert!(seen.fresh_failure("a", Stage::PostStart, &run(103, 5, true)));
    }

    #[test]
    fn kubelet_messages() {
        let pod = "web_default(u1)";
        let post = events(
            Stage::PostStart,
            &Hook::Sleep(1),
            "c",
            pod,
            &Exit::Status(1),
            None,
        );
        assert_eq!(post[0].1, "FailedPostStartHook");
        assert_eq!(post[0].2, "PostStartHook failed");
        let http = Hook::Http(crate::probe::spec::Handler::HttpGet {
            https: false,
            host: String::new(),
            port: 80,
            path: "/stop".into(),
            headers: vec![],
        });
        let pre = events(
            Stage::PreStop,
            &http,
            "c",
            pod,
            &Exit::Status(1),
            Some("Get \"http://10.0.0.1:80/stop\": connect: connection refused"),
        );
        assert_eq!(
            pre[0].2,
            "HTTP lifecycle hook (/stop) for Container \"c\" in Pod \"web_default(u1)\" failed - error: Get \"http://10.0.0.1:80/stop\": connect: connection refused"
        );
        let exec = events(
            Stage::PreStop,
            &Hook::Exec(vec!["/bin/sh".into(), "-c".into(), "exit 3".into()]),
            "c",
            pod,
            &Exit::Status(3),
            None,
        );
        assert_eq!(
            exec[0].2,
            "Exec lifecycle hook ([/bin/sh -c exit 3]) for Container \"c\" in Pod \"web_default(u1)\" failed - error: command '/bin/sh -c exit 3' exited with 3: , message: \"\""
        );
        let sleep = events(
            Stage::PreStop,
            &Hook::Sleep(5),
            "c",
            pod,
            &Exit::Signal("TERM".into()),
            None,
        );
        assert!(
            sleep[0]
                .2
                .starts_with("Sleep lifecycle hook (5) for Container \"c\"")
        );
    }
}
