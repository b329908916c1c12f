//! `podunit completions SHELL`: prints a completion script. Hidden: the packages install the
//! scripts, generated from this at build time, so they always match the installed CLI.

use clap::CommandFactory;
use clap_complete::Shell;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

pub fn run(args: Args) -> ExitCode {
    let mut cmd = super::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "podunit", &mut script);
    super::output::write_bytes(&script);
    ExitCode::SUCCESS
}
