//! The SPDY/3.1 side of a streaming session (exec, attach, port-forward), as the API server
//! proxies it to a kubelet: the upgrade, the connection's frames over TLS, and the streams a
//! session's client opens first. [`super::wsconn`] is the WebSocket counterpart; both serve
//! [`super::channels`].

use super::context::{self, Tls};
use super::http::Request;
use super::spdy::headers::{Deflater, Inflater};
use super::spdy::{self, Frame};
use std::io::{self, Write};
use std::time::{Duration, Instant};

/// How long the client has to open its streams (the kubelet's default).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// The most streams a client may open on one connection.
const MAX_STREAMS: usize = 8;

/// The protocol to speak: the first of the client's (`X-Stream-Protocol-Version`, each header
/// line one or more, comma-separated) that this server has (`supported`).
pub fn negotiate(req: &Request, supported: &[&'static str]) -> Option<&'static str> {
    let offered: Vec<&str> = req
        .headers
        .iter()
        .filter(|(n, _)| n == "x-stream-protocol-version")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .collect();
    offered
        .iter()
        .find_map(|o| supported.iter().find(|p| *p == o).copied())
}

/// Switches the connection to SPDY/3.1 speaking one of `supported`; else answers why not and
/// returns whether the connection may carry another request.
pub(super) fn upgrade(
    stream: &mut Tls,
    req: &Request,
    supported: &[&'static str],
) -> Result<&'static str, bool> {
    let reply =
        |stream: &mut Tls, status: u16, msg: &str| context::refuse(stream, req, status, msg);
    let spdy = req
        .header("upgrade")
        .is_some_and(|u| u.eq_ignore_ascii_case("SPDY/3.1"));
    if !spdy {
        return Err(reply(stream, 400, "Upgrade request required\n"));
    }
    let Some(protocol) = negotiate(req, supported) else {
        let msg = format!(
            "unable to upgrade: unable to negotiate protocol: client supports {:?}, server \
             supports {supported:?}\n",
            req.header("x-stream-protocol-version").unwrap_or("")
        );
        return Err(reply(stream, 403, &msg));
    };
    let head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: {protocol}\r\n\r\n"
    );
    if stream.write_all(head.as_bytes()).is_err() || stream.flush().is_err() {
        return Err(false);
    }
    Ok(protocol)
}

/// The streams a session uses, by their SPDY ids.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Streams {
    pub error: Option<u32>,
    pub stdin: Option<u32>,
    pub stdout: Option<u32>,
    pub stderr: Option<u32>,
    pub resize: Option<u32>,
}

impl Streams {
    fn complete(&self, w: &Wanted) -> bool {
        self.error.is_some()
            && (!w.stdin || self.stdin.is_some())
            && (!w.stdout || self.stdout.is_some())
            && (!w.stderr || self.stderr.is_some())
            && (!w.resize || self.resize.is_some())
    }
}

/// The streams a session needs besides `error`, from its options and protocol.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wanted {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub resize: bool,
}

/// The upgraded connection: frames in and out over TLS.
pub(super) struct Conn<'a> {
    pub tls: &'a mut Tls,
    inbuf: Vec<u8>,
    pub inflate: Inflater,
    pub deflate: Deflater,
    streams: usize,
    pub eof: bool,
}

impl<'a> Conn<'a> {
    pub fn new(tls: &'a mut Tls) -> Self {
        Conn {
            tls,
            inbuf: Vec::new(),
            inflate: Inflater::default(),
            deflate: Deflater::default(),
            streams: 0,
            eof: false,
        }
    }

