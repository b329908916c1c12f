//! securityContext -> the identity and sandbox of a container's process.

use super::Fault;
use crate::common::text::item;
use crate::translate::unit::{Section, Value};
use k8s_openapi::api::core::v1::{Container, PodSecurityContext, SecurityContext};

/// The capabilities a container runtime grants by default (containerd's and Docker's default set).
pub const DEFAULT_CAPS: &[&str] = &[
    "CAP_AUDIT_WRITE",
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_MKNOD",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_RAW",
    "CAP_SETFCAP",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_SETUID",
    "CAP_SYS_CHROOT",
];

/// All capability names systemd 252 knows; anything else in `capabilities.add/drop` is refused.
const KNOWN_CAPS: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The system calls a RuntimeDefault seccomp profile denies, as systemd groups (after the
/// runtime's default profile: no module loading, mounting, rebooting, clock setting, tracing,...).
const RUNTIME_DEFAULT_DENY: &str =
    "~@clock @cpu-emulation @debug @module @mount @obsolete @raw-io @reboot @swap";
/// The same without `@mount`, which `pid-init` refuses itself once it has mounted `/proc`.
const RUNTIME_DEFAULT_DENY_BUT_MOUNT: &str =
    "~@clock @cpu-emulation @debug @module @obsolete @raw-io @reboot @swap";

/// The capabilities `podunit pid-init` needs for its setup, which a container that does not have
/// them gets added and `pid-init` drops again: a PID and a mount namespace and the `/proc` mount
/// (`CAP_SYS_ADMIN`), dropping them from the bounding set (`CAP_SETPCAP`), and, kept by its outer
/// process, forwarding signals to the container whatever user it became (`CAP_KILL`).
pub const PID_INIT_CAPS: &[&str] = &["CAP_KILL", "CAP_SETPCAP", "CAP_SYS_ADMIN"];

fn setup_caps() -> Vec<String> {
    PID_INIT_CAPS.iter().map(|c| c.to_string()).collect()
}

/// The number of capability `CAP_NAME` (the kernel's order is [`KNOWN_CAPS`]'s).
pub fn capability_number(name: &str) -> Option<u32> {
    let bare = name.strip_prefix("CAP_")?;
    KNOWN_CAPS
        .iter()
        .position(|c| *c == bare)
        .and_then(|i| u32::try_from(i).ok())
}

/// What a container in a PID namespace of its own (`podunit pid-init`) is started with beyond
/// its own sandbox, for `pid-init` to take back: see [`crate::translate::container`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PidInit {
    /// Added to the bounding set (and so to every set): dropped from all.
    pub drop: Vec<String>,
    /// Added as ambient capabilities only: dropped from all but the bounding set.
    pub drop_ambient: Vec<String>,
    /// `/proc` masked as a runtime masks it (not for privileged containers).
    pub mask: bool,
    /// The RuntimeDefault rules systemd could not apply in `pid-init`'s place.
    pub deny_mount: bool,
    pub deny_namespaces: bool,
    /// The pod's hostname: the container joins the pod's UTS namespace, which has it.
    pub hostname: Option<String>,
}

/// The effective identity of a container: uid, gid (None = the unit's default, root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub uid: Option<i64>,
    pub gid: Option<i64>,
}

/// Container settings override the pod's.
pub fn identity(pod: Option<&PodSecurityContext>, ctr: Option<&SecurityContext>) -> Identity {
    Identity {
        uid: ctr
            .and_then(|c| c.run_as_user)
            .or(pod.and_then(|p| p.run_as_user)),
        gid: ctr
            .and_then(|c| c.run_as_group)
            .or(pod.and_then(|p| p.run_as_group)),
    }
}

fn cap_name(raw: &str, path: &str) -> Result<String, Fault> {
    let up = raw.to_ascii_uppercase();
    let bare = up.strip_prefix("CAP_").unwrap_or(&up);
    if bare == "ALL" {
        return Ok("ALL".into());
    }
    if KNOWN_CAPS.contains(&bare) {
        Ok(crate::common::text::concat(&["CAP_", bare]))
    } else {
        Err(Fault::new(
            path.to_string(),
            format!("{raw:?} is not a Linux capability"),
        ))
    }
}

/// The security contexts a container's settings come from, and where its faults point.
struct Contexts<'a> {
    pod: Option<&'a PodSecurityContext>,
    ctr: Option<&'a SecurityContext>,
    path: &'a str,
}

