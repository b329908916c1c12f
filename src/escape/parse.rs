//! A pure reimplementation of the parts of systemd 252's parsers that [`super`] writes for:
//! `extract_first_word()` with and without C-unescaping, `%%` specifiers, the command-line prefix
//! rules, exec-time `$` expansion (`replace_env_argv()`), and the `EnvironmentFile=` parser
//! (`load_env_file()`).
//!
//! It exists so tests and fuzzing can check the encoders without a systemd. It is checked against
//! the real systemd in tests/escape_roundtrip.rs. Input it was not written for is refused with a
//! [`ParseError`] rather than guessed at (for example any specifier other than `%%`).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for ParseError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError(msg.into()))
}

/// systemd's WHITESPACE.
const WHITESPACE: &[char] = &[' ', '\t', '\n', '\r'];

/// `cunescape_one()`: decodes one escape after a `\`; returns the character and how many input
/// characters it used.
fn cunescape_one(rest: &[char]) -> Result<(char, usize), ParseError> {
    let hex = |s: &[char]| -> Result<u32, ParseError> {
        let t: String = s.iter().collect();
        if s.iter().all(|c| c.is_ascii_hexdigit()) {
            u32::from_str_radix(&t, 16).map_err(|e| ParseError(e.to_string()))
        } else {
            err(format!("bad hex escape {t:?}"))
        }
    };
    let c = *rest.first().ok_or(ParseError("escape at end".into()))?;
    let simple = match c {
        'a' => Some('\x07'),
        'b' => Some('\x08'),
        'f' => Some('\x0c'),
        'n' => Some('\n'),
        'r' => Some('\r'),
        't' => Some('\t'),
        'v' => Some('\x0b'),
        '\\' => Some('\\'),
        '"' => Some('"'),
        '\'' => Some('\''),
        's' => Some(' '),
        _ => None,
    };
    if let Some(s) = simple {
        return Ok((s, 1));
    }
    let (value, used) = match c {
        'x' if rest.len() >= 3 => (hex(&rest[1..3])?, 3),
        'u' if rest.len() >= 5 => (hex(&rest[1..5])?, 5),
        'U' if rest.len() >= 9 => (hex(&rest[1..9])?, 9),
        '0'..='7' if rest.len() >= 3 && rest[..3].iter().all(|d| ('0'..='7').contains(d)) => {
            let t: String = rest[..3].iter().collect();
            (u32::from_str_radix(&t, 8).unwrap_or(0), 3)
        }
        _ => return err(format!("invalid escape \\{c}")),
    };
    if value == 0 {
        return err("escaped NUL");
    }
    // systemd decodes \xNN and octal to bytes; above 0x7f that would be a lone byte, not UTF-8.
    if (c == 'x' || c.is_ascii_digit()) && value >= 0x80 {
        return err("\\x escape of a non-ASCII byte");
    }
    let ch = char::from_u32(value).ok_or(ParseError("invalid code point".into()))?;
    Ok((ch, used))
}

/// `extract_first_word(p, separators, EXTRACT_UNQUOTE [| EXTRACT_CUNESCAPE])`: returns the word
/// and the separator that ended it (None at the end of input), or None when no word is left.
/// With `coalesce` false (EXTRACT_DONT_COALESCE_SEPARATORS) leading separators are not skipped.
fn extract_word(
    p: &mut &[char],
    separators: &[char],
    cunescape: bool,
    coalesce: bool,
) -> Result<Option<(String, Option<char>)>, ParseError> {
    if coalesce {
        while let Some(c) = p.first() {
            if separators.contains(c) {
                *p = &p[1..];
            } else {
                break;
            }
        }
    }
    if p.is_empty() {
        return Ok(None);
    }
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < p.len() {
        let c = p[i];
        if c == '\\' {
            let rest = &p[i + 1..];
            if cunescape {
                let (ch, used) = cunescape_one(rest)?;
                word.push(ch);
                i += 1 + used;
            } else {
                let ch = *rest.first().ok_or(ParseError("escape at end".into()))?;
                word.push(ch);
                i += 2;
            }
            continue;
        }
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => quote = Some(c),
            None if separators.contains(&c) => {
                *p = &p[i + 1..];
                return Ok(Some((word, Some(c))));
            }
            None => word.push(c),
        }
        i += 1;
    }
    if quote.is_some() {
        return err("unbalanced quotes");
    }
    *p = &p[p.len()..];
    Ok(Some((word, None)))
}

