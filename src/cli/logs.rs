//! `podunit logs POD [-c CONTAINER] [-f] [--previous]`: the container's output from the journal,
//! read by [`crate::logs`], as the kubelet API serves it.
use crate::common::paths::Paths;
use crate::localsync::generator_output::{ContainerKind, GeneratedPod};
use crate::logs::{self, LogOptions};
use crate::systemd::Client;
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
    /// Only the last N lines.
    #[arg(long)]
    pub tail: Option<u64>,
    /// Each line prefixed with its time (RFC 3339).
    #[arg(long)]
    pub timestamps: bool,
}

/// The container to show: the one asked for, or the only/first app container (as kubectl
/// defaults, saying so on stderr).
pub fn pick_container(pod: &GeneratedPod, asked: Option<&str>) -> Result<String, String> {
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    if let Some(c) = asked {
        return if names.contains(&c) {
            Ok(c.to_string())
        } else {
            Err(format!(
                "container {c} is not in pod {}; its containers: {}",
                pod.key,
                names.join(", ")
            ))
        };
    }
    let first = pod
        .containers
        .iter()
        .find(|c| c.kind == ContainerKind::App)
        .or(pod.containers.first())
        .ok_or_else(|| format!("pod {} has no containers", pod.key))?;
    if names.len() > 1 {
        eprintln!(
            "Defaulted container \"{}\" out of: {}",
            first.name,
            names.join(", ")
        );
    }
    Ok(first.name.clone())
}

pub fn run(args: Args) -> ExitCode {
    match run_inner(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("podunit logs: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(args: &Args) -> Result<ExitCode, String> {
    let paths = Paths::from_env();
    let client = Client::system().map_err(|e| e.to_string())?;
    let pods = super::pods::gather(&client, &paths)?;
    let (pod, _) = super::pods::find(&pods, &args.pod)?;
    let container = pick_container(pod, args.container.as_deref())?;
    let invocation = if args.previous {
        let unit = &pod
            .containers
            .iter()
            .find(|c| c.name == container)
            .expect("picked from the pod")
            .unit;
        let current = client
            .unit_state(unit)
            .map_err(|e| e.to_string())?
            .invocation_id;
        Some(logs::find_previous(&pod.key, &container, &current).map_err(|e| e.to_string())?)
    } else {
        None
    };
    let opts = LogOptions {
        follow: args.follow,
        tail_lines: args.tail,
        timestamps: args.timestamps,
        invocation,
        ..Default::default()
    };
    let mut out = std::io::stdout().lock();
    logs::stream(&pod.key, &container, &opts, &mut out, &|| true).map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
