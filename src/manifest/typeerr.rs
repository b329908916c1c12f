//! A document that does not deserialize, explained as the API server explains it
//! (`spec.containers[0].ports[0].containerPort: Invalid value: "eighty": must be an integer`), with
//! every such error of the document, not only the first.
//!
//! serde stops at the first error. To find the next, the offending value is replaced by a
//! placeholder of the type that was expected and the document read again, until it reads or an
//! error has no placeholder (then the errors so far are all that is said: never a guess).

use serde::de::DeserializeOwned;
use serde_json::Value;

/// At most this many errors per document: enough to fix a file in one go.
const MAX_ERRORS: usize = 20;

/// What reading a document found: type errors (path, message) and the unknown fields of the
/// document as far as it could be read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub errors: Vec<(String, String)>,
    pub unknown: Vec<String>,
}

/// Reads `doc` as `T` again and again, collecting every error that can be found.
pub fn find<T: DeserializeOwned>(doc: &Value) -> Found {
    let mut doc = doc.clone();
    let mut found = Found::default();
    let mut replaced: Vec<String> = Vec::new();
    loop {
        let mut unknown = Vec::new();
        let mut track = serde_path_to_error::Track::new();
        let result = {
            let mut record = |p: serde_ignored::Path<'_>| unknown.push(ignored_path(&p));
            let de = serde_ignored::Deserializer::new(&doc, &mut record);
            T::deserialize(serde_path_to_error::Deserializer::new(de, &mut track))
        };
        found.unknown = unknown;
        let Err(e) = result else { return found };
        let segments = segments(&track.path());
        let at = path_string(&segments);
        // An error in or below a placeholder is the placeholder's, not the manifest's.
        if replaced.iter().any(|r| {
            at == *r || at.starts_with(&format!("{r}.")) || at.starts_with(&format!("{r}["))
        }) {
            return found;
        }
        let message = e.to_string();
        let value = lookup(&doc, &segments);
        let (text, placeholder) = explain(&message, value);
        let (path, text) = match missing_field(&message) {
            Some(field) if at.is_empty() => (field.to_string(), "Required value".to_string()),
            Some(field) => (format!("{at}.{field}"), "Required value".to_string()),
            None => (at.clone(), text),
        };
        found.errors.push((path, text));
        let Some(placeholder) = placeholder.filter(|_| found.errors.len() < MAX_ERRORS) else {
            return found;
        };
        match lookup_mut(&mut doc, &segments) {
            Some(slot) => *slot = placeholder,
            None => return found,
        }
        replaced.push(at);
    }
}

/// One step of a path into a document.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

fn segments(p: &serde_path_to_error::Path) -> Vec<Step> {
    use serde_path_to_error::Segment;
    p.iter()
        .filter_map(|s| match s {
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Enum { variant } => Some(Step::Key(variant.clone())),
            Segment::Unknown => None,
        })
        .collect()
}

/// `spec.containers[0].name`, as field paths are written everywhere else.
fn path_string(steps: &[Step]) -> String {
    let mut s = String::new();
    for step in steps {
        match step {
            Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn lookup<'a>(doc: &'a Value, steps: &[Step]) -> Option<&'a Value> {
    steps.iter().try_fold(doc, |v, s| match s {
        Step::Key(k) => v.get(k),
        Step::Index(i) => v.get(i),
    })
}

fn lookup_mut<'a>(doc: &'a mut Value, steps: &[Step]) -> Option<&'a mut Value> {
    steps.iter().try_fold(doc, |v, s| match s {
        Step::Key(k) => v.get_mut(k),
        Step::Index(i) => v.get_mut(i),
    })
}

/// serde's `missing field `name``: the field.
fn missing_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")?
        .split('`')
        .next()
        .filter(|f| !f.is_empty())
}

