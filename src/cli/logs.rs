//! `podunit logs POD [-c CONTAINER] [-f] [--previous]`: the container's output from the journal,
//! read by [`crate::logs`], as the kubelet API serves it.
use crate::common::paths::Paths;
use crate::generate::output::{ContainerKind, GeneratedPod};
use crate::logs::{self, LogOptions};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The pod (`NAME` or `NAMESPACE/NAME`).
    pub pod: String,
    /// The container. Without it, as kubectl does: the pod's first app container, and when the
    /// pod has others, a note on stderr naming the one shown and the rest.
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
        errln!("{}", defaulted_note(pod, &first.name));
    }
    Ok(first.name.clone())
}

/// kubectl's note when it picks the container: app containers first, then the init containers
/// (sidecars are init containers to Kubernetes), each marked `(init)`.
pub fn defaulted_note(pod: &GeneratedPod, picked: &str) -> String {
    let apps = pod
        .containers
        .iter()
        .filter(|c| c.kind == ContainerKind::App)
        .map(|c| c.name.clone());
    let inits = pod
        .containers
        .iter()
        .filter(|c| c.kind != ContainerKind::App)
        .map(|c| format!("{} (init)", c.name));
    let all: Vec<String> = apps.chain(inits).collect();
    format!(
        "Defaulted container \"{picked}\" out of: {}",
        all.join(", ")
    )
}

pub fn run(args: Args) -> ExitCode {
    match run_inner(&args) {
        Ok(code) => code,
        Err(e) => {
            errln!("podunit logs: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(args: &Args) -> Result<ExitCode, String> {
    let paths = Paths::from_env();
    let client = super::system_bus()?;
    let (pod, _) = super::pods::lookup(&client, &paths, &args.pod)?;
    let pod = &pod;
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
    // A run systemd could not start wrote nothing: say why, beside the log.
    if !args.previous
        && let Ok(st) = super::pods::pod_status(&client, &paths, pod, false, &[])
        && let Some(why) = start_error_of(&st, &container)
    {
        errln!("podunit logs: container {container:?} did not start: {why}");
    }
    logs::sync_journal();
    logs::stream(&pod.key, &container, &opts, &mut Stdout, &|| true).map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

/// The start error of `container`'s current or last run, if that is what it was.
fn start_error_of(st: &crate::status::pod::PodStatus, container: &str) -> Option<String> {
    use crate::status::container::State;
    let c = st
        .init_container_statuses
        .iter()
        .chain(&st.container_statuses)
        .find(|c| c.name == container)?;
    [Some(&c.state), c.last_state.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|s| match s {
            State::Terminated {
                reason,
                message: Some(m),
                ..
            } if reason == crate::status::start_error::REASON => Some(format!("{reason}: {m}")),
            _ => None,
        })
}

/// Standard output as [`super::output`] writes it: a closed pipe ends the program as it ends
/// `podunit status | head`.
struct Stdout;

impl std::io::Write for Stdout {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        super::output::write_bytes(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::output::PodKey;

    fn pod_of(containers: &[(&str, ContainerKind)]) -> GeneratedPod {
        GeneratedPod {
            key: PodKey::new("default", "web"),
            uid: None,
            pod_unit: None,
            slice: None,
            containers: containers
                .iter()
                .enumerate()
                .map(
                    |(i, (name, kind))| crate::generate::output::GeneratedContainer {
                        name: name.to_string(),
                        unit: format!("u{i}"),
                        kind: *kind,
                        order: i,
                        restart: "always".into(),
                        stop_timeout_s: None,
                    },
                )
                .collect(),
            source_path: None,
            hash: String::new(),
            job: None,
            ordered: None,
            workload: None,
        }
    }

    #[test]
    fn without_c_the_first_app_container_as_kubectl() {
        use ContainerKind::{App, Init, Sidecar};
        let p = pod_of(&[
            ("setup", Init),
            ("proxy", Sidecar),
            ("web", App),
            ("log", App),
        ]);
        assert_eq!(pick_container(&p, None).as_deref(), Ok("web"));
        assert_eq!(
            defaulted_note(&p, "web"),
            "Defaulted container \"web\" out of: web, log, setup (init), proxy (init)"
        );
        assert_eq!(pick_container(&p, Some("log")).as_deref(), Ok("log"));
        assert!(pick_container(&p, Some("nope")).is_err());
        assert_eq!(
            pick_container(&pod_of(&[("only", App)]), None).as_deref(),
            Ok("only")
        );
    }
}
