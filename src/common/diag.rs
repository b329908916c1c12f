//! Problems found in manifests, reported as `FILE: namespace/pod: field.path: what is wrong`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Nothing wrong, but the pod waits for something this host does not have yet (an image a
    /// pull brings): it gets no units until then.
    Note,
    /// Accepted, but something is not honoured (e.g. probes) or is suspicious.
    Warning,
    /// The pod (or document, or file) is refused.
    Error,
}

/// One finding. `pod` is `namespace/name` when known; `path` is a field path like
/// `spec.containers[0].command`. `reason` is the kubelet-like word a refused pod shows in
/// `podunit status` (e.g. `PolicyViolation`, `NodeAffinity`); without one it shows `InvalidManifest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    pub severity: Severity,
    pub file: PathBuf,
    pub pod: Option<String>,
    pub path: Option<String>,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Problem {
    pub fn error(file: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Problem {
            severity: Severity::Error,
            file: file.into(),
            pod: None,
            path: None,
            message: message.into(),
            reason: None,
        }
    }

    pub fn warning(file: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Problem {
            severity: Severity::Warning,
            ..Problem::error(file, message)
        }
    }

    pub fn note(file: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Problem {
            severity: Severity::Note,
            ..Problem::error(file, message)
        }
    }

    pub fn pod(mut self, pod: impl Into<String>) -> Self {
        self.pod = Some(pod.into());
        self
    }

    pub fn at(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    pub fn is_note(&self) -> bool {
        self.severity == Severity::Note
    }
}

/// Every problem is one line, whatever a manifest holds: a control character in a file name, pod
/// name, namespace, key or message is written as an escape (`\n`, `\x1b`, `\u{85}`), so a manifest
/// can never forge a log line.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", one_line(&self.file.display().to_string()))?;
        if let Some(p) = &self.pod {
            write!(f, "{}: ", one_line(p))?;
        }
        if let Some(p) = self.path.as_deref().filter(|p| !p.is_empty()) {
            write!(f, "{}: ", one_line(p))?;
        }
        match self.severity {
            Severity::Warning => write!(f, "warning: ")?,
            Severity::Note => write!(f, "note: ")?,
            Severity::Error => {}
        }
        f.write_str(&one_line(&self.message))
    }
}

/// `s` with every control character (and Unicode's line and paragraph separators) escaped.
pub fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| c.is_control() || c == '\u{2028}' || c == '\u{2029}';
    if !s.contains(bad) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if bad(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A field path under construction: `spec.containers[0].env[2].name`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldPath(String);

impl FieldPath {
    pub fn new(root: &str) -> Self {
        FieldPath(root.to_string())
    }

    // Validation builds a path for every field it visits, problem or not: these append to one
    // right-sized String rather than go through `format!`.
    pub fn field(&self, name: &str) -> Self {
        if self.0.is_empty() {
            return FieldPath(name.to_string());
        }
        let mut s = String::with_capacity(self.0.len() + 1 + name.len());
        s.push_str(&self.0);
        s.push('.');
        s.push_str(name);
        FieldPath(s)
    }

    pub fn index(&self, i: usize) -> Self {
        let mut s = String::with_capacity(self.0.len() + 8);
        s.push_str(&self.0);
        s.push('[');
        // By hand: `write!` cost several times the rest of the path.
        crate::common::text::push_decimal(&mut s, i as u64);
        s.push(']');
        FieldPath(s)
    }

    pub fn key(&self, k: &str) -> Self {
        FieldPath(format!("{}[{k:?}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_one_line() {
        let p = Problem::error("/etc/pods.d/a\nb.yaml", "bad \"x\ny\"\r")
            .pod("de\u{1b}[2Jfault/we\nb")
            .at("metadata.labels[\"a\u{85}b\u{2028}\"]");
        assert_eq!(
            p.to_string(),
            "/etc/pods.d/a\\nb.yaml: de\\x1b[2Jfault/we\\nb: metadata.labels[\"a\\u{85}b\\u{2028}\"]: bad \"x\\ny\"\\r"
        );
        assert!(!p.to_string().contains(char::is_control));
        assert_eq!(one_line("plain: ok"), "plain: ok");
    }

    #[test]
    fn field_paths_name_fields_indexes_and_keys() {
        let p = FieldPath::new("spec").field("containers");
        assert_eq!(
            p.index(0).field("env").index(12).as_str(),
            "spec.containers[0].env[12]"
        );
        assert_eq!(
            p.index(usize::MAX).as_str(),
            format!("spec.containers[{}]", usize::MAX)
        );
        assert_eq!(
            FieldPath::default().field("data").key("a\"b").as_str(),
            "data[\"a\\\"b\"]"
        );
    }
}
