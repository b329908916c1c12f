//! A unit file as data, and its one rendering to text. Every untrusted value passes through
//! [`crate::escape`] here, chosen by the kind of key, so no caller can write raw text into a unit.

use crate::escape::{self, Arg, EscapeError};
use std::borrow::Cow;

/// One value of a key, typed by the syntax systemd parses it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Text podunit itself produced (numbers, fixed words, unit names it built): written as is.
    /// Fixed words are borrowed, not copied into a string of their own.
    Trusted(Cow<'static, str>),
    /// An untrusted single string (`Description=`, `X-*=`).
    Plain(String),
    /// An untrusted absolute path (`WorkingDirectory=`, `RootDirectory=`, `SourcePath=`, ...).
    Path(String),
    /// A command line (`Exec*=`).
    Exec(Vec<Arg>),
    /// A command line run with the manager's privileges (`+`), outside the unit's user and
    /// sandbox: podunit's own helpers, with arguments from the manifest.
    PrivilegedExec(Vec<Arg>),
    /// `Environment=` assignments.
    Env(Vec<(String, String)>),
    /// `LogExtraFields=` assignments.
    LogFields(Vec<(String, String)>),
    /// One `BindPaths=`/`BindReadOnlyPaths=` entry: (source, destination).
    Bind(String, String),
    /// A bind entry whose source may not exist yet when systemd sets up the mount namespace
    /// (`-` prefix): a subPath, which the unit's own `ExecStartPre=` creates.
    OptionalBind(String, String),
}

/// A `[Section]` with its keys in order (order matters for Exec*= and lists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: &'static str,
    pub entries: Vec<(&'static str, Value)>,
}

/// A unit file: its name and sections, plus the comment header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitFile {
    pub name: String,
    pub header: Vec<String>,
    pub sections: Vec<Section>,
}

/// An untrusted value that could not be written; `key` says which setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderError {
    pub unit: String,
    pub key: &'static str,
    pub error: EscapeError,
}

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}= {}", self.unit, self.key, self.error)
    }
}

impl std::error::Error for RenderError {}

impl UnitFile {
    pub fn new(name: impl Into<String>) -> Self {
        UnitFile {
            name: name.into(),
            header: Vec::new(),
            sections: Vec::new(),
        }
    }

    /// The section called `name`, created at the end if missing.
    pub fn section(&mut self, name: &'static str) -> &mut Section {
        if let Some(i) = self.sections.iter().position(|s| s.name == name) {
            return &mut self.sections[i];
        }
        // Room for a container's [Service] (about 50 keys) without growing it entry by entry.
        let room = if name == "Service" { 64 } else { 16 };
        self.sections.push(Section {
            name,
            entries: Vec::with_capacity(room),
        });
        self.sections.last_mut().expect("just pushed")
    }

    /// The unit file's text. Rendered into one buffer kept by the thread (it grows once to the
    /// size of the largest unit) and copied out at its exact length: no string per value, no
    /// reallocation per unit.
    pub fn render(&self) -> Result<String, RenderError> {
        thread_local! {
            static BUF: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        BUF.with(|buf| {
            let mut out = buf.borrow_mut();
            out.clear();
            self.render_into(&mut out)?;
            Ok(out.as_str().to_owned())
        })
    }

    fn render_into(&self, out: &mut String) -> Result<(), RenderError> {
        for h in &self.header {
            // Header lines are podunit's own text, but a file path may hold a newline: never let it
            // end the comment.
            out.push_str("# ");
            if h.contains(['\n', '\r']) {
                out.push_str(&h.replace(['\n', '\r'], "?"));
            } else {
                out.push_str(h);
            }
            out.push('\n');
        }
        for (i, s) in self.sections.iter().enumerate() {
            if i > 0 || !self.header.is_empty() {
                out.push('\n');
            }
            out.push('[');
            out.push_str(s.name);
            out.push_str("]\n");
            for (key, value) in &s.entries {
                let fail = |error| RenderError {
                    unit: self.name.clone(),
                    key,
                    error,
                };
                // Assignments go one to a line: a line must stay under systemd's 1 MiB limit
                // however many there are.
                match value {
                    Value::Env(pairs) | Value::LogFields(pairs) if !pairs.is_empty() => {
                        let env = matches!(value, Value::Env(_));
                        for (k, v) in pairs {
                            start_line(out, key);
                            if env {
                                escape::push_environment_assignment(out, k, v)
                            } else {
                                escape::push_log_extra_field(out, k, v)
                            }
                            .map_err(fail)?;
                            out.push('\n');
                        }
                    }
                    v => {
                        start_line(out, key);
                        push_value(out, v).map_err(fail)?;
                        out.push('\n');
                    }
                }
            }
        }
        Ok(())
    }
}

impl Section {
    pub fn add(&mut self, key: &'static str, value: Value) -> &mut Self {
        self.entries.push((key, value));
        self
    }

    pub fn trusted(&mut self, key: &'static str, value: impl Into<Cow<'static, str>>) -> &mut Self {
        self.add(key, Value::Trusted(value.into()))
    }

    /// Whether a line of `key` was added.
    pub fn has(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| *k == key)
    }
}

fn start_line(out: &mut String, key: &str) {
    out.push_str(key);
    out.push('=');
}

/// One value as its line holds it (an empty `Env`/`LogFields` is the empty reset line).
fn push_value(out: &mut String, v: &Value) -> Result<(), EscapeError> {
    match v {
        Value::Trusted(s) => {
            debug_assert!(
                !s.contains(['\n', '\r']),
                "trusted value with a line break: {s:?}"
            );
            out.push_str(s);
            Ok(())
        }
        Value::Plain(s) => escape::push_plain(out, s),
        Value::Path(p) => escape::push_path(out, p),
        Value::Exec(argv) => escape::push_exec_line(out, argv),
        Value::PrivilegedExec(argv) => {
            out.push('+');
            escape::push_exec_line(out, argv)
        }
        Value::Env(_) | Value::LogFields(_) => Ok(()),
        Value::Bind(src, dst) => escape::push_bind_path(out, src, dst),
        Value::OptionalBind(src, dst) => {
            out.push('-');
            escape::push_bind_path(out, src, dst)
        }
    }
}
