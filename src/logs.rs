//! A container's log from the journal: what `podunit logs` prints and what the kubelet API's
//! `/containerLogs` serves, one implementation.
//!
//! Entries are selected by the fields every container unit sets (`LogExtraFields=POD_NAMESPACE=
//! POD_NAME= CONTAINER_NAME=`) and read as journalctl's JSON, so each carries its own time
//! (`timestamps`, `sinceTime` to the microsecond). `previous` is the run before the current one:
//! systemd gives every run of a unit its own `_SYSTEMD_INVOCATION_ID` (journalctl 252 has no
//! `--invocation` yet, so the previous id is found in the journal).

use crate::localsync::generator_output::PodKey;
use k8s_openapi::jiff::Timestamp;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// What to show of a container's log (the kubelet's `PodLogOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub follow: bool,
    /// Only the last N lines.
    pub tail_lines: Option<u64>,
    /// Only entries at or after this time, in microseconds since the epoch.
    pub since_micros: Option<i64>,
    /// Each line prefixed with its RFC 3339 time and a space.
    pub timestamps: bool,
    /// Stop after this many bytes (the last line may be cut).
    pub limit_bytes: Option<u64>,
    /// The run to show (`_SYSTEMD_INVOCATION_ID`); None: every run.
    pub invocation: Option<String>,
}

/// Why a log could not be read.
#[derive(Debug)]
pub enum LogError {
    /// journalctl could not be started.
    Journalctl(std::io::Error),
    /// `previous` asked and there is no earlier run.
    NoPrevious { pod: PodKey, container: String },
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Journalctl(e) => write!(f, "cannot run journalctl: {e}"),
            LogError::NoPrevious { pod, container } => write!(
                f,
                "previous terminated container \"{container}\" in pod {pod} not found"
            ),
        }
    }
}

impl std::error::Error for LogError {}

/// The longest journal entry passed on; journald's own default `LineMax=` is 48 KiB.
const MAX_ENTRY: u64 = 1 << 20;

/// The journalctl command line for a container's log. Pure, so its matches are tested.
pub fn journalctl_args(pod: &PodKey, container: &str, o: &LogOptions) -> Vec<String> {
    let mut v: Vec<String> = [
        "journalctl",
        "--no-pager",
        "--quiet",
        "-o",
        "json",
        "--output-fields=MESSAGE",
    ]
    .map(String::from)
    .to_vec();
    // A finished run gets no more lines: following it would never end.
    if o.follow && o.invocation.is_none() {
        v.push("--follow".into());
    }
    if let Some(n) = o.tail_lines {
        v.push(format!("--lines={n}"));
    }
    if let Some(us) = o.since_micros {
        // Whole seconds here; the exact bound is applied to each entry's own time.
        v.push(format!("--since=@{}", us.div_euclid(1_000_000)));
    }
    // Matches on different fields are ANDed by journalctl.
    v.push(format!("POD_NAMESPACE={}", pod.namespace));
    v.push(format!("POD_NAME={}", pod.name));
    v.push(format!("CONTAINER_NAME={container}"));
    if let Some(id) = &o.invocation {
        v.push(format!("_SYSTEMD_INVOCATION_ID={id}"));
    }
    v
}

/// One journal entry's time (µs) and message from a line of journalctl's JSON. A message that
/// is not UTF-8 comes as an array of bytes.
pub fn parse_entry(line: &[u8]) -> Option<(i64, Vec<u8>)> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let t: i64 = v["__REALTIME_TIMESTAMP"].as_str()?.parse().ok()?;
    let msg = match &v["MESSAGE"] {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        serde_json::Value::Array(a) => a
            .iter()
            .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect::<Option<Vec<u8>>>()?,
        _ => Vec::new(),
    };
    Some((t, msg))
}

