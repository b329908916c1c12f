//! `/attach/{namespace}/{pod}/{container}` (also with the pod's UID before the container): what
//! `kubectl attach` reaches, the remotecommand protocol of `/exec` without a command.
//!
//! How attach maps onto systemd: a container's stdout and stderr go to the journal, so attaching
//! is following the container's journal from now on, the same source and code as
//! `/containerLogs?follow` ([`crate::logs::stream`]), until the client goes or the container's
//! run ends (its main process gone or a new invocation). Both outputs arrive on one stream,
//! stdout's when asked for, else stderr's: the journal does not say which of the two a line
//! came from. Containers have no stdin and no terminal (stdin is `/dev/null`; `stdin` and `tty`
//! in a manifest are warned about and ignored), so an attach asking for stdin or a TTY is
//! refused before the upgrade, with the reason, rather than connected to nothing.

use super::http::{self, Request};
use super::remotecommand::{self, Conn, Options, Streams};
use super::server::{State, Tls};
use super::spdy;
use crate::exec::{self, Exit};
use crate::logs::{self, LogOptions};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::cell::{Cell, RefCell};
use std::io::{self, Write};
use std::os::fd::AsFd;

/// Output read from the journal per frame (spdystream's own chunk).
const CHUNK: usize = 32 * 1024;

/// Why an attach request is refused before the upgrade, if it is: the container has no stdin
/// and no terminal to attach to.
pub fn refusal(o: &Options, pod: &str, container: &str) -> Option<String> {
    if o.stdin {
        return Some(format!(
            "container {container} in pod {pod} has no stdin to attach to: containers run with \
             stdin from /dev/null (spec.containers[].stdin is not supported)\n"
        ));
    }
    if o.tty {
        return Some(format!(
            "container {container} in pod {pod} did not allocate a TTY (spec.containers[].tty \
             is not supported)\n"
        ));
    }
    None
}

/// Serves the request; returns whether the connection may carry another (never, once
/// upgraded).
pub(super) fn attach(state: &State, stream: &mut Tls, req: &Request, rest: &str) -> bool {
    let reply =
        |stream: &mut Tls, status: u16, msg: &str| remotecommand::refuse(stream, req, status, msg);
    let Some((ns, name, container)) = remotecommand::container_path(rest) else {
        return reply(stream, 404, "404 page not found\n");
    };
    if req.method != "POST" && req.method != "GET" {
        return reply(stream, 405, "405 method not allowed\n");
    }
    let opts = match remotecommand::stream_flags(req) {
        Ok(o) => o,
        Err(m) => return reply(stream, 400, &m),
    };
    let pods = super::routes::generated_pods(state);
    let (key, unit) = match exec::find_pod(&pods, ns, name)
        .and_then(|p| Ok((p.key.clone(), exec::container_unit(p, container)?)))
    {
        Ok((k, u)) => (k, u.to_string()),
        Err(e) => return reply(stream, 404, &format!("{e}\n")),
    };
    let pod = format!("{ns}/{name}");
    if let Some(why) = refusal(&opts, &pod, container) {
        // As a `metav1.Status`: what clients decode from a refused upgrade and print.
        let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": why.trim_end(), "reason": "BadRequest", "code": 400});
        let body = serde_json::to_vec(&body).expect("serializable");
        return http::write_response(stream, 400, "application/json", &body, req.close).is_ok();
    }
    let run = crate::systemd::Client::system().and_then(|c| {
        let s = c.unit_state(&unit)?;
        Ok((c, s.invocation_id, s.main_pid))
    });
    let (client, invocation) = match run {
        Ok((c, id, pid)) if pid != 0 => (c, id),
        Ok(_) => {
            let e = exec::Error::NotRunning {
                pod,
                container: container.to_string(),
            };
            return reply(stream, 400, &format!("{e}\n"));
        }
        Err(e) => return reply(stream, 500, &format!("{e}\n")),
    };
    let protocol = match remotecommand::upgrade(stream, req, &remotecommand::PROTOCOLS) {
        Ok(p) => p,
        Err(keep) => return keep,
    };
    let mut conn = Conn::new(stream);
    if let Ok(Some(streams)) = remotecommand::open_streams(&mut conn, &opts, protocol) {
        let running = || {
            client
                .unit_state(&unit)
                .is_ok_and(|s| s.main_pid != 0 && s.invocation_id == invocation)
        };
        let conn = RefCell::new(conn);
        follow(&conn, &streams, (&key, container), &running);
        let mut conn = conn.into_inner();
        let ok = remotecommand::status_message(protocol, &[], &Ok(Exit::Code(0)));
        let _ = remotecommand::finish(&mut conn, &streams, &ok);
        conn.close();
    } else {
        conn.close();
    }
    false
}

/// The container's output from now on, as DATA frames on one of the client's output streams.
struct Output<'c, 'a> {
    conn: &'c RefCell<Conn<'a>>,
    stream: u32,
}

impl Write for Output<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut conn = self.conn.borrow_mut();
        for chunk in buf.chunks(CHUNK) {
            conn.send(&spdy::data(self.stream, false, chunk))?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Copies the journal to the client until it goes or the container's run ends; then the
/// output streams are closed.
fn follow(
    conn: &RefCell<Conn<'_>>,
    streams: &Streams,
    (pod, container): (&crate::localsync::generator_output::PodKey, &str),
    running: &dyn Fn() -> bool,
) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as i64;
    let opts = LogOptions {
        follow: true,
        since_micros: Some(now),
        ..Default::default()
    };
    // After the run has ended, one more look at the journal for its last lines.
    let ended = Cell::new(false);
    let alive = || {
        if ended.get() || !client_there(&mut conn.borrow_mut()) {
            return false;
        }
        if !running() {
            ended.set(true);
        }
        true
    };
    if let Some(stream) = streams.stdout.or(streams.stderr) {
        let mut out = Output { conn, stream };
        let _ = logs::stream(pod, container, &opts, &mut out, &alive);
    }
    let mut conn = conn.borrow_mut();
    for id in [streams.stdout, streams.stderr].into_iter().flatten() {
        let _ = conn.send(&spdy::data(id, true, b""));
    }
}

/// Whether the client is still there, answering what it sent meanwhile (PINGs); it sends
/// nothing else an attach without stdin uses.
fn client_there(conn: &mut Conn<'_>) -> bool {
    // A client that keeps sending gets a few rounds, not the thread.
    for _ in 0..8 {
        let readable = {
            let mut fds = [PollFd::new(conn.tls.sock.as_fd(), PollFlags::POLLIN)];
            !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
        };
        if readable && !matches!(conn.fill(), Ok(true)) {
            return false;
        }
        let mut ignore = Streams::default();
        loop {
            match conn.next_frame() {
                Ok(Some(f)) => {
                    if conn.control(f, &mut ignore).is_err() {
                        return false;
                    }
                }
                Ok(None) => break,
                // A bad frame or a GOAWAY: the session is over.
                _ => return false,
            }
        }
        if !readable {
            return true;
        }
    }
    true
}
