//! `/portForward` over WebSocket, as the kubelet's `cri/streaming/portforward/websocket.go`
//! serves it (`v4.channel.k8s.io`, `v4.base64.channel.k8s.io`, or none offered): the ports are
//! named up front in the `port` query parameter (repeated, or comma-separated), and the i-th
//! port has two channels, data `2i` and error `2i+1`, each opened by the node with the port as
//! two little-endian bytes. One connection to each port, made at once: its bytes both ways on
//! the data channel, why it failed on the error channel. The session ends, closed normally,
//! once every port's connection has ended (the pod closed it, or it could not be made).
//!
//! kubectl 1.31 and later first try their own tunnel (SPDY inside a WebSocket,
//! `SPDY/3.1+portforward.k8s.io`), which an API server of 1.31 or later serves and a kubelet
//! does not: that is refused here too, and kubectl falls back to SPDY.

use super::http::Request;
use super::portforward_streams::MAX_PAIRS;
use super::portforward_target::{self, BACKLOG, CHUNK, IDLE_TIMEOUT, Target};
use super::wsconn::WsConn;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Instant;

/// The ports of a request (the kubelet's `NewV4Options`), at most [`MAX_PAIRS`].
pub fn ports(req: &Request) -> Result<Vec<u16>, String> {
    let values: Vec<&str> = req
        .query
        .iter()
        .filter(|(k, _)| k == "port")
        .map(|(_, v)| v.as_str())
        .collect();
    if values.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut ports = Vec::new();
    for v in values {
        if v.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        for p in v.split(',') {
            let port: u16 = p
                .parse()
                .map_err(|e| format!("unable to parse {v:?} as a port: {e}"))?;
            if port < 1 {
                return Err(format!("port {v:?} must be > 0"));
            }
            ports.push(port);
        }
    }
    if ports.len() > MAX_PAIRS {
        return Err(format!("at most {MAX_PAIRS} ports are forwarded at once"));
    }
    Ok(ports)
}

/// One port's connection into the pod.
struct Forward {
    sock: TcpStream,
    /// The client's bytes not yet taken by the pod.
    backlog: Vec<u8>,
}

/// The session: every port connected, then bytes both ways until each connection has ended.
pub(super) fn serve(conn: &mut WsConn<'_>, target: &mut Target, ports: &[u16]) -> io::Result<()> {
    for (i, port) in ports.iter().enumerate() {
        let b = port.to_le_bytes();
        conn.send(2 * i as u8, &b)?;
        conn.send(2 * i as u8 + 1, &b)?;
    }
    let mut fwd: Vec<Option<Forward>> = Vec::with_capacity(ports.len());
    for (i, &port) in ports.iter().enumerate() {
        let sock = portforward_target::dial(target, port).and_then(|s| {
            s.set_nonblocking(true).map_err(|e| e.to_string())?;
            Ok(s)
        });
        match sock {
            Ok(sock) => fwd.push(Some(Forward {
                sock,
                backlog: Vec::new(),
            })),
            Err(why) => {
                let msg = portforward_target::forward_error(target, port, &why);
                conn.send(2 * i as u8 + 1, msg.as_bytes())?;
                fwd.push(None);
            }
        }
    }
    let mut buf = vec![0u8; CHUNK];
    let mut last_activity = Instant::now();
    // Reads block only where poll said there is something.
    let _ = conn.tls.sock.set_read_timeout(None);
    loop {
        if fwd.iter().all(Option::is_none) {
            return Ok(());
        }
        let room =
            |fwd: &[Option<Forward>]| fwd.iter().flatten().all(|f| f.backlog.len() < BACKLOG);
        while room(&fwd) {
            let Some((ch, data)) = conn.next_message()? else {
                break;
            };
            // Data channels only: what a client sends on an error channel is dropped.
            if ch % 2 == 0
                && let Some(Some(f)) = fwd.get_mut(usize::from(ch / 2))
            {
                f.backlog.extend_from_slice(&data);
            }
        }
        let read_sock = !conn.eof && room(&fwd);
        let (sock_ready, ready, n) = {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(1 + fwd.len());
            if read_sock {
                fds.push(PollFd::new(conn.tls.sock.as_fd(), PollFlags::POLLIN));
            }
            let mut at = Vec::with_capacity(fwd.len());
            for f in &fwd {
                at.push(f.as_ref().map(|f| {
                    let mut flags = PollFlags::POLLIN;
                    if !f.backlog.is_empty() {
                        flags |= PollFlags::POLLOUT;
                    }
                    fds.push(PollFd::new(f.sock.as_fd(), flags));
                    fds.len() - 1
                }));
            }
            let n = poll(&mut fds, PollTimeout::from(1000u16)).map_err(io::Error::from)?;
            let ev = |i: usize| fds[i].revents().unwrap_or(PollFlags::empty());
            let readable = PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR;
            let ready: Vec<(bool, bool)> = at
                .iter()
                .map(|i| {
                    i.map_or((false, false), |i| {
                        (
                            ev(i).intersects(readable),
                            ev(i).contains(PollFlags::POLLOUT),
                        )
                    })
                })
                .collect();
            (read_sock && !ev(0).is_empty(), ready, n)
        };
        if n == 0 {
            if last_activity.elapsed() >= IDLE_TIMEOUT {
                return Err(io::ErrorKind::TimedOut.into());
            }
        } else {
            last_activity = Instant::now();
        }
        if sock_ready && !conn.fill()? {
            // The client has gone: every connection goes with it.
            return Ok(());
        }
        for (i, (readable, writable)) in ready.into_iter().enumerate() {
            let Some(f) = fwd[i].as_mut() else { continue };
            let mut failed = None;
            if writable {
                portforward_target::write_backlog(&mut f.sock, &mut f.backlog);
            }
            let mut done = false;
            if readable {
                match f.sock.read(&mut buf) {
                    Ok(0) => done = true,
                    Ok(n) => conn.send(2 * i as u8, &buf[..n])?,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => failed = Some(e.to_string()),
                }
            }
            if let Some(why) = failed {
                let msg = portforward_target::forward_error(target, ports[i], &why);
                conn.send(2 * i as u8 + 1, msg.as_bytes())?;
                done = true;
            }
            if done {
                fwd[i] = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::http;

    fn req(q: &str) -> Request {
        let head = format!("GET /portForward/default/web?{q} HTTP/1.1\r\n\r\n");
        http::parse_head(head.as_bytes()).unwrap().unwrap().0
    }

    #[test]
    fn ports_as_the_kubelet_reads_them() {
        assert_eq!(ports(&req("port=80")), Ok(vec![80]));
        assert_eq!(
            ports(&req("port=80,8080&port=9090")),
            Ok(vec![80, 8080, 9090])
        );
        assert!(ports(&req("")).unwrap_err().contains("is required"));
        assert!(
            ports(&req("port="))
                .unwrap_err()
                .contains("cannot be empty")
        );
        assert!(ports(&req("port=0")).unwrap_err().contains("must be > 0"));
        assert!(ports(&req("port=65536")).is_err());
        assert!(ports(&req("port=http")).is_err());
        let many: Vec<String> = (1..=MAX_PAIRS + 1).map(|p| p.to_string()).collect();
        assert!(ports(&req(&format!("port={}", many.join(",")))).is_err());
    }
}
