//! `podunit pid-init`: a container in a PID namespace of its own, as a container runtime starts it
//! (systemd 252 has no `PrivatePIDs=`). The container unit's `ExecStart=` runs it in the unit's
//! sandbox, as the container's user, with a few capabilities more than the container has (the
//! generator adds them, see `translate::security`). Two processes:
//!
//! - the **outer** one, the unit's main process, in the host's PID namespace: makes a new PID
//!   namespace (or joins the pod's, `shareProcessNamespace`), starts the inner one in it, forwards
//!   every signal it gets to it (`KillSignal=`, a liveness kill, `systemctl kill`), and ends as it
//!   ended: the same exit code, or killed by the same signal, so systemd records what a container
//!   runtime would;
//! - the **inner** one, PID 1 of the new namespace (or a member of the pod's): its own mount
//!   namespace with a `/proc` of that PID namespace, masked as a runtime masks it, the seccomp rules
//!   systemd could not apply in its place, the added capabilities dropped again; then it becomes the
//!   container's command. So the command is PID 1, as under a kubelet: a signal it has no handler
//!   for does not end it.
//!
//! `podunit exec` and exec probes enter the inner process (see `prober::enter::inspect`).

mod seccomp;

use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode};

/// The exit status systemd gives a service whose command cannot be executed (`203/EXEC`).
const EXIT_EXEC: u8 = 203;

/// What `/proc` hides from an unprivileged container: what containerd masks by default (an empty
/// file or directory in its place), and what systemd's `ProtectKernelTunables=`/`ProtectKernelLogs=`
/// made inaccessible on the `/proc` this one replaces.
const MASKED: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kallsyms",
    "/proc/kcore",
    "/proc/keys",
    "/proc/kmsg",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/timer_list",
    "/proc/timer_stats",
];

/// What it may read but not write (containerd's read-only paths, and systemd's).
const READ_ONLY: &[&str] = &[
    "/proc/apm",
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/mtrr",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Join the pod's PID namespace, bound at this path.
    #[arg(long, value_name = "PATH")]
    pub pod: Option<std::path::PathBuf>,
    /// Mask parts of /proc as a container runtime does (not for privileged containers).
    #[arg(long)]
    pub mask: bool,
    /// Unmount this path where it is a mount point (what was bound into an image's root to run
    /// this: podunit, the host's loader and C library, the pod's PID namespace).
    #[arg(long, value_name = "PATH")]
    pub hide: Vec<std::path::PathBuf>,
    /// This was started through this dynamic loader (in an image's root), as the inner process
    /// must be too.
    #[arg(long, value_name = "PATH", requires = "library_path")]
    pub loader: Option<std::path::PathBuf>,
    /// The loader's library path.
    #[arg(long, value_name = "DIRS")]
    pub library_path: Option<String>,
    /// Refuse the mount system calls (`@mount`), as the RuntimeDefault seccomp profile does.
    #[arg(long)]
    pub deny_mount: bool,
    /// Refuse new mount and PID namespaces, as `RestrictNamespaces=yes` does.
    #[arg(long)]
    pub deny_namespaces: bool,
    /// Capabilities to drop from every set, the bounding set included.
    #[arg(long, value_delimiter = ',', value_name = "CAPS")]
    pub drop: Vec<String>,
    /// Capabilities to drop from every set but the bounding set.
    #[arg(long, value_delimiter = ',', value_name = "CAPS")]
    pub drop_ambient: Vec<String>,
    /// Join the pod's UTS namespace, bound at this path (`pod-prepare` made it with the pod's
    /// hostname in it).
    #[arg(long, value_name = "PATH")]
    pub uts: Option<std::path::PathBuf>,
    /// Where to look for a command without a `/` (as `ExecSearchPath=`).
    #[arg(long, value_name = "DIRS")]
    pub search: Option<String>,
    /// The inner process (started by the outer one).
    #[arg(long, hide = true)]
    pub inner: bool,
    /// The container's command.
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

pub fn run(args: Args) -> ExitCode {
    let r = if args.inner {
        inner(&args)
    } else {
        outer(&args)
    };
    match r {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("podunit pid-init: {e}");
            ExitCode::from(EXIT_EXEC)
        }
    }
}

enum Never {}

