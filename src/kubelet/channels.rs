//! What an exec or attach session needs of its upgraded connection, whichever framing carries
//! it: SPDY/3.1 streams (one per channel, opened by the client; [`Spdy`]) or the channels of
//! one WebSocket ([`super::wsconn::WsChannels`]). The sessions ([`super::remotecommand`],
//! [`super::attach`]) are written once against [`Channels`].

use super::spdy;
use super::spdyconn::{Conn, OwnedFrame, Streams};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

/// The channels the node writes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Channel {
    Stdout,
    Stderr,
    /// How the command ended (remotecommand's `error` stream, channel 3).
    Error,
}

/// What the client sent that a session acts on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// Bytes for the command's stdin; `true` once the client has closed its stdin.
    Stdin(Vec<u8>, bool),
    /// Bytes of the `resize` channel (JSON terminal sizes, one after another).
    Resize(Vec<u8>),
    /// Anything else (answered already, or of no use to the session).
    Other,
}

/// One upgraded exec or attach connection.
pub(super) trait Channels {
    /// The socket, to poll for the client's bytes.
    fn sock(&self) -> BorrowedFd<'_>;
    /// Whether the client has closed its side.
    fn eof(&self) -> bool;
    /// Reads what the socket has (blocking until something arrives when it has nothing);
    /// false once the client has closed its side.
    fn fill(&mut self) -> io::Result<bool>;
    /// The next thing the client sent, out of what was read (pings are answered here); an
    /// error when the client ended the session or broke the protocol.
    fn next(&mut self) -> io::Result<Option<Event>>;
    /// Bytes on a channel; nothing when the client did not ask for it.
    fn send(&mut self, ch: Channel, data: &[u8]) -> io::Result<()>;
    /// The end of a channel, where the framing has one.
    fn end(&mut self, ch: Channel) -> io::Result<()>;
    /// The end of the session.
    fn close(&mut self);
}

/// The end of a session: the status (if any) on the error channel, which then ends.
pub(super) fn finish(ch: &mut dyn Channels, status: &[u8]) -> io::Result<()> {
    if !status.is_empty() {
        ch.send(Channel::Error, status)?;
    }
    ch.end(Channel::Error)
}

/// SPDY/3.1: the client's streams, opened before the session starts.
pub(super) struct Spdy<'a> {
    pub conn: Conn<'a>,
    pub streams: Streams,
}

impl Spdy<'_> {
    fn id(&self, ch: Channel) -> Option<u32> {
        match ch {
            Channel::Stdout => self.streams.stdout,
            Channel::Stderr => self.streams.stderr,
            Channel::Error => self.streams.error,
        }
    }
}

impl Channels for Spdy<'_> {
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
        let Some(f) = self.conn.next_frame()? else {
            return Ok(None);
        };
        // Streams opened now are refused or unused: the session has its own.
        let mut ignore = Streams::default();
        Ok(Some(match self.conn.control(f, &mut ignore)? {
            Some(OwnedFrame::Data { stream, fin, data }) if Some(stream) == self.streams.stdin => {
                Event::Stdin(data, fin)
            }
            Some(OwnedFrame::Data { stream, data, .. }) if Some(stream) == self.streams.resize => {
                Event::Resize(data)
            }
            _ => Event::Other,
        }))
    }

    fn send(&mut self, ch: Channel, data: &[u8]) -> io::Result<()> {
        match self.id(ch) {
            Some(id) => self.conn.send(&spdy::data(id, false, data)),
            None => Ok(()),
        }
    }

    fn end(&mut self, ch: Channel) -> io::Result<()> {
        match self.id(ch) {
            Some(id) => self.conn.send(&spdy::data(id, true, b"")),
            None => Ok(()),
        }
    }

    fn close(&mut self) {
        self.conn.close();
    }
}
