//! Running one probe: the kubelet's probers (`pkg/probe/{tcp,http,exec,grpc}`), with their messages,
//! so that events read as a kubelet's do. Network probes run in podunit-sync itself (pods share
//! the host's network); exec probes run inside the container through [`super::exec`].

use crate::probe::handler::Handler;
use crate::probe::state::Outcome;
use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The most of a response body or command output the kubelet keeps (`maxReadLength`).
pub const MAX_OUTPUT: usize = 10 * 1024;
/// Redirects followed to the same host before giving up (Go's client stops after 10).
const MAX_REDIRECTS: usize = 10;
/// The kubelet's `User-Agent`: `kube-probe/<major>.<minor>` of the Kubernetes version served.
pub const USER_AGENT: &str = "kube-probe/1.33";

/// Where a probe runs and what it may use.
pub struct Context<'a> {
    /// The pod's IP: the address probes with an empty `host` connect to.
    pub pod_ip: &'a str,
    pub timeout: Duration,
    /// Runs an exec probe's command in the container.
    pub exec: &'a dyn Fn(&[String], Duration) -> Outcome,
}

/// Runs `handler` once.
pub fn run(handler: &Handler, cx: &Context<'_>) -> Outcome {
    if let Handler::HttpGet { port: 0, .. }
    | Handler::TcpSocket { port: 0, .. }
    | Handler::Grpc { port: 0, .. } = handler
    {
        return Outcome::Error(
            "couldn't find port: no container port has the probe's port name".into(),
        );
    }
    match handler {
        Handler::Exec { command } => (cx.exec)(command, cx.timeout),
        Handler::TcpSocket { host, port } => tcp(host_or(host, cx.pod_ip), *port, cx.timeout),
        Handler::HttpGet {
            https,
            host,
            port,
            path,
            headers,
        } => http(
            *https,
            host_or(host, cx.pod_ip),
            *port,
            path,
            headers,
            cx.timeout,
        ),
        // A grpc probe has no host: always the pod's IP.
        Handler::Grpc { port, service } => {
            super::grpc::probe(cx.pod_ip, *port, service, cx.timeout)
        }
    }
}

fn host_or<'a>(host: &'a str, pod_ip: &'a str) -> &'a str {
    if host.is_empty() { pod_ip } else { host }
}

/// `host:port`, with brackets for IPv6 (Go's `net.JoinHostPort`).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// An OS error as Go prints it: `connection refused`, not `Connection refused (os error 111)`.
pub fn go_error(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::TimedOut || e.kind() == std::io::ErrorKind::WouldBlock {
        return "i/o timeout".into();
    }
    let s = e.to_string();
    let s = match s.find(" (os error") {
        Some(i) => &s[..i],
        None => &s,
    };
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Connects to the first address `host:port` resolves to.
pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, String> {
    let addr = join_host_port(host, port);
    let sa = addr
        .to_socket_addrs()
        .map_err(|e| format!("dial tcp: lookup {host}: {}", go_error(&e)))?
        .next()
        .ok_or_else(|| format!("dial tcp: lookup {host}: no such host"))?;
    TcpStream::connect_timeout(&sa, timeout.max(Duration::from_millis(1)))
        .map_err(|e| format!("dial tcp {addr}: connect: {}", go_error(&e)))
}

/// `tcpSocket`: success when the connection opens (`pkg/probe/tcp`).
pub fn tcp(host: &str, port: u16, timeout: Duration) -> Outcome {
    match connect(host, port, timeout) {
        Ok(_) => Outcome::Success,
        Err(m) => Outcome::Failure(m),
    }
}

/// The URL the kubelet requests (`formatURL`): `path` may carry a query.
pub fn url(https: bool, host: &str, port: u16, path: &str) -> String {
    let scheme = if https { "https" } else { "http" };
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    format!("{scheme}://{}{path}", join_host_port(host, port))
}

fn agent(timeout: Option<Duration>, user_agent: &str) -> ureq::Agent {
    use std::sync::Arc;
    use ureq::tls::TlsConfig;
    // The kubelet does not verify a probe's certificate (InsecureSkipVerify).
    let tls = TlsConfig::builder()
        .disable_verification(true)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(user_agent)
        .timeout_global(timeout.map(|t| t.max(Duration::from_millis(1))))
        .max_idle_connections(0)
        .input_buffer_size(16 * 1024)
        .output_buffer_size(4 * 1024)
        .max_response_header_size(16 * 1024)
        .build()
        .into()
}

fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    };
    Some(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase(),
    )
}

