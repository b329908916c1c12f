//! docs/mapping.md has a row for every field of the Kubernetes structs podunit reads.
//!
//! The field names come from k8s-openapi itself, not from a list kept here: each struct's
//! `Deserialize` impl calls `deserialize_struct(NAME, FIELDS, visitor)`, and [`Recorder`] is a
//! deserializer that answers that call by handing NAME and FIELDS back as its error. A new
//! k8s-openapi (or Kubernetes version feature) that adds a field makes this test fail until the
//! field has a documented verdict.
//!
//! The convention in the document: a heading `### <StructName>` (the name k8s-openapi gives the
//! struct), then a table whose rows start `| `fieldName` | verdict | ...`, the verdict being one of
//! `mapped`, `ignored`, `rejected`, `warned`.
//!
//! A `mapped` row also names the real-systemd (or real API server) tests that show the mapping,
//! at the end of its third cell: `[e2e: SUITE::TEST, SUITE::TEST]`, each a `#[test] fn TEST(` in
//! `tests/SUITE.rs`. A row without one fails, and so does a name that leads nowhere.

use k8s_openapi::api::core::v1 as core;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use std::fmt;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/mapping.md");
const VERDICTS: &[&str] = &["mapped", "ignored", "rejected", "warned"];
const TESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests");

/// The suites that run against real systemd (nspawn machines) or a real API server.
const SUITES: &[&str] = &[
    "lifecycle_e2e",
    "sync_e2e",
    "sandbox_e2e",
    "probes_e2e",
    "cluster_e2e",
    "images_e2e",
    "cluster_apiserver_e2e",
    "kubelet_e2e",
    "packaging_e2e",
    "fields_e2e",
    "network_pods_e2e",
    "workloads_e2e",
];

/// Whether `tests/SUITE.rs` has `#[test] fn NAME(`; None when there is no such file.
fn suite_has_test(suite: &str, name: &str) -> Option<bool> {
    // `module::test`: a case in the suite's own folder (tests/<suite>/<module>.rs).
    let (file, name) = match name.rsplit_once("::") {
        Some((module, test)) => (format!("{TESTS}/{suite}/{module}.rs"), test),
        None => (format!("{TESTS}/{suite}.rs"), name),
    };
    let text = std::fs::read_to_string(file).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    Some(lines.iter().enumerate().any(|(i, l)| {
        l.trim_start().starts_with(&format!("fn {name}("))
            && lines[..i]
                .iter()
                .rev()
                .map(|a| a.trim())
                .take_while(|a| a.starts_with("#["))
                .any(|a| a == "#[test]")
    }))
}

/// The test references at the end of a row's third cell: `[e2e: a::b, c::d]` -> [(a, b), (c, d)].
fn references(how: &str) -> Option<Result<Vec<(String, String)>, String>> {
    let start = how.rfind("[e2e: ")?;
    let inner = &how[start + "[e2e: ".len()..];
    let Some(list) = inner.strip_suffix(']') else {
        return Some(Err(format!("`{}` does not end the row", &how[start..])));
    };
    Some(
        list.split(", ")
            .map(|r| {
                r.split_once("::")
                    .map(|(s, n)| (s.to_string(), n.to_string()))
                    .ok_or_else(|| format!("{r:?} is not SUITE::TEST"))
            })
            .collect(),
    )
}

/// What is wrong with the test references of a row of `name.field` with this verdict.
fn reference_problems(
    name: &str,
    field: &str,
    verdict: &str,
    how: &str,
    has_test: &dyn Fn(&str, &str) -> Option<bool>,
) -> Vec<String> {
    let refs = match references(how) {
        None if verdict == "mapped" => {
            return vec![format!(
                "{name}.{field}: mapped, but names no test that shows it ([e2e: SUITE::TEST])"
            )];
        }
        None => return Vec::new(),
        Some(Err(e)) => return vec![format!("{name}.{field}: {e}")],
        Some(Ok(refs)) => refs,
    };
    let mut out = Vec::new();
    if verdict != "mapped" {
        out.push(format!("{name}.{field}: {verdict}, but names tests"));
    }
    for (suite, test) in refs {
        let what = format!("{name}.{field}: {suite}::{test}");
        if !SUITES.contains(&suite.as_str()) {
            out.push(format!("{what}: not a real-systemd suite ({SUITES:?})"));
            continue;
        }
        match has_test(&suite, &test) {
            Some(true) => {}
            Some(false) => out.push(format!("{what}: no #[test] fn {test}( in tests/{suite}.rs")),
            None => out.push(format!("{what}: there is no tests/{suite}.rs")),
        }
    }
    out
}

