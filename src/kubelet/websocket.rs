//! WebSocket (RFC 6455) framing for the kubelet's streaming protocols over WebSocket
//! (`v4.channel.k8s.io`, `v5.channel.k8s.io`, `base64.channel.k8s.io`): frames parsed from
//! bytes (bounded: they are hostile input), fragmented messages put together, and the
//! channel prefix of each message.
//!
//! As a server must: every client frame is masked (an unmasked one is a protocol error), no
//! reserved bit is set (no extension is negotiated), control frames are short and whole, a
//! continuation belongs to a started message, and a frame or message larger than the limit is
//! refused before it is buffered. Frames the server sends are never masked.
//!
//! Pure std, so the fuzz target can build it.

/// The largest frame payload accepted; larger frames are refused (close 1009).
pub const MAX_FRAME: usize = 1 << 20;
/// The largest message (all its fragments) accepted.
pub const MAX_MESSAGE: usize = 1 << 20;
/// The magic of the opening handshake (RFC 6455 §1.3).
pub const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Opcodes.
pub const CONTINUATION: u8 = 0x0;
pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const PONG: u8 = 0xa;

/// Close status codes (RFC 6455 §7.4.1).
pub const NORMAL: u16 = 1000;
pub const PROTOCOL_ERROR: u16 = 1002;
pub const TOO_BIG: u16 = 1009;

/// One frame, unmasked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub fin: bool,
    pub opcode: u8,
    pub payload: Vec<u8>,
}

/// Why the peer's bytes were refused: each closes the connection with its code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsError {
    Protocol(&'static str),
    TooBig,
}

impl WsError {
    /// The close code to send.
    pub fn code(&self) -> u16 {
        match self {
            WsError::Protocol(_) => PROTOCOL_ERROR,
            WsError::TooBig => TOO_BIG,
        }
    }
}

/// Parses one client frame at the start of `buf`: `Ok(None)` until it is all there, else the
/// frame and the bytes it took.
pub fn parse(buf: &[u8], max_frame: usize) -> Result<Option<(Frame, usize)>, WsError> {
    let [b0, b1, ..] = *buf else {
        return Ok(None);
    };
    if b0 & 0x70 != 0 {
        return Err(WsError::Protocol("reserved bits set"));
    }
    let fin = b0 & 0x80 != 0;
    let opcode = b0 & 0x0f;
    match opcode {
        CONTINUATION | TEXT | BINARY | CLOSE | PING | PONG => {}
        _ => return Err(WsError::Protocol("unknown opcode")),
    }
    if b1 & 0x80 == 0 {
        return Err(WsError::Protocol("client frames must be masked"));
    }
    let control = opcode >= CLOSE;
    let (len, mut at) = match b1 & 0x7f {
        126 => match buf.get(2..4) {
            Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(b) => {
                let n = u64::from_be_bytes(b.try_into().expect("8 bytes"));
                if n >> 63 != 0 {
                    return Err(WsError::Protocol("length's top bit set"));
                }
                (n, 10)
            }
            None => return Ok(None),
        },
        n => (u64::from(n), 2),
    };
    if control && (len > 125 || !fin) {
        return Err(WsError::Protocol(
            "control frames are short and unfragmented",
        ));
    }
    if len > max_frame as u64 {
        return Err(WsError::TooBig);
    }
    let len = len as usize;
    let Some(mask) = buf.get(at..at + 4) else {
        return Ok(None);
    };
    let mask = [mask[0], mask[1], mask[2], mask[3]];
    at += 4;
    let Some(data) = buf.get(at..at + len) else {
        return Ok(None);
    };
    let payload = data
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ mask[i % 4])
        .collect();
    Ok(Some((
        Frame {
            fin,
            opcode,
            payload,
        },
        at + len,
    )))
}

/// A server frame: whole (FIN), unmasked.
pub fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= 0xffff => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

/// A frame as a client sends it, masked with `mask` (for the tests and the fuzz target: the
/// server reads these and never writes one).
pub fn client_frame(fin: bool, opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut out = frame(opcode, payload);
    out[0] = (if fin { 0x80 } else { 0 }) | opcode;
    out[1] |= 0x80;
    let at = out.len() - payload.len();
    out.splice(at..at, mask);
    for (i, b) in out[at + 4..].iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    out
}

