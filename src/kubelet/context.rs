//! What the server and its handlers share: the server's state, the TLS connection and the
//! small answers every handler gives. The server routes to the handlers and the handlers use
//! this, so neither imports the other.

use super::http::{self, Request};
use super::{auth, stats};
use crate::common::paths::Paths;
use crate::generate::output::{self, GeneratedPod};
use std::io::{self, Read};
use std::net::TcpStream;

pub(super) const TEXT: &str = "text/plain; charset=utf-8";

/// What the handlers share.
pub(crate) struct State {
    pub node_name: String,
    pub paths: Paths,
    pub gate: auth::Gate,
    pub rates: stats::CpuRates,
}

pub(super) type Tls = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

/// A plain-text answer to a request that is not upgraded; whether the connection may carry
/// another.
pub(super) fn refuse(stream: &mut Tls, req: &Request, status: u16, msg: &str) -> bool {
    http::write_response(stream, status, TEXT, msg.as_bytes(), req.close).is_ok()
}

/// A protocol error in what the client sent.
pub(super) fn bad(m: impl std::fmt::Debug) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{m:?}"))
}

/// Reads what the TLS socket has into `inbuf` (blocking until something arrives when it has
/// nothing); false, and `eof` set, once the client has closed its side.
pub(super) fn fill(tls: &mut Tls, inbuf: &mut Vec<u8>, eof: &mut bool) -> io::Result<bool> {
    let n = tls.conn.read_tls(&mut tls.sock)?;
    if n == 0 {
        *eof = true;
        return Ok(false);
    }
    let st = tls.conn.process_new_packets().map_err(io::Error::other)?;
    let avail = st.plaintext_bytes_to_read();
    let closed = st.peer_has_closed();
    let at = inbuf.len();
    inbuf.resize(at + avail, 0);
    tls.conn.reader().read_exact(&mut inbuf[at..])?;
    while tls.conn.wants_write() {
        tls.conn.write_tls(&mut tls.sock)?;
    }
    *eof |= closed;
    Ok(!closed)
}

pub(super) fn generated_pods(state: &State) -> Vec<GeneratedPod> {
    output::scan(&state.paths.host(output::GENERATOR_DIR)).unwrap_or_default()
}

/// Whether the peer of a connection that is being answered is still there.
pub(crate) fn peer_alive(sock: &TcpStream) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(0) => true,
        // Readable in the middle of a streamed response: the client's end of the stream (FIN or
        // a TLS close_notify); it sends nothing else meanwhile.
        Ok(_) => false,
        Err(_) => false,
    }
}
