//! The pod a port-forward session reaches, whichever transport carries it (SPDY in
//! [`super::portforward`], WebSocket in [`super::portforward_ws`]): dialing its ports, the
//! kubelet's error message, and the bounds both transports keep.

use super::netns_dial::{self, Dialer};
use std::io::{self, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A session with no traffic either way for this long is closed (the kubelet's default).
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

/// The client's bytes taken ahead of the pod reading them, per connection.
pub(super) const BACKLOG: usize = 64 * 1024;

/// Bytes read from the pod per frame (spdystream's own chunk).
pub(super) const CHUNK: usize = 32 * 1024;

/// The pod being forwarded to.
pub(super) struct Target {
    /// `namespace/name`, as the kubelet names the pod in its messages.
    pub(super) pod: String,
    pub(super) uid: String,
    /// The pod's network namespace when it has one of its own (`network: private`).
    pub(super) netns: Option<PodNetwork>,
}

/// A pod's own network namespace: its pod unit (whose namespace the dialer joins), and the
/// dialer once started (or why it could not be).
pub(super) struct PodNetwork {
    pub(super) pod_unit: String,
    pub(super) dialer: Option<Result<Dialer, String>>,
}

/// Connects to `port` on the pod's localhost as the runtimes do: IPv4, then IPv6; in the pod's
/// own network namespace through its dialer, started on first use.
pub(super) fn dial(target: &mut Target, port: u16) -> Result<TcpStream, String> {
    let Some(net) = &mut target.netns else {
        return netns_dial::dial_localhost(port);
    };
    let dialer = net.dialer.get_or_insert_with(|| {
        let client = crate::systemd::Client::system().map_err(|e| e.to_string())?;
        Dialer::start(&client, &crate::exec::cli_binary(), &net.pod_unit).map_err(|e| e.to_string())
    });
    match dialer {
        Ok(d) => d.dial(port),
        Err(why) => Err(why.clone()),
    }
}

/// The kubelet's message on the error stream when forwarding failed.
pub(super) fn forward_error(target: &Target, port: u16, why: &str) -> String {
    format!(
        "error forwarding port {port} to pod {}, uid {}: {why}",
        target.pod, target.uid
    )
}

/// Writes what the pod's connection takes of the client's bytes.
pub(super) fn write_backlog(sock: &mut TcpStream, backlog: &mut Vec<u8>) {
    match sock.write(backlog) {
        Ok(n) => {
            backlog.drain(..n);
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        // The pod closed its side: what the client sends goes nowhere.
        Err(_) => backlog.clear(),
    }
}