/// Specifier expansion, limited to `%%` (the only specifier the encoders write).
fn specifiers(s: &str) -> Result<String, ParseError> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('%') => out.push('%'),
                other => return err(format!("unsupported specifier %{other:?}")),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn all_words(value: &str, cunescape: bool) -> Result<Vec<String>, ParseError> {
    let chars: Vec<char> = value.chars().collect();
    let mut p = chars.as_slice();
    let mut words = Vec::new();
    while let Some((w, _)) = extract_word(&mut p, WHITESPACE, cunescape, true)? {
        words.push(specifiers(&w)?);
    }
    Ok(words)
}

/// One command of an `Exec*=` line as systemd stores it: the prefixes found on the first word,
/// the path, and argv before exec-time `$` expansion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecCommand {
    pub prefixes: String,
    pub path: String,
    pub argv: Vec<String>,
}

/// `config_parse_exec()` for a value holding a single command.
pub fn exec_line(value: &str) -> Result<ExecCommand, ParseError> {
    let chars: Vec<char> = value.chars().collect();
    let mut p = chars.as_slice();
    let (first, _) = extract_word(&mut p, WHITESPACE, true, true)?
        .ok_or(ParseError("empty command line".into()))?;
    let prefixes: String = first
        .chars()
        .take_while(|c| super::EXEC_PREFIXES.contains(c))
        .collect();
    // systemd accepts each prefix once (and "!!"); the encoders never write any, so any is reported.
    let path = specifiers(&first[prefixes.len()..])?;
    if path.is_empty() {
        return err("empty executable");
    }
    let mut argv = vec![path.clone()];
    loop {
        while p.first().is_some_and(|c| WHITESPACE.contains(c)) {
            p = &p[1..];
        }
        if p.is_empty() {
            break;
        }
        // An unquoted ";" word separates commands, "\;" is a literal ";".
        let next_ends = |n: usize| p.get(n).is_none_or(|c| WHITESPACE.contains(c));
        if p[0] == ';' && next_ends(1) {
            return err("command separator ';'");
        }
        if p.starts_with(&['\\', ';']) && next_ends(2) {
            p = &p[2..];
            argv.push(";".to_string());
            continue;
        }
        let (w, _) = extract_word(&mut p, WHITESPACE, true, true)?.expect("input not empty");
        argv.push(specifiers(&w)?);
    }
    Ok(ExecCommand {
        prefixes,
        path,
        argv,
    })
}

/// `replace_env()` without flags: `${NAME}` is replaced by its value ("" when unset), `$$` by `$`.
fn replace_env(word: &str, env: &[(String, String)]) -> Result<String, ParseError> {
    let mut out = String::new();
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('$') => out.push('$'),
            Some('{') => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => return err("unterminated ${"),
                    }
                }
                if let Some((_, v)) = env.iter().rev().find(|(n, _)| *n == name) {
                    out.push_str(v);
                }
            }
            // systemd keeps a lone "$" (and what follows) as it is; the encoders never write one.
            _ => return err("lone '$'"),
        }
    }
    Ok(out)
}

/// `replace_env_argv()`: the argv the process gets, from the stored argv and the environment.
pub fn expand_argv(argv: &[String], env: &[(String, String)]) -> Result<Vec<String>, ParseError> {
    argv.iter()
        .map(|a| {
            // "$NAME" as a whole word is split into words; the encoders never write that.
            if a.starts_with('$') && !a.starts_with("${") && !a.starts_with("$$") {
                return err("braceless $NAME word");
            }
            replace_env(a, env)
        })
        .collect()
}

fn split_assignments(
    value: &str,
    name_ok: fn(&str) -> bool,
) -> Result<Vec<(String, String)>, ParseError> {
    all_words(value, true)?
        .into_iter()
        .map(|w| {
            let (n, v) = w
                .split_once('=')
                .ok_or(ParseError(format!("no '=' in {w:?}")))?;
            if !name_ok(n) {
                return err(format!("invalid name {n:?}"));
            }
            Ok((n.to_string(), v.to_string()))
        })
        .collect()
}

/// `config_parse_environ()`: the assignments of one `Environment=` value.
pub fn environment(value: &str) -> Result<Vec<(String, String)>, ParseError> {
    split_assignments(value, super::is_env_name)
}

