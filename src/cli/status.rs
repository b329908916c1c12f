//! `podunit status [POD]`: pods like `kubectl get pods`, or one pod's containers with their logs.
use super::output::table;
use super::pods::{find, find_by, gather, pod_status};
use crate::common::paths::Paths;
use crate::common::timefmt;
use crate::generate::output::{self, GeneratedPod, PodKey};
use crate::status::container::State;
use crate::status::model::ContainerStatus;
use crate::status::pod::{PodStatus, source_of};
use crate::status::{knownpods, waiting};
use crate::systemd::Client;
use std::process::ExitCode;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    /// As text, with each pod's IP (kubectl's `-o wide`).
    Wide,
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
    /// The workloads only (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs),
    /// as `kubectl get` lists them; with `-o json`, one object per workload.
    #[arg(long, conflicts_with = "pod")]
    pub workloads: bool,
}

/// Everything `podunit status` shows besides the pods with units: the generator's report, the
/// waiting records, podunit-sync's own status, and what could not be read of them.
pub struct Known {
    pub report: Option<crate::generate::report::Report>,
    pub records: Vec<waiting::Record>,
    pub sync_status: String,
    pub unreadable: Vec<String>,
}

pub fn known(client: &Client, paths: &Paths) -> Known {
    let mut unreadable = Vec::new();
    let report =
        crate::generate::report::read(&paths.host(output::GENERATOR_DIR)).unwrap_or_else(|e| {
            unreadable.push(e);
            None
        });
    let records = waiting::read_all(paths).unwrap_or_else(|e| {
        unreadable.push(format!(
            "cannot read {}: {e} (why pods wait is shown to root)",
            paths.host(waiting::DIR).display()
        ));
        Vec::new()
    });
    let sync_status = client.status_text(SYNC_UNIT).unwrap_or_default();
    Known {
        report,
        records,
        sync_status,
        unreadable,
    }
}

const SYNC_UNIT: &str = "podunit-sync.service";

/// The rows of pods without units: refused by the generator, held back by the node agent.
pub fn unrendered(
    known: &Known,
    rendered: &[(GeneratedPod, bool)],
    paths: &Paths,
) -> Vec<PodStatus> {
    let mut out: Vec<PodStatus> = known
        .report
        .iter()
        .flat_map(|r| &r.refused)
        .map(|r| knownpods::refused(r, source_of(&r.file.to_string_lossy(), paths)))
        .collect();
    let mut uids: std::collections::HashSet<&str> = rendered
        .iter()
        .filter_map(|(p, _)| p.uid.as_deref())
        .collect();
    let agent_record = |uid: &str| {
        known
            .records
            .iter()
            .find(|r| r.writer == waiting::Writer::Agent && r.uid == uid)
    };
    // Local pods waiting for images: the generator named them (and their files) at the reload,
    // before podunit-sync has written anything about them.
    for w in known.report.iter().flat_map(|r| &r.waiting) {
        if !uids.insert(w.uid.as_str()) {
            continue;
        }
        let file = w.file.to_string_lossy();
        let since = std::fs::metadata(paths.host(&file))
            .or_else(|_| std::fs::metadata(&w.file))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_micros() as u64);
        out.push(knownpods::waiting_for_images(
            w,
            agent_record(&w.uid),
            source_of(&file, paths),
            since,
        ));
    }
    out.extend(
        known
            .records
            .iter()
            .filter(|r| r.writer == waiting::Writer::Agent && !uids.contains(r.uid.as_str()))
            .map(knownpods::unspooled),
    );
    out
}

