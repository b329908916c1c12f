//! The one place where untrusted strings become systemd unit-file syntax (DESIGN.md §6).
//!
//! systemd 252 does not have one syntax for values: each key's parser unquotes (or not), C-unescapes
//! (or not), expands specifiers and, for command lines, expands `$` at exec time. Each function here
//! targets exactly one of those syntaxes; the table says which keys use it. A key not in the table
//! must not be fed untrusted text until its parser has been checked and a function added here.
//!
//! | function | keys | how systemd 252 parses the value |
//! |---|---|---|
//! | [`exec_line`] | `ExecStart=`, `ExecStartPre=`, `ExecStartPost=`, `ExecStop=`, `ExecStopPost=`, `ExecReload=` | words, `"`-quoted, C escapes, then `%` specifiers per word; `$` at exec time |
//! | [`environment_assignment`] | `Environment=` | words, `"`-quoted, C escapes, then specifiers; `$` literal |
//! | [`log_extra_field`] | `LogExtraFields=` | as `Environment=`, with journal field names |
//! | [`plain`] | `Description=`, `X-*=` (any value not listed elsewhere that is a single string) | whole line, no quoting, no escapes, specifiers; surrounding whitespace dropped |
//! | [`path`] | `WorkingDirectory=`, `RootDirectory=`, `RootImage=`, `SourcePath=`, `EnvironmentFile=` | as [`plain`]; must be absolute and normalized, since systemd would simplify or refuse it |
//! | [`path_word`], [`bind_path`] | `BindPaths=`, `BindReadOnlyPaths=` (and the space-separated `ReadWritePaths=` family) | words, `"`-quoted, `\` takes the next character literally (no C escapes: `\x3a` is `x3a`), `:` separates outside quotes, specifiers |
//! | [`env_file_line`] | lines of a file named by `EnvironmentFile=` | shell-like: `"`-quoted, `\` escapes only `` "\`$ ``, raw newlines kept inside quotes |
//!
//! What systemd does that shapes these (all checked on 252, see tests/escape_roundtrip.rs):
//! - Specifiers are expanded *after* C-unescaping, so `%` is always written `%%`, never `\x25`.
//! - The first word of a command line is stripped of `-@:+!` prefixes *after* unquoting: quoting does
//!   not protect it, and no escape does either. Only an executable that does not start with one of
//!   those characters is accepted (absolute paths never do).
//! - The executable path gets no `$` expansion while argv\[0\] (the same text) does (systemd's
//!   source; exec time is not observable with `systemd --test`): `$` is refused in the executable
//!   rather than encoded two different ways.
//! - A line over 1 MiB makes the unit fail to load (ENOBUFS): see [`MAX_VALUE_LEN`].
//! - Values without quoting ([`plain`], [`path`]) cannot hold control characters at all, lose
//!   surrounding whitespace, and a trailing `\` would join the next line: all refused.
//! - A Unicode noncharacter (U+FDD0..U+FDEF, U+xFFFE/U+xFFFF) anywhere in a line makes systemd
//!   drop the line and fail the unit; `\u` escapes of them are refused too. Refused everywhere.
//! - A first word `;` separates commands even when quoted: refused as an executable.
//! - `Environment=` accepts only names matching `[A-Za-z_][A-Za-z0-9_]*` (others are dropped with a
//!   warning), so they are refused here.
//!
//! Errors never carry values (they may be secrets); names are included, debug-escaped.

pub mod parse;

use std::fmt;
use std::fmt::Write as _;

/// systemd reads unit files line by line and fails a unit with a line over 1 MiB (LONG_LINE_MAX);
/// keep room for the key.
pub const MAX_VALUE_LEN: usize = 1024 * 1024 - 64;

