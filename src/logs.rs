//! A container's log from the journal: what `podunit logs` prints and what the kubelet API's
//! `/containerLogs` serves, one implementation.
//!
//! Entries are selected by the fields every container unit sets (`LogExtraFields=POD_NAMESPACE=
//! POD_NAME= CONTAINER_NAME=`) and read as journalctl's JSON, so each carries its own time
//! (`timestamps`, `sinceTime` to the microsecond). `previous` is the run before the current one:
//! systemd gives every run of a unit its own `_SYSTEMD_INVOCATION_ID` (journalctl 252 has no
//! `--invocation` yet, so the previous id is found in the journal).

use crate::generate::output::PodKey;
use k8s_openapi::jiff::Timestamp;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
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

/// The journalctl command line for a container's log, or for what came after `after` (a
/// cursor) when following. Pure, so its matches are tested.
pub fn journalctl_args(
    pod: &PodKey,
    container: &str,
    o: &LogOptions,
    after: Option<&str>,
) -> Vec<String> {
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
    match (after, o.tail_lines) {
        (Some(c), _) => v.push(format!("--after-cursor={c}")),
        (None, Some(n)) => v.push(format!("--lines={n}")),
        (None, None) => {}
    }
    // journalctl takes only one of `--since` and `--after-cursor`; the cursor is past the bound.
    if let (Some(us), None) = (o.since_micros, after) {
        // Whole seconds here; the exact bound is applied to each entry's own time.
        v.push(format!("--since=@{}", us.div_euclid(1_000_000)));
    }
    // Matches on different fields are ANDed by journalctl, and `+` ORs two such groups. The
    // unit's own entries (`_SYSTEMD_UNIT`) are the lines journald read only after the unit had
    // stopped (a short-lived container's last output): it then no longer finds the unit's
    // LogExtraFields= (POD_*, CONTAINER_NAME) to add to them.
    let invocation = o
        .invocation
        .as_ref()
        .map(|id| format!("_SYSTEMD_INVOCATION_ID={id}"));
    v.push(format!("POD_NAMESPACE={}", pod.namespace));
    v.push(format!("POD_NAME={}", pod.name));
    v.push(format!("CONTAINER_NAME={container}"));
    v.extend(invocation.clone());
    v.push("+".into());
    v.push(format!(
        "_SYSTEMD_UNIT={}",
        crate::translate::naming::container_service(&pod.namespace, &pod.name, container)
    ));
    v.extend(invocation);
    v
}

/// One journal entry as journalctl's JSON has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub cursor: String,
    /// Microseconds since the epoch.
    pub micros: i64,
    pub message: Vec<u8>,
}

/// One journal entry from a line of journalctl's JSON. A message that is not UTF-8 comes as an
/// array of bytes.
pub fn parse_entry(line: &[u8]) -> Option<Entry> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let micros: i64 = v["__REALTIME_TIMESTAMP"].as_str()?.parse().ok()?;
    let cursor = v["__CURSOR"].as_str()?.to_string();
    let msg = match &v["MESSAGE"] {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        serde_json::Value::Array(a) => a
            .iter()
            .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect::<Option<Vec<u8>>>()?,
        _ => Vec::new(),
    };
    Some(Entry {
        cursor,
        micros,
        message: msg,
    })
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
    let mut argv = journalctl_args(pod, container, &LogOptions::default(), None);
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

/// How often a followed log asks the journal for new entries.
const FOLLOW_PERIOD: Duration = Duration::from_millis(500);