/// Writes identity and sandboxing for `ctr` into its `[Service]` section.
pub fn apply(
    svc: &mut Section,
    pod_sc: Option<&PodSecurityContext>,
    ctr: &Container,
    path: &str,
    image_user: Option<&super::imagerun::ImageUser>,
    host_pid: bool,
    hostname: Option<&str>,
) -> Result<Option<PidInit>, Fault> {
    let mut pid_init = (!host_pid).then(PidInit::default);
    // The pod's hostname in a UTS namespace pid-init makes (systemd 252 cannot name one).
    if let Some(p) = &mut pid_init {
        p.hostname = hostname.map(str::to_string);
    }
    let own_uts = pid_init.as_ref().is_some_and(|p| p.hostname.is_some());
    let sc = ctr.security_context.as_ref();
    let ctx = Contexts {
        pod: pod_sc,
        ctr: sc,
        path,
    };
    let id = checked_identity(&ctx, image_user)?;
    user_and_groups(svc, &ctx, id, image_user)?;
    let privileged = sc.and_then(|c| c.privileged) == Some(true);
    let root = id.uid.unwrap_or(0) == 0;
    if privileged {
        // A privileged container gets the host as root would have it: no sandboxing at all. A
        // non-root one has no capabilities: pid-init's, ambient, are taken back.
        if let Some(p) = &mut pid_init
            && !root
        {
            p.drop_ambient = setup_caps();
            svc.trusted("AmbientCapabilities", p.drop_ambient.join(" "));
        }
        return Ok(pid_init);
    }
    if let Some(p) = &mut pid_init {
        p.mask = true;
    }
    if sc.and_then(|c| c.allow_privilege_escalation) == Some(false) {
        svc.trusted("NoNewPrivileges", "yes");
    }
    let caps = capabilities(&ctx)?;
    capability_sets(svc, sc, &caps, root, pid_init.as_mut());
    if sc.and_then(|c| c.read_only_root_filesystem) == Some(true) {
        svc.trusted("ProtectSystem", "strict");
        svc.trusted("ReadOnlyPaths", "/");
    }
    seccomp(svc, &ctx, &caps, pid_init.as_mut())?;
    runtime_sandbox(svc, sc, &caps, id, own_uts);
    Ok(pid_init)
}

/// The container's user and group: runAsUser/runAsGroup, else the image's user (its numbers,
/// with runAsGroup still winning over the image's group), checked as the kubelet checks them.
fn checked_identity(
    ctx: &Contexts<'_>,
    image_user: Option<&super::imagerun::ImageUser>,
) -> Result<Identity, Fault> {
    let (pod_sc, sc, path) = (ctx.pod, ctx.ctr, ctx.path);
    let mut id = identity(pod_sc, sc);
    if let Some(u) = image_user {
        id.uid = Some(i64::from(u.uid));
        id.gid = id.gid.or(Some(i64::from(u.gid)));
    }
    let non_root = sc
        .and_then(|c| c.run_as_non_root)
        .or(pod_sc.and_then(|p| p.run_as_non_root));
    if non_root == Some(true) && id.uid.unwrap_or(0) == 0 {
        // The kubelet refuses to start such a container (CreateContainerConfigError).
        return Err(Fault::new(
            format!("{path}.securityContext.runAsNonRoot"),
            "runAsNonRoot is set but the container would run as root (set runAsUser to a non-zero UID)",
        ));
    }
    for (field, v) in [("runAsUser", id.uid), ("runAsGroup", id.gid)] {
        if let Some(v) = v
            && !(0..=i64::from(u32::MAX - 1)).contains(&v)
        {
            return Err(Fault::new(
                format!("{path}.securityContext.{field}"),
                format!("{v} is not a valid ID"),
            ));
        }
    }
    Ok(id)
}

