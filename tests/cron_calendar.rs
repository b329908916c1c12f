//! A CronJob's schedule as `OnCalendar=` specs fires when the CronJob controller would: for each
//! schedule, the first fire times after a base time by cron's rules (robfig/cron v3, evaluated
//! here minute by minute from the schedule's text, independently of the library's parser) equal
//! the union of what systemd's own evaluator (`systemd-analyze calendar`) computes for the specs
//! podunit renders. Zones come from the host's tz database through `date`, as systemd reads it.
//!
//! Where the two evaluators differ by design (a local time repeated when daylight saving time
//! ends: cron fires at both, systemd at the first; docs in `src/workload/cron.rs`), the test
//! checks that the difference is exactly those repeated times.

use std::io::Write;
use std::process::{Command, Stdio};

use podunit::workload::cron;

const N: usize = 50;
/// robfig/cron gives up after five years without a match; so does the brute force.
const HORIZON: i64 = 5 * 366 * 86400;

// ---- civil time, UTC -------------------------------------------------------------------------

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// "2024-01-15 08:00:00" in UTC as seconds since the epoch.
fn epoch(date: &str, time: &str) -> i64 {
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let t: Vec<i64> = time.split(':').map(|x| x.parse().unwrap()).collect();
    days_from_civil(d[0], d[1], d[2]) * 86400 + t[0] * 3600 + t[1] * 60 + t[2]
}

fn show(t: i64) -> String {
    let (y, m, d) = civil_from_days(t.div_euclid(86400));
    let s = t.rem_euclid(86400);
    format!("{y}-{m:02}-{d:02} {:02}:{:02} UTC", s / 3600, s / 60 % 60)
}

// ---- cron's rules, from the schedule's text ---------------------------------------------------

/// A field's allowed values (index = value) and whether it was written as a star.
struct CronField {
    ok: Vec<bool>,
    star: bool,
}

fn cron_field(text: &str, lo: usize, hi: usize, names: &[&str]) -> CronField {
    let mut f = CronField {
        ok: vec![false; hi + 1],
        star: false,
    };
    let value = |s: &str| -> usize {
        match names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            Some(i) => lo + i,
            None => s.trim_start_matches('+').parse().unwrap(),
        }
    };
    for item in text.split(',').filter(|i| !i.is_empty()) {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s.parse::<usize>().unwrap())),
            None => (item, None),
        };
        let (a, b) = if range == "*" || range == "?" {
            f.star |= step.unwrap_or(1) == 1;
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a), value(b))
        } else if step.is_some() {
            (value(range), hi)
        } else {
            (value(range), value(range))
        };
        for v in (a..=b).step_by(step.unwrap_or(1)) {
            f.ok[v] = true;
        }
    }
    f
}

struct Cron {
    minute: CronField,
    hour: CronField,
    dom: CronField,
    month: CronField,
    dow: CronField,
}

impl Cron {
    fn new(schedule: &str) -> Cron {
        // The descriptors as robfig/cron's documentation defines them.
        let text = match schedule {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            s => s,
        };
        let f: Vec<&str> = text.split_whitespace().collect();
        const MONTHS: [&str; 12] = [
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        Cron {
            minute: cron_field(f[0], 0, 59, &[]),
            hour: cron_field(f[1], 0, 23, &[]),
            dom: cron_field(f[2], 1, 31, &[]),
            month: cron_field(f[3], 1, 12, &MONTHS),
            dow: cron_field(f[4], 0, 6, &DAYS),
        }
    }

    /// Does a local day (month, day of month, weekday with Sunday 0) match?
    fn day(&self, month: u32, dom: u32, dow: u32) -> bool {
        let (d, w) = (self.dom.ok[dom as usize], self.dow.ok[dow as usize]);
        self.month.ok[month as usize]
            && if self.dom.star || self.dow.star {
                d && w
            } else {
                d || w
            }
    }

    /// The first `N` instants after `base`, within the horizon, walking absolute time (as
    /// robfig/cron's search does) and matching each minute's local wall time.
    fn fire_times(&self, base: i64, offset: &dyn Fn(i64) -> i64) -> Vec<i64> {
        let mut out = Vec::new();
        let mut hour = base.div_euclid(3600) * 3600;
        while out.len() < N && hour < base + HORIZON {
            // The zones tested change offset on whole UTC hours, by whole hours.
            let wall = hour + offset(hour);
            let days = wall.div_euclid(86400);
            let (_, m, d) = civil_from_days(days);
            let dow = (days + 4).rem_euclid(7) as u32;
            let h = wall.rem_euclid(86400) / 3600;
            if self.day(m, d, dow) && self.hour.ok[h as usize] {
                for minute in 0..60 {
                    let t = hour + minute * 60;
                    if t > base && self.minute.ok[minute as usize] && out.len() < N {
                        out.push(t);
                    }
                }
            }
            hour += 3600;
        }
        out
    }
}

// ---- the host's zone database and systemd's evaluator ------------------------------------------

/// UTC offsets of `zone` for every hour of the window, from `date` (glibc reading the tz
/// database systemd reads).
fn offsets(zone: &str, base: i64) -> impl Fn(i64) -> i64 {
    // From the hour before: an instant is compared with the one an hour earlier.
    let start = base.div_euclid(3600) * 3600 - 3600;
    let hours = (HORIZON / 3600 + 3) as usize;
    let mut child = Command::new("date")
        .args(["-f", "-", "+%z"])
        .env("TZ", zone)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("date (coreutils) runs");
    let mut input = String::new();
    for i in 0..hours {
        input.push_str(&format!("@{}\n", start + i as i64 * 3600));
    }
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "date -f for {zone}");
    let table: Vec<i64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|z| {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            sign * (z[1..3].parse::<i64>().unwrap() * 3600 + z[3..5].parse::<i64>().unwrap() * 60)
        })
        .collect();
    assert_eq!(table.len(), hours);
    move |t: i64| table[((t - start).div_euclid(3600)) as usize]
}

