//! Decoding a watch: the API server streams one JSON `WatchEvent` per line
//! (`{"type":"ADDED","object":{...}}`), including `BOOKMARK`s (only `metadata.resourceVersion` is
//! meaningful) and `ERROR`s carrying a `Status` (410 Expired: the resourceVersion is too old).

use super::error::ApiError;
use crate::manifest::unknown::decode as from_api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use std::io::{BufRead, BufReader, Read};
use std::marker::PhantomData;

/// Largest single event accepted (etcd caps objects at 1.5 MiB; leave room for JSON escaping).
const MAX_LINE: usize = 16 << 20;

/// What a watch consumer sees.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<T> {
    Added(T),
    Modified(T),
    Deleted(T),
    /// The stream has reached this resourceVersion; resume from here.
    Bookmark(String),
}

/// One line of a watch stream, its object left as text: k8s-openapi's `WatchEvent` goes through a
/// `serde_json::Value`, which would be one more copy of the Pod decoder in the binary
/// (`manifest::unknown::from_json`) and a tree built for every event.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize)]
struct Bookmark {
    metadata: BookmarkMeta,
}

#[derive(Deserialize)]
struct BookmarkMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

/// Decodes one line of a watch stream. An `ERROR` event becomes `Err` (410 for an expired version).
pub fn decode<T: DeserializeOwned>(line: &[u8]) -> Result<Event<T>, ApiError> {
    let bad = |e: serde_json::Error| ApiError::Decode(format!("watch event: {e}"));
    let ev: Envelope = serde_json::from_slice(line).map_err(bad)?;
    let object = ev.object.get().as_bytes();
    let typed = || from_api::<T>(object).map_err(bad);
    match ev.kind.as_str() {
        "ADDED" => Ok(Event::Added(typed()?)),
        "MODIFIED" => Ok(Event::Modified(typed()?)),
        "DELETED" => Ok(Event::Deleted(typed()?)),
        "BOOKMARK" => {
            let b = from_api::<Bookmark>(object).map_err(bad)?;
            Ok(Event::Bookmark(b.metadata.resource_version))
        }
        "ERROR" => match from_api::<Status>(object) {
            Ok(s) => Err(ApiError::from_watch_status(s)),
            Err(_) => Err(ApiError::Decode(format!(
                "watch error event: {}",
                ev.object.get()
            ))),
        },
        other => Err(ApiError::Decode(format!(
            "watch event of unknown type {other:?}"
        ))),
    }
}

/// An open watch: an iterator of events that ends when the server closes the stream.
pub struct WatchStream<T> {
    reader: BufReader<Box<dyn Read + Send>>,
    done: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T> WatchStream<T> {
    pub fn new(r: Box<dyn Read + Send>) -> Self {
        WatchStream {
            reader: BufReader::new(r),
            done: false,
            _t: PhantomData,
        }
    }
}

impl<T: DeserializeOwned> Iterator for WatchStream<T> {
    type Item = Result<Event<T>, ApiError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = match (&mut self.reader)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut line)
            {
                Ok(n) => n,
                Err(e) => {
                    self.done = true;
                    return Some(Err(ApiError::Transport(format!("watch: {e}"))));
                }
            };
            if n == 0 {
                self.done = true;
                return None;
            }
            if line.len() > MAX_LINE {
                self.done = true;
                return Some(Err(ApiError::Decode("watch event too large".into())));
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let r = decode(&line);
            if r.is_err() {
                // After an ERROR event or garbage the stream is not trustworthy: the caller restarts.
                self.done = true;
            }
            return Some(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn stream(s: &str) -> WatchStream<Pod> {
        WatchStream::new(Box::new(std::io::Cursor::new(s.as_bytes().to_vec())))
    }

    #[test]
    fn decodes_all_event_types() {
        let s = concat!(
            r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}}"#,
            "\n\n",
            r#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","resourceVersion":"6"}}}"#,
            "\n",
            r#"{"type":"BOOKMARK","object":{"apiVersion":"v1","kind":"Pod","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
            "\n",
            r#"{"type":"DELETED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","resourceVersion":"10"}}}"#,
            "\n"
        );
        let evs: Vec<_> = stream(s).collect::<Result<_, _>>().unwrap();
        assert_eq!(evs.len(), 4);
        assert!(matches!(&evs[0], Event::Added(p) if p.metadata.name.as_deref() == Some("a")));
        assert!(
            matches!(&evs[1], Event::Modified(p) if p.metadata.resource_version.as_deref() == Some("6"))
        );
        assert_eq!(evs[2], Event::Bookmark("9".into()));
        assert!(matches!(&evs[3], Event::Deleted(_)));
    }

    #[test]
    fn error_410_ends_the_stream() {
        let s = concat!(
            r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (7)","reason":"Expired","code":410}}"#,
            "\n",
            r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"}}}"#,
            "\n"
        );
        let mut st = stream(s);
        let e = st.next().unwrap().unwrap_err();
        assert!(e.is_gone(), "{e:?}");
        assert!(st.next().is_none());
    }

    #[test]
    fn garbage_and_partial_lines() {
        let mut st = stream("{\"type\":\"ADDED\",\"obj");
        assert!(matches!(st.next(), Some(Err(ApiError::Decode(_)))));
        assert!(st.next().is_none());
        assert!(stream("").next().is_none());
    }
}
