//! `podunit hook`: runs an `httpGet` or `sleep` lifecycle hook (see [`crate::prober::hook_run`]),
//! or an exec preStop inside the container (see [`crate::probe::hook::helper_args`]).
//! Written into container units as `ExecStartPost=`/`ExecStop=`, never run by people.

use clap::{Args as ClapArgs, Subcommand};
use std::path::Path;
use std::process::ExitCode;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// A preStop hook: runs only while the main process runs.
    #[arg(long)]
    pre_stop: bool,
    /// Where the run leaves what podunit-sync reports as events (a failure's error, an HTTP
    /// fallback); only when podunit-sync made the directory above the pod's.
    #[arg(long)]
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
    /// Becomes COMMAND inside the container of `$MAINPID`, as that process runs.
    Exec {
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

pub fn run(a: Args) -> ExitCode {
    use crate::prober::{check::Get, hook_run};
    if a.pre_stop && !hook_run::main_process_running(std::env::var("MAINPID").ok().as_deref()) {
        return ExitCode::SUCCESS;
    }
    let record = a.record.as_deref().and_then(record_dir);
    if let Some(r) = record {
        // An earlier run's error is not this one's.
        let _ = std::fs::remove_file(r);
    }
    let result = match a.handler {
        Handler::Sleep { seconds } => {
            hook_run::sleep(seconds);
            Ok(hook_run::Answer::Direct)
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
        // No record: systemd's journal entry has its exit.
        Handler::Exec { command } => return exec(&command),
    };
    let leave = |path: &str, what: &str| {
        use crate::common::atomicfile;
        let opts = atomicfile::Options::new(0o600);
        if let Err(w) = atomicfile::write(Path::new(path), what.as_bytes(), opts) {
            eprintln!("podunit hook: {w}");
        }
    };
    match result {
        Ok(hook_run::Answer::Direct) => ExitCode::SUCCESS,
        Ok(hook_run::Answer::HttpFallback(host)) => {
            if let Some(r) = record {
                leave(&crate::probe::hook::fallback_path(r), &host);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("podunit hook: {e}");
            if let Some(r) = record {
                leave(r, &e);
            }
            ExitCode::FAILURE
        }
    }
}

/// Becomes `command` in the container of the unit's main process (`$MAINPID`, checked by the
/// caller), so that systemd sees the command's own exit (its journal entry is what a failure's
/// event is read from). 126 when the container cannot be entered, as stage two exits then.
fn exec(command: &[String]) -> ExitCode {
    use crate::prober::{exec, hook_run};
    use std::os::unix::process::CommandExt;
    let pid = std::env::var("MAINPID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(0);
    let env = hook_run::container_env(std::env::vars());
    let e = match exec::stage_two_command(pid, command, env) {
        Ok(mut c) => c.exec().to_string(),
        Err(e) => e,
    };
    eprintln!("podunit hook: cannot enter the container: {e}");
    ExitCode::from(exec::ENTER_FAILED)
}

/// `record` when podunit-sync made the records' directory (see [`crate::probe::hook::RECORDS`]),
/// with the pod's directory made.
fn record_dir(record: &str) -> Option<&str> {
    use std::os::unix::fs::DirBuilderExt;
    let pod = Path::new(record).parent()?;
    if !pod.parent()?.is_dir() {
        return None;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(pod) {
        Ok(()) => Some(record),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Some(record),
        Err(e) => {
            eprintln!("podunit hook: {}: {e}", pod.display());
            None
        }
    }
}
