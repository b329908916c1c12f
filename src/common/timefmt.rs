//! Time as people and the Kubernetes API read it: kubectl's AGE and RFC 3339 timestamps, from
//! systemd's µs-since-epoch. Pure.

/// kubectl's `duration.HumanDuration`: `45s`, `5m3s`, `2h10m`, `3d4h`, `2y15d`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The age of something that happened at `then_us`, seen at `now_us`; `<unknown>` for never.
pub fn age(then_us: u64, now_us: u64) -> String {
    if then_us == 0 {
        return "<unknown>".into();
    }
    let d = (now_us as i128 - then_us as i128) / 1_000_000;
    human_duration(d.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

/// `2024-05-01T12:00:00Z` (second precision, UTC), as Kubernetes `metav1.Time` serialises.
pub fn rfc3339(us: u64) -> String {
    let secs = (us / 1_000_000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_like_kubectl() {
        for (s, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (303, "5m3s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (7 * 3600 + 59 * 60, "7h59m"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (400 * 86400, "400d"),
            (2 * 365 * 86400 + 15 * 86400, "2y15d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(s), want, "{s}");
        }
        assert_eq!(age(0, 5), "<unknown>");
        assert_eq!(age(1_000_000, 61_000_000), "60s");
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000_123_456), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(4_102_444_799_000_000), "2099-12-31T23:59:59Z");
    }
}
