//! Exec probes. podunit-sync's own sandbox has no capabilities, so the command is run by a
//! transient unit in PID 1's context: `podunit probe-exec` (stage one) looks the container up,
//! starts `podunit probe-exec --enter` (stage two), which enters the container
//! ([`super::enter`]) and becomes the command, and reports how it ended.
//!
//! podunit-sync hands the unit both ends it reads: the command's stdout and stderr (a socket,
//! so reads can time out) and stage one's stdin (a socket too), on which stage one writes one
//! line: `exit N`, `signal N`, `timeout` or `error MESSAGE`. Nothing of the container's
//! environment passes through the unit's properties (which anyone may read).

use super::check::MAX_OUTPUT;
use crate::probe::state::Outcome;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Time for systemd to start the unit and stage one to find the container, beyond the probe's
/// own timeout (which stage one enforces).
const SLACK: Duration = Duration::from_secs(10);

static SEQ: AtomicU64 = AtomicU64::new(0);

/// What stage one reports, parsed.
fn outcome(status: &str, output: String, argv: &[String]) -> Outcome {
    let status = status.trim();
    if let Some(code) = status.strip_prefix("exit ") {
        if code == ENTER_FAILED.to_string()
            && let Some(m) = output.strip_prefix(ENTER_FAILED_PREFIX)
        {
            // Not the command's failure: the kubelet throws such a run away.
            return Outcome::Error(m.trim().to_string());
        }
        return if code == "0" {
            Outcome::Success
        } else {
            Outcome::Failure(output)
        };
    }
    if status.starts_with("signal ") {
        return Outcome::Failure(output);
    }
    if status == "timeout" {
        return Outcome::Failure(format!("command {:?} timed out", argv.join(" ")));
    }
    match status.strip_prefix("error ") {
        Some(m) => Outcome::Error(m.to_string()),
        None => Outcome::Error("the exec probe ended without a result".into()),
    }
}

/// Runs `argv` in the container of `unit`; `podunit` is the CLI binary stage one runs from.
pub fn run(
    client: &crate::systemd::Client,
    podunit: &str,
    unit: &str,
    argv: &[String],
    timeout: Duration,
) -> Outcome {
    match run_raw(client, podunit, unit, argv, timeout) {
        Ok(Ran { status, output }) => outcome(&status, output, argv),
        Err(e) => Outcome::Error(e),
    }
}

/// What a run in the container left: stage one's line (`exit N`, `signal N`, `timeout`,
/// `error MESSAGE`, or empty) and the command's output (bounded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    pub status: String,
    pub output: String,
}

/// [`run`], with stage one's line as it is (an exec preStop's event needs the exit code).
pub fn run_raw(
    client: &crate::systemd::Client,
    podunit: &str,
    unit: &str,
    argv: &[String],
    timeout: Duration,
) -> Result<Ran, String> {
    let pair = || UnixStream::pair().map_err(|e| e.to_string());
    let ((out_ours, out_theirs), (st_ours, st_theirs)) = (pair()?, pair()?);
    let secs = timeout.as_secs().max(1).to_string();
    let mut cmd: Vec<String> = [
        podunit,
        "probe-exec",
        "--unit",
        unit,
        "--timeout",
        &secs,
        "--hex",
        "--",
    ]
    .map(String::from)
    .to_vec();
    cmd.extend(crate::common::argv_hex::encode(argv));
    let name = format!(
        "podunit-probe-{}-{}.service",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    client
        .run_transient_with_stdio(
            &name,
            &format!("Exec probe in {unit}"),
            &cmd,
            [st_theirs.as_fd(), out_theirs.as_fd(), out_theirs.as_fd()],
        )
        .map_err(|e| e.to_string())?;
    drop((out_theirs, st_theirs));
    let deadline = Instant::now() + timeout + SLACK;
    let output = read_bounded(out_ours, deadline);
    let mut status = String::new();
    let left = deadline.saturating_duration_since(Instant::now());
    let _ = st_ours.set_read_timeout(Some(left.max(Duration::from_millis(1))));
    let _ = (&st_ours).take(4096).read_to_string(&mut status);
    Ok(Ran { status, output })
}

/// Reads up to [`MAX_OUTPUT`] bytes until EOF or `deadline`; the rest is read and dropped, so
/// the command never blocks on a full socket.
fn read_bounded(mut s: UnixStream, deadline: Instant) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(out.len());
                out.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes stage one's result line to its stdin (the status socket).
fn report(line: &str) {
    let _ = nix::unistd::write(std::io::stdin().as_fd(), format!("{line}\n").as_bytes());
}

/// Stage two for `argv` in the container of `unit`, with the container's environment (from the
/// unit's properties), ready to spawn.
fn enter_command(unit: &str, argv: &[String]) -> Result<Command, String> {
    let client = crate::systemd::Client::system().map_err(|e| e.to_string())?;
    let crate::systemd::ExecContext { pid, env, files } = client
        .service_exec_context(unit)
        .map_err(|e| e.to_string())?;
    if pid == 0 {
        return Err(super::enter::Error::NotRunning.to_string());
    }
    let env = super::enter::environment(&env, &files, &|p| std::fs::read_to_string(p))
        .map_err(|e| e.to_string())?;
    stage_two_command(pid, argv, env)
}

/// Stage two: enters the container of process `pid` and becomes `argv` with `env`. Also what
/// `podunit hook exec` (an exec preStop) becomes.
pub fn stage_two_command(
    pid: u32,
    argv: &[String],
    env: Vec<(String, String)>,
) -> Result<Command, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args(["probe-exec", "--enter", &pid.to_string(), "--"])
        .args(argv)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null());
    Ok(cmd)
}

