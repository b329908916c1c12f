//! `/exec/{namespace}/{pod}/{container}`: what `kubectl exec` reaches through the API server,
//! which proxies the request as an HTTP upgrade and then carries the connection as it is. The
//! protocol is the kubelet's remotecommand, over either framing ([`super::channels`]): SPDY/3.1
//! (`v4.channel.k8s.io` and older), where the client opens one stream per channel, named by its
//! `streamType` header (`error`, `stdin`, `stdout`, `stderr`, `resize`), or WebSocket
//! ([`super::wsconn`]: `v5.channel.k8s.io`, `v4.channel.k8s.io` and older), where each message
//! starts with its channel's number (stdin 0, stdout 1, stderr 2, error 3, resize 4). The node
//! runs the command ([`crate::exec`]) and copies between the channels and the command's pipes;
//! at the end the `error` channel carries how it ended (v4 and v5: a `metav1.Status`,
//! `NonZeroExitCode` with an `ExitCode` cause, which kubectl turns into its own exit code).
//!
//! One thread per connection, one poll loop: nothing here waits on the client except a write,
//! which the socket's timeout bounds. The command's output is read only as fast as the client
//! takes it, and the client's stdin only as fast as the command takes it (a bounded backlog),
//! so a client that never reads or a command that never reads costs a few buffers, nothing more.

use super::channels::{self, Channel, Channels, Event, Spdy};
use super::context::{self, State, Tls};
use super::http::Request;
use super::session::{Options, options, status_message};
use super::spdyconn::{Conn, Wanted, open_streams, upgrade};

use super::wsconn;
use crate::exec::{self, Exit, Stdio};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// Newest first, as the kubelet prefers them.
pub const PROTOCOLS: [&str; 3] = [
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
];
/// A session with no traffic either way for this long is closed (the kubelet's default).
const IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);
/// After the command ended, how long its output may keep coming (children holding the pipes).
const DRAIN: Duration = Duration::from_secs(1);
/// Stdin taken from the client ahead of the command reading it.
const STDIN_BACKLOG: usize = 64 * 1024;
/// Output read from the command per frame (spdystream's own chunk).
const CHUNK: usize = 32 * 1024;

/// Serves the request; returns whether the connection may carry another (never, once
/// upgraded).
pub(super) fn exec(state: &State, stream: &mut Tls, req: &Request, rest: &str) -> bool {
    let reply =
        |stream: &mut Tls, status: u16, msg: &str| context::refuse(stream, req, status, msg);
    let Some((ns, name, container)) = container_path(rest) else {
        return reply(stream, 404, "404 page not found\n");
    };
    if req.method != "POST" && req.method != "GET" {
        return reply(stream, 405, "405 method not allowed\n");
    }
    let opts = match options(req) {
        Ok(o) => o,
        Err(m) => return reply(stream, 400, &m),
    };
    let pods = super::context::generated_pods(state);
    let unit =
        match exec::find_pod(&pods, ns, name).and_then(|p| exec::container_unit(p, container)) {
            Ok(u) => u.to_string(),
            Err(e) => return reply(stream, 404, &format!("{e}\n")),
        };
    let names = (ns, name, container);
    if wsconn::is_websocket(req) {
        let protocol = match wsconn::upgrade(stream, req, &wsconn::CHANNEL_PROTOCOLS) {
            Ok(p) => p,
            Err(keep) => return keep,
        };
        let mut ch = wsconn::WsChannels::new(stream, protocol, &opts);
        let _ = ch
            .ready()
            .and_then(|_| serve(&mut ch, &unit, names, protocol, &opts));
        ch.close();
        return false;
    }
    let protocol = match upgrade(stream, req, &PROTOCOLS) {
        Ok(p) => p,
        Err(keep) => return keep,
    };
    let mut conn = Conn::new(stream);
    match open_streams(&mut conn, &wanted(&opts, protocol)) {
        Ok(Some(streams)) => {
            let mut ch = Spdy { conn, streams };
            let _ = serve(&mut ch, &unit, names, protocol, &opts);
            ch.close();
        }
        _ => conn.close(),
    }
    false
}

