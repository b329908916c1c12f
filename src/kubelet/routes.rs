//! What the server answers: the gate first (authentication, then authorisation), then one handler
//! per path. Each handler returns whether the connection may carry another request.

use super::auth::{self, Denied};
use super::context::{State, TEXT, Tls, generated_pods, peer_alive};
use super::http::{self, Request};
use super::{query, stats};
use crate::logs::{self, LogError};

const JSON: &str = "application/json";
/// The Prometheus text format, version 0.0.4.
const PROMETHEUS: &str = "text/plain; version=0.0.4";

pub(super) fn handle(state: &State, stream: &mut Tls, req: &Request) -> bool {
    let peer = stream.conn.peer_certificates().map(|c| c.to_vec());
    let gate = state
        .gate
        .authenticate(peer.as_deref(), req.header("authorization"))
        .and_then(|u| {
            state
                .gate
                .authorize(&u, &auth::attributes(&req.method, &req.path))
        });
    if let Err(d) = gate {
        let (status, msg) = match d {
            Denied::Unauthenticated => (401, "Unauthorized".to_string()),
            Denied::Forbidden(m) => (403, m),
            Denied::Unavailable(m) => (500, format!("Authorization error: {m}")),
        };
        return reply(stream, req, status, TEXT, msg.as_bytes());
    }
    if let Some(rest) = req.path.strip_prefix("/exec/") {
        return super::remotecommand::exec(state, stream, req, rest);
    }
    if let Some(rest) = req.path.strip_prefix("/attach/") {
        return super::attach::attach(state, stream, req, rest);
    }
    if let Some(rest) = req.path.strip_prefix("/portForward/") {
        return super::portforward::port_forward(state, stream, req, rest);
    }
    if req.method != "GET" && req.method != "HEAD" {
        return reply(stream, req, 405, TEXT, b"405 method not allowed\n");
    }
    if let Some(rest) = req.path.strip_prefix("/logs/") {
        return super::nodelogs::serve(state, stream, req, rest);
    }
    match req.path.as_str() {
        "/healthz" => reply(stream, req, 200, TEXT, b"ok"),
        "/pods" | "/pods/" => {
            let body = serde_json::to_vec(&pod_list(state)).expect("serializable");
            reply(stream, req, 200, JSON, &body)
        }
        "/stats/summary" | "/stats/summary/" => {
            let s = sample(state);
            let body = serde_json::to_vec(&stats::summary(&state.node_name, &s, &state.rates))
                .expect("serializable");
            reply(stream, req, 200, JSON, &body)
        }
        "/metrics/resource" | "/metrics/resource/v1alpha1" => {
            let body = stats::resource_metrics(&sample(state));
            reply(stream, req, 200, PROMETHEUS, body.as_bytes())
        }
        p => match p.strip_prefix("/containerLogs/") {
            Some(rest) => container_logs(state, stream, req, rest),
            None => reply(stream, req, 404, TEXT, b"404 page not found\n"),
        },
    }
}

fn reply(stream: &mut Tls, req: &Request, status: u16, ctype: &str, body: &[u8]) -> bool {
    let body = if req.method == "HEAD" { &[][..] } else { body };
    http::write_response(stream, status, ctype, body, req.close).is_ok()
}

fn sample(state: &State) -> stats::Sample {
    let cg = stats::Cgroups::detect(&state.paths.host("/sys/fs/cgroup"));
    stats::sample(&cg, generated_pods(state), &state.paths)
}

/// The pods bound to this node, as the spool has them.
fn pod_list(state: &State) -> serde_json::Value {
    let spool = state.paths.spool();
    let mut items = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(&spool)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| crate::agent::spool::parse_file_name(n).is_some())
        .collect();
    names.sort();
    for n in names {
        let Ok(text) = std::fs::read_to_string(spool.join(&n)) else {
            continue;
        };
        // The first document is the Pod, one line of JSON.
        if let Some(pod) = text
            .lines()
            .find(|l| l.starts_with('{'))
            .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        {
            items.push(pod);
        }
    }
    serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as i64
}

/// `/containerLogs/{namespace}/{pod}/{container}`.
fn container_logs(state: &State, stream: &mut Tls, req: &Request, rest: &str) -> bool {
    let parts: Vec<&str> = rest.split('/').collect();
    let [ns, name, container] = parts[..] else {
        return reply(stream, req, 404, TEXT, b"404 page not found\n");
    };
    if ns.is_empty() || name.is_empty() || container.is_empty() {
        return reply(
            stream,
            req,
            400,
            TEXT,
            b"namespace, pod and container are required\n",
        );
    }
    let mut q = match query::log_query(req, now_micros()) {
        Ok(q) => q,
        Err(e) => return reply(stream, req, 400, TEXT, e.as_bytes()),
    };
    let pods = generated_pods(state);
    let Some(pod) = pods
        .iter()
        .find(|p| p.key.namespace == ns && p.key.name == name)
    else {
        let msg = format!("pod \"{name}\" does not exist\n");
        return reply(stream, req, 404, TEXT, msg.as_bytes());
    };
    let Some(ctr) = pod.containers.iter().find(|c| c.name == container) else {
        let msg = format!("container \"{container}\" not found in pod \"{name}\"\n");
        return reply(stream, req, 404, TEXT, msg.as_bytes());
    };
    if q.previous {
        let current = crate::systemd::Client::system()
            .and_then(|c| c.unit_state(&ctr.unit))
            .map(|s| s.invocation_id);
        let current = match current {
            Ok(c) => c,
            Err(e) => return reply(stream, req, 500, TEXT, e.to_string().as_bytes()),
        };
        match logs::find_previous(&pod.key, container, &current) {
            Ok(id) => q.options.invocation = Some(id),
            Err(e @ LogError::NoPrevious { .. }) => {
                return reply(stream, req, 400, TEXT, e.to_string().as_bytes());
            }
            Err(e) => return reply(stream, req, 500, TEXT, e.to_string().as_bytes()),
        }
    }
    // A second handle on the socket, only to notice that the client has gone.
    let Ok(watch) = stream.sock.try_clone() else {
        return false;
    };
    if http::write_stream_head(stream, TEXT).is_err() || req.method == "HEAD" {
        return false;
    }
    let alive = || peer_alive(&watch);
    logs::sync_journal();
    let _ = logs::stream(&pod.key, container, &q.options, stream, &alive);
    false
}
