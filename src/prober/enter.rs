//! Running a command inside a container as its main process runs: the same cgroup, namespaces,
//! root and working directory, user, groups, capabilities, no-new-privileges and environment.
//! Exec probes use it, and so does anything else that runs a command in a container.
//!
//! It works in the calling process, which must be single-threaded and privileged (`setns` of a
//! mount namespace refuses threaded callers): the `podunit probe-exec --enter` process, started in
//! PID 1's context, never podunit-sync itself (whose sandbox has no capabilities).
//!
//! Not carried over: the container's system call filter (a filter cannot be copied from another
//! process). The command cannot gain anything from that: it runs as the container's user, with
//! the container's capability sets ([`super::capabilities`]) and no-new-privileges when the
//! container has it.

use std::fmt;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

// systemd gives services that set no `PATH` the same one as container runtimes.
use crate::translate::imagerun::DEFAULT_PATH;

#[derive(Debug)]
pub enum Error {
    NotRunning,
    Read(PathBuf, std::io::Error),
    Parse(PathBuf, String),
    Capabilities(super::capabilities::Error),
    Env(String, String),
    Sys(&'static str, nix::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotRunning => write!(f, "the container is not running"),
            Error::Read(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            Error::Parse(p, m) => write!(f, "{}: {m}", p.display()),
            Error::Capabilities(e) => write!(f, "setting the container's capabilities: {e}"),
            Error::Env(file, m) => write!(f, "environment file {file}: {m}"),
            Error::Sys(what, e) => write!(f, "{what}: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// What of the container's main process the command inherits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub no_new_privs: bool,
    /// Its capability sets.
    pub caps: super::capabilities::Sets,
    /// Its cgroups: (directory of the hierarchy below /sys/fs/cgroup, path in it). One entry
    /// (`""`) on a unified host; on a v1 or hybrid host one per hierarchy (`systemd`, `memory`,
    /// `cpu,cpuacct`, `unified`).
    pub cgroups: Vec<(String, String)>,
}

/// Parses `/proc/<pid>/status` and `/proc/<pid>/cgroup` (cgroup v2).
pub fn parse(pid: u32, status: &str, cgroup: &str) -> Result<Target, String> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
            .ok_or_else(|| format!("no {name}: line"))
    };
    let first = |name: &str| -> Result<u32, String> {
        field(name)?
            .split_whitespace()
            .nth(1) // effective id
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("bad {name}: line"))
    };
    let groups = field("Groups")?
        .split_whitespace()
        .map(|g| g.parse().map_err(|_| format!("bad group {g:?}")))
        .collect::<Result<Vec<u32>, String>>()?;
    let caps = super::capabilities::parse(status)?;
    let cgroups: Vec<(String, String)> = cgroup
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let (_id, list, path) = (it.next()?, it.next()?, it.next()?);
            let dir = match list {
                "" => "",
                "name=systemd" => "systemd",
                l if l.starts_with("name=") => return None,
                l => l,
            };
            Some((dir.to_string(), path.to_string()))
        })
        .collect();
    if cgroups.is_empty() {
        return Err("no cgroup".into());
    }
    Ok(Target {
        pid,
        uid: first("Uid")?,
        gid: first("Gid")?,
        groups,
        no_new_privs: field("NoNewPrivs").is_ok_and(|v| v == "1"),
        caps,
        cgroups,
    })
}

fn read(p: PathBuf) -> Result<String, Error> {
    fs::read_to_string(&p).map_err(|e| Error::Read(p, e))
}

/// The target of process `pid` (a container unit's main process) as `/proc` shows it: the
/// container's first process, which is `pid`'s child when `pid` is `podunit pid-init`'s outer
/// process (see [`crate::pidinit`]).
pub fn inspect(pid: u32) -> Result<Target, Error> {
    if pid == 0 {
        return Err(Error::NotRunning);
    }
    let pid = container_process(pid);
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let status = read(dir.join("status"))?;
    let cgroup = read(dir.join("cgroup"))?;
    parse(pid, &status, &cgroup).map_err(|m| Error::Parse(dir, m))
}