/// A close frame with its code (and no reason).
pub fn close_frame(code: u16) -> Vec<u8> {
    frame(CLOSE, &code.to_be_bytes())
}

/// What the connection carries, message by message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Text(Vec<u8>),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong,
    /// The peer's close code, if it gave one.
    Close(Option<u16>),
}

/// Puts fragmented messages together; control frames pass through between fragments.
#[derive(Debug, Default)]
pub struct Assembler {
    started: Option<u8>,
    buf: Vec<u8>,
}

impl Assembler {
    /// Takes one frame; a message once it is whole.
    pub fn push(&mut self, f: Frame, max_message: usize) -> Result<Option<Message>, WsError> {
        match f.opcode {
            PING => return Ok(Some(Message::Ping(f.payload))),
            PONG => return Ok(Some(Message::Pong)),
            CLOSE => {
                let code = match f.payload.len() {
                    0 => None,
                    1 => return Err(WsError::Protocol("close payload of 1 byte")),
                    _ => Some(u16::from_be_bytes([f.payload[0], f.payload[1]])),
                };
                return Ok(Some(Message::Close(code)));
            }
            CONTINUATION if self.started.is_none() => {
                return Err(WsError::Protocol("continuation of no message"));
            }
            TEXT | BINARY if self.started.is_some() => {
                return Err(WsError::Protocol("new message inside a fragmented one"));
            }
            _ => {}
        }
        if self.buf.len() + f.payload.len() > max_message {
            return Err(WsError::TooBig);
        }
        if f.opcode != CONTINUATION {
            self.started = Some(f.opcode);
        }
        self.buf.extend_from_slice(&f.payload);
        if !f.fin {
            return Ok(None);
        }
        let data = std::mem::take(&mut self.buf);
        Ok(match self.started.take() {
            Some(TEXT) => Some(Message::Text(data)),
            _ => Some(Message::Binary(data)),
        })
    }
}

/// The protocols exec and attach speak over WebSocket, as the kubelet's wsstream names them
/// (`""`: the client offered none; binary channels, the oldest status). `v5` is `v4` with the
/// close signal ([`CLOSE_CHANNEL`]); the `v4` ones carry the status as a `metav1.Status`.
pub const CHANNEL_PROTOCOLS: [&str; 6] = [
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
    "",
];

/// The protocols port-forward speaks over WebSocket (the kubelet's `portforward/websocket.go`).
pub const PORT_FORWARD_PROTOCOLS: [&str; 3] = ["v4.channel.k8s.io", "v4.base64.channel.k8s.io", ""];

