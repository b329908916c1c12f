//! resources -> cgroup settings, with the kubelet's formulas.

use super::Fault;
use crate::common::quantity;
use crate::common::text::push_decimal;
use crate::translate::unit::Section;
use k8s_openapi::api::core::v1::ResourceRequirements;

/// The kubelet's cpu.shares from a request (MilliCPUToShares), then its cgroup v2 weight
/// (CpuSharesToCpuWeight): 100m -> shares 102 -> weight 4.
pub fn cpu_weight(millis: u64) -> u64 {
    // MinShares 2, MaxShares 262144, as the kubelet clamps them.
    let shares = (millis.saturating_mul(1024) / 1000).clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262142
}

/// The cpu request of `r` in millicores (a missing request defaults to the limit).
pub fn cpu_request(r: Option<&ResourceRequirements>) -> Option<u64> {
    let r = r?;
    let q = r
        .requests
        .as_ref()
        .and_then(|m| m.get("cpu"))
        .or(r.limits.as_ref().and_then(|m| m.get("cpu")))?;
    quantity::cpu_millis(&q.0).ok()
}

/// The pod slice's weight: the kubelet gives the pod cgroup the sum of its containers' requests
/// (init containers run alone, so the larger of the two counts).
pub fn pod_cpu_weight(spec: &k8s_openapi::api::core::v1::PodSpec) -> u64 {
    let apps: u64 = spec
        .containers
        .iter()
        .filter_map(|c| cpu_request(c.resources.as_ref()))
        .sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .filter_map(|c| cpu_request(c.resources.as_ref()))
        .max()
        .unwrap_or(0);
    cpu_weight(apps.max(init))
}

/// `CPUQuota=` from a limit: 1 cpu = 100%, exactly: systemd reads it in hundredths of a percent,
/// so 1m is `0.1%` and 15m `1.5%` (the kubelet's quota, 100 us per 100 ms period; kernel and
/// systemd both raise a quota below 1 ms to 1 ms, as the kubelet does). A zero limit sets no
/// quota, as the kubelet's runtime writes `max` for it.
pub fn cpu_quota(millis: u64) -> Option<String> {
    if millis == 0 {
        return None;
    }
    let mut q = String::with_capacity(8);
    push_decimal(&mut q, millis / 10);
    let tenth = millis % 10;
    if tenth != 0 {
        q.push('.');
        push_decimal(&mut q, tenth);
    }
    q.push('%');
    Some(q)
}

/// Writes limits and requests of `r` (a container's or the pod's) into `sec`.
pub fn apply(sec: &mut Section, r: Option<&ResourceRequirements>, path: &str) -> Result<(), Fault> {
    let Some(r) = r else { return Ok(()) };
    let get = |m: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
               k: &str| m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone());
    if let Some(q) = get(&r.limits, "cpu") {
        let m = quantity::cpu_millis(&q)
            .map_err(|e| Fault::new(format!("{path}.limits.cpu"), e.to_string()))?;
        if let Some(q) = cpu_quota(m) {
            sec.trusted("CPUQuota", q);
        }
    }
    if let Some(q) = get(&r.limits, "memory") {
        let b = quantity::bytes(&q)
            .map_err(|e| Fault::new(format!("{path}.limits.memory"), e.to_string()))?;
        sec.trusted("MemoryMax", b.to_string());
        // The kubelet runs containers without swap unless configured: a limit is a hard limit.
        sec.trusted("MemorySwapMax", "0");
    }
    // Kubernetes defaults a missing request to the limit.
    if let Some(q) = get(&r.requests, "cpu").or(get(&r.limits, "cpu")) {
        let m = quantity::cpu_millis(&q)
            .map_err(|e| Fault::new(format!("{path}.requests.cpu"), e.to_string()))?;
        sec.trusted("CPUWeight", cpu_weight(m).to_string());
    }
    Ok(())
}

/// A container's settings: as [`apply`], and without a cpu request the kubelet's minimum weight
/// (shares 2), not systemd's default of 100.
pub fn apply_container(
    sec: &mut Section,
    r: Option<&ResourceRequirements>,
    path: &str,
) -> Result<(), Fault> {
    apply(sec, r, path)?;
    if cpu_request(r).is_none() {
        sec.trusted("CPUWeight", cpu_weight(0).to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_formulas() {
        assert_eq!(cpu_weight(100), 4);
        assert_eq!(cpu_weight(1000), 39);
        assert_eq!(cpu_weight(1), 1);
        assert_eq!(cpu_weight(0), 1);
        assert_eq!(cpu_weight(1_000_000), 10000, "capped at MaxShares");
        assert_eq!(cpu_quota(500).as_deref(), Some("50%"));
        assert_eq!(cpu_quota(2000).as_deref(), Some("200%"));
        assert_eq!(cpu_quota(1).as_deref(), Some("0.1%"), "1m, not 10m");
        assert_eq!(cpu_quota(15).as_deref(), Some("1.5%"), "15m, not 20m");
        assert_eq!(cpu_quota(1001).as_deref(), Some("100.1%"));
        assert_eq!(cpu_quota(0), None);
    }
}