/// `{ns}/{pod}/{container}`, or with the pod's UID before the container (exec and attach).
pub(super) fn container_path(rest: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = rest.split('/').collect();
    match parts[..] {
        [ns, pod, c] | [ns, pod, _, c] if !ns.is_empty() && !pod.is_empty() && !c.is_empty() => {
            Some((ns, pod, c))
        }
        _ => None,
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = io::pipe()?;
    Ok((OwnedFd::from(r), OwnedFd::from(w)))
}

/// Runs the command and copies between it and the channels; at the end, how it ended.
fn serve(
    ch: &mut dyn Channels,
    unit: &str,
    (ns, name, container): (&str, &str, &str),
    protocol: &str,
    o: &Options,
) -> io::Result<()> {
    let pod = format!("{ns}/{name}");
    let started = start(unit, (&pod, container), o);
    let (session, fds) = match started {
        Ok(s) => s,
        Err(e) => {
            let msg = status_message(protocol, &o.command, &Err(e.to_string()));
            return channels::finish(ch, &msg);
        }
    };
    let result = pump(ch, session, fds)?;
    let msg = status_message(protocol, &o.command, &result);
    channels::finish(ch, &msg)
}

/// The SPDY streams `o` needs on `protocol`: stderr shares the terminal's stream with a TTY, and
/// v2 has no resize stream.
pub(super) fn wanted(o: &Options, protocol: &str) -> Wanted {
    Wanted {
        stdin: o.stdin,
        stdout: o.stdout,
        stderr: o.stderr && !o.tty,
        resize: o.tty && protocol != PROTOCOLS[2],
    }
}

/// Our ends of the command's pipes (with a terminal: its controlling side, for all three).
struct Ends {
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    terminal: Option<OwnedFd>,
}

/// A `resize` message (`remotecommand.TerminalSize`).
#[derive(serde::Deserialize)]
struct TerminalSize {
    #[serde(rename = "Width")]
    width: u16,
    #[serde(rename = "Height")]
    height: u16,
}

/// The most of an unfinished resize message kept.
const MAX_RESIZE: usize = 4096;

/// Applies the complete resize messages at the start of `buf` (the last one wins) and keeps
/// the rest; a buffer that grows past [`MAX_RESIZE`] without one is dropped.
fn resize(terminal: Option<&OwnedFd>, buf: &mut Vec<u8>) {
    let mut it = serde_json::Deserializer::from_slice(buf).into_iter::<TerminalSize>();
    let mut last = None;
    let mut used = 0;
    loop {
        match it.next() {
            Some(Ok(s)) => {
                used = it.byte_offset();
                last = Some(s);
            }
            Some(Err(e)) if e.is_eof() => break,
            Some(Err(_)) | None => {
                used = buf.len();
                break;
            }
        }
    }
    buf.drain(..used);
    if buf.len() > MAX_RESIZE {
        buf.clear();
    }
    if let (Some(t), Some(s)) = (terminal, last) {
        let _ = exec::pty::resize(t, s.width, s.height);
    }
}

fn start(
    unit: &str,
    (pod, container): (&str, &str),
    o: &Options,
) -> Result<(exec::Session, Ends), exec::Error> {
    let io = |e| exec::Error::Io("pipe", e);
    let null = || {
        std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map(OwnedFd::from)
            .map_err(io)
    };
    if o.tty {
        let (stdio, ends) = terminal(o.stdin).map_err(|e| exec::Error::Io("terminal", e))?;
        return Ok((run_in(unit, (pod, container), o, stdio)?, ends));
    }
    let (stdin, our_stdin) = if o.stdin {
        let (r, w) = pipe().map_err(io)?;
        rustix::fs::fcntl_setfl(&w, rustix::fs::OFlags::NONBLOCK).map_err(|e| io(e.into()))?;
        (r, Some(w))
    } else {
        (null()?, None)
    };
    let out = || -> Result<(OwnedFd, Option<OwnedFd>), exec::Error> {
        let (r, w) = pipe().map_err(io)?;
        Ok((w, Some(r)))
    };
    let (stdout, our_stdout) = if o.stdout { out()? } else { (null()?, None) };
    let (stderr, our_stderr) = if o.stderr && !o.tty {
        out()?
    } else {
        (null()?, None)
    };
    let session = run_in(
        unit,
        (pod, container),
        o,
        Stdio {
            stdin,
            stdout,
            stderr,
            tty: false,
        },
    )?;
    Ok((
        session,
        Ends {
            stdin: our_stdin,
            stdout: our_stdout,
            stderr: our_stderr,
            terminal: None,
        },
    ))
}

/// Starts the command with `stdio` through the system manager.
fn run_in(
    unit: &str,
    (pod, container): (&str, &str),
    o: &Options,
    stdio: Stdio,
) -> Result<exec::Session, exec::Error> {
    let client = crate::systemd::Client::system().map_err(exec::Error::Systemd)?;
    exec::start(
        &client,
        &exec::cli_binary(),
        (pod, container, unit),
        &o.command,
        stdio,
    )
}

/// A terminal for the command: its side as all three streams, ours for stdin (when asked)
/// and output.
fn terminal(stdin: bool) -> io::Result<(Stdio, Ends)> {
    let (master, sub) = exec::pty::open()?;
    rustix::fs::fcntl_setfl(&master, rustix::fs::OFlags::NONBLOCK)?;
    let stdio = Stdio {
        stdin: sub.try_clone()?,
        stdout: sub.try_clone()?,
        stderr: sub,
        tty: true,
    };
    let ends = Ends {
        stdin: if stdin {
            Some(master.try_clone()?)
        } else {
            None
        },
        stdout: Some(master.try_clone()?),
        stderr: None,
        terminal: Some(master),
    };
    Ok((stdio, ends))
}

/// Copies between the channels and the command until it has ended and its output is drained.
fn pump(
    conn: &mut dyn Channels,
    session: exec::Session,
    mut ends: Ends,
) -> io::Result<Result<Exit, String>> {
    let mut backlog: Vec<u8> = Vec::new();
    let mut stdin_fin = false;
    let mut sizes: Vec<u8> = Vec::new();
    let mut session = Some(session);
    let mut result: Option<Result<Exit, String>> = None;
    let mut last_activity = Instant::now();
    let mut buf = vec![0u8; CHUNK];
    loop {
        // Frames already read, as far as stdin has room.
        while backlog.len() < STDIN_BACKLOG {
            match conn.next()? {
                None => break,
                Some(Event::Stdin(data, fin)) => {
                    // Whatever comes after the client's end of stdin goes nowhere.
                    if !stdin_fin {
                        backlog.extend_from_slice(&data);
                    }
                    stdin_fin |= fin;
                }
                Some(Event::Resize(data)) => {
                    sizes.extend_from_slice(&data);
                    resize(ends.terminal.as_ref(), &mut sizes);
                }
                Some(Event::Other) => {}
            }
        }
        if stdin_fin && backlog.is_empty() {
            ends.stdin = None;
        }
        let done = result.is_some();
        if done && ends.stdout.is_none() && ends.stderr.is_none() {
            break;
        }
        let read_sock = !conn.eof() && backlog.len() < STDIN_BACKLOG;
        let (ready, n) = {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(5);
            let i_sock = slot(&mut fds, read_sock.then(|| conn.sock()), PollFlags::POLLIN);
            let i_out = slot(
                &mut fds,
                ends.stdout.as_ref().map(|f| f.as_fd()),
                PollFlags::POLLIN,
            );
            let i_err = slot(
                &mut fds,
                ends.stderr.as_ref().map(|f| f.as_fd()),
                PollFlags::POLLIN,
            );
            let i_in = slot(
                &mut fds,
                ends.stdin
                    .as_ref()
                    .filter(|_| !backlog.is_empty())
                    .map(|f| f.as_fd()),
                PollFlags::POLLOUT,
            );
            let i_ses = slot(
                &mut fds,
                session.as_ref().map(|s| s.fd()),
                PollFlags::POLLIN,
            );
            let wait = if done { DRAIN } else { Duration::from_secs(60) };
            let n = poll(
                &mut fds,
                PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX),
            )
            .map_err(io::Error::from)?;
            let hit = |i: Option<usize>| {
                i.and_then(|i| fds[i].revents())
                    .is_some_and(|r| !r.is_empty())
            };
            (
                [hit(i_sock), hit(i_out), hit(i_err), hit(i_in), hit(i_ses)],
                n,
            )
        };
        if n == 0 {
            if done {
                break;
            }
            if last_activity.elapsed() >= IDLE_TIMEOUT {
                return Err(io::ErrorKind::TimedOut.into());
            }
            continue;
        }
        last_activity = Instant::now();
        let [sock, out, err, inp, ses] = ready;
        if sock && !conn.fill()? {
            // The client has gone: dropping the session kills the command.
            return Err(io::ErrorKind::ConnectionAborted.into());
        }
        for (ready, end, ch) in [
            (out, &mut ends.stdout, Channel::Stdout),
            (err, &mut ends.stderr, Channel::Stderr),
        ] {
            if !ready {
                continue;
            }
            let Some(fd) = end.as_ref() else { continue };
            let n = match nix::unistd::read(fd, &mut buf) {
                Ok(n) => n,
                Err(nix::errno::Errno::EAGAIN) => continue,
                // EIO: a terminal whose every other side has closed.
                Err(_) => 0,
            };
            if n == 0 {
                conn.end(ch)?;
                *end = None;
            } else {
                conn.send(ch, &buf[..n])?;
            }
        }
        if inp && let Some(fd) = ends.stdin.as_ref() {
            match nix::unistd::write(fd, &backlog) {
                Ok(n) => {
                    backlog.drain(..n);
                }
                Err(nix::errno::Errno::EAGAIN) => {}
                // The command closed its stdin: what the client sends goes nowhere.
                Err(_) => {
                    backlog.clear();
                    ends.stdin = None;
                }
            }
        }
        if ses && let Some(s) = session.take() {
            result = Some(s.wait().map_err(|e| e.to_string()));
            ends.stdin = None;
            ends.terminal = None;
        }
    }
    Ok(result.unwrap_or_else(|| Err("the command's result was lost".into())))
}

