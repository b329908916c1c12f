//! exec, attach and port-forward over WebSocket. kubectl 1.32 speaks `v5.channel.k8s.io` to the
//! node through the 1.20 API server (which passes the upgrade through as it is) and prints, at
//! `-v=4`, the protocol it negotiated or that it fell back to SPDY; with
//! `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false` it speaks SPDY alone. The edge cases kubectl does
//! not reach (the base64 and unversioned protocols, pings, the close signal, port-forward's
//! channels, hostile frames) go through a client of their own (`wsclient.py`, standard library
//! only) at the node's port.

use super::*;
use std::path::PathBuf;

/// What `wsclient.py` saw: the handshake's status and headers, the messages (opcode, payload)
/// and the close code.
struct Seen {
    status: u64,
    headers: Value,
    body: String,
    messages: Vec<(u8, Vec<u8>)>,
    close: Option<u64>,
    raw: String,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn client(m: &Machine, cert: &(PathBuf, PathBuf), path: &str, protocols: &str) -> Command {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kubelet_e2e/wsclient.py");
    let mut c = in_machine_net(m, "python3");
    c.arg(script)
        .arg(&cert.0)
        .arg(&cert.1)
        .arg(format!("https://127.0.0.1:{PORT}{path}"))
        .arg(protocols);
    c
}

fn seen(out: std::process::Output) -> Seen {
    let raw = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "wsclient.py: {raw}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{e}: {raw}"));
    Seen {
        status: v["status"].as_u64().unwrap(),
        headers: v["headers"].clone(),
        body: v["body"].as_str().unwrap_or("").to_string(),
        messages: v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m[0].as_u64().unwrap() as u8, unhex(m[1].as_str().unwrap())))
            .collect(),
        close: v["close"].as_u64(),
        raw,
    }
}

/// One WebSocket session at the node's port: `frames` sent (see wsclient.py), then everything
/// read until the close.
fn ws(
    m: &Machine,
    cert: &(PathBuf, PathBuf),
    path: &str,
    protocols: &str,
    frames: &[&str],
) -> Seen {
    seen(
        client(m, cert, path, protocols)
            .args(frames)
            .output()
            .unwrap(),
    )
}

/// A binary frame's argument for wsclient.py: channel, then data.
fn on(channel: u8, data: &[u8]) -> String {
    format!("2:{:02x}{}", channel, hex(data))
}

/// The binary messages on `channel`, joined.
fn channel(s: &Seen, ch: u8) -> Vec<u8> {
    s.messages
        .iter()
        .filter(|(op, p)| *op == 2 && p.first() == Some(&ch))
        .flat_map(|(_, p)| p[1..].to_vec())
        .collect()
}

