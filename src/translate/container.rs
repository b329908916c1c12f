//! One container -> one service unit.

use super::image::{self, ImageResolver, ImageRoot, StoredImage};
use super::imagerun::{self, ArgSource, ImageUser};
use super::volumes::{self, Ownership};
use super::{Fault, NodeFacts, env, resources, security};
use crate::common::paths::Paths;
use crate::common::text::concat;
use crate::escape::Arg;
use crate::manifest::PodEntry;
use crate::translate::naming;
use crate::translate::plan::{EnvFilePlan, PodPlan, RootPlan};
use crate::translate::unit::{UnitFile, Value};
use k8s_openapi::api::core::v1::{Container, Pod};

/// The kubelet's first CrashLoopBackOff delay, and its cap.
const BACKOFF_INITIAL: &str = "10s";
const BACKOFF_MAX: &str = "5min";
const BACKOFF_STEPS: &str = "5";

pub struct PodContext<'a> {
    pub entry: &'a PodEntry,
    pub node: &'a NodeFacts,
    pub images: &'a dyn ImageResolver,
    pub pod_unit: &'a str,
    pub slice: &'a str,
    pub plan: &'a PodPlan,
    /// The manifest's path as units name it (`SourcePath=`, the header).
    pub source: &'a str,
    /// The hostname its containers get in a UTS namespace of their own, for a pod with a network
    /// namespace of its own (the kubelet's: `spec.hostname` or the pod's name, the FQDN with
    /// `setHostnameAsFQDN`); None: the node's.
    pub hostname: Option<&'a str>,
}

pub struct Built {
    pub unit: UnitFile,
    /// `unit` rendered: translation renders each unit once, and the writer writes this text.
    pub text: String,
    pub env_file: Option<EnvFilePlan>,
    /// The root to mount, when the image is a pulled one.
    pub root: Option<RootPlan>,
    /// The numbers an image's user resolved to (the pod's user records need them).
    pub image_user: Option<ImageUser>,
    pub warnings: Vec<Fault>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Init,
    Sidecar,
    App,
}

/// `LogExtraFields=` so `journalctl POD_NAME=web` finds a pod's logs.
pub fn log_fields(
    ns: &str,
    pod: &str,
    uid: &str,
    container: Option<&str>,
) -> Vec<(String, String)> {
    let mut v = vec![
        ("POD_NAMESPACE".to_string(), ns.to_string()),
        ("POD_NAME".to_string(), pod.to_string()),
        ("POD_UID".to_string(), uid.to_string()),
    ];
    if let Some(c) = container {
        v.push(("CONTAINER_NAME".to_string(), c.to_string()));
    }
    v
}

/// The owner of a volume's files: the user of the containers mounting it when they all agree.
pub fn volume_owner(pod: &Pod, volume: &str) -> Ownership {
    let Some(spec) = &pod.spec else {
        return Ownership { uid: 0, gid: 0 };
    };
    let psc = spec.security_context.as_ref();
    let mut ids = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter(|c| c.volume_mounts.iter().flatten().any(|m| m.name == volume))
        .map(|c| security::identity(psc, c.security_context.as_ref()));
    let first = ids.next();
    let agreed = first.filter(|f| ids.all(|i| i == *f));
    let id = agreed.unwrap_or(security::Identity {
        uid: None,
        gid: None,
    });
    let fs_group = psc.and_then(|p| p.fs_group);
    let clamp = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
    Ownership {
        uid: clamp(id.uid),
        gid: clamp(fs_group.or(id.gid)),
    }
}

