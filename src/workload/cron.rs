//! A CronJob's `schedule` as systemd calendar specs, with the CronJob controller's semantics.
//!
//! The controller parses `schedule` with robfig/cron v3's standard parser and evaluates it in
//! `timeZone` (or the controller's local zone). [`parse`] accepts exactly what that parser
//! accepts, with its messages, and the API server's `validateScheduleFormat` and
//! `validateTimeZone` rules on top; [`Schedule::calendar_specs`] renders the schedule as
//! `OnCalendar=` values whose union fires at the same instants.
//!
//! What differs from the controller, by design of systemd's evaluator:
//! - A local time repeated when daylight saving time ends (Europe/Berlin, 02:30 on the last
//!   Sunday of October) fires twice under robfig/cron (its search walks absolute time, so both
//!   02:30 CEST and 02:30 CET match) and once under systemd (the first, 02:30 CEST). Every other
//!   instant is the same; a local time skipped when daylight saving time starts fires under
//!   neither.
//! - `@every <duration>` counts from the CronJob's creation, not from the calendar; it has no
//!   calendar spec and is refused here (the API server accepts it).
//!
//! The zone name is checked for syntax only; that it exists (under /usr/share/zoneinfo, as
//! systemd requires) is for the edge that reads the host.

use std::fmt;

/// The API server's field of a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Schedule,
    TimeZone,
}

impl Field {
    pub fn path(self) -> &'static str {
        match self {
            Field::Schedule => "spec.schedule",
            Field::TimeZone => "spec.timeZone",
        }
    }
}

/// Why a schedule or a zone is refused; the messages are robfig/cron's and the API server's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// No schedule: the API server's `Required value`, before robfig/cron sees it.
    Required,
    FieldCount {
        found: usize,
        fields: Vec<String>,
    },
    UnrecognizedDescriptor(String),
    /// `@every`: valid for the API server, no calendar spec (counts from creation).
    EveryUnsupported(String),
    TooManyHyphens(String),
    TooManySlashes(String),
    /// Go's `strconv.Atoi` refused `text` (in the range expression `expr`).
    NotAnInt {
        text: String,
        out_of_range: bool,
    },
    Negative {
        value: i64,
        text: String,
    },
    BelowMinimum {
        start: u64,
        min: u64,
        expr: String,
    },
    AboveMaximum {
        end: u64,
        max: u64,
        expr: String,
    },
    StartBeyondEnd {
        start: u64,
        end: u64,
        expr: String,
    },
    ZeroStep(String),
    TzInSchedule,
    EmptyTimeZone,
    UnknownTimeZone(String),
    LocalTimeZone,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Required => f.write_str("Required value"),
            Reason::FieldCount { found, fields } => write!(
                f,
                "expected exactly 5 fields, found {found}: [{}]",
                fields.join(" ")
            ),
            Reason::UnrecognizedDescriptor(d) => write!(f, "unrecognized descriptor: {d}"),
            Reason::EveryUnsupported(d) => write!(
                f,
                "{d}: an interval from the CronJob's creation has no systemd calendar spec; \
                 use the 5-field form"
            ),
            Reason::TooManyHyphens(e) => write!(f, "too many hyphens: {e}"),
            Reason::TooManySlashes(e) => write!(f, "too many slashes: {e}"),
            Reason::NotAnInt { text, out_of_range } => write!(
                f,
                "failed to parse int from {text}: strconv.Atoi: parsing {}: {}",
                go_quote(text),
                if *out_of_range { "value out of range" } else { "invalid syntax" }
            ),
            Reason::Negative { value, text } => {
                write!(f, "negative number ({value}) not allowed: {text}")
            }
            Reason::BelowMinimum { start, min, expr } => {
                write!(f, "beginning of range ({start}) below minimum ({min}): {expr}")
            }
            Reason::AboveMaximum { end, max, expr } => {
                write!(f, "end of range ({end}) above maximum ({max}): {expr}")
            }
            Reason::StartBeyondEnd { start, end, expr } => write!(
                f,
                "beginning of range ({start}) beyond end of range ({end}): {expr}"
            ),
            Reason::ZeroStep(e) => write!(f, "step of range should be a positive number: {e}"),
            Reason::TzInSchedule => f.write_str(
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ),
            Reason::EmptyTimeZone => f.write_str("timeZone must be nil or non-empty string"),
            Reason::UnknownTimeZone(z) => write!(f, "unknown time zone {z}"),
            Reason::LocalTimeZone => f.write_str(
                "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
            ),
        }
    }
}