/// Waits until journald has stored what it was sent so far (`journalctl --sync`), so that a read
/// right after a container ended has its last lines, as a runtime's log file has them once the
/// exit is reported. Best effort: without it the read is only as late as journald is.
pub fn sync_journal() {
    let _ = Command::new("journalctl")
        .arg("--sync")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Writes the container's log to `out` until it ends (or, following, until `out` fails or
/// `alive` says the reader has gone, asked twice a second).
///
/// Following runs journalctl again after the last cursor rather than `journalctl --follow`:
/// that one leaves its output in stdio's buffer while it waits on a pipe.
pub fn stream(
    pod: &PodKey,
    container: &str,
    o: &LogOptions,
    out: &mut dyn Write,
    alive: &dyn Fn() -> bool,
) -> Result<(), LogError> {
    // A finished run gets no more lines: following it would never end.
    let follow = o.follow && o.invocation.is_none();
    let mut left = o.limit_bytes.unwrap_or(u64::MAX);
    let mut cursor: Option<String> = None;
    loop {
        let argv = journalctl_args(pod, container, o, cursor.as_deref());
        match copy_batch(&argv, o, out, &mut left, &mut cursor)? {
            Batch::Done if follow => {}
            Batch::Done | Batch::Stop => return Ok(()),
        }
        std::thread::sleep(FOLLOW_PERIOD);
        if !alive() {
            return Ok(());
        }
    }
}

/// How a batch of entries ended.
enum Batch {
    /// journalctl had no more.
    Done,
    /// The reader went away or the byte limit was reached.
    Stop,
}

fn copy_batch(
    argv: &[String],
    o: &LogOptions,
    out: &mut dyn Write,
    left: &mut u64,
    cursor: &mut Option<String>,
) -> Result<Batch, LogError> {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(LogError::Journalctl)?;
    let mut r = BufReader::new(child.stdout.take().expect("piped"));
    let mut end = Batch::Done;
    loop {
        let mut line = Vec::new();
        match r.by_ref().take(MAX_ENTRY).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            // Longer than MAX_ENTRY: skipped whole.
            let mut rest = Vec::new();
            if r.read_until(b'\n', &mut rest).is_err() {
                break;
            }
            continue;
        }
        let Some(e) = parse_entry(&line) else {
            continue;
        };
        *cursor = Some(e.cursor);
        let Some(mut bytes) = format_entry(e.micros, &e.message, o) else {
            continue;
        };
        let last = bytes.len() as u64 >= *left;
        if last {
            bytes.truncate(*left as usize);
        }
        *left -= bytes.len() as u64;
        if out.write_all(&bytes).and_then(|_| out.flush()).is_err() || last {
            end = Batch::Stop;
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(end)
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
            invocation: Some("abc".into()),
            ..Default::default()
        };
        assert_eq!(
            journalctl_args(&k, "nginx", &o, None),
            vec![
                "journalctl",
                "--no-pager",
                "--quiet",
                "-o",
                "json",
                "--output-fields=MESSAGE",
                "--lines=5",
                "--since=@1700000000",
                "POD_NAMESPACE=default",
                "POD_NAME=web",
                "CONTAINER_NAME=nginx",
                "_SYSTEMD_INVOCATION_ID=abc",
                "+",
                "_SYSTEMD_UNIT=podunit-default_web_nginx.service",
                "_SYSTEMD_INVOCATION_ID=abc",
            ]
        );
        // Following on: what came after the last entry, the tail already shown.
        let a = journalctl_args(&k, "nginx", &o, Some("s=1;i=2"));
        assert!(a.contains(&"--after-cursor=s=1;i=2".to_string()));
        assert!(!a.iter().any(|x| x.starts_with("--lines")));
        // journalctl refuses --since with --after-cursor.
        assert!(!a.iter().any(|x| x.starts_with("--since")));
    }

    #[test]
    fn entries_parse_as_text_or_bytes() {
        let l =
            br#"{"__CURSOR":"s=1","__REALTIME_TIMESTAMP":"1700000000123456","MESSAGE":"hello"}"#;
        assert_eq!(
            parse_entry(l),
            Some(Entry {
                cursor: "s=1".into(),
                micros: 1_700_000_000_123_456,
                message: b"hello".to_vec()
            })
        );
        let b = br#"{"__CURSOR":"c","__REALTIME_TIMESTAMP":"1","MESSAGE":[104,255]}"#;
        assert_eq!(parse_entry(b).unwrap().message, vec![104, 255]);
        assert_eq!(parse_entry(br#"{"__CURSOR":"c","MESSAGE":"x"}"#), None);
        assert_eq!(
            parse_entry(br#"{"__REALTIME_TIMESTAMP":"1","MESSAGE":"x"}"#),
            None
        );
        assert_eq!(
            parse_entry(br#"{"__CURSOR":"c","__REALTIME_TIMESTAMP":"1","MESSAGE":[300]}"#),
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
