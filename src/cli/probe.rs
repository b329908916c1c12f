//! `podunit probe-exec`: runs an exec probe's command inside a container (see
//! [`crate::prober::exec`]). Started by podunit-sync as a transient unit, never by people.

use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The container's unit (stage one).
    #[arg(long, required_unless_present = "enter")]
    unit: Option<String>,
    /// Seconds until the command is killed (stage one).
    #[arg(long, default_value_t = 1)]
    timeout: u64,
    /// Stage two: enter the container of this main PID and become the command.
    #[arg(long, value_name = "PID")]
    enter: Option<u32>,
    /// The command's arguments are hex-encoded ([`crate::common::argv_hex`]), as a transient
    /// unit's `ExecStart=` carries them.
    #[arg(long)]
    hex: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

pub fn run(a: Args) -> ExitCode {
    use crate::prober::exec;
    let command = match super::decoded_command(a.hex, a.command) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match (a.enter, a.unit) {
        (Some(pid), _) => exec::stage_two(pid, &command),
        (None, Some(unit)) => {
            exec::stage_one(&unit, Duration::from_secs(a.timeout.max(1)), &command)
        }
        (None, None) => ExitCode::from(super::EXIT_USAGE),
    }
}
