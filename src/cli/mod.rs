//! Command-line front ends. Library errors become messages and exit codes here, nowhere else.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[macro_use]
mod output;
pub mod check;
pub mod cluster;
pub mod completions;
pub mod exec;
pub mod hook;
pub mod image;
pub mod logs;
pub mod pods;
pub mod prepare;
pub mod probe;
pub mod status;
pub mod sync;
pub mod volume;
pub mod workloads;

/// Exit code for usage errors, as `podunit check` documents.
pub const EXIT_USAGE: u8 = 2;

/// The command of an internal stage (`exec-stage`, `probe-exec`), decoded when `--hex`.
fn decoded_command(hex: bool, command: Vec<String>) -> Result<Vec<String>, ExitCode> {
    if !hex {
        return Ok(command);
    }
    crate::common::argv_hex::decode(&command).map_err(|e| {
        errln!("podunit: --hex: {e}");
        ExitCode::from(EXIT_USAGE)
    })
}

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
    /// Validate manifests; print each problem as `FILE: namespace/pod: field.path: what is wrong`.
    Check(check::CheckArgs),
    /// Print (or write) exactly the units the generator makes of the manifests.
    Render(check::RenderArgs),
    /// Show pods like `kubectl get pods`, or one pod's containers.
    Status(status::Args),
    /// Pull, list, inspect and remove images in the local store.
    Image(image::Args),
    /// List the node's PersistentVolumeClaims; delete a released claim's data.
    Volume(volume::Args),
    /// Show a pod's logs from the journal.
    Logs(logs::Args),
    /// Run a command inside a running container, as `kubectl exec` does.
    Exec(exec::Args),
    /// Prepare a pod's volumes and environment (run by the pod's unit).
    #[command(hide = true)]
    PodPrepare(prepare::Args),
    /// Update the files volumes of a running pod from its ConfigMaps, Secrets and tokens now
    /// (run by podunit-sync as a transient unit).
    #[command(hide = true)]
    PodRefresh(prepare::Args),
    /// Check a container's subPath inside its volume, creating it when missing (run by the
    /// container's unit before it starts).
    #[command(hide = true)]
    Subpath(prepare::SubpathArgs),
    /// Start a container's command in a PID namespace of its own (run by the container's unit).
    #[command(hide = true)]
    PidInit(crate::pidinit::Args),
    /// Hold a pod's PID namespace (started by `pod-prepare`).
    #[command(hide = true)]
    PodPause,
    /// Remove a pod's runtime files (run by the pod's unit).
    #[command(hide = true)]
    PodCleanup(prepare::Args),
    /// Detach a removed pod from the network and delete its directories (run by podunit-sync as
    /// a transient unit: a removed pod's unit stops without its commands).
    #[command(hide = true)]
    PodForget(prepare::ForgetArgs),
    /// Delete the CNI attachments no pod owns any more (run by podunit-sync as a transient unit
    /// when it starts).
    #[command(hide = true)]
    CniSweep(prepare::SweepArgs),
    /// Run an exec probe's command inside a container (run by podunit-sync as a transient unit).
    #[command(hide = true)]
    ProbeExec(probe::Args),
    /// Run an httpGet or sleep lifecycle hook (run by the container's unit).
    #[command(hide = true)]
    Hook(hook::Args),
    /// Run a command inside a container for `exec` or the kubelet API (a transient unit).
    #[command(hide = true)]
    ExecStage(exec::StageArgs),
    /// Connect to ports inside a pod's network namespace for port-forward (a transient unit
    /// in that namespace, started by podunit-sync).
    #[command(hide = true)]
    PortForwardDialer,
    /// Print a shell completion script (the packages install them).
    #[command(hide = true)]
    Completions(completions::Args),
}

/// The system manager's bus, for the commands that ask systemd (`status`, `logs`). Outside a
/// systemd host (a container, a chroot, a build machine) the error says what is missing.
pub fn system_bus() -> Result<crate::systemd::Client, String> {
    // zbus's message names the address it tried.
    crate::systemd::Client::system().map_err(|e| {
        format!(
            "this needs systemd's system bus, which is not reachable ({}); run it on a host \
             booted with systemd",
            e.source
        )
    })
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
        Command::Check(a) => check::check(a),
        Command::Render(a) => check::render(a),
        Command::PodPrepare(a) => prepare::prepare(a),
        Command::PodRefresh(a) => prepare::refresh(a),
        Command::PodCleanup(a) => prepare::cleanup(a),
        Command::PodForget(a) => prepare::forget(a),
        Command::CniSweep(a) => prepare::cni_sweep(a),
        Command::Subpath(a) => prepare::subpath(a),
        Command::PidInit(a) => crate::pidinit::run(a),
        Command::PodPause => crate::pidinit::pause(),
        Command::Status(a) => status::run(a),
        Command::ProbeExec(a) => probe::run(a),
        Command::Hook(a) => hook::run(a),
        Command::Logs(a) => logs::run(a),
        Command::Exec(a) => exec::run(a),
        Command::ExecStage(a) => exec::stage(a),
        Command::PortForwardDialer => crate::kubelet::netns_dial::run_dialer(),
        Command::Image(a) => image::run(a),
        Command::Volume(a) => volume::run(a),
        Command::Completions(a) => completions::run(a),
    }
}
