//! `grpc` probes: one unary call of the standard health service, `grpc.health.v1.Health/Check`,
//! over HTTP/2 without TLS, as the kubelet's prober makes it (`pkg/probe/grpc`), with its
//! messages. One call on a fresh connection needs little of HTTP/2: the preface, SETTINGS (and
//! their ACK), one HEADERS + DATA request, and reading the response's HEADERS, DATA and trailers.
//! The server is untrusted: frames are bounded, so is everything read, and the whole exchange
//! shares the probe's timeout.

mod frame;
pub mod hpack;
mod tables;

use super::check::{USER_AGENT, go_error, join_host_port};
use crate::probe::state::Outcome;
use frame::{Conn, Frame};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const PATH: &str = "/grpc.health.v1.Health/Check";
/// The largest response message accepted (a `HealthCheckResponse` is 2 bytes).
const MAX_MESSAGE: usize = 4096;
/// How often a refused connection is tried again within the timeout (grpc-go's dial blocks and
/// retries until its deadline, so a server that comes up within the timeout is reached).
const REDIAL: Duration = Duration::from_millis(200);

/// gRPC status codes by number, as grpc-go prints them.
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];
const UNIMPLEMENTED: u32 = 12;
const DEADLINE_EXCEEDED: u32 = 4;
const INTERNAL: u32 = 13;
const UNAVAILABLE: u32 = 14;

/// `HealthCheckResponse.ServingStatus`.
const SERVING_STATUS: [&str; 4] = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"];

/// A call that did not return a message: a gRPC status, or the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcError {
    Status(u32, String),
    Deadline,
}

fn status(code: u32, desc: impl Into<String>) -> RpcError {
    RpcError::Status(code, desc.into())
}

/// Go's `%v` of a whole number of seconds.
fn go_secs(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// Runs the probe against `host:port` (the pod's IP: a grpc probe has no host).
pub fn probe(host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
    let addr = join_host_port(host, port);
    let deadline = Instant::now() + timeout;
    let stream = match dial(&addr, deadline) {
        Ok(s) => s,
        Err(None) => {
            return Outcome::Failure(format!(
                "timeout: failed to connect service {addr:?} within {}: context deadline exceeded",
                go_secs(timeout)
            ));
        }
        Err(Some(m)) => {
            return Outcome::Failure(format!("error: failed to connect service at {addr:?}: {m}"));
        }
    };
    match call(stream, &addr, service, deadline) {
        Ok(1) => Outcome::Success,
        Ok(s) => Outcome::Failure(format!(
            "service unhealthy (responded with {:?})",
            SERVING_STATUS
                .get(s as usize)
                .map_or(s.to_string(), |n| n.to_string())
        )),
        Err(RpcError::Deadline) | Err(RpcError::Status(DEADLINE_EXCEEDED, _)) => {
            Outcome::Failure(format!(
                "timeout: health rpc did not complete within {}",
                go_secs(timeout)
            ))
        }
        Err(RpcError::Status(UNIMPLEMENTED, m)) => Outcome::Failure(format!(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {m}"
        )),
        Err(RpcError::Status(code, m)) => Outcome::Failure(format!(
            "error: health rpc probe failed: rpc error: code = {} desc = {m}",
            CODES
                .get(code as usize)
                .map_or(format!("Code({code})"), |c| c.to_string())
        )),
    }
}

/// Connects, trying again until the deadline; `Err(None)`: the deadline passed; `Err(Some)`:
/// the address cannot be resolved.
fn dial(addr: &str, deadline: Instant) -> Result<TcpStream, Option<String>> {
    let sa: SocketAddr = addr
        .to_socket_addrs()
        .map_err(|e| Some(go_error(&e)))?
        .next()
        .ok_or_else(|| Some("no such host".to_string()))?;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(None);
        }
        match TcpStream::connect_timeout(&sa, left) {
            Ok(s) => return Ok(s),
            Err(_) => {
                std::thread::sleep(REDIAL.min(deadline.saturating_duration_since(Instant::now())))
            }
        }
    }
}