/// All container units of the pod, init containers first, in order.
pub fn all(ctx: &PodContext<'_>) -> Result<Vec<Built>, Vec<Fault>> {
    let spec = ctx.entry.pod.spec.as_ref().expect("validated");
    let mut out = Vec::new();
    let mut faults = Vec::new();
    let (ns, pod) = (ctx.entry.namespace(), ctx.entry.name());
    let order: Vec<String> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|c| naming::container_service(ns, pod, &c.name))
        .collect();
    // Units started before the next one: (unit, is it a sidecar).
    let mut before: Vec<(String, bool)> = Vec::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let role = if c.restart_policy.as_deref() == Some("Always") {
            Role::Sidecar
        } else {
            Role::Init
        };
        match one(
            ctx,
            c,
            role,
            &crate::common::text::item(&["spec.initContainers"], i),
            &before,
            &order[i + 1..],
        ) {
            Ok(b) => {
                before.push((b.unit.name.clone(), role == Role::Sidecar));
                out.push(b);
            }
            Err(f) => faults.extend(f),
        }
    }
    for (i, c) in spec.containers.iter().enumerate() {
        match one(
            ctx,
            c,
            Role::App,
            &crate::common::text::item(&["spec.containers"], i),
            &before,
            &[],
        ) {
            Ok(b) => out.push(b),
            Err(f) => faults.extend(f),
        }
    }
    if faults.is_empty() {
        Ok(out)
    } else {
        Err(faults)
    }
}

/// One container as the builders of its unit's sections read it.
struct ContainerCtx<'a> {
    pod: &'a PodContext<'a>,
    spec: &'a k8s_openapi::api::core::v1::PodSpec,
    c: &'a Container,
    role: Role,
    /// `spec.containers[i]` (or `spec.initContainers[i]`), where faults point.
    path: &'a str,
    ns: &'a str,
    pod_name: &'a str,
    uid: &'a str,
}

/// Where the container's root comes from, as the later sections need to know it.
struct ContainerImage {
    /// A pulled image: its root, config and user records.
    stored: Option<Box<StoredImage>>,
    /// An image still to be pulled supplies what the manifest leaves out (its Entrypoint, Cmd).
    absent: bool,
}

/// The command line and where to look for its program, kept for `ExecStart=` until the sandbox
/// is known (pid-init runs it).
struct Command {
    argv: Vec<Arg>,
    search: Option<String>,
}

/// One container's unit. The builders add their lines in the order the unit has them, and faults
/// in the order they are reported: both are part of the output.
fn one(
    ctx: &PodContext<'_>,
    c: &Container,
    role: Role,
    path: &str,
    before: &[(String, bool)],
    later: &[String],
) -> Result<Built, Vec<Fault>> {
    let entry = ctx.entry;
    let cx = ContainerCtx {
        pod: ctx,
        spec: entry.pod.spec.as_ref().expect("validated"),
        c,
        role,
        path,
        ns: entry.namespace(),
        pod_name: entry.name(),
        uid: entry.uid(),
    };
    let mut faults = Vec::new();
    let mut warnings = Vec::new();
    let mut u = UnitFile::new(naming::container_service(cx.ns, cx.pod_name, &c.name));
    u.header = super::header(ctx.source);

    let env_path = concat(&[Paths::RUNTIME, "/", cx.uid, "/env/", &c.name, ".env"]);
    let mut cenv = match env::container_env(&entry.pod, c, ctx.node, &env_path, path) {
        Ok(e) => e,
        Err(f) => return Err(vec![f]),
    };

    unit_section(u.section("Unit"), &cx, before);
    let svc = u.section("Service");
    restarts(svc, &cx, later);
    svc.trusted("Slice", ctx.slice.to_string());
    let image = root_filesystem(svc, &cx, &mut faults);
    if let Some(img) = &image.stored {
        pulled_root(svc, &cx, img, &mut warnings);
    }
    let no_config = Default::default();
    let image_config = image.stored.as_ref().map_or(&no_config, |i| &i.config);
    let command = command_line(&cx, &cenv, &image, image_config, &mut faults);
    lifecycle_hooks(svc, &cx);
    let working_dir = working_dir(c, image.stored.as_deref());
    working_dir_and_environment(svc, working_dir, &mut cenv);
    let image_user = identity_and_sandbox(svc, &cx, image.stored.as_deref(), command, &mut faults);
    if let Err(f) =
        resources::apply_container(svc, c.resources.as_ref(), &concat(&[path, ".resources"]))
    {
        faults.push(f);
    }
    volume_binds(svc, &cx);
    if image.stored.is_some() || cx.pod.plan.network.is_some() {
        name_files(svc, &cx);
    }
    stop(svc, &cx, image_config, &mut faults);
    pod_namespaces(svc, &cx);
    // Part of the stop (see `stop`), written after the namespaces: line order is output too.
    svc.trusted("SendSIGKILL", "yes");
    journal_fields(svc, &cx);

    if !faults.is_empty() {
        return Err(faults);
    }
    // Check that every untrusted value encodes now, so a bad one is a located fault, not a failed write.
    let super::Rendered { unit, text } = super::Rendered::new(u, path).map_err(|f| vec![f])?;
    let working_dir = working_dir.map(str::to_string);
    let root = image.stored.map(|img| root_plan(&cx, *img, working_dir));
    Ok(Built {
        unit,
        text,
        env_file: cenv.file,
        root,
        image_user,
        warnings,
    })
}

