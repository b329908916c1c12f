//! `make bench`: measures podunit's generator as systemd runs it, a process over a directory of
//! manifests, and prints a table (wall time and peak RSS per pod count). No timings belong in tests;
//! they live here.
//!
//! Usage: `podunit-bench GENERATOR [POD_COUNT...]` (default counts: 1 110 1000).
//! `BENCH_RUNS=N` sets the measured runs per count (default 11, 5 for 10000 pods and more).
//! Three tables: the manifests as people write them (YAML) without the parsed-manifest cache
//! (cold: the first reload after a change, or /var not mounted yet), the same with the cache as
//! podunit-sync keeps it (warm: every reload after that), and the same objects as JSON, the
//! format of the spool podunit-sync writes in cluster mode (which needs no cache).
//!
//! With valgrind on PATH, one more run per count under callgrind gives the instructions per pod,
//! the measure that holds still on a busy machine (`BENCH_CALLGRIND=0` skips it; by default it
//! runs up to 1000 pods). `BENCH_KEEP=1` leaves the manifests in place, for a profiler.

mod manifest;
mod rusage;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The target: 1000 pods generated in under 50 ms.
const TARGET_PODS: usize = 1000;
const TARGET_WALL: Duration = Duration::from_millis(50);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((generator, counts)) = args.split_first() else {
        eprintln!("usage: podunit-bench GENERATOR [POD_COUNT...]");
        return ExitCode::from(2);
    };
    let generator = match std::fs::canonicalize(generator) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "podunit-bench: {generator}: {e} (build it: cargo build --release -p podunit-generator)"
            );
            return ExitCode::from(2);
        }
    };
    let counts: Vec<usize> = if counts.is_empty() {
        vec![1, 110, 1000]
    } else {
        match counts.iter().map(|c| c.parse()).collect() {
            Ok(c) => c,
            Err(_) => {
                eprintln!("podunit-bench: pod counts must be numbers");
                return ExitCode::from(2);
            }
        }
    };
    let tag = format!("podunit-bench-{}", std::process::id());
    let work = std::env::temp_dir().join(&tag);
    let out = out_base().join(&tag);
    let result = run_all(&generator, &counts, &work, &out);
    // BENCH_KEEP=1 keeps the manifests (and caches) for a profiler to run the generator on.
    if std::env::var_os("BENCH_KEEP").is_some_and(|v| v == "1") {
        eprintln!("podunit-bench: kept {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    let _ = std::fs::remove_dir_all(&out);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podunit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// systemd gives a generator a directory on tmpfs (/run/systemd/generator): the output goes to a
/// tmpfs too, or the numbers measure the disk. `BENCH_OUT_DIR` overrides.
fn out_base() -> PathBuf {
    if let Some(d) = std::env::var_os("BENCH_OUT_DIR") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// How the benchmark's manifests are written, and whether the cache is there.
#[derive(Clone, Copy)]
enum Format {
    Yaml,
    YamlCached,
    Json,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Yaml => "YAML (as people write manifests), cold: no parsed-manifest cache",
            Format::YamlCached => "YAML, warm: the parsed-manifest cache as podunit-sync keeps it",
            Format::Json => "JSON (the spool's format; needs no cache)",
        }
    }

    fn file(self, i: usize) -> (String, String) {
        match self {
            Format::Yaml | Format::YamlCached => (format!("pod-{i:05}.yaml"), manifest::pod(i)),
            Format::Json => (format!("pod-{i:05}.json"), manifest::pod_json(i)),
        }
    }
}

/// The goal for instructions per pod (half and a quarter of Quadlet's 2.79 M).
fn goal(format: Format) -> u64 {
    match format {
        Format::Yaml | Format::YamlCached => 1_400_000,
        Format::Json => 700_000,
    }
}

fn run_all(generator: &Path, counts: &[usize], work: &Path, out: &Path) -> Result<(), String> {
    println!("generator: {}", generator.display());
    println!(
        "manifests under {}, units written under {}",
        work.display(),
        out.display()
    );
    println!(
        "pods: {} containers + {} init container each, one pod per file, warm page cache",
        manifest::CONTAINERS,
        manifest::INIT_CONTAINERS
    );
    let mut verdicts = Vec::new();
    let mut goals = Vec::new();
    let callgrind = callgrind_available();
    for (f, format) in [Format::Yaml, Format::YamlCached, Format::Json]
        .into_iter()
        .enumerate()
    {
        println!();
        println!("manifests: {}", format.name());
        println!();
        println!(
            "| pods | files written | runs | instructions per pod | wall median | wall min | CPU (user+sys) median | peak RSS median |"
        );
        println!(
            "|-----:|--------------:|-----:|---------------------:|------------:|---------:|----------------------:|----------------:|"
        );
        for &n in counts {
            let runs = std::env::var("BENCH_RUNS")
                .ok()
                .and_then(|r| r.parse().ok())
                .unwrap_or(if n >= 10000 { 5 } else { 11 });
            let s = bench(
                generator,
                format,
                n,
                runs,
                callgrind && n <= callgrind_max(),
                &work.join(format!("f{f}-n{n}")),
                &out.join(format!("f{f}-n{n}")),
            )?;
            let per_pod = s.instructions.map(|i| i / n as u64);
            println!(
                "| {n} | {} | {runs} | {} | {} | {} | {} | {} |",
                s.files,
                per_pod.map_or("-".into(), |i| format!("{:.2} M", i as f64 / 1e6)),
                ms(s.wall_median),
                ms(s.wall_min),
                ms(s.cpu_median),
                mib(s.rss_median_kib),
            );
            if n == TARGET_PODS {
                verdicts.push((format, s.wall_median));
            }
            if let Some(i) = per_pod.filter(|_| n > 1) {
                goals.push((format, n, i));
            }
        }
    }
    if !verdicts.is_empty() || !goals.is_empty() {
        println!();
    }
    for (format, n, i) in goals {
        println!(
            "goal: at most {:.1} M instructions per pod, {} at {n} pods: {} ({:.2} M)",
            goal(format) as f64 / 1e6,
            format.name(),
            if i <= goal(format) { "met" } else { "MISSED" },
            i as f64 / 1e6
        );
    }
    for (format, w) in verdicts {
        println!(
            "target: {TARGET_PODS} pods in under {} ms, {}: {} (median {})",
            TARGET_WALL.as_millis(),
            format.name(),
            if w < TARGET_WALL { "met" } else { "MISSED" },
            ms(w)
        );
    }
    Ok(())
}

struct Summary {
    files: usize,
    wall_median: Duration,
    wall_min: Duration,
    cpu_median: Duration,
    rss_median_kib: u64,
    /// Instructions of one run under callgrind, all threads.
    instructions: Option<u64>,
}

/// Writes `n` manifests under `dir/root/etc/pods.d`, runs the generator once to warm the caches
/// (and to check it succeeds), then `runs` measured times, each into a fresh empty `out` as systemd
/// gives it.
fn bench(
    generator: &Path,
    format: Format,
    n: usize,
    runs: usize,
    callgrind: bool,
    dir: &Path,
    out: &Path,
) -> Result<Summary, String> {
    let root = dir.join("root");
    let pods = root.join("etc/pods.d");
    std::fs::create_dir_all(&pods).map_err(|e| format!("{}: {e}", pods.display()))?;
    for i in 0..n {
        let (name, text) = format.file(i);
        let f = pods.join(name);
        std::fs::write(&f, text).map_err(|e| format!("{}: {e}", f.display()))?;
    }
    if let Format::YamlCached = format {
        // What podunit-sync does after a reload: its own code, on the same files.
        podunit::manifest::cache::refresh(&podunit::common::paths::Paths::with_root(&root))
            .map_err(|e| format!("parsed-manifest cache: {e}"))?;
    }
    let stderr = dir.join("stderr");
    run_once(generator, &root, out, &stderr)?;
    let files = count_files(out);
    let expected = n * manifest::UNITS_PER_POD;
    if files < expected {
        return Err(format!(
            "{n} pods: only {files} files written, expected at least {expected}"
        ));
    }
    let mut samples: Vec<rusage::Sample> = Vec::with_capacity(runs);
    for _ in 0..runs {
        samples.push(run_once(generator, &root, out, &stderr)?);
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let instructions = if callgrind {
        Some(instructions(generator, &root, out, dir)?)
    } else {
        None
    };
    let mut rss: Vec<u64> = samples.iter().map(|s| s.max_rss_kib).collect();
    rss.sort();
    Ok(Summary {
        files,
        wall_median: median(samples.iter().map(|s| s.wall).collect()),
        wall_min: samples.iter().map(|s| s.wall).min().unwrap_or_default(),
        cpu_median: median(samples.iter().map(|s| s.user + s.sys).collect()),
        rss_median_kib: rss[rss.len() / 2],
        instructions,
    })
}

fn callgrind_available() -> bool {
    std::env::var("BENCH_CALLGRIND").map_or(true, |v| v != "0")
        && Command::new("valgrind")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// The largest pod count run under callgrind (about a minute for 1000 YAML pods).
fn callgrind_max() -> usize {
    std::env::var("BENCH_CALLGRIND_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// The instructions one generator run executes (every thread), counted by callgrind.
fn instructions(generator: &Path, root: &Path, out: &Path, dir: &Path) -> Result<u64, String> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let profile = dir.join("callgrind.out");
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", profile.display()))
        .arg(generator)
        .arg(out)
        .env("PODUNIT_ROOT", root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("valgrind: {e}"))?;
    if !status.success() {
        return Err(format!(
            "the generator under callgrind exited with {status}"
        ));
    }
    let text =
        std::fs::read_to_string(&profile).map_err(|e| format!("{}: {e}", profile.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("totals: "))
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("{}: no totals line", profile.display()))
}

/// One generator run into an empty `out`; fails unless it exits 0. Messages (warnings) are shown
/// once: the manifest is meant to need none, so that the normal path is what gets measured.
fn run_once(
    generator: &Path,
    root: &Path,
    out: &Path,
    stderr: &Path,
) -> Result<rusage::Sample, String> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let err_file =
        std::fs::File::create(stderr).map_err(|e| format!("{}: {e}", stderr.display()))?;
    let mut cmd = Command::new(generator);
    cmd.arg(out)
        .env("PODUNIT_ROOT", root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err_file);
    let sample = rusage::run(&mut cmd).map_err(|e| format!("{}: {e}", generator.display()))?;
    let msg = std::fs::read_to_string(stderr).unwrap_or_default();
    if !msg.is_empty() && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!(
            "podunit-bench: note: the generator printed messages, e.g.\n{}",
            msg.lines().next().unwrap_or_default()
        );
    }
    if sample.status != Some(0) {
        let head: String = msg.lines().take(10).collect::<Vec<_>>().join("\n");
        return Err(format!(
            "generator exited with {:?}; its stderr began:\n{head}",
            sample.status
        ));
    }
    Ok(sample)
}

fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    let mut todo: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                Ok(_) => n += 1,
                Err(_) => {}
            }
        }
    }
    n
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}
