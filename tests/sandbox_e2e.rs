//! Hostile input and secrets on real systemd: what a sandboxed container can do, seen
//! from inside the process, and where a Secret's value can be found on the node (nowhere but the
//! process and root-only files).
//!
//! Needs root and systemd-nspawn; fails (never skips) without them. Run: `make test-e2e`.

mod support;

use support::nspawn::Machine;
use support::pods::{Probe, SOON, ctr_unit, pod_unit, start_pods, wait_state};

const NS: &str = "default";

/// Perl, as the host's own tools have it: two system calls by number (x86_64), each line
/// "NAME ok" or "NAME errno N": mount(NULL, "/nonexistent-podunit", NULL, 0, NULL), which the
/// kernel answers ENOENT (it looks the target up before it checks privileges), and getppid().
const SYSCALLS: &str = "for (['mount',165,0,'/nonexistent-podunit',0,0,0],['getppid',110]) { my ($n,$nr,@a)=@$_; $!=0; my $r=syscall($nr,@a); print $n, ($r < 0 ? ' errno '.($!+0) : ' ok'), qq(\\n) }";

#[test]
fn dropping_all_capabilities_leaves_none_and_restricted_pods_are_sandboxed() {
    let m = Machine::boot("sandbox");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: locked
spec:
  securityContext:
    runAsUser: 4242
    runAsGroup: 4242
    runAsNonRoot: true
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: nocaps
    image: host
    command: ["/usr/local/bin/probe"]
    env: [{name: PROBE, value: sb-nocaps}]
    securityContext:
      runAsUser: 0
      runAsNonRoot: false
      capabilities: {drop: ["ALL"]}
  - name: restricted
    image: host
    command: ["/bin/sh", "-c"]
    args:
    - |
      if touch /etc/podunit-written 2>/dev/null; then echo writable; else echo read-only; fi > /srv/probe/sb-rootfs
      if unshare -U true 2>/dev/null; then echo allowed; else echo denied; fi > /srv/probe/sb-unshare
      perl -e "$SYSCALLS" > /srv/probe/sb-syscalls
      exec /usr/local/bin/probe
    env: [{name: PROBE, value: sb-restricted}, {name: SYSCALLS, value: "SYSCALLS_SCRIPT"}]
    # The root filesystem is read-only; the probe's results go to a writable volume.
    volumeMounts: [{name: results, mountPath: /srv/probe}]
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: ["ALL"]}
  # The same system calls without a filter: what the kernel answers them otherwise.
  - name: unconfined
    image: host
    command: ["/bin/sh", "-c", 'perl -e "$SYSCALLS" > /srv/probe/sb-syscalls-unconfined; exec sleep infinity']
    env: [{name: SYSCALLS, value: "SYSCALLS_SCRIPT"}]
    volumeMounts: [{name: results, mountPath: /srv/probe}]
    securityContext:
      seccompProfile: {type: Unconfined}
  volumes:
  - name: results
    hostPath: {path: /srv/probe, type: Directory}