/// A refused `schedule` or `timeZone`, shown as the API server shows a `field.Invalid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronError {
    pub field: Field,
    pub value: String,
    pub reason: Reason,
}

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reason == Reason::Required {
            return write!(f, "{}: Required value", self.field.path());
        }
        write!(
            f,
            "{}: Invalid value: {}: {}",
            self.field.path(),
            go_quote(&self.value),
            self.reason
        )
    }
}

impl std::error::Error for CronError {}

/// Go's `%q` for the printable ASCII that schedules are made of.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One field's bounds and names, as robfig/cron's `bounds`.
struct Bounds {
    min: u64,
    max: u64,
    names: &'static [&'static str],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
// Names index from `min`: "jan" is 1, "sun" is 0. Day of week is 0-6: 7 is refused.
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// A field's values as a bit set (bit n: value n), and whether it was written as a star.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Set {
    pub bits: u64,
    /// robfig/cron's star bit: an item `*` or `?` without a step above 1. Only the day fields
    /// use it: either one starred makes the day rule AND instead of OR.
    pub star: bool,
}

impl Set {
    fn all(b: &Bounds) -> Set {
        Set {
            bits: range_bits(b.min, b.max, 1),
            star: true,
        }
    }
    fn one(v: u64) -> Set {
        Set {
            bits: 1 << v,
            star: false,
        }
    }
    pub fn contains(self, v: u32) -> bool {
        v < 64 && self.bits & (1 << v) != 0
    }
}

fn range_bits(start: u64, end: u64, step: u64) -> u64 {
    (start..=end)
        .step_by(step as usize)
        .fold(0, |b, v| b | 1 << v)
}

/// A parsed schedule: minute, hour, day of month, month, day of week.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub minute: Set,
    pub hour: Set,
    pub dom: Set,
    pub month: Set,
    pub dow: Set,
}

fn schedule_error(schedule: &str, reason: Reason) -> CronError {
    CronError {
        field: Field::Schedule,
        value: schedule.to_string(),
        reason,
    }
}

/// Parses `spec.schedule` as the API server validates a new CronJob: robfig/cron v3's
/// `ParseStandard`, and no `TZ` anywhere in it (`timeZone` says the zone).
pub fn parse(schedule: &str) -> Result<Schedule, CronError> {
    let parsed = parse_standard(schedule).map_err(|r| schedule_error(schedule, r))?;
    if schedule.contains("TZ") {
        return Err(schedule_error(schedule, Reason::TzInSchedule));
    }
    Ok(parsed)
}

fn parse_standard(spec: &str) -> Result<Schedule, Reason> {
    if spec.is_empty() {
        return Err(Reason::Required);
    }
    let mut spec = spec;
    // robfig/cron loads the zone of a TZ= prefix; the API server refuses the prefix anyway
    // (parse), so only the syntax matters here.
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        match spec.find(' ') {
            Some(i) => spec = spec[i..].trim(),
            None => return Err(Reason::TzInSchedule),
        }
    }
    if spec.starts_with('@') {
        return descriptor(spec);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(Reason::FieldCount {
            found: fields.len(),
            fields: fields.iter().map(|f| f.to_string()).collect(),
        });
    }
    Ok(Schedule {
        minute: field(fields[0], &MINUTES)?,
        hour: field(fields[1], &HOURS)?,
        dom: field(fields[2], &DOM)?,
        month: field(fields[3], &MONTHS)?,
        dow: field(fields[4], &DOW)?,
    })
}