/// The prefixes systemd strips from the first word of a command line.
pub const EXEC_PREFIXES: &[char] = &['-', '@', ':', '+', '!'];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EscapeError {
    /// A NUL character: no systemd syntax can carry it.
    Nul,
    /// An environment variable name that is not `[A-Za-z_][A-Za-z0-9_]*`.
    InvalidEnvName(String),
    /// A journal field name that is not `[A-Z][A-Z0-9_]*` (at most 64 characters).
    InvalidLogFieldName(String),
    /// A command line without any word.
    EmptyCommand,
    /// The executable (first word) is empty.
    EmptyExecutable,
    /// The executable starts with a character systemd takes as a prefix (`-@:+!`).
    ExecutablePrefix(char),
    /// The executable contains a character systemd refuses there (quotes, `\`, control characters)
    /// or that would be expanded in argv\[0\] but not in the path (`$`).
    UnsafeExecutable(char),
    /// The executable is neither an absolute file path nor a plain file name.
    InvalidExecutable,
    /// The executable is an environment reference, which systemd does not expand there.
    VarInExecutable,
    /// A control or line-break character in a value whose syntax has no escapes.
    ControlChar(char),
    /// A Unicode noncharacter (U+FDD0..U+FDEF, U+xFFFE, U+xFFFF): systemd calls such text
    /// "not UTF-8 clean" and drops the line, after which the unit fails to load (an environment
    /// file is refused whole); no escape can write them.
    NonCharacter(char),
    /// Leading or trailing whitespace in a value whose syntax strips it.
    SurroundingWhitespace,
    /// A trailing `\` in a value whose syntax would join it with the next line.
    TrailingBackslash,
    /// A path that is not absolute.
    PathNotAbsolute,
    /// A path with `.`, `..`, `//` or a trailing `/`, which systemd would change or refuse.
    PathNotNormalized,
    /// The encoded value is longer than a unit file line may be.
    TooLong(usize),
}

impl fmt::Display for EscapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EscapeError::Nul => write!(f, "contains a NUL character"),
            EscapeError::InvalidEnvName(n) => write!(
                f,
                "invalid environment variable name {n:?}: must match [A-Za-z_][A-Za-z0-9_]*"
            ),
            EscapeError::InvalidLogFieldName(n) => write!(
                f,
                "invalid journal field name {n:?}: must match [A-Z][A-Z0-9_]* (at most 64 characters)"
            ),
            EscapeError::EmptyCommand => write!(f, "empty command"),
            EscapeError::EmptyExecutable => write!(f, "empty executable name"),
            EscapeError::ExecutablePrefix(c) => {
                write!(
                    f,
                    "executable name starts with {c:?}, which systemd takes as a prefix"
                )
            }
            EscapeError::UnsafeExecutable(c) => {
                write!(
                    f,
                    "executable name contains {c:?}, which systemd does not accept there"
                )
            }
            EscapeError::InvalidExecutable => write!(
                f,
                "executable must be an absolute path to a file or a plain file name (no '/')"
            ),
            EscapeError::VarInExecutable => {
                write!(f, "the executable cannot be an environment reference")
            }
            EscapeError::ControlChar(c) => {
                write!(
                    f,
                    "contains the control character {c:?}, which this setting cannot hold"
                )
            }
            EscapeError::NonCharacter(c) => write!(
                f,
                "contains the Unicode noncharacter U+{:04X}, which systemd refuses",
                *c as u32
            ),
            EscapeError::SurroundingWhitespace => {
                write!(
                    f,
                    "leading or trailing whitespace, which systemd would drop"
                )
            }
            EscapeError::TrailingBackslash => {
                write!(
                    f,
                    "ends with a backslash, which systemd would join with the next line"
                )
            }
            EscapeError::PathNotAbsolute => write!(f, "path is not absolute"),
            EscapeError::PathNotNormalized => {
                write!(
                    f,
                    "path is not normalized (contains '.', '..', '//' or a trailing '/')"
                )
            }
            EscapeError::TooLong(n) => write!(
                f,
                "encoded value is {n} bytes, more than a unit file line can hold ({MAX_VALUE_LEN})"
            ),
        }
    }
}

impl std::error::Error for EscapeError {}

/// One piece of a command-line argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text taken literally.
    Text(String),
    /// A reference to an environment variable whose value is known only when the unit starts
    /// (written `${NAME}`; systemd substitutes it at exec time, an unset variable gives "").
    Var(String),
}

/// A command-line argument: literal text and environment references, concatenated.
/// An argument with no pieces is the empty string, which stays an argument.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Arg(pub Vec<Piece>);

impl Arg {
    pub fn text(s: impl Into<String>) -> Arg {
        Arg(vec![Piece::Text(s.into())])
    }

    pub fn var(name: impl Into<String>) -> Arg {
        Arg(vec![Piece::Var(name.into())])
    }

