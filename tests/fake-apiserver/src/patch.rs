//! PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch for the keyed lists podunit
//! touches, and JSON patch (RFC 6902).

use crate::status::{ApiError, ApiResult};
use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` deletes, everything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("just made an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// The merge key of the lists whose Go type declares `patchStrategy:"merge"`, by field name.
/// Field names are unambiguous for the objects served here.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "conditions" => "type",
        "addresses" => "type",
        "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses" => "name",
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaimStatuses"
        | "readinessGates" => "name",
        "podIPs" | "hostIPs" => "ip",
        "volumeMounts" => "mountPath",
        "ports" => "containerPort",
        "ownerReferences" => "uid",
        _ => return None,
    })
}

/// Lists of scalars that strategic merge unions instead of replacing.
fn is_merged_scalar_list(field: &str) -> bool {
    field == "finalizers"
}

/// Strategic merge patch as `kubectl` and the kubelet send it. Lists of known keyed types merge by
/// key (`$patch: delete` removes an element), `$patch: replace` replaces a map, `$setElementOrder`
/// and `$retainKeys` directives are accepted and ignored; other lists are replaced.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> ApiResult<()> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        strip_directives(&mut replaced);
        *target = replaced;
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("just made an object");
    for (k, v) in p {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Value::Array(gone)) = (t.get_mut(field), v) {
                items.retain(|i| !gone.contains(i));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (t.get_mut(k), v, merge_key(k)) {
            (Some(Value::Array(cur)), Value::Array(items), Some(key)) => {
                merge_keyed_list(cur, items, key)?
            }
            (Some(Value::Array(cur)), Value::Array(items), None) if is_merged_scalar_list(k) => {
                for i in items {
                    if !cur.contains(i) {
                        cur.push(i.clone());
                    }
                }
            }
            (Some(cur @ Value::Object(_)), Value::Object(_), _) => strategic_merge_patch(cur, v)?,
            (_, _, _) => {
                let mut new = v.clone();
                strip_directives(&mut new);
                if let Value::Array(items) = &mut new {
                    items.retain(|i| i.get("$patch").and_then(Value::as_str) != Some("delete"));
                }
                t.insert(k.clone(), new);
            }
        }
    }
    Ok(())
}

fn merge_keyed_list(cur: &mut Vec<Value>, items: &[Value], key: &str) -> ApiResult<()> {
    for item in items {
        let Some(kv) = item.get(key).cloned() else {
            return Err(ApiError::bad_request(format!(
                "map: {item} does not contain declared merge key: {key}"
            )));
        };
        let pos = cur.iter().position(|c| c.get(key) == Some(&kv));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                cur.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge_patch(&mut cur[i], item)?,
            (None, false) => {
                let mut new = item.clone();
                strip_directives(&mut new);
                cur.push(new);
            }
        }
    }
    Ok(())
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

/// RFC 6902 JSON patch: add, remove, replace, move, copy, test.
pub fn json_patch(target: &mut Value, patch: &Value) -> ApiResult<()> {
    let ops = patch
        .as_array()
        .ok_or_else(|| ApiError::bad_request("json patch must be an array of operations"))?;
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or_default();
        let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
        let value = op.get("value").cloned();
        match kind {
            "add" => add(target, path, value.ok_or_else(missing_value)?)?,
            "replace" => {
                remove(target, path)?;
                add(target, path, value.ok_or_else(missing_value)?)?
            }
            "remove" => {
                remove(target, path)?;
            }
            "move" | "copy" => {
                let from = op.get("from").and_then(Value::as_str).unwrap_or_default();
                let v = if kind == "move" {
                    remove(target, from)?
                } else {
                    target.pointer(from).cloned().ok_or_else(|| no_path(from))?
                };
                add(target, path, v)?
            }
            "test" => {
                if target.pointer(path) != value.as_ref() {
                    return Err(ApiError::invalid_patch(format!(
                        "testing value {path} failed"
                    )));
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unexpected kind of json patch operation: {other:?}"
                )));
            }
        }
    }
    Ok(())
}

fn missing_value() -> ApiError {
    ApiError::bad_request("json patch operation is missing its value")
}

fn no_path(path: &str) -> ApiError {
    ApiError::invalid_patch(format!("doc is missing path: {path:?}"))
}

fn split_pointer(path: &str) -> ApiResult<(String, String)> {
    let (parent, last) = path.rsplit_once('/').ok_or_else(|| no_path(path))?;
    let last = last.replace("~1", "/").replace("~0", "~");
    Ok((parent.to_string(), last))
}

fn add(target: &mut Value, path: &str, value: Value) -> ApiResult<()> {
    if path.is_empty() {
        *target = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    match target.pointer_mut(&parent) {
        Some(Value::Object(m)) => {
            m.insert(last, value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let idx = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>().map_err(|_| no_path(path))?
            };
            if idx > a.len() {
                return Err(no_path(path));
            }
            a.insert(idx, value);
            Ok(())
        }
        _ => Err(no_path(path)),
    }
}

fn remove(target: &mut Value, path: &str) -> ApiResult<Value> {
    let (parent, last) = split_pointer(path)?;
    match target.pointer_mut(&parent) {
        Some(Value::Object(m)) => m.remove(&last).ok_or_else(|| no_path(path)),
        Some(Value::Array(a)) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => Ok(a.remove(i)),
            _ => Err(no_path(path)),
        },
        _ => Err(no_path(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn strategic_merges_conditions_by_type() {
        let mut t = json!({"status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False"}
        ]}});
        let p = json!({"status": {
            "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}, {"type": "Initialized"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
            "phase": "Running"
        }});
        strategic_merge_patch(&mut t, &p).unwrap();
        assert_eq!(t["status"]["phase"], "Running");
        let c = t["status"]["conditions"].as_array().unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c[0], json!({"type": "PodScheduled", "status": "True"}));
        assert_eq!(c[1], json!({"type": "Ready", "status": "True"}));
        assert_eq!(c[2]["type"], "Initialized");
    }

    #[test]
    fn strategic_delete_and_replace_directives() {
        let mut t =
            json!({"s": {"containerStatuses": [{"name": "a"}, {"name": "b"}], "m": {"x": 1}}});
        let p = json!({"s": {"containerStatuses": [{"name": "a", "$patch": "delete"}],
                              "m": {"$patch": "replace", "y": 2}}});
        strategic_merge_patch(&mut t, &p).unwrap();
        assert_eq!(
            t,
            json!({"s": {"containerStatuses": [{"name": "b"}], "m": {"y": 2}}})
        );
        // Lists without a merge key are replaced, as in a merge patch.
        let mut t = json!({"images": [{"names": ["a"]}]});
        strategic_merge_patch(&mut t, &json!({"images": [{"names": ["b"]}]})).unwrap();
        assert_eq!(t, json!({"images": [{"names": ["b"]}]}));
        // A keyed list element without its key is refused.
        assert!(
            strategic_merge_patch(
                &mut json!({"conditions": []}),
                &json!({"conditions": [{"status": "x"}]})
            )
            .is_err()
        );
    }

    #[test]
    fn json_patch_operations() {
        let mut t = json!({"a": [1, 2], "b": {"c": 1}});
        json_patch(
            &mut t,
            &json!([
                {"op": "add", "path": "/a/-", "value": 3},
                {"op": "replace", "path": "/b/c", "value": 2},
                {"op": "remove", "path": "/a/0"},
                {"op": "test", "path": "/b/c", "value": 2}
            ]),
        )
        .unwrap();
        assert_eq!(t, json!({"a": [2, 3], "b": {"c": 2}}));
        assert!(json_patch(&mut t, &json!([{"op": "test", "path": "/b/c", "value": 9}])).is_err());
        assert!(json_patch(&mut t, &json!([{"op": "remove", "path": "/nope"}])).is_err());
    }
}
