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

#[cfg(test)]
mod tests {
    #[test]
    fn concat_joins_exactly() {
        let s = super::concat(&["a", "", "bc"]);
        assert_eq!(s, "abc");
        assert_eq!(s.capacity(), 3);
    }
}
