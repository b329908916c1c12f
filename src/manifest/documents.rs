//! A manifest file's documents as values: JSON documents with serde_json, anything else with
//! the YAML parser under Kubernetes' YAML rules and bounds. The general path ([`super::parse`])
//! and the parsed-manifest cache both start here.

use serde_json::Value;

/// A file whose documents are each one JSON object (`.json` manifests, the spool podunit-sync
/// writes) is read with serde_json, many times faster than the YAML parser. Anything else (or JSON
/// that does not parse) returns None and goes the YAML way, which also reads JSON.
fn json_documents(text: &str) -> Option<Vec<Value>> {
    super::fast::json_texts(text)?
        .iter()
        .map(|t| serde_json::from_str(t).ok())
        .collect()
}

/// The documents of a YAML (or JSON) file as the general path reads them, or why it cannot.
pub fn documents(text: &str) -> Result<Vec<Value>, String> {
    match json_documents(text) {
        Some(docs) => Ok(docs),
        None => serde_saphyr::from_multiple_with_options(text, yaml_options())
            .map_err(|e| format!("not valid YAML or JSON: {}", one_line(&e.to_string()))),
    }
}

fn yaml_options() -> serde_saphyr::Options {
    let mut o = serde_saphyr::Options::default();
    o.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    o.with_snippet = false;
    // Kubernetes reads YAML 1.1 (go-yaml): `defaultMode: 0400` is octal, as every example writes it.
    o.legacy_octal_numbers = true;
    // Aliases are rare in Pod manifests; replaying more than a manifest's worth of events is an attack.
    o.alias_limits.max_total_replayed_events = 100_000;
    o.alias_limits.max_alias_expansions_per_anchor = 1_000;
    if let Some(b) = o.budget.as_mut() {
        // A 1 MiB manifest never needs more; a billion-laughs file hits these long before memory.
        b.max_aliases = 1_000;
        b.max_anchors = 1_000;
        b.max_depth = 64;
        b.max_documents = 20_000;
        b.max_nodes = 2_000_000;
        b.max_total_scalar_bytes = 4 * 1024 * 1024;
        b.max_events = 4_000_000;
    }
    o
}

pub(super) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