/// `httpGet` (`pkg/probe/http`): 200 <= code < 400 succeeds; redirects are followed to the same
/// host only, a redirect elsewhere ends the probe with a warning (and success).
pub fn http(
    https: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    timeout: Duration,
) -> Outcome {
    let req = Get {
        https,
        host,
        port,
        path,
        headers,
    };
    match get(&req, Some(timeout), USER_AGENT) {
        Err(m) => Outcome::Failure(m),
        Ok(Reply { code, .. }) if (200..300).contains(&code) => Outcome::Success,
        Ok(Reply { code, body }) if (300..400).contains(&code) => {
            Outcome::Warning(format!("Probe terminated redirects, Response body: {body}"))
        }
        Ok(Reply { code, .. }) => {
            Outcome::Failure(format!("HTTP probe failed with statuscode: {code}"))
        }
    }
}

/// One GET of an `httpGet` action (a probe's or a lifecycle hook's).
pub struct Get<'a> {
    pub https: bool,
    pub host: &'a str,
    pub port: u16,
    pub path: &'a str,
    pub headers: &'a [(String, String)],
}

impl<'a> Get<'a> {
    /// The request of an `httpGet` handler; `None` for another kind.
    pub fn of(handler: &'a Handler) -> Option<Get<'a>> {
        match handler {
            Handler::HttpGet {
                https,
                host,
                port,
                path,
                headers,
            } => Some(Get {
                https: *https,
                host,
                port: *port,
                path,
                headers,
            }),
            _ => None,
        }
    }
}

/// The last response of a [`get`]: its status and (the first [`MAX_OUTPUT`] bytes of) its body.
pub struct Reply {
    pub code: u16,
    pub body: String,
}

/// A GET as the kubelet sends it (`NewRequestForHTTPGetAction`): the headers, `Accept: */*`,
/// `user_agent`; redirects followed to the same host only (at most [`MAX_REDIRECTS`]), a redirect
/// elsewhere is the reply. `Err`: no response, in Go's words (`Get "url": ...`).
pub fn get(req: &Get<'_>, timeout: Option<Duration>, user_agent: &str) -> Result<Reply, String> {
    let agent = agent(timeout, user_agent);
    let first = url(req.https, req.host, req.port, req.path);
    let first_host = host_of(&first);
    let mut target = first.clone();
    for _ in 0..=MAX_REDIRECTS {
        let mut r = agent.get(&target).header("Accept", "*/*");
        for (k, v) in req.headers {
            r = r.header(k.as_str(), v.as_str());
        }
        let mut resp = r.call().map_err(|e| {
            let addr = host_of(&target).map_or_else(String::new, |h| {
                let port = target
                    .split_once("://")
                    .and_then(|(_, r)| r.split(['/', '?', '#']).next())
                    .and_then(|a| a.rsplit_once(':'))
                    .and_then(|(_, p)| p.parse().ok())
                    .unwrap_or(req.port);
                join_host_port(&h, port)
            });
            format!("Get {first:?}: {}", ureq_error(&e, &addr))
        })?;
        let code = resp.status().as_u16();
        let location = resp
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .map(str::to_string);
        if (300..400).contains(&code)
            && let Some(loc) = location
        {
            let next = resolve(&target, &loc);
            if host_of(&next) == first_host {
                target = next;
                continue;
            }
        }
        let mut body = Vec::new();
        let _ = resp
            .body_mut()
            .as_reader()
            .take(MAX_OUTPUT as u64)
            .read_to_end(&mut body);
        let body = String::from_utf8_lossy(&body).into_owned();
        return Ok(Reply { code, body });
    }
    Err(format!(
        "Get {first:?}: stopped after {MAX_REDIRECTS} redirects"
    ))
}

/// A `Location` against the URL it came from: absolute, host-relative or path-relative.
fn resolve(base: &str, loc: &str) -> String {
    if loc.contains("://") {
        return loc.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    let authority = rest.split('/').next().unwrap_or(rest);
    if let Some(p) = loc.strip_prefix("//") {
        return format!("{scheme}://{p}");
    }
    if loc.starts_with('/') {
        return format!("{scheme}://{authority}{loc}");
    }
    let path = rest[authority.len()..]
        .split(['?', '#'])
        .next()
        .unwrap_or("/");
    let dir = path.rsplit_once('/').map_or("", |d| d.0);
    format!("{scheme}://{authority}{dir}/{loc}")
}

/// `addr`: the `host:port` dialled, which Go names in connection errors.
fn ureq_error(e: &ureq::Error, addr: &str) -> String {
    use std::io::ErrorKind::{
        AddrNotAvailable, ConnectionRefused, HostUnreachable, NetworkUnreachable,
    };
    match e {
        ureq::Error::Io(io)
            if matches!(
                io.kind(),
                ConnectionRefused | HostUnreachable | NetworkUnreachable | AddrNotAvailable
            ) =>
        {
            format!("dial tcp {addr}: connect: {}", go_error(io))
        }
        ureq::Error::Io(io) => go_error(io),
        ureq::Error::Timeout(_) => {
            "context deadline exceeded (Client.Timeout exceeded while awaiting headers)".into()
        }
        ureq::Error::ConnectionFailed => format!("dial tcp {addr}: connect: connection refused"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A one-connection-per-response HTTP server on loopback: the real client against real sockets.
    fn serve(responses: Vec<String>) -> u16 {
        serve_seen(responses).0
    }

    /// As [`serve`], handing over each request's head (lower-cased).
    fn serve_seen(responses: Vec<String>) -> (u16, std::sync::mpsc::Receiver<String>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for r in responses {
                let (mut s, _) = l.accept().unwrap();
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let req = String::from_utf8_lossy(&got).to_lowercase();
                assert!(req.contains("user-agent: kube-probe/"), "{req}");
                s.write_all(r.as_bytes()).unwrap();
                let _ = tx.send(req);
            }
        });
        (port, rx)
    }

    #[test]
    fn http_headers_and_host_as_the_kubelet_sends_them() {
        let (port, seen) = serve_seen(vec![resp(200, "")]);
        let headers = [
            ("Host".to_string(), "probe.example".to_string()),
            ("X-Check".to_string(), "yes".to_string()),
        ];
        assert_eq!(
            http(false, "127.0.0.1", port, "/h?x=1", &headers, T),
            Outcome::Success
        );
        let req = seen.recv().unwrap();
        assert!(req.starts_with("get /h?x=1 http/1.1\r\n"), "{req}");
        // A `Host` header replaces the address as the request's host (Go's `req.Host`).
        assert_eq!(req.matches("host:").count(), 1, "{req}");
        assert!(req.contains("host: probe.example\r\n"), "{req}");
        assert!(req.contains("x-check: yes\r\n"), "{req}");
        assert!(req.contains("accept: */*\r\n"), "{req}");
    }

    fn resp(code: u16, extra: &str) -> String {
        format!("HTTP/1.1 {code} X\r\ncontent-length: 2\r\nconnection: close\r\n{extra}\r\nok")
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn http_status_rules() {
        for (code, ok) in [
            (200, true),
            (204, true),
            (399, false),
            (400, false),
            (500, false),
        ] {
            let port = serve(vec![resp(code, "")]);
            let o = http(false, "127.0.0.1", port, "/healthz", &[], T);
            match (code, o) {
                (200 | 204, Outcome::Success) => assert!(ok),
                (399, Outcome::Warning(m)) => assert!(m.starts_with("Probe terminated redirects")),
                (c, Outcome::Failure(m)) => {
                    assert_eq!(m, format!("HTTP probe failed with statuscode: {c}"))
                }
                (c, o) => panic!("{c}: {o:?}"),
            }
        }
    }

    #[test]
    fn http_redirects_same_host_only() {
        let port = serve(vec![resp(302, "location: /ok\r\n"), resp(200, "")]);
        assert_eq!(
            http(false, "127.0.0.1", port, "/", &[], T),
            Outcome::Success
        );
        let port = serve(vec![resp(301, "location: http://example.invalid/\r\n")]);
        assert!(matches!(
            http(false, "127.0.0.1", port, "/", &[], T),
            Outcome::Warning(_)
        ));
    }

    #[test]
    fn tcp_and_refused_messages() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(tcp("127.0.0.1", port, T), Outcome::Success);
        drop(l);
        assert_eq!(
            tcp("127.0.0.1", port, T),
            Outcome::Failure(format!(
                "dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
        assert_eq!(
            http(false, "127.0.0.1", port, "/", &[], T),
            Outcome::Failure(format!(
                "Get \"http://127.0.0.1:{port}/\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
    }

    #[test]
    fn urls_and_redirect_targets() {
        assert_eq!(url(true, "::1", 443, "x?a=1"), "https://[::1]:443/x?a=1");
        assert_eq!(resolve("http://h:1/a/b", "c"), "http://h:1/a/c");
        assert_eq!(resolve("http://h:1/a/b", "/c"), "http://h:1/c");
        assert_eq!(host_of("http://[::1]:8/x").as_deref(), Some("::1"));
    }
}
