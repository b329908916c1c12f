//! Strings built from parts in one allocation of their exact length. `format!` guesses the length
//! and grows the string as it writes; the generator builds a few dozen strings per pod, and the
//! growing showed up as a tenth of its instructions.

/// `parts` joined with nothing between them.
pub fn concat(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

/// `parts` joined, then `[i]`: the field path of a list's item (`spec.containers[2]`). The
/// generator builds one for every container, env entry and volume of every pod, in case a problem
/// needs it; `format!` cost about five times the rest of it.
pub fn item(parts: &[&str], i: usize) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum::<usize>() + 22);
    for p in parts {
        s.push_str(p);
    }
    s.push('[');
    push_decimal(&mut s, i as u64);
    s.push(']');
    s
}

/// Appends `n` in decimal, as `{n}` writes it.
pub fn push_decimal(s: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        s.push(char::from(d));
    }
}

/// Lower-case hex of `bytes`.
/// A UID in the API server's shape (8-4-4-4-12 hex digits) from the first 16 bytes of a digest:
/// how podunit names objects no API server has given a UID.
pub fn uid_from_digest(digest: &[u8]) -> String {
    let hex = hex(&digest[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn concat_joins_exactly() {
        let s = super::concat(&["a", "", "bc"]);
        assert_eq!(s, "abc");
        assert_eq!(s.capacity(), 3);
    }

    #[test]
    fn items_and_numbers_read_as_format_writes_them() {
        assert_eq!(super::item(&["spec.containers"], 0), "spec.containers[0]");
        assert_eq!(super::item(&["a", ".env"], 1234), "a.env[1234]");
        for n in [0, 7, 10, 99, 100, 4096, u64::MAX] {
            let mut s = String::from("x");
            super::push_decimal(&mut s, n);
            assert_eq!(s, format!("x{n}"));
        }
    }
}