/// The outer process: never returns but by exiting as the inner one ended.
fn outer(args: &Args) -> Result<Never, String> {
    // Every signal waits for sigwait below; the inner process unblocks them before it execs.
    let all = SigSet::all();
    all.thread_block()
        .map_err(|e| format!("blocking signals: {e}"))?;
    match &args.pod {
        Some(ns) => {
            let f = std::fs::File::open(ns).map_err(|e| format!("{}: {e}", ns.display()))?;
            nix::sched::setns(f, CloneFlags::CLONE_NEWPID)
                .map_err(|e| format!("joining the pod's PID namespace: {e}"))?;
        }
        None => nix::sched::unshare(CloneFlags::CLONE_NEWPID)
            .map_err(|e| format!("a new PID namespace: {e}"))?,
    }
    let mut cmd = match (&args.loader, &args.library_path) {
        (Some(loader), Some(libs)) => {
            // /proc/self/exe is the loader: started the same way.
            let exe = std::env::args_os().next().unwrap_or_default();
            let mut c = Command::new(loader);
            c.args(["--inhibit-cache", "--library-path"])
                .arg(libs)
                .arg(exe);
            c
        }
        _ => Command::new("/proc/self/exe"),
    };
    cmd.arg("pid-init").arg("--inner");
    if let Some(p) = &args.pod {
        cmd.arg("--pod").arg(p);
    }
    for (flag, on) in [
        ("--mask", args.mask),
        ("--deny-mount", args.deny_mount),
        ("--deny-namespaces", args.deny_namespaces),
    ] {
        if on {
            cmd.arg(flag);
        }
    }
    for h in &args.hide {
        cmd.arg("--hide").arg(h);
    }
    if !args.drop.is_empty() {
        cmd.arg(format!("--drop={}", args.drop.join(",")));
    }
    if !args.drop_ambient.is_empty() {
        cmd.arg(format!("--drop-ambient={}", args.drop_ambient.join(",")));
    }
    if let Some(s) = &args.search {
        cmd.arg("--search").arg(s);
    }
    if let Some(u) = &args.uts {
        cmd.arg("--uts").arg(u);
    }
    cmd.arg("--").args(&args.command);
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting the container's first process: {e}"))?;
    let child = Pid::from_raw(child.id() as i32);
    // From here on only a signal to forward, or the end of the inner process.
    loop {
        let sig = all.wait().map_err(|e| format!("sigwait: {e}"))?;
        if sig != Signal::SIGCHLD {
            let _ = nix::sys::signal::kill(child, sig);
            continue;
        }
        loop {
            match nix::sys::wait::waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, code)) => std::process::exit(code),
                Ok(WaitStatus::Signaled(_, s, _)) => die_by(s),
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => continue,
                Err(e) => return Err(format!("waiting for the container: {e}")),
            }
        }
    }
}

/// Ends this process by signal `s`, as the container ended, so systemd sees the same; a signal
/// that cannot end it leaves the code a runtime reports for it, 128 + n.
fn die_by(s: Signal) -> ! {
    // No core file of this process for the container's crash.
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Core,
        rustix::process::Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    );
    let _ = nix::sys::signal::kill(Pid::this(), s);
    let mut one = SigSet::empty();
    one.add(s);
    let _ = one.thread_unblock();
    std::process::exit(128 + s as i32)
}

/// The inner process: PID 1 of the container's PID namespace (or a member of the pod's).
fn inner(args: &Args) -> Result<Never, String> {
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    // The outer process gone (SIGKILLed), the container goes with it.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| format!("parent death signal: {e}"))?;
    nix::sched::unshare(CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("a new mount namespace: {e}"))?;
    let none: Option<&str> = None;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_SLAVE, none)
        .map_err(|e| format!("making / a slave mount: {e}"))?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        none,
    )
    .map_err(|e| format!("mounting /proc: {e}"))?;
    if let Some(uts) = &args.uts {
        let f = std::fs::File::open(uts).map_err(|e| format!("{}: {e}", uts.display()))?;
        nix::sched::setns(f, CloneFlags::CLONE_NEWUTS)
            .map_err(|e| format!("joining the pod's UTS namespace: {e}"))?;
    }
    if args.mask {
        mask_proc()?;
    }
    for h in &args.hide {
        match umount2(h.as_path(), MntFlags::MNT_DETACH) {
            // Not a mount point: a library directory the host does not have.
            Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(format!("unmounting {}: {e}", h.display())),
        }
    }
    if args.deny_mount || args.deny_namespaces {
        seccomp::install(args.deny_mount, args.deny_namespaces)
            .map_err(|e| format!("seccomp filter: {e}"))?;
    }
    drop_caps(&args.drop, &args.drop_ambient)?;
    SigSet::all()
        .thread_unblock()
        .map_err(|e| format!("unblocking signals: {e}"))?;
    let (prog, rest) = args.command.split_first().expect("clap requires one");
    let program = resolve(prog, args.search.as_deref())
        .ok_or_else(|| format!("Failed to locate executable {}", prog.to_string_lossy()))?;
    let e = Command::new(&program).arg0(prog).args(rest).exec();
    Err(format!(
        "Failed to execute {}: {e}",
        Path::new(&program).display()
    ))
}