fn descriptor(d: &str) -> Result<Schedule, Reason> {
    let (zero, midnight) = (Set::one(0), Set::one(0));
    let every_day = (Set::all(&DOM), Set::all(&MONTHS), Set::all(&DOW));
    let s = |hour: Set, dom: Set, month: Set, dow: Set| Schedule {
        minute: zero,
        hour,
        dom,
        month,
        dow,
    };
    Ok(match d {
        "@yearly" | "@annually" => s(midnight, Set::one(1), Set::one(1), Set::all(&DOW)),
        "@monthly" => s(midnight, Set::one(1), Set::all(&MONTHS), Set::all(&DOW)),
        "@weekly" => s(midnight, Set::all(&DOM), Set::all(&MONTHS), Set::one(0)),
        "@daily" | "@midnight" => s(midnight, every_day.0, every_day.1, every_day.2),
        "@hourly" => s(Set::all(&HOURS), every_day.0, every_day.1, every_day.2),
        _ if d.starts_with("@every ") => return Err(Reason::EveryUnsupported(d.to_string())),
        _ => return Err(Reason::UnrecognizedDescriptor(d.to_string())),
    })
}

/// A field: comma-separated items (empty items dropped, as Go's `FieldsFunc` does).
fn field(text: &str, b: &Bounds) -> Result<Set, Reason> {
    let mut set = Set {
        bits: 0,
        star: false,
    };
    for expr in text.split(',').filter(|e| !e.is_empty()) {
        let item = range(expr, b)?;
        set.bits |= item.bits;
        set.star |= item.star;
    }
    Ok(set)
}

/// One item: `*`, `?`, `n`, `a-b`, each with an optional `/step`; `n/step` means `n-max/step`.
fn range(expr: &str, b: &Bounds) -> Result<Set, Reason> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let (start, mut end, mut star);
    if low_and_high[0] == "*" || low_and_high[0] == "?" {
        (start, end, star) = (b.min, b.max, true);
    } else {
        start = int_or_name(low_and_high[0], b)?;
        star = false;
        end = match low_and_high.len() {
            1 => start,
            2 => int_or_name(low_and_high[1], b)?,
            _ => return Err(Reason::TooManyHyphens(expr.to_string())),
        };
    }
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = non_negative(range_and_step[1])?;
            if low_and_high.len() == 1 {
                end = b.max;
            }
            if step > 1 {
                star = false;
            }
            step
        }
        _ => return Err(Reason::TooManySlashes(expr.to_string())),
    };
    let expr = expr.to_string();
    if start < b.min {
        return Err(Reason::BelowMinimum {
            start,
            min: b.min,
            expr,
        });
    }
    if end > b.max {
        return Err(Reason::AboveMaximum {
            end,
            max: b.max,
            expr,
        });
    }
    if start > end {
        return Err(Reason::StartBeyondEnd { start, end, expr });
    }
    if step == 0 {
        return Err(Reason::ZeroStep(expr));
    }
    // Only the day fields keep the star: it decides their AND or OR, nothing else.
    Ok(Set {
        bits: range_bits(start, end, step),
        star,
    })
}

fn int_or_name(text: &str, b: &Bounds) -> Result<u64, Reason> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = b.names.iter().position(|n| *n == lower) {
        return Ok(b.min + i as u64);
    }
    non_negative(text)
}

/// Go's `strconv.Atoi` (optional sign, decimal digits, 64-bit), then refusing a negative.
fn non_negative(text: &str) -> Result<u64, Reason> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(Reason::NotAnInt {
            text: text.to_string(),
            out_of_range: false,
        });
    }
    let value: i64 = text.parse().map_err(|_| Reason::NotAnInt {
        text: text.to_string(),
        out_of_range: true,
    })?;
    if value < 0 {
        return Err(Reason::Negative {
            value,
            text: text.to_string(),
        });
    }
    Ok(value as u64)
}

/// Checks `spec.timeZone` as the API server's `validateTimeZone` does, less loading the zone:
/// that it exists on the host is the caller's check.
pub fn validate_time_zone(zone: &str) -> Result<(), CronError> {
    let err = |reason| {
        Err(CronError {
            field: Field::TimeZone,
            value: zone.to_string(),
            reason,
        })
    };
    if zone.is_empty() {
        return err(Reason::EmptyTimeZone);
    }
    let part_ok = |p: &str| {
        p != "."
            && p != ".."
            && !p.starts_with('-')
            && (1..=14).contains(&p.len())
            && p.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b".-_+".contains(&c))
    };
    if !zone.split('/').all(part_ok) {
        return err(Reason::UnknownTimeZone(zone.to_string()));
    }
    if zone.eq_ignore_ascii_case("Local") {
        return err(Reason::LocalTimeZone);
    }
    Ok(())
}

