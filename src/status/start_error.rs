//! A container that never started: systemd could not run its process. Between `fork()` and
//! `execve()` systemd sets the process up (working directory, user, namespaces, root, ...) and a
//! step that fails ends the child with one of systemd's own exit statuses, 200 to 243 and 245
//! (systemd.exec(5), "Process exit codes"); `203/EXEC` is the `execve()` itself, most often a
//! command that is not in the image. systemd reports it as `ExecMainCode=1` (exited) with that
//! status, as if the program had exited.
//!
//! The kubelet shows such a container as containerd does when its task cannot start
//! (`container_start.go`): terminated with reason `StartError`, exit code 128 and the runtime's
//! message, e.g. `exec: "/bin/app": stat /bin/app: no such file or directory`. Pure; the
//! journal's account of the failed step (systemd's "Failed at step EXEC spawning ..." entry,
//! with `EXECUTABLE=` and `ERRNO=`) is read by the callers ([`crate::status::start_detail`]).

use crate::systemd::unit::{ExitKind, SpawnFailure};

/// The kubelet's (containerd's) reason for a container whose process could not be started.
pub const REASON: &str = "StartError";
/// containerd's `errorStartExitCode` ("128 is the same with Docker's behavior").
pub const EXIT_CODE: i32 = 128;

/// systemd's exit statuses for a failed step before `execve()`, with their meaning as
/// systemd.exec(5) gives it.
const STEPS: &[(i32, &str, &str)] = &[
    (
        200,
        "CHDIR",
        "changing to the requested working directory failed",
    ),
    (
        201,
        "NICE",
        "failed to set up process scheduling priority (nice level)",
    ),
    (
        202,
        "FDS",
        "failed to close unwanted file descriptors, or to adjust passed file descriptors",
    ),
    (
        203,
        "EXEC",
        "the actual process execution failed (specifically, the execve(2) system call); most \
         likely this is caused by a missing or non-accessible executable file",
    ),
    (
        204,
        "MEMORY",
        "failed to perform an action due to memory shortage",
    ),
    (205, "LIMITS", "failed to adjust resource limits"),
    (206, "OOM_ADJUST", "failed to adjust the OOM setting"),
    (207, "SIGNAL_MASK", "failed to set process signal mask"),
    (208, "STDIN", "failed to set up standard input"),
    (209, "STDOUT", "failed to set up standard output"),
    (210, "CHROOT", "failed to change root directory (chroot(2))"),
    (211, "IOPRIO", "failed to set up IO scheduling priority"),
    (212, "TIMERSLACK", "failed to set up timer slack"),
    (213, "SECUREBITS", "failed to set process secure bits"),
    (214, "SETSCHEDULER", "failed to set up CPU scheduling"),
    (215, "CPUAFFINITY", "failed to set up CPU affinity"),
    (
        216,
        "GROUP",
        "failed to determine or change group credentials",
    ),
    (
        217,
        "USER",
        "failed to determine or change user credentials, or to set up user namespacing",
    ),
    (
        218,
        "CAPABILITIES",
        "failed to drop capabilities, or apply ambient capabilities",
    ),
    (219, "CGROUP", "setting up the service control group failed"),
    (220, "SETSID", "failed to create new process session"),
    (221, "CONFIRM", "execution has been cancelled by the user"),
    (222, "STDERR", "failed to set up standard error output"),
    (224, "PAM", "failed to set up PAM session"),
    (225, "NETWORK", "failed to set up network namespacing"),
    (
        226,
        "NAMESPACE",
        "failed to set up mount, UTS, or IPC namespacing",
    ),
    (227, "NO_NEW_PRIVILEGES", "failed to disable new privileges"),
    (228, "SECCOMP", "failed to apply system call filters"),
    (
        229,
        "SELINUX_CONTEXT",
        "determining or changing SELinux context failed",
    ),
    (
        230,
        "PERSONALITY",
        "failed to set up an execution domain (personality)",
    ),
    (
        231,
        "APPARMOR_PROFILE",
        "failed to prepare changing AppArmor profile",
    ),
    (
        232,
        "ADDRESS_FAMILIES",
        "failed to restrict address families",
    ),
    (
        233,
        "RUNTIME_DIRECTORY",
        "setting up runtime directory failed",
    ),
    (235, "CHOWN", "failed to adjust socket ownership"),
    (236, "SMACK_PROCESS_LABEL", "failed to set SMACK label"),
    (237, "KEYRING", "failed to set up kernel keyring"),
    (
        238,
        "STATE_DIRECTORY",
        "failed to set up unit's state directory",
    ),
    (
        239,
        "CACHE_DIRECTORY",
        "failed to set up unit's cache directory",
    ),
    (
        240,
        "LOGS_DIRECTORY",
        "failed to set up unit's logging directory",
    ),
    (
        241,
        "CONFIGURATION_DIRECTORY",
        "failed to set up unit's configuration directory",
    ),
    (
        242,
        "NUMA_POLICY",
        "failed to set up unit's NUMA memory policy",
    ),
    (243, "CREDENTIALS", "failed to set up unit's credentials"),
    (245, "BPF", "failed to apply BPF restrictions"),
];

