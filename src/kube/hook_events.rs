//! `FailedPostStartHook` and `FailedPreStopHook`, as the kubelet posts them
//! (`pkg/kubelet/kuberuntime/kuberuntime_container.go`), from the journal: systemd logs every
//! failed `ExecStartPost=`/`ExecStop=` run (`SD_MESSAGE_UNIT_PROCESS_EXIT`, with `COMMAND=`,
//! `EXIT_CODE=`, `EXIT_STATUS=`). The journal keeps them after the unit has restarted, been reset
//! or unloaded, so a failure is seen however late the agent looks. Pure: the agent runs
//! journalctl.

use crate::probe::hook::{Hook, Stage};

/// systemd's "process exited" message id.
pub const PROCESS_EXIT: &str = "98e322203f7a4ed290d09fe03c09fe15";

/// How a failed run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Status(i32),
    /// Killed by this signal (`TERM`): systemd's timeout.
    Signal(String),
}

/// One failed hook run, as systemd logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookExit {
    pub unit: String,
    pub stage: Stage,
    pub exit: Exit,
    /// The entry's journal cursor: the next look starts after it.
    pub cursor: String,
}

/// The journalctl arguments for the failed hook runs of `units` after `after` (a cursor), or,
/// without one, since `since_s` (seconds since the epoch). Only PID 1's entries count: anyone may
/// log fields, nobody else has `_PID=1`. Fields of one name are ORed, of different names ANDed.
pub fn journal_args(units: &[String], after: Option<&str>, since_s: i64) -> Vec<String> {
    let mut a: Vec<String> = [
        "--no-pager",
        "--quiet",
        "--output=json",
        "--output-fields=UNIT,COMMAND,EXIT_CODE,EXIT_STATUS",
    ]
    .map(String::from)
    .to_vec();
    a.push(match after {
        Some(c) => format!("--after-cursor={c}"),
        None => format!("--since=@{since_s}"),
    });
    a.push("_PID=1".into());
    a.push(format!("MESSAGE_ID={PROCESS_EXIT}"));
    a.push("COMMAND=ExecStartPost".into());
    a.push("COMMAND=ExecStop".into());
    a.extend(units.iter().map(|u| format!("UNIT={u}")));
    a
}

/// journalctl's JSON lines, as [`journal_args`] asks for them: the failed runs, oldest first.
/// A successful run (logged only at debug level) and anything unreadable are skipped.
pub fn parse_journal(text: &str) -> Vec<HookExit> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let field = |k: &str| v.get(k).and_then(|f| f.as_str());
            let stage = match field("COMMAND")? {
                "ExecStartPost" => Stage::PostStart,
                "ExecStop" => Stage::PreStop,
                _ => return None,
            };
            let status: i32 = field("EXIT_STATUS")?.parse().ok()?;
            let exit = match field("EXIT_CODE")? {
                "exited" if status == 0 => return None,
                "exited" => Exit::Status(status),
                "killed" | "dumped" => Exit::Signal(signal_name(status)),
                _ => return None,
            };
            Some(HookExit {
                unit: field("UNIT")?.to_string(),
                stage,
                exit,
                cursor: field("__CURSOR")?.to_string(),
            })
        })
        .collect()
}

/// `15` -> `TERM`.
pub fn signal_name(n: i32) -> String {
    nix::sys::signal::Signal::try_from(n)
        .map(|s| s.as_str().trim_start_matches("SIG").to_string())
        .unwrap_or_else(|_| n.to_string())
}

/// Where each pod's look at the journal stopped, so each failed run is one event, and none from
/// before podunit-sync started (their events were posted then, or are too old to matter).
#[derive(Debug, Default)]
pub struct Seen {
    since_s: i64,
    cursors: std::collections::HashMap<String, String>,
}

impl Seen {
    pub fn new(since_s: i64) -> Self {
        Seen {
            since_s,
            cursors: Default::default(),
        }
    }

    /// Where the next look for pod `uid` starts: a cursor, or the start time.
    pub fn from(&self, uid: &str) -> (Option<&str>, i64) {
        (self.cursors.get(uid).map(String::as_str), self.since_s)
    }

    /// Pod `uid`'s runs up to `cursor` are reported.
    pub fn advance(&mut self, uid: &str, cursor: &str) {
        if self.cursors.len() >= 4096 && !self.cursors.contains_key(uid) {
            self.cursors.clear();
        }
        self.cursors.insert(uid.to_string(), cursor.to_string());
    }

    /// The pod is gone.
    pub fn forget(&mut self, uid: &str) {
        self.cursors.remove(uid);
    }
}

