//! Request handling: authentication, authorization, admission, and the REST verbs on the store.

use crate::admission;
use crate::auth::{API_AUDIENCE, Auth, Credential, User};
use crate::authz;
use crate::http::Request;
use crate::patch;
use crate::resources::{self, Resource};
use crate::router::{Route, Target, route};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult, success_status};
use crate::store::{Change, Inner, Store, WatchSpec};
use crate::util::{is_dns_subdomain, now_secs, random_suffix, rfc3339, uuid};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Namespaces every cluster starts with.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// A failure the server can be told to answer every request with, to test a client's back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 503 ServiceUnavailable (with Retry-After), as a server that is starting or overloaded.
    Unavailable,
    /// 429 TooManyRequests (with Retry-After), as API Priority and Fairness throttling.
    TooManyRequests,
}

pub struct Api {
    pub fault: std::sync::Mutex<Option<Fault>>,
    pub store: Store,
    pub auth: Auth,
    pub audit: crate::audit::Audit,
    pub ca_pem: String,
    pub watch_timeout: Duration,
    pub bookmark_interval: Duration,
    /// Shortest TokenRequest lifetime accepted (600 s on a real server; lower only in tests).
    pub min_token_expiration_seconds: i64,
}

pub enum Reply {
    Json(u16, Value),
    Text(u16, String),
    Watch(WatchPlan),
}

pub struct WatchPlan {
    pub spec: WatchSpec,
    pub from: Option<u64>,
    pub bookmarks: bool,
    pub timeout: Duration,
    /// sendInitialEvents=true: a bookmark annotated `k8s.io/initial-events-end` follows the state.
    pub initial_events_end: bool,
}

impl From<ApiError> for Reply {
    fn from(e: ApiError) -> Reply {
        Reply::Json(e.code, e.to_status())
    }
}

fn meta<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

/// Writes `obj` with kind and apiVersion, as single objects and watch events carry them.
fn with_type(res: &Resource, obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        m.insert("kind".into(), json!(res.kind));
        m.insert("apiVersion".into(), json!(res.api_version()));
    }
}

fn typed_check(res: &Resource, obj: &Value) -> ApiResult<()> {
    use k8s_openapi::api::{coordination::v1 as coord, core::v1 as core};
    let v = obj.clone();
    let r = match res.plural {
        "pods" => serde_json::from_value::<core::Pod>(v).map(drop),
        "nodes" => serde_json::from_value::<core::Node>(v).map(drop),
        "namespaces" => serde_json::from_value::<core::Namespace>(v).map(drop),
        "events" => serde_json::from_value::<core::Event>(v).map(drop),
        "configmaps" => serde_json::from_value::<core::ConfigMap>(v).map(drop),
        "secrets" => serde_json::from_value::<core::Secret>(v).map(drop),
        "serviceaccounts" => serde_json::from_value::<core::ServiceAccount>(v).map(drop),
        "services" => serde_json::from_value::<core::Service>(v).map(drop),
        "leases" => serde_json::from_value::<coord::Lease>(v).map(drop),
        _ => Ok(()),
    };
    r.map_err(|e| {
        ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            res.kind, res.version, res.kind
        ))
    })
}

/// Secret.stringData is write-only: it is merged into data, base64-encoded.
fn fold_string_data(obj: &mut Value) {
    use base64::Engine;
    let Some(sd) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return;
    };
    let data = obj
        .as_object_mut()
        .map(|m| m.entry("data").or_insert(json!({})));
    if let (Some(Value::Object(data)), Value::Object(sd)) = (data, sd) {
        for (k, v) in sd {
            let s = v.as_str().unwrap_or_default();
            data.insert(
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(s)),
            );
        }
    }
}

impl Api {
    pub fn new(store: Store, auth: Auth, ca_pem: String) -> Api {
        Api {
            fault: std::sync::Mutex::new(None),
            store,
            auth,
            audit: crate::audit::Audit::default(),
            ca_pem,
            watch_timeout: Duration::from_secs(1800),
            bookmark_interval: Duration::from_secs(60),
            min_token_expiration_seconds: 600,
        }
    }

