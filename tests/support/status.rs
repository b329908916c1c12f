//! Reading `podunit status` output in tests.

/// The row of pod `name` in `podunit status`'s table, split on whitespace (NAMESPACE NAME READY
/// STATUS RESTARTS AGE SOURCE).
pub fn status_row(table: &str, name: &str) -> Vec<String> {
    table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no {name} row in\n{table}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The names of the pods `podunit status -o json` lists whose name starts with `prefix`, sorted.
pub fn pods_named(m: &super::nspawn::Machine, prefix: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&m.sh_ok("podunit status -o json")).unwrap();
    let mut names: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}
