//! Authorization: the admin may do anything; a node gets what the Node authorizer (with
//! AuthorizeNodeWithSelectors) and the NodeRestriction admission plugin allow; anyone else only
//! discovery.

use crate::auth::User;
use crate::http::Request;
use crate::refs::pod_refs;
use crate::resources::{self, Resource};
use crate::router::Target;
use crate::selector::FieldSelector;
use crate::status::{ApiError, ApiResult};
use crate::store::Inner;
use serde_json::Value;

pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The HTTP method and target as an authorization verb.
pub fn verb(req: &Request, t: &Target) -> &'static str {
    match (req.method.as_str(), t.name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if req.flag("watch") => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

fn denied(user: &User, verb: &str, t: &Target, why: &str) -> ApiError {
    let resource = match &t.sub {
        Some(s) => format!("{}/{}", t.res.plural, s),
        None => t.res.plural.to_string(),
    };
    let scope = match &t.ns {
        Some(ns) if t.res.namespaced => format!("in the namespace \"{ns}\""),
        _ => "at the cluster scope".to_string(),
    };
    let mut msg = format!(
        "User \"{}\" cannot {verb} resource \"{resource}\" in API group \"{}\" {scope}",
        user.name, t.res.group
    );
    if !why.is_empty() {
        msg.push_str(": ");
        msg.push_str(why);
    }
    ApiError::forbidden(t.res, t.name.as_deref().unwrap_or_default(), msg)
}

fn bound_to(pod: &Value, node: &str) -> bool {
    pod["spec"]["nodeName"].as_str() == Some(node)
}

/// Whether a pod bound to `node` in `ns` refers to object `name` of `res`.
fn referenced(inner: &Inner, node: &str, res: &Resource, ns: &str, name: &str) -> bool {
    inner.all(&resources::PODS).any(|p| {
        if !bound_to(p, node) || p["metadata"]["namespace"].as_str() != Some(ns) {
            return false;
        }
        let r = pod_refs(p);
        match res.plural {
            "configmaps" => r.configmaps.iter().any(|c| c == name),
            "secrets" => r.secrets.iter().any(|s| s == name),
            "serviceaccounts" => r.service_account.as_deref() == Some(name),
            _ => false,
        }
    })
}

fn body(req: &Request) -> Value {
    serde_json::from_slice(&req.body).unwrap_or(Value::Null)
}

pub fn authorize(inner: &Inner, user: &User, req: &Request, t: &Target) -> ApiResult<()> {
    if user.is_admin() {
        return Ok(());
    }
    let verb = verb(req, t);
    let Some(node) = user.node_name() else {
        return Err(denied(user, verb, t, ""));
    };
    let ns = t.ns.as_deref().unwrap_or_default();
    let name = t.name.as_deref().unwrap_or_default();
    let selector = |path: &str| -> Option<String> {
        let fs =
            FieldSelector::parse(t.res, req.param("fieldSelector").unwrap_or_default()).ok()?;
        fs.required(path).map(str::to_string)
    };
    let no_relation = format!("no relationship found between node '{node}' and this object");
    let result: Result<(), String> = match (t.res.plural, t.sub.as_deref(), verb) {
        ("pods", None, "list" | "watch") => match selector("spec.nodeName") {
            Some(n) if n == node => Ok(()),
            _ => Err(format!(
                "can only list/watch pods with spec.nodeName field selector set to '{node}'"
            )),
        },
        // Reading goes by the authorizer's graph: a pod that is not bound here (or not there at
        // all) is forbidden.
        ("pods", None | Some("status"), "get") => match inner.get(t.res, ns, name) {
            Some(p) if bound_to(&p, node) => Ok(()),
            _ => Err(no_relation.clone()),
        },
        // Deleting and status writes are NodeRestriction's: only pods bound here; a pod that is
        // gone already gets its 404 from the handler, as the kubelet expects.
        ("pods", None, "delete") | ("pods", Some("status"), "update" | "patch") => {
            match inner.get(t.res, ns, name) {
                Some(p) if !bound_to(&p, node) => Err(format!(
                    "node \"{node}\" can only {} pods with spec.nodeName set to itself",
                    if verb == "delete" {
                        "delete"
                    } else {
                        "update status of"
                    }
                )),
                _ => Ok(()),
            }
        }
        ("pods", None, "create") => Ok(()), // NodeRestriction checks the body at admission.
        ("nodes", None | Some("status"), "get" | "update" | "patch" | "delete") if name == node => {
            Ok(())
        }
        ("nodes", None, "create") => Ok(()), // the body's name is checked at admission.
        ("nodes", None, "list" | "watch") => match selector("metadata.name") {
            Some(n) if n == node => Ok(()),
            _ => Err(format!(
                "can only list/watch nodes with metadata.name field selector set to '{node}'"
            )),
        },
        ("leases", None, "get" | "update" | "patch" | "delete")
            if ns == NODE_LEASE_NAMESPACE && name == node =>
        {
            Ok(())
        }
        ("leases", None, "create") if ns == NODE_LEASE_NAMESPACE => Ok(()),
        ("events", None, "create" | "update" | "patch") => Ok(()),
        ("configmaps" | "secrets" | "serviceaccounts", None, "get") => {
            if referenced(inner, node, t.res, ns, name) {
                Ok(())
            } else {
                Err(no_relation.clone())
            }
        }
        ("configmaps" | "secrets" | "serviceaccounts", None, "list" | "watch") => {
            match selector("metadata.name") {
                Some(n) if t.ns.is_some() && referenced(inner, node, t.res, ns, &n) => Ok(()),
                Some(_) => Err(no_relation.clone()),
                None => Err(format!(
                    "can only list/watch {} with a metadata.name field selector",
                    t.res.plural
                )),
            }
        }
        // system:node reads every Service, for the containers' environment.
        ("services", None, "get" | "list" | "watch") => Ok(()),
        ("serviceaccounts", Some("token"), "create") => {
            token_request_allowed(inner, node, ns, name, &body(req))
        }
        _ => Err(String::new()),
    };
    result.map_err(|why| denied(user, verb, t, &why))
}

/// The Node authorizer and NodeRestriction on a TokenRequest: the account must be used by a pod on
/// this node, and the token must be bound to such a pod.
fn token_request_allowed(
    inner: &Inner,
    node: &str,
    ns: &str,
    sa: &str,
    body: &Value,
) -> Result<(), String> {
    if !referenced(inner, node, &resources::SERVICEACCOUNTS, ns, sa) {
        return Err(format!(
            "no relationship found between node '{node}' and this object"
        ));
    }
    let r = &body["spec"]["boundObjectRef"];
    if r["kind"].as_str() != Some("Pod") {
        return Err("node requested token not bound to a pod".to_string());
    }
    let pod = inner.get(&resources::PODS, ns, r["name"].as_str().unwrap_or_default());
    match pod {
        Some(p) if bound_to(&p, node) => {
            let uid = r["uid"].as_str().unwrap_or_default();
            if !uid.is_empty() && p["metadata"]["uid"].as_str() != Some(uid) {
                Err("the UID in the bound object reference does not match the pod".to_string())
            } else {
                Ok(())
            }
        }
        _ => Err("node requested token bound to a pod scheduled on a different node".to_string()),
    }
}

/// NodeRestriction on objects a node creates: only mirror pods of its own, its own Node and Lease.
pub fn node_may_create(inner: &Inner, user: &User, res: &Resource, obj: &Value) -> ApiResult<()> {
    let Some(node) = user.node_name() else {
        return Ok(());
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let refuse = |why: String| Err(ApiError::forbidden(res, name, why));
    match res.plural {
        "pods" => {
            if !crate::admission::is_mirror(obj) {
                return refuse(format!(
                    "pod does not have \"{}\" annotation, node \"{node}\" can only create mirror pods",
                    crate::admission::MIRROR_ANNOTATION
                ));
            }
            if obj["spec"]["nodeName"].as_str() != Some(node) {
                return refuse(format!(
                    "node \"{node}\" can only create pods with spec.nodeName set to itself"
                ));
            }
            let refs = obj["metadata"]["ownerReferences"].as_array();
            if let Some(why) = refs.and_then(|r| mirror_owner_refusal(inner, node, r)) {
                return refuse(why);
            }
            Ok(())
        }
        "nodes" if name != node => refuse(format!(
            "node \"{node}\" is not allowed to modify node \"{name}\""
        )),
        "nodes" => {
            let bad: Vec<&String> = obj["metadata"]["labels"]
                .as_object()
                .map(|l| {
                    l.keys()
                        .filter(|k| k.starts_with("node-restriction.kubernetes.io/"))
                        .collect()
                })
                .unwrap_or_default();
            if bad.is_empty() {
                Ok(())
            } else {
                refuse(format!(
                    "is not allowed to set the following labels: {bad:?}"
                ))
            }
        }
        "leases" if name != node => refuse(
            "can only access node lease with the same name as the requesting node".to_string(),
        ),
        _ => Ok(()),
    }
}

/// NodeRestriction on a mirror pod's owner references: none, or exactly one, a controller
/// reference to this node (with its uid) that does not block owner deletion.
fn mirror_owner_refusal(inner: &Inner, node: &str, refs: &[Value]) -> Option<String> {
    match refs {
        [] => None,
        [r] => {
            if r["apiVersion"] != "v1" || r["kind"] != "Node" || r["name"] != node {
                return Some(format!(
                    "node \"{node}\" can only create pods with an owner reference set to itself"
                ));
            }
            if r["controller"] != Value::Bool(true) {
                return Some(format!(
                    "node \"{node}\" can only create pods with a controller owner reference set to itself"
                ));
            }
            if r["blockOwnerDeletion"] == Value::Bool(true) {
                return Some(format!(
                    "node \"{node}\" must not set blockOwnerDeletion on an owner reference"
                ));
            }
            let uid = inner
                .get(&resources::NODES, "", node)
                .map(|n| n["metadata"]["uid"].clone());
            if uid.as_ref() != Some(&r["uid"]) {
                return Some(format!(
                    "the UID of node \"{node}\" does not match the owner reference"
                ));
            }
            None
        }
        _ => Some(format!(
            "node \"{node}\" can only create pods with a single owner reference set to itself"
        )),
    }
}