    /// Creates the namespaces every cluster has, with their default ServiceAccount and root CA
    /// ConfigMap, where missing.
    pub fn bootstrap(&self) {
        self.store.write(|inner| {
            for ns in SYSTEM_NAMESPACES {
                if inner.get(&resources::NAMESPACES, "", ns).is_none() {
                    let obj = json!({"metadata": {"name": ns}});
                    let _ = self.create_object(inner, &resources::NAMESPACES, "", obj);
                }
            }
        });
    }

    /// Answers one request and records it in the audit log.
    pub fn handle(&self, req: &Request, peer_cert: Option<&[u8]>) -> Reply {
        let received_us = crate::util::now_micros();
        let (reply, user) = self.answer(req, peer_cert);
        let code = match &reply {
            Reply::Json(c, _) | Reply::Text(c, _) => *c,
            Reply::Watch(_) => 200,
        };
        let resource_version = match &reply {
            Reply::Json(_, v) => v["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            _ => String::new(),
        };
        let query: Vec<String> = req.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.audit.record(crate::audit::Record {
            time: received_us / 1_000_000,
            time_us: received_us,
            method: req.method.clone(),
            path: req.path.clone(),
            query: query.join("&"),
            user: user.map(|u| u.name).unwrap_or_default(),
            code,
            resource_version,
        });
        reply
    }

    fn answer(&self, req: &Request, peer_cert: Option<&[u8]>) -> (Reply, Option<User>) {
        let user = self.authenticate(req, peer_cert);
        match *self.fault.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(Fault::Unavailable) => return (ApiError::unavailable().into(), user),
            Some(Fault::TooManyRequests) => return (ApiError::too_many_requests().into(), user),
            None => {}
        }
        match route(&req.path) {
            Route::Health => return (Reply::Text(200, "ok".into()), user),
            Route::Version => return (Reply::Json(200, version()), user),
            _ => {}
        }
        let Some(user) = user else {
            return (ApiError::unauthorized().into(), None);
        };
        let reply = match route(&req.path) {
            Route::Discovery(path) => match discovery(&path) {
                Some(v) => Reply::Json(200, v),
                None => ApiError::path_not_found().into(),
            },
            Route::Api(t) => self.api(&user, req, &t).unwrap_or_else(Reply::from),
            _ => ApiError::path_not_found().into(),
        };
        (reply, Some(user))
    }

    fn authenticate(&self, req: &Request, peer_cert: Option<&[u8]>) -> Option<User> {
        if let Some(h) = req.header("authorization") {
            let token = h
                .strip_prefix("Bearer ")
                .or(h.strip_prefix("bearer "))?
                .trim();
            return match self.auth.authenticate_token(token)? {
                Credential::User(u) => Some(u),
                Credential::ServiceAccount(claims) => {
                    let k = &claims["kubernetes.io"];
                    let ns = k["namespace"].as_str()?;
                    if let Some(pod) = k.get("pod") {
                        // A bound token dies with its pod.
                        let inner = self.store.lock();
                        let p = inner.get(&resources::PODS, ns, pod["name"].as_str()?)?;
                        if p["metadata"]["uid"] != pod["uid"] {
                            return None;
                        }
                    }
                    Some(User::service_account(
                        ns,
                        k["serviceaccount"]["name"].as_str()?,
                    ))
                }
            };
        }
        peer_cert.and_then(|der| self.auth.cert_user(der))
    }

