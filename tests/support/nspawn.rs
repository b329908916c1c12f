//! A throwaway systemd machine: a copy of the cached Debian rootfs booted with `systemd-nspawn --boot`,
//! with the freshly built podunit installed, driven with `nsenter -t <its systemd> -a ...`.
//!
//! Every test boots its own machine, so tests never see each other's pods and can run in parallel.
//! The machine is torn down on Drop (also when the test panics). Nothing here skips: a host that
//! cannot boot a machine (not root, no systemd-nspawn, no rootfs) fails the test with the reason.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Default place of the cached rootfs; `PODUNIT_TEST_ROOTFS` overrides it.
pub const DEFAULT_ROOTFS: &str = "/var/cache/podunit-test/rootfs-bookworm";
/// Where machines' copies of the rootfs go; `PODUNIT_TEST_TMPDIR` overrides it. Not /tmp: that may
/// be a small tmpfs, and each copy is a few hundred MB.
const DEFAULT_TMPDIR: &str = "/var/tmp";
/// Inside the machine: where the probe writes, world-writable so that any runAsUser can record.
pub const PROBE_DIR: &str = "/srv/probe";
/// Inside the machine: where the host's cgroup v1 controller directories are bound (see below).
const CGROUP_STAGING: &str = "/var/lib/podunit-test/cgroup";
/// Inside the machine: PID 1 on cgroup v1 hosts, see `CgroupFixup`.
const INIT: &str = "/usr/local/sbin/podunit-test-init";
/// cgroup v1 controllers a pod's limits need; see `CgroupFixup`.
const V1_CONTROLLERS: &[&str] = &["memory", "cpu", "cpuacct", "pids", "devices"];

const BOOT_TIMEOUT: Duration = Duration::from_secs(120);
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The cached rootfs, built by tests/machine/make-rootfs.sh when missing.
pub fn rootfs() -> PathBuf {
    static ROOTFS: OnceLock<PathBuf> = OnceLock::new();
    ROOTFS
        .get_or_init(|| {
            let path = std::env::var_os("PODUNIT_TEST_ROOTFS")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOTFS));
            let script = repo().join("tests/machine/make-rootfs.sh");
            let st = Command::new(&script)
                .env("PODUNIT_TEST_ROOTFS", &path)
                .status()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
            assert!(
                st.success(),
                "{} failed ({st}): the e2e suite needs a Debian rootfs at {}",
                script.display(),
                path.display()
            );
            path
        })
        .clone()
}

fn tmpdir() -> PathBuf {
    std::env::var_os("PODUNIT_TEST_TMPDIR")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_TMPDIR))
}

/// Removes what earlier test runs that died without unwinding (Ctrl-C, SIGKILL) left behind:
/// their machines' copies and cgroups, found by the dead test process's PID in their names.
/// Machines of live runs (other test binaries running now) are left alone.
fn sweep_stale() {
    let alive = |pid: &str| Path::new(&format!("/proc/{pid}")).exists();
    let dead_pid = |name: &str| -> Option<String> {
        let rest = name.strip_prefix("podunit-e2e-pu-")?;
        let pid = rest.split('-').next()?;
        (pid.parse::<u32>().is_ok() && !alive(pid)).then(|| pid.to_string())
    };
    if let Ok(rd) = fs::read_dir(tmpdir()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            // A machine whose nspawn still runs (its test was SIGKILLed) is left for its owner.
            if dead_pid(&name).is_some() && !in_use(&e.path()) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    // cgroup directories: podunit-e2e-pu-<pid>-... a few levels below each v1 hierarchy.
    fn walk(dir: &Path, depth: usize, found: &mut Vec<PathBuf>, dead: &dyn Fn(&str) -> bool) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                continue;
            }
            let name = e.file_name().to_string_lossy().to_string();
            if dead(&name) {
                found.push(e.path());
            } else if depth > 0 && !name.starts_with("podunit-e2e-") {
                walk(&e.path(), depth - 1, found, dead);
            }
        }
    }
    let mut found = Vec::new();
    for ctrl in V1_CONTROLLERS {
        walk(
            &Path::new("/sys/fs/cgroup").join(ctrl),
            3,
            &mut found,
            &|n| dead_pid(n).is_some(),
        );
    }
    for d in found {
        CgroupFixup {
            dirs: vec![(String::new(), d)],
        }
        .remove();
    }
}

