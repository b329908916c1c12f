//! SPDY/3.1 framing, the transport the API server's `exec`, `attach` and `port-forward` upgrade
//! to (Go's spdystream on the other end). Frames are hostile input: every length is checked
//! against the bytes there and against bounds before anything is kept.
//!
//! - this module: the frames, parsed from the start of a buffer and written whole;
//! - [`headers`]: header blocks, zlib-compressed with the SPDY/3 dictionary, bounded.

pub mod headers;

/// The most payload a frame may carry here: spdystream writes at most 32 KiB of data per frame
/// and header blocks far smaller; anything larger is refused rather than buffered.
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// A frame's own header.
pub const FRAME_HEAD: usize = 8;

const VERSION: u16 = 3;
pub const FLAG_FIN: u8 = 0x01;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status: the stream is refused.
pub const REFUSED_STREAM: u32 = 3;
/// RST_STREAM status: the stream is given up (what spdystream's `Reset()` sends).
pub const CANCEL: u32 = 5;

/// One frame, borrowing its payload from the buffer it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    SynStream {
        stream: u32,
        fin: bool,
        block: &'a [u8],
    },
    SynReply {
        stream: u32,
        fin: bool,
        block: &'a [u8],
    },
    Headers {
        stream: u32,
        fin: bool,
        block: &'a [u8],
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    Settings,
    Ping(u32),
    GoAway {
        last: u32,
        status: u32,
    },
    WindowUpdate {
        stream: u32,
        delta: u32,
    },
    Data {
        stream: u32,
        fin: bool,
        data: &'a [u8],
    },
    /// A control frame of a type this server has no use for (SPDY says: ignore it).
    Other(u16),
}

