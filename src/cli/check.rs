//! `podunit check [PATH...]` and `podunit render [PATH...]`: the generator's own code, shown.

use crate::common::diag::Problem;
use crate::common::paths::Paths;
use crate::generate::{
    Generated, generate_with_policy, node_setup_with_policy, render_text, write_tree,
};
use crate::manifest::Catalog;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Manifest files or directories (default: /etc/pods.d, /run/pods.d and the spool).
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    pub output: Format,
}

#[derive(clap::Args, Debug)]
pub struct RenderArgs {
    /// Manifest files or directories (default: /etc/pods.d, /run/pods.d and the spool).
    pub paths: Vec<PathBuf>,
    /// Write the unit tree here instead of printing it.
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
}

/// One generation over the paths named (or the manifest directories), as boot would do it.
struct Run {
    g: Generated,
    catalog: Catalog,
    config_problem: Option<String>,
    /// What is worth saying that is no problem of a manifest: paths outside the manifest
    /// directories, manifest directories that do not exist.
    notes: Vec<String>,
}

fn run_generate(items: &[PathBuf]) -> Run {
    let paths = Paths::from_env();
    // Relative paths name files the units must name absolutely (SourcePath=); a symlink keeps
    // its own name, as the generator names it.
    let cwd = std::env::current_dir().unwrap_or_default();
    let items: Vec<PathBuf> = items
        .iter()
        .map(|p| crate::manifest::placement::absolute(p, &cwd))
        .collect();
    let (catalog, mut notes) = if items.is_empty() {
        let dirs = paths.manifest_dirs();
        let missing: Vec<String> = dirs
            .iter()
            .filter(|(_, d)| !d.exists())
            .map(|(_, d)| d.display().to_string())
            .collect();
        // Only /etc/pods.d missing is said too: it is where manifests are expected.
        let notes = if missing.len() == dirs.len() {
            vec![format!("{NO_DIRS}: {}", missing.join(", "))]
        } else {
            missing
                .iter()
                .filter(|d| Path::new(d) == dirs[0].1)
                .map(|d| format!("note: {d} does not exist"))
                .collect()
        };
        (Catalog::load(&paths), notes)
    } else {
        Catalog::load_placed(&paths, &items)
    };
    let (node, images, config_problem, policy) = node_setup_with_policy(&paths);
    if let Some(p) = &config_problem {
        notes.push(format!("warning: {p}"));
    }
    let g = generate_with_policy(&catalog, &node, &images, policy.as_ref());
    Run {
        g,
        catalog,
        config_problem,
        notes,
    }
}

/// The summary line: pods that would run, errors, warnings; or that there was nothing to read.
fn summary(g: &Generated, nothing_to_read: bool) -> String {
    let errors = g.problems.iter().filter(|p| p.is_error()).count();
    let notes = g.problems.iter().filter(|p| p.is_note()).count();
    let warnings = g.problems.len() - errors - notes;
    let pulls = g
        .problems
        .iter()
        .filter(|p| {
            p.is_note() && p.reason.as_deref() == Some(crate::translate::image::IMAGE_PENDING)
        })
        .count();
    if nothing_to_read && g.problems.is_empty() {
        return "no manifest directory exists: nothing checked".into();
    }
    let mut line = format!(
        "{} pod(s) ok, {errors} error(s), {warnings} warning(s)",
        g.pods.len()
    );
    if pulls > 0 {
        line.push_str(&format!(", {pulls} image(s) to pull when the pods start"));
    }
    line
}

pub fn check(args: CheckArgs) -> ExitCode {
    let run = run_generate(&args.paths);
    let g = &run.g;
    let nothing = run.notes.iter().any(|n| n.starts_with(NO_DIRS));
    match args.output {
        Format::Json => {
            #[derive(serde::Serialize)]
            struct Report<'a> {
                pods: Vec<String>,
                problems: &'a [Problem],
                notes: &'a [String],
            }
            let pods = g
                .pods
                .iter()
                .map(|p| format!("{}/{}", p.plan.namespace, p.plan.name))
                .collect();
            outln!(
                "{}",
                serde_json::to_string_pretty(&Report {
                    pods,
                    problems: &g.problems,
                    notes: &run.notes,
                })
                .expect("serializable")
            );
        }
        Format::Text => {
            for p in &g.problems {
                outln!("{p}");
            }
            for n in &run.notes {
                errln!("{n}");
            }
            errln!("{}", summary(g, nothing));
        }
    }
    if g.has_errors() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// How the notes say that no manifest directory exists.
const NO_DIRS: &str = "no manifest directory exists";

pub fn render(args: RenderArgs) -> ExitCode {
    let run = run_generate(&args.paths);
    let g = &run.g;
    for p in &g.problems {
        errln!("{p}");
    }
    for n in &run.notes {
        errln!("{n}");
    }
    match &args.output_dir {
        Some(dir) => {
            let failed = write_tree(dir, g);
            for (pod, e) in &failed {
                errln!(
                    "podunit render: pod {pod}: cannot write to {}: {e}",
                    dir.display()
                );
            }
            // The generator's report too: the tree is the one boot gets.
            let report = crate::generate::report::build(
                &run.catalog,
                &g.problems,
                run.config_problem.as_deref(),
            );
            let report_failed = crate::generate::report::write(dir, &report)
                .map_err(|e| {
                    errln!(
                        "podunit render: cannot write {}: {e}",
                        dir.join(crate::generate::report::FILE).display()
                    )
                })
                .is_err();
            if !failed.is_empty() || report_failed {
                return ExitCode::from(1);
            }
        }
        None => out!("{}", render_text(g)),
    }
    if g.has_errors() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
