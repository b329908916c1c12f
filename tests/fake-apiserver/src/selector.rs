//! Field and label selectors, with the syntax and the per-resource field lists of the real API.

use crate::resources::Resource;
use crate::status::{ApiError, ApiResult};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector {
    /// (field path, wanted value, equal?)
    terms: Vec<(String, String, bool)>,
}

/// Fields each resource can be selected on, besides metadata.name and metadata.namespace.
fn extra_fields(res: &Resource) -> &'static [&'static str] {
    match res.plural {
        "pods" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "events" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        "secrets" => &["type"],
        "nodes" => &["spec.unschedulable"],
        "namespaces" => &["status.phase"],
        _ => &[],
    }
}

impl FieldSelector {
    pub fn parse(res: &Resource, s: &str) -> ApiResult<Self> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value, eq) = if let Some((k, v)) = part.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, v, true)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let key = key.trim();
            let known = key == "metadata.name"
                || key == "metadata.namespace"
                || extra_fields(res).contains(&key);
            if !known {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {key}"
                )));
            }
            terms.push((key.to_string(), value.trim().to_string(), eq));
        }
        Ok(FieldSelector { terms })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.terms
            .iter()
            .all(|(path, want, eq)| (field_value(obj, path) == *want) == *eq)
    }

    /// The value the selector requires for `path`, when it has an equality term on it.
    pub fn required(&self, path: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|(p, _, eq)| p == path && *eq)
            .map(|(_, v, _)| v.as_str())
    }
}

/// A field's value as a selector sees it: strings as they are, booleans and numbers printed, missing as "".
fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        // `source` on an Event is an object; the real selector uses source.component.
        Value::Object(m) => m
            .get("component")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum LabelTerm {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector {
    terms: Vec<LabelTerm>,
}

/// Splits at commas outside parentheses.
fn top_level_parts(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn set_values(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> ApiResult<Self> {
        let bad = |part: &str| {
            ApiError::bad_request(format!(
                "unable to parse requirement: found '{part}' in label selector '{s}'"
            ))
        };
        let mut terms = Vec::new();
        for part in top_level_parts(s)
            .into_iter()
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let term = if let Some((k, v)) = part.split_once("!=") {
                LabelTerm::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelTerm::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelTerm::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                LabelTerm::NotIn(k.trim().into(), set_values(v).ok_or_else(|| bad(part))?)
            } else if let Some((k, v)) = part.split_once(" in ") {
                LabelTerm::In(k.trim().into(), set_values(v).ok_or_else(|| bad(part))?)
            } else if let Some(k) = part.strip_prefix('!') {
                LabelTerm::NotExists(k.trim().into())
            } else if part.contains(char::is_whitespace) || part.contains('(') {
                return Err(bad(part));
            } else {
                LabelTerm::Exists(part.into())
            };
            terms.push(term);
        }
        Ok(LabelSelector { terms })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.terms.iter().all(|t| match t {
            LabelTerm::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelTerm::Ne(k, v) => get(k) != Some(v.as_str()),
            LabelTerm::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelTerm::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelTerm::Exists(k) => get(k).is_some(),
            LabelTerm::NotExists(k) => get(k).is_none(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{CONFIGMAPS, PODS};
    use serde_json::json;

    #[test]
    fn field_selector_on_node_name() {
        let pod =
            json!({"metadata": {"name": "a"}, "spec": {"nodeName": "n1", "hostNetwork": true}});
        let s = FieldSelector::parse(&PODS, "spec.nodeName=n1").unwrap();
        assert!(s.matches(&pod));
        assert_eq!(s.required("spec.nodeName"), Some("n1"));
        assert!(
            !FieldSelector::parse(&PODS, "spec.nodeName=n2")
                .unwrap()
                .matches(&pod)
        );
        assert!(
            FieldSelector::parse(&PODS, "spec.nodeName!=n2,metadata.name==a")
                .unwrap()
                .matches(&pod)
        );
        assert!(
            FieldSelector::parse(&PODS, "spec.hostNetwork=true")
                .unwrap()
                .matches(&pod)
        );
        // An unbound pod has nodeName "" as far as selectors go.
        assert!(
            FieldSelector::parse(&PODS, "spec.nodeName=")
                .unwrap()
                .matches(&json!({}))
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = FieldSelector::parse(&CONFIGMAPS, "spec.nodeName=n1").unwrap_err();
        assert_eq!(e.code, 400);
        assert!(e.message.contains("field label not supported"));
        assert!(FieldSelector::parse(&PODS, "nonsense").is_err());
    }

    #[test]
    fn label_selectors() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (db, web),!missing"));
        assert!(!m("app notin (web)"));
        assert!(!m("missing"));
        assert!(m(""));
        assert!(LabelSelector::parse("app in web").is_err());
    }
}