/// The manifest of a pod without units, as the generator's report names it.
fn report_file(known: &Known, p: &PodStatus) -> Option<String> {
    let r = known.report.as_ref()?;
    let waiting = r.waiting.iter().map(|w| (&w.namespace, &w.name, &w.file));
    let refused = r.refused.iter().map(|w| (&w.namespace, &w.name, &w.file));
    waiting
        .chain(refused)
        .find(|(ns, name, _)| **ns == p.namespace && **name == p.name)
        .map(|(_, _, f)| f.display().to_string())
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// One `kubectl get pods`-style line per pod; `wide` adds the IP column (the node's IP for a
/// pod on the host network, `<none>` for one without an address, as kubectl shows them).
pub fn pods_table(pods: &[PodStatus], now: u64, wide: bool, node_ip: &str) -> String {
    let mut header = [
        "NAMESPACE",
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "SOURCE",
    ]
    .map(String::from)
    .to_vec();
    if wide {
        header.push("IP".into());
    }
    let mut rows = vec![header];
    for p in pods {
        let ip = || match p.pod_ips.first() {
            Some(ip) => ip.clone(),
            None if p.pod_unit_state.starts_with("active/") => node_ip.to_string(),
            None => "<none>".into(),
        };
        // A refused pod's name may be anything: one line per pod, whatever it holds.
        rows.push(vec![
            crate::generate::report::one_line(&p.namespace),
            crate::generate::report::one_line(&p.name),
            format!("{}/{}", p.ready_containers, p.total_containers),
            crate::generate::report::one_line(&p.display),
            p.restarts.to_string(),
            timefmt::age(p.start_time, now),
            p.source
                .map(|s| s.as_str().to_string())
                .unwrap_or("-".into()),
        ]);
        if wide {
            rows.last_mut().expect("pushed").push(ip());
        }
    }
    table(&rows)
}

fn state_text(s: &State) -> String {
    match s {
        State::Running { .. } => "Running".into(),
        State::Waiting { reason } => format!("Waiting ({reason})"),
        State::Terminated {
            reason,
            signal: Some(sig),
            ..
        } => format!("Terminated ({reason}, signal {sig})"),
        State::Terminated { reason, .. } => format!("Terminated ({reason})"),
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
    ) + &p
        .message
        .as_deref()
        .map(|m| format!("Message:     {}\n", crate::generate::report::one_line(m)))
        .unwrap_or_default()
        + &if p.pod_ips.is_empty() {
            String::new()
        } else {
            format!("IPs:         {}\n", p.pod_ips.join(", "))
        }
}

/// The workloads of the pods with units, as kubectl lists them: the controllers' from their
/// pods' statuses, the Jobs' and CronJobs' from podunit-sync's record (unread: a note).
fn workloads_of(
    paths: &Paths,
    pods: &[(GeneratedPod, bool)],
    statuses: &[PodStatus],
    now_us: u64,
    notes: &mut Vec<String>,
) -> Vec<super::workloads::Workload> {
    let mut created: std::collections::HashMap<&str, Option<u64>> = Default::default();
    let members: Vec<super::workloads::Member> = pods
        .iter()
        .filter_map(|(p, _)| {
            let workload = p.workload.clone()?;
            let st = statuses
                .iter()
                .find(|s| s.namespace == p.key.namespace && s.name == p.key.name)?;
            let source = p.source_path.as_deref().unwrap_or_default();
            let created = *created.entry(source).or_insert_with(|| {
                let modified = std::fs::metadata(paths.host(source))
                    .ok()?
                    .modified()
                    .ok()?;
                Some(
                    modified
                        .duration_since(std::time::UNIX_EPOCH)
                        .ok()?
                        .as_secs(),
                )
            });
            let ready = st
                .conditions
                .iter()
                .any(|c| c.kind == "Ready" && c.status == "True");
            Some(super::workloads::Member {
                namespace: p.key.namespace.clone(),
                workload,
                current: st.pod_unit_state.starts_with("active"),
                ready,
                created,
            })
        })
        .collect();
    let mut all = super::workloads::controller_rows(&members, now_us / 1_000_000);
    all.extend(jobs_of(paths, pods, now_us, notes));
    all
}

/// The Jobs' and CronJobs' rows, if any; their record unread is a note.
fn jobs_of(
    paths: &Paths,
    pods: &[(GeneratedPod, bool)],
    now_us: u64,
    notes: &mut Vec<String>,
) -> Vec<super::workloads::Workload> {
    let rendered: Vec<GeneratedPod> = pods
        .iter()
        .filter(|(p, _)| p.job.is_some())
        .map(|(p, _)| p.clone())
        .collect();
    if rendered.is_empty() {
        return Vec::new();
    }
    let file = paths.host(crate::localsync::statefile::STATE_FILE);
    let state = match crate::localsync::statefile::load(&file) {
        Ok(s) => s,
        Err(e) => {
            notes.push(format!(
                "warning: {e} (the progress of Jobs is shown to root)"
            ));
            Default::default()
        }
    };
    super::workloads::workloads(&rendered, &state, now_us / 1_000_000)
}

pub fn run(args: Args) -> ExitCode {
    match run_inner(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("podunit status: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(args: &Args) -> Result<(), String> {
    let paths = Paths::from_env();
    let client = super::system_bus()?;
    let pods = gather(&client, &paths)?;
    let known = known(&client, &paths);
    let now = now_us();
    let others = unrendered(&known, &pods, &paths);
    match &args.pod {
        None => {
            let mut statuses = pods
                .iter()
                .map(|(p, orphan)| pod_status(&client, &paths, p, *orphan, &known.records))
                .collect::<Result<Vec<_>, _>>()?;
            statuses.extend(others);
            statuses.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            let unreadable = known.unreadable.iter().map(|u| format!("warning: {u}"));
            let mut notes = Vec::new();
            // `-o json` without --workloads is the pods alone.
            let workloads = if args.workloads || args.output != Format::Json {
                workloads_of(&paths, &pods, &statuses, now, &mut notes)
            } else {
                Vec::new()
            };
            if args.workloads {
                match args.output {
                    Format::Json => outln!(
                        "{}",
                        serde_json::to_string_pretty(&workloads).expect("serializable")
                    ),
                    Format::Text | Format::Wide if workloads.is_empty() => {
                        errln!("No workloads found.")
                    }
                    Format::Text | Format::Wide => {
                        out!("{}", super::workloads::tables(&workloads))
                    }
                }
                for n in notes.into_iter().chain(unreadable) {
                    errln!("{n}");
                }
                return Ok(());
            }
            match args.output {
                Format::Json => {
                    outln!(
                        "{}",
                        serde_json::to_string_pretty(&statuses).expect("serializable")
                    );
                    // The pods carry their messages; what is about no pod goes beside the data.
                    let notes =
                        knownpods::notes(&[], known.report.as_ref(), Some(&known.sync_status));
                    for n in notes.into_iter().chain(unreadable) {
                        errln!("{n}");
                    }
                }
                Format::Text | Format::Wide => {
                    let mut notes = knownpods::notes(
                        &statuses,
                        known.report.as_ref(),
                        Some(&known.sync_status),
                    )
                    .into_iter()
                    .chain(notes)
                    .collect::<Vec<_>>();
                    notes.extend(unreadable);
                    if statuses.is_empty() {
                        errln!("No pods found.");
                    } else {
                        let wide = args.output == Format::Wide;
                        let node_ip = if wide {
                            crate::podstart::prepare::node_ip()
                        } else {
                            String::new()
                        };
                        out!("{}", pods_table(&statuses, now, wide, &node_ip));
                    }
                    if !workloads.is_empty() {
                        outln!();
                        out!("{}", super::workloads::tables(&workloads));
                    }
                    if !notes.is_empty() {
                        if !statuses.is_empty() {
                            outln!();
                        }
                        for n in &notes {
                            outln!("{n}");
                        }
                    }
                }
            }
        }
        Some(want) => {
            let (pod, orphan) = match find(&pods, want) {
                Ok(found) => found,
                Err(not_found) => {
                    // A pod without units: refused, or held back by the node agent.
                    let st = find_by(&others, |p| PodKey::new(&p.namespace, &p.name), want)
                        .map_err(|_| not_found)?;
                    if args.output == Format::Json {
                        outln!(
                            "{}",
                            serde_json::to_string_pretty(st).expect("serializable")
                        );
                    } else {
                        out!(
                            "{}",
                            pod_header(st, report_file(&known, st).as_deref(), now)
                        );
                    }
                    return Ok(());
                }
            };
            let st = pod_status(&client, &paths, pod, *orphan, &known.records)?;
            if args.output == Format::Json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&st).expect("serializable")
                );
                return Ok(());
            }
            out!("{}", pod_header(&st, pod.source_path.as_deref(), now));
            outln!();
            out!("{}", containers_table(&st, now));
            for c in &pod.containers {
                outln!();
                outln!("--- {} (last {} log lines) ---", c.name, args.tail);
                let opts = crate::logs::LogOptions {
                    tail_lines: Some(args.tail as u64),
                    ..Default::default()
                };
                let mut text = Vec::new();
                crate::logs::stream(&pod.key, &c.name, &opts, &mut text, &|| true)
                    .map_err(|e| e.to_string())?;
                super::output::write_bytes(&text);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
                    job: None,
                    ordered: None,
                    workload: None,
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