/// `pod-prepare`'s part for `shareProcessNamespace`: a PID namespace for the pod, held by a pause
/// process as its PID 1 (in the pod unit's cgroup, as the kubelet's pause container holds a
/// pod's), bound at `at` for the containers' `pid-init --pod` to join. Called last: this process's
/// later children would be in that namespace too.
pub fn start_pod_namespace(at: &Path) -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    release_pod_namespace(at);
    nix::sched::unshare(CloneFlags::CLONE_NEWPID)
        .map_err(|e| format!("the pod's PID namespace: {e}"))?;
    let pause = Command::new("/proc/self/exe")
        .arg("pod-pause")
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("the pod's pause process: {e}"))?;
    pin_file(at)?;
    let ns = format!("/proc/{}/ns/pid", pause.id());
    let none: Option<&str> = None;
    mount(Some(ns.as_str()), at, none, MsFlags::MS_BIND, none)
        .map_err(|e| format!("binding the pod's PID namespace at {}: {e}", at.display()))
}

/// `pod-prepare`'s part for the pod's hostname: a UTS namespace with `hostname` in it, bound at
/// `at` for the containers' `pid-init --uts` to join (one per pod, as the sandbox's is under a
/// kubelet). Made in a thread of its own, so this process keeps the host's.
pub fn pin_uts_namespace(at: &Path, hostname: &str) -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    release_pod_namespace(at);
    pin_file(at)?;
    let at = at.to_path_buf();
    let hostname = hostname.to_string();
    std::thread::spawn(move || -> Result<(), String> {
        nix::sched::unshare(CloneFlags::CLONE_NEWUTS)
            .map_err(|e| format!("the pod's UTS namespace: {e}"))?;
        nix::unistd::sethostname(&hostname).map_err(|e| format!("hostname {hostname:?}: {e}"))?;
        let none: Option<&str> = None;
        mount(
            Some("/proc/thread-self/ns/uts"),
            &at,
            none,
            MsFlags::MS_BIND,
            none,
        )
        .map_err(|e| format!("binding the pod's UTS namespace at {}: {e}", at.display()))
    })
    .join()
    .map_err(|_| "the thread making the pod's UTS namespace panicked".to_string())?
}

/// The file a pod's namespace is bound to: its directory and it readable by every user, as the
/// containers open it as their own users.
fn pin_file(at: &Path) -> Result<(), String> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(dir) = at.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o444)
        .open(at)
        .map(drop)
        .map_err(|e| format!("{}: {e}", at.display()))
}

/// Undoes [`start_pod_namespace`]'s or [`pin_uts_namespace`]'s binding (the pause process goes
/// with the pod unit).
pub fn release_pod_namespace(at: &Path) {
    let _ = nix::mount::umount2(at, nix::mount::MntFlags::MNT_DETACH);
    let _ = std::fs::remove_file(at);
}

/// `podunit pod-pause`: PID 1 of a pod's PID namespace, doing what the kubelet's pause container
/// does: nothing, as an unprivileged user, but reaping the orphans the namespace gives it, until
/// SIGTERM or SIGINT.
pub fn pause() -> ExitCode {
    let all = SigSet::all();
    if let Err(e) = all.thread_block() {
        eprintln!("podunit pod-pause: blocking signals: {e}");
        return ExitCode::FAILURE;
    }
    let _ = nix::unistd::chdir("/");
    // What the containers see as their PID 1, named as the kubelet's is.
    let _ = rustix::thread::set_name(c"pause");
    // The pause image's user (65535); dropping root drops every capability.
    let nobody = 65535;
    let who = nix::unistd::setgroups(&[])
        .and_then(|()| nix::unistd::setgid(nix::unistd::Gid::from_raw(nobody)))
        .and_then(|()| nix::unistd::setuid(nix::unistd::Uid::from_raw(nobody)));
    if let Err(e) = who {
        eprintln!("podunit pod-pause: becoming user {nobody}: {e}");
        return ExitCode::FAILURE;
    }
    loop {
        match all.wait() {
            Ok(Signal::SIGCHLD) => {
                while let Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) =
                    nix::sys::wait::waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG))
                {
                }
            }
            Ok(Signal::SIGTERM | Signal::SIGINT) => return ExitCode::SUCCESS,
            _ => {}
        }
    }
}

