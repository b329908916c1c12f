//! `podunit hook`: runs an `httpGet` or `sleep` lifecycle hook (see [`crate::probe::hook_run`]).
//! Written into container units as `ExecStartPost=`/`ExecStop=`, never run by people.

use clap::{Args as ClapArgs, Subcommand};
use std::path::Path;
use std::process::ExitCode;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// A preStop hook: runs only while the main process runs; a failure leaves its error in
    /// `--record` for podunit-sync's event.
    #[arg(long)]
    pre_stop: bool,
    /// Where a failed preStop hook leaves its error.
    #[arg(long, requires = "pre_stop")]
    record: Option<String>,
    #[command(subcommand)]
    handler: Handler,
}

#[derive(Subcommand, Debug)]
enum Handler {
    /// GET scheme://host:port/path.
    Http {
        #[arg(long)]
        https: bool,
        /// Empty: the pod's IP.
        #[arg(long, default_value = "")]
        host: String,
        /// 0: a port name the container does not have.
        #[arg(long)]
        port: u16,
        #[arg(long, default_value = "/")]
        path: String,
        /// `Name:value`, as often as needed.
        #[arg(long = "header")]
        headers: Vec<String>,
    },
    /// Waits.
    Sleep {
        #[arg(long)]
        seconds: u64,
    },
}

pub fn run(a: Args) -> ExitCode {
    use crate::probe::{check::Get, hook_run};
    if a.pre_stop && !hook_run::main_process_running(std::env::var("MAINPID").ok().as_deref()) {
        return ExitCode::SUCCESS;
    }
    if let Some(r) = &a.record {
        // An earlier run's error is not this one's.
        let _ = std::fs::remove_file(r);
    }
    let result = match a.handler {
        Handler::Sleep { seconds } => {
            hook_run::sleep(seconds);
            Ok(())
        }
        Handler::Http {
            https,
            host,
            port,
            path,
            headers,
        } => {
            let headers: Vec<(String, String)> = headers
                .iter()
                .map(|h| match h.split_once(':') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (h.clone(), String::new()),
                })
                .collect();
            let req = Get {
                https,
                host: &host,
                port,
                path: &path,
                headers: &headers,
            };
            hook_run::http(&req, &crate::podstart::prepare::node_ip())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podunit hook: {e}");
            if let Some(r) = a.record
                && let Err(w) = crate::common::atomicfile::write(Path::new(&r), e.as_bytes())
            {
                eprintln!("podunit hook: {r}: {w}");
            }
            ExitCode::FAILURE
        }
    }
}
