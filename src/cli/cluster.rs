//! `podunit-sync` in cluster mode: load the kubeconfig (refusing loose permissions) and run the node
//! agent until killed.

use crate::agent::{self, units};
use crate::common::config::Config;
use crate::common::paths::Paths;
use crate::kube::{client::Client, kubeconfig};
use crate::kubelet;
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

/// The node agent, ready to start.
pub struct ClusterAgent {
    client: Client,
    config: agent::AgentConfig,
}

/// Reads the node configuration: `None` in local mode; in cluster mode the kubeconfig is loaded and
/// checked (root-only files, verifiable server) or the start is refused with the reason.
pub fn prepare(paths: &Paths) -> Result<Option<ClusterAgent>, ExitCode> {
    let loaded = match Config::load(&paths.config_file()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("podunit-sync: {e}");
            return Err(ExitCode::FAILURE);
        }
    };
    for k in &loaded.unknown_keys {
        eprintln!(
            "podunit-sync: {}: unknown key {k:?} ignored",
            paths.config_file().display()
        );
    }
    let cfg = loaded.config;
    let Some(kc) = cfg.kubeconfig.as_deref() else {
        return Ok(None);
    };
    let kc_path = paths.host(&kc.to_string_lossy());
    let creds = match kubeconfig::load(&kc_path, kubeconfig::OwnerCheck::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("podunit-sync: refusing to start: {e}");
            return Err(ExitCode::FAILURE);
        }
    };
    let kube_ca = creds.ca_pem.clone();
    let client = match Client::new(creds) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("podunit-sync: refusing to start: {e}");
            return Err(ExitCode::FAILURE);
        }
    };
    let node_name = cfg.node_name();
    let kubelet_port = if cfg.kubelet_server.port == 0 {
        0
    } else {
        // The names a serving certificate is for: the addresses the Node reports, read again
        // each time (they may change while the node runs).
        let storage = paths.host(Paths::STATE);
        let node_ip = cfg.node_ip.clone();
        let addresses = move || {
            let info =
                crate::kube::node::gather(storage.parent().unwrap_or(&storage), node_ip.as_deref());
            crate::kube::node::addresses(&info)
        };
        match kubelet::start(
            client.clone(),
            &cfg.kubelet_server,
            &node_name,
            paths,
            &kube_ca,
            Box::new(addresses),
        ) {
            Ok(port) => {
                eprintln!("podunit-sync: kubelet API on port {port}");
                port
            }
            Err(e) => {
                // Pods still run without it; the Node then reports no kubelet port.
                eprintln!("podunit-sync: kubelet API not served: {e}");
                0
            }
        }
    };
    Ok(Some(ClusterAgent {
        client,
        config: agent::AgentConfig {
            kubelet_port,
            node_name,
            timing: cfg.cluster.clone(),
            policy: cfg.effective_policy(),
            labels: cfg.node_labels.clone(),
            taints: cfg.register_with_taints.clone(),
            paths: paths.clone(),
            node_ip: cfg.node_ip.clone(),
            runtime_version: systemd_version(),
            cni_conf_dir: (cfg.network == crate::common::config::Network::Cni)
                .then(|| paths.host(&cfg.cni.conf_dir.to_string_lossy())),
            cni_pod_subnet: cfg.cni.pod_subnet.clone(),
        },
    }))
}

impl ClusterAgent {
    /// Runs the agent in the background, for the life of the process.
    pub fn spawn(self) {
        std::thread::spawn(move || {
            let units: Arc<dyn units::Units> = match units::Dbus::connect() {
                Ok(d) => Arc::new(d),
                Err(e) => {
                    eprintln!(
                        "podunit-sync: cluster mode without D-Bus signals ({e}): using systemctl"
                    );
                    Arc::new(units::Systemctl {
                        period: Duration::from_secs(2),
                    })
                }
            };
            eprintln!(
                "podunit-sync: node {} (cluster mode)",
                self.config.node_name
            );
            let shared = Arc::new(agent::Shared::default());
            if let Err(e) = agent::run(self.client, self.config, units, shared) {
                eprintln!("podunit-sync: cluster mode stopped: {e}");
            }
        });
    }
}
