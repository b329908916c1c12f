//! `podunit check [PATH...]` and `podunit render [PATH...]`: the generator's own code, shown.

use crate::common::diag::Problem;
use crate::common::paths::Paths;
use crate::generate::{
    Generated, generate_with_policy, node_setup_with_policy, render_text, write_tree,
};
use crate::manifest::Catalog;
use std::path::PathBuf;
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

fn run_generate(items: &[PathBuf]) -> Generated {
    let paths = Paths::from_env();
    // Relative paths name files the units must name absolutely (SourcePath=).
    let cwd = std::env::current_dir().unwrap_or_default();
    let items: Vec<PathBuf> = items
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| cwd.join(p)))
        .collect();
    let items = &items[..];
    let catalog = if items.is_empty() {
        Catalog::load(&paths)
    } else {
        Catalog::load_paths(items)
    };
    let (node, images, config_problem, policy) = node_setup_with_policy(&paths);
    if let Some(p) = config_problem {
        eprintln!("warning: {p}");
    }
    generate_with_policy(&catalog, &node, &images, policy.as_ref())
}

pub fn check(args: CheckArgs) -> ExitCode {
    let g = run_generate(&args.paths);
    match args.output {
        Format::Json => {
            #[derive(serde::Serialize)]
            struct Report<'a> {
                pods: Vec<String>,
                problems: &'a [Problem],
            }
            let pods = g
                .pods
                .iter()
                .map(|p| format!("{}/{}", p.plan.namespace, p.plan.name))
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&Report {
                    pods,
                    problems: &g.problems
                })
                .expect("serializable")
            );
        }
        Format::Text => {
            for p in &g.problems {
                println!("{p}");
            }
            let errors = g.problems.iter().filter(|p| p.is_error()).count();
            eprintln!("{} pod(s) ok, {errors} error(s)", g.pods.len());
        }
    }
    if g.has_errors() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

pub fn render(args: RenderArgs) -> ExitCode {
    let g = run_generate(&args.paths);
    for p in &g.problems {
        eprintln!("{p}");
    }
    match &args.output_dir {
        Some(dir) => {
            let failed = write_tree(dir, &g);
            for (pod, e) in &failed {
                eprintln!(
                    "podunit render: pod {pod}: cannot write to {}: {e}",
                    dir.display()
                );
            }
            if !failed.is_empty() {
                return ExitCode::from(1);
            }
        }
        None => print!("{}", render_text(&g)),
    }
    if g.has_errors() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