/// [Unit]: ordering and lifetime, all bound to the pod unit, and the names podunit finds the
/// container by.
fn unit_section(
    un: &mut crate::translate::unit::Section,
    cx: &ContainerCtx<'_>,
    before: &[(String, bool)],
) {
    let what = match cx.role {
        Role::Init => "Init container",
        Role::Sidecar => "Sidecar container",
        Role::App => "Container",
    };
    un.add(
        "Description",
        Value::Plain(concat(&[
            what,
            " ",
            &cx.c.name,
            " of pod ",
            cx.ns,
            "/",
            cx.pod_name,
        ])),
    );
    un.add("SourcePath", Value::Path(cx.pod.source.to_string()));
    un.trusted("Requires", cx.pod.pod_unit.to_string());
    un.trusted("After", cx.pod.pod_unit.to_string());
    // Stopping or restarting the pod stops or restarts every container; not the other way round.
    un.trusted("PartOf", cx.pod.pod_unit.to_string());
    for (prev, sidecar) in before {
        // A failed init container blocks what follows it; a sidecar's restart does not stop it.
        un.trusted(if *sidecar { "Wants" } else { "Requires" }, prev.clone());
        un.trusted("After", prev.clone());
    }
    // The pod's IPC namespace (and network, /tmp): see the pod unit.
    un.trusted("JoinsNamespaceOf", cx.pod.pod_unit.to_string());
    // Never give up restarting (kubelet semantics): no start rate limit.
    un.trusted("StartLimitIntervalSec", "0");
    un.add(
        "X-PodunitPod",
        Value::Plain(concat(&[cx.ns, "/", cx.pod_name])),
    );
    un.add("X-PodunitContainer", Value::Plain(cx.c.name.clone()));
    un.add("X-PodunitUid", Value::Plain(cx.uid.to_string()));
}

/// `Type=` and `Restart=` as the kubelet runs and restarts each kind of container, with its
/// CrashLoopBackOff delays.
fn restarts(svc: &mut crate::translate::unit::Section, cx: &ContainerCtx<'_>, later: &[String]) {
    let pod_policy = cx.spec.restart_policy.as_deref().unwrap_or("Always");
    match cx.role {
        Role::Init => {
            svc.trusted("Type", "oneshot");
            // Stays active once done, so an app container's restart does not run it again.
            svc.trusted("RemainAfterExit", "yes");
            // Init containers may run as long as they need.
            svc.trusted("TimeoutStartSec", "infinity");
            // The kubelet retries failed init containers unless the pod never restarts.
            svc.trusted(
                "Restart",
                if pod_policy == "Never" {
                    "no"
                } else {
                    "on-failure"
                },
            );
            if pod_policy != "Never" && !later.is_empty() {
                // A failed run has already failed the start jobs of what follows it; once a retry
                // succeeds, start them again (a no-op for those already starting).
                // `+`: with the manager's privileges, outside the container's user, root and
                // sandbox (which may have no systemctl and no right to start units); `-`: a
                // failure here is not the init container's.
                svc.trusted(
                    "ExecStartPost",
                    format!("+-systemctl --no-block start {}", later.join(" ")),
                );
            }
        }
        Role::Sidecar => {
            svc.trusted("Type", "exec");
            svc.trusted("Restart", "always");
        }
        Role::App => {
            svc.trusted("Type", "exec");
            svc.trusted(
                "Restart",
                match pod_policy {
                    "OnFailure" => "on-failure",
                    "Never" => "no",
                    _ => "always",
                },
            );
            if pod_policy == "OnFailure" {
                // Killed by any signal, a container has exit code 128+n, a failure to the
                // kubelet (a liveness kill included); systemd counts these four as clean.
                svc.trusted("RestartForceExitStatus", "SIGHUP SIGINT SIGTERM SIGPIPE");
            }
        }
    }
    svc.trusted("RestartSec", BACKOFF_INITIAL);
    if cx.pod.node.restart_steps {
        svc.trusted("RestartSteps", BACKOFF_STEPS);
        svc.trusted("RestartMaxDelaySec", BACKOFF_MAX);
    }
}

