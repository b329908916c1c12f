//! API errors as `Status` objects, with the codes, reasons and message shapes the real API server uses.

use crate::resources::Resource;
use serde_json::{Value, json};
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub name: Option<String>,
    pub kind: Option<String>,
    pub group: Option<String>,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            name: None,
            kind: None,
            group: None,
        }
    }

    fn about(mut self, res: &Resource, name: &str) -> Self {
        if !name.is_empty() {
            self.name = Some(name.to_string());
        }
        self.kind = Some(res.plural.to_string());
        if !res.group.is_empty() {
            self.group = Some(res.group.to_string());
        }
        self
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn not_found(res: &Resource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", res.qualified(), name),
        )
        .about(res, name)
    }

    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn already_exists(res: &Resource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", res.qualified(), name),
        )
        .about(res, name)
    }

    /// An optimistic-concurrency failure or a failed precondition.
    pub fn conflict(res: &Resource, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                res.qualified(),
                name,
                why
            ),
        )
        .about(res, name)
    }

    pub fn stale(res: &Resource, name: &str) -> Self {
        Self::conflict(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// What an authorizer or admission plugin refusing a request looks like.
    pub fn forbidden(res: &Resource, name: &str, why: impl Into<String>) -> Self {
        let subject = if name.is_empty() {
            res.qualified()
        } else {
            format!("{} \"{}\"", res.qualified(), name)
        };
        Self::new(
            403,
            "Forbidden",
            format!("{subject} is forbidden: {}", why.into()),
        )
        .about(res, name)
    }

    pub fn forbidden_path(user: &str, path: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("forbidden: User \"{user}\" cannot get path \"{path}\""),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// A validation failure: `Kind "name" is invalid: field: detail`.
    pub fn invalid(res: &Resource, name: &str, detail: impl Into<String>) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{} \"{}\" is invalid: {}", res.kind, name, detail.into()),
        )
        .about(res, name)
    }

    /// A patch that cannot be applied (JSON patch test failure, missing path).
    pub fn invalid_patch(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {content_type:?})"
            ),
        )
    }

    /// The watch error for a resourceVersion older than the retained history.
    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    pub fn unavailable() -> Self {
        Self::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        )
    }

    pub fn too_many_requests() -> Self {
        Self::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.name.is_some() || self.kind.is_some() {
            let mut details = serde_json::Map::new();
            if let Some(n) = &self.name {
                details.insert("name".into(), json!(n));
            }
            if let Some(g) = &self.group {
                details.insert("group".into(), json!(g));
            }
            if let Some(k) = &self.kind {
                details.insert("kind".into(), json!(k));
            }
            status["details"] = Value::Object(details);
        }
        status
    }
}

/// The `Status` a successful DELETE of most resources returns.
pub fn success_status(res: &Resource, name: &str, uid: &str) -> Value {
    let mut details = json!({"name": name, "kind": res.plural, "uid": uid});
    if !res.group.is_empty() {
        details["group"] = json!(res.group);
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

pub type ApiResult<T> = Result<T, ApiError>;
