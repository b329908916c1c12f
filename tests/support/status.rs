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