/// `config_parse_log_extra_fields()`: the fields of one `LogExtraFields=` value.
pub fn log_extra_fields(value: &str) -> Result<Vec<(String, String)>, ParseError> {
    split_assignments(value, super::is_log_field_name)
}

/// A value parsed as a whole string with specifiers (`Description=`, `WorkingDirectory=`, ...).
pub fn plain(value: &str) -> Result<String, ParseError> {
    specifiers(value.trim_matches(WHITESPACE))
}

/// One `BindPaths=` entry as systemd stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindPath {
    pub ignore_enoent: bool,
    pub source: String,
    pub destination: String,
    pub recursive: bool,
}

/// `config_parse_bind_paths()`, for values whose paths need no simplification.
pub fn bind_paths(value: &str) -> Result<Vec<BindPath>, ParseError> {
    let chars: Vec<char> = value.chars().collect();
    let mut p = chars.as_slice();
    let mut sep_colon = [':'; 5];
    sep_colon[1..].copy_from_slice(WHITESPACE);
    let mut out = Vec::new();
    while let Some((source, sep)) = extract_word(&mut p, &sep_colon, false, false)? {
        let mut source = specifiers(&source)?;
        let ignore_enoent = source.starts_with('-');
        if ignore_enoent {
            source.remove(0);
        }
        let mut entry = BindPath {
            ignore_enoent,
            destination: source.clone(),
            source,
            recursive: true,
        };
        if sep == Some(':') {
            let (dest, sep) = extract_word(&mut p, &sep_colon, false, false)?
                .ok_or(ParseError("missing destination".into()))?;
            entry.destination = specifiers(&dest)?;
            if sep == Some(':') {
                let (opts, _) = extract_word(&mut p, WHITESPACE, false, false)?.unwrap_or_default();
                entry.recursive = match opts.as_str() {
                    "" | "rbind" => true,
                    "norbind" => false,
                    o => return err(format!("bad bind option {o:?}")),
                };
            }
        }
        for path in [&entry.source, &entry.destination] {
            if super::check_path(path).is_err() {
                return err(format!("path not absolute and normalized: {path:?}"));
            }
        }
        out.push(entry);
    }
    Ok(out)
}