/// Why the bytes are not a frame; the connection is then closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    TooLarge(usize),
    Version(u16),
    Malformed(&'static str),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The 31-bit stream id (or other value) at `at`.
fn id_at(b: &[u8], at: usize) -> u32 {
    u32_at(b, at) & 0x7fff_ffff
}

/// Parses the frame at the start of `buf`: Ok(None) while it is incomplete, else the frame and
/// its length.
pub fn parse(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    if buf.len() < FRAME_HEAD {
        return Ok(None);
    }
    let flags = buf[4];
    let len = (u32_at(buf, 4) & 0x00ff_ffff) as usize;
    if len > MAX_PAYLOAD {
        return Err(FrameError::TooLarge(len));
    }
    if buf.len() < FRAME_HEAD + len {
        return Ok(None);
    }
    let p = &buf[FRAME_HEAD..FRAME_HEAD + len];
    let fin = flags & FLAG_FIN != 0;
    let used = FRAME_HEAD + len;
    if buf[0] & 0x80 == 0 {
        let stream = id_at(buf, 0);
        if stream == 0 {
            return Err(FrameError::Malformed("data on stream 0"));
        }
        return Ok(Some((
            Frame::Data {
                stream,
                fin,
                data: p,
            },
            used,
        )));
    }
    let version = u16::from_be_bytes([buf[0] & 0x7f, buf[1]]);
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    let kind = u16::from_be_bytes([buf[2], buf[3]]);
    let need = |n: usize, what: &'static str| {
        if p.len() < n {
            Err(FrameError::Malformed(what))
        } else {
            Ok(())
        }
    };
    let frame = match kind {
        SYN_STREAM => {
            // Stream id, associated stream id, priority and slot, then the header block.
            need(10, "short SYN_STREAM")?;
            let stream = id_at(p, 0);
            if stream == 0 {
                return Err(FrameError::Malformed("SYN_STREAM for stream 0"));
            }
            Frame::SynStream {
                stream,
                fin,
                block: &p[10..],
            }
        }
        SYN_REPLY | HEADERS => {
            need(4, "short SYN_REPLY or HEADERS")?;
            let (stream, block) = (id_at(p, 0), &p[4..]);
            if kind == SYN_REPLY {
                Frame::SynReply { stream, fin, block }
            } else {
                Frame::Headers { stream, fin, block }
            }
        }
        RST_STREAM => {
            need(8, "short RST_STREAM")?;
            Frame::RstStream {
                stream: id_at(p, 0),
                status: u32_at(p, 4),
            }
        }
        SETTINGS => {
            need(4, "short SETTINGS")?;
            let n = u32_at(p, 0) as usize;
            if n.checked_mul(8).and_then(|b| b.checked_add(4)) != Some(p.len()) {
                return Err(FrameError::Malformed("SETTINGS length"));
            }
            Frame::Settings
        }
        PING => {
            need(4, "short PING")?;
            Frame::Ping(u32_at(p, 0))
        }
        GOAWAY => {
            need(4, "short GOAWAY")?;
            // SPDY/3 adds a status; spdystream's SPDY/2-era peers may leave it out.
            let status = if p.len() >= 8 { u32_at(p, 4) } else { 0 };
            Frame::GoAway {
                last: id_at(p, 0),
                status,
            }
        }
        WINDOW_UPDATE => {
            need(8, "short WINDOW_UPDATE")?;
            Frame::WindowUpdate {
                stream: id_at(p, 0),
                delta: id_at(p, 4),
            }
        }
        other => Frame::Other(other),
    };
    Ok(Some((frame, used)))
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(FRAME_HEAD + payload.len());
    f.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    f.extend_from_slice(&kind.to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(payload);
    f
}

/// A DATA frame (`data` at most [`MAX_PAYLOAD`] bytes).
pub fn data(stream: u32, fin: bool, data: &[u8]) -> Vec<u8> {
    debug_assert!(data.len() <= MAX_PAYLOAD);
    let mut f = Vec::with_capacity(FRAME_HEAD + data.len());
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.push(if fin { FLAG_FIN } else { 0 });
    f.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(data);
    f
}

/// A SYN_REPLY with a compressed header block.
pub fn syn_reply(stream: u32, fin: bool, block: &[u8]) -> Vec<u8> {
    let mut p = stream.to_be_bytes().to_vec();
    p.extend_from_slice(block);
    control(SYN_REPLY, if fin { FLAG_FIN } else { 0 }, &p)
}

pub fn rst_stream(stream: u32, status: u32) -> Vec<u8> {
    let mut p = stream.to_be_bytes().to_vec();
    p.extend_from_slice(&status.to_be_bytes());
    control(RST_STREAM, 0, &p)
}

pub fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

/// GOAWAY with status OK.
pub fn goaway(last: u32) -> Vec<u8> {
    let mut p = last.to_be_bytes().to_vec();
    p.extend_from_slice(&0u32.to_be_bytes());
    control(GOAWAY, 0, &p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_wait_for_their_bytes() {
        let d = data(5, true, b"hello");
        assert_eq!(parse(&d[..7]), Ok(None));
        assert_eq!(
            parse(&d),
            Ok(Some((
                Frame::Data {
                    stream: 5,
                    fin: true,
                    data: b"hello"
                },
                13
            )))
        );
        let r = syn_reply(3, false, b"blk");
        assert_eq!(
            parse(&r).unwrap().unwrap().0,
            Frame::SynReply {
                stream: 3,
                fin: false,
                block: b"blk"
            }
        );
        assert_eq!(parse(&ping(7)).unwrap().unwrap().0, Frame::Ping(7));
        assert_eq!(
            parse(&rst_stream(1, REFUSED_STREAM)).unwrap().unwrap().0,
            Frame::RstStream {
                stream: 1,
                status: 3
            }
        );
        assert_eq!(
            parse(&goaway(9)).unwrap().unwrap().0,
            Frame::GoAway { last: 9, status: 0 }
        );
    }

    #[test]
    fn bad_frames_are_refused() {
        // Length beyond the bound: refused from the head alone, nothing buffered.
        let mut big = data(1, false, b"");
        big[5..8].copy_from_slice(&[0x10, 0, 0]);
        assert!(matches!(parse(&big), Err(FrameError::TooLarge(_))));
        let mut v2 = ping(1);
        v2[1] = 2;
        assert_eq!(parse(&v2), Err(FrameError::Version(2)));
        assert!(matches!(
            parse(&data(0, false, b"x")),
            Err(FrameError::Malformed(_))
        ));
        // A SYN_STREAM too short for its fixed fields.
        let short = control(SYN_STREAM, 0, &[0, 0, 0, 1]);
        assert!(matches!(parse(&short), Err(FrameError::Malformed(_))));
        let settings = control(SETTINGS, 0, &[0, 0, 0, 2, 0, 0, 0, 0]);
        assert!(matches!(parse(&settings), Err(FrameError::Malformed(_))));
        assert_eq!(
            parse(&control(42, 0, b"")).unwrap().unwrap().0,
            Frame::Other(42)
        );
    }
}
