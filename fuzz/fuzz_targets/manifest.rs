//! Manifest files: any bytes go through loading, validation, translation and rendering without a
//! panic, a hang or unbounded memory (libFuzzer's -timeout and -rss_limit_mb), and every pod that
//! renders parses back to exactly its manifest (see the `podunit_fuzz` checks).
#![no_main]

use libfuzzer_sys::fuzz_target;
use podunit::generate::generate;
use podunit::manifest::Catalog;
use podunit::common::paths::Source;
use podunit::translate::NodeFacts;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    // The loader refuses files that are not UTF-8 before parsing (read_limited).
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let node = NodeFacts::default();
    for source in [Source::Etc, Source::Spool] {
        let mut catalog = Catalog::default();
        catalog.add_text(Path::new("/etc/pods.d/fuzz.yaml"), text, source);
        let g = generate(&catalog, &node, &podunit_fuzz::Images);
        podunit_fuzz::check_generated(&catalog, &g, &node);
        // Every problem can be shown.
        for p in &g.problems {
            let _ = p.to_string();
        }
    }
});