"#
    .replace("SYSCALLS_SCRIPT", SYSCALLS);
    m.sh_ok("mkdir -p /srv/probe && chmod 1777 /srv/probe");
    m.write("/etc/pods.d/locked.yaml", manifest.as_bytes());
    start_pods(&m);
    let nocaps = Probe::new(&m, "sb-nocaps");
    let restricted = Probe::new(&m, "sb-restricted");
    nocaps.wait_starts(1);
    restricted.wait_starts(1);

    // Root, but with an empty bounding set: no capability at all.
    assert_eq!(nocaps.status("Uid"), "0\t0\t0\t0");
    assert_eq!(nocaps.status("CapBnd"), "0000000000000000");
    assert_eq!(nocaps.status("CapEff"), "0000000000000000");
    assert_eq!(nocaps.status("CapPrm"), "0000000000000000");

    assert_eq!(restricted.status("Uid"), "4242\t4242\t4242\t4242");
    // The pod's runAsGroup, for a container that sets none.
    assert_eq!(restricted.status("Gid"), "4242\t4242\t4242\t4242");
    assert_eq!(restricted.status("CapBnd"), "0000000000000000");
    assert_eq!(restricted.status("NoNewPrivs"), "1");
    // 2 = a seccomp filter is installed; what it filters is below.
    assert_eq!(restricted.status("Seccomp"), "2");
    // RuntimeDefault (the runtimes' default profile) refuses with EPERM what it denies, here
    // mount (in its deny list, and in systemd's @mount), and lets the rest through (getppid).
    // The container without a filter gets the kernel's own answer, ENOENT, so EPERM is the
    // filter's. (The test machine's own filter, systemd-nspawn's, already refuses ustat and
    // keyctl to every process in it: those cannot show anything here.)
    let syscalls = |f: &str| {
        m.wait_for(&format!("{f} written"), SOON, || {
            m.read_string(&format!("/srv/probe/{f}"))
                .filter(|t| t.contains("getppid "))
        })
    };
    assert_eq!(
        syscalls("sb-syscalls"),
        "mount errno 1\ngetppid ok\n",
        "RuntimeDefault"
    );
    assert_eq!(
        syscalls("sb-syscalls-unconfined"),
        "mount errno 2\ngetppid ok\n",
        "Unconfined"
    );
    assert_eq!(
        m.read_string("/srv/probe/sb-rootfs").as_deref(),
        Some("read-only\n")
    );
    assert_eq!(
        m.read_string("/srv/probe/sb-unshare").as_deref(),
        Some("denied\n")
    );
    assert!(m.read("/etc/podunit-written").is_none());
    assert_eq!(
        m.prop(&ctr_unit(NS, "locked", "restricted"), "ActiveState"),
        "active"
    );
}

#[test]
fn a_secret_value_is_nowhere_but_in_the_process_and_root_only_files() {
    let m = Machine::boot("secrets");
    // Distinctive values, none of which occur anywhere on a fresh machine.
    let env_secret = "s3cr3t-env-9f2c1d";
    let file_secret = "s3cr3t-file-7a41be";
    let manifest = format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: creds}}
stringData:
  password: {env_secret}
  key.pem: {file_secret}
---
apiVersion: v1
kind: Pod
metadata:
  name: vault
spec:
  securityContext: {{runAsUser: 1234, runAsGroup: 1234}}
  containers:
  - name: app
    image: host
    command: ["/usr/local/bin/probe"]
    env:
    - {{name: PROBE, value: sec-app}}
    - name: PASSWORD
      valueFrom: {{secretKeyRef: {{name: creds, key: password}}}}
    volumeMounts: [{{name: keys, mountPath: /etc/keys}}]
  volumes:
  - name: keys
    secret: {{secretName: creds}}
