//! A container's environment: what is known at generation (`Environment=`), what only exists when
//! the pod starts (an `EnvironmentFile=` written by `podunit pod-prepare`), and Kubernetes `$(VAR)`
//! expansion over both.

use super::{Fault, NodeFacts};
use crate::common::quantity;
use crate::escape::{Arg, Piece};
use crate::translate::plan::{EnvEntry, EnvFilePlan};
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};
use std::collections::BTreeMap;

/// What a name is bound to while the environment is built, for `$(VAR)` expansion.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Binding {
    Known(String),
    /// Resolved when the pod starts; referenced in command lines as `${NAME}`.
    Runtime,
}

/// The fields `fieldRef.fieldPath` may name, with whether they are known at generation.
pub fn field_ref_supported(path: &str) -> Option<bool> {
    match path {
        "metadata.name"
        | "metadata.namespace"
        | "metadata.uid"
        | "spec.nodeName"
        | "spec.serviceAccountName" => Some(true),
        "status.hostIP" | "status.podIP" | "status.hostIPs" | "status.podIPs" => Some(false),
        p if label_key(p).is_some() => Some(true),
        _ => None,
    }
}

/// `metadata.labels['k']` / `metadata.annotations['k']` -> ("labels"|"annotations", k).
fn label_key(path: &str) -> Option<(&'static str, &str)> {
    for (prefix, which) in [
        ("metadata.labels['", "labels"),
        ("metadata.annotations['", "annotations"),
    ] {
        if let Some(rest) = path.strip_prefix(prefix) {
            return rest.strip_suffix("']").map(|k| (which, k));
        }
    }
    None
}

/// A static `fieldRef` value (None for runtime fields and unknown paths).
pub fn field_value(pod: &Pod, node: &NodeFacts, path: &str) -> Option<String> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    Some(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => node.node_name.clone(),
        "spec.serviceAccountName" => spec
            .and_then(|s| {
                s.service_account_name
                    .clone()
                    .or_else(|| s.service_account.clone())
            })
            .unwrap_or_else(|| "default".into()),
        "metadata.labels" => {
            crate::translate::plan::format_map(m.labels.as_ref().unwrap_or(&BTreeMap::new()))
        }
        "metadata.annotations" => {
            crate::translate::plan::format_map(m.annotations.as_ref().unwrap_or(&BTreeMap::new()))
        }
        p => {
            let (which, key) = label_key(p)?;
            let map = if which == "labels" {
                &m.labels
            } else {
                &m.annotations
            };
            map.as_ref()
                .and_then(|l| l.get(key))
                .cloned()
                .unwrap_or_default()
        }
    })
}

/// A `resourceFieldRef` value: the container's limit or request divided by `divisor`, rounded up;
/// an unset request is the limit (the API server defaults requests to limits), an unset limit the
/// node's capacity, as the kubelet reports it.
pub fn resource_value(
    ctr: &Container,
    node: &NodeFacts,
    resource: &str,
    divisor: Option<&str>,
) -> Result<String, String> {
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| format!("{resource:?} is not a resource field"))?;
    let res = ctr.resources.as_ref();
    let map = match kind {
        "limits" => res.and_then(|r| r.limits.as_ref()),
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => return Err(format!("{resource:?} is not a resource field")),
    };
    let limit = || {
        res.and_then(|r| r.limits.as_ref())
            .and_then(|m| m.get(name))
            .map(|q| q.0.as_str())
    };
    let q = map
        .and_then(|m| m.get(name))
        .map(|q| q.0.as_str())
        .or_else(|| if kind == "requests" { limit() } else { None });
    let (value, div) = match name {
        "cpu" => {
            let v = match q {
                Some(q) => quantity::cpu_millis(q).map_err(|e| e.to_string())?,
                None if kind == "limits" => node.cpu_millis,
                None => 0,
            };
            (
                v,
                quantity::cpu_millis(divisor.unwrap_or("1")).map_err(|e| e.to_string())?,
            )
        }
        "memory" | "ephemeral-storage" => {
            let v = match q {
                Some(q) => quantity::bytes(q).map_err(|e| e.to_string())?,
                None if kind == "limits" => node.memory_bytes,
                None => 0,
            };
            (
                v,
                quantity::bytes(divisor.unwrap_or("1")).map_err(|e| e.to_string())?,
            )
        }
        _ => return Err(format!("{resource:?} is not a supported resource")),
    };
    if div == 0 {
        return Err("divisor must be greater than zero".into());
    }
    Ok(value.div_ceil(div).to_string())
}

