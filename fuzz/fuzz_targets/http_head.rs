//! The kubelet API's request heads: whatever bytes arrive, parsing never panics, stays within its
//! bounds, and yields only a request whose parts are what the rest of the server relies on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podunit::kubelet::http::{self, MAX_HEAD, MAX_HEADERS};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((req, used))) = http::parse_head(data) {
        assert!(used <= data.len() && used <= MAX_HEAD);
        assert!(req.headers.len() <= MAX_HEADERS);
        assert!(req.path.starts_with('/'));
        assert!(!req.path.contains('\0'));
        assert!(req.method.bytes().all(|b| b.is_ascii_uppercase()));
        assert!(req.headers.iter().all(|(n, _)| *n == n.to_ascii_lowercase()));
    }
    // The same bytes as a connection: one request after another until it ends or is refused.
    let mut r = data;
    let mut buf = Vec::new();
    for _ in 0..data.len() + 1 {
        match http::read_request(&mut r, &mut buf) {
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => break,
        }
    }
    assert!(buf.len() <= data.len());
});