/// The protocol to speak: the first of the client's (`Sec-WebSocket-Protocol`, comma-separated;
/// only its first line, as Go's `Header.Get` reads it) that is in `supported`, in the client's
/// order as wsstream's handshake takes them; `""` when the client offers none.
pub fn negotiate(offered: Option<&str>, supported: &[&'static str]) -> Option<&'static str> {
    let offered: Vec<&str> = match offered.map(str::trim) {
        None | Some("") => vec![""],
        Some(v) => v.split(',').map(str::trim).collect(),
    };
    offered
        .iter()
        .find_map(|o| supported.iter().find(|p| *p == o).copied())
}

/// v5's close-stream signal: a message on this channel names the stream that has ended.
pub const CLOSE_CHANNEL: u8 = 255;

/// A channel message: its channel and data (base64 protocols: an ASCII digit, then base64).
pub fn channel_message(protocol: &str, m: &Message) -> Option<(u8, Vec<u8>)> {
    let base64 = protocol.contains("base64");
    match m {
        Message::Binary(b) if !base64 => {
            let (&ch, data) = b.split_first()?;
            Some((ch, data.to_vec()))
        }
        Message::Text(t) if base64 => {
            let (&ch, data) = t.split_first()?;
            // Any byte from '0' on: which channels exist is the session's business.
            let ch = ch.checked_sub(b'0')?;
            Some((ch, decode_base64(data)?))
        }
        _ => None,
    }
}

/// A frame carrying `data` on `channel`.
pub fn channel_frame(protocol: &str, channel: u8, data: &[u8]) -> Vec<u8> {
    if protocol.contains("base64") {
        // Channels past 207 wrap, as wsstream's byte arithmetic does (none are used).
        let mut m = vec![b'0'.wrapping_add(channel)];
        m.extend_from_slice(encode_base64(data).as_bytes());
        frame(TEXT, &m)
    } else {
        let mut m = Vec::with_capacity(data.len() + 1);
        m.push(channel);
        m.extend_from_slice(data);
        frame(BINARY, &m)
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (kept here so the codec stays pure std).
pub fn encode_base64(data: &[u8]) -> String {
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

fn decode_base64(s: &[u8]) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for (k, c) in s.chunks(4).enumerate() {
        let last = k + 1 == s.len() / 4;
        let pad = c.iter().rev().take_while(|&&b| b == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &b in &c[..4 - pad] {
            let v = B64.iter().position(|&x| x == b)? as u32;
            n = (n << 6) | v;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame.
    fn client(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        client_frame(fin, opcode, payload, [0x37, 0xfa, 0x21, 0x3d])
    }

    fn parse_all(mut b: &[u8]) -> Result<Vec<Message>, WsError> {
        let mut a = Assembler::default();
        let mut out = Vec::new();
        while let Some((f, used)) = parse(b, MAX_FRAME)? {
            b = &b[used..];
            if let Some(m) = a.push(f, MAX_MESSAGE)? {
                out.push(m);
            }
        }
        assert!(b.is_empty(), "left over");
        Ok(out)
    }

    #[test]
    fn the_rfc_example_and_every_length_form() {
        // RFC 6455 §5.7: a masked "Hello".
        let hello = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        assert_eq!(
            parse_all(&hello).unwrap(),
            vec![Message::Text(b"Hello".to_vec())]
        );
        for n in [0, 125, 126, 65535, 65536] {
            let data = vec![7u8; n];
            let (f, used) = parse(&client(true, BINARY, &data), MAX_FRAME)
                .unwrap()
                .unwrap();
            assert_eq!(
                (f.payload.len(), used),
                (n, client(true, BINARY, &data).len())
            );
            // The server's own frames, read back the way a client would (unmasked).
            let out = frame(BINARY, &data);
            let hdr = match n {
                n if n < 126 => 2,
                n if n <= 0xffff => 4,
                _ => 10,
            };
            assert_eq!(out.len(), hdr + n);
            assert_eq!(out[1] & 0x80, 0, "server frames are not masked");
        }
    }

    #[test]
    fn partial_frames_wait_for_more() {
        let whole = client(true, BINARY, &[1u8; 300]);
        for cut in 0..whole.len() {
            assert_eq!(
                parse(&whole[..cut], MAX_FRAME).unwrap(),
                None,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn fragments_join_and_control_frames_pass_between_them() {
        let mut b = client(false, BINARY, b"\x01ab");
        b.extend(client(true, PING, b"p"));
        b.extend(client(false, CONTINUATION, b"cd"));
        b.extend(client(true, CONTINUATION, b"e"));
        b.extend(client(true, CLOSE, &1000u16.to_be_bytes()));
        assert_eq!(
            parse_all(&b).unwrap(),
            vec![
                Message::Ping(b"p".to_vec()),
                Message::Binary(b"\x01abcde".to_vec()),
                Message::Close(Some(1000)),
            ]
        );
    }

    #[test]
    fn protocol_errors_are_refused() {
        let unmasked = frame(BINARY, b"x");
        assert_eq!(
            parse(&unmasked, MAX_FRAME),
            Err(WsError::Protocol("client frames must be masked"))
        );
        let mut rsv = client(true, BINARY, b"x");
        rsv[0] |= 0x40;
        assert!(matches!(parse(&rsv, MAX_FRAME), Err(WsError::Protocol(_))));
        let mut op = client(true, BINARY, b"x");
        op[0] = 0x83;
        assert!(matches!(parse(&op, MAX_FRAME), Err(WsError::Protocol(_))));
        assert!(matches!(
            parse(&client(false, PING, b""), MAX_FRAME),
            Err(WsError::Protocol(_))
        ));
        assert!(matches!(
            parse(&client(true, PING, &[0; 126]), MAX_FRAME),
            Err(WsError::Protocol(_))
        ));
        assert!(matches!(
            parse_all(&client(true, CONTINUATION, b"x")),
            Err(WsError::Protocol(_))
        ));
        let mut two = client(false, TEXT, b"a");
        two.extend(client(true, TEXT, b"b"));
        assert!(matches!(parse_all(&two), Err(WsError::Protocol(_))));
        assert!(matches!(
            parse_all(&client(true, CLOSE, b"x")),
            Err(WsError::Protocol(_))
        ));
        let mut huge = vec![0x82, 0xff];
        huge.extend_from_slice(&(1u64 << 63).to_be_bytes());
        assert!(matches!(parse(&huge, MAX_FRAME), Err(WsError::Protocol(_))));
    }

    #[test]
    fn oversize_is_refused_before_it_is_buffered() {
        // Only the header of a 1 GiB frame: refused at once.
        let mut big = vec![0x82, 0xff];
        big.extend_from_slice(&(1u64 << 30).to_be_bytes());
        assert_eq!(parse(&big, MAX_FRAME), Err(WsError::TooBig));
        assert_eq!(WsError::TooBig.code(), 1009);
        // Fragments each under the frame limit, together over the message limit.
        let mut a = Assembler::default();
        let f = |fin, op| Frame {
            fin,
            opcode: op,
            payload: vec![0; 600],
        };
        assert_eq!(a.push(f(false, BINARY), 1000), Ok(None));
        assert_eq!(a.push(f(true, CONTINUATION), 1000), Err(WsError::TooBig));
    }

    #[test]
    fn channels_and_their_encodings() {
        let m = Message::Binary(b"\x00hi".to_vec());
        assert_eq!(
            channel_message("v4.channel.k8s.io", &m),
            Some((0, b"hi".to_vec()))
        );
        assert_eq!(
            channel_frame("v5.channel.k8s.io", 1, b"out"),
            frame(BINARY, b"\x01out")
        );
        let close = Message::Binary(vec![CLOSE_CHANNEL, 0]);
        assert_eq!(
            channel_message("v5.channel.k8s.io", &close),
            Some((CLOSE_CHANNEL, vec![0]))
        );
        let t = Message::Text(b"0aGk=".to_vec());
        assert_eq!(
            channel_message("base64.channel.k8s.io", &t),
            Some((0, b"hi".to_vec()))
        );
        assert_eq!(
            channel_frame("base64.channel.k8s.io", 2, b"err"),
            frame(TEXT, b"2ZXJy")
        );
        assert_eq!(
            channel_message("base64.channel.k8s.io", &Message::Text(b"/".to_vec())),
            None
        );
        assert_eq!(
            channel_message(
                "v4.base64.channel.k8s.io",
                &Message::Text(b":AQ==".to_vec())
            ),
            Some((10, vec![1]))
        );
        assert_eq!(
            channel_message("v4.channel.k8s.io", &Message::Binary(vec![])),
            None
        );
        for s in ["", "f", "fo", "foo", "foob", "fooba", "foobar"] {
            let e = encode_base64(s.as_bytes());
            assert_eq!(decode_base64(e.as_bytes()).unwrap(), s.as_bytes(), "{e}");
        }
        assert_eq!(encode_base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(decode_base64(b"Zm=v"), None);
        assert_eq!(decode_base64(b"Zg==Zg=="), None);
    }

    #[test]
    fn the_clients_first_known_protocol_is_spoken() {
        let all = &CHANNEL_PROTOCOLS;
        assert_eq!(
            negotiate(Some("v4.channel.k8s.io, v5.channel.k8s.io"), all),
            Some("v4.channel.k8s.io")
        );
        assert_eq!(
            negotiate(Some("x, v5.channel.k8s.io"), all),
            Some("v5.channel.k8s.io")
        );
        assert_eq!(negotiate(Some("v9.channel.k8s.io"), all), None);
        // Nothing offered: the empty protocol, where it is served.
        assert_eq!(negotiate(None, all), Some(""));
        assert_eq!(negotiate(Some(" "), all), Some(""));
        // Port-forward has no v5 and no unversioned channel protocols.
        assert_eq!(
            negotiate(Some("v5.channel.k8s.io"), &PORT_FORWARD_PROTOCOLS),
            None
        );
        assert_eq!(
            negotiate(Some("SPDY/3.1+portforward.k8s.io"), &PORT_FORWARD_PROTOCOLS),
            None
        );
    }
}