/// `User=`, `Group=` and `SupplementaryGroups=` (the pod's, its fsGroup, the image user's).
fn user_and_groups(
    svc: &mut Section,
    ctx: &Contexts<'_>,
    id: Identity,
    image_user: Option<&super::imagerun::ImageUser>,
) -> Result<(), Fault> {
    let (pod_sc, path) = (ctx.pod, ctx.path);
    if let Some(uid) = id.uid {
        svc.trusted("User", uid.to_string());
        // Without runAsGroup a container runtime uses group 0, not the user's passwd group.
        svc.trusted("Group", id.gid.unwrap_or(0).to_string());
    } else if let Some(gid) = id.gid {
        svc.trusted("Group", gid.to_string());
    }
    let mut groups: Vec<i64> = pod_sc
        .and_then(|p| p.supplemental_groups.clone())
        .unwrap_or_default();
    if let Some(fs) = pod_sc.and_then(|p| p.fs_group) {
        groups.push(fs);
    }
    groups.extend(
        image_user
            .iter()
            .flat_map(|u| u.groups.iter().map(|g| i64::from(*g))),
    );
    groups.sort_unstable();
    groups.dedup();
    if let Some(g) = groups
        .iter()
        .find(|g| !(0..=i64::from(u32::MAX - 1)).contains(*g))
    {
        return Err(Fault::new(
            format!("{path}.securityContext.supplementalGroups"),
            format!("{g} is not a valid ID"),
        ));
    }
    if !groups.is_empty() {
        svc.trusted(
            "SupplementaryGroups",
            groups
                .iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    Ok(())
}

/// The container's capabilities, sorted: the runtime's default set with `capabilities.drop`
/// taken out and then `capabilities.add` put in.
fn capabilities(ctx: &Contexts<'_>) -> Result<Vec<String>, Fault> {
    let (sc, path) = (ctx.ctr, ctx.path);
    let mut caps: Vec<String> = DEFAULT_CAPS.iter().map(|c| c.to_string()).collect();
    if let Some(c) = sc.and_then(|c| c.capabilities.as_ref()) {
        for (i, d) in c.drop.as_deref().unwrap_or_default().iter().enumerate() {
            match cap_name(d, &item(&[path, ".securityContext.capabilities.drop"], i))?.as_str() {
                "ALL" => caps.clear(),
                name => caps.retain(|c| c != name),
            }
        }
        for (i, a) in c.add.as_deref().unwrap_or_default().iter().enumerate() {
            match cap_name(a, &item(&[path, ".securityContext.capabilities.add"], i))?.as_str() {
                "ALL" => caps = KNOWN_CAPS.iter().map(|c| format!("CAP_{c}")).collect(),
                name => {
                    if !caps.iter().any(|c| c == name) {
                        caps.push(name.to_string())
                    }
                }
            }
        }
    }
    caps.sort();
    Ok(caps)
}

/// `CapabilityBoundingSet=` and `AmbientCapabilities=`: the container's capabilities, plus what
/// pid-init needs for its setup and takes back before the command runs.
fn capability_sets(
    svc: &mut Section,
    sc: Option<&SecurityContext>,
    caps: &[String],
    root: bool,
    pid_init: Option<&mut PidInit>,
) {
    // A non-root process keeps added capabilities only as ambient ones.
    let mut ambient: Vec<String> = if root {
        Vec::new()
    } else {
        caps.iter()
            .filter(|c| {
                sc.and_then(|s| s.capabilities.as_ref())
                    .and_then(|k| k.add.as_ref())
                    .is_some_and(|a| {
                        a.iter()
                            .any(|x| cap_name(x, "").ok().as_deref() == Some(c.as_str()))
                    })
            })
            .cloned()
            .collect()
    };
    let mut bounding = caps.to_vec();
    if let Some(p) = pid_init {
        for need in setup_caps() {
            if !caps.contains(&need) {
                p.drop.push(need.clone());
                bounding.push(need.clone());
            }
            if !root && !ambient.contains(&need) {
                if caps.contains(&need) {
                    p.drop_ambient.push(need.clone());
                }
                ambient.push(need);
            }
        }
        bounding.sort();
        ambient.sort();
    }
    // An empty value is the empty set (`~` alone would be every capability).
    svc.trusted("CapabilityBoundingSet", bounding.join(" "));
    if !ambient.is_empty() {
        svc.trusted("AmbientCapabilities", ambient.join(" "));
    }
}

/// `seccompProfile` (the container's, else the pod's): RuntimeDefault as system call filters.
fn seccomp(
    svc: &mut Section,
    ctx: &Contexts<'_>,
    caps: &[String],
    pid_init: Option<&mut PidInit>,
) -> Result<(), Fault> {
    let path = ctx.path;
    let seccomp = ctx
        .ctr
        .and_then(|c| c.seccomp_profile.as_ref())
        .or(ctx.pod.and_then(|p| p.seccomp_profile.as_ref()));
    match seccomp.map(|s| s.type_.as_str()) {
        Some("RuntimeDefault") => {
            // pid-init mounts /proc and makes the namespaces before the command runs, and then
            // refuses those calls itself.
            let restrict = !caps.iter().any(|c| c == "CAP_SYS_ADMIN");
            let in_pid_init = pid_init.is_some();
            let own_uts = pid_init.as_ref().is_some_and(|p| p.hostname.is_some());
            if let Some(p) = pid_init {
                p.deny_mount = true;
                p.deny_namespaces = restrict;
            }
            svc.trusted(
                "SystemCallFilter",
                if in_pid_init {
                    RUNTIME_DEFAULT_DENY_BUT_MOUNT
                } else {
                    RUNTIME_DEFAULT_DENY
                },
            );
            svc.trusted("SystemCallArchitectures", "native");
            svc.trusted("SystemCallErrorNumber", "EPERM");
            // The runtimes' default profile also refuses new namespaces (without CAP_SYS_ADMIN)
            // and personality changes.
            if restrict {
                svc.trusted(
                    "RestrictNamespaces",
                    match (in_pid_init, own_uts) {
                        (true, true) => "mnt pid uts",
                        (true, false) => "mnt pid",
                        (false, _) => "yes",
                    },
                );
            }
            svc.trusted("LockPersonality", "yes");
            Ok(())
        }
        None | Some("Unconfined") => Ok(()),
        Some(other) => Err(Fault::new(
            format!("{path}.securityContext.seccompProfile.type"),
            format!("{other:?} profiles are not supported (RuntimeDefault and Unconfined are)"),
        )),
    }
}

/// What every unprivileged container gets, as a container runtime would give it: its own /tmp,
/// a read-only cgroup tree, a hostname it cannot change. (Its own processes only in sight:
/// pid-init's PID namespace and /proc, unless hostPID: true.)
fn runtime_sandbox(
    svc: &mut Section,
    sc: Option<&SecurityContext>,
    caps: &[String],
    id: Identity,
    own_uts: bool,
) {
    svc.add("PrivateTmp", Value::Trusted("yes".into()));
    svc.add("ProtectControlGroups", Value::Trusted("yes".into()));
    // With a UTS namespace of pid-init's, the container cannot change the name either: that
    // takes CAP_SYS_ADMIN, which pid-init drops.
    if !own_uts {
        svc.add("ProtectHostname", Value::Trusted("yes".into()));
    }
    if !caps.iter().any(|c| c == "CAP_SYS_TIME") {
        svc.add("ProtectClock", Value::Trusted("yes".into()));
    }
    if sc.and_then(|c| c.allow_privilege_escalation) == Some(false) {
        svc.add("RestrictSUIDSGID", Value::Trusted("yes".into()));
    }
    // Its own mount table. (The IPC namespace is the pod's: see the container unit.)
    svc.add("PrivateMounts", Value::Trusted("yes".into()));
    // Devices as a container runtime's device cgroup allows them (runc's default list, which the
    // kubelet's CRI runtimes use): `closed` is null, zero, full, random and urandom; then the
    // terminal and pseudo-terminals. systemd binds the host's /dev into a container's root, so
    // without this a root container could open the host's disks; no node an image ships or a
    // process makes can be opened either.
    svc.add("DevicePolicy", Value::Trusted("closed".into()));
    for d in ["/dev/tty rw", "/dev/ptmx rw", "char-pts rw"] {
        svc.add("DeviceAllow", Value::Trusted(d.into()));
    }
    // Read-only kernel tunables, no module loading, no kernel log. For a non-root user systemd
    // implies NoNewPrivileges= with these, which Kubernetes only sets for
    // allowPrivilegeEscalation: false; so a non-root container that may escalate (setuid
    // programs) goes without them, as its missing capabilities already keep it from the kernel.
    let may_escalate = sc.and_then(|c| c.allow_privilege_escalation) != Some(false);
    if id.uid.unwrap_or(0) == 0 || !may_escalate {
        for key in [
            "ProtectKernelTunables",
            "ProtectKernelModules",
            "ProtectKernelLogs",
        ] {
            svc.add(key, Value::Trusted("yes".into()));
        }
    }
}

/// `lifecycle.stopSignal` (`SIGTERM`, `SIGUSR1`, ...) as systemd's `KillSignal=` accepts it.
pub fn stop_signal(name: &str) -> Option<&'static str> {
    const SIGNALS: &[&str] = &[
        "SIGABRT",
        "SIGALRM",
        "SIGBUS",
        "SIGCHLD",
        "SIGCONT",
        "SIGFPE",
        "SIGHUP",
        "SIGILL",
        "SIGINT",
        "SIGIO",
        "SIGKILL",
        "SIGPIPE",
        "SIGPROF",
        "SIGPWR",
        "SIGQUIT",
        "SIGSEGV",
        "SIGSTKFLT",
        "SIGSTOP",
        "SIGSYS",
        "SIGTERM",
        "SIGTRAP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGUSR1",
        "SIGUSR2",
        "SIGVTALRM",
        "SIGWINCH",
        "SIGXCPU",
        "SIGXFSZ",
    ];
    SIGNALS.iter().copied().find(|s| *s == name)
}