/// systemd's next `N` elapses of each spec after `base`, merged; and each spec's normalized form.
fn systemd_fire_times(specs: &[String], base: i64) -> (Vec<i64>, Vec<String>) {
    if specs.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let out = Command::new("systemd-analyze")
        .arg("calendar")
        .arg(format!("--iterations={N}"))
        .arg(format!("--base-time=@{base}"))
        .args(specs)
        // Elapses are printed in the local zone: make that UTC.
        .env("TZ", "UTC")
        .output()
        .unwrap_or_else(|e| {
            panic!("systemd-analyze (package systemd) is needed as the reference: {e}")
        });
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "systemd-analyze refused {specs:?}: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut times = Vec::new();
    let mut normalized = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(n) = line.strip_prefix("Normalized form: ") {
            normalized.push(n.to_string());
        } else if line.starts_with("Next elapse:") || line.starts_with("Iter. #") {
            let value = line.split_once(": ").unwrap().1;
            if value == "never" {
                continue;
            }
            // "Mon 2024-01-15 08:00:00 UTC"
            let w: Vec<&str> = value.split_whitespace().collect();
            assert_eq!(w.get(3), Some(&"UTC"), "{line}");
            times.push(epoch(w[1], w[2]));
        }
    }
    times.sort_unstable();
    times.dedup();
    times.retain(|&t| t < base + HORIZON);
    times.truncate(N);
    (times, normalized)
}

/// Compares cron and systemd for `schedule` in `zone` from `base`; returns the instants cron
/// fires at that systemd does not (the repeated local times of a DST end, checked here).
fn compare(schedule: &str, zone: Option<&str>, base: &str) -> Vec<i64> {
    let (date, time) = base.split_once(' ').unwrap();
    let base = epoch(date, time);
    let specs = cron::calendar_specs(schedule, zone).unwrap_or_else(|e| panic!("{schedule}: {e}"));
    let offset: Box<dyn Fn(i64) -> i64> = match zone {
        Some(z) => Box::new(offsets(z, base)),
        None => Box::new(|_| 0),
    };
    let mut expected = Cron::new(schedule).fire_times(base, &offset);
    // An instant whose wall time the hour before already had: the second pass through a
    // repeated hour.
    let repeated: Vec<i64> = expected
        .iter()
        .copied()
        .filter(|&t| offset(t - 3600) == offset(t) + 3600)
        .collect();
    expected.retain(|t| !repeated.contains(t));
    let (mut got, normalized) = systemd_fire_times(&specs, base);
    // systemd's N may reach past cron's N less the repeated ones.
    got.truncate(expected.len());
    assert_eq!(
        normalized, specs,
        "{schedule}: podunit's specs are in systemd's normalized form"
    );
    let shown = |v: &[i64]| v.iter().map(|&t| show(t)).collect::<Vec<_>>();
    assert_eq!(
        shown(&got),
        shown(&expected),
        "{schedule} (zone {zone:?}) as {specs:?}: systemd (left) against cron (right)"
    );
    repeated
}