/// The API server's words for an error, and a placeholder of the expected type (None when there
/// is none to give: the search stops there).
fn explain(message: &str, value: Option<&Value>) -> (String, Option<Value>) {
    let shown = value.map_or_else(|| "null".to_string(), show);
    let expected = ["invalid type: ", "invalid value: "]
        .iter()
        .any(|p| message.starts_with(p))
        .then(|| message.rsplit_once(", expected ").map(|(_, e)| e))
        .flatten();
    let Some(expected) = expected else {
        // Anything else (a date, base64, a quantity that does not parse): serde's words, in the
        // API server's frame.
        return (format!("Invalid value: {shown}: {}", message.trim()), None);
    };
    let integer = |bits: &str| {
        let in_range = matches!(value, Some(Value::Number(n)) if n.is_i64() || n.is_u64());
        // An integer that does not fit is out of range; anything else is not an integer.
        let want = if in_range {
            format!("must be a {bits}-bit integer")
        } else {
            "must be an integer".to_string()
        };
        (want, Some(Value::from(0)))
    };
    let (want, placeholder) = match expected {
        "i8" | "u8" => integer("8"),
        "i16" | "u16" => integer("16"),
        "i32" | "u32" => integer("32"),
        "i64" | "u64" | "i128" | "u128" | "an integer" => integer("64"),
        "f32" | "f64" | "a number" => ("must be a number".to_string(), Some(Value::from(0))),
        "a string" | "a borrowed string" | "string" => {
            ("must be a string".to_string(), Some(Value::from("")))
        }
        "a boolean" => (
            "must be a boolean (true or false)".to_string(),
            Some(Value::Bool(false)),
        ),
        "a sequence" => ("must be a list".to_string(), Some(Value::Array(Vec::new()))),
        e if e.to_ascii_lowercase().contains("intorstring")
            || e.to_ascii_lowercase().contains("int or string") =>
        {
            (
                "must be an integer or a string".to_string(),
                Some(Value::from(0)),
            )
        }
        // k8s-openapi's structs expect themselves by name (`NodeSelector`).
        e if e == "a map"
            || e.starts_with("struct ")
            || e.starts_with(|c: char| c.is_ascii_uppercase()) =>
        {
            (
                "must be an object".to_string(),
                Some(Value::Object(Default::default())),
            )
        }
        e => (format!("must be {e}"), None),
    };
    (format!("Invalid value: {shown}: {want}"), placeholder)
}

/// A value as the message shows it: JSON (so a string is quoted and a control character
/// escaped), cut short when long.
fn show(v: &Value) -> String {
    let s = match v {
        Value::Array(_) => "list".to_string(),
        Value::Object(_) => "object".to_string(),
        _ => v.to_string(),
    };
    if s.chars().count() > 80 {
        let cut: String = s.chars().take(77).collect();
        format!("{cut}...")
    } else {
        s
    }
}

/// kubectl-style path (`spec.containers[0].comand`) from serde_ignored's.
pub(super) fn ignored_path(p: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path as P;
    match p {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        P::Map { parent, key } => {
            let base = ignored_path(parent);
            if base.is_empty() {
                key.clone()
            } else {
                format!("{base}.{key}")
            }
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            ignored_path(parent)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn errors(yaml: &str) -> Vec<String> {
        let doc: Value = serde_saphyr::from_str(yaml).unwrap();
        find::<Pod>(&doc)
            .errors
            .into_iter()
            .map(|(p, m)| format!("{p}: {m}"))
            .collect()
    }

    #[test]
    fn says_it_as_the_api_server_does() {
        assert_eq!(
            errors(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    image: host\n    ports: [{containerPort: eighty}]\n"
            ),
            [
                "spec.containers[0].ports[0].containerPort: Invalid value: \"eighty\": must be an integer"
            ]
        );
    }

    #[test]
    fn finds_every_error_of_the_document() {
        let e = errors(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {x: {y: 1}}}\nspec:\n  terminationGracePeriodSeconds: soon\n  hostIPC: maybe\n  containers:\n  - name: c\n    image: host\n    args: [ok, {x: 1}]\n    ports: [{containerPort: 99999999999}]\n  - name: 7\n    image: host\n    command: /bin/true\n",
        );
        assert_eq!(
            e,
            [
                "metadata.labels.x: Invalid value: object: must be a string",
                "spec.containers[0].args[1]: Invalid value: object: must be a string",
                "spec.containers[0].ports[0].containerPort: Invalid value: 99999999999: must be a 32-bit integer",
                "spec.containers[1].command: Invalid value: \"/bin/true\": must be a list",
                "spec.containers[1].name: Invalid value: 7: must be a string",
                "spec.hostIPC: Invalid value: \"maybe\": must be a boolean (true or false)",
                "spec.terminationGracePeriodSeconds: Invalid value: \"soon\": must be an integer",
            ]
        );
    }

    #[test]
    fn a_missing_field_is_required() {
        // k8s-openapi defaults the fields it calls required (validation then says so); a type
        // that does not is read as the API server would say it.
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Port {
            port: i32,
            name: String,
        }
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Spec {
            ports: Vec<Port>,
        }
        let doc = serde_json::json!({"ports": [{"port": "x"}]});
        assert_eq!(
            find::<Spec>(&doc).errors,
            [
                (
                    "ports[0].port".to_string(),
                    "Invalid value: \"x\": must be an integer".to_string()
                ),
                ("ports[0].name".to_string(), "Required value".to_string()),
            ]
        );
    }

    #[test]
    fn a_value_is_shown_on_one_line() {
        let e = errors(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    ports: [{containerPort: \"8\\n0\\u001b\"}]\n",
        );
        assert_eq!(
            e,
            [
                "spec.containers[0].ports[0].containerPort: Invalid value: \"8\\n0\\u001b\": must be an integer"
            ]
        );
    }
}