"#
    );
    m.sh_ok("mkdir -p /srv/probe && chmod 1777 /srv/probe");
    // The manifest holds the secret: root-only, as an admin should keep it.
    m.write("/etc/pods.d/vault.yaml", manifest.as_bytes());
    m.sh_ok("chmod 0600 /etc/pods.d/vault.yaml");
    start_pods(&m);
    let p = Probe::new(&m, "sec-app");
    p.wait_starts(1);
    assert_eq!(p.env("PASSWORD").as_deref(), Some(env_secret.as_bytes()));

    // The secret volume: on tmpfs, owned by the container's user, 0400 by default.
    let st = m.sh_ok(&format!(
        "stat -L -c '%a %u %g' /run/podunit/pods/*/volumes/keys/key.pem; \
         findmnt -n -o FSTYPE --target /run/podunit; stat -c '%a' /run/podunit/pods/*; \
         cat /proc/$(systemctl show -P MainPID {})/root/etc/keys/key.pem",
        ctr_unit(NS, "vault", "app")
    ));
    let lines: Vec<&str> = st.lines().collect();
    assert_eq!(lines[0], "400 1234 1234", "{st}");
    assert_eq!(lines[1], "tmpfs", "{st}");
    assert_eq!(lines[2], "700", "{st}");
    assert_eq!(lines[3], file_secret, "{st}");

    let all_units =
        "$(systemctl list-units --all --plain --no-legend 'podunit*' | awk '{print $1}')";
    for (place, cmd) in [
        ("unit files", "cat /run/systemd/generator/*.service /run/systemd/generator/*.slice /run/systemd/generator/podunit/*".to_string()),
        ("systemctl show", format!("systemctl show {all_units}")),
        ("systemctl status", format!("systemctl status --no-pager -l {all_units}")),
        ("the journal", "journalctl -b --no-pager -o export".to_string()),
        ("the process list", "ps -eo args; cat /proc/[0-9]*/cmdline | tr '\\0' ' '".to_string()),
    ] {
        let out = m.sh(&format!("{{ {cmd}; }} 2>&1"));
        let text = String::from_utf8_lossy(&out.stdout);
        for s in [env_secret, file_secret] {
            assert!(!text.contains(s), "the secret is in {place}");
        }
    }
    // Files holding it anywhere under /run, /var, /etc and /tmp: only root-only ones (and the
    // admin's manifest) may. (/srv/probe is the test's own record of the process's environment.)
    let holders = m.sh_ok(&format!(
        "grep -rlsF -e {env_secret} -e {file_secret} /run /var /etc /tmp 2>/dev/null | \
         while read -r f; do stat -L -c '%a %U %n' \"$f\"; done"
    ));
    for line in holders.lines() {
        let mode = u32::from_str_radix(line.split(' ').next().unwrap(), 8).unwrap();
        let owner_only = mode & 0o077 == 0;
        let in_volume = line.contains("/volumes/keys/");
        assert!(owner_only, "readable by others: {line}");
        assert!(line.contains(" root ") || in_volume, "not root's: {line}");
    }

    // When the pod goes, so do its runtime files.
    m.sh_ok("rm /etc/pods.d/vault.yaml");
    m.daemon_reload();
    wait_state(&m, &pod_unit(NS, "vault"), &["inactive"]);
    let left = m.sh(&format!(
        "grep -rlsF -e {env_secret} -e {file_secret} /run /var /etc /tmp"
    ));
    assert!(
        !left.status.success(),
        "secret left behind: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// The processes a container sees: its own only, in a PID namespace of its own where
/// its command is PID 1, whatever its user and group (procfs's `hidepid` let group 0 see every
/// host process); its pod's with `shareProcessNamespace`; the host's with `hostPID`. And what the
/// namespace must not change: exit codes, signals, `podunit exec`.
#[test]
fn a_container_sees_only_its_own_processes_or_its_pods() {
    let m = Machine::boot("pidns");
    // Lists the command names /proc shows, sorted, and the shell's own PID.
    let list = |file: &str| {
        format!(
            "for p in /proc/[0-9]*; do cat $p/comm; done > /srv/probe/{file}.tmp; sort -u /srv/probe/{file}.tmp > /srv/probe/{file}; echo $$$$ > /srv/probe/{file}-self"
        )
    };
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: own
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: user
    image: host
    securityContext: {{runAsUser: 1000}}
    command: [/bin/sh, -c, "{user}; exec sleep infinity"]
  - name: root
    image: host
    securityContext:
      seccompProfile: {{type: RuntimeDefault}}
      capabilities: {{add: [SYS_ADMIN]}}
    command: [/bin/sh, -c, "{root}; if mount -t tmpfs x /mnt 2>/dev/null; then echo mounted; else echo refused; fi > /srv/probe/pid-mount; exec sleep infinity"]
  - name: stop
    image: host
    command: [/bin/sh, -c, "trap 'echo usr1 > /srv/probe/pid-stop; exit 7' USR1; while :; do sleep 1; done"]
    lifecycle: {{stopSignal: SIGUSR1}}
---
apiVersion: v1
kind: Pod
metadata:
  name: shared
spec:
  shareProcessNamespace: true
  containers:
  - name: a
    image: host
    command: [tail, -f, /dev/null]
  - name: b
    image: host
    securityContext: {{runAsUser: 1000}}
    command: [/bin/sh, -c, "until grep -qsx tail /proc/[0-9]*/comm; do sleep 0.2; done; {shared}; exec sleep infinity"]
---
apiVersion: v1
kind: Pod
metadata:
  name: host
spec:
  hostPID: true
  containers:
  - name: main
    image: host
    securityContext: {{runAsUser: 1000}}
    command: [/bin/sh, -c, "{host}; exec sleep infinity"]
---
apiVersion: v1
kind: Pod
metadata:
  name: done
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: host
    command: [/bin/sh, -c, "exit 3"]
"#,
        user = list("pid-user"),
        root = list("pid-root"),
        shared = list("pid-shared"),
        host = list("pid-host"),
    );
    m.sh_ok("mkdir -p /srv/probe && chmod 1777 /srv/probe");
    m.write("/etc/pods.d/pids.yaml", manifest.as_bytes());
    start_pods(&m);
    let ran = |file: &str| {
        m.wait_for(file, support::pods::SOON, || {
            m.read_string(&format!("/srv/probe/{file}-self"))?;
            m.read_string(&format!("/srv/probe/{file}"))
        })
    };
    // Only itself, as PID 1: uid 1000 in group 0, and root.
    for who in ["pid-user", "pid-root"] {
        assert_eq!(ran(who), "sh\n", "{who}");
        assert_eq!(
            m.read_string(&format!("/srv/probe/{who}-self")).unwrap(),
            "1\n"
        );
    }
    // Its pod's: the pause process as PID 1, its sibling, itself.
    assert_eq!(ran("pid-shared"), "pause\nsh\ntail\n");
    assert_ne!(m.read_string("/srv/probe/pid-shared-self").unwrap(), "1\n");
    // Stopping the pod ends its PID namespace: no pause process, nothing bound.
    m.sh_ok(&format!("systemctl stop {}", pod_unit(NS, "shared")));
    assert_eq!(
        m.sh_ok("grep -lx pause /proc/[0-9]*/comm; ls -A /run/podunit-pidns; true"),
        ""
    );
    // The host's.
    let host = ran("pid-host");
    assert!(host.lines().any(|c| c == "systemd"), "{host}");
    assert_ne!(m.read_string("/srv/probe/pid-host-self").unwrap(), "1\n");
    // RuntimeDefault still refuses mounts (CAP_SYS_ADMIN or not), though the container's /proc
    // was mounted for it.
    assert_eq!(
        m.wait_for("pid-mount", support::pods::SOON, || m
            .read_string("/srv/probe/pid-mount")),
        "refused\n"
    );

    // `podunit exec` enters the container's PID namespace (its parent is outside: 0), as its user.
    assert_eq!(
        m.sh_ok("podunit exec own -c user -- sh -c 'cat /proc/1/comm; id -u; read -r a b c ppid rest < /proc/self/stat; echo $ppid'"),
        "sleep\n1000\n0\n"
    );

    // Exit codes as they were.
    wait_state(&m, &ctr_unit(NS, "done", "main"), &["failed"]);
    assert_eq!(m.prop(&ctr_unit(NS, "done", "main"), "ExecMainStatus"), "3");
    // The stop signal reaches the command, which handles it.
    let stop = ctr_unit(NS, "own", "stop");
    wait_state(&m, &stop, &["active"]);
    m.sh_ok(&format!("systemctl stop {stop}"));
    assert_eq!(
        m.read_string("/srv/probe/pid-stop").as_deref(),
        Some("usr1\n")
    );
    assert_eq!(m.prop(&stop, "ExecMainStatus"), "7");
    // SIGTERM to a PID 1 without a handler does nothing, as in any container: SIGKILL after the
    // grace period.
    let user = ctr_unit(NS, "own", "user");
    m.sh_ok(&format!("systemctl stop {user}"));
    assert_eq!(
        (
            m.prop(&user, "ExecMainCode"),
            m.prop(&user, "ExecMainStatus"),
            m.prop(&user, "Result")
        ),
        ("2".into(), "9".into(), "timeout".into()),
        "killed (CLD_KILLED) by SIGKILL after the grace period"
    );
}
