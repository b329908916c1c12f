//! One command in a container: the caller starts a transient unit (`podunit exec-stage --unit`)
//! whose stdin, stdout and stderr are one end of a socket pair, and sends the command's three
//! descriptors over it (`SCM_RIGHTS`: systemd passes only three to a transient unit, and the
//! caller also needs a channel back). The unit's process (stage one) starts stage two
//! (`podunit exec-stage --enter PID`), which enters the container and becomes the command, waits
//! for it and writes one line back: `exit N`, `signal N` or `error MESSAGE`.
//!
//! The socket also tells stage one when the caller has gone: it then kills the command and what
//! the command started, so a client that disconnects leaves nothing running in the container.

use super::Error;
use std::io::{IoSlice, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The longest result line read back.
const MAX_RESULT: u64 = 4096;

/// The command's standard streams, and whether they are a terminal (stdin the terminal's
/// subordinate side, which becomes the command's controlling terminal).
pub struct Stdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub tty: bool,
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

/// A command started in a container; dropping it kills the command.
pub struct Session {
    ctl: UnixStream,
}

/// Starts `argv` in the container `container` (`unit`) of `pod` (both for messages), through
/// the CLI binary `podunit`.
pub fn start(
    client: &crate::systemd::Client,
    podunit: &str,
    (pod, container, unit): (&str, &str, &str),
    argv: &[String],
    stdio: Stdio,
) -> Result<Session, Error> {
    if argv.is_empty() {
        return Err(Error::NoCommand);
    }
    let ctx = client.service_exec_context(unit).map_err(Error::Systemd)?;
    if ctx.pid == 0 {
        return Err(Error::NotRunning {
            pod: pod.to_string(),
            container: container.to_string(),
        });
    }
    let (ours, theirs) = UnixStream::pair().map_err(|e| Error::Io("socketpair", e))?;
    let mut cmd: Vec<String> = vec![podunit.into(), "exec-stage".into(), "--unit".into()];
    cmd.push(unit.into());
    if stdio.tty {
        cmd.push("--tty".into());
    }
    cmd.extend(["--hex".into(), "--".into()]);
    cmd.extend(crate::common::argv_hex::encode(argv));
    let name = format!(
        "podunit-exec-{}-{}.service",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    client
        .run_transient_with_stdio(
            &name,
            &format!("Exec in {unit}"),
            &cmd,
            [theirs.as_fd(), theirs.as_fd(), theirs.as_fd()],
        )
        .map_err(Error::Systemd)?;
    drop(theirs);
    send_fds(&ours, [&stdio.stdin, &stdio.stdout, &stdio.stderr])
        .map_err(|e| Error::Io("passing the streams to the exec unit", e))?;
    Ok(Session { ctl: ours })
}

impl Session {
    /// Readable once the command has ended (for a caller that polls).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ctl.as_fd()
    }

    /// Waits for the command to end.
    pub fn wait(self) -> Result<Exit, Error> {
        let mut line = String::new();
        let _ = (&self.ctl).take(MAX_RESULT).read_to_string(&mut line);
        parse_result(&line)
    }
}

fn parse_result(line: &str) -> Result<Exit, Error> {
    let line = line.trim();
    let num = |s: &str| s.parse::<i32>().ok();
    if let Some(c) = line.strip_prefix("exit ").and_then(num) {
        return Ok(Exit::Code(c));
    }
    if let Some(s) = line.strip_prefix("signal ").and_then(num) {
        return Ok(Exit::Signal(s));
    }
    Err(Error::NoResult(
        line.strip_prefix("error ").unwrap_or(line).to_string(),
    ))
}

fn send_fds(sock: &UnixStream, fds: [&OwnedFd; 3]) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let borrowed = fds.map(|f| f.as_fd());
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&borrowed));
    sendmsg(
        sock,
        &[IoSlice::new(b"F")],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

fn recv_fds(sock: BorrowedFd<'_>) -> Result<[OwnedFd; 3], String> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| format!("receiving the streams: {e}"))?;
    let mut got: Vec<OwnedFd> = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            got.extend(fds);
        }
    }
    <[OwnedFd; 3]>::try_from(got).map_err(|_| "expected three streams".to_string())
}