/// `load_env_file()`: the (name, value) pairs of an environment file, in order; a repeated name
/// keeps its first position and its last value. Like systemd it does not check names (invalid
/// ones are dropped later, when the environment is built).
pub fn env_file(text: &str) -> Result<Vec<(String, String)>, ParseError> {
    #[derive(PartialEq)]
    enum S {
        PreKey,
        Key,
        PreValue,
        Value,
        ValueEscape,
        SingleQuote,
        DoubleQuote,
        DoubleQuoteEscape,
        Comment,
        CommentEscape,
    }
    const NEWLINE: &[char] = &['\n', '\r'];
    const SHELL_NEED_ESCAPE: &[char] = &['"', '\\', '`', '$'];
    let mut out = Vec::new();
    let mut state = S::PreKey;
    let mut key = String::new();
    let mut value = String::new();
    // Byte offsets where trailing whitespace of the key/value started, as systemd tracks them.
    let mut key_ws: Option<usize> = None;
    let mut value_ws: Option<usize> = None;
    let mut push =
        |key: &mut String, value: &mut String, key_ws: Option<usize>, value_ws: Option<usize>| {
            if let Some(n) = key_ws {
                key.truncate(n);
            }
            if let Some(n) = value_ws {
                value.truncate(n);
            }
            let (k, v) = (std::mem::take(key), std::mem::take(value));
            // strv_env_replace(): a later assignment replaces an earlier one in place.
            match out.iter_mut().find(|(n, _)| *n == k) {
                Some(e) => e.1 = v,
                None => out.push((k, v)),
            }
        };
    for c in text.chars() {
        match state {
            S::PreKey => {
                if c == '#' || c == ';' {
                    state = S::Comment;
                } else if !WHITESPACE.contains(&c) {
                    state = S::Key;
                    key_ws = None;
                    key.push(c);
                }
            }
            S::Key => {
                if NEWLINE.contains(&c) {
                    state = S::PreKey;
                    key.clear();
                } else if c == '=' {
                    state = S::PreValue;
                    value_ws = None;
                } else {
                    if !WHITESPACE.contains(&c) {
                        key_ws = None;
                    } else if key_ws.is_none() {
                        key_ws = Some(key.len());
                    }
                    key.push(c);
                }
            }
            S::PreValue => {
                if NEWLINE.contains(&c) {
                    state = S::PreKey;
                    push(&mut key, &mut value, key_ws, None);
                } else if c == '\'' {
                    state = S::SingleQuote;
                } else if c == '"' {
                    state = S::DoubleQuote;
                } else if c == '\\' {
                    state = S::ValueEscape;
                } else if !WHITESPACE.contains(&c) {
                    state = S::Value;
                    value.push(c);
                }
            }
            S::Value => {
                if NEWLINE.contains(&c) {
                    state = S::PreKey;
                    push(&mut key, &mut value, key_ws, value_ws);
                } else if c == '\\' {
                    state = S::ValueEscape;
                    value_ws = None;
                } else {
                    if !WHITESPACE.contains(&c) {
                        value_ws = None;
                    } else if value_ws.is_none() {
                        value_ws = Some(value.len());
                    }
                    value.push(c);
                }
            }
            S::ValueEscape => {
                state = S::Value;
                if !NEWLINE.contains(&c) {
                    value.push(c);
                }
            }
            S::SingleQuote => {
                if c == '\'' {
                    state = S::PreValue;
                } else {
                    value.push(c);
                }
            }
            S::DoubleQuote => {
                if c == '"' {
                    state = S::PreValue;
                } else if c == '\\' {
                    state = S::DoubleQuoteEscape;
                } else {
                    value.push(c);
                }
            }
            S::DoubleQuoteEscape => {
                state = S::DoubleQuote;
                if SHELL_NEED_ESCAPE.contains(&c) {
                    value.push(c);
                } else if c != '\n' {
                    value.push('\\');
                    value.push(c);
                }
            }
            S::Comment => {
                if c == '\\' {
                    state = S::CommentEscape;
                } else if NEWLINE.contains(&c) {
                    state = S::PreKey;
                }
            }
            S::CommentEscape => state = S::Comment,
        }
    }
    match state {
        S::PreValue
        | S::Value
        | S::ValueEscape
        | S::SingleQuote
        | S::DoubleQuote
        | S::DoubleQuoteEscape => {
            let ws = if state == S::Value { value_ws } else { None };
            push(&mut key, &mut value, key_ws, ws);
        }
        _ => {}
    }
    if out.iter().any(|(k, _)| k.is_empty()) {
        return err("empty key");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(
            all_words(r#"a "b c" "" 'd"e' f\x41 "%%\n""#, true).unwrap(),
            vec!["a", "b c", "", "d\"e", "fA", "%\n"]
        );
        assert!(all_words("\"a", true).is_err());
        assert!(all_words("%n", true).is_err());
    }

    #[test]
    fn exec() {
        let c = exec_line(r#""-/bin/echo" "$$X" "${Y}" \; "a""#).unwrap();
        assert_eq!(c.prefixes, "-");
        assert_eq!(c.argv, vec!["/bin/echo", "$$X", "${Y}", ";", "a"]);
        assert!(exec_line("/bin/echo a ; /bin/true").is_err());
        let env = vec![("Y".to_string(), "1 2".to_string())];
        assert_eq!(
            expand_argv(&c.argv, &env).unwrap(),
            vec!["/bin/echo", "$X", "1 2", ";", "a"]
        );
    }

    #[test]
    fn binds() {
        let b = bind_paths(r#""/a:b":"/c d" /e -/f:/g:norbind"#).unwrap();
        assert_eq!(b.len(), 3);
        assert_eq!(
            (b[0].source.as_str(), b[0].destination.as_str()),
            ("/a:b", "/c d")
        );
        assert_eq!(b[1].destination, "/e");
        assert!(b[2].ignore_enoent && !b[2].recursive);
    }

    #[test]
    fn env_files() {
        let t = "A=\"x\\\\y\\\"z\\$q\\`w\\n\nline2 \"\nB='lit\\\\'\"'\"'s'\nC= spaced  \n# c\nexport D=1\n";
        assert_eq!(
            env_file(t).unwrap(),
            vec![
                ("A".into(), "x\\y\"z$q`w\\n\nline2 ".into()),
                ("B".into(), "lit\\\\'s".into()),
                ("C".into(), "spaced".into()),
                ("export D".into(), "1".into()),
            ]
        );
    }
}
