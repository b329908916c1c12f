//! The kubelet API's WebSocket frames (`src/kubelet/websocket.rs`): any bytes as what a client
//! sends on an upgraded exec, attach or port-forward connection, frames back to back, put
//! together into messages and read as channel messages of every protocol: never panics or hangs,
//! a frame never takes more than its bytes or carries more than the frame limit, a message never
//! more than the message limit, a refusal carries a close code of RFC 6455 (1002 or 1009). And
//! the other way: whatever message was read, framed as a client frames it, reads back the same,
//! and what the node writes on a channel reads back as that channel's bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podunit::kubelet::websocket::{
    self, Assembler, BINARY, CHANNEL_PROTOCOLS, MAX_FRAME, MAX_MESSAGE, Message,
    PORT_FORWARD_PROTOCOLS,
};

fuzz_target!(|data: &[u8]| {
    let mut assembler = Assembler::default();
    let mut rest = data;
    let mut messages = Vec::new();
    loop {
        match websocket::parse(rest, MAX_FRAME) {
            Ok(Some((frame, used))) => {
                assert!(used >= 6 && used <= rest.len());
                assert!(frame.payload.len() <= MAX_FRAME && frame.payload.len() < used);
                rest = &rest[used..];
                match assembler.push(frame, MAX_MESSAGE) {
                    Ok(Some(m)) => messages.push(m),
                    Ok(None) => {}
                    Err(e) => {
                        assert!(matches!(e.code(), 1002 | 1009));
                        break;
                    }
                }
            }
            Ok(None) => break,
            Err(e) => {
                assert!(matches!(e.code(), 1002 | 1009));
                break;
            }
        }
    }
    let mask = [data.first().copied().unwrap_or(0), 0x5a, 0xa5, 0xff];
    for m in &messages {
        let (opcode, payload) = match m {
            Message::Text(p) => (websocket::TEXT, p),
            Message::Binary(p) => (BINARY, p),
            _ => continue,
        };
        assert!(payload.len() <= MAX_MESSAGE);
        let framed = websocket::client_frame(true, opcode, payload, mask);
        let (back, used) = websocket::parse(&framed, MAX_FRAME).unwrap().unwrap();
        assert_eq!((back.opcode, &back.payload, used), (opcode, payload, framed.len()));
        for protocol in CHANNEL_PROTOCOLS.iter().chain(&PORT_FORWARD_PROTOCOLS) {
            let Some((ch, bytes)) = websocket::channel_message(protocol, m) else {
                continue;
            };
            assert!(bytes.len() <= payload.len());
            // What the node writes on that channel, read back as a client reads it.
            let out = websocket::channel_frame(protocol, ch, &bytes);
            let hdr = match out[1] {
                126 => 4,
                127 => 10,
                _ => 2,
            };
            let msg = match out[0] & 0x0f {
                websocket::TEXT => Message::Text(out[hdr..].to_vec()),
                _ => Message::Binary(out[hdr..].to_vec()),
            };
            assert_eq!(
                websocket::channel_message(protocol, &msg),
                Some((ch, bytes.clone()))
            );
        }
    }
    // The same bytes as a Sec-WebSocket-Protocol header: the protocol spoken is one offered.
    if let Ok(offered) = std::str::from_utf8(data) {
        if let Some(p) = websocket::negotiate(Some(offered), &CHANNEL_PROTOCOLS) {
            assert!(p.is_empty() || offered.split(',').any(|o| o.trim() == p));
        }
    }
});