/// The protobuf `HealthCheckRequest { service }`, behind gRPC's 5-byte message prefix.
fn request_message(service: &str) -> Vec<u8> {
    let mut pb = Vec::new();
    if !service.is_empty() {
        pb.push(0x0a); // field 1, length-delimited
        let mut n = service.len();
        while n >= 0x80 {
            pb.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        pb.push(n as u8);
        pb.extend_from_slice(service.as_bytes());
    }
    let mut out = vec![0u8];
    out.extend_from_slice(&(pb.len() as u32).to_be_bytes());
    out.extend_from_slice(&pb);
    out
}

fn varint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// `HealthCheckResponse.status` (field 1) from a protobuf message; unknown fields are skipped.
fn serving_status(mut pb: &[u8]) -> Result<u32, RpcError> {
    let bad = || status(INTERNAL, "grpc: failed to unmarshal the received message");
    let mut out = 0u32; // proto3: an absent field is 0, UNKNOWN
    while !pb.is_empty() {
        let (key, n) = varint(pb).ok_or_else(bad)?;
        pb = &pb[n..];
        let skip = match key & 7 {
            0 => {
                let (v, n) = varint(pb).ok_or_else(bad)?;
                if key >> 3 == 1 {
                    out = u32::try_from(v).map_err(|_| bad())?;
                }
                n
            }
            1 => 8,
            2 => {
                let (len, n) = varint(pb).ok_or_else(bad)?;
                n.checked_add(usize::try_from(len).map_err(|_| bad())?)
                    .ok_or_else(bad)?
            }
            5 => 4,
            _ => return Err(bad()),
        };
        pb = pb.get(skip..).ok_or_else(bad)?;
    }
    Ok(out)
}

/// `grpc-message` is percent-encoded (the gRPC HTTP/2 spec).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The call's end from its trailers (or the headers of a trailers-only response).
fn trailer_status(h: &[(String, String)]) -> Result<(), RpcError> {
    let code = header(h, "grpc-status").ok_or_else(|| {
        status(
            INTERNAL,
            "server closed the stream without sending trailers",
        )
    })?;
    let code: u32 = code.parse().map_err(|_| {
        status(
            INTERNAL,
            format!("transport: malformed grpc-status: {code:?}"),
        )
    })?;
    if code == 0 {
        return Ok(());
    }
    Err(status(
        code,
        percent_decode(header(h, "grpc-message").unwrap_or("")),
    ))
}

/// One `Check` on a fresh connection: the serving status the server answered.
pub fn call(
    stream: TcpStream,
    authority: &str,
    service: &str,
    deadline: Instant,
) -> Result<u32, RpcError> {
    let mut conn = Conn::new(stream, deadline);
    let left_ms = deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .max(1);
    let timeout = format!("{left_ms}m");
    let block = hpack::encode(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", PATH),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("user-agent", USER_AGENT),
        ("te", "trailers"),
        ("grpc-timeout", &timeout),
    ]);
    conn.start(&block, &request_message(service))?;
    let mut decoder = hpack::Decoder::new();
    let mut headers: Option<Vec<(String, String)>> = None;
    let mut body: Vec<u8> = Vec::new();
    loop {
        match conn.next()? {
            Frame::Headers { block, end_stream } => {
                let h = decoder
                    .decode(&block)
                    .map_err(|e| status(INTERNAL, format!("transport: {}", e.0)))?;
                if headers.is_none() {
                    let code = header(&h, ":status").unwrap_or("");
                    if code != "200" {
                        return Err(status(
                            UNAVAILABLE,
                            format!("unexpected HTTP status code received from server: {code}"),
                        ));
                    }
                    let ct = header(&h, "content-type").unwrap_or("");
                    if !ct.starts_with("application/grpc") {
                        return Err(status(
                            INTERNAL,
                            format!("transport: received unexpected content-type {ct:?}"),
                        ));
                    }
                    if end_stream {
                        trailer_status(&h)?;
                        return Err(status(INTERNAL, "server sent no response message"));
                    }
                    headers = Some(h);
                } else {
                    trailer_status(&h)?;
                    return message(&body);
                }
            }
            Frame::Data { data, end_stream } => {
                if headers.is_none() {
                    return Err(status(INTERNAL, "transport: DATA before HEADERS"));
                }
                if body.len() + data.len() > MAX_MESSAGE + 5 {
                    return Err(status(
                        8, // ResourceExhausted, as grpc-go says of a message too large
                        format!("grpc: received message larger than max ({MAX_MESSAGE})"),
                    ));
                }
                body.extend_from_slice(&data);
                if end_stream {
                    return Err(status(
                        INTERNAL,
                        "server closed the stream without sending trailers",
                    ));
                }
            }
            Frame::Reset(code) => {
                return Err(status(
                    INTERNAL,
                    format!("stream terminated by RST_STREAM with error code: {code}"),
                ));
            }
        }
    }
}

/// The one response message: prefix, then the protobuf.
fn message(body: &[u8]) -> Result<u32, RpcError> {
    if body.len() < 5 {
        return Err(status(INTERNAL, "server sent no response message"));
    }
    if body[0] != 0 {
        return Err(status(
            INTERNAL,
            "grpc: compressed message without grpc-encoding",
        ));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if body.len() != 5 + len {
        return Err(status(INTERNAL, "grpc: malformed response message"));
    }
    serving_status(&body[5..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_and_response_messages() {
        assert_eq!(request_message(""), [0, 0, 0, 0, 0]);
        assert_eq!(request_message("db"), [0, 0, 0, 0, 4, 0x0a, 2, b'd', b'b']);
        assert_eq!(message(&[0, 0, 0, 0, 2, 0x08, 1]), Ok(1));
        assert_eq!(message(&[0, 0, 0, 0, 0]), Ok(0));
        // An unknown string field before the status is skipped.
        assert_eq!(message(&[0, 0, 0, 0, 5, 0x12, 1, b'x', 0x08, 2]), Ok(2));
        assert!(message(&[0, 0, 0, 0, 3, 0x12, 9, b'x']).is_err());
        assert!(message(&[1, 0, 0, 0, 2, 0x08, 1]).is_err());
        assert_eq!(percent_decode("unknown%20service"), "unknown service");
    }
}