/// The root filesystem the image names: the host's, a directory or file given by path, or a
/// pulled image (whose root [`pulled_root`] sets).
fn root_filesystem(
    svc: &mut crate::translate::unit::Section,
    cx: &ContainerCtx<'_>,
    faults: &mut Vec<Fault>,
) -> ContainerImage {
    let path = cx.path;
    let mut stored = None;
    let mut absent = false;
    match image::resolve(cx.c.image.as_deref().unwrap_or_default(), cx.pod.images) {
        Ok(ImageRoot::Host) => {}
        Ok(ImageRoot::Directory(d)) => {
            svc.add("RootDirectory", Value::Path(d));
        }
        Ok(ImageRoot::File(f)) => {
            svc.add("RootImage", Value::Path(f));
        }
        Ok(ImageRoot::Stored(img)) => stored = Some(img),
        Err(u @ image::Unresolved::Absent { .. }) => {
            absent = true;
            faults.push(Fault::pending(format!("{path}.image"), u.message()));
        }
        Err(u) => faults.push(Fault::new(format!("{path}.image"), u.message())),
    }
    ContainerImage { stored, absent }
}

/// A pulled image's root and its environment.
fn pulled_root(
    svc: &mut crate::translate::unit::Section,
    cx: &ContainerCtx<'_>,
    img: &StoredImage,
    warnings: &mut Vec<Fault>,
) {
    // Mounted by the pod unit's pod-prepare (see crate::podstart::root).
    svc.add(
        "RootDirectory",
        Value::Path(cx.pod.plan.root_dir(&cx.c.name)),
    );
    let (env, bad) = imagerun::image_env(&img.config);
    for b in bad {
        warnings.push(Fault::new(
            format!("{}.image", cx.path),
            format!("ignored: the image's environment entry {b:?} is not NAME=value"),
        ));
    }
    // Under the container's own: its Environment= comes later and wins.
    let mut base = vec![(
        "HOSTNAME".to_string(),
        imagerun::etc_plan(&cx.pod.entry.pod, cx.pod.node).hostname,
    )];
    base.extend(env);
    svc.add("Environment", Value::Env(base));
}

/// Command line: command + args (after $(VAR) expansion) with the image's Entrypoint and Cmd.
fn command_line(
    cx: &ContainerCtx<'_>,
    cenv: &env::ContainerEnv,
    image: &ContainerImage,
    image_config: &crate::image::manifest::RunConfig,
    faults: &mut Vec<Fault>,
) -> Option<Command> {
    let path = cx.path;
    let command = cx.c.command.as_deref().unwrap_or_default();
    let args = cx.c.args.as_deref().unwrap_or_default();
    match imagerun::command_line(command, args, image_config) {
        // Only a pulled image has an Entrypoint and a Cmd to run.
        Some(_) if image.stored.is_none() && !image.absent && command.is_empty() => {
            faults.push(no_command(path));
            None
        }
        Some(line) => {
            let argv: Vec<Arg> = line
                .iter()
                .map(|a| match a {
                    ArgSource::Pod(s) => cenv.expand_arg(s),
                    ArgSource::Image(s) => Arg::text(*s),
                })
                .collect();
            let program = match &line[0] {
                ArgSource::Pod(s) | ArgSource::Image(s) => *s,
            };
            let search = if image.stored.is_some() && !program.contains('/') {
                imagerun::search_path(&program_path_var(cenv, image_config))
            } else {
                None
            };
            Some(Command { argv, search })
        }
        None if image.stored.is_some() => {
            let image_ref = cx.c.image.as_deref().unwrap_or_default();
            faults.push(Fault::new(
                format!("{path}.command"),
                format!("required: the image {image_ref:?} has neither an Entrypoint nor a Cmd"),
            ));
            None
        }
        None if image.absent => None,
        None => {
            faults.push(no_command(path));
            None
        }
    }
}

