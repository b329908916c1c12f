//! What failed when a container did not start ([`crate::status::start_error`]), as far as it
//! can be known after the fact:
//!
//! - the journal: the child systemd forked for the unit logs which step failed before
//!   `execve()` and why (`SD_MESSAGE_SPAWN_FAILED`, with `EXECUTABLE=` and `ERRNO=`), from the
//!   unit's cgroup, so journald files it under the run's `_SYSTEMD_INVOCATION_ID`. It does so
//!   only where it can reach journald: a container in an image root (`RootDirectory=`) has no
//!   journal socket once systemd changed into it, and systemd 252 then writes the line to the
//!   console only;
//! - so, for `203/EXEC`, the program itself: `ExecStart=`'s path looked up in the unit's
//!   `RootDirectory=` (symbolic links resolved inside that root, as `execve()` there would),
//!   which says whether it is missing (`ENOENT`) or not executable (`EACCES`).
//!
//! Read for the units whose exit status says a step failed, and kept per run.

use crate::systemd::unit::SpawnFailure;
use crate::systemd::unit::UnitState;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// systemd's "Failed at step %s spawning %s" message id.
pub const SPAWN_FAILED: &str = "641257651c1b4ec9a8624d7a40a9e1e7";

/// The journalctl arguments for the spawn failure of `unit`'s run `invocation` (the last one
/// logged when the run is not known). The match on the trusted `_SYSTEMD_UNIT=` keeps out
/// entries other units' processes could write.
pub fn journal_args(unit: &str, invocation: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "--no-pager",
        "--quiet",
        "--output=json",
        "--output-fields=EXECUTABLE,ERRNO",
        "--reverse",
        "--lines=1",
    ]
    .map(String::from)
    .to_vec();
    a.push(format!("MESSAGE_ID={SPAWN_FAILED}"));
    a.push(format!("_SYSTEMD_UNIT={unit}"));
    if !invocation.is_empty() {
        a.push(format!("_SYSTEMD_INVOCATION_ID={invocation}"));
    }
    a
}

/// The first entry of journalctl's JSON lines, as [`journal_args`] asks for it.
pub fn parse(text: &str) -> Option<SpawnFailure> {
    let v: serde_json::Value = serde_json::from_str(text.lines().next()?).ok()?;
    let executable = v.get("EXECUTABLE")?.as_str()?.to_string();
    let errno = v
        .get("ERRNO")
        .and_then(|e| e.as_str())
        .and_then(|e| e.parse().ok());
    Some(SpawnFailure { executable, errno })
}

/// Accounts already read, by invocation ID.
static SEEN: Mutex<Option<HashMap<String, SpawnFailure>>> = Mutex::new(None);

fn read(unit: &str, invocation: &str) -> Option<SpawnFailure> {
    if let Some(d) = SEEN
        .lock()
        .ok()?
        .as_ref()
        .and_then(|m| m.get(invocation).cloned())
    {
        return Some(d);
    }
    let out = Command::new("journalctl")
        .args(journal_args(unit, invocation))
        .output()
        .ok()?;
    let d = parse(&String::from_utf8_lossy(&out.stdout))?;
    if !invocation.is_empty() {
        let mut seen = SEEN.lock().ok()?;
        let map = seen.get_or_insert_with(HashMap::new);
        if map.len() >= 256 {
            map.clear();
        }
        map.insert(invocation.to_string(), d.clone());
    }
    Some(d)
}

/// Fills in what failed for every unit whose last run did not start.
pub fn fill(units: &mut HashMap<String, UnitState>) {
    for u in units.values_mut().filter(|u| {
        crate::status::start_error::is_start_error(u.exec_main_code, u.exec_main_status)
    }) {
        u.start_error = read(&u.name, &u.invocation_id).or_else(|| {
            (u.exec_main_status == EXIT_EXEC && !u.exec_path.is_empty())
                .then(|| program_detail(Path::new(&u.root_directory), &u.exec_path, &u.exec_search))
        });
    }
}

/// systemd's `EXIT_EXEC` (and `pid-init`'s, for a command it could not run).
const EXIT_EXEC: i32 = 203;

