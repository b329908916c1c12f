//! A container's probes as the plan carries them: the Kubernetes `Probe` with the API server's
//! defaults applied and named ports resolved, so podunit-sync never needs the manifest. Pure.
//!
//! [`check`] holds the API server's validation rules for probes (`validateProbe` and friends);
//! [`container_probes`] converts a container that passed them.

use k8s_openapi::api::core::v1 as core;
use serde::{Deserialize, Serialize};

use super::handler::{Handler, Problem, check_http_get, http_get, port_of, port_problem, problem};

/// Which of a container's three probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Startup,
    Readiness,
    Liveness,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Startup, Kind::Readiness, Kind::Liveness];

    /// As the kubelet writes it in events: `Readiness probe failed: ...`.
    pub fn title(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Readiness => "Readiness",
            Kind::Liveness => "Liveness",
        }
    }

    /// The container field: `readinessProbe`.
    pub fn field(self) -> &'static str {
        match self {
            Kind::Startup => "startupProbe",
            Kind::Readiness => "readinessProbe",
            Kind::Liveness => "livenessProbe",
        }
    }
}

/// One probe, every field defaulted as the API server does (`SetDefaults_Probe`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    pub handler: Handler,
    pub initial_delay_seconds: u32,
    pub period_seconds: u32,
    pub timeout_seconds: u32,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    /// The probe's own grace period for the kill that a liveness or startup failure causes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<u64>,
}

/// The probes of one container (app or sidecar).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerProbes {
    pub container: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<Probe>,
    /// The container's preStop hook, which a liveness or startup kill runs first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<super::hook::Hook>,
}

