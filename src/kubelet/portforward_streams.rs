//! The streams of a `portforward.k8s.io` session (the kubelet's `httpstream.go`): each new
//! stream's headers checked, and streams paired by request into forwarded connections. Pure
//! and bounded, built without the `cli` feature for the fuzz target; the session itself is
//! [`super::portforward`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Forwarded connections (stream pairs, complete or not) open at once on one session.
pub const MAX_PAIRS: usize = 32;

/// The two streams of a forwarded connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Error,
    Data,
}

/// What a new stream's headers say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHead {
    pub kind: Kind,
    pub port: u16,
    /// The `requestID` pairing it with its other stream.
    pub request: String,
}

/// Reads a new stream's headers by the kubelet's rules (`httpStreamReceived`, `requestID`):
/// a `port` from 1 to 65535, a `streamType` of `error` or `data`; a client too old to send
/// `requestID` gets the kubelet's stand-in (the error stream's id, the data stream's id - 2:
/// right while such a client opens one connection at a time).
pub fn stream_head(id: u32, headers: &[(String, String)]) -> Result<StreamHead, String> {
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k == n)
            .map_or("", |(_, v)| v.as_str())
    };
    let port = get("port");
    if port.is_empty() {
        return Err("\"port\" header is required".into());
    }
    let port = parse_port(port)?;
    let kind = match get("streamtype") {
        "" => return Err("\"streamType\" header is required".into()),
        "error" => Kind::Error,
        "data" => Kind::Data,
        other => return Err(format!("invalid stream type {other:?}")),
    };
    let request = match (get("requestid"), kind) {
        ("", Kind::Error) => id.to_string(),
        ("", Kind::Data) => (i64::from(id) - 2).to_string(),
        (r, _) => r.to_string(),
    };
    Ok(StreamHead {
        kind,
        port,
        request,
    })
}

/// A port as Go's `strconv.ParseUint(s, 10, 16)` takes it, and with its messages.
fn parse_port(s: &str) -> Result<u16, String> {
    let why = if s.bytes().all(|b| b.is_ascii_digit()) {
        match s.parse::<u16>() {
            Ok(0) => return Err(format!("port {s:?} must be > 0")),
            Ok(p) => return Ok(p),
            Err(_) => "value out of range",
        }
    } else {
        "invalid syntax"
    };
    Err(format!(
        "unable to parse {s:?} as a port: strconv.ParseUint: parsing {s:?}: {why}"
    ))
}

/// A forwarded connection's streams, as they arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// The data stream's port (the one forwarded), else the error stream's.
    pub port: u16,
    pub error: Option<u32>,
    pub data: Option<u32>,
    pub created: Instant,
}

/// What to do with a new stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Added {
    /// Bad headers: reset it (the kubelet's `Reset()`), for this reason.
    Reset(String),
    /// Too many forwarded connections at once: refused.
    Refused,
    /// Accepted; its pair waits for the other stream.
    Pending,
    /// Accepted, but its pair has a stream of its kind: this message goes on the pair's error
    /// stream (when it has one), as the kubelet writes it.
    Duplicate { error: Option<u32>, message: String },
    /// Accepted, and the pair of this request is complete: forward it.
    Complete(String),
}

/// The pairs of one session by request id.
#[derive(Debug, Default)]
pub struct Pairs {
    pairs: BTreeMap<String, Pair>,
}

impl Pairs {
    /// Takes the new stream `id` with `headers`.
    pub fn add(&mut self, id: u32, headers: &[(String, String)], now: Instant) -> Added {
        let head = match stream_head(id, headers) {
            Ok(h) => h,
            Err(e) => return Added::Reset(e),
        };
        if !self.pairs.contains_key(&head.request) && self.pairs.len() >= MAX_PAIRS {
            return Added::Refused;
        }
        let pair = self.pairs.entry(head.request.clone()).or_insert(Pair {
            port: head.port,
            error: None,
            data: None,
            created: now,
        });
        let slot = match head.kind {
            Kind::Error => &mut pair.error,
            Kind::Data => &mut pair.data,
        };
        if slot.is_some() {
            let what = if head.kind == Kind::Error {
                "error"
            } else {
                "data"
            };
            return Added::Duplicate {
                error: pair.error,
                message: format!(
                    "error processing stream for request {}: {what} stream already assigned",
                    head.request
                ),
            };
        }
        *slot = Some(id);
        if head.kind == Kind::Data {
            pair.port = head.port;
        }
        if pair.error.is_some() && pair.data.is_some() {
            Added::Complete(head.request)
        } else {
            Added::Pending
        }
    }

    pub fn get(&self, request: &str) -> Option<&Pair> {
        self.pairs.get(request)
    }

