//! What the CLI does when its output cannot go anywhere: a reader that closed its pipe ends the
//! command quietly (as `podunit status | head -1` would), and a host without systemd's bus gets
//! a message saying so. Run as processes. (`podunit status | head -1` on a real systemd is in
//! tests/sync_e2e.rs.)

use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn podunit() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_podunit"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

/// A pipe whose reading end is already closed: every write to it fails with EPIPE.
fn closed_pipe() -> OwnedFd {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    write
}

/// Runs with stdout (or stderr) on a closed pipe; the other stream is captured.
fn into_closed_pipe(mut cmd: Command, stream: &str) -> Output {
    match stream {
        "stdout" => cmd
            .stdout(Stdio::from(closed_pipe()))
            .stderr(Stdio::piped()),
        _ => cmd
            .stderr(Stdio::from(closed_pipe()))
            .stdout(Stdio::piped()),
    };
    cmd.stdin(Stdio::null()).output().unwrap()
}

#[track_caller]
fn ends_quietly(what: &str, out: &Output) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        (out.status.code(), out.status.signal()),
        (Some(141), None),
        "{what}: must end as a tool stopped by SIGPIPE (status 141), not by a panic or abort; \
         it printed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Only the stream that was not closed was captured: nothing about the pipe lands there.
    let other = String::from_utf8_lossy(if out.stdout.is_empty() {
        &out.stderr
    } else {
        &out.stdout
    });
    for word in ["panicked", "Broken pipe", "failed printing", "cannot write"] {
        assert!(!other.contains(word), "{what}: must end quietly:\n{other}");
    }
}

#[test]
fn a_closed_pipe_ends_output_quietly() {
    let hello = Path::new("examples/hello.yaml");
    let mut render = podunit();
    render.arg("render").arg(hello);
    ends_quietly("render | (closed)", &into_closed_pipe(render, "stdout"));

    let mut completions = podunit();
    completions.args(["completions", "bash"]);
    ends_quietly(
        "completions | (closed)",
        &into_closed_pipe(completions, "stdout"),
    );

    // check prints its problems on stdout and the summary on stderr: both closed in turn.
    let dir = std::env::temp_dir().join(format!("podunit-cli-output-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "apiVersion: v1\nkind: Pod\nmetadata: {name: Bad}\n").unwrap();
    for stream in ["stdout", "stderr"] {
        let mut check = podunit();
        check.arg("check").arg(&bad);
        ends_quietly(
            &format!("check with {stream} closed"),
            &into_closed_pipe(check, stream),
        );
    }

    // image ls prints its header even for an empty store (under a scratch root).
    let mut ls = podunit();
    ls.args(["image", "ls"]).env("PODUNIT_ROOT", &dir);
    ends_quietly("image ls | (closed)", &into_closed_pipe(ls, "stdout"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn status_and_logs_without_systemd_say_the_system_bus_is_needed() {
    for args in [&["status"][..], &["status", "web"], &["logs", "web"]] {
        let out = podunit()
            .args(args)
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                "unix:path=/nonexistent/podunit-test/system_bus_socket",
            )
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        for want in [
            "this needs systemd's system bus, which is not reachable",
            "unix:path=/nonexistent/podunit-test/system_bus_socket",
            "run it on a host booted with systemd",
        ] {
            assert!(err.contains(want), "{args:?}: {want:?} not in {err:?}");
        }
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err:?}");
    }
}
