//! `podunit status [POD]`.
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A pod (`NAME` or `NAMESPACE/NAME`): show its containers.
    pub pod: Option<String>,
}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("podunit status: not implemented yet");
    ExitCode::FAILURE
}