/// What `execve()` of `program` would meet inside `root`: a path as it is; a bare name in each
/// `search` directory in turn, as `execvp` looks (the first that is there is the one), and not
/// found at all when none has it.
fn program_detail(root: &Path, program: &str, search: &str) -> SpawnFailure {
    if program.contains('/') {
        return SpawnFailure {
            executable: program.to_string(),
            errno: lookup_in_root(root, program),
        };
    }
    for dir in search.split(':').filter(|d| d.starts_with('/')) {
        let candidate = format!("{}/{program}", dir.trim_end_matches('/'));
        match lookup_in_root(root, &candidate) {
            Some(e) if e == nix::errno::Errno::ENOENT as i32 => continue,
            errno => {
                return SpawnFailure {
                    executable: candidate,
                    errno,
                };
            }
        }
    }
    SpawnFailure {
        executable: program.to_string(),
        errno: Some(nix::errno::Errno::ENOENT as i32),
    }
}

/// Why `execve(program)` would fail inside `root` (`/` when empty), if it would for a reason a
/// lookup sees: `ENOENT` for a program (or a directory on its way) that is not there, `EACCES`
/// for one that is not an executable file. Symbolic links are followed inside `root`: an
/// absolute target starts again at `root`, `..` never climbs above it. Only metadata is read.
pub fn lookup_in_root(root: &Path, program: &str) -> Option<i32> {
    use std::os::unix::fs::PermissionsExt;
    let root = if root.as_os_str().is_empty() {
        Path::new("/")
    } else {
        root
    };
    let mut todo: Vec<String> = program
        .split('/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(String::from)
        .collect();
    let mut at: Vec<String> = Vec::new();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "." => continue,
            ".." => {
                at.pop();
                continue;
            }
            _ => {}
        }
        let here = at
            .iter()
            .fold(root.to_path_buf(), |p, c| p.join(c))
            .join(&c);
        let meta = match std::fs::symlink_metadata(&here) {
            Ok(m) => m,
            Err(e) => return e.raw_os_error(),
        };
        if meta.file_type().is_symlink() {
            links += 1;
            if links > 40 {
                return Some(libc::ELOOP);
            }
            let target = std::fs::read_link(&here).ok()?;
            let target = target.to_string_lossy();
            if target.starts_with('/') {
                at.clear();
            }
            todo.extend(
                target
                    .split('/')
                    .filter(|c| !c.is_empty())
                    .rev()
                    .map(String::from),
            );
            continue;
        }
        if !todo.is_empty() && !meta.is_dir() {
            return Some(libc::ENOTDIR);
        }
        at.push(c);
        if todo.is_empty() && (!meta.is_file() || meta.permissions().mode() & 0o111 == 0) {
            return Some(libc::EACCES);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_of_the_run_from_its_own_unit() {
        let a = journal_args("podunit-default_app_main.service", "ab01");
        assert!(a.contains(&format!("MESSAGE_ID={SPAWN_FAILED}")));
        assert!(a.contains(&"_SYSTEMD_UNIT=podunit-default_app_main.service".to_string()));
        assert!(a.contains(&"_SYSTEMD_INVOCATION_ID=ab01".to_string()));
        assert!(
            !journal_args("x.service", "")
                .iter()
                .any(|x| x.contains("INVOCATION"))
        );
        let line = r#"{"__CURSOR":"c","EXECUTABLE":"/bin/app","ERRNO":"2"}"#;
        assert_eq!(
            parse(line),
            Some(SpawnFailure {
                executable: "/bin/app".into(),
                errno: Some(2)
            })
        );
        assert_eq!(parse(""), None);
        assert_eq!(parse(r#"{"ERRNO":"2"}"#), None);
    }

    #[test]
    fn programs_are_looked_up_inside_the_root() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let root = std::env::temp_dir().join(format!("podunit-lookup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::fs::write(root.join("usr/bin/app"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(root.join("usr/bin/app"), PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::write(root.join("usr/bin/data"), b"").unwrap();
        // Absolute links resolve in the root, not on the host.
        symlink("/usr/bin", root.join("bin")).unwrap();
        symlink("/etc/passwd", root.join("usr/bin/escape")).unwrap();
        symlink("../../../../usr/bin/app", root.join("usr/bin/up")).unwrap();
        assert_eq!(lookup_in_root(&root, "/bin/app"), None);
        assert_eq!(lookup_in_root(&root, "/usr/bin/up"), None);
        assert_eq!(lookup_in_root(&root, "/bin/missing"), Some(libc::ENOENT));
        assert_eq!(lookup_in_root(&root, "/usr/bin/escape"), Some(libc::ENOENT));
        assert_eq!(lookup_in_root(&root, "/bin/data"), Some(libc::EACCES));
        assert_eq!(lookup_in_root(&root, "/usr"), Some(libc::EACCES));
        assert_eq!(
            lookup_in_root(&root, "/usr/bin/data/x"),
            Some(libc::ENOTDIR)
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