/// The PATH a program without a `/` is looked for along in a pulled image: the one the process
/// gets, as a runtime finds it.
fn program_path_var(
    cenv: &env::ContainerEnv,
    image_config: &crate::image::manifest::RunConfig,
) -> String {
    cenv.static_env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| {
            imagerun::image_env(image_config)
                .0
                .into_iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v)
        })
        .unwrap_or_else(|| imagerun::DEFAULT_PATH.to_string())
}

/// postStart and preStop hooks: `ExecStartPost=` and `ExecStop=`.
fn lifecycle_hooks(svc: &mut crate::translate::unit::Section, cx: &ContainerCtx<'_>) {
    let Some(lc) = &cx.c.lifecycle else {
        return;
    };
    use crate::probe::hook::{self, Hook, Stage};
    for (stage, key, h) in [
        (Stage::PostStart, "ExecStartPost", &lc.post_start),
        (Stage::PreStop, "ExecStop", &lc.pre_stop),
    ] {
        let Some(h) = h.as_ref().and_then(|h| hook::hook(cx.c, h)) else {
            continue;
        };
        let record = hook::record_path(&cx.pod.plan.uid, &cx.c.name, stage);
        match (&h, hook::helper_args(&h, stage, record.as_deref())) {
            // The kubelet runs hook commands as written: no $(VAR) expansion.
            (Hook::Exec(cmd), None) => {
                svc.add(key, Value::Exec(cmd.iter().map(Arg::text).collect()));
            }
            // `+`: podunit is not in the container's root; the request goes out from the
            // host's network, as the kubelet's does; an exec preStop enters the container.
            (_, Some(args)) => {
                let argv = std::iter::once(cx.pod.node.podunit_bin.as_str())
                    .chain(args.iter().map(String::as_str))
                    .map(Arg::text)
                    .collect();
                svc.add(key, Value::PrivilegedExec(argv));
            }
            (_, None) => {}
        }
    }
}

/// `workingDir`, else the image's `WorkingDir` when it is absolute.
fn working_dir<'a>(c: &'a Container, stored: Option<&'a StoredImage>) -> Option<&'a str> {
    c.working_dir.as_deref().filter(|w| !w.is_empty()).or(stored
        .and_then(|i| i.config.working_dir.as_deref())
        .filter(|w| w.starts_with('/')))
}

/// `WorkingDirectory=`, then the environment known now (`Environment=`) and the file pod-prepare
/// writes with the rest (`EnvironmentFile=`).
fn working_dir_and_environment(
    svc: &mut crate::translate::unit::Section,
    working_dir: Option<&str>,
    cenv: &mut env::ContainerEnv,
) {
    if let Some(wd) = working_dir {
        svc.add("WorkingDirectory", Value::Path(wd.to_string()));
    }
    if !cenv.static_env.is_empty() {
        svc.add(
            "Environment",
            Value::Env(std::mem::take(&mut cenv.static_env)),
        );
    }
    if let Some(f) = &cenv.file {
        svc.add("EnvironmentFile", Value::Path(f.path.clone()));
    }
}