/// The bytes to print for one entry, or None when it is before `since`.
pub fn format_entry(micros: i64, msg: &[u8], o: &LogOptions) -> Option<Vec<u8>> {
    if o.since_micros.is_some_and(|s| micros < s) {
        return None;
    }
    let mut out = Vec::with_capacity(msg.len() + 32);
    if o.timestamps {
        let ts = Timestamp::from_microsecond(micros).unwrap_or_default();
        out.extend_from_slice(ts.to_string().as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(msg);
    out.push(b'\n');
    Some(out)
}

/// The invocation before `current` among the invocation ids in journal order. When the current
/// run has logged nothing yet, the last one logged is the previous run.
pub fn previous_invocation(ids_in_order: &[String], current: &str) -> Option<String> {
    let mut distinct: Vec<&str> = Vec::new();
    for id in ids_in_order {
        if distinct.last() != Some(&id.as_str()) && !id.is_empty() {
            distinct.retain(|d| d != id);
            distinct.push(id);
        }
    }
    match distinct.iter().position(|d| *d == current) {
        Some(0) => None,
        Some(i) => Some(distinct[i - 1].to_string()),
        None => distinct.last().map(|s| s.to_string()),
    }
}

/// The invocation id of the container's run before `current` (the unit's `InvocationID`).
pub fn find_previous(pod: &PodKey, container: &str, current: &str) -> Result<String, LogError> {
    let mut argv = journalctl_args(pod, container, &LogOptions::default());
    argv.retain(|a| !a.starts_with("--output-fields="));
    argv.push("--output-fields=_SYSTEMD_INVOCATION_ID".into());
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(LogError::Journalctl)?;
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["_SYSTEMD_INVOCATION_ID"].as_str().map(str::to_string))
        .collect();
    previous_invocation(&ids, current).ok_or_else(|| LogError::NoPrevious {
        pod: pod.clone(),
        container: container.to_string(),
    })
}

/// Writes the container's log to `out` until it ends (or, following, until `out` fails or
/// `alive` says the reader has gone, asked at least once a second).
pub fn stream(
    pod: &PodKey,
    container: &str,
    o: &LogOptions,
    out: &mut dyn Write,
    alive: &dyn Fn() -> bool,
) -> Result<(), LogError> {
    let argv = journalctl_args(pod, container, o);
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(LogError::Journalctl)?;
    let stdout = child.stdout.take().expect("piped");
    // The reader thread blocks on journalctl; this one watches the client meanwhile.
    let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(64);
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        loop {
            let mut line = Vec::new();
            match r.by_ref().take(MAX_ENTRY).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if line.last() != Some(&b'\n') {
                        // Longer than MAX_ENTRY: skip the rest of it.
                        let mut rest = Vec::new();
                        if r.read_until(b'\n', &mut rest).is_err() {
                            return;
                        }
                    }
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut left = o.limit_bytes.unwrap_or(u64::MAX);
    loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(line) => {
                let Some((t, msg)) = parse_entry(&line) else {
                    continue;
                };
                let Some(mut bytes) = format_entry(t, &msg, o) else {
                    continue;
                };
                if bytes.len() as u64 >= left {
                    bytes.truncate(left as usize);
                    left = 0;
                } else {
                    left -= bytes.len() as u64;
                }
                if out.write_all(&bytes).and_then(|_| out.flush()).is_err() || left == 0 {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if !alive() {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    drop(rx);
    let _ = reader.join();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journalctl_matches_the_unit_fields() {
        let k = PodKey::new("default", "web");
        let o = LogOptions {
            follow: true,
            tail_lines: Some(5),
            since_micros: Some(1_700_000_000_500_000),
            ..Default::default()
        };
        assert_eq!(
            journalctl_args(&k, "nginx", &o),
            vec![
                "journalctl",
                "--no-pager",
                "--quiet",
                "-o",
                "json",
                "--output-fields=MESSAGE",
                "--follow",
                "--lines=5",
                "--since=@1700000000",
                "POD_NAMESPACE=default",
                "POD_NAME=web",
                "CONTAINER_NAME=nginx",
            ]
        );
        // A previous run is complete: never followed.
        let prev = LogOptions {
            follow: true,
            invocation: Some("abc".into()),
            ..Default::default()
        };
        let a = journalctl_args(&k, "nginx", &prev);
        assert!(!a.contains(&"--follow".to_string()));
        assert_eq!(a.last().unwrap(), "_SYSTEMD_INVOCATION_ID=abc");
    }

    #[test]
    fn entries_parse_as_text_or_bytes() {
        let l = br#"{"__REALTIME_TIMESTAMP":"1700000000123456","MESSAGE":"hello"}"#;
        assert_eq!(
            parse_entry(l),
            Some((1_700_000_000_123_456, b"hello".to_vec()))
        );
        let b = br#"{"__REALTIME_TIMESTAMP":"1","MESSAGE":[104,255]}"#;
        assert_eq!(parse_entry(b), Some((1, vec![104, 255])));
        assert_eq!(parse_entry(br#"{"MESSAGE":"x"}"#), None);
        assert_eq!(
            parse_entry(br#"{"__REALTIME_TIMESTAMP":"1","MESSAGE":[300]}"#),
            None
        );
        assert_eq!(parse_entry(b"not json"), None);
    }

    #[test]
    fn formatting_applies_since_and_timestamps() {
        let o = LogOptions {
            timestamps: true,
            since_micros: Some(1_700_000_000_000_001),
            ..Default::default()
        };
        assert_eq!(format_entry(1_700_000_000_000_000, b"x", &o), None);
        assert_eq!(
            format_entry(1_700_000_000_123_456, b"x", &o).unwrap(),
            b"2023-11-14T22:13:20.123456Z x\n"
        );
        assert_eq!(
            format_entry(5, b"plain", &LogOptions::default()).unwrap(),
            b"plain\n"
        );
    }

    #[test]
    fn previous_invocation_is_the_run_before() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            previous_invocation(&ids(&["a", "a", "b", "b", "c"]), "c").as_deref(),
            Some("b")
        );
        // The current run has not logged yet: the last one that did is the previous.
        assert_eq!(
            previous_invocation(&ids(&["a", "b"]), "c").as_deref(),
            Some("b")
        );
        assert_eq!(previous_invocation(&ids(&["c"]), "c"), None);
        assert_eq!(previous_invocation(&ids(&[]), "c"), None);
    }
}
