//! The terms of an exec or attach session, whichever transport carries it (SPDY in
//! [`super::remotecommand`], WebSocket in [`super::wsconn`]): the streams the request asks for,
//! and how the session's end is reported on its error stream.

use super::http::Request;
use crate::exec::Exit;

/// What the request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// The query of an exec request, by the kubelet's rules: `command` repeated, the stream flags
/// `input`, `output`, `error` and `tty` (as the API server names them for the kubelet; also the
/// `stdin`, `stdout`, `stderr` of its own API) set by `1` (or `true`), at least one stream.
pub fn options(req: &Request) -> Result<Options, String> {
    let o = Options {
        command: req
            .query
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect(),
        ..stream_flags(req)?
    };
    if o.command.is_empty() {
        return Err("you must specify a command".into());
    }
    Ok(o)
}

/// The stream flags of an exec or attach request (no command), at least one stream.
pub fn stream_flags(req: &Request) -> Result<Options, String> {
    let set = |n: &str| matches!(req.param(n), Some("1" | "true"));
    let flag = |n: &str| {
        set(n)
            || set(match n {
                "stdin" => "input",
                "stdout" => "output",
                "stderr" => "error",
                other => other,
            })
    };
    let o = Options {
        command: Vec::new(),
        stdin: flag("stdin"),
        stdout: flag("stdout"),
        stderr: flag("stderr"),
        tty: flag("tty"),
    };
    if !(o.stdin || o.stdout || o.stderr) {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    Ok(o)
}

/// Whether `protocol` carries how the command ended as a `metav1.Status` in JSON (the kubelet's
/// `v4WriteStatusFunc`), over SPDY or WebSocket; the older ones carry an error's text only.
fn json_status(protocol: &str) -> bool {
    matches!(
        protocol,
        "v4.channel.k8s.io" | "v4.base64.channel.k8s.io" | "v5.channel.k8s.io"
    )
}

/// How the command ended, as the `error` stream of `protocol` carries it (nothing: success on
/// the older protocols).
pub fn status_message(protocol: &str, argv: &[String], r: &Result<Exit, String>) -> Vec<u8> {
    let code = match r {
        Ok(Exit::Code(0)) => None,
        Ok(Exit::Code(c)) => Some(*c),
        // As the runtimes report a command killed by a signal.
        Ok(Exit::Signal(s)) => Some(128 + s),
        Err(_) => None,
    };
    let v4 = json_status(protocol);
    let body = match (r, code) {
        (Ok(_), None) if v4 => serde_json::json!({"metadata": {}, "status": "Success"}),
        (Ok(_), None) => return Vec::new(),
        (_, Some(c)) => {
            let message = format!(
                "command terminated with non-zero exit code: error executing command {argv:?}, \
                 exit code {c}"
            );
            if !v4 {
                return message.into_bytes();
            }
            serde_json::json!({"metadata": {}, "status": "Failure", "message": message,
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": c.to_string()}]}})
        }
        (Err(e), None) => {
            let message = format!("Internal error occurred: {e}");
            if !v4 {
                return message.into_bytes();
            }
            serde_json::json!({"metadata": {}, "status": "Failure", "message": message,
                "reason": "InternalError", "code": 500,
                "details": {"causes": [{"message": e}]}})
        }
    };
    serde_json::to_vec(&body).expect("serializable")
}
