//! The journal's account of a container that did not start ([`crate::status::start_error`]):
//! the child systemd forked for the unit logs which step failed before `execve()` and why
//! (`SD_MESSAGE_SPAWN_FAILED`, with `EXECUTABLE=` and `ERRNO=`), in the unit's cgroup, so
//! journald files it under the run's `_SYSTEMD_INVOCATION_ID`. Read with journalctl for the
//! units whose exit status says a step failed, and kept per run (a run's account never changes).

use crate::status::start_error::Detail;
use crate::status::unit::UnitState;
use std::collections::HashMap;
use std::process::Command;
use std::sync::Mutex;

/// systemd's "Failed at step %s spawning %s" message id.
pub const SPAWN_FAILED: &str = "641257651c1b4ec9a8624d7a40a9e1e7";

/// The journalctl arguments for the spawn failure of `unit`'s run `invocation` (the last one
/// logged when the run is not known). The match on the trusted `_SYSTEMD_UNIT=` keeps out
/// entries other units' processes could write.
pub fn journal_args(unit: &str, invocation: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "--no-pager",
        "--quiet",
        "--output=json",
        "--output-fields=EXECUTABLE,ERRNO",
        "--reverse",
        "--lines=1",
    ]
    .map(String::from)
    .to_vec();
    a.push(format!("MESSAGE_ID={SPAWN_FAILED}"));
    a.push(format!("_SYSTEMD_UNIT={unit}"));
    if !invocation.is_empty() {
        a.push(format!("_SYSTEMD_INVOCATION_ID={invocation}"));
    }
    a
}

/// The first entry of journalctl's JSON lines, as [`journal_args`] asks for it.
pub fn parse(text: &str) -> Option<Detail> {
    let v: serde_json::Value = serde_json::from_str(text.lines().next()?).ok()?;
    let executable = v.get("EXECUTABLE")?.as_str()?.to_string();
    let errno = v
        .get("ERRNO")
        .and_then(|e| e.as_str())
        .and_then(|e| e.parse().ok());
    Some(Detail { executable, errno })
}

/// Accounts already read, by invocation ID.
static SEEN: Mutex<Option<HashMap<String, Detail>>> = Mutex::new(None);

fn read(unit: &str, invocation: &str) -> Option<Detail> {
    if let Some(d) = SEEN
        .lock()
        .ok()?
        .as_ref()
        .and_then(|m| m.get(invocation).cloned())
    {
        return Some(d);
    }
    let out = Command::new("journalctl")
        .args(journal_args(unit, invocation))
        .output()
        .ok()?;
    let d = parse(&String::from_utf8_lossy(&out.stdout))?;
    if !invocation.is_empty() {
        let mut seen = SEEN.lock().ok()?;
        let map = seen.get_or_insert_with(HashMap::new);
        if map.len() >= 256 {
            map.clear();
        }
        map.insert(invocation.to_string(), d.clone());
    }
    Some(d)
}

/// Fills in the journal's account for every unit whose last run did not start.
pub fn fill(units: &mut HashMap<String, UnitState>) {
    for u in units.values_mut().filter(|u| u.start_failed()) {
        u.start_error = read(&u.name, &u.invocation_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_of_the_run_from_its_own_unit() {
        let a = journal_args("podunit-default_app_main.service", "ab01");
        assert!(a.contains(&format!("MESSAGE_ID={SPAWN_FAILED}")));
        assert!(a.contains(&"_SYSTEMD_UNIT=podunit-default_app_main.service".to_string()));
        assert!(a.contains(&"_SYSTEMD_INVOCATION_ID=ab01".to_string()));
        assert!(
            !journal_args("x.service", "")
                .iter()
                .any(|x| x.contains("INVOCATION"))
        );
        let line = r#"{"__CURSOR":"c","EXECUTABLE":"/bin/app","ERRNO":"2"}"#;
        assert_eq!(
            parse(line),
            Some(Detail {
                executable: "/bin/app".into(),
                errno: Some(2)
            })
        );
        assert_eq!(parse(""), None);
        assert_eq!(parse(r#"{"ERRNO":"2"}"#), None);
    }
}