/// Kubernetes' `$(VAR)` expansion (k8s.io/kubernetes third_party/forked/golang/expansion): `$$` is a
/// literal `$`, `$(NAME)` is replaced when NAME is bound, and left as written when it is not.
/// Runtime bindings become [`Piece::Var`].
fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<Binding>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let mut text = String::new();
    let b = input.as_bytes();
    let mut i = 0;
    let mut checkpoint = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            text.push_str(&input[checkpoint..i]);
            match b[i + 1] {
                b'$' => {
                    text.push('$');
                    i += 1;
                }
                b'(' => match input[i + 2..].find(')') {
                    Some(end) => {
                        let name = &input[i + 2..i + 2 + end];
                        match lookup(name) {
                            Some(Binding::Known(v)) => text.push_str(&v),
                            Some(Binding::Runtime) => {
                                if !text.is_empty() {
                                    out.push(Piece::Text(std::mem::take(&mut text)));
                                }
                                out.push(Piece::Var(name.to_string()));
                            }
                            None => {
                                text.push_str("$(");
                                text.push_str(name);
                                text.push(')');
                            }
                        }
                        i += 2 + end;
                    }
                    None => {
                        text.push_str("$(");
                        i += 1;
                    }
                },
                c => {
                    text.push('$');
                    // Multi-byte characters: copy the whole character, not one byte.
                    let ch = input[i + 1..].chars().next().unwrap_or(c as char);
                    text.push(ch);
                    i += ch.len_utf8();
                }
            }
            checkpoint = i + 1;
        }
        i += 1;
    }
    text.push_str(&input[checkpoint.min(input.len())..]);
    if !text.is_empty() || out.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

/// The environment of one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerEnv {
    /// `Environment=` pairs, in order.
    pub static_env: Vec<(String, String)>,
    /// The runtime part, when there is one.
    pub file: Option<EnvFilePlan>,
    bindings: BTreeMap<String, Binding>,
    /// envFrom may bind any name at start: unknown `$(NAME)`s are then runtime references.
    open: bool,
    /// The Services' variables are set at start (cluster mode): unknown `$(NAME)`s of their
    /// shape are runtime references.
    services: bool,
}

impl ContainerEnv {
    fn lookup(&self, name: &str) -> Option<Binding> {
        match self.bindings.get(name) {
            Some(b) => Some(b.clone()),
            None if self.open => Some(Binding::Runtime),
            // A Service's variable, set at start; `$(date)` in a shell command stays as written.
            None if self.services && super::service_env::may_be_service_var(name) => {
                Some(Binding::Runtime)
            }
            None => None,
        }
    }

    /// A command-line argument after `$(VAR)` expansion.
    pub fn expand_arg(&self, s: &str) -> Arg {
        Arg(expand(s, &|n| self.lookup(n)))
    }
}

