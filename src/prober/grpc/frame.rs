//! HTTP/2 frames (RFC 9113) for one client stream: writing the request, reading the frames of
//! stream 1 and answering what the connection asks for (SETTINGS and PING acknowledgements).
//! Reads are bounded: a frame by the default maximum size, the connection by [`MAX_READ`], the
//! time by the call's deadline.

use super::{INTERNAL, RpcError, UNAVAILABLE, status};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// SETTINGS_MAX_FRAME_SIZE's default, which the client does not raise.
const MAX_FRAME: usize = 16_384;
/// The most one call reads from the server, all frames included.
const MAX_READ: usize = 256 * 1024;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

const STREAM: u32 = 1;

/// What the call sees of stream 1.
#[derive(Debug)]
pub enum Frame {
    /// A complete header block (CONTINUATIONs joined).
    Headers {
        block: Vec<u8>,
        end_stream: bool,
    },
    Data {
        data: Vec<u8>,
        end_stream: bool,
    },
    Reset(u32),
}

pub struct Conn {
    s: TcpStream,
    deadline: Instant,
    read: usize,
}

fn io_error(e: &std::io::Error) -> RpcError {
    use std::io::ErrorKind::{TimedOut, WouldBlock};
    if matches!(e.kind(), TimedOut | WouldBlock) {
        return RpcError::Deadline;
    }
    status(
        UNAVAILABLE,
        format!(
            "connection error: desc = \"transport: {}\"",
            super::go_error(e)
        ),
    )
}

fn protocol(m: &str) -> RpcError {
    status(INTERNAL, format!("transport: {m}"))
}

fn header(len: usize, ty: u8, flags: u8, stream: u32) -> [u8; 9] {
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    [l[1], l[2], l[3], ty, flags, s[0], s[1], s[2], s[3]]
}

/// A frame's payload without its padding (and a HEADERS frame's priority fields).
fn unpad(ty: u8, flags: u8, mut p: Vec<u8>) -> Result<Vec<u8>, RpcError> {
    let mut start = 0;
    let mut pad = 0;
    if flags & PADDED != 0 {
        pad = usize::from(
            *p.first()
                .ok_or_else(|| protocol("padded frame without length"))?,
        );
        start = 1;
    }
    if ty == HEADERS && flags & PRIORITY != 0 {
        start += 5;
    }
    if start + pad > p.len() {
        return Err(protocol("padding longer than the frame"));
    }
    p.truncate(p.len() - pad);
    p.drain(..start);
    Ok(p)
}

impl Conn {
    pub fn new(s: TcpStream, deadline: Instant) -> Self {
        Conn {
            s,
            deadline,
            read: 0,
        }
    }

    fn left(&self) -> Result<std::time::Duration, RpcError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(RpcError::Deadline);
        }
        Ok(left)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), RpcError> {
        let left = self.left()?;
        self.s
            .set_write_timeout(Some(left))
            .map_err(|e| io_error(&e))?;
        self.s.write_all(bytes).map_err(|e| io_error(&e))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), RpcError> {
        self.read += buf.len();
        if self.read > MAX_READ {
            return Err(protocol("the server sent too much"));
        }
        let mut got = 0;
        while got < buf.len() {
            let left = self.left()?;
            self.s
                .set_read_timeout(Some(left))
                .map_err(|e| io_error(&e))?;
            match self.s.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(status(UNAVAILABLE, "error reading from server: EOF"));
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(&e)),
            }
        }
        Ok(())
    }

    /// The preface, our SETTINGS (no server push), the request's HEADERS and its one DATA.
    pub fn start(&mut self, block: &[u8], message: &[u8]) -> Result<(), RpcError> {
        let mut out = PREFACE.to_vec();
        out.extend_from_slice(&header(6, SETTINGS, 0, 0));
        out.extend_from_slice(&[0, 2, 0, 0, 0, 0]); // SETTINGS_ENABLE_PUSH = 0
        if block.len() > MAX_FRAME || message.len() > MAX_FRAME {
            return Err(protocol("request too large"));
        }
        out.extend_from_slice(&header(block.len(), HEADERS, END_HEADERS, STREAM));
        out.extend_from_slice(block);
        out.extend_from_slice(&header(message.len(), DATA, END_STREAM, STREAM));
        out.extend_from_slice(message);
        self.write(&out)
    }

    fn raw(&mut self) -> Result<(u8, u8, u32, Vec<u8>), RpcError> {
        let mut h = [0u8; 9];
        self.read_exact(&mut h)?;
        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        if len > MAX_FRAME {
            return Err(protocol("frame larger than SETTINGS_MAX_FRAME_SIZE"));
        }
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let mut p = vec![0u8; len];
        self.read_exact(&mut p)?;
        Ok((h[3], h[4], stream, p))
    }

    /// The next frame of stream 1; connection frames are answered on the way.
    pub fn next(&mut self) -> Result<Frame, RpcError> {
        loop {
            let (ty, flags, stream, p) = self.raw()?;
            match ty {
                SETTINGS if stream == 0 => {
                    if p.len() % 6 != 0 {
                        return Err(protocol("malformed SETTINGS"));
                    }
                    if flags & ACK == 0 {
                        self.write(&header(0, SETTINGS, ACK, 0))?;
                    }
                }
                PING if stream == 0 => {
                    if p.len() != 8 {
                        return Err(protocol("malformed PING"));
                    }
                    if flags & ACK == 0 {
                        let mut out = header(8, PING, ACK, 0).to_vec();
                        out.extend_from_slice(&p);
                        self.write(&out)?;
                    }
                }
                GOAWAY if stream == 0 => {
                    let last = p
                        .get(..4)
                        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
                        .unwrap_or(0);
                    if last < STREAM {
                        return Err(status(UNAVAILABLE, "the connection is draining (GOAWAY)"));
                    }
                }
                PUSH_PROMISE => return Err(protocol("PUSH_PROMISE although push is disabled")),
                RST_STREAM if stream == STREAM => {
                    let code = p
                        .get(..4)
                        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                        .ok_or_else(|| protocol("malformed RST_STREAM"))?;
                    return Ok(Frame::Reset(code));
                }
                HEADERS if stream == STREAM => {
                    let end_stream = flags & END_STREAM != 0;
                    let mut block = unpad(ty, flags, p)?;
                    let mut end_headers = flags & END_HEADERS != 0;
                    while !end_headers {
                        let (ty, flags, s, p) = self.raw()?;
                        if ty != CONTINUATION || s != STREAM {
                            return Err(protocol("header block interrupted"));
                        }
                        if block.len() + p.len() > 4 * MAX_FRAME {
                            return Err(protocol("header block too large"));
                        }
                        block.extend_from_slice(&p);
                        end_headers = flags & END_HEADERS != 0;
                    }
                    return Ok(Frame::Headers { block, end_stream });
                }
                DATA if stream == STREAM => {
                    return Ok(Frame::Data {
                        end_stream: flags & END_STREAM != 0,
                        data: unpad(ty, flags, p)?,
                    });
                }
                // WINDOW_UPDATE, PRIORITY and frames of other streams or types: nothing to do for
                // one small response (its DATA fits the initial window).
                _ => {}
            }
        }
    }
}
