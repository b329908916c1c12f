//! Running a command inside a running container on behalf of a person: `podunit exec` and the
//! kubelet API's `/exec` (what `kubectl exec` reaches). The command enters the container exactly
//! as an exec probe's does ([`crate::prober::enter`]), from a transient unit in PID 1's context;
//! unlike a probe it gets the caller's stdin, stdout and stderr (or a terminal) and no timeout.
//!
//! - [`session`]: starting the command and waiting for its exit status (the caller's side), and
//!   the transient unit's side that receives the caller's descriptors and reports how it ended;
//! - [`pty`]: a terminal for a command that asks for one.

pub mod pty;
pub mod session;

use crate::generate::output::GeneratedPod;
use std::fmt;

pub use session::{Exit, Session, Stdio, start};

/// Why a command could not be run in a container.
#[derive(Debug)]
pub enum Error {
    /// No such pod on this node.
    UnknownPod {
        namespace: String,
        name: String,
    },
    /// The pod has no container of that name.
    UnknownContainer {
        pod: String,
        container: String,
        known: Vec<String>,
    },
    /// The container's unit has no main process.
    NotRunning {
        pod: String,
        container: String,
    },
    /// No command to run.
    NoCommand,
    Systemd(crate::systemd::Error),
    Io(&'static str, std::io::Error),
    /// The transient unit ended without saying how the command ended.
    NoResult(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownPod { namespace, name } => {
                write!(f, "pod \"{name}\" not found in namespace \"{namespace}\"")
            }
            Error::UnknownContainer {
                pod,
                container,
                known,
            } => write!(
                f,
                "container {container} is not valid for pod {pod}; its containers: {}",
                known.join(", ")
            ),
            Error::NotRunning { pod, container } => {
                write!(f, "container {container} in pod {pod} is not running")
            }
            Error::NoCommand => write!(f, "no command given"),
            Error::Systemd(e) => write!(f, "{e}"),
            Error::Io(what, e) => write!(f, "{what}: {e}"),
            Error::NoResult(m) if m.is_empty() => {
                write!(f, "the command ended without an exit status")
            }
            Error::NoResult(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for Error {}

/// The unit of container `container` of `pod`.
pub fn container_unit<'a>(pod: &'a GeneratedPod, container: &str) -> Result<&'a str, Error> {
    pod.containers
        .iter()
        .find(|c| c.name == container)
        .map(|c| c.unit.as_str())
        .ok_or_else(|| Error::UnknownContainer {
            pod: pod.key.to_string(),
            container: container.to_string(),
            known: pod.containers.iter().map(|c| c.name.clone()).collect(),
        })
}

/// The pod `namespace/name` among `pods`.
pub fn find_pod<'a>(
    pods: &'a [GeneratedPod],
    namespace: &str,
    name: &str,
) -> Result<&'a GeneratedPod, Error> {
    pods.iter()
        .find(|p| p.key.namespace == namespace && p.key.name == name)
        .ok_or_else(|| Error::UnknownPod {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
}

/// The CLI binary beside the running one (`/usr/bin/podunit` beside `/usr/bin/podunit-sync`),
/// which the transient unit runs.
pub fn cli_binary() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("podunit").display().to_string()))
        .unwrap_or_else(|| "/usr/bin/podunit".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::output::{ContainerKind, GeneratedContainer, PodKey};

    #[test]
    fn pods_and_containers_are_looked_up_by_name() {
        let pod = GeneratedPod {
            key: PodKey::new("default", "web"),
            uid: None,
            pod_unit: None,
            slice: None,
            containers: vec![GeneratedContainer {
                name: "main".into(),
                unit: "u.service".into(),
                kind: ContainerKind::App,
                order: 0,
                restart: "always".into(),
                stop_timeout_s: None,
            }],
            source_path: None,
            hash: String::new(),
            job: None,
            ordered: None,
            workload: None,
        };
        let pods = [pod];
        let p = find_pod(&pods, "default", "web").unwrap();
        assert_eq!(container_unit(p, "main").unwrap(), "u.service");
        let e = container_unit(p, "side").unwrap_err();
        assert_eq!(
            e.to_string(),
            "container side is not valid for pod default/web; its containers: main"
        );
        assert!(matches!(
            find_pod(&pods, "kube-system", "web"),
            Err(Error::UnknownPod { .. })
        ));
    }
}