    pub fn push_text(&mut self, s: impl Into<String>) -> &mut Arg {
        self.0.push(Piece::Text(s.into()));
        self
    }

    pub fn push_var(&mut self, name: impl Into<String>) -> &mut Arg {
        self.0.push(Piece::Var(name.into()));
        self
    }

    /// The argument the process receives, given the values of the referenced variables.
    pub fn resolve(&self, lookup: impl Fn(&str) -> Option<String>) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.clone(),
                Piece::Var(n) => lookup(n).unwrap_or_default(),
            })
            .collect()
    }
}

impl From<&str> for Arg {
    fn from(s: &str) -> Arg {
        Arg::text(s)
    }
}

impl From<String> for Arg {
    fn from(s: String) -> Arg {
        Arg::text(s)
    }
}

/// Whether `name` is accepted by systemd 252 as an environment variable name.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `name` is accepted by systemd 252 as a journal field name in `LogExtraFields=`
/// (`journal_field_valid()` without protected fields).
pub fn is_log_field_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && matches!(chars.next(), Some(c) if c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

fn check_env_name(name: &str) -> Result<(), EscapeError> {
    if is_env_name(name) {
        Ok(())
    } else {
        Err(EscapeError::InvalidEnvName(name.to_string()))
    }
}

/// Refuses a value (what was appended to `out` from `start` on) too long for a unit file line.
fn check_len_from(out: &str, start: usize) -> Result<(), EscapeError> {
    let n = out.len() - start;
    if n > MAX_VALUE_LEN {
        Err(EscapeError::TooLong(n))
    } else {
        Ok(())
    }
}

/// A `push_*` encoder's result as its own string: the encoders append to a unit's text as it is
/// rendered (no string per value), and these wrappers give the same text on its own.
fn owned(push: impl FnOnce(&mut String) -> Result<(), EscapeError>) -> Result<String, EscapeError> {
    let mut out = String::new();
    push(&mut out)?;
    Ok(out)
}

/// What systemd's `unichar_is_valid()` refuses, beyond what a Rust `char` already excludes.
fn is_noncharacter(c: char) -> bool {
    let u = c as u32;
    (0xFDD0..=0xFDEF).contains(&u) || (u & 0xFFFE) == 0xFFFE
}

/// Refuses what no syntax can carry: NUL and noncharacters.
fn check_char(c: char) -> Result<(), EscapeError> {
    if c == '\0' {
        Err(EscapeError::Nul)
    } else if is_noncharacter(c) {
        Err(EscapeError::NonCharacter(c))
    } else {
        Ok(())
    }
}

/// Characters a reader could take as a line break or that terminals interpret: ASCII controls,
/// DEL, the C1 controls and the Unicode line and paragraph separators.
fn is_control(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Appends `s` for the inside of a `"`-quoted word of a C-unescaping syntax (command lines,
/// `Environment=`, `LogExtraFields=`). `dollar` doubles `$` for command lines.
fn push_c_quoted(out: &mut String, s: &str, dollar: bool) -> Result<(), EscapeError> {
    // Most values are printable ASCII with nothing to escape: copied at once.
    if s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && !matches!(b, b'\\' | b'"' | b'%' | b'$'))
    {
        out.push_str(s);
        return Ok(());
    }
    for c in s.chars() {
        check_char(c)?;
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '%' => out.push_str("%%"),
            '$' if dollar => out.push_str("$$"),
            c if (c as u32) < 0x80 && is_control(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_control(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    Ok(())
}

/// Checks the executable (first word) of a command line; see the module notes.
fn check_executable(exe: &str) -> Result<(), EscapeError> {
    let first = exe.chars().next().ok_or(EscapeError::EmptyExecutable)?;
    exe.chars().try_for_each(check_char)?;
    if EXEC_PREFIXES.contains(&first) {
        return Err(EscapeError::ExecutablePrefix(first));
    }
    if let Some(c) = exe
        .chars()
        .find(|&c| c.is_ascii_control() || matches!(c, '"' | '\'' | '\\' | '$'))
    {
        return Err(if c == '\0' {
            EscapeError::Nul
        } else {
            EscapeError::UnsafeExecutable(c)
        });
    }
    let valid = if exe.starts_with('/') {
        // systemd refuses a trailing '/' ("specifies a directory") and over-long paths.
        !exe.ends_with('/') && exe.len() < 4096 && exe.split('/').all(|c| c.len() <= 255)
    } else {
        // A name without '/': systemd searches it in its fixed PATH. A first word ";" (even
        // quoted) separates commands instead.
        !exe.contains('/') && !matches!(exe, "." | ".." | ";") && exe.len() <= 255
    };
    if valid {
        Ok(())
    } else {
        Err(EscapeError::InvalidExecutable)
    }
}

/// A full command line for `ExecStart=` and the other `Exec*=` keys: the process gets exactly
/// `argv` (with each [`Piece::Var`] replaced by the variable's value when the unit starts).
///
/// `argv[0]` is the executable (absolute path or a file name systemd looks up); it must be plain
/// text. Every argument is double-quoted, so empty arguments survive and `;` never separates
/// commands.
pub fn exec_line(argv: &[Arg]) -> Result<String, EscapeError> {
    owned(|out| push_exec_line(out, argv))
}

/// [`exec_line`], appended to `out` (which holds something else on error).
pub fn push_exec_line(out: &mut String, argv: &[Arg]) -> Result<(), EscapeError> {
    let start = out.len();
    let (exe, args) = argv.split_first().ok_or(EscapeError::EmptyCommand)?;
    let exe = match exe.0.as_slice() {
        [] => "",
        [Piece::Text(t)] => t.as_str(),
        pieces if pieces.iter().any(|p| matches!(p, Piece::Var(_))) => {
            return Err(EscapeError::VarInExecutable);
        }
        _ => return Err(EscapeError::InvalidExecutable),
    };
    check_executable(exe)?;
    out.push('"');
    push_c_quoted(out, exe, false)?;
    out.push('"');
    for arg in args {
        out.push_str(" \"");
        for piece in &arg.0 {
            match piece {
                Piece::Text(t) => push_c_quoted(out, t, true)?,
                Piece::Var(name) => {
                    check_env_name(name)?;
                    out.push_str("${");
                    out.push_str(name);
                    out.push('}');
                }
            }
        }
        out.push('"');
    }
    check_len_from(out, start)
}

/// [`exec_line`] for an argv of literal strings.
pub fn exec_line_literal<S: AsRef<str>>(argv: &[S]) -> Result<String, EscapeError> {
    let argv: Vec<Arg> = argv.iter().map(|s| Arg::text(s.as_ref())).collect();
    exec_line(&argv)
}

fn push_quoted_assignment(out: &mut String, name: &str, value: &str) -> Result<(), EscapeError> {
    let start = out.len();
    out.push('"');
    out.push_str(name);
    out.push('=');
    push_c_quoted(out, value, false)?;
    out.push('"');
    check_len_from(out, start)
}

/// One `"NAME=value"` word for `Environment=` (several may share a line, separated by spaces).
/// systemd takes `$` literally here; `\` and control characters are C-escaped.
pub fn environment_assignment(name: &str, value: &str) -> Result<String, EscapeError> {
    owned(|out| push_environment_assignment(out, name, value))
}

/// [`environment_assignment`], appended to `out`.
pub fn push_environment_assignment(
    out: &mut String,
    name: &str,
    value: &str,
) -> Result<(), EscapeError> {
    check_env_name(name)?;
    push_quoted_assignment(out, name, value)
}

/// One `"FIELD=value"` word for `LogExtraFields=`.
pub fn log_extra_field(name: &str, value: &str) -> Result<String, EscapeError> {
    owned(|out| push_log_extra_field(out, name, value))
}

/// [`log_extra_field`], appended to `out`.
pub fn push_log_extra_field(out: &mut String, name: &str, value: &str) -> Result<(), EscapeError> {
    if !is_log_field_name(name) {
        return Err(EscapeError::InvalidLogFieldName(name.to_string()));
    }
    push_quoted_assignment(out, name, value)
}

/// A single-string value for keys parsed without quoting or escapes (see the module table):
/// only `%` needs encoding; what cannot be represented is refused.
pub fn plain(s: &str) -> Result<String, EscapeError> {
    owned(|out| push_plain(out, s))
}

/// [`plain`], appended to `out`.
pub fn push_plain(out: &mut String, s: &str) -> Result<(), EscapeError> {
    // Printable ASCII holds no NUL, control or noncharacter: only the checks below apply.
    let printable = s.bytes().all(|b| (0x20..0x7f).contains(&b));
    if !printable {
        check_plain_chars(s)?;
    }
    // systemd strips WHITESPACE (" \t\n\r"); tabs and newlines are already refused above.
    if s.starts_with(' ') || s.ends_with(' ') {
        return Err(EscapeError::SurroundingWhitespace);
    }
    if s.ends_with('\\') {
        return Err(EscapeError::TrailingBackslash);
    }
    let start = out.len();
    if !s.contains('%') {
        out.push_str(s);
    } else {
        for (i, part) in s.split('%').enumerate() {
            if i > 0 {
                out.push_str("%%");
            }
            out.push_str(part);
        }
    }
    check_len_from(out, start)
}

fn check_plain_chars(s: &str) -> Result<(), EscapeError> {
    s.chars().try_for_each(check_char)?;
    if let Some(c) = s.chars().find(|&c| is_control(c)) {
        return Err(if c == '\0' {
            EscapeError::Nul
        } else {
            EscapeError::ControlChar(c)
        });
    }
    Ok(())
}

/// Checks that `p` is an absolute path that systemd keeps as it is (no simplification).
pub fn check_path(p: &str) -> Result<(), EscapeError> {
    // Printable ASCII holds no NUL or noncharacter: only the shape is checked.
    if !p.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        p.chars().try_for_each(check_char)?;
    }
    if !p.starts_with('/') {
        return Err(EscapeError::PathNotAbsolute);
    }
    if p == "/" {
        return Ok(());
    }
    if p[1..]
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(EscapeError::PathNotNormalized);
    }
    Ok(())
}

/// An absolute path for the single-path keys of the module table (`WorkingDirectory=`, ...).
pub fn path(p: &str) -> Result<String, EscapeError> {
    owned(|out| push_path(out, p))
}

/// [`path`], appended to `out`.
pub fn push_path(out: &mut String, p: &str) -> Result<(), EscapeError> {
    check_path(p)?;
    push_plain(out, p)
}

/// One `"`-quoted path word for `BindPaths=`-style lists: `\` and `"` are backslash-escaped (the
/// next character is taken literally), `%` doubled; `:` and spaces are safe inside the quotes.
pub fn path_word(p: &str) -> Result<String, EscapeError> {
    owned(|out| push_path_word(out, p))
}

fn push_path_word(out: &mut String, p: &str) -> Result<(), EscapeError> {
    check_path(p)?;
    let start = out.len();
    out.push('"');
    // Most paths are printable ASCII with nothing to escape: copied at once.
    if p.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && !matches!(b, b'\\' | b'"' | b'%'))
    {
        out.push_str(p);
        out.push('"');
        return check_len_from(out, start);
    }
    for c in p.chars() {
        match c {
            '\\' | '"' => {
                out.push('\\');
                out.push(c);
            }
            '%' => out.push_str("%%"),
            c if is_control(c) => return Err(EscapeError::ControlChar(c)),
            c => out.push(c),
        }
    }
    out.push('"');
    check_len_from(out, start)
}

/// One `"source":"destination"` entry for `BindPaths=` / `BindReadOnlyPaths=` (recursive bind,
/// the default).
pub fn bind_path(source: &str, destination: &str) -> Result<String, EscapeError> {
    owned(|out| push_bind_path(out, source, destination))
}

/// [`bind_path`], appended to `out`.
pub fn push_bind_path(out: &mut String, src: &str, dst: &str) -> Result<(), EscapeError> {
    let start = out.len();
    push_path_word(out, src)?;
    out.push(':');
    push_path_word(out, dst)?;
    check_len_from(out, start)
}

/// One line (with its `\n`) of a file read through `EnvironmentFile=`, which systemd parses back to
/// exactly (`name`, `value`). The value is double-quoted; inside, systemd unescapes only
/// `` \" \\ \` \$ `` and keeps every other character, newlines included, as it is.
pub fn env_file_line(name: &str, value: &str) -> Result<String, EscapeError> {
    check_env_name(name)?;
    let mut out = String::with_capacity(name.len() + value.len() + 4);
    out.push_str(name);
    out.push_str("=\"");
    for c in value.chars() {
        check_char(c)?;
        match c {
            '"' | '\\' | '`' | '$' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push_str("\"\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<Arg> {
        v.iter().map(|a| Arg::text(*a)).collect()
    }

    #[test]
    fn exec_line_exact() {
        assert_eq!(
            exec_line(&s(&[
                "/bin/echo",
                "a b",
                "",
                "%n",
                "$HOME",
                "\"\\",
                "a\nb\t\x01\x7f"
            ]))
            .unwrap(),
            r#""/bin/echo" "a b" "" "%%n" "$$HOME" "\"\\" "a\nb\t\x01\x7f""#
        );
        assert_eq!(
            exec_line(&s(&["sh", ";", "é\u{85}\u{2028}"])).unwrap(),
            r#""sh" ";" "é\u0085\u2028""#
        );
        assert_eq!(exec_line_literal(&["/a%b"]).unwrap(), r#""/a%%b""#);
    }

    #[test]
    fn exec_line_vars() {
        let mut arg = Arg::text("--token=$");
        arg.push_var("TOKEN").push_text("}");
        let line =
            exec_line(&[Arg::text("/bin/app"), arg, Arg::var("_X1"), Arg::default()]).unwrap();
        assert_eq!(line, r#""/bin/app" "--token=$$${TOKEN}}" "${_X1}" """#);
        assert_eq!(
            exec_line(&[Arg::text("/bin/app"), Arg::var("A-B")]),
            Err(EscapeError::InvalidEnvName("A-B".into()))
        );
        assert_eq!(
            exec_line(&[Arg::var("EXE")]),
            Err(EscapeError::VarInExecutable)
        );
    }

    #[test]
    fn exec_line_rejects_bad_executables() {
        for (exe, err) in [
            ("", EscapeError::EmptyExecutable),
            ("-rm", EscapeError::ExecutablePrefix('-')),
            ("@x", EscapeError::ExecutablePrefix('@')),
            (":x", EscapeError::ExecutablePrefix(':')),
            ("+x", EscapeError::ExecutablePrefix('+')),
            ("!x", EscapeError::ExecutablePrefix('!')),
            ("/bin/a\"b", EscapeError::UnsafeExecutable('"')),
            ("/bin/a'b", EscapeError::UnsafeExecutable('\'')),
            ("/bin/a\\b", EscapeError::UnsafeExecutable('\\')),
            ("/bin/a$b", EscapeError::UnsafeExecutable('$')),
            ("/bin/a\nb", EscapeError::UnsafeExecutable('\n')),
            ("/bin/a\0b", EscapeError::Nul),
            ("/bin/", EscapeError::InvalidExecutable),
            ("bin/sh", EscapeError::InvalidExecutable),
            ("./sh", EscapeError::InvalidExecutable),
            ("..", EscapeError::InvalidExecutable),
            (";", EscapeError::InvalidExecutable),
            ("/bin/\u{fffe}", EscapeError::NonCharacter('\u{fffe}')),
        ] {
            assert_eq!(exec_line_literal(&[exe]), Err(err), "{exe:?}");
        }
        assert_eq!(exec_line(&[]), Err(EscapeError::EmptyCommand));
        assert_eq!(
            exec_line(&[Arg::default()]),
            Err(EscapeError::EmptyExecutable)
        );
        // The prefixes are only special at the start of the executable.
        assert!(exec_line_literal(&["/bin/-x", "-", "@", "!"]).is_ok());
    }

    #[test]
    fn nul_rejected_everywhere() {
        assert_eq!(
            exec_line_literal(&["/bin/true", "a\0"]),
            Err(EscapeError::Nul)
        );
        assert_eq!(environment_assignment("A", "\0"), Err(EscapeError::Nul));
        assert_eq!(log_extra_field("A", "\0"), Err(EscapeError::Nul));
        assert_eq!(plain("a\0"), Err(EscapeError::Nul));
        assert_eq!(path("/a\0"), Err(EscapeError::Nul));
        assert_eq!(path_word("/a\0"), Err(EscapeError::Nul));
        assert_eq!(env_file_line("A", "a\0b"), Err(EscapeError::Nul));
    }

    #[test]
    fn noncharacters_rejected_everywhere() {
        for c in [
            '\u{fdd0}',
            '\u{fdef}',
            '\u{fffe}',
            '\u{ffff}',
            '\u{1fffe}',
            '\u{10ffff}',
        ] {
            let v = format!("a{c}b");
            let e = Err(EscapeError::NonCharacter(c));
            assert_eq!(exec_line_literal(&["/bin/true", &v]), e);
            assert_eq!(environment_assignment("A", &v), e);
            assert_eq!(log_extra_field("A", &v), e);
            assert_eq!(plain(&v), e);
            assert_eq!(path(&format!("/{v}")), e);
            assert_eq!(path_word(&format!("/{v}")), e);
            assert_eq!(env_file_line("A", &v), e);
        }
        assert!(plain("\u{fdcf}\u{fdf0}\u{fffd}\u{1fffd}").is_ok());
    }

    #[test]
    fn environment_exact() {
        assert_eq!(
            environment_assignment("A_1", "x y$Z%n\\\"\n\x1b").unwrap(),
            r#""A_1=x y$Z%%n\\\"\n\x1b""#
        );
        assert_eq!(environment_assignment("_", "").unwrap(), r#""_=""#);
        for bad in ["", "1A", "A-B", "A.B", "A B", "A=B", "É", "A\n"] {
            assert_eq!(
                environment_assignment(bad, "v"),
                Err(EscapeError::InvalidEnvName(bad.into())),
                "{bad:?}"
            );
            assert!(env_file_line(bad, "v").is_err());
        }
    }

    #[test]
    fn log_extra_field_exact() {
        assert_eq!(
            log_extra_field("POD_NAME", "a b%").unwrap(),
            r#""POD_NAME=a b%%""#
        );
        for bad in ["", "pod", "_POD", "1POD", "POD-NAME", &"A".repeat(65)] {
            assert!(log_extra_field(bad, "v").is_err(), "{bad:?}");
        }
        assert!(log_extra_field(&"A".repeat(64), "v").is_ok());
    }

    #[test]
    fn plain_and_path() {
        assert_eq!(
            plain("web 100% \"ok\" \\x41").unwrap(),
            r#"web 100%% "ok" \x41"#
        );
        assert_eq!(plain(" a"), Err(EscapeError::SurroundingWhitespace));
        assert_eq!(plain("a "), Err(EscapeError::SurroundingWhitespace));
        assert_eq!(plain("a\\"), Err(EscapeError::TrailingBackslash));
        assert_eq!(plain("a\nb"), Err(EscapeError::ControlChar('\n')));
        assert_eq!(
            plain("a\u{2028}b"),
            Err(EscapeError::ControlChar('\u{2028}'))
        );
        assert_eq!(path("/srv/a b:c%").unwrap(), "/srv/a b:c%%");
        assert_eq!(path("/").unwrap(), "/");
        assert_eq!(path("srv"), Err(EscapeError::PathNotAbsolute));
        for bad in ["//a", "/a/", "/a/./b", "/a/../b", "/a//b", "/.."] {
            assert_eq!(path(bad), Err(EscapeError::PathNotNormalized), "{bad:?}");
        }
    }

    #[test]
    fn bind_paths_exact() {
        assert_eq!(
            bind_path("/a:b c", "/d\\\"%").unwrap(),
            r#""/a:b c":"/d\\\"%%""#
        );
        assert_eq!(path_word("/a\tb"), Err(EscapeError::ControlChar('\t')));
        assert_eq!(bind_path("a", "/b"), Err(EscapeError::PathNotAbsolute));
    }

    #[test]
    fn env_file_exact() {
        assert_eq!(
            env_file_line("A", "x\"y\\z`$w\nl2 'q' \\n ").unwrap(),
            "A=\"x\\\"y\\\\z\\`\\$w\nl2 'q' \\\\n \"\n"
        );
        assert_eq!(env_file_line("B", "").unwrap(), "B=\"\"\n");
    }

    #[test]
    fn too_long() {
        let long = "a".repeat(MAX_VALUE_LEN);
        assert!(plain(&long).is_ok());
        assert!(matches!(
            environment_assignment("A", &long),
            Err(EscapeError::TooLong(_))
        ));
        assert!(matches!(
            exec_line_literal(&["/bin/true", &long]),
            Err(EscapeError::TooLong(_))
        ));
    }

    #[test]
    fn errors_do_not_leak_values() {
        let secret = "hunter2";
        for e in [
            environment_assignment("A", &format!("{secret}\0")).unwrap_err(),
            plain(&format!("{secret}\n")).unwrap_err(),
        ] {
            assert!(!e.to_string().contains(secret));
        }
    }
}