/// A command with a `/` as it is; otherwise the first executable file of that name in `search`
/// (systemd's own search path when none is given).
fn resolve(prog: &OsString, search: Option<&str>) -> Option<OsString> {
    if prog.as_bytes().contains(&b'/') {
        return Some(prog.clone());
    }
    let dirs = search.unwrap_or(crate::translate::imagerun::DEFAULT_PATH);
    dirs.split(':').filter(|d| !d.is_empty()).find_map(|d| {
        let p = Path::new(d).join(prog);
        let exec = rustix::fs::access(&p, rustix::fs::Access::EXEC_OK).is_ok();
        (exec && p.is_file()).then(|| p.into_os_string())
    })
}

/// Masks and read-only parts of the fresh `/proc`, as a runtime sets them up.
fn mask_proc() -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    let none: Option<&str> = None;
    for p in MASKED {
        let Ok(meta) = std::fs::metadata(p) else {
            continue;
        };
        let r = if meta.is_dir() {
            mount(
                Some("tmpfs"),
                *p,
                Some("tmpfs"),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some("size=0,mode=555"),
            )
        } else {
            mount(Some("/dev/null"), *p, none, MsFlags::MS_BIND, none)
        };
        r.map_err(|e| format!("masking {p}: {e}"))?;
    }
    for p in READ_ONLY {
        if !Path::new(p).exists() {
            continue;
        }
        mount(Some(*p), *p, none, MsFlags::MS_BIND | MsFlags::MS_REC, none)
            .and_then(|()| {
                mount(
                    none,
                    *p,
                    none,
                    MsFlags::MS_BIND
                        | MsFlags::MS_REMOUNT
                        | MsFlags::MS_RDONLY
                        | MsFlags::MS_NOSUID
                        | MsFlags::MS_NODEV
                        | MsFlags::MS_NOEXEC,
                    none,
                )
            })
            .map_err(|e| format!("making {p} read-only: {e}"))?;
    }
    Ok(())
}

/// The capability number of `CAP_NAME`.
fn cap_number(name: &str) -> Option<u32> {
    crate::translate::security::capability_number(name)
}

/// Takes back what the generator added for the setup: `drop` from every set, `drop_ambient` from
/// all but the bounding set. What remains is what systemd would have given the container.
fn drop_caps(drop: &[String], drop_ambient: &[String]) -> Result<(), String> {
    use rustix::thread::{self as rt, CapabilitySet};
    let mask = |names: &[String]| -> Result<u64, String> {
        names.iter().try_fold(0u64, |m, n| {
            cap_number(n)
                .map(|c| m | (1 << c))
                .ok_or_else(|| format!("{n:?} is not a capability"))
        })
    };
    let everywhere = mask(drop)?;
    let gone = everywhere | mask(drop_ambient)?;
    if gone == 0 {
        return Ok(());
    }
    let set = |m: u64| CapabilitySet::from_bits_retain(m);
    for c in (0..64).filter(|c| everywhere & (1 << c) != 0) {
        rt::remove_capability_from_bounding_set(set(1 << c))
            .map_err(|e| format!("dropping from the bounding set: {e}"))?;
    }
    for c in (0..64).filter(|c| gone & (1 << c) != 0) {
        // Lowering an ambient capability needs no privilege; not there, it is a no-op.
        let _ = rt::configure_capability_in_ambient_set(set(1 << c), false);
    }
    let now = rt::capabilities(None).map_err(|e| format!("capget: {e}"))?;
    rt::set_capabilities(
        None,
        rt::CapabilitySets {
            effective: set(now.effective.bits() & !gone),
            permitted: set(now.permitted.bits() & !gone),
            inheritable: set(now.inheritable.bits() & !gone),
        },
    )
    .map_err(|e| format!("capset: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_found_as_systemd_finds_them() {
        assert_eq!(
            resolve(&"/bin/sh".into(), Some("/nowhere")),
            Some("/bin/sh".into())
        );
        assert_eq!(
            resolve(&"sh".into(), Some("/nowhere:/bin")),
            Some("/bin/sh".into())
        );
        assert_eq!(resolve(&"no-such-program-here".into(), None), None);
        assert!(
            crate::translate::security::PID_INIT_CAPS
                .iter()
                .all(|c| cap_number(c).is_some())
        );
    }
}
