//! The kubelet API's SPDY/3.1 frames and header blocks (`src/kubelet/spdy`): whatever bytes
//! arrive, parsing never panics or hangs, every frame stays within its bounds, and header blocks
//! (inflated through one zlib stream, as a connection's are) never yield more than the limits;
//! the streams they open, paired as a port-forward session pairs them, stay within its bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podunit::kubelet::portforward_streams::{MAX_PAIRS, Pairs};
use podunit::kubelet::spdy::headers::{Inflater, MAX_HEADERS, parse_pairs};
use podunit::kubelet::spdy::{self, FRAME_HEAD, Frame, MAX_PAYLOAD};

fuzz_target!(|data: &[u8]| {
    // As a connection: frames back to back, the header blocks through one inflater.
    let mut inflate = Inflater::default();
    let mut pairs = Pairs::default();
    let now = std::time::Instant::now();
    let mut rest = data;
    while let Ok(Some((frame, used))) = spdy::parse(rest) {
        assert!(used >= FRAME_HEAD && used <= rest.len() && used <= FRAME_HEAD + MAX_PAYLOAD);
        match frame {
            Frame::SynStream { stream, block, .. } => {
                if let Ok(headers) = inflate.block(block) {
                    assert!(headers.len() <= MAX_HEADERS);
                    pairs.add(stream, &headers, now);
                    assert!(pairs.len() <= MAX_PAIRS);
                }
            }
            Frame::SynReply { block, .. } | Frame::Headers { block, .. } => {
                if let Ok(pairs) = inflate.block(block) {
                    assert!(pairs.len() <= MAX_HEADERS);
                    assert!(pairs.iter().all(|(n, _)| !n.is_empty()));
                }
            }
            Frame::Data { stream, data, .. } => {
                assert!(stream != 0 && data.len() <= MAX_PAYLOAD);
            }
            _ => {}
        }
        rest = &rest[used..];
    }
    // The same bytes as an inflated block.
    if let Ok(pairs) = parse_pairs(data) {
        assert!(pairs.len() <= MAX_HEADERS);
    }
});