/// Writes the result line to stdin (the caller's socket).
fn report(line: &str) {
    let _ = nix::unistd::write(std::io::stdin().as_fd(), format!("{line}\n").as_bytes());
}

/// Stage one, in the transient unit: receives the streams, finds the container's main process
/// and environment, runs stage two with them and reports how it ended.
pub fn stage_one(unit: &str, tty: bool, argv: &[String]) -> ExitCode {
    match run_stage_one(unit, tty, argv) {
        Ok(line) => report(&line),
        Err(m) => report(&format!("error {}", m.replace('\n', " "))),
    }
    ExitCode::SUCCESS
}

fn run_stage_one(unit: &str, tty: bool, argv: &[String]) -> Result<String, String> {
    let ctl = std::io::stdin();
    let [stdin, stdout, stderr] = recv_fds(ctl.as_fd())?;
    let client = crate::systemd::Client::system().map_err(|e| e.to_string())?;
    let crate::systemd::ExecContext { pid, env, files } = client
        .service_exec_context(unit)
        .map_err(|e| e.to_string())?;
    if pid == 0 {
        return Err(crate::prober::enter::Error::NotRunning.to_string());
    }
    let env = crate::prober::enter::environment(&env, &files, &|p| std::fs::read_to_string(p))
        .map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args(["exec-stage", "--enter", &pid.to_string()]);
    if tty {
        // Stage two makes itself a session leader with the terminal; its process group is
        // then its own as well.
        cmd.arg("--tty");
    } else {
        cmd.process_group(0);
    }
    let mut child = cmd
        .arg("--")
        .args(argv)
        .env_clear()
        .envs(env)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|e| e.to_string())?;
    // The caller hanging up (or dying): the command and everything it started go.
    let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
    let watch = ctl
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        let mut sock = UnixStream::from(watch);
        while matches!(sock.read(&mut sink), Ok(n) if n > 0) {}
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
    });
    let st = child.wait().map_err(|e| e.to_string())?;
    Ok(match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "error unknown exit status".into(),
    })
}

/// Stage two: with a terminal, makes it the controlling one; then enters the container and
/// becomes the command, as an exec probe's stage two does.
pub fn stage_two(pid: u32, tty: bool, argv: &[String]) -> ExitCode {
    if tty {
        let _ = rustix::process::setsid();
        if let Err(e) = rustix::process::ioctl_tiocsctty(std::io::stdin()) {
            eprintln!("podunit: cannot enter the container: the terminal: {e}");
            return ExitCode::from(crate::prober::exec::ENTER_FAILED);
        }
    }
    crate::prober::exec::stage_two(pid, argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines() {
        assert_eq!(parse_result("exit 3\n").unwrap(), Exit::Code(3));
        assert_eq!(parse_result("signal 9\n").unwrap(), Exit::Signal(9));
        let e = parse_result("error the container is not running\n").unwrap_err();
        assert_eq!(e.to_string(), "the container is not running");
        assert_eq!(
            parse_result("").unwrap_err().to_string(),
            "the command ended without an exit status"
        );
    }

    #[test]
    fn three_descriptors_pass_over_the_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let (r, w) = std::io::pipe().unwrap();
        let (r, w) = (OwnedFd::from(r), OwnedFd::from(w));
        let null = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        send_fds(&a, [&null, &w, &r]).unwrap();
        let [_, w2, r2] = recv_fds(b.as_fd()).unwrap();
        drop((w, r));
        std::io::Write::write_all(&mut std::fs::File::from(w2), b"hi").unwrap();
        let mut got = String::new();
        std::fs::File::from(r2).read_to_string(&mut got).unwrap();
        assert_eq!(got, "hi");
    }
}
