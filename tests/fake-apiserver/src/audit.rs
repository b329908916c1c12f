//! A record of every request (method, path, query, user, status code), kept in memory for tests
//! and optionally appended to a file as JSON lines: tests can assert how a client talks to the API
//! (no redundant status writes, no hammering while the server is down), as an audit log would show.

use serde_json::json;
use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

/// How many records are kept in memory; older ones are dropped.
const KEEP: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Seconds since the Unix epoch.
    pub time: i64,
    /// When the request was received, µs since the Unix epoch (benchmarks time status writes).
    pub time_us: i64,
    pub method: String,
    pub path: String,
    /// Decoded query parameters, `k=v` joined with `&`.
    pub query: String,
    /// The authenticated user, or "" when authentication failed.
    pub user: String,
    /// The HTTP status (200 for a watch, whatever its events).
    pub code: u16,
    /// `metadata.resourceVersion` of the object answered, "" when none: ties a write to the
    /// watch event it caused.
    pub resource_version: String,
}

impl Record {
    /// Whether this was a watch request.
    pub fn is_watch(&self) -> bool {
        self.query
            .split('&')
            .any(|p| p == "watch=1" || p == "watch=true")
    }
}

#[derive(Default)]
pub struct Audit {
    records: Mutex<VecDeque<Record>>,
    file: Mutex<Option<std::fs::File>>,
}

impl Audit {
    /// Also append every record to `path` (created if missing).
    pub fn log_to(&self, path: &Path) -> std::io::Result<()> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        *self.file.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
        Ok(())
    }

    pub fn record(&self, r: Record) {
        if let Some(f) = self.file.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            let line = json!({"time": r.time, "timeUs": r.time_us, "method": r.method, "path": r.path, "query": r.query, "user": r.user, "code": r.code, "resourceVersion": r.resource_version});
            let _ = writeln!(f, "{line}");
        }
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() >= KEEP {
            records.pop_front();
        }
        records.push_back(r);
    }

    pub fn records(&self) -> Vec<Record> {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    pub fn clear(&self) {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