/// Fails (never skips) when this host cannot boot machines.
fn preflight() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        sweep_stale();
        let status = fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
        let euid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .expect("Uid line");
        assert_eq!(
            euid, "0",
            "the real-systemd suite must run as root (it boots systemd-nspawn machines)"
        );
        for tool in ["systemd-nspawn", "nsenter", "cp"] {
            let ok = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(
                ok,
                "{tool} not found: install systemd-container (tests/setup.sh)"
            );
        }
    });
}

/// The binaries under test, from this very build.
pub struct Binaries {
    pub podunit: PathBuf,
    pub sync: PathBuf,
    pub generator: PathBuf,
}

pub fn binaries() -> &'static Binaries {
    static BINS: OnceLock<Binaries> = OnceLock::new();
    BINS.get_or_init(|| {
        let podunit = PathBuf::from(env!("CARGO_BIN_EXE_podunit"));
        let sync = PathBuf::from(env!("CARGO_BIN_EXE_podunit-sync"));
        // The generator is another package of the workspace, so cargo does not build it for this
        // test target: build it now, into the same target directory and profile, so it is never stale.
        let out = podunit.parent().expect("target dir").to_path_buf();
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(repo())
            .args(["build", "--quiet", "-p", "podunit-generator"]);
        if out.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo build -p podunit-generator");
        assert!(st.success(), "cargo build -p podunit-generator failed");
        let generator = out.join("podunit-generator");
        assert!(generator.exists(), "{} missing", generator.display());
        Binaries {
            podunit,
            sync,
            generator,
        }
    })
}

/// On a host whose controllers are on cgroup v1 (hybrid or legacy layout, e.g. some CI VMs),
/// systemd-nspawn mounts the memory/cpu/pids hierarchies read-only in the machine, so the machine's
/// systemd cannot apply MemoryMax=/CPUQuota=/TasksMax= and limits would silently not exist.
/// Workaround: start nspawn inside fresh child cgroups of its own, bind those (writable) into the
/// machine, and boot through a tiny init (`podunit-test-init`) that mounts them over the read-only
/// hierarchies and then execs systemd as PID 1. systemd decides at startup which controllers it can
/// use, so this must happen before it runs (a later `daemon-reexec` would also re-run generators and
/// hide what happens at boot). The machine's cgroup namespace is rooted at exactly these
/// directories, so the paths systemd sees stay consistent. On a cgroup v2 host nspawn delegates
/// properly, none of this happens and the machine boots with plain `--boot`.
struct CgroupFixup {
    /// (controller mount name, host directory created for this machine)
    dirs: Vec<(String, PathBuf)>,
}

impl CgroupFixup {
    fn new(name: &str) -> Option<CgroupFixup> {
        let fstype = Command::new("stat")
            .args(["-f", "-c", "%T", "/sys/fs/cgroup"])
            .output()
            .ok()?;
        if String::from_utf8_lossy(&fstype.stdout).trim() == "cgroup2fs" {
            return None;
        }
        let own = fs::read_to_string("/proc/self/cgroup").ok()?;
        let mut dirs = Vec::new();
        for ctrl in V1_CONTROLLERS {
            // "4:memory:/some/path" or "2:cpu,cpuacct:/path"
            let Some((list, path)) = own.lines().find_map(|l| {
                let mut it = l.splitn(3, ':');
                let _id = it.next()?;
                let list = it.next()?;
                let path = it.next()?;
                list.split(',').any(|c| c == *ctrl).then_some((list, path))
            }) else {
                continue;
            };
            let mount = format!("/sys/fs/cgroup/{list}");
            if !Path::new(&mount).is_dir() || dirs.iter().any(|(m, _)| *m == list) {
                continue;
            }
            let dir = PathBuf::from(format!("{mount}{path}")).join(format!("podunit-e2e-{name}"));
            fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("create cgroup {}: {e}", dir.display()));
            dirs.push((list.to_string(), dir));
        }
        Some(CgroupFixup { dirs })
    }

    fn nspawn_args(&self) -> Vec<String> {
        self.dirs
            .iter()
            .map(|(m, d)| format!("--bind={}:{CGROUP_STAGING}/{m}", d.display()))
            .collect()
    }

    fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|(_, d)| d.join("cgroup.procs"))
            .collect()
    }

    /// PID 1 of the machine: mounts the writable controllers, then becomes systemd.
    fn init_script(&self) -> String {
        let mut s = String::from(
            "#!/bin/sh\n# podunit e2e harness: writable cgroup v1 controllers, then systemd.\n",
        );
        for (m, _) in &self.dirs {
            s += &format!("mount --bind {CGROUP_STAGING}/{m} /sys/fs/cgroup/{m} || exit 1\n");
        }
        s += "exec /lib/systemd/systemd \"$@\"\n";
        s
    }

    /// Removes the machine's cgroups, deepest first (cgroup directories go only with rmdir).
    fn remove(&self) {
        fn rm(dir: &Path) {
            if let Ok(rd) = fs::read_dir(dir) {
                for e in rd.flatten() {
                    if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                        rm(&e.path());
                    }
                }
            }
            let _ = fs::remove_dir(dir);
        }
        for (_, d) in &self.dirs {
            rm(d);
        }
    }
}

