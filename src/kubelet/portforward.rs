//! `/portForward/{namespace}/{pod}` (also with the pod's UID after its name): what `kubectl
//! port-forward` reaches through the API server, upgraded to SPDY/3.1 with the
//! `portforward.k8s.io` protocol (the kubelet's `cri/streaming/portforward/httpstream.go`), or
//! to WebSocket ([`super::portforward_ws`]).
//! Each forwarded connection is a pair of streams the client opens, `streamType` `error` and
//! `data`, with the same `port` and `requestID` headers. Once both are there the node connects
//! to the port on the pod's localhost (pods share the host's network) and copies between the
//! data stream and that connection; why it could not (connection refused, ...) is written on the
//! error stream, which kubectl prints as "an error occurred forwarding L -> P: ...".
//! A pod with a network namespace of its own is reached through a dialer inside it
//! ([`super::netns_dial`]), started at the session's first connection, which hands back each
//! connected socket.
//!
//! One thread per session and one poll loop, as exec: at most
//! [`MAX_PAIRS`](super::portforward_streams::MAX_PAIRS) forwarded
//! connections, a bounded backlog toward each pod connection (the client's frames are read only
//! while every backlog has room), and writes to the client bounded by the socket's timeout, so a
//! client that never reads costs its own session and nothing else.

use super::http::Request;
use super::portforward_streams::{Added, Pairs};
use super::portforward_target::{
    BACKLOG, CHUNK, IDLE_TIMEOUT, PodNetwork, Target, dial, forward_error, write_backlog,
};

use super::context::{self, State, Tls};
use super::spdy;
use super::spdyconn::{self, Conn, OwnedFrame};
use super::{portforward_ws, wsconn};
use crate::generate::output::{self, GeneratedPod};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// The one protocol spoken.
pub const PROTOCOL: &str = "portforward.k8s.io";
/// How long a pair has to get its second stream (the kubelet's default).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// Once one direction of a forwarded connection has ended, how long the other may go on
/// (the runtimes' own grace, as socat's).
const GRACE: Duration = Duration::from_secs(1);
/// Serves the request; returns whether the connection may carry another (never, once
/// upgraded).
pub(super) fn port_forward(state: &State, stream: &mut Tls, req: &Request, rest: &str) -> bool {
    let parts: Vec<&str> = rest.split('/').collect();
    let (ns, name) = match parts[..] {
        [ns, pod] | [ns, pod, _] if !ns.is_empty() && !pod.is_empty() => (ns, pod),
        _ => return context::refuse(stream, req, 404, "404 page not found\n"),
    };
    if req.method != "POST" && req.method != "GET" {
        return context::refuse(stream, req, 405, "405 method not allowed\n");
    }
    let pods = super::context::generated_pods(state);
    let Some(pod) = pods
        .iter()
        .find(|p| p.key.namespace == ns && p.key.name == name)
    else {
        return context::refuse(stream, req, 404, "pod does not exist\n");
    };
    let uid = parts.get(2).copied().unwrap_or("");
    if !uid.is_empty() && pod.uid.as_deref() != Some(uid) {
        return context::refuse(stream, req, 404, "pod not found\n");
    }
    let mut target = Target {
        pod: format!("{ns}/{name}"),
        uid: pod.uid.clone().unwrap_or_default(),
        netns: private_network(state, pod).map(|pod_unit| PodNetwork {
            pod_unit,
            dialer: None,
        }),
    };
    if wsconn::is_websocket(req) {
        let ports = match portforward_ws::ports(req) {
            Ok(p) => p,
            Err(m) => return context::refuse(stream, req, 400, &m),
        };
        let protocol = match wsconn::upgrade(stream, req, &wsconn::PORT_FORWARD_PROTOCOLS) {
            Ok(p) => p,
            Err(keep) => return keep,
        };
        let mut conn = wsconn::WsConn::new(stream, protocol);
        let _ = portforward_ws::serve(&mut conn, &mut target, &ports);
        conn.close();
        return false;
    }
    if let Err(keep) = spdyconn::upgrade(stream, req, &[PROTOCOL]) {
        return keep;
    }
    let mut conn = Conn::new(stream);
    let _ = serve(&mut conn, &mut target);
    conn.close();
    false
}

