//! A command's arguments as lower-case hex, for the `ExecStart=` of a transient unit. systemd
//! writes a transient unit's settings to a file under /run/systemd/transient and reads that file
//! back at every daemon-reload; systemd 252 writes `ExecStartEx=`, a key it cannot read back,
//! and writes `$`, `\` and quotes in `ExecStart=` so that they come back changed. A unit started
//! just before a reload then ran the wrong command or none. Hex survives both ways unchanged, and
//! the program the unit runs (ours) decodes it.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Which argument (from 0) is not hex of UTF-8 text.
    pub index: usize,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "argument {} is not hex-encoded text", self.index)
    }
}

impl std::error::Error for DecodeError {}

/// Each argument as `x` and its hex (`x` alone for an empty one, which systemd would drop).
pub fn encode(argv: &[String]) -> Vec<String> {
    argv.iter()
        .map(|a| format!("x{}", crate::common::text::hex(a.as_bytes())))
        .collect()
}

pub fn decode(args: &[String]) -> Result<Vec<String>, DecodeError> {
    args.iter()
        .enumerate()
        .map(|(index, a)| one(a).ok_or(DecodeError { index }))
        .collect()
}

fn one(a: &str) -> Option<String> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let b = a.strip_prefix('x')?.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    let bytes = b
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// Whether systemd reads `arg` back from a transient unit file exactly as it was given: no
/// character it escapes, quotes, expands or splits on.
pub fn survives_unit_file(arg: &str) -> bool {
    !arg.is_empty()
        && arg
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"/._:=@+,-".contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_of_what_systemd_would_change() {
        let argv: Vec<String> = ["sh", "-c", "echo \"$HOME\" ${X} $$ 'a b' \\ %n", "", "é\n"]
            .map(String::from)
            .to_vec();
        let enc = encode(&argv);
        assert!(enc.iter().all(|a| survives_unit_file(a)));
        assert_eq!(enc[0], "x7368");
        assert_eq!(enc[3], "x");
        assert_eq!(decode(&enc).unwrap(), argv);
    }

    #[test]
    fn refuses_what_is_not_hex_of_text() {
        let bad = |s: &str| decode(&["x6869".into(), s.into()]).unwrap_err().index;
        assert_eq!(bad("6869"), 1, "no x");
        assert_eq!(bad("x6"), 1);
        assert_eq!(bad("xzz"), 1);
        assert_eq!(bad("x6A"), 1, "lower case only: one spelling per argument");
        assert_eq!(bad("xff"), 1, "not UTF-8");
    }

    #[test]
    fn unit_file_safe_characters() {
        assert!(survives_unit_file("/usr/bin/podunit"));
        assert!(survives_unit_file("podunit-default_web-main.service"));
        for bad in ["", "a b", "$X", "a\\b", "%n", "\"q\"", "'q'", "a\nb", ";"] {
            assert!(!survives_unit_file(bad), "{bad:?}");
        }
    }
}
