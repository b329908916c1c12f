//! `podunit status [POD]`: pods like `kubectl get pods`, or one pod's containers with their logs.
use super::pods::{find, gather, pod_status};
use crate::common::paths::Paths;
use crate::common::timefmt;
use crate::status::pod::{ContainerState, ContainerStatus, PodStatus};
use crate::systemd::Client;
use std::process::ExitCode;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A pod (`NAME` or `NAMESPACE/NAME`): show its containers.
    pub pod: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// Log lines shown per container with POD.
    #[arg(long, default_value_t = 10)]
    pub tail: usize,
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Left-aligned columns separated by three spaces, as kubectl prints.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}   ", w = width[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One `kubectl get pods`-style line per pod.
pub fn pods_table(pods: &[PodStatus], now: u64) -> String {
    let mut rows = vec![
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "SOURCE",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for p in pods {
        rows.push(vec![
            p.namespace.clone(),
            p.name.clone(),
            format!("{}/{}", p.ready_containers, p.total_containers),
            p.display.clone(),
            p.restarts.to_string(),
            timefmt::age(p.start_time, now),
            p.source
                .map(|s| s.as_str().to_string())
                .unwrap_or("-".into()),
        ]);
    }
    table(&rows)
}

fn state_text(s: &ContainerState) -> String {
    match s {
        ContainerState::Running { .. } => "Running".into(),
        ContainerState::Waiting { reason } => format!("Waiting ({reason})"),
        ContainerState::Terminated {
            reason,
            signal: Some(sig),
            ..
        } => format!("Terminated ({reason}, signal {sig})"),
        ContainerState::Terminated { reason, .. } => format!("Terminated ({reason})"),
    }
}

/// The containers of one pod.
pub fn containers_table(p: &PodStatus, now: u64) -> String {
    let mut rows = vec![
        [
            "CONTAINER",
            "KIND",
            "STATE",
            "EXIT",
            "RESTARTS",
            "STARTED",
            "UNIT",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for c in p
        .init_container_statuses
        .iter()
        .chain(&p.container_statuses)
    {
        rows.push(container_row(c, now));
    }
    table(&rows)
}

fn container_row(c: &ContainerStatus, now: u64) -> Vec<String> {
    let started = c.started_at();
    vec![
        c.name.clone(),
        serde_json::to_value(c.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        state_text(&c.state),
        c.exit_code().map(|e| e.to_string()).unwrap_or("-".into()),
        c.restart_count.to_string(),
        if started == 0 {
            "-".into()
        } else {
            format!("{} ago", timefmt::age(started, now))
        },
        c.unit.clone(),
    ]
}

pub fn pod_header(p: &PodStatus, source_path: Option<&str>, now: u64) -> String {
    let conds: Vec<String> = p
        .conditions
        .iter()
        .map(|c| format!("{}={}", c.kind, c.status))
        .collect();
    let started = if p.start_time == 0 {
        "-".to_string()
    } else {
        format!(
            "{} ({} ago)",
            timefmt::rfc3339(p.start_time),
            timefmt::age(p.start_time, now)
        )
    };
    format!(
        "Pod:         {}/{}\nUID:         {}\nSource:      {}{}\nStatus:      {} (phase {:?})\nReady:       {}/{}\nRestarts:    {}\nStarted:     {started}\nConditions:  {}\nPod unit:    {} ({})\n",
        p.namespace,
        p.name,
        p.uid.as_deref().unwrap_or("-"),
        p.source.map(|s| s.as_str()).unwrap_or("-"),
        source_path.map(|s| format!(" ({s})")).unwrap_or_default(),
        p.display,
        p.phase,
        p.ready_containers,
        p.total_containers,
        p.restarts,
        conds.join(" "),
        p.pod_unit,
        p.pod_unit_state,
    )
}

pub fn run(args: Args) -> ExitCode {
    match run_inner(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podunit status: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(args: &Args) -> Result<(), String> {
    let paths = Paths::from_env();
    let client = Client::system().map_err(|e| e.to_string())?;
    let pods = gather(&client, &paths)?;
    let now = now_us();
    match &args.pod {
        None => {
            let statuses = pods
                .iter()
                .map(|(p, orphan)| pod_status(&client, &paths, p, *orphan))
                .collect::<Result<Vec<_>, _>>()?;
            match args.output {
                Format::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&statuses).expect("serializable")
                ),
                Format::Text if statuses.is_empty() => eprintln!("No pods found."),
                Format::Text => print!("{}", pods_table(&statuses, now)),
            }
        }
        Some(want) => {
            let (pod, orphan) = find(&pods, want)?;
            let st = pod_status(&client, &paths, pod, *orphan)?;
            if args.output == Format::Json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&st).expect("serializable")
                );
                return Ok(());
            }
            print!("{}", pod_header(&st, pod.source_path.as_deref(), now));
            println!();
            print!("{}", containers_table(&st, now));
            for c in &pod.containers {
                println!();
                println!("--- {} (last {} log lines) ---", c.name, args.tail);
                let argv =
                    super::logs::journalctl_args(&pod.key, &c.name, false, Some(args.tail), None);
                let out = std::process::Command::new(&argv[0])
                    .args(&argv[1..])
                    .output()
                    .map_err(|e| format!("cannot run journalctl: {e}"))?;
                print!("{}", String::from_utf8_lossy(&out.stdout));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::localsync::generator_output::{GeneratedPod, PodKey};

    #[test]
    fn tables_align_like_kubectl() {
        let t = table(&[
            vec!["A".into(), "BB".into(), "C".into()],
            vec!["long".into(), "x".into(), "y".into()],
        ]);
        assert_eq!(t, "A      BB   C\nlong   x    y\n");
    }

    #[test]
    fn find_by_name_and_key() {
        let mk = |ns: &str, n: &str| {
            (
                GeneratedPod {
                    key: PodKey::new(ns, n),
                    uid: None,
                    pod_unit: None,
                    slice: None,
                    containers: vec![],
                    source_path: None,
                    hash: String::new(),
                },
                false,
            )
        };
        let pods = vec![
            mk("a", "web"),
            mk("default", "web"),
            mk("a", "db"),
            mk("b", "db"),
        ];
        assert_eq!(
            find(&pods, "web").unwrap().0.key,
            PodKey::new("default", "web")
        );
        assert_eq!(find(&pods, "b/db").unwrap().0.key, PodKey::new("b", "db"));
        assert!(find(&pods, "db").unwrap_err().contains("ambiguous"));
        assert!(find(&pods, "nope").is_err());
    }
}