/// A booted machine. Dropping it kills and removes it.
pub struct Machine {
    pub name: String,
    dir: PathBuf,
    root: PathBuf,
    nspawn: Option<Child>,
    leader: u32,
    cgroups: Option<CgroupFixup>,
    /// The network namespace the machine runs in (`--network-namespace-path`); None: a private
    /// one with loopback only (`--private-network`).
    netns: Option<PathBuf>,
}

impl Machine {
    /// Copies the rootfs, installs this build of podunit and boots. `name` is for humans (logs).
    pub fn boot(name: &str) -> Machine {
        Machine::boot_with(name, Some(binaries()), None)
    }

    /// As `boot`, but the machine runs in an existing network namespace (`netns`, e.g.
    /// /run/netns/<name>, made by the test) instead of a private one: its links, addresses and
    /// routes are that namespace's, also after a reboot or a power cut.
    pub fn boot_in_netns(name: &str, netns: impl AsRef<Path>) -> Machine {
        Machine::boot_with(name, Some(binaries()), Some(netns.as_ref().to_path_buf()))
    }

    /// Boots the plain rootfs without podunit (the package tests install their .deb themselves).
    pub fn boot_bare(name: &str) -> Machine {
        Machine::boot_with(name, None, None)
    }

    fn boot_with(name: &str, bins: Option<&Binaries>, netns: Option<PathBuf>) -> Machine {
        preflight();
        let rootfs = rootfs();
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        // Machine (host) names: at most 64 characters, letters, digits and '-'.
        let clean: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        let name = format!("pu-{}-{seq}-{clean}", std::process::id());
        let dir = tmpdir().join(format!("podunit-e2e-{name}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create machine dir");
        let root = dir.join("root");
        let st = Command::new("cp")
            .args(["-a", "--reflink=auto"])
            .arg(&rootfs)
            .arg(&root)
            .status()
            .expect("run cp");
        assert!(st.success(), "copying {} failed", rootfs.display());
        let mut m = Machine {
            name,
            dir,
            root,
            nspawn: None,
            leader: 0,
            cgroups: None,
            netns,
        };
        if let Some(bins) = bins {
            m.install(bins);
        }
        m.prepare();
        m.cgroups = CgroupFixup::new(&m.name);
        if let Some(cg) = &m.cgroups {
            let init = m.root.join(INIT.trim_start_matches('/'));
            fs::write(&init, cg.init_script()).unwrap();
            fs::set_permissions(&init, fs::Permissions::from_mode(0o755)).unwrap();
        }
        m.start();
        m
    }

    fn install(&self, bins: &Binaries) {
        let r = &self.root;
        let put = |src: &Path, dst: &str, mode: u32| {
            let to = r.join(dst.trim_start_matches('/'));
            fs::create_dir_all(to.parent().unwrap()).unwrap();
            fs::copy(src, &to)
                .unwrap_or_else(|e| panic!("install {} -> {}: {e}", src.display(), to.display()));
            fs::set_permissions(&to, fs::Permissions::from_mode(mode)).unwrap();
        };
        put(&bins.podunit, "/usr/bin/podunit", 0o755);
        put(&bins.sync, "/usr/bin/podunit-sync", 0o755);
        put(
            &bins.generator,
            "/usr/lib/systemd/system-generators/podunit-generator",
            0o755,
        );
        put(
            &repo().join("tests/machine/probe.sh"),
            "/usr/local/bin/probe",
            0o755,
        );

        // What the package ships: unit files, presets, tmpfiles.d.
        let mut units = Vec::new();
        let pkg = repo().join("packaging");
        for (sub, exts) in [
            (
                "systemd",
                &["service", "target", "slice", "socket", "timer", "path"][..],
            ),
            ("tmpfiles.d", &["conf"][..]),
        ] {
            let Ok(rd) = fs::read_dir(pkg.join(sub)) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                let Some(ext) = p.extension().and_then(|x| x.to_str()) else {
                    continue;
                };
                let file = p.file_name().unwrap().to_string_lossy().to_string();
                if sub == "systemd" && exts.contains(&ext) {
                    put(&p, &format!("/usr/lib/systemd/system/{file}"), 0o644);
                    if fs::read_to_string(&p)
                        .unwrap_or_default()
                        .contains("[Install]")
                    {
                        units.push(file);
                    }
                } else if sub == "systemd" && ext == "preset" {
                    put(&p, &format!("/usr/lib/systemd/system-preset/{file}"), 0o644);
                } else if sub == "tmpfiles.d" && exts.contains(&ext) {
                    put(&p, &format!("/usr/lib/tmpfiles.d/{file}"), 0o644);
                }
            }
        }
        let target = r.join("usr/lib/systemd/system/podunit.target");
        if !target.exists() {
            // Until packaging/ ships it: the minimal target every generated pod is wanted by.
            fs::write(
                &target,
                "[Unit]\nDescription=Kubernetes Pods (test stand-in)\n\n[Install]\nWantedBy=multi-user.target\n",
            )
            .unwrap();
            units.push("podunit.target".into());
        }
        if !units.is_empty() {
            let out = Command::new("systemctl")
                .arg(format!("--root={}", r.display()))
                .arg("enable")
                .args(&units)
                .output()
                .expect("run systemctl --root enable");
            assert!(
                out.status.success(),
                "systemctl --root enable {units:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for d in ["etc/pods.d", "var/lib/podunit/spool"] {
            fs::create_dir_all(r.join(d)).unwrap();
        }
    }

    /// What every machine needs, with or without podunit: the probe dir, the cgroup staging dirs.
    fn prepare(&self) {
        let r = &self.root;
        let probe = r.join(PROBE_DIR.trim_start_matches('/'));
        fs::create_dir_all(&probe).unwrap();
        fs::set_permissions(&probe, fs::Permissions::from_mode(0o1777)).unwrap();
        for m in V1_CONTROLLERS {
            fs::create_dir_all(r.join(CGROUP_STAGING.trim_start_matches('/')).join(m)).unwrap();
        }
    }

    /// Boots the rootfs (first boot, or again after a reboot) and waits until systemd is up.
    fn start(&mut self) {
        let console = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("console.log"))
            .expect("console log");
        let mut nspawn_args: Vec<String> = vec![
            "systemd-nspawn".into(),
            "--quiet".into(),
            "-D".into(),
            self.root.display().to_string(),
            "--register=no".into(),
            "--keep-unit".into(),
            format!("--machine={}", self.name),
            "--console=read-only".into(),
        ];
        // Loopback only, or the test's own namespace: pods in tests never reach (or collide on)
        // the host's network. Only with --private-network does nspawn keep CAP_NET_ADMIN and a
        // writable /proc/sys/net: in the test's namespace the machine needs them too (bridges,
        // routes, iptables, sysctls), so ask for them (`SYSTEMD_NSPAWN_API_VFS_WRITABLE=network`).
        match &self.netns {
            Some(ns) => nspawn_args.extend([
                format!("--network-namespace-path={}", ns.display()),
                "--capability=CAP_NET_ADMIN".into(),
            ]),
            None => nspawn_args.push("--private-network".into()),
        }
        let mut procs = Vec::new();
        if let Some(cg) = &self.cgroups {
            nspawn_args.extend(cg.nspawn_args());
            procs = cg.procs_files();
            // What --boot does, with our init in front of systemd (see CgroupFixup).
            nspawn_args.push("--kill-signal=SIGRTMIN+3".into());
            nspawn_args.push(INIT.into());
        } else {
            nspawn_args.push("--boot".into());
        }
        // A shell moves itself into the machine's cgroups, then becomes nspawn (no unsafe pre_exec).
        let mut sh = Command::new("/bin/sh");
        if self.netns.is_some() {
            sh.env("SYSTEMD_NSPAWN_API_VFS_WRITABLE", "network");
        }
        let child = sh
            .arg("-c")
            .arg(r#"while [ "$1" != -- ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@""#)
            .arg("sh")
            .args(&procs)
            .arg("--")
            .args(&nspawn_args)
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(console.try_clone().unwrap())
            .stderr(console)
            .spawn()
            .expect("spawn systemd-nspawn");
        let nspawn_pid = child.id();
        self.nspawn = Some(child);
        let deadline = Instant::now() + BOOT_TIMEOUT;
        self.leader = loop {
            if let Some(pid) = find_child(nspawn_pid, "systemd") {
                break pid;
            }
            if let Some(st) = self.nspawn.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "systemd-nspawn exited ({st}) before booting:\n{}",
                    self.console()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no systemd in the machine:\n{}",
                self.console()
            );
            sleep(Duration::from_millis(50));
        };
        // Right after PID 1 appears its bus socket may not exist yet: systemctl then prints
        // nothing (or "offline") and fails, so ask again until it answers.
        let state = loop {
            let out = self.exec(&[
                "timeout",
                &BOOT_TIMEOUT.as_secs().to_string(),
                "systemctl",
                "is-system-running",
                "--wait",
            ]);
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            // Early in boot it may also say "offline" (no manager reachable yet): ask again.
            if state == "running" || state == "degraded" || Instant::now() > deadline {
                break state;
            }
            sleep(Duration::from_millis(100));
        };
        assert!(
            state == "running" || state == "degraded",
            "machine did not finish booting: {state:?}\n{}",
            self.console()
        );
    }