/// Builds a container's environment. `path` is `spec.containers[i]`, for faults.
pub fn container_env(
    pod: &Pod,
    ctr: &Container,
    node: &NodeFacts,
    env_file: &str,
    path: &str,
) -> Result<ContainerEnv, Fault> {
    let mut entries: Vec<EnvEntry> = Vec::new();
    let mut runtime = false;
    let mut env = ContainerEnv::default();
    if node.service_env {
        // Known only at start (the kubelet's expansion looks in them last).
        entries.push(EnvEntry::Services {
            links: pod
                .spec
                .as_ref()
                .and_then(|s| s.enable_service_links)
                .unwrap_or(true),
        });
        runtime = true;
        env.services = true;
    }
    for ef in ctr.env_from.as_deref().unwrap_or_default() {
        let prefix = ef.prefix.clone().unwrap_or_default();
        let (secret, name, optional) = match (&ef.config_map_ref, &ef.secret_ref) {
            (Some(c), _) => (false, c.name.clone(), c.optional.unwrap_or(false)),
            (None, Some(s)) => (true, s.name.clone(), s.optional.unwrap_or(false)),
            (None, None) => continue,
        };
        entries.push(EnvEntry::All {
            secret,
            object: name,
            prefix,
            optional,
        });
        runtime = true;
        env.open = true;
    }
    let mut last: BTreeMap<&str, bool> = BTreeMap::new(); // name -> final definition is static
    for (i, e) in ctr.env.as_deref().unwrap_or_default().iter().enumerate() {
        let ep = crate::common::text::item(&[path, ".env"], i);
        let (binding, entry) = resolve_var(pod, ctr, node, e, &env, &ep)?;
        if binding == Binding::Runtime {
            runtime = true;
        }
        last.insert(&e.name, binding != Binding::Runtime);
        env.bindings.insert(e.name.clone(), binding);
        entries.push(entry);
    }
    let mut seen = std::collections::BTreeSet::new();
    for e in ctr.env.as_deref().unwrap_or_default().iter().rev() {
        if last.get(e.name.as_str()) == Some(&true)
            && seen.insert(e.name.as_str())
            && let Some(Binding::Known(v)) = env.bindings.get(&e.name)
        {
            env.static_env.push((e.name.clone(), v.clone()));
        }
    }
    env.static_env.reverse();
    if runtime {
        let overridden = last
            .iter()
            .filter(|(_, s)| **s)
            .map(|(n, _)| n.to_string())
            .collect();
        env.file = Some(EnvFilePlan {
            container: ctr.name.clone(),
            path: env_file.to_string(),
            entries,
            overridden,
        });
    }
    Ok(env)
}

fn resolve_var(
    pod: &Pod,
    ctr: &Container,
    node: &NodeFacts,
    e: &EnvVar,
    env: &ContainerEnv,
    path: &str,
) -> Result<(Binding, EnvEntry), Fault> {
    let name = e.name.clone();
    let Some(vf) = &e.value_from else {
        let raw = e.value.as_deref().unwrap_or_default();
        let pieces = expand(raw, &|n| env.lookup(n));
        return Ok(match pieces.as_slice() {
            [Piece::Text(t)] => (
                Binding::Known(t.clone()),
                EnvEntry::Value {
                    name,
                    value: t.clone(),
                },
            ),
            _ => (
                Binding::Runtime,
                EnvEntry::Template {
                    name,
                    template: raw.to_string(),
                },
            ),
        });
    };
    if let Some(f) = &vf.field_ref {
        return match field_ref_supported(&f.field_path) {
            Some(true) => {
                let v = field_value(pod, node, &f.field_path).unwrap_or_default();
                Ok((
                    Binding::Known(v.clone()),
                    EnvEntry::Value { name, value: v },
                ))
            }
            Some(false) => Ok((
                Binding::Runtime,
                match f.field_path.as_str() {
                    "status.podIP" => EnvEntry::PodIp { name, all: false },
                    "status.podIPs" => EnvEntry::PodIp { name, all: true },
                    _ => EnvEntry::HostIp { name },
                },
            )),
            None => Err(Fault::new(
                format!("{path}.valueFrom.fieldRef.fieldPath"),
                format!("{:?} is not a supported field", f.field_path),
            )),
        };
    }
    if let Some(r) = &vf.resource_field_ref {
        if let Some(c) = r.container_name.as_deref()
            && !c.is_empty()
            && c != ctr.name
        {
            return Err(Fault::new(
                format!("{path}.valueFrom.resourceFieldRef.containerName"),
                "only the container's own resources can be referenced",
            ));
        }
        let v = resource_value(
            ctr,
            node,
            &r.resource,
            r.divisor.as_ref().map(|d| d.0.as_str()),
        )
        .map_err(|m| Fault::new(format!("{path}.valueFrom.resourceFieldRef"), m))?;
        return Ok((
            Binding::Known(v.clone()),
            EnvEntry::Value { name, value: v },
        ));
    }
    if let Some(k) = &vf.config_map_key_ref {
        let entry = EnvEntry::Key {
            name,
            secret: false,
            object: k.name.clone(),
            key: k.key.clone(),
            optional: k.optional.unwrap_or(false),
        };
        return Ok((Binding::Runtime, entry));
    }
    if let Some(k) = &vf.secret_key_ref {
        let entry = EnvEntry::Key {
            name,
            secret: true,
            object: k.name.clone(),
            key: k.key.clone(),
            optional: k.optional.unwrap_or(false),
        };
        return Ok((Binding::Runtime, entry));
    }
    Err(Fault::new(
        format!("{path}.valueFrom"),
        "no supported source",
    ))
}

