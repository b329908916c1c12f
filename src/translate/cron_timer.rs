//! A CronJob's timer: `OnCalendar=` values whose union fires when its schedule does (see
//! [`crate::workload::cron`]), activating the CronJob's target, a unit with no work whose start
//! job tells podunit-sync (the CronJob controller) that a run is due. The timer wakes
//! podunit-sync and is what `systemctl list-timers` shows; podunit-sync decides the run (missed
//! times, deadlines, concurrency), so the timer is not `Persistent=`.

use super::naming;
use super::unit::{UnitFile, Value};
use super::{Fault, Output, Rendered, concat, header};
use crate::workload::job::JobTerms;

/// The timer, its target and the timer's link into `timers.target`, for the CronJob whose Job
/// `job` is. None when `job` is not a CronJob's.
pub fn outputs(job: &JobTerms, source: &str) -> Option<Result<Vec<Output>, Fault>> {
    let cron = job.cron.as_ref()?;
    let specs =
        match crate::workload::cron::calendar_specs(&cron.schedule, cron.time_zone.as_deref()) {
            Ok(s) => s,
            Err(e) => return Some(Err(Fault::new(e.field.path(), e.to_string()))),
        };
    let (ns, name) = (job.namespace.as_str(), job.name.as_str());
    let timer_name = naming::cron_timer(ns, name);
    let target_name = naming::cron_target(ns, name);
    let what = concat(&["CronJob ", ns, "/", name]);

    let mut timer = UnitFile::new(timer_name.clone());
    timer.header = header(source);
    let u = timer.section("Unit");
    u.add("Description", Value::Plain(what.clone()));
    u.add("Documentation", Value::Trusted("man:podunit(1)".into()));
    u.add("SourcePath", Value::Path(source.to_string()));
    u.add("X-PodunitCronJob", Value::Plain(concat(&[ns, "/", name])));
    let t = timer.section("Timer");
    // A schedule that never fires (`0 0 30 2 *`) has no spec: the timer then never elapses.
    for spec in specs {
        t.add("OnCalendar", Value::Plain(spec));
    }
    t.trusted("AccuracySec", "1s");
    t.trusted("Unit", target_name.clone());

    let mut target = UnitFile::new(target_name);
    target.header = header(source);
    let u = target.section("Unit");
    u.add(
        "Description",
        Value::Plain(concat(&["Runs of ", &what, " (podunit-sync starts them)"])),
    );
    u.add("Documentation", Value::Trusted("man:podunit(1)".into()));
    u.add("SourcePath", Value::Path(source.to_string()));
    u.add("X-PodunitCronJob", Value::Plain(concat(&[ns, "/", name])));
    // Down again once started: a timer whose unit stays active never elapses again.
    u.trusted("StopWhenUnneeded", "yes");

    let rendered = Rendered::new(timer, "spec.schedule")
        .and_then(|timer| Ok((timer, Rendered::new(target, "metadata.name")?)));
    Some(rendered.map(|(timer, target)| {
        vec![
            Output::Unit(timer),
            Output::Unit(target),
            Output::Symlink {
                link: concat(&["timers.target.wants/", &timer_name]),
                target: concat(&["../", &timer_name]),
            },
        ]
    }))
}