#[test]
fn exec_attach_and_port_forward_over_websocket() {
    let m = Machine::boot("kubelet-ws");
    let cp = ControlPlane::start(&m, NODE);
    start_sync(&m);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&shell_pod("shell")));
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&pong_pod("pong")));
    wait_state(&m, &ctr_unit("default", "shell", "main"), &["active"]);
    wait_state(&m, &ctr_unit("default", "pong", "main"), &["active"]);
    m.wait_for("the pod listening", SOON, || {
        kubectl(&cp, &["logs", "pong"])
            .is_ok_and(|l| l.contains("listening"))
            .then_some(())
    });

    // kubectl over WebSocket (v5), and over SPDY when told to: the same output and exit code.
    let exec = |spdy: bool| {
        let mut c = cp.kubectl();
        if spdy {
            c.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");
        }
        c.args([
            "-v=4",
            "exec",
            "shell",
            "--",
            "sh",
            "-c",
            "echo out; exit 3",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap()
    };
    let out = exec(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("The subprotocol is v5.channel.k8s.io"),
        "not over WebSocket: {stderr}"
    );
    assert!(!stderr.contains("RemoteCommand fallback"), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n", "{stderr}");
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let out = exec(true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("The subprotocol is"), "not SPDY: {stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n", "{stderr}");
    assert_eq!(out.status.code(), Some(3), "{stderr}");

    // attach over WebSocket: negotiated, then the container's lines (none here: it sleeps);
    // kubectl is stopped once it has said so.
    let mut at = cp
        .kubectl()
        .args(["-v=4", "attach", "shell", "-c", "main"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let at_err = lines_of(at.stderr.take().unwrap());
    let line = next_line(&at_err, "The subprotocol is");
    let _ = at.kill();
    let _ = at.wait();
    assert!(
        line.as_deref()
            .is_ok_and(|l| l.contains("The subprotocol is v5.channel.k8s.io")),
        "attach: {line:?}"
    );

    // The edge cases, with a client of their own.
    let admin = cp.client_cert("kubelet-admin", "kubelet-admin", "system:masters");
    let exec_path = |q: &str| format!("/exec/default/shell/main?{q}");

    // base64: text messages, '1' and base64 for stdout; the handshake per RFC 6455.
    let s = ws(
        &m,
        &admin,
        &exec_path("command=sh&command=-c&command=echo%20hi%3B%20exit%202&output=1"),
        "v4.base64.channel.k8s.io",
        &[],
    );
    assert_eq!(s.status, 101, "{}", s.raw);
    assert_eq!(
        s.headers["sec-websocket-accept"],
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
    assert_eq!(
        s.headers["sec-websocket-protocol"],
        "v4.base64.channel.k8s.io"
    );
    let texts: Vec<String> = s
        .messages
        .iter()
        .map(|(op, p)| {
            assert_eq!(*op, 1, "{}", s.raw);
            String::from_utf8(p.clone()).unwrap()
        })
        .collect();
    assert_eq!(
        texts[0], "1",
        "the empty first message on stdout: {}",
        s.raw
    );
    assert_eq!(texts[1], "1aGkK", "{}", s.raw);
    assert!(texts[2].starts_with('3'), "{}", s.raw);
    assert_eq!(s.close, Some(1000), "{}", s.raw);

    // v5: stdin, then its close signal; a ping answered with its payload; the status as JSON.
    let s = ws(
        &m,
        &admin,
        &exec_path("command=cat&input=1&output=1"),
        "v5.channel.k8s.io",
        &["9:6869", &on(0, b"piped\n"), &on(255, &[0])],
    );
    assert_eq!(s.headers["sec-websocket-protocol"], "v5.channel.k8s.io");
    assert!(s.messages.contains(&(10, b"hi".to_vec())), "{}", s.raw);
    assert_eq!(s.messages.iter().find(|(op, _)| *op == 2).unwrap().1, [1]);
    assert_eq!(channel(&s, 1), b"piped\n", "{}", s.raw);
    let status: Value = serde_json::from_slice(&channel(&s, 3)).unwrap();
    assert_eq!(status, json!({"metadata": {}, "status": "Success"}));
    assert_eq!(s.close, Some(1000), "{}", s.raw);

    // No protocol offered: binary channels, the failure as text.
    let s = ws(
        &m,
        &admin,
        &exec_path("command=sh&command=-c&command=exit%205&output=1"),
        "-",
        &[],
    );
    assert_eq!(s.status, 101, "{}", s.raw);
    assert!(s.headers.get("sec-websocket-protocol").is_none());
    // The v1 error channel carries the status's message only: "command terminated with non-zero
    // exit code: <error>, exit code N", whose error names the argv (which has a 5 in it too):
    // the code is the number at the end.
    let text = String::from_utf8(channel(&s, 3)).unwrap();
    let (head, code) = text
        .rsplit_once(", exit code ")
        .unwrap_or_else(|| panic!("no exit code in {text:?}"));
    assert!(
        head.starts_with("command terminated with non-zero exit code: "),
        "{text}"
    );
    assert_eq!(code.parse::<i32>().ok(), Some(5), "{text}");

    // Refused upgrades: an unknown protocol, and port-forward's protocols other than the
    // kubelet's (v5, kubectl's own tunnel), so kubectl falls back to SPDY.
    let s = ws(
        &m,
        &admin,
        &exec_path("command=true&output=1"),
        "v9.channel.k8s.io",
        &[],
    );
    assert_eq!(s.status, 403);
    assert!(
        s.body
            .starts_with("requested protocol(s) are not supported"),
        "{}",
        s.body
    );
    for p in ["v5.channel.k8s.io", "SPDY/3.1+portforward.k8s.io"] {
        let s = ws(&m, &admin, "/portForward/default/pong?port=8089", p, &[]);
        assert_eq!(s.status, 403, "{p}: {}", s.raw);
    }
    let s = ws(
        &m,
        &admin,
        "/portForward/default/pong",
        "v4.channel.k8s.io",
        &[],
    );
    assert_eq!(s.status, 400);
    assert!(s.body.contains("\"port\" is required"), "{}", s.body);

    // Port-forward: every channel opens with its port; one connection per port, the bytes both
    // ways, the refused port's reason on its error channel; closed once both have ended.
    let s = ws(
        &m,
        &admin,
        "/portForward/default/pong?port=8089,8090",
        "v4.channel.k8s.io",
        &[&on(0, b"hello\n")],
    );
    assert_eq!(s.status, 101, "{}", s.raw);
    for (ch, port) in [(0u8, 8089u16), (1, 8089), (2, 8090), (3, 8090)] {
        let first = s
            .messages
            .iter()
            .find(|(_, p)| p.first() == Some(&ch))
            .unwrap_or_else(|| panic!("nothing on channel {ch}: {}", s.raw));
        assert_eq!(first.1[1..], port.to_le_bytes(), "{}", s.raw);
    }
    assert_eq!(&channel(&s, 0)[2..], b"pong:hello\n", "{}", s.raw);
    let refused = String::from_utf8_lossy(&channel(&s, 3)[2..]).into_owned();
    assert!(
        refused.starts_with("error forwarding port 8090 to pod default/pong")
            && refused.contains("onnection refused"),
        "{refused}"
    );
    assert!(channel(&s, 1).len() == 2, "{}", s.raw);
    assert_eq!(s.close, Some(1000), "{}", s.raw);

    // Hostile frames close the connection with their code, and the command with it.
    let sleeper = exec_path("command=sleep&command=1000&output=1");
    let s = ws(&m, &admin, &sleeper, "v5.channel.k8s.io", &["raw:820100"]);
    assert_eq!(s.close, Some(1002), "an unmasked frame: {}", s.raw);
    let s = ws(
        &m,
        &admin,
        &sleeper,
        "v5.channel.k8s.io",
        &["raw:82ff0000000040000000"],
    );
    assert_eq!(s.close, Some(1009), "a 1 GiB frame: {}", s.raw);
    m.wait_for("the commands gone with their connections", SOON, || {
        // The whole command line `sleep 1000`: the container's pid-init has the container's
        // `exec sleep 100000` in its own.
        (!m.sh(
            "for f in /proc/[0-9]*/cmdline; do [ \"$(tr '\\0' ' ' < $f 2>/dev/null)\" = 'sleep 1000 ' ] && exit 0; done; exit 1",
        )
        .status
        .success())
        .then_some(())
    });
    // A client stalled in the middle of a frame holds up nobody else.
    let stalled = client(&m, &admin, &sleeper, "v5.channel.k8s.io")
        .args(["raw:82", "pause:8"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        kubectl(&cp, &["exec", "shell", "--", "echo", "still-served"]).unwrap(),
        "still-served\n"
    );
    let _ = seen(stalled.wait_with_output().unwrap());
}
