//! `podunit-sync`: the reconcile helper (local mode) and, with a kubeconfig, the node agent.
use std::process::ExitCode;

pub fn main() -> ExitCode {
    eprintln!("podunit-sync: not implemented yet");
    ExitCode::FAILURE
}
