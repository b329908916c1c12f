//! The CronJob controller's decision for one CronJob, pure: given its terms, its record and
//! whether its last run is still going, whether a run is due now. The rules are
//! `pkg/controller/cronjob`'s (`syncCronJob`, `mostRecentScheduleTime`):
//!
//! - the run due is the most recent time the schedule names, in `timeZone` (the host's zone
//!   without one), after the last scheduled run and after the CronJob appeared; older missed
//!   times are not run (one run catches up a downtime);
//! - past `startingDeadlineSeconds` it is missed (`MissSchedule`), and waits for the next time;
//! - while a run is going: `Forbid` waits (`JobAlreadyActive`: the due run starts once the
//!   going one ends, if still within its deadline), `Replace` stops it and starts the new one;
//! - `suspend` runs nothing.
//!
//! `Allow` would run the new Job beside the going one; here a CronJob's runs share one Job's
//! pods, so `Allow` waits as `Forbid` does, and says so.

use super::cron::Schedule;
use super::job::CronTerms;
use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::{AmbiguousOffset, TimeZone};

/// What podunit-sync keeps of a CronJob.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronRecord {
    /// When podunit-sync first saw the CronJob (unix seconds): its creation, for the schedule.
    pub first_seen: i64,
    /// `status.lastScheduleTime` (unix seconds): the scheduled time of the last run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule: Option<i64>,
    /// The scheduled time last said to be missed or held, so each is said once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_said: Option<i64>,
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Nothing,
    /// Start a run for the time `scheduled` (unix seconds); `replace`: stop the going one first.
    Run {
        scheduled: i64,
        replace: bool,
    },
    /// A due run that is not started now, with the controller's event reason and message.
    Held {
        scheduled: i64,
        reason: &'static str,
        message: String,
    },
}

/// The decision, and the record to keep.
pub fn decide(
    terms: &CronTerms,
    schedule: &Schedule,
    zone: &TimeZone,
    record: &CronRecord,
    running: bool,
    now: i64,
) -> (Next, CronRecord) {
    let mut rec = record.clone();
    if terms.suspend {
        return (Next::Nothing, rec);
    }
    let after = rec
        .last_schedule
        .unwrap_or(rec.first_seen)
        .max(rec.first_seen);
    let Some(scheduled) = most_recent(schedule, zone, now, after) else {
        return (Next::Nothing, rec);
    };
    let say = |rec: &mut CronRecord, reason, message: String| {
        if rec.last_said == Some(scheduled) {
            return Next::Nothing;
        }
        rec.last_said = Some(scheduled);
        Next::Held {
            scheduled,
            reason,
            message,
        }
    };
    if let Some(deadline) = terms.starting_deadline_seconds
        && scheduled + deadline as i64 <= now
    {
        let message = format!(
            "Missed scheduled time to start a job: {}",
            rfc1123z(scheduled)
        );
        return (say(&mut rec, "MissSchedule", message), rec);
    }
    if running {
        match terms.concurrency_policy.as_str() {
            "Replace" => {}
            "Forbid" => {
                let message = "Not starting job because prior execution is running and \
                               concurrency policy is Forbid"
                    .to_string();
                return (say(&mut rec, "JobAlreadyActive", message), rec);
            }
            _ => {
                let message = "Not starting job because prior execution is running: podunit \
                               runs one Job of a CronJob at a time, so concurrency policy Allow \
                               waits as Forbid does"
                    .to_string();
                return (say(&mut rec, "JobAlreadyActive", message), rec);
            }
        }
    }
    rec.last_schedule = Some(scheduled);
    (
        Next::Run {
            scheduled,
            replace: running,
        },
        rec,
    )
}

/// The most recent time at or before `now` that `schedule` names in `zone`, if it is after
/// `after` (all unix seconds). A local time that does not exist (skipped at the start of
/// daylight saving time) is never named; one that exists twice is named at its first.
pub fn most_recent(schedule: &Schedule, zone: &TimeZone, now: i64, after: i64) -> Option<i64> {
    let now_ts = Timestamp::from_second(now).ok()?;
    let mut day: Date = now_ts.to_zoned(zone.clone()).date();
    // Every schedule names a time within 8 years (29 February of a leap year, on a weekday).
    for _ in 0..(366 * 8) {
        // The day's last second is before `after`: so is every time of it and before it.
        if let Ok(end) = zone.to_ambiguous_timestamp(day.at(23, 59, 59, 0)).later()
            && end.as_second() <= after
        {
            return None;
        }
        if day_matches(schedule, day) {
            for hour in (0..24).rev().filter(|h| schedule.hour.contains(*h)) {
                for minute in (0..60).rev().filter(|m| schedule.minute.contains(*m)) {
                    let local = day.at(hour as i8, minute as i8, 0, 0);
                    let amb = zone.to_ambiguous_timestamp(local);
                    if matches!(amb.offset(), AmbiguousOffset::Gap { .. }) {
                        continue;
                    }
                    let Ok(t) = amb.earlier() else { continue };
                    let t = t.as_second();
                    if t <= after {
                        return None;
                    }
                    if t <= now {
                        return Some(t);
                    }
                }
            }
        }
        day = day.yesterday().ok()?;
    }
    None
}