/// Identity and sandbox, then `ExecStart=`, which depends on what the sandbox leaves pid-init to
/// take back. Returns the numbers the image's user resolved to.
fn identity_and_sandbox(
    svc: &mut crate::translate::unit::Section,
    cx: &ContainerCtx<'_>,
    stored: Option<&StoredImage>,
    command: Option<Command>,
    faults: &mut Vec<Fault>,
) -> Option<ImageUser> {
    let psc = cx.spec.security_context.as_ref();
    let image_user = match stored {
        Some(img) => match image_identity(psc, cx.c, img, cx.path) {
            Ok(u) => u,
            // A refused image user is reported once, not again as the host's root.
            Err(f) => {
                faults.push(f);
                return None;
            }
        },
        None => None,
    };
    let host_pid = cx.spec.host_pid == Some(true);
    match security::apply(
        svc,
        psc,
        cx.c,
        cx.path,
        image_user.as_ref(),
        host_pid,
        cx.pod.hostname,
    ) {
        Ok(pid_init) => {
            if let Some(command) = command {
                let own_root = svc.has("RootDirectory") || svc.has("RootImage");
                exec_start(svc, cx.pod, command, pid_init.as_ref(), own_root);
            }
        }
        Err(f) => faults.push(f),
    }
    image_user
}

/// Volumes. A subPath is checked (no symlinks) and created at every start, before systemd binds
/// it, as the kubelet does.
fn volume_binds(svc: &mut crate::translate::unit::Section, cx: &ContainerCtx<'_>) {
    for (volume, sub) in volumes::sub_paths(cx.c, &cx.pod.plan.volumes) {
        svc.add(
            "ExecStartPre",
            Value::PrivilegedExec(vec![
                Arg::text(cx.pod.node.podunit_bin.as_str()),
                Arg::text("subpath"),
                Arg::text(volume),
                Arg::text(sub),
            ]),
        );
    }
    for b in volumes::binds(cx.c, &cx.pod.plan.volumes) {
        let key = if b.read_only {
            "BindReadOnlyPaths"
        } else {
            "BindPaths"
        };
        // systemd sets up the mount namespace for ExecStartPre= too, before the
        // subPath exists: `-` lets it skip the missing source there; the container's
        // own namespace is set up after ExecStartPre= made it.
        svc.add(
            key,
            if b.sub_path {
                Value::OptionalBind(b.source, b.destination)
            } else {
                Value::Bind(b.source, b.destination)
            },
        );
    }
}

/// The name files the kubelet gives every container with an image's root (or, with
/// `network: cni`, an address of its pod's own), unless a volume is mounted there.
fn name_files(svc: &mut crate::translate::unit::Section, cx: &ContainerCtx<'_>) {
    let mounted = |at: &str| {
        cx.c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path.trim_end_matches('/') == at)
    };
    for name in ["hosts", "hostname", "resolv.conf"] {
        let at = format!("/etc/{name}");
        if !mounted(&at) {
            svc.add("BindPaths", Value::Bind(cx.pod.plan.etc_file(name), at));
        }
    }
}

/// Stopping: SIGTERM to the main process, then SIGKILL to all after the grace period.
fn stop(
    svc: &mut crate::translate::unit::Section,
    cx: &ContainerCtx<'_>,
    image_config: &crate::image::manifest::RunConfig,
    faults: &mut Vec<Fault>,
) {
    // The kubelet never waits less than 2 s; `TimeoutStopSec=0` would mean "wait forever".
    let grace = cx
        .spec
        .termination_grace_period_seconds
        .unwrap_or(30)
        .max(2);
    svc.trusted("KillMode", "mixed");
    // The container's stopSignal, else the image's StopSignal, as the runtime stops it.
    let signal =
        cx.c.lifecycle
            .as_ref()
            .and_then(|l| l.stop_signal.as_deref())
            .or_else(|| image_stop_signal(image_config))
            .unwrap_or("SIGTERM");
    match super::security::stop_signal(signal) {
        Some(sig) => {
            svc.trusted("KillSignal", sig);
        }
        None => faults.push(Fault::new(
            format!("{}.lifecycle.stopSignal", cx.path),
            format!("{signal:?} is not a signal"),
        )),
    }
    svc.trusted("TimeoutStopSec", concat(&[&grace.to_string(), "s"]));
}

/// The pod's network (with `network: private`) and IPC namespaces, joined from the pod unit.
fn pod_namespaces(svc: &mut crate::translate::unit::Section, cx: &ContainerCtx<'_>) {
    if cx.pod.node.private_network && cx.spec.host_network != Some(true) {
        svc.trusted("PrivateNetwork", "yes");
    }
    // Privileged containers too: the IPC namespace is the pod's, not a sandbox.
    if cx.spec.host_ipc != Some(true) {
        svc.trusted("PrivateIPC", "yes");
    }
}

