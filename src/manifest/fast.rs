//! The fast way through a file of JSON documents (the spool, `.json` manifests, the parsed-manifest
//! cache): serde_json straight into the typed objects, without the `serde_json::Value` tree.
//!
//! It only ever answers for documents that have nothing to report: a v1 Pod, ConfigMap or Secret
//! that deserializes without an error and without a field the types do not know. For anything
//! else (a type error, an unknown field, a List, another kind, text that is not JSON) it answers
//! None, and the caller reads the file the general way ([`super::parse`]), which says what is
//! wrong exactly as it always has. So the problems reported for bad input cannot differ, and a
//! clean document gives the same object either way: k8s-openapi's types take each field as it
//! comes, the last of duplicate keys wins in both, and every `apiVersion`/`kind` is checked.

use super::Object;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// The objects of `text` when every document is a clean v1 Pod, ConfigMap or Secret in JSON.
pub fn objects(text: &str) -> Option<Vec<Object>> {
    let docs = json_texts(text)?;
    let mut out = Vec::with_capacity(docs.len());
    for doc in &docs {
        out.push(object(doc)?);
    }
    Some(out)
}

/// serde_json gives no length for a list, so serde grows it by doubling: the lists of big
/// elements (a `Container` is about 1 KB, a `Volume` 1.6 KB) are moved into lists of their exact
/// length (even a list of three containers in room for four: skipping that copy saved 1 % of a
/// JSON pod's instructions and cost 7 % more peak memory at 1000 pods). With a thousand pods held at once, that is the peak memory. (A moved list, not
/// `shrink_to_fit`: allocators shrink a block in place.) The general path decodes from JSON text
/// too ([`super::parse`]), so its pods are made compact the same way.
pub(super) fn compact(pod: &mut Pod) {
    if let Some(spec) = pod.spec.as_mut() {
        for c in spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut())
        {
            exact_opt(&mut c.env);
            exact_opt(&mut c.env_from);
            exact_opt(&mut c.volume_mounts);
            exact_opt(&mut c.ports);
        }
        exact(&mut spec.containers);
        exact_opt(&mut spec.init_containers);
        exact_opt(&mut spec.volumes);
    }
}

fn exact<T>(v: &mut Vec<T>) {
    if v.capacity() > v.len() {
        let mut to = Vec::with_capacity(v.len());
        to.append(v);
        *v = to;
    }
}

fn exact_opt<T>(v: &mut Option<Vec<T>>) {
    if let Some(v) = v {
        exact(v);
    }
}

/// One document's object, if it is clean.
pub fn object(doc: &str) -> Option<Object> {
    let head = head(doc)?;
    match (head.api_version.as_str(), head.kind.as_str()) {
        // Boxed first and made compact in place: a Pod is a few KB, each move a copy of it.
        ("v1", "Pod") => typed::<Pod>(doc).map(|p| {
            let mut pod = Box::new(p);
            compact(&mut pod);
            Object::Pod(pod)
        }),
        ("v1", "ConfigMap") => typed::<ConfigMap>(doc).map(|c| Object::ConfigMap(Box::new(c))),
        ("v1", "Secret") => typed::<Secret>(doc).map(|s| Object::Secret(Box::new(s))),
        _ => None,
    }
}

/// The documents of a file whose documents are each one JSON object, separated by `---` lines,
/// with `#` comment lines skipped: the same split as the general path's, borrowing the text
/// instead of copying every line (a document is copied only when a comment line interrupts it).
/// None when a document does not start with `{`, or there is none.
pub fn json_texts(text: &str) -> Option<Vec<Cow<'_, str>>> {
    let mut docs = Vec::new();
    let mut cur = Pending::default();
    let mut pos = 0;
    for raw in text.split_inclusive('\n') {
        let (start, end) = (pos, pos + raw.len());
        pos = end;
        let line = raw.strip_suffix('\n').unwrap_or(raw);
        if line.trim_end() == "---" {
            cur.flush(text, &mut docs)?;
        } else if line.trim_start().starts_with('#') {
            cur.gap = cur.range.is_some();
        } else {
            // A document that does not start with `{` is not JSON: say so at its first line,
            // not after reading a whole YAML file.
            if !cur.started {
                match line.trim_start().chars().next() {
                    Some('{') => cur.started = true,
                    Some(_) => return None,
                    None => {}
                }
            }
            cur.add(text, start, end);
        }
    }
    cur.flush(text, &mut docs)?;
    (!docs.is_empty()).then_some(docs)
}

/// The lines of the document being read: a range of the text while they are contiguous.
#[derive(Default)]
struct Pending {
    range: Option<(usize, usize)>,
    /// A skipped line came after the range: the next kept line cannot extend it.
    gap: bool,
    /// A line with more than white space was kept.
    started: bool,
    owned: Option<String>,
}