/// The pod unit, when the one the generator wrote has a network namespace of its own.
fn private_network(state: &State, pod: &GeneratedPod) -> Option<String> {
    let unit = pod.pod_unit.as_ref()?;
    let path = state.paths.host(output::GENERATOR_DIR).join(unit);
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .any(|l| l.trim() == "PrivateNetwork=yes")
        .then(|| unit.clone())
}

/// One forwarded connection, connected.
struct Forward {
    error: u32,
    data: u32,
    sock: TcpStream,
    /// The client's bytes not yet taken by the pod.
    backlog: Vec<u8>,
    /// The client has closed its side of the data stream.
    client_fin: bool,
    /// When the first direction ended: the other has [`GRACE`] from then.
    ending: Option<Instant>,
}

/// Ends a pair: `message` (if any) on its error stream, then both streams closed.
fn end_pair(
    conn: &mut Conn<'_>,
    error: Option<u32>,
    data: Option<u32>,
    message: &str,
) -> io::Result<()> {
    if let Some(e) = error
        && !message.is_empty()
    {
        conn.send(&spdy::data(e, false, message.as_bytes()))?;
    }
    for id in [data, error].into_iter().flatten() {
        conn.send(&spdy::data(id, true, b""))?;
    }
    Ok(())
}

/// The session: streams as they come, connections as their pairs complete, bytes both ways.
fn serve(conn: &mut Conn<'_>, target: &mut Target) -> io::Result<()> {
    let mut pairs = Pairs::default();
    let mut fwd: BTreeMap<String, Forward> = BTreeMap::new();
    let mut buf = vec![0u8; CHUNK];
    let mut last_activity = Instant::now();
    // Reads block only where poll said there is something.
    let _ = conn.tls.sock.set_read_timeout(None);
    loop {
        while fwd.values().all(|f| f.backlog.len() < BACKLOG) {
            let Some(f) = conn.next_frame()? else { break };
            if !frame(conn, target, &mut pairs, &mut fwd, f)? {
                return Ok(());
            }
        }
        for (p, msg) in pairs.expire(Instant::now(), STREAM_CREATION_TIMEOUT) {
            end_pair(conn, p.error, p.data, &msg)?;
        }
        let room = fwd.values().all(|f| f.backlog.len() < BACKLOG);
        let read_sock = !conn.eof && room;
        let ready: Vec<(String, bool, bool)>;
        let (sock_ready, n) = {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(1 + fwd.len());
            if read_sock {
                fds.push(PollFd::new(conn.tls.sock.as_fd(), PollFlags::POLLIN));
            }
            let base = fds.len();
            for f in fwd.values() {
                let mut flags = PollFlags::POLLIN;
                if !f.backlog.is_empty() {
                    flags |= PollFlags::POLLOUT;
                }
                fds.push(PollFd::new(f.sock.as_fd(), flags));
            }
            let n = poll(&mut fds, PollTimeout::from(1000u16)).map_err(io::Error::from)?;
            let ev = |i: usize| fds[i].revents().unwrap_or(PollFlags::empty());
            let readable = PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR;
            ready = fwd
                .keys()
                .enumerate()
                .map(|(i, r)| {
                    let e = ev(base + i);
                    (
                        r.clone(),
                        e.intersects(readable),
                        e.contains(PollFlags::POLLOUT),
                    )
                })
                .collect();
            (read_sock && !ev(0).is_empty(), n)
        };
        if n == 0 {
            if fwd.is_empty() && pairs.is_empty() && last_activity.elapsed() >= IDLE_TIMEOUT {
                return Err(io::ErrorKind::TimedOut.into());
            }
        } else {
            last_activity = Instant::now();
        }
        if sock_ready && !conn.fill()? {
            // The client has gone: every connection goes with it.
            return Ok(());
        }
        for (r, readable, writable) in ready {
            let Some(f) = fwd.get_mut(&r) else { continue };
            if writable {
                write_backlog(&mut f.sock, &mut f.backlog);
            }
            if f.client_fin && f.backlog.is_empty() && f.ending.is_none() {
                let _ = f.sock.shutdown(Shutdown::Write);
                f.ending = Some(Instant::now());
            }
            let mut done = f.ending.is_some_and(|t| t.elapsed() >= GRACE);
            if readable {
                match f.sock.read(&mut buf) {
                    Ok(0) => done = true,
                    Ok(n) => conn.send(&spdy::data(f.data, false, &buf[..n]))?,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => done = true,
                }
            }
            if done {
                let (e, d) = (f.error, f.data);
                fwd.remove(&r);
                pairs.remove(&r);
                end_pair(conn, Some(e), Some(d), "")?;
            }
        }
    }
}