impl ContainerProbes {
    pub fn get(&self, kind: Kind) -> Option<&Probe> {
        match kind {
            Kind::Startup => self.startup.as_ref(),
            Kind::Readiness => self.readiness.as_ref(),
            Kind::Liveness => self.liveness.as_ref(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.startup.is_none() && self.readiness.is_none() && self.liveness.is_none()
    }
}

fn ctr_probe(ctr: &core::Container, kind: Kind) -> Option<&core::Probe> {
    match kind {
        Kind::Startup => ctr.startup_probe.as_ref(),
        Kind::Readiness => ctr.readiness_probe.as_ref(),
        Kind::Liveness => ctr.liveness_probe.as_ref(),
    }
}

/// The API server's rules for a container's probes. `sidecar`: a restartable init container,
/// which may have probes; a plain init container may not (`init`).
pub fn check(ctr: &core::Container, init: bool) -> Vec<(Kind, Problem)> {
    let mut out = Vec::new();
    for kind in Kind::ALL {
        let Some(p) = ctr_probe(ctr, kind) else {
            continue;
        };
        if init {
            out.push((kind, problem("", "may not be set for init containers")));
            continue;
        }
        for pr in check_probe(ctr, kind, p) {
            out.push((kind, pr));
        }
    }
    out
}

fn check_probe(ctr: &core::Container, kind: Kind, p: &core::Probe) -> Vec<Problem> {
    let mut out = Vec::new();
    let handlers = [
        ("exec", p.exec.is_some()),
        ("httpGet", p.http_get.is_some()),
        ("tcpSocket", p.tcp_socket.is_some()),
        ("grpc", p.grpc.is_some()),
    ];
    let set: Vec<&str> = handlers.iter().filter(|h| h.1).map(|h| h.0).collect();
    match set.len() {
        0 => out.push(problem("", "must specify a handler type")),
        1 => {}
        _ => out.push(problem(set[1], "may not specify more than 1 handler type")),
    }
    for (field, v) in [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ] {
        if v.is_some_and(|v| v < 0) {
            out.push(problem(field, "must be greater than or equal to 0"));
        }
    }
    if kind != Kind::Readiness && p.success_threshold.is_some_and(|v| v != 1 && v >= 0) {
        out.push(problem("successThreshold", "must be 1"));
    }
    if let Some(g) = p.termination_grace_period_seconds {
        if kind == Kind::Readiness {
            out.push(problem(
                "terminationGracePeriodSeconds",
                "must not be set for readinessProbes",
            ));
        } else if g <= 0 {
            out.push(problem(
                "terminationGracePeriodSeconds",
                "must be greater than 0",
            ));
        }
    }
    if let Some(e) = &p.exec
        && e.command.as_deref().unwrap_or_default().is_empty()
    {
        out.push(problem("exec.command", "Required value"));
    }
    if let Some(h) = &p.http_get {
        check_http_get(ctr, h, "httpGet", &mut out);
    }
    if let Some(t) = &p.tcp_socket {
        port_problem(ctr, &t.port, "tcpSocket.port", &mut out);
    }
    if let Some(g) = &p.grpc
        && !(1..=65535).contains(&g.port)
    {
        out.push(problem(
            "grpc.port",
            "must be between 1 and 65535, inclusive",
        ));
    }
    out
}

fn non_neg(v: Option<i32>, default: u32) -> u32 {
    match v {
        Some(v) if v > 0 => v as u32,
        _ => default,
    }
}

/// One probe with the API server's defaults. `None` for a probe that does not pass [`check`].
pub fn probe(ctr: &core::Container, p: &core::Probe) -> Option<Probe> {
    let handler = if let Some(e) = &p.exec {
        Handler::Exec {
            command: e.command.clone().unwrap_or_default(),
        }
    } else if let Some(h) = &p.http_get {
        http_get(ctr, h)
    } else if let Some(t) = &p.tcp_socket {
        Handler::TcpSocket {
            host: t.host.clone().unwrap_or_default(),
            port: port_of(ctr, &t.port).unwrap_or(0),
        }
    } else if let Some(g) = &p.grpc {
        Handler::Grpc {
            port: u16::try_from(g.port).unwrap_or(0),
            // The API server defaults an absent service to "" (the server's overall health).
            service: g.service.clone().unwrap_or_default(),
        }
    } else {
        return None;
    };
    Some(Probe {
        handler,
        initial_delay_seconds: non_neg(p.initial_delay_seconds, 0),
        period_seconds: non_neg(p.period_seconds, 10),
        timeout_seconds: non_neg(p.timeout_seconds, 1),
        success_threshold: non_neg(p.success_threshold, 1),
        failure_threshold: non_neg(p.failure_threshold, 3),
        termination_grace_period_seconds: p
            .termination_grace_period_seconds
            .and_then(|g| u64::try_from(g).ok()),
    })
}

/// The probes of a container, or `None` when it has none.
pub fn container_probes(ctr: &core::Container) -> Option<ContainerProbes> {
    let get = |k| ctr_probe(ctr, k).and_then(|p| probe(ctr, p));
    let cp = ContainerProbes {
        container: ctr.name.clone(),
        startup: get(Kind::Startup),
        readiness: get(Kind::Readiness),
        liveness: get(Kind::Liveness),
        pre_stop: ctr
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| super::hook::hook(ctr, h)),
    };
    (!cp.is_empty()).then_some(cp)
}

/// Every probed container of a pod: sidecars (restartable init containers) and app containers.
pub fn pod_probes(spec: &core::PodSpec) -> Vec<ContainerProbes> {
    spec.init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .chain(&spec.containers)
        .filter_map(container_probes)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctr(yaml: &str) -> core::Container {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn defaults_and_named_ports() {
        let c = ctr(r#"
name: web
ports: [{name: http, containerPort: 8080}]
readinessProbe:
  httpGet: {port: http}
livenessProbe:
  tcpSocket: {port: 8080}
  periodSeconds: 5
  terminationGracePeriodSeconds: 7
"#);
        assert!(check(&c, false).is_empty());
        let p = container_probes(&c).unwrap();
        let r = p.readiness.unwrap();
        assert_eq!(
            r.handler,
            Handler::HttpGet {
                https: false,
                host: String::new(),
                port: 8080,
                path: "/".into(),
                headers: vec![]
            }
        );
        assert_eq!(
            (r.initial_delay_seconds, r.period_seconds, r.timeout_seconds),
            (0, 10, 1)
        );
        assert_eq!((r.success_threshold, r.failure_threshold), (1, 3));
        let l = p.liveness.unwrap();
        assert_eq!(l.period_seconds, 5);
        assert_eq!(l.termination_grace_period_seconds, Some(7));
        assert!(p.startup.is_none());
    }

    #[test]
    fn grpc_probes_are_run() {
        let c = ctr(
            "name: g\nlivenessProbe: {grpc: {port: 9090, service: db}}\nreadinessProbe: {grpc: {port: 9090}}\n",
        );
        assert!(check(&c, false).is_empty(), "no warning: grpc probes run");
        let p = container_probes(&c).unwrap();
        assert_eq!(
            p.liveness.unwrap().handler,
            Handler::Grpc {
                port: 9090,
                service: "db".into()
            }
        );
        assert_eq!(
            p.readiness.unwrap().handler,
            Handler::Grpc {
                port: 9090,
                service: String::new()
            }
        );
        let bad = ctr("name: g\nlivenessProbe: {grpc: {port: 0}}\n");
        assert_eq!(check(&bad, false)[0].1.path, "grpc.port");
    }

    #[test]
    fn api_server_rules() {
        let c = ctr(r#"
name: web
livenessProbe:
  httpGet: {port: nope, scheme: FTP}
  exec: {command: []}
  successThreshold: 2
readinessProbe:
  tcpSocket: {port: 70000}
  terminationGracePeriodSeconds: 3
startupProbe: {}
"#);
        let got: Vec<(Kind, String)> = check(&c, false)
            .into_iter()
            .map(|(k, p)| (k, p.path))
            .collect();
        for want in [
            (Kind::Liveness, "httpGet"),
            (Kind::Liveness, "successThreshold"),
            (Kind::Liveness, "exec.command"),
            (Kind::Liveness, "httpGet.port"),
            (Kind::Liveness, "httpGet.scheme"),
            (Kind::Readiness, "terminationGracePeriodSeconds"),
            (Kind::Readiness, "tcpSocket.port"),
            (Kind::Startup, ""),
        ] {
            assert!(
                got.contains(&(want.0, want.1.to_string())),
                "{want:?} missing from {got:?}"
            );
        }
        let init = ctr("name: i\nreadinessProbe: {exec: {command: [x]}}\n");
        assert_eq!(check(&init, true).len(), 1);
    }
}
