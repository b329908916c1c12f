//! For the benchmarks that time `daemon-reload` to running: files written in one go, the
//! machine's wall clock, and the units' own `ActiveEnterTimestamp`, so polling never counts.

use std::time::Duration;

use super::nspawn::Machine;
use super::pods::active_since;

/// Generous upper bound for a round on a loaded host, never a measured quantity.
pub const LIMIT: Duration = Duration::from_secs(300);

/// Writes files inside the machine in one go.
pub fn write_all(m: &Machine, dir: &str, files: &[(String, String)]) {
    let mut script = format!("set -e; mkdir -p {dir}\n");
    for (name, body) in files {
        script.push_str(&format!("cat > {dir}/{name} <<'EOF'\n{body}EOF\n"));
    }
    m.sh_ok(&script);
}

/// The machine's wall clock (µs).
pub fn now_us(m: &Machine) -> u64 {
    m.sh_ok("date +%s%6N").trim().parse().expect("date")
}

/// Waits until every unit is active; returns the latest ActiveEnterTimestamp (µs).
pub fn all_active_at(m: &Machine, units: &[String]) -> u64 {
    m.wait_for("all containers running", LIMIT, || {
        let active = active_since(m, units);
        (active.len() == units.len()).then(|| active.into_values().max().unwrap_or(0) as u64)
    })
}

/// Waits until systemd lists no unit matching `pattern`.
pub fn wait_gone(m: &Machine, pattern: &str) {
    m.wait_for("units to be gone", LIMIT, || {
        let out = m.sh_ok(&format!(
            "systemctl list-units --all --no-legend --plain '{pattern}' | wc -l"
        ));
        (out.trim() == "0").then_some(())
    });
}

/// Writes `manifests` to /etc/pods.d, reloads, and returns the ms from just before the reload
/// until the last of `units` became active; then removes the pods and waits for their units
/// (named `podunit-<ns>_*`) to be gone.
pub fn reload_to_running(
    m: &Machine,
    ns: &str,
    manifests: &[(String, String)],
    units: &[String],
) -> f64 {
    write_all(m, "/etc/pods.d", manifests);
    let t0 = now_us(m);
    m.sh_ok("systemctl daemon-reload");
    let end = all_active_at(m, units);
    let names: Vec<&str> = manifests.iter().map(|(n, _)| n.as_str()).collect();
    m.sh_ok(&format!(
        "cd /etc/pods.d && rm -f {} && systemctl daemon-reload",
        names.join(" ")
    ));
    wait_gone(m, &format!("podunit-{ns}_*"));
    (end.saturating_sub(t0)) as f64 / 1000.0
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}