/// What the journal files the container's output under.
fn journal_fields(svc: &mut crate::translate::unit::Section, cx: &ContainerCtx<'_>) {
    svc.add(
        "SyslogIdentifier",
        Value::Plain(concat(&[cx.pod_name, "/", &cx.c.name])),
    );
    svc.add(
        "LogExtraFields",
        Value::LogFields(log_fields(cx.ns, cx.pod_name, cx.uid, Some(&cx.c.name))),
    );
}

/// The plan's entry for a pulled image's root, which pod-prepare mounts.
fn root_plan(cx: &ContainerCtx<'_>, img: StoredImage, working_dir: Option<String>) -> RootPlan {
    let c = cx.c;
    let image_ref = c.image.as_deref().unwrap_or_default();
    let csc = c.security_context.as_ref();
    let privileged = csc.and_then(|s| s.privileged) == Some(true);
    RootPlan {
        container: c.name.clone(),
        image: img.image_id,
        layers: img.layers,
        working_dir,
        reference: image_ref.to_string(),
        pull_policy: crate::image::policy::pull_policy(image_ref, c.image_pull_policy.as_deref()),
        // As a runtime mounts the root: an image's device nodes work only for a privileged
        // container, its setuid programs only where the container may gain privileges (the
        // Kubernetes default, unless allowPrivilegeEscalation: false).
        devices: privileged,
        setuid: privileged || csc.and_then(|s| s.allow_privilege_escalation) != Some(false),
    }
}

/// The host's dynamic loader (the path every glibc binary of this architecture names) and the
/// directories its C library is in, on Debian and on Fedora-like hosts.
#[cfg(target_arch = "aarch64")]
const HOST_LOADER: (&str, &[&str]) = (
    "/lib/ld-linux-aarch64.so.1",
    &["/lib/aarch64-linux-gnu", "/usr/lib64"],
);
#[cfg(not(target_arch = "aarch64"))]
const HOST_LOADER: (&str, &[&str]) = (
    "/lib64/ld-linux-x86-64.so.2",
    &["/lib/x86_64-linux-gnu", "/usr/lib64"],
);

/// `ExecStart=`: the command itself with `hostPID: true`; otherwise `podunit pid-init` starting
/// it in a PID namespace of its own (the pod's with `shareProcessNamespace: true`), with what it
/// must take back of the sandbox (`security::PidInit`).
fn exec_start(
    svc: &mut crate::translate::unit::Section,
    ctx: &PodContext<'_>,
    command: Command,
    pid_init: Option<&security::PidInit>,
    own_root: bool,
) {
    let Command { argv, search } = command;
    let Some(p) = pid_init else {
        svc.add("ExecStart", Value::Exec(argv));
        if let Some(s) = search {
            svc.trusted("ExecSearchPath", s);
        }
        return;
    };
    let mut line = Vec::new();
    if own_root {
        pid_init_from_host(svc, ctx, &mut line);
    } else {
        line.push(Arg::text(ctx.node.podunit_bin.as_str()));
        line.push(Arg::text("pid-init"));
    }
    if ctx.plan.share_process_namespace {
        line.push(Arg::text("--pod"));
        line.push(Arg::text(ctx.plan.pid_namespace()));
    }
    for (flag, on) in [
        ("--mask", p.mask),
        ("--deny-mount", p.deny_mount),
        ("--deny-namespaces", p.deny_namespaces),
    ] {
        if on {
            line.push(Arg::text(flag));
        }
    }
    if p.hostname.is_some() {
        // The pod's UTS namespace, which pod-prepare made with the hostname in it.
        line.push(Arg::text("--uts"));
        line.push(Arg::text(ctx.plan.uts_namespace()));
    }
    for (flag, caps) in [("--drop=", &p.drop), ("--drop-ambient=", &p.drop_ambient)] {
        if !caps.is_empty() {
            line.push(Arg::text(concat(&[flag, &caps.join(",")])));
        }
    }
    if let Some(s) = search {
        line.push(Arg::text("--search"));
        line.push(Arg::text(s));
    }
    line.push(Arg::text("--"));
    line.extend(argv);
    svc.add("ExecStart", Value::Exec(line));
}

