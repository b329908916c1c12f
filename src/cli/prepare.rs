//! `podunit pod-prepare PLAN` / `pod-cleanup PLAN`: run by a pod's unit, not by people.

use crate::cni::default_network::Fallback;
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

/// The node configuration (its defaults when the file cannot be read: the generator has said
/// why already).
fn node_config(paths: &Paths) -> crate::common::config::Config {
    crate::common::config::Config::load(&paths.config_file())
        .map(|l| l.config)
        .unwrap_or_default()
}

/// The node's CNI settings and what its network is without a configuration (detach and sweep
/// read the same as attach).
fn node_cni(paths: &Paths) -> (crate::common::config::Cni, Fallback) {
    let config = node_config(paths);
    let fallback = Fallback::for_node(&config, paths);
    (config.cni, fallback)
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
    // ConfigMaps and Secrets are read now, so a pod starts with their current content. Reading
    // every manifest directory is the costliest part of a start: only for pods that use them.
    let catalog = if plan.uses_objects() {
        Catalog::load(&paths)
    } else {
        Catalog::default()
    };
    let config = node_config(&paths);
    let node = prepare::NodeNet {
        // Asked in the host's network namespace: the pod unit may be in its own.
        node_ip: crate::podstart::network::in_host_namespace(prepare::node_ip)
            .unwrap_or_else(|_| prepare::node_ip()),
        resolv_conf: config.resolv_conf().to_path_buf(),
        fallback: Fallback::for_node(&config, &paths),
        cni: config.cni,
    };
    let result = prepare::prepare(&plan, &paths, &catalog, &node);
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
                event: e
                    .event(&plan.uid)
                    .map(|(reason, message)| waiting::EventNote {
                        reason: reason.into(),
                        message,
                    }),
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
    let (cni, fallback) = node_cni(&paths);
    match prepare::cleanup(&plan, &paths, &cni, &fallback) {
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
pub struct ForgetArgs {
    /// The removed pod's UID.
    pub uid: String,
    /// Its directories, deleted with `rm -rf --one-file-system` (which never crosses a mount).
    #[arg(last = true)]
    pub dirs: Vec<PathBuf>,
}

/// `pod-forget UID -- DIR...`: the removed pod's network attachment undone (its address, host
/// port rules and pinned namespace) and its other pinned namespaces released, then its
/// directories deleted. Fails if either fails, and
/// podunit-sync runs it again at its next reconcile.
pub fn forget(args: ForgetArgs) -> ExitCode {
    let paths = Paths::from_env();
    let uid_ok = !args.uid.is_empty()
        && args
            .uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !uid_ok {
        eprintln!("podunit pod-forget: refusing odd uid {:?}", args.uid);
        return ExitCode::from(super::EXIT_USAGE);
    }
    let (cni, fallback) = node_cni(&paths);
    let detached = crate::podstart::network::detach(&args.uid, &cni, &fallback, &paths);
    if let Err(e) = &detached {
        eprintln!("podunit pod-forget: pod {}: {e}", args.uid);
    }
    // The pod's pinned PID and UTS namespaces (`pod-cleanup` would have released them).
    for dir in [Paths::PID_NAMESPACES, Paths::UTS_NAMESPACES] {
        let pin = paths.host(&format!("{dir}/{}", args.uid));
        crate::pidinit::release_pod_namespace(&pin);
    }
    let removed = std::process::Command::new("/bin/rm")
        .args(["-rf", "--one-file-system", "--"])
        .args(&args.dirs)
        .status()
        .is_ok_and(|s| s.success());
    if detached.is_ok() && removed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[derive(clap::Args, Debug)]
pub struct SweepArgs {
    /// The UIDs of the pods that exist (rendered, or removed with their cleanup still due).
    #[arg(last = true)]
    pub live: Vec<String>,
}

/// `cni-sweep -- UID...`: DEL for every cached attachment of a pod not named (see
/// [`crate::podstart::network::sweep`]). Says what it deleted; fails if a DEL failed.
pub fn cni_sweep(args: SweepArgs) -> ExitCode {
    let paths = Paths::from_env();
    let (cni, fallback) = node_cni(&paths);
    let live = args.live.into_iter().collect();
    match crate::podstart::network::sweep(&live, &cni, &fallback, &paths) {
        Ok(s) => {
            for uid in &s.deleted {
                println!("pod {uid}: deleted its network attachment (no pod has this UID)");
            }
            for (uid, e) in &s.failed {
                eprintln!("podunit cni-sweep: pod {uid}: {e}");
            }
            if let Some(why) = &s.gc {
                println!("CNI GC not run: {why}");
            }
            if s.failed.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("podunit cni-sweep: {e}");
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