    /// Reboots the machine (`systemctl reboot` inside; nspawn exits and is started again on the same
    /// root, as systemd-nspawn@.service would do).
    pub fn reboot(&mut self) {
        let _ = self.exec(&["systemctl", "reboot"]);
        self.wait_down();
        self.start();
    }

    /// Waits until systemd-nspawn has exited (the machine is down).
    fn wait_down(&mut self) {
        let mut child = self.nspawn.take().expect("running");
        let deadline = Instant::now() + BOOT_TIMEOUT;
        while child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "machine did not shut down:\n{}",
                self.console()
            );
            sleep(Duration::from_millis(100));
        }
    }

    /// Cuts the power: SIGKILL to the machine's PID 1, so nothing inside runs a stop command,
    /// then boots it again on the same root. What was on tmpfs (/run) is gone, /var is not.
    pub fn power_cut(&mut self) {
        self.power_cut_and(|_| {});
    }

    /// [`Self::power_cut`], with `while_down` run on the machine's root directory (on the host)
    /// before it boots again: what happens to a disk while its machine is off.
    pub fn power_cut_and(&mut self, while_down: impl FnOnce(&Path)) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.leader.to_string()])
            .status();
        self.wait_down();
        while_down(&self.root);
        self.start();
    }

    /// The host pid of the machine's PID 1 (its namespaces are /proc/<pid>/ns/*).
    pub fn leader(&self) -> u32 {
        self.leader
    }

    /// The machine's directory on the host (its root and logs; removed with it).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn console(&self) -> String {
        let log = fs::read_to_string(self.dir.join("console.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.arg("-t")
            .arg(self.leader.to_string())
            .arg("-a")
            .args(args)
            .env_clear()
            .env("PATH", PATH)
            .env("LANG", "C.UTF-8")
            .env("SYSTEMD_PAGER", "")
            .env("SYSTEMD_COLORS", "0")
            .stdin(Stdio::null());
        c
    }

    /// Runs a command inside the machine (all its namespaces, the host's root user).
    pub fn exec(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run nsenter")
    }

    /// Runs a /bin/sh script inside the machine.
    pub fn sh(&self, script: &str) -> Output {
        self.exec(&["/bin/sh", "-c", script])
    }

    /// Runs a script that must succeed; returns its stdout.
    pub fn sh_ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "in machine {}: `{script}` failed ({}):\n{}{}",
            self.name,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Writes a file inside the machine (creating parent directories), through the machine's own
    /// view of the filesystem so tmpfs paths like /run work too.
    pub fn write(&self, path: &str, contents: &[u8]) {
        let mut child = self
            .command(&[
                "/bin/sh",
                "-c",
                r#"mkdir -p "$(dirname "$1")" && cat > "$1.tmp.$$" && mv -f "$1.tmp.$$" "$1""#,
                "sh",
                path,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nsenter");
        child.stdin.take().unwrap().write_all(contents).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "write {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Reads a file inside the machine; None when it does not exist.
    pub fn read(&self, path: &str) -> Option<Vec<u8>> {
        let out = self.exec(&["/bin/sh", "-c", r#"[ -e "$1" ] && cat "$1""#, "sh", path]);
        out.status.success().then_some(out.stdout)
    }

    pub fn read_string(&self, path: &str) -> Option<String> {
        self.read(path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    pub fn systemctl(&self, args: &[&str]) -> Output {
        let mut a = vec!["systemctl"];
        a.extend_from_slice(args);
        self.exec(&a)
    }

    pub fn daemon_reload(&self) {
        self.sh_ok("systemctl daemon-reload");
    }

    /// One property of a unit (`systemctl show -p NAME --value`).
    pub fn prop(&self, unit: &str, prop: &str) -> String {
        let out = self.systemctl(&["show", "-p", prop, "--value", "--", unit]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Polls `f` until it yields a value; panics with `what` and the machine's state on timeout.
    /// Timeouts are generous limits for a slow shared CI host, never a measured quantity.
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f() {
                return v;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for: {what}\n--- machine state ---\n{}",
                    self.diagnostics()
                );
            }
            sleep(Duration::from_millis(200));
        }
    }

    /// What to print when something goes wrong: podunit's units and their recent journal.
    pub fn diagnostics(&self) -> String {
        let out = self.sh(
            "systemctl list-units --all --no-legend --plain 'podunit*' 2>&1; \
             echo '--- generated units ---'; ls /run/systemd/generator/ 2>&1; \
             echo '--- processes of podunit.slice ---'; \
             systemd-cgls --no-pager -l -u podunit.slice 2>&1 | head -n 40; \
             echo '--- journal ---'; journalctl -b --no-pager -n 80 -o short-monotonic 2>&1",
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        // SIGKILL to the machine's PID 1 ends its whole PID namespace at once.
        if self.leader != 0 {
            let _ = Command::new("kill")
                .args(["-KILL", &self.leader.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        if let Some(mut c) = self.nspawn.take() {
            let deadline = Instant::now() + Duration::from_secs(20);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(cg) = &self.cgroups {
            cg.remove();
        }
        if std::env::var_os("PODUNIT_TEST_KEEP").is_some() {
            eprintln!("PODUNIT_TEST_KEEP: left {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Whether a running process names `dir` on its command line (a machine's nspawn does).
fn in_use(dir: &Path) -> bool {
    let needle = dir.to_string_lossy().to_string();
    let Ok(rd) = fs::read_dir("/proc") else {
        return false;
    };
    rd.flatten().any(|e| {
        fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(&needle))
            .unwrap_or(false)
    })
}

/// A direct child of `parent` whose command name is `comm`.
fn find_child(parent: u32, comm: &str) -> Option<u32> {
    for e in fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ..."; comm may contain spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        let ppid = stat[close + 2..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) && name == comm {
            return Some(pid);
        }
    }
    None
}