/// Expansion where every bound value is known (start time, in `pod-prepare`).
pub fn expand_known(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    expand(input, &|n| lookup(n).map(Binding::Known))
        .into_iter()
        .map(|p| match p {
            Piece::Text(t) => t,
            Piece::Var(v) => format!("$({v})"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<Binding> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        move |n| m.get(n).cloned().map(Binding::Known)
    }

    #[test]
    fn kubernetes_expansion_rules() {
        let l = known(&[("A", "x"), ("B", "$(A)")]);
        let t = |s: &str| expand(s, &l);
        assert_eq!(t("$(A)-$(A)"), vec![Piece::Text("x-x".into())]);
        assert_eq!(t("$$(A)"), vec![Piece::Text("$(A)".into())]);
        assert_eq!(t("$(C)"), vec![Piece::Text("$(C)".into())]);
        assert_eq!(t("$(A"), vec![Piece::Text("$(A".into())]);
        assert_eq!(t("a$b$"), vec![Piece::Text("a$b$".into())]);
        assert_eq!(t("$é"), vec![Piece::Text("$é".into())]);
        assert_eq!(
            t("$(B)"),
            vec![Piece::Text("$(A)".into())],
            "values are not expanded twice"
        );
        assert_eq!(t(""), vec![Piece::Text(String::new())]);
        let r = |n: &str| {
            if n == "S" {
                Some(Binding::Runtime)
            } else {
                None
            }
        };
        assert_eq!(
            expand("pre$(S)post", &r),
            vec![
                Piece::Text("pre".into()),
                Piece::Var("S".into()),
                Piece::Text("post".into())
            ]
        );
    }

    #[test]
    fn services_env_makes_unknown_names_runtime_but_not_shell_substitutions() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "team-a"},
            "spec": {"enableServiceLinks": false, "containers": [{"name": "c"}]}
        }))
        .unwrap();
        let ctr: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "env": [{"name": "OWN", "value": "mine"}]
        }))
        .unwrap();
        let node = NodeFacts {
            service_env: true,
            ..NodeFacts::default()
        };
        let env = container_env(&pod, &ctr, &node, "/run/x.env", "spec.containers[0]").unwrap();
        let file = env
            .file
            .as_ref()
            .expect("an env file for the Services' variables");
        assert_eq!(file.entries[0], EnvEntry::Services { links: false });
        assert_eq!(file.overridden, ["OWN"], "the pod's own value wins");
        let arg = env.expand_arg("$(seq 3) $(hostname) $(DB_SERVICE_HOST) $(OWN) $(DB_PORT)");
        assert_eq!(
            arg.0,
            vec![
                Piece::Text("$(seq 3) $(hostname) ".into()),
                Piece::Var("DB_SERVICE_HOST".into()),
                Piece::Text(" mine ".into()),
                Piece::Var("DB_PORT".into()),
            ]
        );
        // Local mode: no file, nothing at runtime.
        let local = container_env(&pod, &ctr, &NodeFacts::default(), "/run/x.env", "p").unwrap();
        assert!(local.file.is_none());
        assert_eq!(
            local.expand_arg("$(DB_SERVICE_HOST)").0,
            vec![Piece::Text("$(DB_SERVICE_HOST)".into())]
        );
    }

    #[test]
    fn an_unset_request_is_the_limit_and_an_unset_limit_the_node() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "resources": {"limits": {"memory": "96Mi"}, "requests": {"cpu": "250m"}}
        }))
        .unwrap();
        let node = NodeFacts::default();
        let v = |r: &str, d: &str| resource_value(&c, &node, r, Some(d)).unwrap();
        assert_eq!(v("requests.memory", "1Mi"), "96");
        assert_eq!(v("requests.cpu", "1m"), "250");
        assert_eq!(v("limits.cpu", "1m"), node.cpu_millis.to_string());
    }
}