    pub fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.tls.write_all(frame)?;
        self.tls.flush()
    }

    /// Reads what the socket has (blocking until something arrives when it has nothing);
    /// false once the client has closed its side.
    pub fn fill(&mut self) -> io::Result<bool> {
        context::fill(self.tls, &mut self.inbuf, &mut self.eof)
    }

    /// The next whole frame in the buffer, copied out of it (`handle` gets it by value).
    pub fn next_frame(&mut self) -> io::Result<Option<OwnedFrame>> {
        let Some((frame, used)) = spdy::parse(&self.inbuf).map_err(context::bad)? else {
            return Ok(None);
        };
        let owned = OwnedFrame::from(frame);
        self.inbuf.drain(..used);
        Ok(Some(owned))
    }

    /// Answers what needs no session (PING, new streams) and returns the rest.
    pub fn control(
        &mut self,
        f: OwnedFrame,
        streams: &mut Streams,
    ) -> io::Result<Option<OwnedFrame>> {
        match f {
            OwnedFrame::Ping(id) => self.send(&spdy::ping(id)).map(|_| None),
            OwnedFrame::SynStream { stream, block } => {
                let headers = self.inflate.block(&block).map_err(context::bad)?;
                let kind = headers
                    .iter()
                    .find(|(n, _)| n == "streamtype")
                    .map(|(_, v)| v.as_str());
                self.streams += 1;
                let slot = match kind {
                    Some("error") => &mut streams.error,
                    Some("stdin") => &mut streams.stdin,
                    Some("stdout") => &mut streams.stdout,
                    Some("stderr") => &mut streams.stderr,
                    Some("resize") => &mut streams.resize,
                    _ => {
                        return self
                            .send(&spdy::rst_stream(stream, spdy::REFUSED_STREAM))
                            .map(|_| None);
                    }
                };
                if slot.is_some() || self.streams > MAX_STREAMS {
                    return self
                        .send(&spdy::rst_stream(stream, spdy::REFUSED_STREAM))
                        .map(|_| None);
                }
                *slot = Some(stream);
                let block = self.deflate.block(&[]);
                self.send(&spdy::syn_reply(stream, false, &block))
                    .map(|_| None)
            }
            OwnedFrame::GoAway => Err(io::ErrorKind::ConnectionAborted.into()),
            other => Ok(Some(other)),
        }
    }

    pub fn close(&mut self) {
        let _ = self.send(&spdy::goaway(0));
        self.tls.conn.send_close_notify();
        while self.tls.conn.wants_write() {
            if self.tls.conn.write_tls(&mut self.tls.sock).is_err() {
                break;
            }
        }
    }
}

/// A frame the session acts on, out of the read buffer.
pub(super) enum OwnedFrame {
    SynStream {
        stream: u32,
        block: Vec<u8>,
    },
    Data {
        stream: u32,
        fin: bool,
        data: Vec<u8>,
    },
    RstStream(u32),
    Ping(u32),
    GoAway,
    Ignored,
}

impl From<Frame<'_>> for OwnedFrame {
    fn from(f: Frame<'_>) -> Self {
        match f {
            Frame::SynStream { stream, block, .. } => OwnedFrame::SynStream {
                stream,
                block: block.to_vec(),
            },
            Frame::Data { stream, fin, data } => OwnedFrame::Data {
                stream,
                fin,
                data: data.to_vec(),
            },
            Frame::RstStream { stream, .. } => OwnedFrame::RstStream(stream),
            Frame::Ping(id) => OwnedFrame::Ping(id),
            Frame::GoAway { .. } => OwnedFrame::GoAway,
            _ => OwnedFrame::Ignored,
        }
    }
}

/// The streams the session wants, as the client opens them all before it sends anything else;
/// None when it closed the connection first.
pub(super) fn open_streams(conn: &mut Conn<'_>, wanted: &Wanted) -> io::Result<Option<Streams>> {
    let mut streams = Streams::default();
    let deadline = Instant::now() + STREAM_CREATION_TIMEOUT;
    let _ = conn
        .tls
        .sock
        .set_read_timeout(Some(STREAM_CREATION_TIMEOUT));
    while !streams.complete(wanted) {
        match conn.next_frame()? {
            Some(f) => {
                conn.control(f, &mut streams)?;
            }
            None if Instant::now() >= deadline => return Err(io::ErrorKind::TimedOut.into()),
            None => {
                if !conn.fill()? {
                    return Ok(None);
                }
            }
        }
    }
    Ok(Some(streams))
}