impl Pending {
    fn add(&mut self, text: &str, start: usize, end: usize) {
        if let Some(s) = self.owned.as_mut() {
            push_line(s, &text[start..end]);
            return;
        }
        match self.range {
            None => self.range = Some((start, end)),
            Some((s, _)) if !self.gap => self.range = Some((s, end)),
            Some((s, e)) => {
                let mut owned = String::with_capacity(e - s + end - start + 1);
                push_line(&mut owned, &text[s..e]);
                push_line(&mut owned, &text[start..end]);
                self.owned = Some(owned);
            }
        }
    }

    fn flush<'a>(&mut self, text: &'a str, docs: &mut Vec<Cow<'a, str>>) -> Option<()> {
        let doc = match (self.owned.take(), self.range.take()) {
            (Some(s), _) => Cow::Owned(s),
            (None, Some((s, e))) => Cow::Borrowed(&text[s..e]),
            (None, None) => Cow::Borrowed(""),
        };
        self.gap = false;
        self.started = false;
        let trimmed = doc.trim();
        if trimmed.is_empty() {
            return Some(());
        }
        if !trimmed.starts_with('{') {
            return None;
        }
        docs.push(match doc {
            Cow::Borrowed(b) => Cow::Borrowed(b.trim()),
            Cow::Owned(o) => Cow::Owned(o.trim().to_string()),
        });
        Some(())
    }
}

/// A line as the general path keeps it: always ending in a newline.
fn push_line(s: &mut String, line: &str) {
    s.push_str(line);
    if !line.ends_with('\n') {
        s.push('\n');
    }
}

/// `value` of type `T`, if it deserializes from `doc` with no field left unknown.
fn typed<T: DeserializeOwned>(doc: &str) -> Option<T> {
    let (value, unknown) = super::unknown::from_json::<T>(doc).ok()?;
    (!unknown).then_some(value)
}

/// The first `apiVersion` and `kind` of a document, read up to where both were seen.
#[derive(Default)]
struct Head {
    api_version: String,
    kind: String,
}

fn head(doc: &str) -> Option<Head> {
    let mut found = (None, None);
    let mut de = serde_json::Deserializer::from_str(doc);
    // Reading stops (with an error, which is how a visitor ends early) once both were seen: the
    // typed pass reads the whole document, and checks every `apiVersion` and `kind` it meets.
    let _ = HeadSeed(&mut found).deserialize(&mut de);
    match found {
        (Some(api_version), Some(kind)) => Some(Head { api_version, kind }),
        _ => None,
    }
}

struct HeadSeed<'a>(&'a mut (Option<String>, Option<String>));

impl<'de> DeserializeSeed<'de> for HeadSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeadSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<HeadKey>()? {
            match key {
                HeadKey::ApiVersion if self.0.0.is_none() => self.0.0 = Some(map.next_value()?),
                HeadKey::Kind if self.0.1.is_none() => self.0.1 = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            if self.0.0.is_some() && self.0.1.is_some() {
                return Err(de::Error::custom("seen"));
            }
        }
        Ok(())
    }
}

enum HeadKey {
    ApiVersion,
    Kind,
    Other,
}

impl<'de> de::Deserialize<'de> for HeadKey {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_identifier(HeadKeyVisitor)
    }
}

struct HeadKeyVisitor;

impl Visitor<'_> for HeadKeyVisitor {
    type Value = HeadKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<HeadKey, E> {
        Ok(match v {
            "apiVersion" => HeadKey::ApiVersion,
            "kind" => HeadKey::Kind,
            _ => HeadKey::Other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(t: &str) -> Option<Vec<String>> {
        json_texts(t).map(|d| d.into_iter().map(Cow::into_owned).collect())
    }

    #[test]
    fn documents_split_as_lines_were_joined() {
        assert_eq!(
            texts("{\"a\":1}\n---\n{\"b\":2}\n"),
            Some(vec!["{\"a\":1}".into(), "{\"b\":2}".into()])
        );
        assert_eq!(
            texts("# c\n{\n# inside\n\"a\": 1}\n---\n"),
            Some(vec!["{\n\"a\": 1}".into()])
        );
        assert_eq!(
            texts("{}\r\n---\r\n{}"),
            Some(vec!["{}".into(), "{}".into()])
        );
        assert_eq!(texts("apiVersion: v1\n"), None);
        assert_eq!(texts("---\n# only a comment\n"), None);
    }

    #[test]
    fn only_clean_documents() {
        let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"host"}]}}"#;
        assert!(matches!(object(pod), Some(Object::Pod(_))));
        for bad in [
            // unknown field, type error, a second kind that the type refuses, no kind, a List
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","nme":"b"}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","spec":{"containers":{}}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","kind":"Secret"}"#,
            r#"{"apiVersion":"v1","metadata":{"name":"a"}}"#,
            r#"{"apiVersion":"v1","kind":"List","items":[]}"#,
            r#"{"apiVersion":1,"kind":"Pod"}"#,
            r#"{"apiVersion":"v1","kind":"Pod"} x"#,
        ] {
            assert!(object(bad).is_none(), "{bad}");
        }
    }
}
