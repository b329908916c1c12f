//! What went wrong with an API call: its own module, so the client and the watch stream both use
//! it without depending on each other.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use std::fmt;

/// What went wrong with an API call.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    /// The server answered with an error status (its `Status` object, or the bare HTTP code).
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    /// No answer: connection refused, TLS failure, timeout, reset.
    Transport(String),
    /// An answer that is not what the API promises.
    Decode(String),
    /// The client could not be built (bad PEM in the kubeconfig).
    Config(String),
}

impl ApiError {
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }
    /// 410 Gone: the resourceVersion is too old, list again.
    pub fn is_gone(&self) -> bool {
        self.code() == Some(410)
    }
    /// Worth retrying later (server unreachable or overloaded), as opposed to a refusal.
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Transport(_) => true,
            ApiError::Status { code, .. } => *code == 429 || *code >= 500,
            _ => false,
        }
    }
    pub(super) fn from_status(code: u16, s: Status) -> ApiError {
        ApiError::Status {
            code: s.code.map(|c| c as u16).unwrap_or(code),
            reason: s.reason.unwrap_or_default(),
            message: s.message.unwrap_or_default(),
        }
    }
    /// An `ERROR` watch event's Status.
    pub fn from_watch_status(s: Status) -> ApiError {
        ApiError::from_status(500, s)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Status {
                code,
                reason,
                message,
            } => write!(f, "API server: {code} {reason}: {message}"),
            ApiError::Transport(m) => write!(f, "API server unreachable: {m}"),
            ApiError::Decode(m) => write!(f, "API server answer not understood: {m}"),
            ApiError::Config(m) => write!(f, "API client: {m}"),
        }
    }
}

impl std::error::Error for ApiError {}
