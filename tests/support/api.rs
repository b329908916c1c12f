//! The API server double (tests/fake-apiserver) inside a machine of the harness, shared by the
//! cluster-mode suite and its benchmark.

use super::nspawn::{Machine, binaries};
use super::pods::SOON;
use podunit::kube::client::Client;
use podunit::kube::kubeconfig::Credentials;

/// Where the double keeps its CA, tokens, kubeconfigs and state inside the machine.
pub const API_DIR: &str = "/var/lib/fake-api";

/// Builds the double (same profile as the running test) and installs it in the machine as
/// /usr/local/bin/fake-apiserver.
pub fn install(m: &Machine) {
    let out = binaries().podunit.parent().unwrap().to_path_buf();
    let mut cmd = std::process::Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--quiet", "-p", "fake-apiserver"]);
    if out.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    assert!(cmd.status().unwrap().success(), "building fake-apiserver");
    let bin = std::fs::read(out.join("fake-apiserver")).unwrap();
    m.write("/usr/local/bin/fake-apiserver", &bin);
    m.sh_ok("chmod 0755 /usr/local/bin/fake-apiserver");
}

/// Starts (or restarts) the double as a transient unit on port 6443 for node `node`, with
/// `args` added to its command line, and waits until it answers.
pub fn start(m: &Machine, node: &str, args: &str) {
    // Each start is a unit of its own name: after a kill, systemd can keep the old unit loaded
    // for minutes (on cgroup v1 hosts it was seen waiting out its stop timeouts for a cgroup
    // that never reported empty), and a second unit of that name is refused meanwhile.
    let run = format!(
        "systemd-run --unit=fake-apiserver-$(date +%s%N) --collect /usr/local/bin/fake-apiserver \
         --dir {API_DIR} --port 6443 --node {node} {args}"
    );
    m.wait_for("systemd to start the API server", SOON, || {
        m.sh(&run).status.success().then_some(())
    });
    m.wait_for("the API server to answer", SOON, || {
        (m.read(&format!("{API_DIR}/url")).is_some()
            && m.exec(&["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/6443"])
                .status
                .success())
        .then_some(())
    });
}

/// Kills the double (its main process: it is a single process) wherever it was started.
pub fn kill(m: &Machine) {
    m.sh_ok("systemctl kill -s KILL --kill-whom=main 'fake-apiserver-*.service'");
}

/// The host pid of a process whose network namespace is `netns` (`net:[<inode>]`).
fn host_pid_in(netns: &str) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()? {
        let e = e.ok()?;
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/ns/net"))
            .is_ok_and(|l| l.to_string_lossy() == netns)
        {
            return Some(pid);
        }
    }
    None
}

/// Moves this thread into the machine's network namespace, where the double listens on
/// loopback (found by its identity, so machines booted by tests running in parallel are never
/// confused).
pub fn join_machine_network(m: &Machine) {
    let netns = m.sh_ok("readlink /proc/self/ns/net").trim().to_string();
    let pid = host_pid_in(&netns).expect("a process in the machine's network namespace");
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net")).unwrap();
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
}

/// A client with the double's admin token (call from a thread that joined the machine's network).
pub fn admin(m: &Machine) -> Client {
    let ca_pem = m.read(&format!("{API_DIR}/ca.crt")).expect("ca.crt");
    let token = m
        .read_string(&format!("{API_DIR}/admin.token"))
        .expect("admin.token");
    Client::new(Credentials {
        server: "https://127.0.0.1:6443".into(),
        ca_pem,
        client_cert: None,
        token: Some(token.trim().to_string()),
        token_file: None,
    })
    .unwrap()
}