    fn api(&self, user: &User, req: &Request, t: &Target) -> ApiResult<Reply> {
        authz::authorize(&self.store.lock(), user, req, t)?;
        let name = t.name.as_deref().unwrap_or_default();
        let ns = t.ns.as_deref().unwrap_or_default();
        match (req.method.as_str(), t.name.is_some(), t.sub.as_deref()) {
            ("GET", false, None) if req.flag("watch") => self.watch(req, t),
            ("GET", false, None) => self.list(req, t),
            ("GET", true, None | Some("status")) => {
                let obj = self.store.lock().get(t.res, ns, name);
                obj.map(|o| Reply::Json(200, (*o).clone()))
                    .ok_or_else(|| ApiError::not_found(t.res, name))
            }
            ("POST", false, None) => self.create(user, req, t),
            ("POST", true, Some("token")) if t.res.plural == "serviceaccounts" => {
                self.token_request(req, ns, name)
            }
            ("POST", true, Some("binding")) if t.res.plural == "pods" => self.bind(req, ns, name),
            ("PUT", true, sub @ (None | Some("status"))) => {
                let body = parse_body(req)?;
                self.update(t, sub.is_some(), |_| Ok(body))
            }
            ("PATCH", true, sub @ (None | Some("status"))) => {
                let body = parse_body(req)?;
                let ct = req.header("content-type").unwrap_or_default();
                let ct = ct.split(';').next().unwrap_or_default().trim().to_string();
                self.update(t, sub.is_some(), move |cur| {
                    let mut obj = cur.clone();
                    match ct.as_str() {
                        "application/merge-patch+json" => patch::merge_patch(&mut obj, &body),
                        "application/strategic-merge-patch+json" => {
                            patch::strategic_merge_patch(&mut obj, &body)?
                        }
                        "application/json-patch+json" => patch::json_patch(&mut obj, &body)?,
                        other => return Err(ApiError::unsupported_media_type(other)),
                    }
                    Ok(obj)
                })
            }
            ("DELETE", true, None) => self.delete(req, t),
            ("GET" | "POST" | "PUT" | "PATCH" | "DELETE", _, Some(_)) => {
                Err(ApiError::path_not_found())
            }
            (m, _, _) => Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({m})"
            ))),
        }
    }

    fn selectors(req: &Request, t: &Target) -> ApiResult<WatchSpec> {
        Ok(WatchSpec {
            res: t.res,
            namespace: t.ns.clone().filter(|_| t.res.namespaced),
            fields: FieldSelector::parse(t.res, req.param("fieldSelector").unwrap_or_default())?,
            labels: LabelSelector::parse(req.param("labelSelector").unwrap_or_default())?,
        })
    }

    /// A list is served from the current state (limit is ignored: never a continue token), and
    /// its resourceVersion is the store's, from which a watch carries on without a gap.
    fn list(&self, req: &Request, t: &Target) -> ApiResult<Reply> {
        let spec = Self::selectors(req, t)?;
        let inner = self.store.lock();
        let items: Vec<Value> = inner
            .list(&spec)
            .into_iter()
            .map(|o| {
                let mut o = (*o).clone();
                if let Some(m) = o.as_object_mut() {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                o
            })
            .collect();
        Ok(Reply::Json(
            200,
            json!({
                "kind": t.res.list_kind(),
                "apiVersion": t.res.api_version(),
                "metadata": {"resourceVersion": inner.rv().to_string()},
                "items": items,
            }),
        ))
    }

    fn watch(&self, req: &Request, t: &Target) -> ApiResult<Reply> {
        let spec = Self::selectors(req, t)?;
        let from = match req.param("resourceVersion") {
            None | Some("") | Some("0") => None,
            Some(s) => Some(s.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion: Invalid value: {s:?}"))
            })?),
        };
        let initial = req.flag("sendInitialEvents");
        // As in the API server, 0 (like none) means the server's default.
        let timeout = match req.param("timeoutSeconds") {
            Some(s) => s
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request("invalid timeoutSeconds"))?,
            None => 0,
        };
        let timeout = match timeout {
            0 => self.watch_timeout,
            t => Duration::from_secs(t),
        };
        Ok(Reply::Watch(WatchPlan {
            spec,
            from: if initial { None } else { from },
            bookmarks: req.flag("allowWatchBookmarks"),
            timeout,
            initial_events_end: initial,
        }))
    }

    fn create(&self, user: &User, req: &Request, t: &Target) -> ApiResult<Reply> {
        let mut obj = parse_body(req)?;
        let ns = t.ns.clone().unwrap_or_default();
        if t.res.namespaced && t.ns.is_none() {
            return Err(ApiError::method_not_allowed(
                "create of a namespaced resource needs a namespace in the path",
            ));
        }
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        // generateName, as the API server does it.
        if meta(&obj, "name").is_empty() && !meta(&obj, "generateName").is_empty() {
            let name = format!("{}{}", meta(&obj, "generateName"), random_suffix(5));
            obj["metadata"]["name"] = json!(name);
        }
        let reply = self.store.write(|inner| -> ApiResult<Value> {
            authz::node_may_create(inner, user, t.res, &obj)?;
            // The NamespaceLifecycle plugin runs before the others.
            if t.res.namespaced && inner.get(&resources::NAMESPACES, "", &ns).is_none() {
                return Err(ApiError::not_found(&resources::NAMESPACES, &ns));
            }
            if t.res.plural == "pods" {
                self.admit_pod(inner, &mut obj, &ns)?;
            }
            let created = self.create_object(inner, t.res, &ns, obj)?;
            Ok((*created).clone())
        })?;
        Ok(Reply::Json(201, reply))
    }

    /// The ServiceAccount admission plugin: mirror pods may not use API objects; others get their
    /// account defaulted and, unless automount is off, the kube-api-access volume.
    fn admit_pod(&self, inner: &Inner, pod: &mut Value, ns: &str) -> ApiResult<()> {
        let name = meta(pod, "name").to_string();
        if admission::is_mirror(pod) {
            if let Some(why) = admission::mirror_pod_refusal(pod) {
                return Err(ApiError::forbidden(&resources::PODS, &name, why));
            }
            return Ok(());
        }
        if pod.get("spec").is_none_or(|s| !s.is_object()) {
            return Ok(()); // validation reports it.
        }
        let sa = admission::default_service_account(pod);
        let Some(account) = inner.get(&resources::SERVICEACCOUNTS, ns, &sa) else {
            return Err(ApiError::forbidden(
                &resources::PODS,
                &name,
                format!(
                    "error looking up service account {ns}/{sa}: serviceaccount \"{sa}\" not found"
                ),
            ));
        };
        admission::mount_service_account(pod, &account);
        Ok(())
    }

    /// Validation, defaulting and storing of a new object; the namespace must exist.
    fn create_object(
        &self,
        inner: &mut Inner,
        res: &'static Resource,
        ns: &str,
        mut obj: Value,
    ) -> ApiResult<Arc<Value>> {
        let av = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        if (!av.is_empty() && av != res.api_version()) || (!kind.is_empty() && kind != res.kind) {
            return Err(ApiError::bad_request(format!(
                "the object provided is unrecognized (expected {} {}, got {av} {kind})",
                res.api_version(),
                res.kind
            )));
        }
        with_type(res, &mut obj);
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let name = meta(&obj, "name").to_string();
        if res.namespaced {
            let body_ns = meta(&obj, "namespace");
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            obj["metadata"]["namespace"] = json!(ns);
            if inner.get(&resources::NAMESPACES, "", ns).is_none() {
                return Err(ApiError::not_found(&resources::NAMESPACES, ns));
            }
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        if name.is_empty() {
            return Err(ApiError::invalid(
                res,
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
        if !is_dns_subdomain(&name) && res.plural != "events" {
            return Err(ApiError::invalid(
                res,
                &name,
                format!(
                    "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
                ),
            ));
        }
        typed_check(res, &obj)?;
        if inner.get(res, ns, &name).is_some() {
            return Err(ApiError::already_exists(res, &name));
        }
        match res.plural {
            "pods" => {
                let errs = admission::validate_pod(&obj);
                if !errs.is_empty() {
                    return Err(ApiError::invalid(res, &name, errs.join(", ")));
                }
                admission::default_pod(&mut obj);
            }
            "secrets" => {
                fold_string_data(&mut obj);
                if obj["type"].is_null() {
                    obj["type"] = json!("Opaque");
                }
            }
            "namespaces" => {
                obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
            }
            "events" => check_event(&obj, ns)?,
            _ => {}
        }
        let m = obj["metadata"]
            .as_object_mut()
            .expect("made an object above");
        for gone in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
        ] {
            m.remove(gone);
        }
        m.insert("uid".into(), json!(uuid()));
        m.insert("creationTimestamp".into(), json!(rfc3339(now_secs())));
        m.insert("generation".into(), json!(1));
        let stored = inner.commit(res, Change::Added, obj, None);
        if res.plural == "namespaces" {
            // What the ServiceAccount and root-CA controllers do for every namespace.
            let sa = json!({"metadata": {"name": "default"}});
            self.create_object(inner, &resources::SERVICEACCOUNTS, &name, sa)?;
            let cm = json!({
                "metadata": {"name": admission::ROOT_CA_CONFIGMAP, "annotations": {
                    "kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                "data": {"ca.crt": self.ca_pem},
            });
            self.create_object(inner, &resources::CONFIGMAPS, &name, cm)?;
        }
        Ok(stored)
    }

    /// PUT and PATCH: `make_new` turns the current object into the requested one. A status write
    /// takes only the status from it; a main-resource write of a resource with a status
    /// subresource keeps the old status. A stale metadata.resourceVersion is a 409 Conflict; a
    /// write that changes nothing stores nothing.
    fn update(
        &self,
        t: &Target,
        status: bool,
        make_new: impl FnOnce(&Value) -> ApiResult<Value>,
    ) -> ApiResult<Reply> {
        let (res, ns) = (t.res, t.ns.as_deref().unwrap_or_default());
        let name = t.name.as_deref().unwrap_or_default();
        if status && !res.status {
            return Err(ApiError::path_not_found());
        }
        self.store.write(|inner| {
            let old = inner
                .get(res, ns, name)
                .ok_or_else(|| ApiError::not_found(res, name))?;
            let mut req = make_new(&old)?;
            if !req.is_object() {
                return Err(ApiError::bad_request("the body must be a JSON object"));
            }
            // A uid in the body is a precondition (the kubelet puts one in its status patches).
            let uid = meta(&req, "uid");
            if !uid.is_empty() && uid != meta(&old, "uid") {
                let ns_part = if res.namespaced { format!("{ns}/") } else { String::new() };
                return Err(ApiError::conflict(res, name, &format!(
                    "StorageError: invalid object, Code: 4, Key: /registry/{}/{ns_part}{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    res.plural,
                    meta(&old, "uid")
                )));
            }
            let rv = meta(&req, "resourceVersion");
            if !rv.is_empty() && rv != meta(&old, "resourceVersion") {
                return Err(ApiError::stale(res, name));
            }
            let body_name = meta(&req, "name");
            if !body_name.is_empty() && body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            let mut new = if status {
                let mut n = (*old).clone();
                n["status"] = req.get("status").cloned().unwrap_or(json!({}));
                n
            } else {
                if res.status {
                    req["status"] = old.get("status").cloned().unwrap_or(Value::Null);
                    if req["status"].is_null() {
                        req.as_object_mut().map(|m| m.remove("status"));
                    }
                }
                if res.plural == "secrets" {
                    fold_string_data(&mut req);
                }
                req
            };
            with_type(res, &mut new);
            // Identity and lifecycle fields are the server's.
            if !new["metadata"].is_object() {
                new["metadata"] = json!({});
            }
            for f in ["name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "resourceVersion"] {
                match old["metadata"].get(f) {
                    Some(v) => new["metadata"][f] = v.clone(),
                    None => {
                        new["metadata"].as_object_mut().map(|m| m.remove(f));
                    }
                }
            }
            typed_check(res, &new)?;
            validate_update(res, &old, &new)?;
            if new == *old {
                return Ok(Reply::Json(200, (*old).clone()));
            }
            if strip_status_meta(&new) != strip_status_meta(&old) {
                bump_generation(&mut new);
            }
            let stored = inner.commit(res, Change::Modified, new, Some(old));
            Ok(Reply::Json(200, (*stored).clone()))
        })
    }

    /// DELETE: pods bound to a node are deleted gracefully (deletionTimestamp set, the kubelet
    /// finishes with gracePeriodSeconds=0); everything else goes at once. Preconditions on uid and
    /// resourceVersion are honoured.
    fn delete(&self, req: &Request, t: &Target) -> ApiResult<Reply> {
        let (res, ns) = (t.res, t.ns.as_deref().unwrap_or_default());
        let name = t.name.as_deref().unwrap_or_default();
        if res.plural == "namespaces" {
            return Err(ApiError::method_not_allowed(
                "namespace deletion is not implemented by this test double",
            ));
        }
        let opts = if req.body.is_empty() {
            json!({})
        } else {
            parse_body(req)?
        };
        let grace = match opts["gracePeriodSeconds"].as_i64() {
            Some(g) => Some(g),
            None => match req.param("gracePeriodSeconds") {
                Some(s) => Some(
                    s.parse::<i64>()
                        .map_err(|_| ApiError::bad_request("invalid gracePeriodSeconds"))?,
                ),
                None => None,
            },
        };
        self.store.write(|inner| {
            let old = inner.get(res, ns, name).ok_or_else(|| ApiError::not_found(res, name))?;
            let pre = &opts["preconditions"];
            if let Some(uid) = pre["uid"].as_str()
                && uid != meta(&old, "uid") {
                    return Err(ApiError::conflict(res, name, &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta(&old, "uid")
                    )));
                }
            if let Some(rv) = pre["resourceVersion"].as_str()
                && rv != meta(&old, "resourceVersion") {
                    return Err(ApiError::conflict(res, name, &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta(&old, "resourceVersion")
                    )));
                }
            if res.plural == "pods" {
                let grace = pod_grace(&old, grace);
                if grace > 0 {
                    let mut new = (*old).clone();
                    let current = old["metadata"]["deletionGracePeriodSeconds"].as_i64();
                    if current.is_some_and(|c| c <= grace) {
                        // Already terminating at least this fast: nothing to change.
                        return Ok(Reply::Json(200, (*old).clone()));
                    }
                    new["metadata"]["deletionTimestamp"] = json!(rfc3339(now_secs() + grace));
                    new["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                    bump_generation(&mut new);
                    let stored = inner.commit(res, Change::Modified, new, Some(old));
                    return Ok(Reply::Json(200, (*stored).clone()));
                }
            }
            let stored = inner.commit(res, Change::Deleted, (*old).clone(), Some(old.clone()));
            if res.plural == "pods" {
                Ok(Reply::Json(200, (*stored).clone()))
            } else {
                Ok(Reply::Json(200, success_status(res, name, meta(&old, "uid"))))
            }
        })
    }

    /// TokenRequest: a bound service-account token for the requested audiences and lifetime.
    fn token_request(&self, req: &Request, ns: &str, sa: &str) -> ApiResult<Reply> {
        let body = parse_body(req)?;
        let inner = self.store.lock();
        let account = inner
            .get(&resources::SERVICEACCOUNTS, ns, sa)
            .ok_or_else(|| ApiError::not_found(&resources::SERVICEACCOUNTS, sa))?;
        let spec = &body["spec"];
        let tr = Resource {
            plural: "serviceaccounts",
            kind: "TokenRequest.authentication.k8s.io",
            group: "",
            version: "v1",
            namespaced: true,
            status: false,
        };
        let expiration = spec["expirationSeconds"].as_i64().unwrap_or(3600);
        let min = self.min_token_expiration_seconds;
        if expiration < min {
            let shortest = if min == 600 {
                "10 minutes".to_string()
            } else {
                format!("{min} seconds (test setting)")
            };
            return Err(ApiError::invalid(
                &tr,
                sa,
                format!(
                    "spec.expirationSeconds: Invalid value: {expiration}: may not specify a duration less than {shortest}"
                ),
            ));
        }
        if expiration > 1 << 32 {
            return Err(ApiError::invalid(
                &tr,
                sa,
                format!(
                    "spec.expirationSeconds: Invalid value: {expiration}: may not specify a duration larger than 2^32 seconds"
                ),
            ));
        }
        let audiences = match spec["audiences"].as_array() {
            Some(a) if !a.is_empty() => a.clone(),
            _ => vec![json!(API_AUDIENCE)],
        };
        let now = now_secs();
        let mut k8s = json!({
            "namespace": ns,
            "serviceaccount": {"name": sa, "uid": meta(&account, "uid")},
        });
        let bound = &spec["boundObjectRef"];
        if !bound.is_null() {
            let bname = bound["name"].as_str().unwrap_or_default();
            match bound["kind"].as_str() {
                Some("Pod") => {
                    let pod = inner
                        .get(&resources::PODS, ns, bname)
                        .ok_or_else(|| ApiError::not_found(&resources::PODS, bname))?;
                    let uid = bound["uid"].as_str().unwrap_or_default();
                    if !uid.is_empty() && uid != meta(&pod, "uid") {
                        return Err(ApiError::conflict(
                            &resources::PODS,
                            bname,
                            &format!(
                                "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
                            ),
                        ));
                    }
                    if pod["spec"]["serviceAccountName"].as_str() != Some(sa) {
                        return Err(ApiError::bad_request(format!(
                            "cannot bind token for serviceaccount {sa:?} to pod running with different serviceaccount name."
                        )));
                    }
                    k8s["pod"] = json!({"name": bname, "uid": meta(&pod, "uid")});
                    if let Some(node) = pod["spec"]["nodeName"].as_str()
                        && let Some(n) = inner.get(&resources::NODES, "", node)
                    {
                        k8s["node"] = json!({"name": node, "uid": meta(&n, "uid")});
                    }
                }
                other => {
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token to object of kind {other:?}: this test double binds tokens to pods only"
                    )));
                }
            }
        }
        drop(inner);
        let claims = json!({
            "aud": audiences,
            "exp": now + expiration,
            "iat": now,
            "nbf": now,
            "iss": API_AUDIENCE,
            "jti": uuid(),
            "kubernetes.io": k8s,
            "sub": format!("system:serviceaccount:{ns}:{sa}"),
        });
        let token = self.auth.sign_jwt(&claims);
        let mut out_spec = json!({"audiences": audiences, "expirationSeconds": expiration});
        if !bound.is_null() {
            out_spec["boundObjectRef"] = bound.clone();
        }
        Ok(Reply::Json(
            201,
            json!({
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": sa, "namespace": ns, "creationTimestamp": null},
                "spec": out_spec,
                "status": {"token": token, "expirationTimestamp": rfc3339(now + expiration)},
            }),
        ))
    }

    /// pods/binding, the scheduler's way to put a pod on a node.
    fn bind(&self, req: &Request, ns: &str, name: &str) -> ApiResult<Reply> {
        let body = parse_body(req)?;
        let node = body["target"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if node.is_empty() {
            return Err(ApiError::invalid(
                &resources::PODS,
                name,
                "target.name: Required value",
            ));
        }
        self.store.write(|inner| {
            let res = &resources::PODS;
            let old = inner.get(res, ns, name).ok_or_else(|| ApiError::not_found(res, name))?;
            if let Some(cur) = old["spec"]["nodeName"].as_str().filter(|s| !s.is_empty()) {
                return Err(ApiError::conflict(res, name, &format!("pod {name} is already assigned to node {cur:?}")));
            }
            let mut new = (*old).clone();
            new["spec"]["nodeName"] = json!(node);
            let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": rfc3339(now_secs())});
            let conds = new["status"].as_object_mut().map(|s| s.entry("conditions").or_insert(json!([])));
            if let Some(Value::Array(c)) = conds {
                c.retain(|c| c["type"] != "PodScheduled");
                c.push(cond);
            }
            inner.commit(res, Change::Modified, new, Some(old));
            Ok(Reply::Json(201, json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})))
        })
    }
}

