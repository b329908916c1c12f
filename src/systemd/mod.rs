//! A small systemd client over D-Bus (zbus, blocking API): the manager calls podunit needs,
//! unit properties, and the signals that drive reconcile and status (Reloading, JobRemoved,
//! PropertiesChanged). Translation of the bus's data lives in [`props`], which is pure.

pub mod notify;
pub mod props;
pub mod unit;

use crate::systemd::unit::{ListedUnit, UnitState};
use std::collections::HashMap;
use std::fmt;
use zbus::blocking::{Connection, MessageIterator};
use zbus::message::Type as MsgType;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};

const DEST: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER_IFACE: &str = "org.freedesktop.systemd1.Manager";
const UNIT_IFACE: &str = "org.freedesktop.systemd1.Unit";
const SERVICE_IFACE: &str = "org.freedesktop.systemd1.Service";
const PROPS_IFACE: &str = "org.freedesktop.DBus.Properties";

/// Glob for every unit podunit generates (and podunit-sync itself, which callers filter out).
pub const UNIT_PATTERN: &str = "podunit-*";

#[derive(Debug)]
pub struct Error {
    /// What podunit was doing: `StartUnit podunit-default_web.service`.
    pub what: String,
    /// Boxed: zbus's error is large and errors are rare.
    pub source: Box<zbus::Error>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "systemd D-Bus call {} failed: {}",
            self.what, self.source
        )
    }
}