/// `pid` itself, or, when it starts its children in another PID namespace than its own (pid-init),
/// its child there.
fn container_process(pid: u32) -> u32 {
    let ns = |name: &str| ns_inode(Path::new(&format!("/proc/{pid}/ns/{name}")));
    let own = ns("pid");
    if own.is_none() || own == ns("pid_for_children") {
        return pid;
    }
    let Ok(dir) = fs::read_dir("/proc") else {
        return pid;
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|p| {
            fs::read_to_string(format!("/proc/{p}/stat"))
                .is_ok_and(|stat| parent_of(&stat) == Some(pid))
        })
        .unwrap_or(pid)
}

/// The parent PID in a `/proc/PID/stat` line (after the command name, which may hold anything).
fn parent_of(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The environment of a service's processes from its `Environment` and `EnvironmentFiles`
/// properties, in systemd's order: `PATH` default, assignments, then the files (read by `read`,
/// missing ones skipped when marked so). Later values win; the order of first appearance stays.
pub fn environment(
    assignments: &[String],
    files: &[(String, bool)],
    read: &dyn Fn(&str) -> std::io::Result<String>,
) -> Result<Vec<(String, String)>, Error> {
    let mut env: Vec<(String, String)> = vec![("PATH".into(), DEFAULT_PATH.into())];
    let mut set = |k: String, v: String| match env.iter_mut().find(|(n, _)| *n == k) {
        Some(e) => e.1 = v,
        None => env.push((k, v)),
    };
    for a in assignments {
        if let Some((k, v)) = a.split_once('=') {
            set(k.to_string(), v.to_string());
        }
    }
    for (path, optional) in files {
        let text = match read(path) {
            Ok(t) => t,
            Err(_) if *optional => continue,
            Err(e) => return Err(Error::Env(path.clone(), e.to_string())),
        };
        let pairs = crate::escape::parse::env_file(&text)
            .map_err(|e| Error::Env(path.clone(), e.to_string()))?;
        for (k, v) in pairs {
            if crate::escape::is_env_name(&k) {
                set(k, v);
            }
        }
    }
    Ok(env)
}

fn ns_inode(p: &Path) -> Option<u64> {
    fs::metadata(p).ok().map(|m| m.ino())
}

/// Moves this process into `t`: cgroup, namespaces, root, working directory, credentials.
/// Returns whether it joined another PID namespace, which only the children it starts are in.
pub fn enter(t: &Target) -> Result<bool, Error> {
    use nix::sched::{CloneFlags, setns};
    let proc = PathBuf::from(format!("/proc/{}", t.pid));
    let open = |p: PathBuf| fs::File::open(&p).map_err(|e| Error::Read(p, e));
    // Everything is opened before any namespace is joined: /proc may look different afterwards.
    let mut joins = Vec::new();
    for (name, flag) in [
        ("user", CloneFlags::CLONE_NEWUSER),
        ("cgroup", CloneFlags::CLONE_NEWCGROUP),
        ("ipc", CloneFlags::CLONE_NEWIPC),
        ("uts", CloneFlags::CLONE_NEWUTS),
        ("net", CloneFlags::CLONE_NEWNET),
        ("pid", CloneFlags::CLONE_NEWPID),
        ("mnt", CloneFlags::CLONE_NEWNS),
    ] {
        let theirs = proc.join("ns").join(name);
        let ours = PathBuf::from("/proc/self/ns").join(name);
        if ns_inode(&theirs).is_some() && ns_inode(&theirs) != ns_inode(&ours) {
            joins.push((name, flag, open(theirs)?));
        }
    }
    let root = open(proc.join("root"))?;
    let cwd = open(proc.join("cwd")).ok();
    // Joining the cgroups first: the command is counted and killed with the container.
    let v2_dir = |d: &str| -> String {
        // A hybrid host mounts the unified hierarchy at /sys/fs/cgroup/unified.
        if d.is_empty() && Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists() {
            "/unified".into()
        } else if d.is_empty() {
            String::new()
        } else {
            format!("/{d}")
        }
    };
    for (dir, path) in &t.cgroups {
        let procs = PathBuf::from(format!("/sys/fs/cgroup{}{path}/cgroup.procs", v2_dir(dir)));
        // The unified hierarchy (or systemd's, on v1) is the one that makes the command part
        // of the unit; a v1 controller hierarchy may be read-only (in a container) and only
        // adds accounting, so it is joined where it can be.
        let required = dir.is_empty() || dir == "systemd";
        match fs::write(&procs, "0") {
            Err(e) if required && procs.exists() => return Err(Error::Read(procs, e)),
            _ => {}
        }
    }
    let mut new_pid_ns = false;
    for (name, flag, f) in &joins {
        setns(f, *flag).map_err(|e| Error::Sys(name, e))?;
        new_pid_ns |= *name == "pid";
    }
    nix::unistd::fchdir(&root).map_err(|e| Error::Sys("fchdir to the container's root", e))?;
    nix::unistd::chroot(".").map_err(|e| Error::Sys("chroot", e))?;
    match &cwd {
        Some(c) => nix::unistd::fchdir(c),
        None => nix::unistd::chdir("/"),
    }
    .map_err(|e| Error::Sys("chdir to the working directory", e))?;
    // Bounding and inheritable sets while this process may still change them; the rest after
    // the change of user, which clears the permitted set of a non-root user.
    t.caps.prepare(t.uid == 0).map_err(Error::Capabilities)?;
    let gids: Vec<nix::unistd::Gid> = t
        .groups
        .iter()
        .map(|g| nix::unistd::Gid::from_raw(*g))
        .collect();
    nix::unistd::setgroups(&gids).map_err(|e| Error::Sys("setgroups", e))?;
    nix::unistd::setgid(nix::unistd::Gid::from_raw(t.gid)).map_err(|e| Error::Sys("setgid", e))?;
    nix::unistd::setuid(nix::unistd::Uid::from_raw(t.uid)).map_err(|e| Error::Sys("setuid", e))?;
    t.caps.finish().map_err(Error::Capabilities)?;
    if t.no_new_privs {
        nix::sys::prctl::set_no_new_privs().map_err(|e| Error::Sys("no_new_privs", e))?;
    }
    Ok(new_pid_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsleep\nUid:\t1000\t1001\t1001\t1001\nGid:\t2000\t2001\t2001\t2001\n\
        Groups:\t5 6 \nNoNewPrivs:\t1\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
        CapEff:\t0000000000000000\nCapBnd:\t00000000a80425fb\nCapAmb:\t0000000000000000\n";

    #[test]
    fn reads_the_effective_ids_groups_and_cgroup() {
        let t = parse(7, STATUS, "0::/podunit.slice/x.service\n").unwrap();
        assert_eq!((t.uid, t.gid, t.groups.clone()), (1001, 2001, vec![5, 6]));
        assert!(t.no_new_privs);
        assert_eq!((t.caps.bounding, t.caps.effective), (0xa80425fb, 0));
        assert_eq!(
            t.cgroups,
            [("".to_string(), "/podunit.slice/x.service".to_string())]
        );
        let v1 = parse(7, STATUS, "3:cpu,cpuacct:/a\n1:name=systemd:/b\n0::/b\n").unwrap();
        assert_eq!(
            v1.cgroups,
            [("cpu,cpuacct", "/a"), ("systemd", "/b"), ("", "/b")]
                .map(|(d, p)| (d.to_string(), p.to_string()))
        );
        assert!(parse(7, STATUS, "").is_err());
    }

    #[test]
    fn the_parent_comes_after_any_command_name() {
        assert_eq!(parent_of("42 (sleep) S 7 42 42 0"), Some(7));
        assert_eq!(parent_of("42 (a) b) S 9 42"), Some(9));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn environment_in_systemd_order() {
        let files = [
            ("/run/a.env".to_string(), false),
            ("/run/missing.env".to_string(), true),
        ];
        let read = |p: &str| match p {
            "/run/a.env" => Ok("B=\"from file\"\nC=3\n".to_string()),
            _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        };
        let env = environment(&["A=1".into(), "B=2".into()], &files, &read).unwrap();
        assert_eq!(
            env,
            [
                ("PATH", DEFAULT_PATH),
                ("A", "1"),
                ("B", "from file"),
                ("C", "3")
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        let strict = [("/run/missing.env".to_string(), false)];
        assert!(environment(&[], &strict, &read).is_err());
    }
}
