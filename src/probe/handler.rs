//! What probes and lifecycle hooks share: the handler as the plan carries it, the checks of an
//! `httpGet` against its container, and how a problem with either is reported.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

/// What a probe does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Handler {
    /// Runs `command` inside the container (no shell).
    Exec { command: Vec<String> },
    /// `GET scheme://host:port/path`. An empty host means the pod's IP.
    #[serde(rename_all = "camelCase")]
    HttpGet {
        https: bool,
        host: String,
        port: u16,
        path: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        headers: Vec<(String, String)>,
    },
    /// Opens a TCP connection.
    /// Port 0: a name no container port has.
    TcpSocket { host: String, port: u16 },
    /// `grpc.health.v1.Health/Check` with `service`.
    Grpc { port: u16, service: String },
}

/// A problem with a probe: the path below the probe (`httpGet.port`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
    /// An error refuses the pod; otherwise it is a warning.
    pub error: bool,
}

pub(crate) fn problem(path: &str, message: impl Into<String>) -> Problem {
    Problem {
        path: path.to_string(),
        message: message.into(),
        error: true,
    }
}

/// The API server's rules for an `HTTPGetAction` (`validateHTTPGetAction`), of a probe or a
/// lifecycle hook; `at` is its path (`httpGet`).
pub(crate) fn check_http_get(
    ctr: &core::Container,
    h: &core::HTTPGetAction,
    at: &str,
    out: &mut Vec<Problem>,
) {
    port_problem(ctr, &h.port, &format!("{at}.port"), out);
    if let Some(s) = h.scheme.as_deref()
        && s != "HTTP"
        && s != "HTTPS"
    {
        out.push(problem(
            &format!("{at}.scheme"),
            format!("Unsupported value: {s:?}: supported values: \"HTTP\", \"HTTPS\""),
        ));
    }
    for (i, hd) in h.http_headers.iter().flatten().enumerate() {
        if !is_header_name(&hd.name) {
            out.push(problem(
                &format!("{at}.httpHeaders[{i}].name"),
                format!(
                    "{:?}: a valid HTTP header must consist of alphanumeric characters or '-'",
                    hd.name
                ),
            ));
        }
        if hd.value.chars().any(|c| c.is_control() && c != '\t') {
            out.push(problem(
                &format!("{at}.httpHeaders[{i}].value"),
                "may not contain control characters",
            ));
        }
    }
    if h.path
        .as_deref()
        .is_some_and(|p| p.chars().any(char::is_control))
    {
        out.push(problem(
            &format!("{at}.path"),
            "may not contain control characters",
        ));
    }
}

/// A port out of range is refused; a name no container port has is accepted (the API server
/// does) and makes every run of the probe an error, as in the kubelet: said as a warning.
pub(super) fn port_problem(
    ctr: &core::Container,
    port: &IntOrString,
    path: &str,
    out: &mut Vec<Problem>,
) {
    if let Err(m) = port_of(ctr, port) {
        out.push(Problem {
            path: path.into(),
            error: !matches!(port, IntOrString::String(s) if s.parse::<i64>().is_err()),
            message: m,
        });
    }
}

fn is_header_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A probe's port: a number, or the name of one of the container's ports (resolved as the
/// kubelet does, `findPortByName`).
pub(super) fn port_of(ctr: &core::Container, port: &IntOrString) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n)
            .ok()
            .filter(|n| *n != 0)
            .ok_or_else(|| "must be between 1 and 65535, inclusive".to_string()),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<i64>() {
                // The kubelet parses a numeric string as the number.
                return u16::try_from(n)
                    .ok()
                    .filter(|n| *n != 0)
                    .ok_or_else(|| "must be between 1 and 65535, inclusive".to_string());
            }
            ctr.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("{name:?}: no container port has this name"))
        }
    }
}

/// An `HTTPGetAction` as it is run: named port resolved (0: no container port has the name),
/// path defaulted to `/`.
pub(crate) fn http_get(ctr: &core::Container, h: &core::HTTPGetAction) -> Handler {
    Handler::HttpGet {
        https: h.scheme.as_deref() == Some("HTTPS"),
        host: h.host.clone().unwrap_or_default(),
        port: port_of(ctr, &h.port).unwrap_or(0),
        path: h
            .path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".into()),
        headers: h
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
    }
}