/// Acts on one frame from the client; false when the session is over.
fn frame(
    conn: &mut Conn<'_>,
    target: &mut Target,
    pairs: &mut Pairs,
    fwd: &mut BTreeMap<String, Forward>,
    f: OwnedFrame,
) -> io::Result<bool> {
    match f {
        OwnedFrame::Ping(id) => conn.send(&spdy::ping(id))?,
        OwnedFrame::GoAway => return Ok(false),
        OwnedFrame::SynStream { stream, block } => {
            let headers = conn.inflate.block(&block).map_err(context::bad)?;
            match pairs.add(stream, &headers, Instant::now()) {
                Added::Reset(_) => conn.send(&spdy::rst_stream(stream, spdy::CANCEL))?,
                Added::Refused => conn.send(&spdy::rst_stream(stream, spdy::REFUSED_STREAM))?,
                added => {
                    let block = conn.deflate.block(&[]);
                    conn.send(&spdy::syn_reply(stream, false, &block))?;
                    match added {
                        Added::Duplicate {
                            error: Some(e),
                            message,
                        } => conn.send(&spdy::data(e, false, message.as_bytes()))?,
                        Added::Complete(r) => start(conn, target, pairs, fwd, r)?,
                        _ => {}
                    }
                }
            }
        }
        OwnedFrame::Data { stream, fin, data } => {
            let Some(r) = pairs.request_of(stream) else {
                return Ok(true);
            };
            if let Some(f) = fwd.get_mut(r)
                && f.data == stream
                && !f.client_fin
            {
                f.backlog.extend_from_slice(&data);
                f.client_fin = fin;
            }
        }
        // The client gave up a stream: its connection ends.
        OwnedFrame::RstStream(stream) => {
            if let Some(r) = pairs.request_of(stream).map(str::to_string) {
                pairs.remove(&r);
                fwd.remove(&r);
            }
        }
        OwnedFrame::Ignored => {}
    }
    Ok(true)
}

/// Connects the complete pair of request `r`, or says on its error stream why not.
fn start(
    conn: &mut Conn<'_>,
    target: &mut Target,
    pairs: &mut Pairs,
    fwd: &mut BTreeMap<String, Forward>,
    r: String,
) -> io::Result<()> {
    let Some(p) = pairs.get(&r).cloned() else {
        return Ok(());
    };
    let (Some(error), Some(data)) = (p.error, p.data) else {
        return Ok(());
    };
    let sock = dial(target, p.port).and_then(|s| {
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(s)
    });
    match sock {
        Ok(sock) => {
            fwd.insert(
                r,
                Forward {
                    error,
                    data,
                    sock,
                    backlog: Vec::new(),
                    client_fin: false,
                    ending: None,
                },
            );
            Ok(())
        }
        Err(why) => {
            pairs.remove(&r);
            end_pair(
                conn,
                Some(error),
                Some(data),
                &forward_error(target, p.port, &why),
            )
        }
    }
}
