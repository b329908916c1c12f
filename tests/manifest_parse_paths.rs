//! The fast ways through a manifest (serde_json straight into the types, the parsed-manifest
//! cache) must give what the general way (every document through a `serde_json::Value`) gives:
//! the same objects, and for anything with a problem, no answer at all, so that the general way
//! reports it. Checked on every manifest at hand: the Kubernetes documentation's Pod examples,
//! the golden cases, the examples, each as written (YAML) and converted to JSON, plus bad input.

use podunit::manifest::cache;
use podunit::manifest::fast;
use podunit::manifest::parse::{self, UnknownFields};
use std::path::{Path, PathBuf};

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else if podunit::manifest::discover::is_manifest_name(
            &p.file_name().unwrap().to_string_lossy(),
        ) {
            out.push(p);
        }
    }
}

fn manifests() -> Vec<(PathBuf, String)> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    files_under(
        &repo.join("../shared/testdata/k8s-examples/pods"),
        &mut files,
    );
    files_under(&repo.join("generator/tests/golden"), &mut files);
    files_under(&repo.join("examples"), &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|f| Some((f.clone(), std::fs::read_to_string(&f).ok()?)))
        .collect()
}

/// The documents of a YAML text as one JSON document each (`---` between), as a `.json`
/// manifest or the spool holds them; None if the text does not parse.
fn as_json(text: &str) -> Option<String> {
    let docs = podunit::manifest::documents::documents(text).ok()?;
    let json: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string_pretty(d).unwrap())
        .collect();
    Some(json.join("\n---\n") + "\n")
}

fn shown(objects: &[podunit::manifest::Object]) -> String {
    format!("{objects:?}")
}

#[test]
fn fast_ways_agree_with_the_general_way() {
    let file = Path::new("m.yaml");
    let mut cached = 0;
    let mut fast_json = 0;
    let mut general_json = 0;
    for (path, text) in manifests() {
        for unknown in [UnknownFields::Error, UnknownFields::Warn] {
            let (objects, problems) = parse::parse_general(file, &text, unknown);
            // `parse` (fast way first) says exactly what the general way says.
            let (o, p) = parse::parse(file, &text, unknown);
            assert_eq!(shown(&o), shown(&objects), "{}", path.display());
            assert_eq!(p, problems, "{}", path.display());
            if let Some(fast) = fast::objects(&text) {
                assert!(
                    problems.is_empty(),
                    "{}: fast despite problems",
                    path.display()
                );
                assert_eq!(shown(&fast), shown(&objects), "{}", path.display());
            }
            // The cache entry reads back as the file parses, and exists only for a clean file.
            if let Some((hash, entry)) = cache::entry(&text) {
                assert!(
                    problems.is_empty(),
                    "{}: cached despite problems",
                    path.display()
                );
                assert_eq!(hash, cache::name(&text));
                let from_cache = cache::entry_objects(&entry, &text).expect("its own entry");
                assert_eq!(shown(&from_cache), shown(&objects), "{}", path.display());
                cached += 1;
            }
            // The same documents as JSON: the fast way or, when it declines, the general way,
            // with the same problems as the general way on that JSON.
            let Some(json) = as_json(&text) else { continue };
            let (jo, jp) = parse::parse_general(file, &json, unknown);
            let (fo, fp) = parse::parse(file, &json, unknown);
            assert_eq!(shown(&fo), shown(&jo), "{} as JSON", path.display());
            assert_eq!(fp, jp, "{} as JSON", path.display());
            if fast::objects(&json).is_some() {
                fast_json += 1;
            } else {
                general_json += 1;
            }
        }
    }
    // Both ways were taken, many times: this test compares something.
    assert!(cached >= 100, "only {cached} cache entries");
    assert!(fast_json >= 100, "only {fast_json} files took the fast way");
    assert!(
        general_json >= 20,
        "only {general_json} files took the general way"
    );
}

#[test]
fn bad_json_is_left_to_the_general_way() {
    let pod = |spec: &str| {
        format!(r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"a"}},"spec":{spec}}}"#)
    };
    let file = Path::new("bad.json");
    // (text, whether the fast way must decline it)
    for (text, declined) in [
        (
            pod(r#"{"containers":[{"name":"c","image":"host","comand":["x"]}]}"#),
            true,
        ),
        (
            pod(r#"{"containers":[{"name":"c","image":"host","args":{"x":1}}]}"#),
            true,
        ),
        (
            pod(r#"{"containers":[{"name":"c","securityContext":{"runAsUser":"1"}}]}"#),
            true,
        ),
        (
            pod(r#"{"containers":[]}"#) + "\n---\n" + r#"{"apiVersion":"v1"}"#,
            true,
        ),
        (
            r#"{"apiVersion":"v1","kind":"List","items":[]}"#.into(),
            true,
        ),
        (
            r#"{"apiVersion":"v1","kind":"Pod","kind":"ConfigMap"}"#.into(),
            true,
        ),
        (
            r#"{"apiVersion":"apps/v1","kind":"Deployment"}"#.into(),
            true,
        ),
        ("{\"apiVersion\": \"v1\", \"kind\": \"Pod\"".into(), true),
        // Duplicate keys: the last wins, both ways.
        (
            pod(r#"{"containers":[]}"#).replace("\"spec\"", "\"spec\":{},\"spec\""),
            false,
        ),
    ] {
        for unknown in [UnknownFields::Error, UnknownFields::Warn] {
            let (objects, problems) = parse::parse_general(file, &text, unknown);
            let (o, p) = parse::parse(file, &text, unknown);
            assert_eq!(shown(&o), shown(&objects), "{text}");
            assert_eq!(p, problems, "{text}");
        }
        assert_eq!(fast::objects(&text).is_none(), declined, "{text}");
    }
}