#[test]
fn systemd_fires_when_cron_does_in_utc() {
    let cases = [
        "* * * * *",
        "*/7 * * * *",
        "*/15 * * * *",
        "5-50/10 3 * * 1-5",
        "0-20/10 * * * *",
        "10/20 0 * * *",
        "0 */5 * * *",
        "30 1-23/4 * * *",
        "0 0 1,15 * MON",
        "0 0 1,15 * *",
        "0 0 * * MON",
        "0 0 ? * mon",
        "0 0 */1 * MON",
        "0 0 */2 * MON",
        "0 0 1-31 * MON",
        "0 0 13 * FRI",
        "0 0 1 * *,MON",
        "0 0 * * 0",
        "0 0 * * 6,0,1",
        "0 0 * * FRI,SAT,SUN",
        "0 0 * * 5/2",
        "0 0 * * mon-FRI/2",
        "0 12 * JAN-MAR SUN",
        "0 12 * jan-mar,dec *",
        "0 12 * */3 *",
        "0 12 * 2/5 *",
        "0 0 31 * *",
        "0 0 29 2 *",
        "0 0 31 2 *",
        "0 0 30 2 *",
        "0 0 31 2 MON",
        "0 0 , * *",
        "0 0 , * MON",
        "59 23 31 12 *",
        "0,30 9-17 * * 1-5",
        "1,2,3,5,8,13,21,34,55 * * * *",
        "+5 007 * * *",
        "0 0 1/2 * *",
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
    ];
    for schedule in cases {
        for base in ["2024-01-01 00:00:00", "2023-02-27 23:59:00"] {
            assert_eq!(
                compare(schedule, None, base),
                Vec::<i64>::new(),
                "{schedule}"
            );
        }
    }
}

#[test]
fn systemd_fires_when_cron_does_in_a_zone_across_dst() {
    // Base times half a day before a DST start and a DST end of each zone, so that even
    // hourly schedules reach them within their first fire times.
    let zones = [
        (
            "Europe/Berlin",
            "2024-03-30 12:00:00",
            "2024-10-26 12:00:00",
        ),
        (
            "America/New_York",
            "2024-03-09 18:00:00",
            "2024-11-02 18:00:00",
        ),
        ("UTC", "2024-03-30 12:00:00", "2024-10-26 12:00:00"),
    ];
    let schedules = [
        "30 2 * * *",
        "0 * * * *",
        "*/20 1-3 * * *",
        "0 0 * * SUN",
        "0 3 1,15 * SUN",
        "15 1 * * *",
        "@daily",
    ];
    for (zone, start, end) in zones {
        for schedule in schedules {
            let at_start = compare(schedule, Some(zone), start);
            // Skipped local times fire under neither.
            assert_eq!(at_start, Vec::<i64>::new(), "{schedule} {zone}");
            let at_end = compare(schedule, Some(zone), end);
            // Cron fires again in the repeated hour when that hour matches; systemd does not.
            let repeats_hour = matches!(
                (zone, schedule),
                (
                    "Europe/Berlin",
                    "30 2 * * *" | "0 * * * *" | "*/20 1-3 * * *"
                ) | (
                    "America/New_York",
                    "0 * * * *" | "*/20 1-3 * * *" | "15 1 * * *"
                )
            );
            assert_eq!(
                !at_end.is_empty(),
                repeats_hour,
                "{schedule} {zone}: cron's extra fire times {:?}",
                at_end.iter().map(|&t| show(t)).collect::<Vec<_>>()
            );
        }
    }
    // Exactly: Berlin's 02:30 on 2024-10-27 is 00:30 UTC (CEST, systemd and cron) and 01:30 UTC
    // (CET, cron only).
    let extra = compare("30 2 * * *", Some("Europe/Berlin"), "2024-10-26 12:00:00");
    assert_eq!(
        extra.iter().map(|&t| show(t)).collect::<Vec<_>>(),
        ["2024-10-27 01:30 UTC"]
    );
}

#[test]
fn refused_schedules_have_no_specs() {
    for (schedule, zone) in [
        ("0 0 * * 7", None),
        ("@every 1h", None),
        ("CRON_TZ=UTC 0 0 * * *", None),
        ("0 0 * * *", Some("Local")),
    ] {
        assert!(cron::calendar_specs(schedule, zone).is_err(), "{schedule}");
    }
}