fn parse_body(req: &Request) -> ApiResult<Value> {
    serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// The grace period of a pod deletion: asked for, else the pod's own; zero for pods that never
/// ran on a node or have finished (the registry's CheckGracefulDelete).
fn pod_grace(pod: &Value, asked: Option<i64>) -> i64 {
    let unbound = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty();
    let finished = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    if unbound || finished {
        return 0;
    }
    asked
        .or(pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30)
        .max(0)
}

fn bump_generation(obj: &mut Value) {
    let g = obj["metadata"]["generation"].as_i64().unwrap_or(0);
    obj["metadata"]["generation"] = json!(g + 1);
}

/// The object without metadata and status: what generation counts changes of.
fn strip_status_meta(obj: &Value) -> Map<String, Value> {
    let mut m = obj.as_object().cloned().unwrap_or_default();
    m.remove("metadata");
    m.remove("status");
    m
}

fn validate_update(res: &Resource, old: &Value, new: &Value) -> ApiResult<()> {
    let name = meta(old, "name");
    match res.plural {
        "pods" => {
            // Pod specs are immutable but for images, activeDeadlineSeconds and added tolerations.
            let loose = |p: &Value| {
                let mut s = p["spec"].clone();
                for kind in ["initContainers", "containers"] {
                    for c in s
                        .get_mut(kind)
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        c.as_object_mut().map(|m| m.remove("image"));
                    }
                }
                if let Some(m) = s.as_object_mut() {
                    m.remove("activeDeadlineSeconds");
                    m.remove("tolerations");
                }
                s
            };
            if loose(old) != loose(new) {
                return Err(ApiError::invalid(
                    res,
                    name,
                    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations)",
                ));
            }
            Ok(())
        }
        "configmaps" | "secrets" if old["immutable"] == json!(true) => {
            if old.get("data") != new.get("data")
                || old.get("binaryData") != new.get("binaryData")
                || new["immutable"] != json!(true)
            {
                return Err(ApiError::invalid(
                    res,
                    name,
                    "data: Forbidden: field is immutable when `immutable` is set",
                ));
            }
            Ok(())
        }
        "events" => check_event(new, meta(old, "namespace")),
        _ => Ok(()),
    }
}