/// Adds `fd` (when there is one) to the poll set; its index.
fn slot<'a>(
    fds: &mut Vec<PollFd<'a>>,
    fd: Option<std::os::fd::BorrowedFd<'a>>,
    flags: PollFlags,
) -> Option<usize> {
    fd.map(|fd| {
        fds.push(PollFd::new(fd, flags));
        fds.len() - 1
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::http;
    use crate::kubelet::spdyconn::negotiate;

    fn req(q: &str, protos: &[&str]) -> Request {
        let mut head = format!("POST /exec/default/web/main?{q} HTTP/1.1\r\n");
        for p in protos {
            head.push_str(&format!("X-Stream-Protocol-Version: {p}\r\n"));
        }
        head.push_str("\r\n");
        http::parse_head(head.as_bytes()).unwrap().unwrap().0
    }

    #[test]
    fn options_follow_the_kubelet() {
        let r = req(
            "command=sh&command=-c&command=echo+hi&stdin=1&stdout=true&tty=0",
            &[],
        );
        assert_eq!(
            options(&r).unwrap(),
            Options {
                command: vec!["sh".into(), "-c".into(), "echo hi".into()],
                stdin: true,
                stdout: true,
                stderr: false,
                tty: false
            }
        );
        let kubelet = options(&req("command=ls&output=1&error=1", &[])).unwrap();
        assert!(kubelet.stdout && kubelet.stderr && !kubelet.stdin);
        assert!(options(&req("stdout=1", &[])).is_err());
        assert!(options(&req("command=ls", &[])).is_err());
    }

    #[test]
    fn the_newest_common_protocol_is_spoken() {
        let r = req("", &["v4.channel.k8s.io", "v3.channel.k8s.io"]);
        assert_eq!(negotiate(&r, &PROTOCOLS), Some("v4.channel.k8s.io"));
        let r = req("", &["v5.channel.k8s.io, v2.channel.k8s.io"]);
        assert_eq!(negotiate(&r, &PROTOCOLS), Some("v2.channel.k8s.io"));
        assert_eq!(negotiate(&req("", &["channel.k8s.io"]), &PROTOCOLS), None);
    }

    #[test]
    fn the_status_kubectl_reads() {
        let argv = ["sh".to_string()];
        let v4 = PROTOCOLS[0];
        let ok: serde_json::Value =
            serde_json::from_slice(&status_message(v4, &argv, &Ok(Exit::Code(0)))).unwrap();
        assert_eq!(ok, serde_json::json!({"metadata": {}, "status": "Success"}));
        let three: serde_json::Value =
            serde_json::from_slice(&status_message(v4, &argv, &Ok(Exit::Code(3)))).unwrap();
        assert_eq!(three["status"], "Failure");
        assert_eq!(three["reason"], "NonZeroExitCode");
        assert_eq!(
            three["details"]["causes"][0],
            serde_json::json!({"reason": "ExitCode", "message": "3"})
        );
        let killed: serde_json::Value =
            serde_json::from_slice(&status_message(v4, &argv, &Ok(Exit::Signal(9)))).unwrap();
        assert_eq!(killed["details"]["causes"][0]["message"], "137");
        assert!(status_message(PROTOCOLS[1], &argv, &Ok(Exit::Code(0))).is_empty());
        let v3 =
            String::from_utf8(status_message(PROTOCOLS[1], &argv, &Ok(Exit::Code(2)))).unwrap();
        assert!(v3.contains("exit code 2"), "{v3}");
        let err: serde_json::Value =
            serde_json::from_slice(&status_message(v4, &argv, &Err("boom".into()))).unwrap();
        assert_eq!(err["reason"], "InternalError");
    }
}
