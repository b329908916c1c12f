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

use k8s_openapi::api::core::v1 as core;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use std::fmt;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/mapping.md");
const VERDICTS: &[&str] = &["mapped", "ignored", "rejected", "warned"];

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
        fields_of::<core::EmptyDirVolumeSource>(),
        fields_of::<core::HostPathVolumeSource>(),
        fields_of::<core::ConfigMapVolumeSource>(),
        fields_of::<core::SecretVolumeSource>(),
        fields_of::<core::KeyToPath>(),
        fields_of::<core::DownwardAPIVolumeSource>(),
        fields_of::<core::DownwardAPIVolumeFile>(),
        fields_of::<core::ProjectedVolumeSource>(),
        fields_of::<core::VolumeProjection>(),
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

/// Everything wrong between the structs and the document, one message per problem.
fn problems(doc: &str, structs: &[(&str, &[&str])]) -> Vec<String> {
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
    let found = problems(&doc, &structs());
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
    let s: &[(&str, &[&str])] = &[("Thing", &["a", "b"])];
    let good = "## Fields\n### Thing\n| field | verdict | how |\n|---|---|---|\n| `a` | mapped | A= |\n| `b` | ignored | why |\n";
    assert_eq!(problems(good, s), Vec::<String>::new());
    let missing = good.replace("| `b` | ignored | why |\n", "");
    assert_eq!(problems(&missing, s), vec!["Thing.b: no row"]);
    let stale = format!("{good}| `c` | mapped | x |\n");
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
}
