//! The WebSocket variants of the streaming endpoints: the opening handshake (RFC 6455 §4.2, with
//! the answers the kubelet's wsstream gives through golang.org/x/net/websocket), the upgraded
//! connection ([`WsConn`]: frames of [`super::websocket`] over TLS, pings answered, a close
//! answered and sent with its code), and exec's and attach's channels over it ([`WsChannels`]).
//!
//! The API server passes a client's WebSocket upgrade through to the node as it is (up to 1.29;
//! later ones translate it to SPDY themselves), so a kubectl of 1.30 or later, which offers
//! `v5.channel.k8s.io` alone and falls back to SPDY when the upgrade is refused, talks to this
//! node over WebSocket. The kubelet's own streaming server stops at `v4`; `v5` is `v4` and the
//! client's close signal, so it is served too.

use super::channels::{Channel, Channels, Event};
use super::context::{self, Tls};
use super::http::{self, Request};
use super::session::Options;
use super::websocket::{self, Assembler, Message, WsError};
use sha1::{Digest, Sha1};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

pub use super::websocket::{CHANNEL_PROTOCOLS, PORT_FORWARD_PROTOCOLS};

/// After our close frame, how long the client has to answer it and hang up.
const LINGER: Duration = Duration::from_secs(2);
/// The most of a `Sec-WebSocket-Key` taken (a real one is 24 characters).
const MAX_KEY: usize = 64;

/// Whether the request asks for a WebSocket (wsstream's `IsWebSocketRequest`: `Upgrade:
/// websocket` and an `upgrade` token in `Connection`).
pub fn is_websocket(req: &Request) -> bool {
    let upgrade = req
        .header("upgrade")
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    let connection = req.header("connection").is_some_and(|c| {
        c.split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
    });
    upgrade && connection
}

/// `Sec-WebSocket-Accept` for the client's `Sec-WebSocket-Key` (RFC 6455 §4.2.2).
pub fn accept_key(key: &str) -> String {
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    h.update(websocket::GUID.as_bytes());
    websocket::encode_base64(&h.finalize())
}

/// The 101 response for `protocol` (no `Sec-WebSocket-Protocol` for the empty one).
pub fn switching_protocols(key: &str, protocol: &str) -> String {
    let proto = if protocol.is_empty() {
        String::new()
    } else {
        format!("Sec-WebSocket-Protocol: {protocol}\r\n")
    };
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n{proto}\r\n",
        accept_key(key)
    )
}

/// Why a WebSocket upgrade is refused: the status, extra header lines and message
/// (golang.org/x/net/websocket's answers, with wsstream's message for the protocol).
pub fn refusal(
    req: &Request,
    supported: &[&'static str],
) -> Option<(u16, Vec<&'static str>, String)> {
    if req.method != "GET" {
        return Some((405, vec![], "405 method not allowed\n".into()));
    }
    if req.header("sec-websocket-version") != Some("13") {
        return Some((
            400,
            vec!["Sec-WebSocket-Version: 13"],
            "unsupported WebSocket version\n".into(),
        ));
    }
    let key = req.header("sec-websocket-key").unwrap_or("");
    if key.is_empty() || key.len() > MAX_KEY {
        return Some((400, vec![], "missing or bad Sec-WebSocket-Key\n".into()));
    }
    if websocket::negotiate(req.header("sec-websocket-protocol"), supported).is_none() {
        let msg = format!(
            "requested protocol(s) are not supported: {:?}; supports {supported:?}\n",
            req.header("sec-websocket-protocol").unwrap_or("")
        );
        return Some((403, vec![], msg));
    }
    None
}

/// Switches the connection to WebSocket speaking one of `supported`; else answers why not and
/// returns whether the connection may carry another request.
pub(super) fn upgrade(
    stream: &mut Tls,
    req: &Request,
    supported: &[&'static str],
) -> Result<&'static str, bool> {
    if let Some((status, extra, msg)) = refusal(req, supported) {
        return Err(http::write_response_with(
            stream,
            status,
            &extra,
            super::context::TEXT,
            msg.as_bytes(),
            req.close,
        )
        .is_ok());
    }
    let protocol =
        websocket::negotiate(req.header("sec-websocket-protocol"), supported).unwrap_or("");
    let key = req.header("sec-websocket-key").unwrap_or("");
    let head = switching_protocols(key, protocol);
    if stream.write_all(head.as_bytes()).is_err() || stream.flush().is_err() {
        return Err(false);
    }
    Ok(protocol)
}

/// An upgraded WebSocket connection: channel messages in and out over TLS.
pub(super) struct WsConn<'a> {
    pub tls: &'a mut Tls,
    pub protocol: &'static str,
    inbuf: Vec<u8>,
    assembler: Assembler,
    pub eof: bool,
    /// Our close frame has been sent: nothing more is.
    closed: bool,
}

impl<'a> WsConn<'a> {
    pub fn new(tls: &'a mut Tls, protocol: &'static str) -> Self {
        WsConn {
            tls,
            protocol,
            inbuf: Vec::new(),
            assembler: Assembler::default(),
            eof: false,
            closed: false,
        }
    }

