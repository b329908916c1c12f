//! `podunit-sync` in cluster mode: load the kubeconfig (refusing loose permissions) and run the node
//! agent until killed.

use crate::config::Loaded;
use crate::kube::{agent, client::Client, kubeconfig, units};
use crate::paths::Paths;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// `systemd://<version>` from `systemctl --version` (nodeInfo.containerRuntimeVersion).
fn systemd_version() -> String {
    std::process::Command::new("systemctl")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .nth(1)
                .map(|v| format!("systemd://{v}"))
        })
        .unwrap_or_else(|| "systemd://unknown".into())
}

/// Runs the node agent; returns only on a setup error.
pub fn run(loaded: Loaded, paths: Paths) -> ExitCode {
    for k in &loaded.unknown_keys {
        eprintln!(
            "podunit-sync: {}: unknown key {k:?} ignored",
            paths.config_file().display()
        );
    }
    let cfg = loaded.config;
    let Some(kc) = cfg.kubeconfig.as_deref() else {
        eprintln!("podunit-sync: no kubeconfig configured: not in cluster mode");
        return ExitCode::FAILURE;
    };
    let kc_path = paths.host(&kc.to_string_lossy());
    let creds = match kubeconfig::load(&kc_path, kubeconfig::OwnerCheck::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("podunit-sync: refusing to start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let client = match Client::new(creds) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("podunit-sync: refusing to start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let acfg = agent::AgentConfig {
        node_name: cfg.node_name(),
        timing: cfg.cluster.clone(),
        policy: cfg.policy.clone(),
        labels: cfg.node_labels.clone(),
        paths,
        node_ip: cfg.node_ip.clone(),
        runtime_version: systemd_version(),
    };
    let units: Arc<dyn units::Units> = Arc::new(units::Systemctl {
        period: Duration::from_secs(2),
    });
    let shared = Arc::new(agent::Shared::default());
    eprintln!("podunit-sync: node {} (cluster mode)", acfg.node_name);
    match agent::run(client, acfg, units, shared) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podunit-sync: {e}");
            ExitCode::FAILURE
        }
    }
}