fn step(status: i32) -> Option<&'static (i32, &'static str, &'static str)> {
    STEPS.iter().find(|(s, _, _)| *s == status)
}

/// Whether a main process that ended so never ran the container's program: systemd's own
/// exit status for a step that failed before `execve()`.
pub fn is_start_error(exit: ExitKind, status: i32) -> bool {
    exit == ExitKind::Exited && step(status).is_some()
}

/// `errno` as Go spells it in the runtime's messages (lower case, as `syscall.Errno.Error()`).
fn errno_text(errno: i32) -> String {
    let text = nix::errno::Errno::from_raw(errno).desc();
    let mut c = text.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => format!("errno {errno}"),
    }
}

/// The message of a start error with exit `status`: the runtime's words where the journal says
/// what failed (runc's `exec: "/bin/app": stat /bin/app: no such file or directory` for a
/// command that is not there), then systemd's status and what systemd.exec(5) says it means.
pub fn message(status: i32, detail: Option<&SpawnFailure>) -> String {
    let (code, name, meaning) = step(status).copied().unwrap_or((status, "", ""));
    let systemd = if name.is_empty() {
        format!("systemd: status={code}")
    } else {
        format!("systemd: status={code}/{name}: {meaning}")
    };
    let Some(d) = detail.filter(|d| !d.executable.is_empty()) else {
        return format!("failed to start the container process ({systemd})");
    };
    let exe = &d.executable;
    let runtime = match (name, d.errno) {
        ("EXEC", Some(2)) if !exe.contains('/') => {
            format!("exec: {exe:?}: executable file not found in $PATH")
        }
        ("EXEC", Some(2)) => format!("exec: {exe:?}: stat {exe}: no such file or directory"),
        ("EXEC", Some(e)) => format!("exec: {exe:?}: {}", errno_text(e)),
        ("EXEC", None) => format!("exec: {exe:?}"),
        (_, Some(e)) => format!("failed at step {name} spawning {exe}: {}", errno_text(e)),
        (_, None) => format!("failed at step {name} spawning {exe}"),
    };
    format!("{runtime} ({systemd})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_statuses_before_exec_are_start_errors() {
        assert!(is_start_error(ExitKind::Exited, 203));
        assert!(is_start_error(ExitKind::Exited, 200));
        assert!(is_start_error(ExitKind::Exited, 243));
        assert!(!is_start_error(ExitKind::Exited, 1));
        assert!(!is_start_error(ExitKind::Exited, 244));
        assert!(!is_start_error(ExitKind::Killed, 203 - 128));
    }

    #[test]
    fn messages_say_what_the_runtime_would_then_what_systemd_did() {
        let missing = SpawnFailure {
            executable: "/bin/app".into(),
            errno: Some(2),
        };
        assert_eq!(
            message(203, Some(&missing)),
            "exec: \"/bin/app\": stat /bin/app: no such file or directory (systemd: \
             status=203/EXEC: the actual process execution failed (specifically, the execve(2) \
             system call); most likely this is caused by a missing or non-accessible executable \
             file)"
        );
        let denied = SpawnFailure {
            errno: Some(13),
            ..missing.clone()
        };
        assert!(
            message(203, Some(&denied)).starts_with("exec: \"/bin/app\": permission denied ("),
            "{}",
            message(203, Some(&denied))
        );
        let chdir = SpawnFailure {
            errno: Some(2),
            ..missing
        };
        assert!(
            message(200, Some(&chdir)).starts_with(
                "failed at step CHDIR spawning /bin/app: no such file or directory (systemd: \
                 status=200/CHDIR: changing to"
            ),
            "{}",
            message(200, Some(&chdir))
        );
        assert_eq!(
            message(217, None),
            "failed to start the container process (systemd: status=217/USER: failed to \
             determine or change user credentials, or to set up user namespacing)"
        );
    }
}