    fn write(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.closed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        self.tls.write_all(frame)?;
        self.tls.flush()
    }

    /// `data` on channel `ch`.
    pub fn send(&mut self, ch: u8, data: &[u8]) -> io::Result<()> {
        self.write(&websocket::channel_frame(self.protocol, ch, data))
    }

    /// Reads what the socket has (blocking until something arrives when it has nothing);
    /// false once the client has closed its side.
    pub fn fill(&mut self) -> io::Result<bool> {
        context::fill(self.tls, &mut self.inbuf, &mut self.eof)
    }

    /// The next channel message out of what was read. Pings are answered; a close is answered
    /// and ends the session, as does a protocol error (closed with its code).
    pub fn next_message(&mut self) -> io::Result<Option<(u8, Vec<u8>)>> {
        loop {
            let (frame, used) = match websocket::parse(&self.inbuf, websocket::MAX_FRAME) {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(None),
                Err(e) => return Err(self.fail(e)),
            };
            self.inbuf.drain(..used);
            let m = match self.assembler.push(frame, websocket::MAX_MESSAGE) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => return Err(self.fail(e)),
            };
            match m {
                Message::Ping(p) => self.write(&websocket::frame(websocket::PONG, &p))?,
                Message::Pong => {}
                Message::Close(_) => {
                    self.close_with(websocket::NORMAL);
                    return Err(io::ErrorKind::ConnectionAborted.into());
                }
                m => {
                    // A message without a channel (or in the other encoding) is dropped, as
                    // wsstream drops one for a channel it does not have.
                    if let Some(cm) = websocket::channel_message(self.protocol, &m) {
                        return Ok(Some(cm));
                    }
                }
            }
        }
    }

    fn fail(&mut self, e: WsError) -> io::Error {
        self.close_with(e.code());
        context::bad(e)
    }

    fn close_with(&mut self, code: u16) {
        if !self.closed {
            let _ = self.write(&websocket::close_frame(code));
            self.closed = true;
        }
    }

    /// The end: our close frame (1000, unless one with another code went already), then the TLS
    /// close, then what the client still sends is read and dropped until it hangs up or
    /// [`LINGER`] has passed, so that it reads our last frames before the connection goes
    /// (closing a socket with unread bytes resets it).
    pub fn close(&mut self) {
        self.close_with(websocket::NORMAL);
        self.tls.conn.send_close_notify();
        while self.tls.conn.wants_write() {
            if self.tls.conn.write_tls(&mut self.tls.sock).is_err() {
                return;
            }
        }
        let deadline = Instant::now() + LINGER;
        let _ = self.tls.sock.set_read_timeout(Some(LINGER));
        while !self.eof && Instant::now() < deadline {
            match self.tls.conn.read_tls(&mut self.tls.sock) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            match self.tls.conn.process_new_packets() {
                Ok(st) if st.peer_has_closed() => return,
                Ok(_) => {
                    let _ = io::copy(&mut self.tls.conn.reader(), &mut io::sink());
                }
                Err(_) => return,
            }
        }
    }
}

/// Exec's and attach's channels (stdin 0, stdout 1, stderr 2, error 3, resize 4) over one
/// WebSocket, as the kubelet's `createWebSocketStreams` opens them.
pub(super) struct WsChannels<'a> {
    pub conn: WsConn<'a>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
}

impl<'a> WsChannels<'a> {
    pub fn new(tls: &'a mut Tls, protocol: &'static str, o: &Options) -> Self {
        WsChannels {
            conn: WsConn::new(tls, protocol),
            stdin: o.stdin,
            stdout: o.stdout,
            stderr: o.stderr,
        }
    }

    /// The kubelet's "connection established": an empty message on the lowest channel the
    /// node writes on.
    pub fn ready(&mut self) -> io::Result<()> {
        let ch = if self.stdout {
            Channel::Stdout
        } else if self.stderr {
            Channel::Stderr
        } else {
            Channel::Error
        };
        self.send(ch, b"")
    }
}

/// The channel numbers.
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;

