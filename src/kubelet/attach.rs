//! `/attach/{namespace}/{pod}/{container}` (also with the pod's UID before the container): what
//! `kubectl attach` reaches, the remotecommand protocol of `/exec` without a command, over SPDY
//! or WebSocket as exec ([`super::channels`]).
//!
//! How attach maps onto systemd: a container's stdout and stderr go to the journal, so attaching
//! is following the container's journal from now on, the same source and code as
//! `/containerLogs?follow` ([`crate::logs::stream`]), until the client goes or the container's
//! run ends (its main process gone or a new invocation). Both outputs arrive on one stream,
//! stdout's when asked for, else stderr's: the journal does not say which of the two a line
//! came from. Containers have no stdin and no terminal (stdin is `/dev/null`; `stdin` and `tty`
//! in a manifest are warned about and ignored), so an attach asking for stdin or a TTY is
//! refused before the upgrade, with the reason, rather than connected to nothing.

use super::channels::{self, Channel, Channels, Spdy};
use super::context::{self, State, Tls};
use super::http::{self, Request};
use super::remotecommand;
use super::session::{self, Options};
use super::spdyconn::{self, Conn};
use super::wsconn;
use crate::exec::{self, Exit};
use crate::logs::{self, LogOptions};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::cell::{Cell, RefCell};
use std::io::{self, Write};

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
        |stream: &mut Tls, status: u16, msg: &str| context::refuse(stream, req, status, msg);
    let Some((ns, name, container)) = remotecommand::container_path(rest) else {
        return reply(stream, 404, "404 page not found\n");
    };
    if req.method != "POST" && req.method != "GET" {
        return reply(stream, 405, "405 method not allowed\n");
    }
    let opts = match session::stream_flags(req) {
        Ok(o) => o,
        Err(m) => return reply(stream, 400, &m),
    };
    let pods = super::context::generated_pods(state);
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
    let running = || {
        client
            .unit_state(&unit)
            .is_ok_and(|s| s.main_pid != 0 && s.invocation_id == invocation)
    };
    let target = (&key, container);
    if wsconn::is_websocket(req) {
        let protocol = match wsconn::upgrade(stream, req, &wsconn::CHANNEL_PROTOCOLS) {
            Ok(p) => p,
            Err(keep) => return keep,
        };
        let mut ch = wsconn::WsChannels::new(stream, protocol, &opts);
        if ch.ready().is_ok() {
            session(&mut ch, protocol, &opts, target, &running);
        }
        ch.close();
        return false;
    }
    let protocol = match spdyconn::upgrade(stream, req, &remotecommand::PROTOCOLS) {
        Ok(p) => p,
        Err(keep) => return keep,
    };
    let mut conn = Conn::new(stream);
    match spdyconn::open_streams(&mut conn, &remotecommand::wanted(&opts, protocol)) {
        Ok(Some(streams)) => {
            let mut ch = Spdy { conn, streams };
            session(&mut ch, protocol, &opts, target, &running);
            ch.close();
        }
        _ => conn.close(),
    }
    false
}

/// The attached session: the output, then success on the error channel.
fn session(
    ch: &mut dyn Channels,
    protocol: &str,
    o: &Options,
    target: (&crate::generate::output::PodKey, &str),
    running: &dyn Fn() -> bool,
) {
    let out = if o.stdout {
        Channel::Stdout
    } else {
        Channel::Stderr
    };
    let conn = RefCell::new(ch);
    follow(&conn, out, target, running);
    let ch = conn.into_inner();
    let ok = session::status_message(protocol, &[], &Ok(Exit::Code(0)));
    let _ = channels::finish(ch, &ok);
}

/// The container's output from now on, on one of the client's output channels.
struct Output<'c, 'a> {
    conn: &'c RefCell<&'a mut dyn Channels>,
    channel: Channel,
}

impl Write for Output<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut conn = self.conn.borrow_mut();
        for chunk in buf.chunks(CHUNK) {
            conn.send(self.channel, chunk)?;
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
    conn: &RefCell<&mut dyn Channels>,
    channel: Channel,
    (pod, container): (&crate::generate::output::PodKey, &str),
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
        if ended.get() || !client_there(*conn.borrow_mut()) {
            return false;
        }
        if !running() {
            ended.set(true);
        }
        true
    };
    let mut out = Output { conn, channel };
    let _ = logs::stream(pod, container, &opts, &mut out, &alive);
    let mut conn = conn.borrow_mut();
    for ch in [Channel::Stdout, Channel::Stderr] {
        let _ = conn.end(ch);
    }
}

/// Whether the client is still there, answering what it sent meanwhile (PINGs); it sends
/// nothing else an attach without stdin uses.
fn client_there(conn: &mut dyn Channels) -> bool {
    // A client that keeps sending gets a few rounds, not the thread.
    for _ in 0..8 {
        let readable = {
            let mut fds = [PollFd::new(conn.sock(), PollFlags::POLLIN)];
            !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
        };
        if readable && !matches!(conn.fill(), Ok(true)) {
            return false;
        }
        loop {
            match conn.next() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                // A bad frame, a GOAWAY or a close: the session is over.
                Err(_) => return false,
            }
        }
        if !readable {
            return true;
        }
    }
    true
}
