//! Pure mapping between systemd's D-Bus data and podunit's plain types: property maps to
//! [`UnitState`], `ListUnits` rows to [`ListedUnit`], unit names to object paths and back.
//! No bus needed, so all of it is unit-tested.

use crate::systemd::unit::{ExitKind, ListedUnit, UnitState};
use std::collections::HashMap;
use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value};

pub const UNIT_PATH_PREFIX: &str = "/org/freedesktop/systemd1/unit/";

/// One row of `ListUnits`/`ListUnitsByPatterns`: `a(ssssssouso)`.
pub type ListRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    OwnedObjectPath,
    u32,
    String,
    OwnedObjectPath,
);

pub fn listed(row: &ListRow) -> ListedUnit {
    ListedUnit {
        name: row.0.clone(),
        load_state: row.2.clone(),
        active_state: row.3.clone(),
        sub_state: row.4.clone(),
        fragment_path: None,
        job_queued: row.7 != 0,
    }
}

/// systemd's object path for a unit (`bus_label_escape`): every byte outside `[A-Za-z0-9]`
/// becomes `_xx`.
pub fn unit_path(unit: &str) -> String {
    let mut out = String::from(UNIT_PATH_PREFIX);
    if unit.is_empty() {
        out.push('_');
    }
    for b in unit.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

/// The reverse of [`unit_path`]; None for paths that are not a unit's.
pub fn unit_from_path(path: &str) -> Option<String> {
    let label = path.strip_prefix(UNIT_PATH_PREFIX)?;
    let bytes = label.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'_' {
            let hex = label.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn inner<'a>(v: &'a Value<'a>) -> &'a Value<'a> {
    match v {
        Value::Value(b) => b,
        v => v,
    }
}

fn get<'a>(m: &'a HashMap<String, OwnedValue>, k: &str) -> Option<&'a Value<'a>> {
    m.get(k).map(|v| inner(v))
}

fn string(m: &HashMap<String, OwnedValue>, k: &str) -> String {
    match get(m, k) {
        Some(Value::Str(s)) => s.as_str().to_string(),
        Some(Value::ObjectPath(p)) => p.as_str().to_string(),
        _ => String::new(),
    }
}

fn uint(m: &HashMap<String, OwnedValue>, k: &str) -> u64 {
    match get(m, k) {
        Some(Value::U8(n)) => u64::from(*n),
        Some(Value::U16(n)) => u64::from(*n),
        Some(Value::U32(n)) => u64::from(*n),
        Some(Value::U64(n)) => *n,
        Some(Value::I32(n)) => u64::try_from(*n).unwrap_or(0),
        Some(Value::I64(n)) => u64::try_from(*n).unwrap_or(0),
        _ => 0,
    }
}

fn int(m: &HashMap<String, OwnedValue>, k: &str) -> i32 {
    match get(m, k) {
        Some(Value::I32(n)) => *n,
        Some(Value::U32(n)) => i32::try_from(*n).unwrap_or(i32::MAX),
        _ => 0,
    }
}

/// The path and argv of the first command of an `Exec*=` property (`a(sasbttttuii)`).
fn exec_command(m: &HashMap<String, OwnedValue>, k: &str) -> (String, Vec<String>) {
    let Some(Value::Array(a)) = get(m, k) else {
        return (String::new(), Vec::new());
    };
    let Some(Value::Structure(s)) = a.iter().next().map(inner) else {
        return (String::new(), Vec::new());
    };
    let path = match s.fields().first().map(inner) {
        Some(Value::Str(p)) => p.as_str().to_string(),
        _ => String::new(),
    };
    let argv = match s.fields().get(1).map(inner) {
        Some(Value::Array(args)) => args
            .iter()
            .filter_map(|a| match inner(a) {
                Value::Str(s) => Some(s.as_str().to_string()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    (path, argv)
}

/// The `ExecStart` property (`a(sasb)`) of a transient unit that runs `argv`, or the first
/// argument systemd would not read back unchanged from the unit's file at a daemon-reload (see
/// [`crate::common::argv_hex`], which callers encode untrusted arguments with).
pub fn exec_start(argv: &[String]) -> Result<Value<'static>, String> {
    if let Some(bad) = argv
        .iter()
        .find(|a| !crate::common::argv_hex::survives_unit_file(a))
    {
        return Err(format!(
            "argument {bad:?} would not survive a daemon-reload (hex-encode it)"
        ));
    }
    let path = argv.first().cloned().unwrap_or_default();
    Ok(Value::from(vec![(path, argv.to_vec(), false)]))
}

fn hex_bytes(m: &HashMap<String, OwnedValue>, k: &str) -> String {
    let Some(Value::Array(a)) = get(m, k) else {
        return String::new();
    };
    a.iter()
        .filter_map(|v| match inner(v) {
            Value::U8(b) => Some(format!("{b:02x}")),
            _ => None,
        })
        .collect()
}

/// Builds a [`UnitState`] from `GetAll("org.freedesktop.systemd1.Unit")` and, for services,
/// `GetAll("org.freedesktop.systemd1.Service")` (empty map for other unit types).
pub fn unit_state(
    name: &str,
    unit: &HashMap<String, OwnedValue>,
    service: &HashMap<String, OwnedValue>,
) -> UnitState {
    let (path, argv) = exec_command(service, "ExecStart");
    let (exec_path, exec_search) = crate::systemd::unit::container_program(&path, &argv);
    UnitState {
        name: name.to_string(),
        load_state: string(unit, "LoadState"),
        active_state: string(unit, "ActiveState"),
        sub_state: string(unit, "SubState"),
        result: string(service, "Result"),
        n_restarts: u32::try_from(uint(service, "NRestarts")).unwrap_or(u32::MAX),
        exec_main_code: ExitKind::from_code(int(service, "ExecMainCode")),
        exec_main_status: int(service, "ExecMainStatus"),
        exec_main_start_us: uint(service, "ExecMainStartTimestamp"),
        exec_main_exit_us: uint(service, "ExecMainExitTimestamp"),
        active_enter_us: uint(unit, "ActiveEnterTimestamp"),
        main_pid: u32::try_from(uint(service, "MainPID")).unwrap_or(0),
        fragment_path: string(unit, "FragmentPath"),
        invocation_id: hex_bytes(unit, "InvocationID"),
        exec_path,
        exec_search,
        root_directory: string(service, "RootDirectory"),
        start_error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::zvariant::Array;

    fn ov(v: Value<'_>) -> OwnedValue {
        OwnedValue::try_from(v).unwrap()
    }

    #[test]
    fn transient_commands_are_never_expanded() {
        let argv: Vec<String> = [
            "printf",
            "a$$b",
            "$HOME",
            "${X}",
            "%n",
            "back\\slash",
            "",
            "two\nlines",
            "'\"",
        ]
        .map(String::from)
        .to_vec();
        // Refused as they are: systemd would change them when it reads the unit file back.
        assert!(exec_start(&argv).is_err());
        for a in &argv[1..] {
            assert!(exec_start(&["printf".into(), a.clone()]).is_err(), "{a:?}");
        }
        // Encoded, they pass unchanged and unexpanded.
        let mut encoded = vec!["printf".to_string()];
        encoded.extend(crate::common::argv_hex::encode(&argv));
        let v = exec_start(&encoded).unwrap();
        assert_eq!(v.value_signature().to_string(), "a(sasb)");
        let got: Vec<(String, Vec<String>, bool)> = ov(v).try_into().unwrap();
        assert_eq!(got, [("printf".to_string(), encoded, false)]);
    }

    #[test]
    fn object_paths_round_trip() {
        let n = "podunit-kube\\x2dsystem_my-web.v1.slice";
        let p = unit_path(n);
        assert_eq!(
            unit_path("podunit-default_web.service"),
            "/org/freedesktop/systemd1/unit/podunit_2ddefault_5fweb_2eservice"
        );
        assert!(
            p[UNIT_PATH_PREFIX.len()..]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        );
        assert_eq!(unit_from_path(&p).as_deref(), Some(n));
        assert_eq!(unit_from_path("/org/freedesktop/systemd1/job/5"), None);
        assert_eq!(unit_from_path("/org/freedesktop/systemd1/unit/a_zz"), None);
    }

    #[test]
    fn maps_properties() {
        let mut unit = HashMap::new();
        unit.insert("LoadState".to_string(), ov(Value::from("loaded")));
        unit.insert("ActiveState".to_string(), ov(Value::from("failed")));
        unit.insert("SubState".to_string(), ov(Value::from("failed")));
        unit.insert(
            "ActiveEnterTimestamp".to_string(),
            ov(Value::U64(1_700_000_000_000_000)),
        );
        unit.insert(
            "InvocationID".to_string(),
            ov(Value::Array(Array::from(vec![0xabu8, 0x01]))),
        );
        let mut svc = HashMap::new();
        svc.insert("Result".to_string(), ov(Value::from("signal")));
        svc.insert("NRestarts".to_string(), ov(Value::U32(3)));
        svc.insert("ExecMainCode".to_string(), ov(Value::I32(2)));
        svc.insert("ExecMainStatus".to_string(), ov(Value::I32(9)));
        svc.insert("MainPID".to_string(), ov(Value::U32(0)));
        let s = unit_state("x.service", &unit, &svc);
        assert_eq!(s.load_state, "loaded");
        assert_eq!(s.active_state, "failed");
        assert_eq!(s.result, "signal");
        assert_eq!(s.n_restarts, 3);
        assert_eq!(s.exec_main_code, ExitKind::Killed);
        assert_eq!(s.exec_main_code.exit_code(s.exec_main_status), Some(137));
        assert_eq!(s.active_enter_us, 1_700_000_000_000_000);
        assert_eq!(s.invocation_id, "ab01");
        // Missing properties (a unit that is not a service) are zero, not errors.
        let empty = unit_state("y.slice", &unit, &HashMap::new());
        assert_eq!(empty.n_restarts, 0);
        assert_eq!(empty.exec_main_code, ExitKind::None);
    }
}
