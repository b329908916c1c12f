//! What systemd says about a unit, as plain data. The D-Bus client ([`crate::systemd`]) and the
//! node agent's `systemctl` edge (`podunit-sync`'s `systemctl show` reader) fill these; reconcile and status read
//! them, so both stay pure and testable without a bus.

/// One row of `ListUnits`/`ListUnitsByPatterns`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListedUnit {
    pub name: String,
    /// `loaded`, `not-found`, `masked`, `error`, ...
    pub load_state: String,
    /// `active`, `inactive`, `failed`, `activating`, `deactivating`, `reloading`.
    pub active_state: String,
    pub sub_state: String,
    /// `FragmentPath`, when looked up (ListUnits does not return it). `Some("")` means the unit
    /// has no file: slices are synthesised as `loaded` even after their file is gone.
    pub fragment_path: Option<String>,
    /// A job is queued for it (a start waiting out a daemon-reload, say): `inactive` for now.
    pub job_queued: bool,
}

impl ListedUnit {
    /// Active in any way that a stop job would change.
    pub fn is_running(&self) -> bool {
        matches!(
            self.active_state.as_str(),
            "active" | "activating" | "deactivating" | "reloading"
        )
    }

    /// The unit file is gone but systemd still tracks the unit.
    pub fn is_not_found(&self) -> bool {
        self.load_state == "not-found" || self.fragment_path.as_deref() == Some("")
    }
}

/// How the main process last ended (`ExecMainCode`, the `si_code` of its SIGCHLD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExitKind {
    /// Never exited (or never ran).
    #[default]
    None,
    /// Exited; the status is the exit code.
    Exited,
    /// Killed by a signal; the status is the signal number.
    Killed,
    /// Killed and dumped core.
    Dumped,
}

impl ExitKind {
    /// Maps `CLD_EXITED` (1), `CLD_KILLED` (2), `CLD_DUMPED` (3).
    pub fn from_code(code: i32) -> Self {
        match code {
            1 => ExitKind::Exited,
            2 => ExitKind::Killed,
            3 => ExitKind::Dumped,
            _ => ExitKind::None,
        }
    }

    /// The exit code a container runtime would report: the code, or 128 + signal.
    pub fn exit_code(self, status: i32) -> Option<i32> {
        match self {
            ExitKind::None => None,
            ExitKind::Exited => Some(status),
            ExitKind::Killed | ExitKind::Dumped => Some(128 + status),
        }
    }
}

/// The journal's account of a step that failed before `execve()` ("Failed at step EXEC
/// spawning ..."), when it has one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpawnFailure {
    /// `EXECUTABLE=`: the program systemd was about to run.
    pub executable: String,
    /// `ERRNO=`: why the step failed.
    pub errno: Option<i32>,
}

/// The properties of one unit (service) that status needs, for local and API pods alike.
/// Timestamps are µs since the epoch, 0 = never, as systemd reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnitState {
    pub name: String,
    pub load_state: String,
    pub active_state: String,
    pub sub_state: String,
    /// `Result=`: `success`, `exit-code`, `signal`, `core-dump`, `timeout`, `oom-kill`, ...
    pub result: String,
    pub n_restarts: u32,
    pub exec_main_code: ExitKind,
    pub exec_main_status: i32,
    pub exec_main_start_us: u64,
    pub exec_main_exit_us: u64,
    pub active_enter_us: u64,
    pub main_pid: u32,
    pub fragment_path: String,
    /// Hex invocation ID of the current (or last) run; empty if none.
    pub invocation_id: String,
    /// The container's program (from `ExecStart=`, through `pid-init`'s wrapper, see
    /// [`container_program`]) and `RootDirectory=` (empty: the host's root): where a start
    /// error's executable is looked for.
    pub exec_path: String,
    /// The directories a program named without a `/` is looked for in (`pid-init --search`).
    pub exec_search: String,
    pub root_directory: String,
    /// What failed of a start whose exit status says a step before `execve()` did
    /// (the status model fills it from the journal).
    pub start_error: Option<SpawnFailure>,
}

impl UnitState {
    /// The unit as systemd knows it without its file: a unit that was never loaded.
    pub fn absent(name: &str) -> Self {
        UnitState {
            name: name.to_string(),
            load_state: "not-found".into(),
            active_state: "inactive".into(),
            sub_state: "dead".into(),
            ..Default::default()
        }
    }
}

/// The container's own program and search path, from `ExecStart=`'s path and argv: the command
/// after `--` when the unit starts it through `podunit pid-init` (whatever loader runs that),
/// else the path itself.
pub fn container_program(path: &str, argv: &[String]) -> (String, String) {
    let Some(at) = argv.iter().position(|a| a == "pid-init") else {
        return (path.to_string(), String::new());
    };
    let rest = &argv[at + 1..];
    let search = rest
        .iter()
        .position(|a| a == "--search")
        .and_then(|i| rest.get(i + 1))
        .cloned()
        .unwrap_or_default();
    let program = rest
        .iter()
        .position(|a| a == "--")
        .and_then(|i| rest.get(i + 1))
        .cloned()
        .unwrap_or_default();
    (program, search)
}

#[cfg(test)]
mod program_tests {
    use super::container_program;

    #[test]
    fn the_program_behind_pid_init() {
        let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            container_program("/bin/app", &v("/bin/app -x")),
            ("/bin/app".into(), String::new())
        );
        assert_eq!(
            container_program(
                "/lib64/ld-linux-x86-64.so.2",
                &v(
                    "/lib64/ld-linux-x86-64.so.2 --inhibit-cache /usr/bin/podunit pid-init --mask --search /usr/bin:/bin -- app -- x"
                )
            ),
            ("app".into(), "/usr/bin:/bin".into())
        );
        assert_eq!(
            container_program(
                "/usr/bin/podunit",
                &v("/usr/bin/podunit pid-init -- /bin/app")
            ),
            ("/bin/app".into(), String::new())
        );
    }
}
