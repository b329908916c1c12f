//! Running `httpGet` and `sleep` lifecycle hooks as the kubelet's handler runner does
//! (`pkg/kubelet/lifecycle/handlers.go`): `podunit hook`, which systemd runs as the container
//! unit's `ExecStartPost=` or `ExecStop=` (see [`crate::probe::hook`]).

use super::check::{self, Get};
use std::time::Duration;

/// The kubelet's `User-Agent` for hooks: `kube-lifecycle/<major>.<minor>`.
pub const USER_AGENT: &str = "kube-lifecycle/1.33";

/// How an `httpGet` hook was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// As asked.
    Direct,
    /// HTTPS was answered in HTTP and the request repeated in HTTP, which was answered: the
    /// kubelet's `LifecycleHTTPFallback` warning names this `host:port`.
    HttpFallback(String),
}

/// An `httpGet` hook. Any response completes it: the kubelet looks only at whether the request
/// was answered, not at the status code. HTTPS is not verified (the kubelet's `InsecureSkipVerify`);
/// when the server answers the TLS handshake in HTTP, the request is repeated in HTTP without its
/// `Authorization` header, and, answered, completes the hook (`runHTTPHandler`). `Err`: the
/// kubelet's error (`Get "url": ...`). An empty host is the pod's IP. No timeout of its own, as
/// the kubelet's: systemd's start or stop timeout ends it.
pub fn http(req: &Get<'_>, pod_ip: &str) -> Result<Answer, String> {
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
    let Err(e) = check::get(&req, None, USER_AGENT) else {
        return Ok(Answer::Direct);
    };
    if !req.https || !answers_tls_in_http(host, req.port) {
        return Err(e);
    }
    let headers: Vec<(String, String)> = req
        .headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("authorization"))
        .cloned()
        .collect();
    let plain = Get {
        https: false,
        headers: &headers,
        ..req
    };
    match check::get(&plain, None, USER_AGENT) {
        Ok(_) => Ok(Answer::HttpFallback(check::join_host_port(host, req.port))),
        // Go's words for the first error, which stays the hook's.
        Err(_) => Err(format!(
            "Get {:?}: http: server gave HTTP response to HTTPS client",
            check::url(true, host, req.port, req.path)
        )),
    }
}

/// A TLS 1.2 ClientHello (one cipher suite, no extensions): what is sent to see whether the
/// server answers TLS in HTTP.
#[rustfmt::skip]
const CLIENT_HELLO: [u8; 50] = [
    0x16, 0x03, 0x01, 0x00, 0x2d, // record: handshake, 45 bytes
    0x01, 0x00, 0x00, 0x29, 0x03, 0x03, // ClientHello, 41 bytes, TLS 1.2
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // random
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0x00, // no session id
    0x00, 0x02, 0xc0, 0x2f, // TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
    0x01, 0x00, // null compression
];