/// Stage one, in the transient unit: finds the container's main process and environment, runs
/// stage two with them, kills it (and its process group) at the timeout.
pub fn stage_one(unit: &str, timeout: Duration, argv: &[String]) -> ExitCode {
    let r = (|| -> Result<String, String> {
        let mut child = enter_command(unit, argv)?
            .process_group(0)
            .spawn()
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait().map_err(|e| e.to_string())? {
                Some(st) => {
                    return Ok(match (st.code(), st.signal()) {
                        (Some(c), _) => format!("exit {c}"),
                        (None, Some(s)) => format!("signal {s}"),
                        _ => "error unknown exit status".into(),
                    });
                }
                None if Instant::now() >= deadline => {
                    let pg = nix::unistd::Pid::from_raw(-(child.id() as i32));
                    let _ = nix::sys::signal::kill(pg, nix::sys::signal::Signal::SIGKILL);
                    let _ = child.wait();
                    return Ok("timeout".into());
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    })();
    match r {
        Ok(line) => report(&line),
        Err(m) => {
            // Stage two's own errors arrive as its output, with exit code 126 (see below).
            report(&format!("error {}", m.replace('\n', " ")));
        }
    }
    ExitCode::SUCCESS
}

/// Exit code of stage two when it could not enter the container (as `docker exec` uses 126),
/// with a message starting [`ENTER_FAILED_PREFIX`].
pub const ENTER_FAILED: u8 = 126;
const ENTER_FAILED_PREFIX: &str = "podunit: cannot enter the container: ";

/// Stage two: enters the container of process `pid` and becomes `argv` (with the environment
/// it was given, which is the container's).
pub fn stage_two(pid: u32, argv: &[String]) -> ExitCode {
    let fail = |m: String| {
        let _ = writeln!(
            std::io::stderr(),
            "podunit: cannot enter the container: {m}"
        );
        ExitCode::from(ENTER_FAILED)
    };
    let Some((prog, args)) = argv.split_first() else {
        return fail("no command".into());
    };
    let target = match super::enter::inspect(pid) {
        Ok(t) => t,
        Err(e) => return fail(e.to_string()),
    };
    let new_pid_ns = match super::enter::enter(&target) {
        Ok(n) => n,
        Err(e) => return fail(e.to_string()),
    };
    let mut cmd = Command::new(prog);
    cmd.args(args);
    if new_pid_ns {
        // Only children are in the joined PID namespace: run the command as one.
        return match cmd.status() {
            Ok(st) => match (st.code(), st.signal()) {
                (Some(c), _) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
                (None, Some(s)) => ExitCode::from(u8::try_from(128 + s).unwrap_or(1)),
                _ => ExitCode::FAILURE,
            },
            Err(e) => fail(format!("{prog}: {e}")),
        };
    }
    let e = cmd.exec();
    // The runtimes' message for a missing executable, so events look familiar.
    let _ = writeln!(
        std::io::stderr(),
        "exec: {prog:?}: {}",
        super::check::go_error(&e)
    );
    ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        ENTER_FAILED
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_one_reports() {
        let argv = ["sh".to_string(), "-c".into(), "exit 3".into()];
        assert_eq!(outcome("exit 0\n", "x".into(), &argv), Outcome::Success);
        assert_eq!(
            outcome("exit 3\n", "bad".into(), &argv),
            Outcome::Failure("bad".into())
        );
        assert_eq!(
            outcome("timeout\n", String::new(), &argv),
            Outcome::Failure("command \"sh -c exit 3\" timed out".into())
        );
        assert_eq!(
            outcome("error the container is not running", String::new(), &argv),
            Outcome::Error("the container is not running".into())
        );
        assert!(matches!(
            outcome("", String::new(), &argv),
            Outcome::Error(_)
        ));
    }
}