impl Error {
    /// The D-Bus error name systemd answered with, if the call reached it.
    fn name(&self) -> Option<&str> {
        match &*self.source {
            zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
            zbus::Error::FDO(e) => match **e {
                zbus::fdo::Error::UnknownObject(_) => {
                    Some("org.freedesktop.DBus.Error.UnknownObject")
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// systemd does not know the unit (any more, or yet): its file is gone, or a reload is about
    /// to bring it. Not a failure of the caller's.
    pub fn is_no_such_unit(&self) -> bool {
        matches!(
            self.name(),
            Some(
                "org.freedesktop.systemd1.NoSuchUnit" | "org.freedesktop.DBus.Error.UnknownObject"
            )
        )
    }

    /// A transient unit of that name is still there.
    pub fn is_unit_exists(&self) -> bool {
        self.name() == Some("org.freedesktop.systemd1.UnitExists")
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

fn ctx<T>(what: impl Into<String>, r: zbus::Result<T>) -> Result<T, Error> {
    r.map_err(|source| Error {
        what: what.into(),
        source: Box::new(source),
    })
}

/// systemd's answer to a second `Subscribe` on one connection.
fn already_subscribed(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _)
        if name.as_str() == "org.freedesktop.systemd1.AlreadySubscribed")
}

/// What systemd tells a subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `Reloading(true)` before a daemon-reload, `Reloading(false)` once it is done.
    Reloading(bool),
    /// A job finished: `result` is `done`, `canceled`, `timeout`, `failed`, `dependency`, `skipped`.
    JobRemoved {
        id: u32,
        /// The job's object path, as returned by StartUnit and friends.
        job: String,
        unit: String,
        result: String,
    },
    /// Properties of a unit changed (state, restarts, ...).
    UnitChanged { unit: String },
}

/// What a process needs to run as a service's main process does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecContext {
    /// `MainPID` (0: not running).
    pub pid: u32,
    /// `Environment`: `NAME=value` assignments.
    pub env: Vec<String>,
    /// `EnvironmentFiles`: (path, ignore if missing).
    pub files: Vec<(String, bool)>,
}

/// A connection to the system manager.
pub struct Client {
    conn: Connection,
}

/// Job mode for start/stop/restart: replace conflicting queued jobs, as `systemctl` does.
const MODE: &str = "replace";
/// Signals buffered per subscription. Every caller drains its stream on a thread of its own, so
/// this is only slack: zbus preallocates it (120 bytes a slot) and waits, never drops, when full.
const EVENT_QUEUE: usize = 256;

impl Client {
    /// The process's connection to the system bus, made on first use and shared by every
    /// caller: each connection costs a zbus executor thread and its buffers, and podunit-sync
    /// has several users (reconcile, the cluster agent's unit watch, probes, the kubelet API).
    /// Calls from many threads interleave on one connection; each signal stream has its own
    /// queue, drained by a thread of its own.
    pub fn system() -> Result<Self, Error> {
        static SHARED: std::sync::Mutex<Option<Connection>> = std::sync::Mutex::new(None);
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(conn) = shared.as_ref() {
            return Ok(Client { conn: conn.clone() });
        }
        let conn = ctx("connect to the system bus", Connection::system())?;
        *shared = Some(conn.clone());
        Ok(Client { conn })
    }

    /// One method call. Plain calls, no proxies: a zbus proxy would fetch and track the
    /// properties of the object it stands for, which costs a round trip per call site.
    fn call<B, R>(
        &self,
        what: String,
        path: &str,
        iface: &str,
        method: &str,
        body: &B,
    ) -> Result<R, Error>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
        R: for<'d> zbus::zvariant::DynamicDeserialize<'d>,
    {
        let msg = ctx(
            what.clone(),
            self.conn
                .call_method(Some(DEST), path, Some(iface), method, body),
        )?;
        let body = msg.body();
        ctx(what, body.deserialize::<R>())
    }

    fn manager<B, R>(&self, what: String, method: &str, body: &B) -> Result<R, Error>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
        R: for<'d> zbus::zvariant::DynamicDeserialize<'d>,
    {
        self.call(what, MANAGER_PATH, MANAGER_IFACE, method, body)
    }

    /// Opens the signal stream first, then subscribes, so no signal after this call is missed.
    /// `unit_changes`: also every unit's PropertiesChanged (status reporting); without it only
    /// the manager's own signals (Reloading, JobRemoved) are delivered, which is all reconcile needs.
    pub fn events(&self, unit_changes: bool) -> Result<Events, Error> {
        let builder = zbus::MatchRule::builder()
            .msg_type(MsgType::Signal)
            .path_namespace(MANAGER_PATH);
        let builder = ctx("match rule", builder)?;
        let rule = if unit_changes {
            builder.build()
        } else {
            ctx("match rule", builder.interface(MANAGER_IFACE))?.build()
        };
        let iter = ctx(
            "AddMatch",
            MessageIterator::for_match_rule(rule, &self.conn, Some(EVENT_QUEUE)),
        )?;
        // Subscribing is per connection: the connection is shared, so another stream may have
        // subscribed it already, which systemd answers with an error of its own.
        match self.manager::<_, ()>("Subscribe".into(), "Subscribe", &()) {
            Err(e) if already_subscribed(&e.source) => {}
            r => r?,
        }
        Ok(Events { iter })
    }

    /// `ListUnitsByPatterns([], [pattern])`: every loaded unit matching, in any state.
    pub fn list_units(&self, pattern: &str) -> Result<Vec<ListedUnit>, Error> {
        let rows: Vec<props::ListRow> = self.manager(
            "ListUnitsByPatterns".into(),
            "ListUnitsByPatterns",
            &(Vec::<String>::new(), vec![pattern.to_string()]),
        )?;
        Ok(rows.iter().map(props::listed).collect())
    }

    fn job(&self, method: &str, unit: &str) -> Result<OwnedObjectPath, Error> {
        self.manager(format!("{method} {unit}"), method, &(unit, MODE))
    }

    pub fn start(&self, unit: &str) -> Result<OwnedObjectPath, Error> {
        self.job("StartUnit", unit)
    }

    pub fn stop(&self, unit: &str) -> Result<OwnedObjectPath, Error> {
        self.job("StopUnit", unit)
    }

    pub fn restart(&self, unit: &str) -> Result<OwnedObjectPath, Error> {
        self.job("RestartUnit", unit)
    }

    pub fn try_restart(&self, unit: &str) -> Result<OwnedObjectPath, Error> {
        self.job("TryRestartUnit", unit)
    }

    pub fn reset_failed(&self, unit: &str) -> Result<(), Error> {
        self.manager(
            format!("ResetFailedUnit {unit}"),
            "ResetFailedUnit",
            &(unit,),
        )
    }

    /// `KillUnit(unit, "all", signal)`: every process of the unit.
    pub fn kill(&self, unit: &str, signal: i32) -> Result<(), Error> {
        self.kill_who(unit, "all", signal)
    }

    /// `KillUnit(unit, who, signal)`: `who` is `main`, `control` or `all`.
    pub fn kill_who(&self, unit: &str, who: &str, signal: i32) -> Result<(), Error> {
        self.manager(format!("KillUnit {unit}"), "KillUnit", &(unit, who, signal))
    }

    /// Runs `argv` once as a transient oneshot unit `name`, in the service manager's context (not
    /// in podunit-sync's sandbox), collected when done even if it failed. Returns its start job,
    /// whose `JobRemoved` result says whether `argv` succeeded.
    pub fn run_transient(
        &self,
        name: &str,
        description: &str,
        argv: &[String],
    ) -> Result<OwnedObjectPath, Error> {
        use zbus::zvariant::Value;
        let props: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from(description)),
            ("Type", Value::from("oneshot")),
            ("CollectMode", Value::from("inactive-or-failed")),
            ("ExecStart", Self::exec_start(name, argv)?),
        ];
        self.start_transient(name, props)
    }

