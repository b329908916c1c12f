//! `podunit logs POD [-c CONTAINER] [-f] [--previous]`: the container's output from the journal,
//! selected by the fields every container unit sets (`LogExtraFields=POD_NAMESPACE= POD_NAME=
//! CONTAINER_NAME=`). `--previous` is the run before the current one: systemd gives every run
//! of a unit its own `_SYSTEMD_INVOCATION_ID` (journalctl 252 has no `--invocation` yet, so the
//! previous id is found in the journal).
use crate::common::paths::Paths;
use crate::localsync::generator_output::{ContainerKind, GeneratedPod, PodKey};
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
    pub tail: Option<usize>,
}

/// The journalctl command line for a container's log. Pure, so its matches are tested.
pub fn journalctl_args(
    pod: &PodKey,
    container: &str,
    follow: bool,
    tail: Option<usize>,
    invocation: Option<&str>,
) -> Vec<String> {
    let mut v: Vec<String> = ["journalctl", "--no-pager", "--quiet", "-o", "cat"]
        .map(String::from)
        .to_vec();
    if follow {
        v.push("--follow".into());
    }
    if let Some(n) = tail {
        v.push(format!("--lines={n}"));
    }
    // Matches on different fields are ANDed by journalctl.
    v.push(format!("POD_NAMESPACE={}", pod.namespace));
    v.push(format!("POD_NAME={}", pod.name));
    v.push(format!("CONTAINER_NAME={container}"));
    if let Some(id) = invocation {
        v.push(format!("_SYSTEMD_INVOCATION_ID={id}"));
    }
    v
}

/// The invocation before `current` among the invocation ids in journal order. When the current
/// run has logged nothing yet, the last one logged is the previous run.
pub fn previous_invocation(ids_in_order: &[String], current: &str) -> Option<String> {
    let mut distinct: Vec<&str> = Vec::new();
    for id in ids_in_order {
        if distinct.last() != Some(&id.as_str()) && !id.is_empty() {
            distinct.retain(|d| d != id);
            distinct.push(id);
        }
    }
    match distinct.iter().position(|d| *d == current) {
        Some(0) => None,
        Some(i) => Some(distinct[i - 1].to_string()),
        None => distinct.last().map(|s| s.to_string()),
    }
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
        let mut argv = journalctl_args(&pod.key, &container, false, None, None);
        argv.extend(["-o", "json", "--output-fields=_SYSTEMD_INVOCATION_ID"].map(String::from));
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .map_err(|e| format!("cannot run journalctl: {e}"))?;
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["_SYSTEMD_INVOCATION_ID"].as_str().map(str::to_string))
            .collect();
        match previous_invocation(&ids, &current) {
            Some(id) => Some(id),
            None => {
                return Err(format!(
                    "previous terminated container \"{container}\" in pod {} not found",
                    pod.key
                ));
            }
        }
    } else {
        None
    };
    let argv = journalctl_args(
        &pod.key,
        &container,
        args.follow,
        args.tail,
        invocation.as_deref(),
    );
    let st = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .status()
        .map_err(|e| format!("cannot run journalctl: {e}"))?;
    Ok(if st.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journalctl_matches_the_unit_fields() {
        let k = PodKey::new("default", "web");
        assert_eq!(
            journalctl_args(&k, "nginx", true, Some(5), Some("abc")),
            vec![
                "journalctl",
                "--no-pager",
                "--quiet",
                "-o",
                "cat",
                "--follow",
                "--lines=5",
                "POD_NAMESPACE=default",
                "POD_NAME=web",
                "CONTAINER_NAME=nginx",
                "_SYSTEMD_INVOCATION_ID=abc"
            ]
        );
    }

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
                    |(i, (name, kind))| crate::localsync::generator_output::GeneratedContainer {
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

    #[test]
    fn previous_invocation_is_the_run_before() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            previous_invocation(&ids(&["a", "a", "b", "b", "c"]), "c").as_deref(),
            Some("b")
        );
        // The current run has not logged yet: the last one that did is the previous.
        assert_eq!(
            previous_invocation(&ids(&["a", "b"]), "c").as_deref(),
            Some("b")
        );
        assert_eq!(previous_invocation(&ids(&["c"]), "c"), None);
        assert_eq!(previous_invocation(&ids(&[]), "c"), None);
    }
}
