//! Kubernetes resource quantities (`500m`, `1.5`, `128Mi`, `1e3`), as the API server parses them.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError(pub String);

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a valid quantity (e.g. 500m, 2, 128Mi, 1G)",
            self.0
        )
    }
}

impl std::error::Error for QuantityError {}

/// The value of `q` times 10^`scale`, rounded up to a whole number, as the API server and the
/// kubelet read it (`MilliValue()`, `Value()` round up: `0.0000001m` of cpu is 1m, never 0).
/// Exact decimal arithmetic: `1.1` cpu is 1100m, not the 1101m of `1.1 * 1000.0` in floating point.
fn parse_scaled(q: &str, scale: i32) -> Result<u64, QuantityError> {
    let err = || QuantityError(q.to_string());
    let s = q.trim();
    if s.is_empty() || s.len() > 64 {
        return Err(err());
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    // Powers of ten and of 1024 the suffix multiplies by.
    let (exp10, pow1024): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        _ if suffix.len() > 1 && suffix.starts_with(['e', 'E']) => {
            let e: i32 = suffix[1..].parse().map_err(|_| err())?;
            if e.abs() > 64 {
                return Err(err());
            }
            (e, 0)
        }
        _ => return Err(err()),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(err());
    }
    // The significant digits as an integer `m`, the value being m * 10^e * 1024^pow1024. More
    // than 20 digits cannot matter but for rounding up: the ones dropped are remembered.
    // `int` and `frac` side by side, on the stack (`s` is at most 64 bytes): this runs for every
    // quantity of every pod.
    let mut buf = [0u8; 64];
    buf[..int.len()].copy_from_slice(int.as_bytes());
    buf[int.len()..int.len() + frac.len()].copy_from_slice(frac.as_bytes());
    let digits = std::str::from_utf8(&buf[..int.len() + frac.len()]).map_err(|_| err())?;
    let digits = digits.trim_start_matches('0');
    let kept = &digits[..digits.len().min(20)];
    let dropped = digits[kept.len()..].bytes().any(|b| b != b'0');
    let m: u128 = if kept.is_empty() {
        0
    } else {
        kept.parse().map_err(|_| err())?
    };
    let e = exp10 + scale - frac.len() as i32 + (digits.len() - kept.len()) as i32;
    let n = m.checked_mul(1024u128.pow(pow1024)).ok_or_else(err)?;
    let v = if e >= 0 {
        10u128
            .checked_pow(e as u32)
            .and_then(|p| n.checked_mul(p))
            .ok_or_else(err)?
    } else {
        match 10u128.checked_pow(e.unsigned_abs()) {
            Some(d) => n / d + u128::from(n % d != 0 || dropped),
            // Smaller than one unit (and not zero): rounds up to one.
            None => u128::from(n != 0 || dropped),
        }
    };
    if v > u128::from(u64::MAX / 2) {
        return Err(err());
    }
    Ok(v as u64)
}

/// CPU in millicores.
pub fn cpu_millis(q: &str) -> Result<u64, QuantityError> {
    parse_scaled(q, 3)
}

/// Memory (or storage) in bytes.
pub fn bytes(q: &str) -> Result<u64, QuantityError> {
    parse_scaled(q, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(cpu_millis("500m"), Ok(500));
        assert_eq!(cpu_millis("1.5"), Ok(1500));
        assert_eq!(cpu_millis("2"), Ok(2000));
        assert_eq!(cpu_millis("100u"), Ok(1));
        assert_eq!(bytes("128Mi"), Ok(128 * 1024 * 1024));
        assert_eq!(bytes("1G"), Ok(1_000_000_000));
        assert_eq!(bytes("1e3"), Ok(1000));
        assert_eq!(bytes("64"), Ok(64));
        assert_eq!(bytes("1.5Ki"), Ok(1536));
        assert_eq!(bytes("1E3"), Ok(1000));
        assert_eq!(bytes("+5"), Ok(5));
        assert_eq!(bytes(".5"), Ok(1));
        assert_eq!(bytes("5."), Ok(5));
        assert_eq!(bytes("0"), Ok(0));
    }

    #[test]
    fn rounds_up_exactly_as_kubernetes() {
        // Below 1m rounds up to 1m (MilliValue), never to 0 or to more.
        assert_eq!(cpu_millis("0.0000001m"), Ok(1));
        assert_eq!(cpu_millis("1n"), Ok(1));
        assert_eq!(cpu_millis("0.0000000000000000000000000001"), Ok(1));
        assert_eq!(cpu_millis("0"), Ok(0));
        assert_eq!(cpu_millis("0.000"), Ok(0));
        // Decimal, not binary floating point.
        assert_eq!(cpu_millis("1.1"), Ok(1100));
        assert_eq!(cpu_millis("0.3"), Ok(300));
        assert_eq!(cpu_millis("2.675"), Ok(2675));
        assert_eq!(cpu_millis("1.0001"), Ok(1001));
        assert_eq!(cpu_millis("15m"), Ok(15));
        assert_eq!(cpu_millis("1e-3"), Ok(1));
        assert_eq!(cpu_millis("100000000000000000000001e-20"), Ok(1_000_001));
        for bad in [
            "",
            "abc",
            "-1",
            "1Xi",
            "1..2",
            "Mi",
            "1e999",
            "9999999999999999999999E",
        ] {
            assert!(bytes(bad).is_err(), "{bad}");
        }
    }
}