    pub fn remove(&mut self, request: &str) -> Option<Pair> {
        self.pairs.remove(request)
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The request that stream `id` belongs to.
    pub fn request_of(&self, id: u32) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(_, p)| p.error == Some(id) || p.data == Some(id))
            .map(|(r, _)| r.as_str())
    }

    /// Removes the pairs still waiting for a stream `timeout` after their first; they and
    /// the kubelet's message for them.
    pub fn expire(&mut self, now: Instant, timeout: Duration) -> Vec<(Pair, String)> {
        let late: Vec<String> = self
            .pairs
            .iter()
            .filter(|(_, p)| p.error.is_none() || p.data.is_none())
            .filter(|(_, p)| now.duration_since(p.created) >= timeout)
            .map(|(r, _)| r.clone())
            .collect();
        late.into_iter()
            .filter_map(|r| {
                let p = self.pairs.remove(&r)?;
                let msg = format!("request {r}: timed out after {timeout:?} waiting for streams");
                Some((p, msg))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn stream_headers_follow_the_kubelet() {
        let ok = stream_head(
            1,
            &h(&[
                ("streamtype", "error"),
                ("port", "8080"),
                ("requestid", "0"),
            ]),
        );
        assert_eq!(
            ok,
            Ok(StreamHead {
                kind: Kind::Error,
                port: 8080,
                request: "0".into()
            })
        );
        let bad = |hs: &[(&str, &str)]| stream_head(1, &h(hs)).unwrap_err();
        assert_eq!(
            bad(&[("streamtype", "data")]),
            "\"port\" header is required"
        );
        assert_eq!(
            bad(&[("streamtype", "data"), ("port", "http")]),
            "unable to parse \"http\" as a port: strconv.ParseUint: parsing \"http\": invalid \
             syntax"
        );
        assert_eq!(
            bad(&[("streamtype", "data"), ("port", "70000")]),
            "unable to parse \"70000\" as a port: strconv.ParseUint: parsing \"70000\": value \
             out of range"
        );
        assert!(bad(&[("streamtype", "data"), ("port", "+80")]).contains("invalid syntax"));
        assert_eq!(
            bad(&[("streamtype", "data"), ("port", "0")]),
            "port \"0\" must be > 0"
        );
        assert_eq!(bad(&[("port", "80")]), "\"streamType\" header is required");
        assert_eq!(
            bad(&[("port", "80"), ("streamtype", "stdin")]),
            "invalid stream type \"stdin\""
        );
    }

    #[test]
    fn a_missing_request_id_pairs_consecutive_streams() {
        // An old client: error stream 5, data stream 7, one pair "5".
        let e = stream_head(5, &h(&[("streamtype", "error"), ("port", "80")])).unwrap();
        let d = stream_head(7, &h(&[("streamtype", "data"), ("port", "80")])).unwrap();
        assert_eq!((e.request.as_str(), d.request.as_str()), ("5", "5"));
        let mut pairs = Pairs::default();
        let now = Instant::now();
        let old = |t: &str| h(&[("streamtype", t), ("port", "80")]);
        assert_eq!(pairs.add(5, &old("error"), now), Added::Pending);
        assert_eq!(pairs.add(7, &old("data"), now), Added::Complete("5".into()));
        // A data stream 1 has the pseudo-id -1, paired with nothing.
        assert_eq!(pairs.add(1, &old("data"), now), Added::Pending);
        assert_eq!(pairs.request_of(1), Some("-1"));
    }

    #[test]
    fn pairs_complete_once_and_are_bounded() {
        let now = Instant::now();
        let s = |t: &str, port: &str, r: &str| {
            h(&[("streamtype", t), ("port", port), ("requestid", r)])
        };
        let mut pairs = Pairs::default();
        // Data first or error first: the pair is complete with the second, on the data port.
        assert_eq!(pairs.add(1, &s("data", "81", "a"), now), Added::Pending);
        assert_eq!(
            pairs.add(3, &s("error", "80", "a"), now),
            Added::Complete("a".into())
        );
        assert_eq!(pairs.get("a").unwrap().port, 81);
        assert_eq!(
            pairs.add(5, &s("data", "81", "a"), now),
            Added::Duplicate {
                error: Some(3),
                message: "error processing stream for request a: data stream already assigned"
                    .into()
            }
        );
        assert!(matches!(
            pairs.add(7, &s("data", "x", "b"), now),
            Added::Reset(_)
        ));
        for i in 1..MAX_PAIRS {
            let r = format!("r{i}");
            assert_eq!(
                pairs.add(9 + 2 * i as u32, &s("error", "80", &r), now),
                Added::Pending
            );
        }
        assert_eq!(pairs.len(), MAX_PAIRS);
        // A new request beyond the bound is refused; the other stream of a known one is not.
        assert_eq!(
            pairs.add(1001, &s("error", "80", "new"), now),
            Added::Refused
        );
        assert_eq!(
            pairs.add(1003, &s("data", "80", "r1"), now),
            Added::Complete("r1".into())
        );
        // Pairs left waiting time out; complete ones stay.
        let timeout = Duration::from_secs(30);
        let late = pairs.expire(now + timeout, timeout);
        assert_eq!(late.len(), MAX_PAIRS - 2);
        assert!(late[0].1.contains("timed out"), "{}", late[0].1);
        assert_eq!(pairs.len(), 2);
        assert!(pairs.get("a").is_some() && pairs.get("r1").is_some());
    }
}
