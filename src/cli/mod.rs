//! Command-line front ends. Library errors become messages and exit codes here, nowhere else.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub mod completions;
pub mod logs;
pub mod status;
pub mod sync;

/// Exit code for usage errors, as `podunit check` documents.
pub const EXIT_USAGE: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "podunit",
    version,
    about = "Run Kubernetes Pods as native systemd units"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show pods like `kubectl get pods`, or one pod's containers.
    Status(status::Args),
    /// Show a pod's logs from the journal.
    Logs(logs::Args),
    /// Print a shell completion script (the packages install them).
    #[command(hide = true)]
    Completions(completions::Args),
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Command::Status(a) => status::run(a),
        Command::Logs(a) => logs::run(a),
        Command::Completions(a) => completions::run(a),
    }
}
