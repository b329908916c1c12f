//! The .deb on a booted Debian (the real-systemd harness), installed with dpkg. Run by
//! `make test-packaging` (needs the built .deb, root, nspawn).

mod pkg;
mod support;

use support::nspawn::Machine;
use support::pods::{SOON, ctr_unit, pod_unit};

const NS: &str = "default";
const POD: &str = "pkgtest";
const CTR: &str = "main";

const MANIFEST: &str = "apiVersion: v1
kind: Pod
metadata:
  name: pkgtest
  namespace: default
spec:
  containers:
    - name: main
      image: host
      command: [\"/bin/sh\", \"-c\", \"exec sleep infinity\"]
";

fn state(m: &Machine, unit: &str) -> String {
    m.prop(unit, "ActiveState")
}

fn wait_state(m: &Machine, unit: &str, want: &str) {
    m.wait_for(&format!("{unit} {want}"), SOON, || {
        (state(m, unit) == want).then_some(())
    });
}

/// Mode and owner of a path in the machine, like "700 root:root"; None when absent.
fn stat(m: &Machine, path: &str) -> Option<String> {
    let out = m.exec(&["stat", "-c", "%a %U:%G", path]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Loaded units of this pod (after removal there must be none).
fn pod_units(m: &Machine) -> String {
    m.sh_ok(&format!(
        "systemctl list-units --all --no-legend --plain 'podunit-{NS}_{POD}*' | awk '{{print $1}}'"
    ))
}

/// Boots a bare machine and installs the .deb with dpkg; checks what the install set up.
fn install(name: &str) -> Machine {
    let deb = std::fs::read(pkg::deb()).expect("read the .deb");
    let m = Machine::boot_bare(name);
    m.write("/root/podunit.deb", &deb);
    m.sh_ok("dpkg -i /root/podunit.deb");
    m
}

fn assert_installed(m: &Machine) {
    for unit in ["podunit.target", "podunit-sync.service"] {
        let enabled = m.systemctl(&["is-enabled", unit]);
        assert_eq!(
            String::from_utf8_lossy(&enabled.stdout).trim(),
            "enabled",
            "{unit}\n{}",
            m.diagnostics()
        );
    }
    wait_state(m, "podunit.target", "active");
    for (path, want) in [
        ("/var/lib/podunit", "700 root:root"),
        ("/var/lib/podunit/spool", "700 root:root"),
        ("/var/lib/podunit/pods", "700 root:root"),
        ("/run/podunit", "700 root:root"),
        ("/run/pods.d", "755 root:root"),
        ("/etc/pods.d", "755 root:root"),
        ("/etc/podunit/config.yaml", "644 root:root"),
        ("/usr/share/man/man1/podunit.1.gz", "644 root:root"),
    ] {
        assert_eq!(stat(m, path).as_deref(), Some(want), "{path}");
    }
}

/// The drop-in a first install writes.
const NETWORK_DROPIN: &str = "/etc/podunit/config.d/50-network.yaml";

/// The pod's IP as `podunit status -o wide` shows it (its last column).
fn pod_ip(m: &Machine) -> String {
    let out = m.sh_ok("podunit status -o wide");
    out.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(POD))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_else(|| panic!("{POD} in:\n{out}"))
        .to_string()
}

/// The user's workflow on an installed package: drop a manifest, reload, the pod runs; an upgrade
/// does not restart it. (Starting pods after a reload is podunit-sync's job.) A fresh install
/// gives pods addresses of their own from podunit's bridge network, with no CNI configuration
/// written by anyone (the machine has Debian's containernetworking-plugins, which the package
/// recommends).
#[test]
fn deb_manifest_runs_after_reload_and_survives_upgrade() {
    let m = install("pkg-workflow");
    assert_installed(&m);
    let dropin = m.read_string(NETWORK_DROPIN).unwrap_or_default();
    assert!(
        dropin.lines().any(|l| l == "network: cni"),
        "{NETWORK_DROPIN}: {dropin:?}"
    );
    assert_eq!(stat(&m, NETWORK_DROPIN).as_deref(), Some("644 root:root"));
    let ctr = ctr_unit(NS, POD, CTR);

    m.write("/etc/pods.d/pkgtest.yaml", MANIFEST.as_bytes());
    m.daemon_reload();
    wait_state(&m, &ctr, "active");
    let before = m.prop(&ctr, "InvocationID");
    let ip = pod_ip(&m);
    assert!(
        ip.starts_with("10.88."),
        "the pod's address {ip:?} is not from podunit's own network\n{}",
        m.diagnostics()
    );
    let leases = m.sh_ok("ls /var/lib/cni/networks/podunit/");
    assert!(leases.lines().any(|l| l == ip), "{ip} not leased: {leases}");
    let bridge = m.sh_ok("ip -4 -o addr show dev podunit0");
    assert!(bridge.contains("10.88.0.1/16"), "{bridge}");
    assert!(
        m.sh("ls /etc/cni/net.d/ 2>/dev/null").stdout.is_empty(),
        "podunit wrote into the CNI configuration directory"
    );

    // Upgrade (same version again): the pod's units did not change, so it is not restarted.
    m.sh_ok("dpkg -i /root/podunit.deb");
    wait_state(&m, "podunit-sync.service", "active");
    assert_eq!(state(&m, &ctr), "active");
    assert_eq!(
        m.prop(&ctr, "InvocationID"),
        before,
        "the upgrade restarted the pod"
    );
}

/// Installing with a manifest already in place starts its pod (podunit.target); `apt-get remove`
/// stops it and removes its units, keeping manifests and state; a reinstall brings it back;
/// purge removes podunit's state and configuration but never the manifests.
#[test]
fn deb_install_remove_reinstall_purge() {
    let deb = std::fs::read(pkg::deb()).expect("read the .deb");
    let m = Machine::boot_bare("pkg-lifecycle");
    m.write("/root/podunit.deb", &deb);
    m.write("/etc/pods.d/pkgtest.yaml", MANIFEST.as_bytes());
    m.sh_ok("dpkg -i /root/podunit.deb");
    assert_installed(&m);
    let pod = pod_unit(NS, POD);
    let ctr = ctr_unit(NS, POD, CTR);
    wait_state(&m, &pod, "active");
    wait_state(&m, &ctr, "active");

    // Remove: pods stopped, units gone, manifests and state kept.
    let pid = m.prop(&ctr, "MainPID");
    assert_ne!(pid, "0");
    m.sh_ok("apt-get remove -y podunit");
    let left = pod_units(&m);
    assert!(
        left.trim().is_empty(),
        "units left after remove:\n{left}\n{}",
        m.diagnostics()
    );
    assert!(
        !m.exec(&["test", "-d", &format!("/proc/{pid}")])
            .status
            .success(),
        "the pod's process {pid} survived the removal"
    );
    assert!(
        m.read("/etc/pods.d/pkgtest.yaml").is_some(),
        "remove deleted a manifest"
    );
    assert!(
        stat(&m, "/var/lib/podunit").is_some(),
        "remove (not purge) deleted state"
    );
    assert!(stat(&m, "/usr/lib/systemd/system-generators/podunit-generator").is_none());

    // Reinstall over the kept configuration is an upgrade of a configured host: the network
    // drop-in, which the administrator deleted meanwhile, is not written again.
    assert!(
        m.read(NETWORK_DROPIN).is_some(),
        "remove deleted the drop-in"
    );
    m.sh_ok(&format!("rm {NETWORK_DROPIN}"));
    m.sh_ok("dpkg -i /root/podunit.deb");
    assert_installed(&m);
    assert_eq!(
        stat(&m, NETWORK_DROPIN),
        None,
        "an upgrade wrote {NETWORK_DROPIN}"
    );
    wait_state(&m, &pod, "active");
    wait_state(&m, &ctr, "active");

    // Purge: state and configuration gone, manifests kept.
    m.sh_ok("apt-get purge -y podunit");
    let left = pod_units(&m);
    assert!(left.trim().is_empty(), "units left after purge:\n{left}");
    for gone in [
        "/var/lib/podunit",
        "/run/podunit",
        "/etc/podunit/config.yaml",
        "/etc/podunit",
    ] {
        assert_eq!(stat(&m, gone), None, "{gone} survived purge");
    }
    assert!(
        m.read("/etc/pods.d/pkgtest.yaml").is_some(),
        "purge deleted a manifest"
    );
    let status = m.sh_ok("dpkg-query -W -f='${db:Status-Abbrev}' podunit 2>/dev/null || true");
    assert!(
        status.trim().is_empty() || status.starts_with("un"),
        "dpkg status {status:?}"
    );
}