/// robfig/cron's day rule: both day fields must match if either is a star, else either does.
fn day_matches(s: &Schedule, day: Date) -> bool {
    if !s.month.contains(day.month() as u32) {
        return false;
    }
    let dom = s.dom.contains(day.day() as u32);
    let dow = s.dow.contains(day.weekday().to_sunday_zero_offset() as u32);
    if s.dom.star || s.dow.star {
        dom && dow
    } else {
        dom || dow
    }
}

/// Go's `time.RFC1123Z` in UTC, as the controller's event prints a scheduled time.
pub fn rfc1123z(t: i64) -> String {
    Timestamp::from_second(t)
        .map(|ts| ts.strftime("%a, %d %b %Y %H:%M:%S +0000").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::cron::parse;

    fn ts(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_second()
    }

    fn terms(policy: &str, deadline: Option<u64>) -> CronTerms {
        CronTerms {
            schedule: "*/5 * * * *".into(),
            time_zone: None,
            concurrency_policy: policy.into(),
            starting_deadline_seconds: deadline,
            suspend: false,
        }
    }

    #[test]
    fn the_most_recent_time_in_the_zone() {
        let utc = TimeZone::UTC;
        let s = parse("*/5 * * * *").unwrap();
        let now = ts("2026-12-07T10:07:30Z");
        assert_eq!(
            most_recent(&s, &utc, now, 0),
            Some(ts("2026-12-07T10:05:00Z"))
        );
        assert_eq!(most_recent(&s, &utc, now, ts("2026-12-07T10:05:00Z")), None);
        // Day of month OR day of week when both are restricted: the 1st, or a Friday.
        let s = parse("0 9 1 * 5").unwrap();
        assert_eq!(
            most_recent(&s, &utc, ts("2026-12-07T10:00:00Z"), 0),
            Some(ts("2026-12-04T09:00:00Z")),
            "Friday the 4th"
        );
        let s = parse("0 0 29 2 *").unwrap();
        assert_eq!(
            most_recent(&s, &utc, now, 0),
            Some(ts("2024-02-29T00:00:00Z"))
        );
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        let s = parse("30 2 * * *").unwrap();
        // 2026-03-29 02:30 does not exist in Berlin: the day before's is the most recent.
        assert_eq!(
            most_recent(&s, &berlin, ts("2026-03-29T12:00:00Z"), 0),
            Some(ts("2026-03-28T01:30:00Z"))
        );
        // 2026-10-25 02:30 exists twice: the first (CEST, UTC+2).
        assert_eq!(
            most_recent(&s, &berlin, ts("2026-10-25T12:00:00Z"), 0),
            Some(ts("2026-10-25T00:30:00Z"))
        );
    }

    #[test]
    fn due_runs_deadlines_and_concurrency() {
        let s = parse("*/5 * * * *").unwrap();
        let utc = TimeZone::UTC;
        let rec = CronRecord {
            first_seen: ts("2026-12-07T09:00:00Z"),
            ..Default::default()
        };
        let now = ts("2026-12-07T10:07:30Z");
        let (next, rec2) = decide(&terms("Allow", None), &s, &utc, &rec, false, now);
        let due = ts("2026-12-07T10:05:00Z");
        assert_eq!(
            next,
            Next::Run {
                scheduled: due,
                replace: false
            }
        );
        assert_eq!(rec2.last_schedule, Some(due));
        // Run once: the same time is not due again.
        assert_eq!(
            decide(&terms("Allow", None), &s, &utc, &rec2, false, now).0,
            Next::Nothing
        );
        // Missed its starting deadline: said once.
        let (next, rec3) = decide(&terms("Allow", Some(60)), &s, &utc, &rec, false, now);
        assert!(
            matches!(
                next,
                Next::Held {
                    reason: "MissSchedule",
                    ..
                }
            ),
            "{next:?}"
        );
        assert_eq!(
            decide(&terms("Allow", Some(60)), &s, &utc, &rec3, false, now).0,
            Next::Nothing
        );
        // Forbid holds the run while one goes, then runs it.
        let (next, rec4) = decide(&terms("Forbid", None), &s, &utc, &rec, true, now);
        assert!(matches!(
            next,
            Next::Held {
                reason: "JobAlreadyActive",
                ..
            }
        ));
        assert_eq!(
            decide(&terms("Forbid", None), &s, &utc, &rec4, false, now + 10).0,
            Next::Run {
                scheduled: due,
                replace: false
            }
        );
        assert_eq!(
            decide(&terms("Replace", None), &s, &utc, &rec, true, now).0,
            Next::Run {
                scheduled: due,
                replace: true
            }
        );
        // Nothing before the CronJob appeared.
        let new = CronRecord {
            first_seen: ts("2026-12-07T10:06:00Z"),
            ..Default::default()
        };
        assert_eq!(
            decide(&terms("Allow", None), &s, &utc, &new, false, now).0,
            Next::Nothing
        );
        assert_eq!(rfc1123z(due), "Mon, 07 Dec 2026 10:05:00 +0000");
    }
}
