//! `podunit pod-prepare PLAN` / `pod-cleanup PLAN`: run by a pod's unit, not by people.

use crate::common::paths::Paths;
use crate::manifest::Catalog;
use crate::podstart::prepare;
use crate::status::waiting;
use crate::translate::plan::PodPlan;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The pod's plan, written by the generator.
    pub plan: PathBuf,
}

fn read_plan(args: &Args, paths: &Paths) -> Result<PodPlan, String> {
    let path = paths.host(&args.plan.to_string_lossy());
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The plan and the paths, or the failure `command` reports.
fn load(args: &Args, command: &str) -> Result<(PodPlan, Paths), ExitCode> {
    let paths = Paths::from_env();
    match read_plan(args, &paths) {
        Ok(p) => Ok((p, paths)),
        Err(e) => {
            eprintln!("podunit {command}: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

pub fn prepare(args: Args) -> ExitCode {
    let (plan, paths) = match load(&args, "pod-prepare") {
        Ok(x) => x,
        Err(code) => return code,
    };
    // ConfigMaps and Secrets are read now, so a pod starts with their current content.
    let catalog = Catalog::load(&paths);
    let result = prepare::prepare(&plan, &paths, &catalog, &prepare::node_ip());
    // What `podunit status` shows while the pod cannot start (and no longer once it can).
    let recorded = match &result {
        Ok(()) => waiting::clear(&paths, &plan.uid, Some(waiting::Writer::Prepare)),
        Err(e) => waiting::write(
            &paths,
            &waiting::Record {
                uid: plan.uid.clone(),
                namespace: plan.namespace.clone(),
                name: plan.name.clone(),
                writer: waiting::Writer::Prepare,
                reason: e.waiting_reason().into(),
                message: e.to_string(),
                containers: Vec::new(),
                all_containers: Vec::new(),
                refused: false,
                at_us: waiting::now_us(),
            },
        ),
    };
    if let Err(e) = recorded {
        eprintln!(
            "podunit pod-prepare: pod {}/{}: cannot record its state under {}: {e}",
            plan.namespace,
            plan.name,
            waiting::DIR
        );
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "podunit pod-prepare: pod {}/{} ({}): {e}",
                plan.namespace, plan.name, plan.source
            );
            ExitCode::FAILURE
        }
    }
}

/// `pod-refresh PLAN`: a running pod's configMap, secret and projected volumes brought up to date
/// (podunit-sync runs it in the service manager's context: its own sandbox may not chown).
pub fn refresh(args: Args) -> ExitCode {
    let (plan, paths) = match load(&args, "pod-refresh") {
        Ok(x) => x,
        Err(code) => return code,
    };
    let catalog = Catalog::load(&paths);
    match prepare::refresh_files(&plan, &paths, &catalog) {
        Ok(changed) => {
            if !changed.is_empty() {
                eprintln!(
                    "podunit pod-refresh: pod {}/{}: updated volumes {}",
                    plan.namespace,
                    plan.name,
                    changed.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            // The previous files stay, as the kubelet keeps them when an update fails.
            eprintln!(
                "podunit pod-refresh: pod {}/{}: {e}",
                plan.namespace, plan.name
            );
            ExitCode::FAILURE
        }
    }
}

pub fn cleanup(args: Args) -> ExitCode {
    let (plan, paths) = match load(&args, "pod-cleanup") {
        Ok(x) => x,
        Err(code) => return code,
    };
    match prepare::cleanup(&plan, &paths) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "podunit pod-cleanup: pod {}/{}: {e}",
                plan.namespace, plan.name
            );
            ExitCode::FAILURE
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct SubpathArgs {
    /// The volume's directory on the host.
    pub volume: PathBuf,
    /// The mount's subPath, relative to the volume.
    pub sub_path: String,
}

/// `subpath VOLUME SUBPATH`: fails the container's start when the subPath leads through a
/// symlink (see [`crate::podstart::subpath`]).
pub fn subpath(args: SubpathArgs) -> ExitCode {
    let paths = Paths::from_env();
    let volume = paths.host(&args.volume.to_string_lossy());
    match crate::podstart::subpath::ensure(&volume, &args.sub_path) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podunit subpath: {e}");
            ExitCode::FAILURE
        }
    }
}