fn check_event(ev: &Value, ns: &str) -> ApiResult<()> {
    let ins = ev["involvedObject"]["namespace"]
        .as_str()
        .unwrap_or_default();
    if !ins.is_empty() && ins != ns {
        return Err(ApiError::invalid(
            &resources::EVENTS,
            meta(ev, "name"),
            format!(
                "involvedObject.namespace: Invalid value: {ins:?}: does not match event.namespace"
            ),
        ));
    }
    Ok(())
}

fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-fake-apiserver",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "none",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

fn resource_list(group_version: &str) -> Value {
    let mut list = Vec::new();
    for r in resources::ALL
        .iter()
        .filter(|r| r.api_version() == group_version)
    {
        let verbs = json!([
            "create", "delete", "get", "list", "patch", "update", "watch"
        ]);
        list.push(json!({"name": r.plural, "singularName": r.kind.to_lowercase(), "namespaced": r.namespaced, "kind": r.kind, "verbs": verbs}));
        if r.status {
            list.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
    }
    if group_version == "v1" {
        list.push(json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true, "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}));
        list.push(json!({"name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding", "verbs": ["create"]}));
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": list})
}

fn discovery(path: &str) -> Option<Value> {
    let coord = json!({"name": "coordination.k8s.io", "versions": [{"groupVersion": "coordination.k8s.io/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"}});
    Some(match path {
        "api" => {
            json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
        }
        "apis" => json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [coord]}),
        "api/v1" => resource_list("v1"),
        "apis/coordination.k8s.io" => {
            let mut g = coord;
            g["kind"] = json!("APIGroup");
            g["apiVersion"] = json!("v1");
            g
        }
        "apis/coordination.k8s.io/v1" => resource_list("coordination.k8s.io/v1"),
        _ => return None,
    })
}
