//! `podunit-sync`: the reconcile helper (local mode) and, with a kubeconfig, the node agent.
use std::process::ExitCode;

pub fn main() -> ExitCode {
    let paths = crate::paths::Paths::from_env();
    match crate::config::Config::load(&paths.config_file()) {
        Ok(l) if l.config.kubeconfig.is_some() => return super::cluster::run(l, paths),
        Ok(_) => {}
        Err(e) => {
            eprintln!("podunit-sync: {e}");
            return ExitCode::FAILURE;
        }
    }
    eprintln!("podunit-sync: not implemented yet");
    ExitCode::FAILURE
}