/// What [`Recorder`] learnt: the struct's name and fields, or that the type is not a struct.
#[derive(Debug)]
enum Recorded {
    Struct {
        name: &'static str,
        fields: &'static [&'static str],
    },
    Other(String),
}

impl fmt::Display for Recorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Recorded {}

impl de::Error for Recorded {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Recorded::Other(msg.to_string())
    }
}

/// A deserializer with no data: it only records what a struct asks for.
struct Recorder;

impl<'de> Deserializer<'de> for Recorder {
    type Error = Recorded;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Recorded> {
        Err(Recorded::Other(
            "asked for something other than a struct".into(),
        ))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Recorded> {
        Err(Recorded::Struct { name, fields })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The name and field names of `T`, as its `Deserialize` impl declares them.
fn fields_of<T: DeserializeOwned>() -> (&'static str, &'static [&'static str]) {
    match T::deserialize(Recorder) {
        Err(Recorded::Struct { name, fields }) => (name, fields),
        Err(Recorded::Other(m)) => panic!("{}: {m}", std::any::type_name::<T>()),
        Ok(_) => panic!("{} deserialized from nothing", std::any::type_name::<T>()),
    }
}

/// The structs whose every field must have a row.
fn structs() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        fields_of::<core::PodSpec>(),
        fields_of::<core::Container>(),
        fields_of::<core::EphemeralContainer>(),
        fields_of::<core::EnvVar>(),
        fields_of::<core::EnvVarSource>(),
        fields_of::<core::EnvFromSource>(),
        fields_of::<core::ResourceRequirements>(),
        fields_of::<core::VolumeMount>(),
        fields_of::<core::Lifecycle>(),
        fields_of::<core::LifecycleHandler>(),
        fields_of::<core::Probe>(),
        fields_of::<core::SecurityContext>(),
        fields_of::<core::PodSecurityContext>(),
        fields_of::<core::Capabilities>(),
        fields_of::<core::SeccompProfile>(),
        fields_of::<core::Volume>(),
        fields_of::<core::PersistentVolumeClaimVolumeSource>(),
        fields_of::<core::PersistentVolumeClaimSpec>(),
        fields_of::<core::PersistentVolumeSpec>(),
        fields_of::<core::EmptyDirVolumeSource>(),
        fields_of::<core::HostPathVolumeSource>(),
        fields_of::<core::ConfigMapVolumeSource>(),
        fields_of::<core::SecretVolumeSource>(),
        fields_of::<core::KeyToPath>(),
        fields_of::<core::DownwardAPIVolumeSource>(),
        fields_of::<core::DownwardAPIVolumeFile>(),
        fields_of::<core::ProjectedVolumeSource>(),
        fields_of::<core::VolumeProjection>(),
        fields_of::<k8s_openapi::api::apps::v1::DeploymentSpec>(),
        fields_of::<k8s_openapi::api::apps::v1::ReplicaSetSpec>(),
        fields_of::<k8s_openapi::api::apps::v1::DaemonSetSpec>(),
        fields_of::<k8s_openapi::api::apps::v1::StatefulSetSpec>(),
        fields_of::<k8s_openapi::api::batch::v1::JobSpec>(),
        fields_of::<k8s_openapi::api::batch::v1::CronJobSpec>(),
    ]
}

/// A table row under a heading: its line number and its cells.
type Row = (usize, Vec<String>);

/// `### Heading` -> the cells of each row starting with ``| ` `` under it, with its line number.
/// Any heading ends the previous section; tables elsewhere in the document are not rows.
fn sections(doc: &str) -> Vec<(String, Vec<Row>)> {
    let mut out: Vec<(String, Vec<Row>)> = Vec::new();
    let mut in_section = false;
    for (n, line) in doc.lines().enumerate() {
        if line.starts_with('#') {
            in_section = match line.strip_prefix("### ") {
                Some(h) => {
                    out.push((h.trim().to_string(), Vec::new()));
                    true
                }
                None => false,
            };
            continue;
        }
        if in_section && line.starts_with("| `") {
            // "| `field` | verdict | how |" -> ["`field`", "verdict", "how"]
            let cells = line
                .trim_end()
                .trim_start_matches('|')
                .trim_end_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect();
            out.last_mut().expect("in a section").1.push((n + 1, cells));
        }
    }
    out
}

/// Everything wrong between the structs and the document, one message per problem; the suites'
/// tests are looked up with `has_test`.
fn problems_with(
    doc: &str,
    structs: &[(&str, &[&str])],
    has_test: &dyn Fn(&str, &str) -> Option<bool>,
) -> Vec<String> {
    let sections = sections(doc);
    let mut out = Vec::new();
    for (name, fields) in structs {
        let mut found = sections.iter().filter(|(h, _)| h == name);
        let Some((_, rows)) = found.next() else {
            out.push(format!("no `### {name}` section"));
            continue;
        };
        if found.next().is_some() {
            out.push(format!("`### {name}` appears more than once"));
        }
        let mut named: Vec<&str> = Vec::new();
        for (line, cells) in rows {
            let [field, verdict, how] = cells.as_slice() else {
                out.push(format!(
                    "line {line}: a row needs 3 cells (field, verdict, how), found {}",
                    cells.len()
                ));
                continue;
            };
            let field = field.trim_matches('`');
            named.push(field);
            if !fields.contains(&field) {
                out.push(format!(
                    "{name}.{field}: a row for a field the struct does not have"
                ));
            }
            if !VERDICTS.contains(&verdict.as_str()) {
                out.push(format!(
                    "{name}.{field}: verdict {verdict:?} is not one of {VERDICTS:?}"
                ));
            }
            if how.is_empty() {
                out.push(format!("{name}.{field}: says nothing about how or why"));
            }
            out.extend(reference_problems(name, field, verdict, how, has_test));
        }
        for field in *fields {
            match named.iter().filter(|f| *f == field).count() {
                1 => {}
                0 => out.push(format!("{name}.{field}: no row")),
                k => out.push(format!("{name}.{field}: {k} rows")),
            }
        }
    }
    out
}

#[test]
fn every_field_has_a_row() {
    let doc = std::fs::read_to_string(DOC).expect("docs/mapping.md");
    let found = problems_with(&doc, &structs(), &suite_has_test);
    assert!(
        found.is_empty(),
        "docs/mapping.md is out of step with k8s-openapi:\n  {}",
        found.join("\n  ")
    );
}

/// The recorder really sees k8s-openapi's fields (not an empty list that passes everything).
#[test]
fn recorder_reads_real_field_lists() {
    let (name, fields) = fields_of::<core::Lifecycle>();
    assert_eq!(name, "Lifecycle");
    assert!(fields.contains(&"preStop"), "{fields:?}");
    let (name, fields) = fields_of::<core::PodSpec>();
    assert_eq!(name, "PodSpec");
    assert!(fields.len() > 30, "{fields:?}");
}

/// The check fails for each kind of mistake, so a passing run means something.
#[test]
fn the_check_catches_mistakes() {
    // Tests that exist: lifecycle_e2e::shows_a; tests/fields_e2e.rs does not exist.
    let tests = |suite: &str, name: &str| match suite {
        "lifecycle_e2e" => Some(name == "shows_a"),
        "fields_e2e" => None,
        _ => Some(false),
    };
    let problems = |doc: &str, s: &[(&str, &[&str])]| problems_with(doc, s, &tests);
    let s: &[(&str, &[&str])] = &[("Thing", &["a", "b"])];
    let good = "## Fields\n### Thing\n| field | verdict | how |\n|---|---|---|\n| `a` | mapped | A= [e2e: lifecycle_e2e::shows_a] |\n| `b` | ignored | why |\n";
    assert_eq!(problems(good, s), Vec::<String>::new());
    let missing = good.replace("| `b` | ignored | why |\n", "");
    assert_eq!(problems(&missing, s), vec!["Thing.b: no row"]);
    let stale = format!("{good}| `c` | mapped | x [e2e: lifecycle_e2e::shows_a] |\n");
    assert_eq!(
        problems(&stale, s),
        vec!["Thing.c: a row for a field the struct does not have"]
    );
    let bad_verdict = good.replace("| ignored |", "| maybe |");
    assert_eq!(problems(&bad_verdict, s).len(), 1);
    let empty_how = good.replace("| why |", "|  |");
    assert_eq!(
        problems(&empty_how, s),
        vec!["Thing.b: says nothing about how or why"]
    );
    // A row under another heading does not count for Thing.
    let elsewhere = good.replace(
        "| `b` | ignored | why |\n",
        "### Other\n| `b` | ignored | why |\n",
    );
    assert_eq!(problems(&elsewhere, s), vec!["Thing.b: no row"]);
    assert_eq!(problems("", s), vec!["no `### Thing` section"]);
    let twice = format!("{good}### Thing\n");
    assert_eq!(
        problems(&twice, s),
        vec!["`### Thing` appears more than once"]
    );
    let short_row = good.replace("| `b` | ignored | why |", "| `b` | ignored |");
    assert_eq!(
        problems(&short_row, s),
        vec![
            "line 6: a row needs 3 cells (field, verdict, how), found 2",
            "Thing.b: no row"
        ]
    );
    // Tables under other headings (any shape) are not rows of Thing.
    let other = format!("### Kinds\n| `x` | two cells |\n{good}");
    assert_eq!(problems(&other, s), Vec::<String>::new());

    // The tests of a mapped row.
    let a_how = |how: &str| good.replace("A= [e2e: lifecycle_e2e::shows_a]", how);
    assert_eq!(
        problems(&a_how("A="), s),
        vec!["Thing.a: mapped, but names no test that shows it ([e2e: SUITE::TEST])"]
    );
    assert_eq!(
        problems(&a_how("A= [e2e: lifecycle_e2e::shows_nothing]"), s),
        vec![
            "Thing.a: lifecycle_e2e::shows_nothing: no #[test] fn shows_nothing( in tests/lifecycle_e2e.rs"
        ]
    );
    assert_eq!(
        problems(
            &a_how("A= [e2e: lifecycle_e2e::shows_a, sync_e2e::gone]"),
            s
        ),
        vec!["Thing.a: sync_e2e::gone: no #[test] fn gone( in tests/sync_e2e.rs"]
    );
    assert_eq!(
        problems(&a_how("A= [e2e: cluster::shows_a]"), s).len(),
        1,
        "not a real-systemd suite"
    );
    assert_eq!(
        problems(&a_how("A= [e2e: shows_a]"), s),
        vec!["Thing.a: \"shows_a\" is not SUITE::TEST"]
    );
    assert_eq!(
        problems(&a_how("[e2e: lifecycle_e2e::shows_a] A="), s),
        vec!["Thing.a: `[e2e: lifecycle_e2e::shows_a] A=` does not end the row"]
    );
    // Tests named by a row that is not mapped.
    assert_eq!(
        problems(
            &good.replace("| why |", "| why [e2e: lifecycle_e2e::shows_a] |"),
            s
        ),
        vec!["Thing.b: ignored, but names tests"]
    );
    // A mapped row without a test fails, whatever the field.
    let affinity: &[(&str, &[&str])] = &[("PodSpec", &["affinity"])];
    assert_eq!(
        problems("### PodSpec\n| `affinity` | mapped | x |\n", affinity),
        vec!["PodSpec.affinity: mapped, but names no test that shows it ([e2e: SUITE::TEST])"]
    );
}

/// The lookup reads the suites as they are: a test is found, a helper or a missing name is not.
#[test]
fn suite_lookup_finds_only_tests() {
    assert_eq!(
        suite_has_test(
            "sandbox_e2e",
            "a_secret_value_is_nowhere_but_in_the_process_and_root_only_files"
        ),
        Some(true)
    );
    assert_eq!(
        suite_has_test("lifecycle_e2e", "no_such_test_anywhere"),
        Some(false)
    );
    assert_eq!(
        suite_has_test("mapping_doc", "suite_has_test"),
        Some(false),
        "not a #[test]"
    );
    assert_eq!(suite_has_test("no_such_suite", "x"), None);
    assert_eq!(
        suite_has_test(
            "kubelet_e2e",
            "cni_network::cni_pods_through_a_real_apiserver"
        ),
        Some(true),
        "a case in the suite's folder"
    );
    assert_eq!(suite_has_test("kubelet_e2e", "no_such_module::x"), None);
}
