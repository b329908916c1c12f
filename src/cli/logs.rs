//! `podunit logs POD [-c CONTAINER] [-f] [--previous]`.
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The pod (`NAME` or `NAMESPACE/NAME`).
    pub pod: String,
    /// The container; required when the pod has more than one.
    #[arg(short = 'c', long)]
    pub container: Option<String>,
    /// Follow the log.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The previous run of the container.
    #[arg(short = 'p', long)]
    pub previous: bool,
}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("podunit logs: not implemented yet");
    ExitCode::FAILURE
}
