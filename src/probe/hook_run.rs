//! Running `httpGet` and `sleep` lifecycle hooks as the kubelet's handler runner does
//! (`pkg/kubelet/lifecycle/handlers.go`): `podunit hook`, which systemd runs as the container
//! unit's `ExecStartPost=` or `ExecStop=` (see [`super::hook`]).

use super::check::{self, Get};
use std::time::Duration;

/// The kubelet's `User-Agent` for hooks: `kube-lifecycle/<major>.<minor>`.
pub const USER_AGENT: &str = "kube-lifecycle/1.33";

/// An `httpGet` hook. Any response completes it: the kubelet looks only at whether the request
/// was answered, not at the status code. `Err`: the kubelet's error (`Get "url": ...`). An empty
/// host is the pod's IP. No timeout of its own, as the kubelet's: systemd's start or stop timeout
/// ends it.
pub fn http(req: &Get<'_>, pod_ip: &str) -> Result<(), String> {
    if req.port == 0 {
        // A name no container port has (the API server accepts it; the kubelet fails the hook).
        return Err("couldn't find port: no container port has the hook's port name".into());
    }
    let host = if req.host.is_empty() {
        pod_ip
    } else {
        req.host
    };
    let req = Get { host, ..*req };
    check::get(&req, None, USER_AGENT).map(|_| ())
}

/// A `sleep` hook: waits `seconds` (zero returns at once). Cut short by systemd's timeout, as the
/// kubelet's grace period cuts it short.
pub fn sleep(seconds: u64) {
    std::thread::sleep(Duration::from_secs(seconds));
}

/// Whether a preStop hook should run: only when the container is being stopped while its main
/// process runs. systemd runs `ExecStop=` after any exit of the main process too, but sets
/// `$MAINPID` only while it is alive; the kubelet runs preStop only when it kills a container.
pub fn main_process_running(mainpid: Option<&str>) -> bool {
    mainpid.is_some_and(|p| p.parse::<u32>().is_ok_and(|p| p > 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    #[test]
    fn any_answer_completes_an_http_hook() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 500 X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .unwrap();
            String::from_utf8_lossy(&got).to_lowercase()
        });
        let headers = [("X-Hook".to_string(), "1".to_string())];
        let req = Get {
            https: false,
            host: "",
            port,
            path: "/stop",
            headers: &headers,
        };
        assert_eq!(http(&req, "127.0.0.1"), Ok(()));
        let head = t.join().unwrap();
        assert!(head.starts_with("get /stop http/1.1\r\n"), "{head}");
        assert!(
            head.contains("user-agent: kube-lifecycle/1.33\r\n"),
            "{head}"
        );
        assert!(head.contains("x-hook: 1\r\n"), "{head}");
        // Nobody listens any more: the hook fails with Go's words.
        let err = http(&req, "127.0.0.1").unwrap_err();
        assert!(
            err.starts_with(&format!("Get \"http://127.0.0.1:{port}/stop\": ")),
            "{err}"
        );
        let unnamed = Get { port: 0, ..req };
        assert!(http(&unnamed, "127.0.0.1").is_err());
    }

    #[test]
    fn pre_stop_only_while_the_main_process_runs() {
        assert!(main_process_running(Some("42")));
        assert!(!main_process_running(None));
        assert!(!main_process_running(Some("")));
        assert!(!main_process_running(Some("0")));
    }
}