/// What one failed hook posts: (type, reason, message), each as the kubelet's. `pod`:
/// `name_namespace(uid)` (`format.Pod`). `error`: what `podunit hook` left for a failed preStop
/// httpGet (its error), when it could. `output`: a failed exec hook's output, when known (the
/// journal does not keep it).
pub fn events(
    stage: Stage,
    hook: &Hook,
    container: &str,
    pod: &str,
    exit: &Exit,
    error: Option<&str>,
    output: &str,
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
                    crate::kube::events::message::failed_exec_hook(
                        cmd, container, pod, &error, output,
                    )
                }
                Hook::Http(crate::probe::handler::Handler::HttpGet { path, .. }) => {
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

/// `LifecycleHTTPFallback`'s message: `host` is `host:port`.
pub fn fallback_message(host: &str) -> String {
    format!("request to HTTPS lifecycle hook {host} got HTTP response, retry with HTTP succeeded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_systemds_process_exit_entries() {
        // As journalctl 252 prints them (`--output=json`, the fields asked for).
        let text = r#"{"__CURSOR":"s=a;i=1","__REALTIME_TIMESTAMP":"1","UNIT":"a.service","COMMAND":"ExecStartPost","EXIT_CODE":"exited","EXIT_STATUS":"1"}
{"__CURSOR":"s=a;i=2","UNIT":"a.service","COMMAND":"ExecStop","EXIT_CODE":"killed","EXIT_STATUS":"15"}
{"__CURSOR":"s=a;i=3","UNIT":"b.service","COMMAND":"ExecStop","EXIT_CODE":"exited","EXIT_STATUS":"0"}
{"__CURSOR":"s=a;i=4","UNIT":"b.service","COMMAND":"ExecStart","EXIT_CODE":"exited","EXIT_STATUS":"2"}
{"__CURSOR":"s=a;i=5","UNIT":[1,2],"COMMAND":"ExecStop","EXIT_CODE":"exited","EXIT_STATUS":"2"}
not json
"#;
        let got = parse_journal(text);
        assert_eq!(
            got,
            [
                HookExit {
                    unit: "a.service".into(),
                    stage: Stage::PostStart,
                    exit: Exit::Status(1),
                    cursor: "s=a;i=1".into()
                },
                HookExit {
                    unit: "a.service".into(),
                    stage: Stage::PreStop,
                    exit: Exit::Signal("TERM".into()),
                    cursor: "s=a;i=2".into()
                }
            ]
        );
    }

    #[test]
    fn looks_start_after_the_last_entry_seen() {
        let units = ["a.service".to_string(), "b.service".to_string()];
        let first = journal_args(&units, None, 100);
        assert!(first.contains(&"--since=@100".to_string()), "{first:?}");
        assert!(first.contains(&"_PID=1".to_string()));
        assert!(first.contains(&"UNIT=b.service".to_string()));
        let mut seen = Seen::new(100);
        assert_eq!(seen.from("u1"), (None, 100));
        seen.advance("u1", "s=a;i=2");
        assert_eq!(seen.from("u1"), (Some("s=a;i=2"), 100));
        let next = journal_args(&units, seen.from("u1").0, 100);
        assert!(next.contains(&"--after-cursor=s=a;i=2".to_string()));
        seen.forget("u1");
        assert_eq!(seen.from("u1"), (None, 100));
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
            "",
        );
        assert_eq!(post[0].1, "FailedPostStartHook");
        assert_eq!(post[0].2, "PostStartHook failed");
        let http = Hook::Http(crate::probe::handler::Handler::HttpGet {
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
            "",
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
            "",
        );
        assert_eq!(
            exec[0].2,
            "Exec lifecycle hook ([/bin/sh -c exit 3]) for Container \"c\" in Pod \"web_default(u1)\" failed - error: command '/bin/sh -c exit 3' exited with 3: , message: \"\""
        );
        let said = events(
            Stage::PreStop,
            &Hook::Exec(vec!["false".into()]),
            "c",
            pod,
            &Exit::Status(1),
            None,
            "bye\n",
        );
        assert!(
            said[0].2.ends_with("exited with 1: , message: \"bye\\n\""),
            "{}",
            said[0].2
        );
        let sleep = events(
            Stage::PreStop,
            &Hook::Sleep(5),
            "c",
            pod,
            &Exit::Signal("TERM".into()),
            None,
            "",
        );
        assert!(
            sleep[0]
                .2
                .starts_with("Sleep lifecycle hook (5) for Container \"c\"")
        );
    }
}
