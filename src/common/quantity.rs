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

/// The value of `q` times `scale`, rounded up (the API server rounds requests up, never to zero).
fn parse_scaled(q: &str, scale: f64) -> Result<u64, QuantityError> {
    let err = || QuantityError(q.to_string());
    let s = q.trim();
    if s.is_empty() || s.len() > 64 {
        return Err(err());
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let (num, exp10): (&str, i32) = match suffix {
        _ if suffix.starts_with(['e', 'E']) && suffix.len() > 1 => {
            let e: i32 = suffix[1..].parse().map_err(|_| err())?;
            (num, e)
        }
        _ => (num, 0),
    };
    let mult: f64 = match if exp10 != 0 { "" } else { suffix } {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return Err(err()),
    };
    if num.is_empty()
        || num.starts_with('-')
        || num.matches('.').count() > 1
        || num == "."
        || num == "+"
    {
        return Err(err());
    }
    let n: f64 = num.parse().map_err(|_| err())?;
    let v = n * mult * 10f64.powi(exp10) * scale;
    if !v.is_finite() || v > u64::MAX as f64 / 2.0 {
        return Err(err());
    }
    Ok(v.ceil() as u64)
}

/// CPU in millicores.
pub fn cpu_millis(q: &str) -> Result<u64, QuantityError> {
    parse_scaled(q, 1000.0)
}

/// Memory (or storage) in bytes.
pub fn bytes(q: &str) -> Result<u64, QuantityError> {
    parse_scaled(q, 1.0)
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