/// The start of `line` for a container with a root of its own: podunit, the host's dynamic loader
/// and the host's C library are not in an image's root, so they are bound there at their own
/// paths (library directories only where the host has them), and podunit is started through the
/// loader, which finds the libraries there and not by the image's /etc/ld.so.cache. pid-init
/// unmounts them all (`--hide`) before the command runs; an image without such a path keeps an
/// empty one.
fn pid_init_from_host(
    svc: &mut crate::translate::unit::Section,
    ctx: &PodContext<'_>,
    line: &mut Vec<Arg>,
) {
    let bin = ctx.node.podunit_bin.as_str();
    let (loader, libs) = HOST_LOADER;
    let lib_path = libs.join(":");
    line.extend(
        [loader, "--inhibit-cache", "--library-path", &lib_path, bin]
            .into_iter()
            .map(Arg::text),
    );
    line.push(Arg::text("pid-init"));
    for l in ["--loader", loader, "--library-path", &lib_path] {
        line.push(Arg::text(l));
    }
    svc.add("BindReadOnlyPaths", Value::Bind(bin.into(), bin.into()));
    svc.add(
        "BindReadOnlyPaths",
        Value::Bind(loader.into(), loader.into()),
    );
    for d in libs {
        svc.add(
            "BindReadOnlyPaths",
            Value::OptionalBind(d.to_string(), d.to_string()),
        );
    }
    let mut host: Vec<String> = libs.iter().map(|d| d.to_string()).collect();
    host.extend([loader.to_string(), bin.to_string()]);
    if ctx.plan.share_process_namespace {
        // And the pod's PID namespace.
        let ns = ctx.plan.pid_namespace();
        svc.add("BindReadOnlyPaths", Value::Bind(ns.clone(), ns.clone()));
        host.push(ns);
    }
    for p in host {
        line.push(Arg::text("--hide"));
        line.push(Arg::text(p));
    }
}

/// The image's `StopSignal` (`SIGQUIT`, `QUIT`) when systemd knows it; anything else (numbers
/// included) leaves the default, as an untrusted value must not fail the pod.
fn image_stop_signal(c: &crate::image::manifest::RunConfig) -> Option<&'static str> {
    let s = c.stop_signal.as_deref()?;
    security::stop_signal(s).or_else(|| security::stop_signal(&format!("SIG{s}")))
}

fn no_command(path: &str) -> Fault {
    Fault::new(
        format!("{path}.command"),
        "required: podunit does not read an image's entrypoint, so the command must be given",
    )
}

/// Who a container with a pulled image runs as: `runAsUser`, else the image's `User`, looked up
/// in the image's own files, with the kubelet's `runAsNonRoot` check of the image's user.
fn image_identity(
    psc: Option<&k8s_openapi::api::core::v1::PodSecurityContext>,
    c: &Container,
    img: &StoredImage,
    path: &str,
) -> Result<Option<ImageUser>, Fault> {
    let sc = c.security_context.as_ref();
    let id = security::identity(psc, sc);
    let image_user = img.config.user.as_deref().unwrap_or_default();
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or(psc.and_then(|p| p.run_as_non_root));
    if id.uid.is_none() && non_root == Some(true) {
        imagerun::verify_non_root(image_user).map_err(|m| {
            Fault::new(
                format!("{path}.securityContext.runAsNonRoot"),
                format!("{m} (image {})", img.image_id),
            )
        })?;
    }
    let user = match id.uid {
        // Out-of-range values are security::apply's to report.
        Some(uid) if u32::try_from(uid).is_ok() => uid.to_string(),
        Some(_) => return Ok(None),
        None => image_user.to_string(),
    };
    imagerun::resolve_user(&user, img.passwd.as_deref(), img.group.as_deref()).map_err(|m| {
        Fault::new(
            format!("{path}.image"),
            format!("image {}: {m}", img.image_id),
        )
    })
}