/// `schedule` and `timeZone` as `OnCalendar=` values, validated first. Several values fire at
/// their union; none means the schedule never fires (`0 0 30 2 *`).
pub fn calendar_specs(schedule: &str, time_zone: Option<&str>) -> Result<Vec<String>, CronError> {
    if let Some(zone) = time_zone {
        validate_time_zone(zone)?;
    }
    Ok(parse(schedule)?.calendar_specs(time_zone))
}

impl Schedule {
    /// The calendar specs whose union fires when this schedule does, in `zone` (the host's
    /// local zone without one, as the controller uses its own).
    pub fn calendar_specs(&self, zone: Option<&str>) -> Vec<String> {
        if self.minute.bits == 0 || self.hour.bits == 0 || self.month.bits == 0 {
            return Vec::new();
        }
        let (all_dom, all_dow) = (range_bits(1, 31, 1), range_bits(0, 6, 1));
        // (weekdays, days of month) per spec; systemd ANDs the two within one spec.
        let days: Vec<(u64, u64)> = if self.dom.star || self.dow.star {
            vec![(self.dow.bits, self.dom.bits)]
        } else if self.dom.bits == all_dom || self.dow.bits == all_dow {
            // One side of the OR is every day.
            vec![(all_dow, all_dom)]
        } else {
            // Cron's OR of two restricted day fields: one spec per field.
            [(all_dow, self.dom.bits), (self.dow.bits, all_dom)]
                .into_iter()
                .filter(|&(w, d)| w != 0 && d != 0)
                .collect()
        };
        let time = format!(
            "{}:{}:00",
            numbers(self.hour.bits, &HOURS, true),
            numbers(self.minute.bits, &MINUTES, true)
        );
        let months = numbers(self.month.bits, &MONTHS, false);
        days.into_iter()
            .filter(|&(w, d)| w != 0 && d != 0)
            .map(|(weekdays, dom)| {
                let mut spec = String::new();
                if weekdays != all_dow {
                    spec.push_str(&weekday_list(weekdays));
                    spec.push(' ');
                }
                spec.push_str(&format!("*-{months}-{} {time}", numbers(dom, &DOM, false)));
                if let Some(z) = zone {
                    spec.push(' ');
                    spec.push_str(z);
                }
                spec
            })
            .collect()
    }
}

/// A field's values in systemd's normalized form: `*`, a repetition `a/s`, or a list of values
/// and `a..b` runs (systemd has no `a..b/s`).
///
/// A repetition only where its next value past the last is exactly the field's end (`00/15`
/// minutes, `00/6` hours): systemd 252 mishandles one that overshoots at a rollover (from
/// 23:59, `*:00/7` skips the next midnight), and days and months have no fixed end.
fn numbers(bits: u64, b: &Bounds, repeat: bool) -> String {
    let values: Vec<u64> = (b.min..=b.max).filter(|v| bits & (1 << v) != 0).collect();
    if values.len() as u64 == b.max - b.min + 1 {
        return "*".to_string();
    }
    if repeat && values.len() >= 3 {
        let step = values[1] - values[0];
        let progression = values.windows(2).all(|w| w[1] - w[0] == step);
        if step > 1 && progression && values[values.len() - 1] + step == b.max + 1 {
            return format!("{:02}/{step}", values[0]);
        }
    }
    runs(&values, |v| format!("{v:02}"))
}

/// Weekdays in systemd's Monday-first order (cron's 0 is Sunday).
fn weekday_list(bits: u64) -> String {
    const NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let days: Vec<u64> = (0..7)
        .filter(|i| bits & (1 << ((i + 1) % 7)) != 0)
        .collect();
    runs(&days, |i| NAMES[i as usize].to_string())
}

