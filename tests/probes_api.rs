//! `grpc` probes against a real gRPC server: grpcio (gRPC's C core, Debian's python3-grpcio)
//! serving the standard health service (tests/grpc/health_server.py). Fails, never skips, without
//! python3-grpcio (installed by tests/setup.sh).

use podunit::probe::state::Outcome;
use podunit::prober::grpc::probe;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc/health_server.py");
const T: Duration = Duration::from_secs(1);

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[&str]) -> Server {
    let mut child = Command::new("/usr/bin/python3")
        .arg(SERVER)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (with python3-grpcio) runs the gRPC health server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the gRPC server did not start: {line:?}"));
    Server { child, port }
}

fn failure(o: Outcome) -> String {
    match o {
        Outcome::Failure(m) => m,
        o => panic!("expected a failure, got {o:?}"),
    }
}

#[test]
fn health_check_against_grpcio() {
    let s = serve(&["=1", "db=2", "cache=3", "slow=slow"]);
    assert_eq!(probe("127.0.0.1", s.port, "", T), Outcome::Success);
    assert_eq!(
        failure(probe("127.0.0.1", s.port, "db", T)),
        "service unhealthy (responded with \"NOT_SERVING\")"
    );
    assert_eq!(
        failure(probe("127.0.0.1", s.port, "cache", T)),
        "service unhealthy (responded with \"SERVICE_UNKNOWN\")"
    );
    assert_eq!(
        failure(probe("127.0.0.1", s.port, "nope", T)),
        "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
    );
    // A long service name (lengths above one byte in HPACK and protobuf) is still one call.
    let long = "x".repeat(200);
    assert!(failure(probe("127.0.0.1", s.port, &long, T)).contains("code = NotFound"));
    assert_eq!(
        failure(probe("127.0.0.1", s.port, "slow", T)),
        "timeout: health rpc did not complete within 1s"
    );
    // Many probes in a row on fresh connections: nothing is left half-open to slow the server.
    for _ in 0..50 {
        assert_eq!(probe("127.0.0.1", s.port, "", T), Outcome::Success);
    }
}

#[test]
fn a_server_without_the_health_service() {
    let s = serve(&["--no-health"]);
    let m = failure(probe("127.0.0.1", s.port, "", T));
    assert!(
        m.starts_with(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health)"
        ),
        "{m}"
    );
}

#[test]
fn nothing_listening_or_not_http2() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    assert_eq!(
        failure(probe("127.0.0.1", port, "", T)),
        format!(
            "timeout: failed to connect service \"127.0.0.1:{port}\" within 1s: context deadline exceeded"
        )
    );
    // An HTTP/1 server that answers anything with garbage: refused as a protocol error, quickly.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(2) {
            let mut s = s.unwrap();
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let m = failure(probe("127.0.0.1", port, "", T));
    assert!(
        m.starts_with("error: health rpc probe failed: rpc error: code = "),
        "{m}"
    );
}