    /// [`props::exec_start`], its refusal an error of the `StartTransientUnit` call.
    fn exec_start(name: &str, argv: &[String]) -> Result<zbus::zvariant::Value<'static>, Error> {
        props::exec_start(argv).map_err(|e| Error {
            what: format!("StartTransientUnit {name}"),
            source: Box::new(zbus::Error::Failure(e)),
        })
    }

    /// `StartTransientUnit(name, "replace", props, [])`: its start job.
    fn start_transient(
        &self,
        name: &str,
        props: Vec<(&str, zbus::zvariant::Value<'_>)>,
    ) -> Result<OwnedObjectPath, Error> {
        let aux: Vec<(&str, Vec<(&str, zbus::zvariant::Value<'_>)>)> = Vec::new();
        self.manager(
            format!("StartTransientUnit {name}"),
            "StartTransientUnit",
            &(name, MODE, props, aux),
        )
    }

    /// Like [`Client::run_transient`], with the process's stdin, stdout and stderr handed over
    /// (the unit takes copies: the caller closes its own ends).
    pub fn run_transient_with_stdio(
        &self,
        name: &str,
        description: &str,
        argv: &[String],
        stdio: [std::os::fd::BorrowedFd<'_>; 3],
    ) -> Result<(), Error> {
        use zbus::zvariant::{Fd, Value};
        let [i, o, e] = stdio;
        let props: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from(description)),
            ("Type", Value::from("oneshot")),
            ("CollectMode", Value::from("inactive-or-failed")),
            ("ExecStart", Self::exec_start(name, argv)?),
            ("StandardInputFileDescriptor", Value::Fd(Fd::from(i))),
            ("StandardOutputFileDescriptor", Value::Fd(Fd::from(o))),
            ("StandardErrorFileDescriptor", Value::Fd(Fd::from(e))),
        ];
        self.start_transient(name, props).map(drop)
    }

    /// Starts `argv` as a transient service `name` in the network namespace of the running unit
    /// `of` (`JoinsNamespaceOf=`, `PrivateNetwork=yes`: where systemd puts that unit's
    /// containers), with `stdin` handed over (stdout and stderr go to the journal). It may
    /// connect to ports and nothing more: no capabilities, no new privileges, a read-only
    /// system. `Requisite=` the unit, so a unit that is not running fails the start rather than
    /// giving the service a new, empty namespace. Does not wait for the start job.
    pub fn run_transient_in_network_of(
        &self,
        name: &str,
        description: &str,
        argv: &[String],
        stdin: std::os::fd::BorrowedFd<'_>,
        of: &str,
    ) -> Result<(), Error> {
        use zbus::zvariant::{Fd, Value};
        let unit = vec![of.to_string()];
        // An allow-list (true), as `RestrictAddressFamilies=AF_INET ...` is.
        let families = (true, vec!["AF_INET", "AF_INET6", "AF_UNIX"]);
        let props: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from(description)),
            ("Type", Value::from("simple")),
            ("CollectMode", Value::from("inactive-or-failed")),
            ("ExecStart", Self::exec_start(name, argv)?),
            ("StandardInputFileDescriptor", Value::Fd(Fd::from(stdin))),
            // Not the socket, which is the default with an fd for stdin.
            ("StandardOutput", Value::from("journal")),
            ("StandardError", Value::from("journal")),
            ("JoinsNamespaceOf", Value::from(unit.clone())),
            ("Requisite", Value::from(unit.clone())),
            ("After", Value::from(unit)),
            ("PrivateNetwork", Value::from(true)),
            ("NoNewPrivileges", Value::from(true)),
            ("CapabilityBoundingSet", Value::from(0u64)),
            ("RestrictAddressFamilies", Value::from(families)),
            ("ProtectSystem", Value::from("strict")),
            ("ProtectHome", Value::from("yes")),
        ];
        self.start_transient(name, props).map(drop)
    }

    /// A service's `MainPID`, `Environment` and `EnvironmentFiles` (path, ignore-if-missing):
    /// what a process needs to run as the service's main process does.
    pub fn service_exec_context(&self, unit: &str) -> Result<ExecContext, Error> {
        let s = self.get_all(unit, SERVICE_IFACE)?;
        let what = format!("GetAll {SERVICE_IFACE} {unit}");
        fn take<T: TryFrom<OwnedValue, Error = zbus::zvariant::Error> + Default>(
            s: &HashMap<String, OwnedValue>,
            k: &str,
        ) -> zbus::Result<T> {
            match s.get(k) {
                None => Ok(T::default()),
                Some(v) => Ok(T::try_from(v.try_clone()?)?),
            }
        }
        let pid: u32 = ctx(what.clone(), take(&s, "MainPID"))?;
        let env: Vec<String> = ctx(what.clone(), take(&s, "Environment"))?;
        let files: Vec<(String, bool)> = ctx(what, take(&s, "EnvironmentFiles"))?;
        Ok(ExecContext { pid, env, files })
    }

    /// `daemon-reload`. Returns once systemd has reloaded.
    pub fn reload(&self) -> Result<(), Error> {
        self.manager("Reload".into(), "Reload", &())
    }

    /// `FragmentPath` of a unit: empty when it has no unit file.
    pub fn fragment_path(&self, unit: &str) -> Result<String, Error> {
        let v = self.get(unit, UNIT_IFACE, "FragmentPath")?;
        let mut m = HashMap::new();
        m.insert("FragmentPath".to_string(), v);
        Ok(props::unit_state(unit, &m, &HashMap::new()).fragment_path)
    }

    /// A service's `StatusText` (what it last told systemd with `STATUS=`); empty when none.
    pub fn status_text(&self, unit: &str) -> Result<String, Error> {
        let v = self.get(unit, SERVICE_IFACE, "StatusText")?;
        Ok(String::try_from(v).unwrap_or_default())
    }

    /// One property of a unit.
    fn get(&self, unit: &str, iface: &str, name: &str) -> Result<OwnedValue, Error> {
        self.call(
            format!("Get {name} {unit}"),
            &props::unit_path(unit),
            PROPS_IFACE,
            "Get",
            &(iface, name),
        )
    }

    /// When the unit's current stop began, on `CLOCK_MONOTONIC` (µs): `ActiveExitTimestamp`, if
    /// the unit left `active` after it last started; None when it never got there (stopped while
    /// activating) or systemd does not know it.
    pub fn stop_began_monotonic_us(&self, unit: &str) -> Result<Option<u64>, Error> {
        let get = |prop: &str| -> Result<u64, Error> {
            Ok(u64::try_from(self.get(unit, UNIT_IFACE, prop)?).unwrap_or(0))
        };
        let exit = get("ActiveExitTimestampMonotonic")?;
        let start = get("InactiveExitTimestampMonotonic")?;
        Ok((exit != 0 && exit >= start).then_some(exit))
    }

    fn get_all(&self, unit: &str, iface: &str) -> Result<HashMap<String, OwnedValue>, Error> {
        self.call(
            format!("GetAll {iface} {unit}"),
            &props::unit_path(unit),
            PROPS_IFACE,
            "GetAll",
            &(iface,),
        )
    }

    /// The properties of `unit` that status needs. A unit systemd does not know comes back as
    /// `not-found`/`inactive`, as systemctl shows it.
    pub fn unit_state(&self, unit: &str) -> Result<UnitState, Error> {
        let u = self.get_all(unit, UNIT_IFACE)?;
        let s = if unit.ends_with(".service") {
            self.get_all(unit, SERVICE_IFACE)?
        } else {
            HashMap::new()
        };
        Ok(props::unit_state(unit, &u, &s))
    }
}

/// The signal stream of a subscribed client. Blocks until the next event.
pub struct Events {
    iter: MessageIterator,
}

impl Iterator for Events {
    type Item = Result<Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let msg = match self.iter.next()? {
                Ok(m) => m,
                Err(e) => return Some(ctx("receive signal", Err(e))),
            };
            if let Some(ev) = decode(&msg) {
                return Some(Ok(ev));
            }
        }
    }
}

fn decode(msg: &zbus::Message) -> Option<Event> {
    let h = msg.header();
    let iface = h.interface()?.as_str();
    let member = h.member()?.as_str();
    let body = msg.body();
    match (iface, member) {
        (MANAGER_IFACE, "Reloading") => body.deserialize::<bool>().ok().map(Event::Reloading),
        (MANAGER_IFACE, "JobRemoved") => {
            let (id, job, unit, result): (u32, OwnedObjectPath, String, String) =
                body.deserialize().ok()?;
            Some(Event::JobRemoved {
                id,
                job: job.as_str().to_string(),
                unit,
                result,
            })
        }
        (PROPS_IFACE, "PropertiesChanged") => {
            let unit = props::unit_from_path(h.path()?.as_str())?;
            Some(Event::UnitChanged { unit })
        }
        _ => None,
    }
}