/// Sorted values as a comma list, runs of three or more as `a..b`.
fn runs(values: &[u64], show: impl Fn(u64) -> String) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i;
        while j + 1 < values.len() && values[j + 1] == values[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            parts.push(format!("{}..{}", show(values[i]), show(values[j])));
        } else {
            parts.extend(values[i..=j].iter().map(|&v| show(v)));
        }
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(s: &str) -> Vec<String> {
        calendar_specs(s, None).unwrap()
    }

    fn error(s: &str) -> String {
        parse(s).unwrap_err().to_string()
    }

    #[test]
    fn renders_fields_in_systemd_normal_form() {
        assert_eq!(specs("* * * * *"), ["*-*-* *:*:00"]);
        assert_eq!(specs("0 9 1,15 * *"), ["*-*-01,15 09:00:00"]);
        assert_eq!(specs("*/15 * * * *"), ["*-*-* *:00/15:00"]);
        assert_eq!(
            specs("*/7 * * * *"),
            ["*-*-* *:00,07,14,21,28,35,42,49,56:00"]
        );
        assert_eq!(specs("0 */6 * * *"), ["*-*-* 00/6:00:00"]);
        assert_eq!(
            specs("5-50/10 3 * * 1-5"),
            ["Mon..Fri *-*-* 03:05,15,25,35,45:00"]
        );
        assert_eq!(specs("0-20/10 * * * *"), ["*-*-* *:00,10,20:00"]);
        assert_eq!(specs("10/20 0 * * *"), ["*-*-* 00:10,30,50:00"]);
        assert_eq!(specs("0 0 * * 6,0,1"), ["Mon,Sat,Sun *-*-* 00:00:00"]);
        assert_eq!(specs("0 0 * JAN-MAR,dec *"), ["*-01..03,12-* 00:00:00"]);
        assert_eq!(specs("0 0 * * mon-FRI/2"), ["Mon,Wed,Fri *-*-* 00:00:00"]);
    }

    #[test]
    fn zone_is_a_suffix() {
        assert_eq!(
            calendar_specs("30 2 * * *", Some("Europe/Berlin")).unwrap(),
            ["*-*-* 02:30:00 Europe/Berlin"]
        );
    }

    #[test]
    fn day_rule_or_only_when_neither_day_field_is_starred() {
        assert_eq!(
            specs("0 0 1,15 * MON"),
            ["*-*-01,15 00:00:00", "Mon *-*-* 00:00:00"]
        );
        // A star (or `?`, or `*/1`) in either day field makes it AND.
        assert_eq!(specs("0 0 * * MON"), ["Mon *-*-* 00:00:00"]);
        assert_eq!(specs("0 0 ? * MON"), ["Mon *-*-* 00:00:00"]);
        assert_eq!(specs("0 0 */1 * MON"), ["Mon *-*-* 00:00:00"]);
        assert_eq!(specs("0 0 1 * *,MON"), ["*-*-01 00:00:00"]);
        // `*/2` is no star: OR.
        assert_eq!(
            specs("0 0 */2 * MON"),
            [
                "*-*-01,03,05,07,09,11,13,15,17,19,21,23,25,27,29,31 00:00:00",
                "Mon *-*-* 00:00:00"
            ]
        );
        // An unstarred full field makes the OR every day.
        assert_eq!(specs("0 0 1-31 * MON"), ["*-*-* 00:00:00"]);
        assert_eq!(specs("0 0 1 * 0-6"), ["*-*-* 00:00:00"]);
    }

    #[test]
    fn descriptors() {
        assert_eq!(specs("@yearly"), ["*-01-01 00:00:00"]);
        assert_eq!(specs("@annually"), ["*-01-01 00:00:00"]);
        assert_eq!(specs("@monthly"), ["*-*-01 00:00:00"]);
        assert_eq!(specs("@weekly"), ["Sun *-*-* 00:00:00"]);
        assert_eq!(specs("@daily"), ["*-*-* 00:00:00"]);
        assert_eq!(specs("@midnight"), ["*-*-* 00:00:00"]);
        assert_eq!(specs("@hourly"), ["*-*-* *:00:00"]);
    }

    #[test]
    fn never_firing_schedules_have_no_spec_or_one_systemd_never_elapses() {
        assert!(specs("0 0 , * *").is_empty());
        assert_eq!(specs("0 0 31 2 *"), ["*-02-31 00:00:00"]);
        assert_eq!(specs("0 0 , * MON"), ["Mon *-*-* 00:00:00"]);
    }

    #[test]
    fn errors_are_the_api_servers() {
        let cases = [
            ("0 0 * *", "expected exactly 5 fields, found 4: [0 0 * *]"),
            (
                "0 0 * * * *",
                "expected exactly 5 fields, found 6: [0 0 * * * *]",
            ),
            ("@fortnightly", "unrecognized descriptor: @fortnightly"),
            ("@Daily", "unrecognized descriptor: @Daily"),
            ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
            ("*/2/3 * * * *", "too many slashes: */2/3"),
            (
                "x * * * *",
                "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax",
            ),
            (
                "-5 * * * *",
                "failed to parse int from : strconv.Atoi: parsing \"\": invalid syntax",
            ),
            (
                "99999999999999999999 * * * *",
                "failed to parse int from 99999999999999999999: strconv.Atoi: parsing \
                 \"99999999999999999999\": value out of range",
            ),
            ("*/-1 * * * *", "negative number (-1) not allowed: -1"),
            ("60 * * * *", "end of range (60) above maximum (59): 60"),
            ("0 24 * * *", "end of range (24) above maximum (23): 24"),
            ("0 0 0 * *", "beginning of range (0) below minimum (1): 0"),
            ("0 0 * 13 *", "end of range (13) above maximum (12): 13"),
            ("0 0 * * 7", "end of range (7) above maximum (6): 7"),
            (
                "0 0 * * FRI-MON",
                "beginning of range (5) beyond end of range (1): FRI-MON",
            ),
            (
                "*/0 * * * *",
                "step of range should be a positive number: */0",
            ),
            (
                "0 0 * * sunday",
                "failed to parse int from sunday: strconv.Atoi: parsing \"sunday\": invalid syntax",
            ),
            (
                "CRON_TZ=Europe/Berlin 0 0 * * *",
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ),
            (
                "TZ=UTC 0 0 * * *",
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ),
        ];
        for (schedule, reason) in cases {
            assert_eq!(
                error(schedule),
                format!(
                    "spec.schedule: Invalid value: {}: {reason}",
                    go_quote(schedule)
                ),
                "{schedule}"
            );
        }
        assert!(error("@every 5m").contains("no systemd calendar spec"));
        assert_eq!(error(""), "spec.schedule: Required value");
    }

    #[test]
    fn go_atoi_accepts_signs_and_leading_zeros() {
        assert_eq!(specs("+5 007 * * *"), ["*-*-* 07:05:00"]);
    }

    #[test]
    fn star_bit() {
        let s = parse("*/1 ? 1-5 * */2").unwrap();
        assert!(s.minute.star && s.hour.star);
        assert!(!s.dom.star && !s.dow.star);
        assert!(parse("0 0 *,5 * 1").unwrap().dom.star);
        assert!(!parse("0 0 5/1 * 1").unwrap().dom.star);
    }

    #[test]
    fn time_zone_syntax() {
        for ok in [
            "Europe/Berlin",
            "America/New_York",
            "UTC",
            "Etc/GMT+5",
            "America/Argentina/Buenos_Aires",
        ] {
            assert_eq!(validate_time_zone(ok), Ok(()), "{ok}");
        }
        let cases = [
            ("", "timeZone must be nil or non-empty string"),
            (
                "Local",
                "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
            ),
            (
                "local",
                "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
            ),
            ("../etc/passwd", "unknown time zone ../etc/passwd"),
            ("Europe/-Berlin", "unknown time zone Europe/-Berlin"),
            ("Europe/Berlin Mon", "unknown time zone Europe/Berlin Mon"),
            (
                "America/VeryLongCityName",
                "unknown time zone America/VeryLongCityName",
            ),
        ];
        for (zone, reason) in cases {
            assert_eq!(
                validate_time_zone(zone).unwrap_err().to_string(),
                format!("spec.timeZone: Invalid value: {}: {reason}", go_quote(zone))
            );
        }
    }
}
