//! `podunit exec -t` follows the caller's terminal: resizing it (the kernel's SIGWINCH to the
//! terminal's foreground process group) resizes the command's terminal, which `stty size` in
//! the container then reports.

use super::support::nspawn::Machine;
use super::support::pods::{SOON, ctr_unit, start_pods, wait_state};
use podunit::exec::pty;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHELL: &str = "apiVersion: v1
kind: Pod
metadata:
  name: shell
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: host
    command: [/bin/sh, -c, exec sleep 100000]
";

#[test]
fn exec_with_a_terminal_follows_its_resizes() {
    let m = Machine::boot("exec-resize");
    m.write("/etc/pods.d/shell.yaml", SHELL.as_bytes());
    start_pods(&m);
    wait_state(&m, &ctr_unit("default", "shell", "main"), &["active"]);

    // The caller's terminal: this test holds its controlling side.
    let (master, sub) = pty::open().unwrap();
    pty::resize(&master, 80, 24).unwrap();
    let stdio = || Stdio::from(sub.try_clone().unwrap());
    // `setsid -c`: a session whose controlling terminal is that one, so a resize signals it.
    let mut child = Command::new("setsid")
        .args(["-c", "nsenter", "-t", &m.leader().to_string(), "-a"])
        .args(["podunit", "exec", "-ti", "shell", "--", "sh", "-c"])
        .arg("stty size; while read x; do stty size; done")
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .stdin(stdio())
        .stdout(stdio())
        .stderr(stdio())
        .spawn()
        .unwrap();
    drop(sub);
    let seen = Arc::new(Mutex::new(String::new()));
    {
        let seen = seen.clone();
        let mut from = std::fs::File::from(master.try_clone().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
    }
    let mut to = std::fs::File::from(master.try_clone().unwrap());
    // Asks for the size (a line for `read`) until `want` is seen.
    let mut wait_for = |want: &str| {
        let deadline = Instant::now() + SOON;
        while !seen.lock().unwrap().contains(want) {
            assert!(
                Instant::now() < deadline,
                "no {want:?} from `stty size`; the terminal showed:\n{}",
                seen.lock().unwrap().escape_debug()
            );
            let _ = to.write_all(b"\n");
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    wait_for("24 80");
    pty::resize(&master, 132, 40).unwrap();
    wait_for("40 132");
    pty::resize(&master, 100, 30).unwrap();
    wait_for("30 100");
    let _ = to.write_all(&[4]); // ^D: `read` sees the end, the shell exits.
    let deadline = Instant::now() + SOON;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "podunit exec: {st}");
            break;
        }
        assert!(Instant::now() < deadline, "podunit exec did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
}
