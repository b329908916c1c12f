//! `podunit exec POD [-c CONTAINER] [-i] [-t] -- COMMAND...`: runs a command inside a running
//! container as `kubectl exec` does, through [`crate::exec`] (the path exec probes take), with
//! this terminal's streams (or, with `-t`, a new terminal of the command's own, this one in raw
//! mode meanwhile, resized with it); exits with the command's exit code.

use crate::common::paths::Paths;
use crate::exec::{self, Exit, Stdio};
use std::os::fd::{AsFd, OwnedFd};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The pod (`NAME` or `NAMESPACE/NAME`).
    pub pod: String,
    /// The container. Without it, as kubectl does: the pod's first app container.
    #[arg(short = 'c', long)]
    pub container: Option<String>,
    /// Pass stdin to the command (without it, the command's stdin is empty).
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// Give the command a terminal (of this terminal's size).
    #[arg(short = 't', long)]
    pub tty: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `podunit exec-stage`: the two stages of [`crate::exec::session`], run by the transient unit.
#[derive(clap::Args, Debug)]
pub struct StageArgs {
    /// The container's unit (stage one).
    #[arg(long, required_unless_present = "enter")]
    unit: Option<String>,
    /// Stage two: enter the container of this main PID and become the command.
    #[arg(long, value_name = "PID")]
    enter: Option<u32>,
    /// The command's stdin is a terminal, to become its controlling one.
    #[arg(long)]
    tty: bool,
    /// The command's arguments are hex-encoded ([`crate::common::argv_hex`]), as a transient
    /// unit's `ExecStart=` carries them.
    #[arg(long)]
    hex: bool,
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

pub fn run(args: Args) -> ExitCode {
    // Before the bus connection starts its threads: see `block_resize_signal`.
    if args.tty
        && let Err(e) = exec::pty::block_resize_signal()
    {
        errln!("podunit exec: blocking SIGWINCH: {e}");
        return ExitCode::FAILURE;
    }
    match run_inner(&args) {
        Ok(Exit::Code(c)) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        Ok(Exit::Signal(s)) => ExitCode::from(u8::try_from(128 + s).unwrap_or(1)),
        Err(e) => {
            errln!("podunit exec: {e}");
            ExitCode::FAILURE
        }
    }
}

fn dup(fd: impl AsFd) -> Result<OwnedFd, String> {
    fd.as_fd()
        .try_clone_to_owned()
        .map_err(|e| format!("duplicating a standard stream: {e}"))
}

fn run_inner(args: &Args) -> Result<Exit, String> {
    let paths = Paths::from_env();
    let client = super::system_bus()?;
    let (pod, _) = super::pods::lookup(&client, &paths, &args.pod)?;
    let pod = &pod;
    let container = super::logs::pick_container(pod, args.container.as_deref())?;
    let unit = exec::container_unit(pod, &container).map_err(|e| e.to_string())?;
    let pod_name = pod.key.to_string();
    let target = (pod_name.as_str(), container.as_str(), unit);
    if args.tty {
        return with_terminal(&client, target, args);
    }
    let stdin = if args.stdin {
        dup(std::io::stdin())?
    } else {
        OwnedFd::from(std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?)
    };
    let stdio = Stdio {
        stdin,
        stdout: dup(std::io::stdout())?,
        stderr: dup(std::io::stderr())?,
        tty: false,
    };
    let session = exec::start(&client, &exec::cli_binary(), target, &args.command, stdio)
        .map_err(|e| e.to_string())?;
    session.wait().map_err(|e| e.to_string())
}

/// `-t`: the command on a terminal of its own, copied to and from this one.
fn with_terminal(
    client: &crate::systemd::Client,
    target: (&str, &str, &str),
    args: &Args,
) -> Result<Exit, String> {
    use std::io::{Read, Write};
    let (master, sub) = exec::pty::open().map_err(|e| format!("a terminal: {e}"))?;
    if let Some((cols, rows)) = exec::pty::size(std::io::stdout()) {
        let _ = exec::pty::resize(&master, cols, rows);
    }
    let dup_sub = || sub.try_clone().map_err(|e| format!("a terminal: {e}"));
    let stdio = Stdio {
        stdin: dup_sub()?,
        stdout: dup_sub()?,
        stderr: dup_sub()?,
        tty: true,
    };
    drop(sub);
    let session = exec::start(client, &exec::cli_binary(), target, &args.command, stdio)
        .map_err(|e| e.to_string())?;
    // This terminal resized: so is the command's.
    let watched = dup(&master)?;
    std::thread::spawn(move || exec::pty::follow_resizes(std::io::stdout(), watched));
    let raw = if args.stdin {
        exec::pty::RawMode::enter(std::io::stdin())
    } else {
        None
    };
    if args.stdin {
        let mut to = std::fs::File::from(dup(&master)?);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::stdin().read(&mut buf) {
                if n == 0 || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
    }
    let mut from = std::fs::File::from(master);
    let mut buf = [0u8; 4096];
    // Until every other holder of the terminal has closed it (EIO).
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        super::output::write_bytes(&buf[..n]);
    }
    drop(raw);
    session.wait().map_err(|e| e.to_string())
}

pub fn stage(a: StageArgs) -> ExitCode {
    let command = match super::decoded_command(a.hex, a.command) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match (a.enter, a.unit) {
        (Some(pid), _) => exec::session::stage_two(pid, a.tty, &command),
        (None, Some(unit)) => exec::session::stage_one(&unit, a.tty, &command),
        (None, None) => ExitCode::from(super::EXIT_USAGE),
    }
}
