//! A unit file as data, and its one rendering to text. Every untrusted value passes through
//! [`crate::escape`] here, chosen by the kind of key, so no caller can write raw text into a unit.

use crate::escape::{self, Arg, EscapeError};

/// One value of a key, typed by the syntax systemd parses it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Text podunit itself produced (numbers, fixed words, unit names it built): written as is.
    Trusted(String),
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
        self.sections.push(Section {
            name,
            entries: Vec::new(),
        });
        self.sections.last_mut().expect("just pushed")
    }

    /// The unit file's text.
    pub fn render(&self) -> Result<String, RenderError> {
        // Room for a typical unit: one allocation instead of a dozen reallocations.
        let mut out = String::with_capacity(2048);
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
                    Value::Env(pairs) if !pairs.is_empty() => {
                        for (k, v) in pairs {
                            let text = escape::environment_assignment(k, v).map_err(fail)?;
                            push_line(&mut out, key, &text);
                        }
                    }
                    Value::LogFields(pairs) if !pairs.is_empty() => {
                        for (k, v) in pairs {
                            let text = escape::log_extra_field(k, v).map_err(fail)?;
                            push_line(&mut out, key, &text);
                        }
                    }
                    Value::Trusted(text) => {
                        debug_assert!(
                            !text.contains(['\n', '\r']),
                            "trusted value with a line break: {text:?}"
                        );
                        push_line(&mut out, key, text);
                    }
                    v => push_line(&mut out, key, &render_value(v).map_err(fail)?),
                }
            }
        }
        Ok(out)
    }
}

impl Section {
    pub fn add(&mut self, key: &'static str, value: Value) -> &mut Self {
        self.entries.push((key, value));
        self
    }

    pub fn trusted(&mut self, key: &'static str, value: impl Into<String>) -> &mut Self {
        self.add(key, Value::Trusted(value.into()))
    }
}

fn push_line(out: &mut String, key: &str, value: &str) {
    out.push_str(key);
    out.push('=');
    out.push_str(value);
    out.push('\n');
}

fn render_value(v: &Value) -> Result<String, EscapeError> {
    Ok(match v {
        Value::Trusted(s) => {
            debug_assert!(
                !s.contains(['\n', '\r']),
                "trusted value with a line break: {s:?}"
            );
            s.clone()
        }
        Value::Plain(s) => escape::plain(s)?,
        Value::Path(p) => escape::path(p)?,
        Value::Exec(argv) => escape::exec_line(argv)?,
        Value::PrivilegedExec(argv) => format!("+{}", escape::exec_line(argv)?),
        Value::Env(pairs) => pairs
            .iter()
            .map(|(k, v)| escape::environment_assignment(k, v))
            .collect::<Result<Vec<_>, _>>()?
            .join(" "),
        Value::LogFields(pairs) => pairs
            .iter()
            .map(|(k, v)| escape::log_extra_field(k, v))
            .collect::<Result<Vec<_>, _>>()?
            .join(" "),
        Value::Bind(src, dst) => escape::bind_path(src, dst)?,
        Value::OptionalBind(src, dst) => format!("-{}", escape::bind_path(src, dst)?),
    })
}