impl Channels for WsChannels<'_> {
    fn sock(&self) -> BorrowedFd<'_> {
        self.conn.tls.sock.as_fd()
    }

    fn eof(&self) -> bool {
        self.conn.eof
    }

    fn fill(&mut self) -> io::Result<bool> {
        self.conn.fill()
    }

    fn next(&mut self) -> io::Result<Option<Event>> {
        let v5 = self.conn.protocol == "v5.channel.k8s.io";
        Ok(self.conn.next_message()?.map(|(ch, data)| match ch {
            STDIN if self.stdin => Event::Stdin(data, false),
            RESIZE => Event::Resize(data),
            // v5's close signal: the client is done with the channel named.
            websocket::CLOSE_CHANNEL if v5 && data == [STDIN] && self.stdin => {
                Event::Stdin(Vec::new(), true)
            }
            _ => Event::Other,
        }))
    }

    fn send(&mut self, ch: Channel, data: &[u8]) -> io::Result<()> {
        let n = match ch {
            Channel::Stdout if self.stdout => STDOUT,
            Channel::Stderr if self.stderr => STDERR,
            Channel::Error => ERROR,
            _ => return Ok(()),
        };
        self.conn.send(n, data)
    }

    /// A channel ends with the connection: wsstream sends no end of its own.
    fn end(&mut self, _: Channel) -> io::Result<()> {
        Ok(())
    }

    fn close(&mut self) {
        self.conn.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::session;

    fn req(method: &str, headers: &[(&str, &str)]) -> Request {
        let mut head = format!("{method} /exec/default/web/main?command=sh&stdout=1 HTTP/1.1\r\n");
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        http::parse_head(head.as_bytes()).unwrap().unwrap().0
    }

    const KEY: (&str, &str) = ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==");
    const V13: (&str, &str) = ("Sec-WebSocket-Version", "13");
    const UPGRADE: [(&str, &str); 2] = [("Upgrade", "websocket"), ("Connection", "Upgrade")];

    #[test]
    fn the_rfc_handshake_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        let head = switching_protocols("dGhlIHNhbXBsZSBub25jZQ==", "v5.channel.k8s.io");
        assert!(
            head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(head.contains("\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n"));
        assert!(head.ends_with("\r\n\r\n"));
        assert!(!switching_protocols("k", "").contains("Sec-WebSocket-Protocol"));
    }

    #[test]
    fn what_is_a_websocket_request() {
        assert!(is_websocket(&req("GET", &UPGRADE)));
        assert!(is_websocket(&req(
            "GET",
            &[
                ("Upgrade", "WebSocket"),
                ("Connection", "keep-alive, Upgrade")
            ]
        )));
        assert!(!is_websocket(&req(
            "POST",
            &[("Upgrade", "SPDY/3.1"), ("Connection", "Upgrade")]
        )));
        assert!(!is_websocket(&req("GET", &[("Upgrade", "websocket")])));
    }

    #[test]
    fn refusals_as_the_kubelet_answers() {
        let mut h = UPGRADE.to_vec();
        h.extend([KEY, V13, ("Sec-WebSocket-Protocol", "v5.channel.k8s.io")]);
        assert_eq!(refusal(&req("GET", &h), &CHANNEL_PROTOCOLS), None);
        assert_eq!(
            refusal(&req("POST", &h), &CHANNEL_PROTOCOLS).unwrap().0,
            405
        );
        // Port-forward has no v5: refused, so kubectl falls back to SPDY.
        let (status, _, msg) = refusal(&req("GET", &h), &PORT_FORWARD_PROTOCOLS).unwrap();
        assert_eq!(status, 403);
        assert!(
            msg.starts_with("requested protocol(s) are not supported"),
            "{msg}"
        );
        let mut old = UPGRADE.to_vec();
        old.extend([KEY, ("Sec-WebSocket-Version", "8")]);
        assert_eq!(
            refusal(&req("GET", &old), &CHANNEL_PROTOCOLS),
            Some((
                400,
                vec!["Sec-WebSocket-Version: 13"],
                "unsupported WebSocket version\n".into()
            ))
        );
        let mut keyless = UPGRADE.to_vec();
        keyless.push(V13);
        assert_eq!(
            refusal(&req("GET", &keyless), &CHANNEL_PROTOCOLS)
                .unwrap()
                .0,
            400
        );
        // No protocol offered: the empty one, served.
        let mut none = UPGRADE.to_vec();
        none.extend([KEY, V13]);
        assert_eq!(refusal(&req("GET", &none), &CHANNEL_PROTOCOLS), None);
    }

    #[test]
    fn the_exit_status_as_the_error_channel_carries_it() {
        let argv = ["sh".to_string()];
        let failed =
            session::status_message("v5.channel.k8s.io", &argv, &Ok(crate::exec::Exit::Code(3)));
        let frame = websocket::channel_frame("v5.channel.k8s.io", ERROR, &failed);
        // One binary frame: channel 3, then the metav1.Status kubectl reads the exit code from.
        assert_eq!(frame[0], 0x82);
        let body = if frame[1] < 126 {
            &frame[2..]
        } else {
            &frame[4..]
        };
        assert_eq!(body[0], 3);
        let status: serde_json::Value = serde_json::from_slice(&body[1..]).unwrap();
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(
            status["details"]["causes"][0],
            serde_json::json!({"reason": "ExitCode", "message": "3"})
        );
        let ok = session::status_message(
            "v4.base64.channel.k8s.io",
            &argv,
            &Ok(crate::exec::Exit::Code(0)),
        );
        assert_eq!(ok, br#"{"metadata":{},"status":"Success"}"#);
        // The older protocols: nothing on success, the text on failure.
        let v1 = |p| session::status_message(p, &argv, &Ok(crate::exec::Exit::Code(0)));
        assert!(v1("channel.k8s.io").is_empty() && v1("").is_empty());
        // The close frame that ends a session: 1000, unmasked.
        assert_eq!(
            websocket::close_frame(websocket::NORMAL),
            [0x88, 2, 0x03, 0xe8]
        );
    }
}