/// Whether the server answers a TLS handshake with an HTTP response: Go's test for "server gave
/// HTTP response to HTTPS client" (the first five bytes read are `HTTP/`).
fn answers_tls_in_http(host: &str, port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = check::connect(host, port, Duration::from_secs(10)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
    if s.write_all(&CLIENT_HELLO).is_err() {
        return false;
    }
    let mut head = [0u8; 5];
    s.read_exact(&mut head).is_ok() && &head == b"HTTP/"
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

/// What systemd sets for a control process (an `ExecStop=` command) or for every process of a
/// unit, and not from the unit's `Environment=`/`EnvironmentFile=`: left out of the environment
/// an exec preStop gets, which is then the container's, as an exec probe's
/// ([`super::enter::environment`]).
const SYSTEMD_VARS: [&str; 16] = [
    "MAINPID",
    "SERVICE_RESULT",
    "EXIT_CODE",
    "EXIT_STATUS",
    "INVOCATION_ID",
    "JOURNAL_STREAM",
    "SYSTEMD_EXEC_PID",
    "MANAGERPID",
    "NOTIFY_SOCKET",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
    "MEMORY_PRESSURE_WATCH",
    "MEMORY_PRESSURE_WRITE",
];

/// The container's environment for an exec preStop, from `podunit hook`'s own: systemd gives an
/// `ExecStop=` command the unit's `Environment=` and `EnvironmentFile=`s as it gave the main
/// process, plus variables of its own, which are dropped. (Read without D-Bus: at shutdown the
/// bus may already be gone.)
pub fn container_env(own: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    own.filter(|(k, _)| !SYSTEMD_VARS.contains(&k.as_str()) && !k.starts_with("MONITOR_"))
        .collect()
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
            let got = read_request(&mut s);
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
        assert_eq!(http(&req, "127.0.0.1"), Ok(Answer::Direct));
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

    /// Reads one request: an HTTP head, or whatever a TLS client sent first.
    fn read_request(s: &mut impl Read) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") && got.first() != Some(&0x16) {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        got
    }

    fn https_get(port: u16, headers: &[(String, String)]) -> Result<Answer, String> {
        let req = Get {
            https: true,
            host: "127.0.0.1",
            port,
            path: "/stop",
            headers,
        };
        http(&req, "")
    }

    #[test]
    fn https_answered_in_http_is_repeated_in_http_without_authorization() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        // A plain HTTP server, as Go's: a TLS handshake gets a 400, a GET its answer.
        let t = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..3 {
                let (mut s, _) = l.accept().unwrap();
                let got = read_request(&mut s);
                let reply: &[u8] = if got.first() == Some(&0x16) {
                    b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n"
                } else {
                    b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n"
                };
                let _ = s.write_all(reply);
                seen.push(String::from_utf8_lossy(&got).to_lowercase());
            }
            seen
        });
        let headers = [
            ("Authorization".to_string(), "Bearer x".to_string()),
            ("X-A".to_string(), "y".to_string()),
        ];
        assert_eq!(
            https_get(port, &headers),
            Ok(Answer::HttpFallback(format!("127.0.0.1:{port}")))
        );
        let seen = t.join().unwrap();
        let last = &seen[2];
        assert!(last.starts_with("get /stop http/1.1\r\n"), "{last}");
        assert!(last.contains("x-a: y\r\n"), "{last}");
        assert!(!last.contains("authorization"), "{last}");
        assert_eq!(
            crate::kube::hook_events::fallback_message(&format!("127.0.0.1:{port}")),
            format!(
                "request to HTTPS lifecycle hook 127.0.0.1:{port} got HTTP response, retry with HTTP succeeded"
            )
        );
    }

    #[test]
    fn https_failing_otherwise_is_not_repeated() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        // Closes every connection unanswered: no HTTP response, no fallback.
        let t = std::thread::spawn(move || {
            for _ in 0..2 {
                let (mut s, _) = l.accept().unwrap();
                read_request(&mut s);
            }
        });
        let err = https_get(port, &[]).unwrap_err();
        assert!(
            err.starts_with(&format!("Get \"https://127.0.0.1:{port}/stop\": ")),
            "{err}"
        );
        t.join().unwrap();
    }

    #[test]
    fn https_certificates_are_not_verified() {
        use std::sync::Arc;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["nobody.invalid".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let conn = rustls::ServerConnection::new(Arc::new(cfg)).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, s);
            let got = read_request(&mut tls);
            tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .unwrap();
            tls.conn.send_close_notify();
            let _ = tls.flush();
            String::from_utf8_lossy(&got).to_lowercase()
        });
        assert_eq!(https_get(port, &[]), Ok(Answer::Direct));
        assert!(t.join().unwrap().starts_with("get /stop http/1.1\r\n"));
    }

    #[test]
    fn an_exec_pre_stop_gets_the_containers_environment() {
        let own = [
            ("PATH", "/usr/bin"),
            ("MAINPID", "42"),
            ("EXIT_STATUS", "0"),
            ("MARK", "from-the-manifest"),
            ("INVOCATION_ID", "x"),
            ("MONITOR_UNIT", "y"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let got = container_env(own.into_iter());
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "MARK"]);
    }

    #[test]
    fn pre_stop_only_while_the_main_process_runs() {
        assert!(main_process_running(Some("42")));
        assert!(!main_process_running(None));
        assert!(!main_process_running(Some("")));
        assert!(!main_process_running(Some("0")));
    }
}
