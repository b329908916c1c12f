//! Node policy: what a pod may do on this node (the `policy:` key of `/etc/podunit/config.yaml`).
//!
//! A node runs what it is given as root, so a pod from the API server is checked against the policy
//! before any of it is written where the generator reads it. A refused pod never partly runs: the
//! check is all-or-nothing over every container, init container and volume.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `images` | `[host, rootfs, store]` | `host`: the host root filesystem; `rootfs`: an absolute path to a root directory or image file; `store`: the local image store |
//! | `hostPaths` | `[]` | hostPath volumes allowed: `{path: /srv, readOnly: true}` allows `/srv` and below, read-only mounts only |
//! | `privileged` | `false` | `securityContext.privileged: true` |
//! | `runAsRoot` | `true` | containers whose user is root or unspecified |
//! | `allowedCapabilities` | `[]` | capabilities a container may add (`NET_BIND_SERVICE`, or `ALL` for any) |
//! | `hostNetwork` | `true` | `hostNetwork: true` (with `false`, pods must run in a private network) |
//! | `hostIPC` | `false` | `hostIPC: true`: the host's IPC namespace instead of the pod's |
//! | `hostPID` | `false` | `hostPID: true`: the host's PID namespace, every host process in sight |
//! | `registries` | any | registries images may be pulled from (`[docker.io, registry.k8s.io]`) |
//! | `local` | `trust` | `enforce`: also apply the policy to /etc/pods.d and /run/pods.d pods (root wrote them: trusted by default) |
//!
//! The image names that mean the host root filesystem are the top-level `hostImages` key (default
//! `[host]`), shared with the generator.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use serde::Deserialize;
use std::fmt;
use std::path::{Component, Path};

/// Kinds of `image:` reference (DESIGN.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    /// The host's root filesystem.
    Host,
    /// An absolute path: a root directory or an image file.
    #[serde(alias = "path")]
    Rootfs,
    /// A name looked up in the local image store.
    Store,
}

/// An allowed hostPath prefix.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostPathRule {
    pub path: String,
    #[serde(default)]
    pub read_only: bool,
}

/// Whether local (/etc/pods.d, /run/pods.d) pods are checked too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Local {
    #[default]
    Trust,
    Enforce,
}

/// The policy. Defaults are documented in the module table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Policy {
    #[serde(rename = "images")]
    pub allowed_image_kinds: Vec<ImageKind>,
    /// Filled from the top-level `hostImages` key of the config, not from `policy:`.
    #[serde(skip)]
    pub host_images: Vec<String>,
    pub host_paths: Vec<HostPathRule>,
    #[serde(rename = "privileged")]
    pub allow_privileged: bool,
    #[serde(rename = "runAsRoot")]
    pub allow_run_as_root: bool,
    pub allowed_capabilities: Vec<String>,
    #[serde(rename = "hostNetwork")]
    pub allow_host_network: bool,
    #[serde(rename = "hostIPC")]
    pub allow_host_ipc: bool,
    #[serde(rename = "hostPID")]
    pub allow_host_pid: bool,
    #[serde(rename = "local")]
    pub local: Local,
    /// Registries images may be pulled from (normalised hosts: `docker.io`, `registry.k8s.io`);
    /// absent: any.
    pub registries: Option<Vec<String>>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            allowed_image_kinds: vec![ImageKind::Host, ImageKind::Rootfs, ImageKind::Store],
            host_images: vec!["host".to_string()],
            host_paths: Vec::new(),
            allow_privileged: false,
            allow_run_as_root: true,
            allowed_capabilities: Vec::new(),
            allow_host_network: true,
            // As Pod Security's baseline level: a pod sees the host's IPC and processes only
            // where the node allows it.
            allow_host_ipc: false,
            allow_host_pid: false,
            local: Local::Trust,
            registries: None,
        }
    }
}

/// Why a pod was refused: the rule (its config key) and what in the pod broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The policy key, e.g. `policy.privileged`.
    pub rule: &'static str,
    /// What the pod asked for, with its field path.
    pub message: String,
}

impl Violation {
    /// The Kubernetes `reason` a refused pod gets.
    pub const REASON: &'static str = "PolicyViolation";
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused by node policy {}: {}", self.rule, self.message)
    }
}

impl std::error::Error for Violation {}

impl Policy {
    /// Classifies an image reference.
    pub fn image_kind(&self, image: &str) -> ImageKind {
        if self.host_images.iter().any(|h| h == image) {
            ImageKind::Host
        } else if image.starts_with('/') {
            ImageKind::Rootfs
        } else {
            ImageKind::Store
        }
    }
}

/// Checks every part of `pod` against `policy`; the first violation found is returned.
pub fn check(pod: &Pod, policy: &Policy) -> Result<(), Violation> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    if spec.host_network == Some(true) && !policy.allow_host_network {
        return Err(Violation {
            rule: "policy.hostNetwork",
            message: "spec.hostNetwork is true".to_string(),
        });
    }
    for (set, allowed, rule, message) in [
        (
            spec.host_ipc,
            policy.allow_host_ipc,
            "policy.hostIPC",
            "spec.hostIPC is true",
        ),
        (
            spec.host_pid,
            policy.allow_host_pid,
            "policy.hostPID",
            "spec.hostPID is true",
        ),
    ] {
        if set == Some(true) && !allowed {
            return Err(Violation {
                rule,
                message: message.to_string(),
            });
        }
    }
    for (field, c) in containers(spec) {
        check_container(spec, &field, c, policy)?;
    }
    check_host_paths(spec, policy)
}

/// Every container with its field path, init containers first.
fn containers(spec: &PodSpec) -> Vec<(String, &Container)> {
    let init = spec.init_containers.iter().flatten().enumerate();
    let app = spec.containers.iter().enumerate();
    init.map(|(i, c)| (format!("spec.initContainers[{i}]"), c))
        .chain(app.map(|(i, c)| (format!("spec.containers[{i}]"), c)))
        .collect()
}

fn check_container(
    spec: &PodSpec,
    field: &str,
    c: &Container,
    policy: &Policy,
) -> Result<(), Violation> {
    let image = c.image.as_deref().unwrap_or("");
    let kind = policy.image_kind(image);
    if !policy.allowed_image_kinds.contains(&kind) {
        return Err(Violation {
            rule: "policy.images",
            message: format!(
                "{field}.image {image:?} is a {kind:?} image, not allowed on this node"
            ),
        });
    }
    let sc = c.security_context.as_ref();
    if sc.and_then(|s| s.privileged) == Some(true) && !policy.allow_privileged {
        return Err(Violation {
            rule: "policy.privileged",
            message: format!("{field}.securityContext.privileged is true"),
        });
    }
    if !policy.allow_run_as_root {
        // No image metadata names a user here: an unspecified user is root.
        let uid = sc
            .and_then(|s| s.run_as_user)
            .or_else(|| spec.security_context.as_ref().and_then(|s| s.run_as_user));
        if uid.unwrap_or(0) == 0 {
            return Err(Violation {
                rule: "policy.runAsRoot",
                message: format!(
                    "{field} runs as root (securityContext.runAsUser is {})",
                    uid.map_or("unset".to_string(), |u| u.to_string())
                ),
            });
        }
    }
    let added = sc
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.add.as_ref());
    for cap in added.into_iter().flatten() {
        let want = normalize_cap(cap);
        let ok = policy
            .allowed_capabilities
            .iter()
            .map(|a| normalize_cap(a))
            .any(|a| a == "ALL" || a == want);
        if !ok {
            return Err(Violation {
                rule: "policy.allowedCapabilities",
                message: format!("{field}.securityContext.capabilities.add has {cap:?}"),
            });
        }
    }
    Ok(())
}

/// As [`check`], and each hostPath is also checked as the host resolves it: a path under an
/// allowed prefix that is (or goes through) a symlink leading elsewhere is refused. `resolve`
/// gives the host's canonical path of an existing path (None for one that does not exist yet,
/// which `DirectoryOrCreate` will create as a plain directory).
pub fn check_resolved(
    pod: &Pod,
    policy: &Policy,
    resolve: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Violation> {
    check(pod, policy)?;
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let Some(hp) = v.host_path.as_ref() else {
            continue;
        };
        let Some(real) = resolve(&hp.path) else {
            continue;
        };
        let allowed = policy.host_paths.iter().any(|r| {
            path_within(&hp.path, &r.path)
                && path_within(&real, &resolve(&r.path).unwrap_or_else(|| r.path.clone()))
        });
        if !allowed {
            return Err(Violation {
                rule: "policy.hostPaths",
                message: format!(
                    "spec.volumes[{i}].hostPath.path {:?} leads to {real:?} through a symlink, outside the allowed prefixes",
                    hp.path
                ),
            });
        }
    }
    Ok(())
}

fn normalize_cap(c: &str) -> String {
    let up = c.trim().to_ascii_uppercase();
    up.strip_prefix("CAP_").map(str::to_string).unwrap_or(up)
}

fn check_host_paths(spec: &PodSpec, policy: &Policy) -> Result<(), Violation> {
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let Some(hp) = v.host_path.as_ref() else {
            continue;
        };
        let field = format!("spec.volumes[{i}].hostPath.path");
        let rule = policy
            .host_paths
            .iter()
            .filter(|r| path_within(&hp.path, &r.path))
            // The most permissive matching rule wins (a rw rule for /srv/data beats ro for /srv).
            .min_by_key(|r| r.read_only);
        let Some(rule) = rule else {
            return Err(Violation {
                rule: "policy.hostPaths",
                message: format!("{field} {:?} is not under an allowed prefix", hp.path),
            });
        };
        if rule.read_only {
            for (cfield, c) in containers(spec) {
                for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
                    if m.name == v.name && m.read_only != Some(true) {
                        return Err(Violation {
                            rule: "policy.hostPaths",
                            message: format!(
                                "{cfield}.volumeMounts[{j}] mounts hostPath {:?} writable; \
                                 {:?} is allowed read-only",
                                hp.path, rule.path
                            ),
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whether `path` is `prefix` or below it, component-wise; `..` and relative paths never are.
fn path_within(path: &str, prefix: &str) -> bool {
    let p = Path::new(path);
    if !p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return false;
    }
    p.starts_with(Path::new(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_saphyr::from_str(yaml).unwrap()
    }

    const BASE: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n";

    fn spec(s: &str) -> Pod {
        pod(&format!("{BASE}{s}"))
    }

    #[test]
    fn plain_pod_passes_default_policy() {
        let p = spec("  containers: [{name: c, image: host, command: [/bin/true]}]\n");
        assert_eq!(check(&p, &Policy::default()), Ok(()));
    }

    #[test]
    fn image_kinds() {
        let p = spec("  containers: [{name: c, image: 'docker.io/nginx:1'}]\n");
        let pol = Policy {
            allowed_image_kinds: vec![ImageKind::Host],
            ..Policy::default()
        };
        let v = check(&p, &pol).unwrap_err();
        assert_eq!(v.rule, "policy.images");
        assert!(v.message.contains("spec.containers[0].image"), "{v}");
        let p = spec("  containers: [{name: c, image: /srv/rootfs}]\n");
        assert_eq!(check(&p, &pol).unwrap_err().rule, "policy.images");
        let pol = Policy {
            host_images: vec!["host".into(), "debian".into()],
            ..pol
        };
        assert_eq!(
            check(&spec("  containers: [{name: c, image: debian}]\n"), &pol),
            Ok(())
        );
    }

    #[test]
    fn privileged_refused_by_default_and_allowed_when_configured() {
        let p = spec(
            "  initContainers: [{name: i, image: host, securityContext: {privileged: true}}]\n  containers: [{name: c, image: host}]\n",
        );
        let v = check(&p, &Policy::default()).unwrap_err();
        assert_eq!(v.rule, "policy.privileged");
        assert_eq!(
            v.message,
            "spec.initContainers[0].securityContext.privileged is true"
        );
        let pol = Policy {
            allow_privileged: true,
            ..Policy::default()
        };
        assert_eq!(check(&p, &pol), Ok(()));
    }

    #[test]
    fn run_as_root() {
        let pol = Policy {
            allow_run_as_root: false,
            ..Policy::default()
        };
        let unset = spec("  containers: [{name: c, image: host}]\n");
        assert_eq!(check(&unset, &pol).unwrap_err().rule, "policy.runAsRoot");
        let zero =
            spec("  containers: [{name: c, image: host, securityContext: {runAsUser: 0}}]\n");
        assert_eq!(check(&zero, &pol).unwrap_err().rule, "policy.runAsRoot");
        let pod_level =
            spec("  securityContext: {runAsUser: 1000}\n  containers: [{name: c, image: host}]\n");
        assert_eq!(check(&pod_level, &pol), Ok(()));
        // The container's own setting overrides the pod's.
        let override_root = spec(
            "  securityContext: {runAsUser: 1000}\n  containers: [{name: c, image: host, securityContext: {runAsUser: 0}}]\n",
        );
        assert!(check(&override_root, &pol).is_err());
        assert_eq!(check(&unset, &Policy::default()), Ok(()));
    }

    #[test]
    fn capabilities() {
        let p = spec(
            "  containers: [{name: c, image: host, securityContext: {capabilities: {add: [NET_ADMIN], drop: [ALL]}}}]\n",
        );
        let v = check(&p, &Policy::default()).unwrap_err();
        assert_eq!(v.rule, "policy.allowedCapabilities");
        assert!(v.message.contains("NET_ADMIN"));
        let pol = Policy {
            allowed_capabilities: vec!["cap_net_admin".into()],
            ..Policy::default()
        };
        assert_eq!(check(&p, &pol), Ok(()));
        let pol = Policy {
            allowed_capabilities: vec!["NET_BIND_SERVICE".into()],
            ..Policy::default()
        };
        assert!(check(&p, &pol).is_err());
    }

    #[test]
    fn host_paths_through_symlinks() {
        let pol = Policy {
            host_paths: vec![HostPathRule {
                path: "/srv/data".into(),
                read_only: false,
            }],
            ..Policy::default()
        };
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "host"}],
                     "volumes": [{"name": "v", "hostPath": {"path": "/srv/data/link"}}]}
        }))
        .unwrap();
        let plain = |p: &str| Some(p.to_string());
        assert_eq!(check_resolved(&pod, &pol, &plain), Ok(()));
        let escaping = |p: &str| {
            Some(if p == "/srv/data/link" {
                "/etc".to_string()
            } else {
                p.to_string()
            })
        };
        let err = check_resolved(&pod, &pol, &escaping).unwrap_err();
        assert_eq!(err.rule, "policy.hostPaths");
        assert!(
            err.message.contains("leads to \"/etc\" through a symlink"),
            "{}",
            err.message
        );
        let missing = |p: &str| (p != "/srv/data/link").then(|| p.to_string());
        assert_eq!(
            check_resolved(&pod, &pol, &missing),
            Ok(()),
            "created later as a plain directory"
        );
    }

    #[test]
    fn host_paths() {
        let p = spec(
            "  volumes: [{name: d, hostPath: {path: /srv/data/x}}]\n  containers: [{name: c, image: host, volumeMounts: [{name: d, mountPath: /d}]}]\n",
        );
        assert_eq!(
            check(&p, &Policy::default()).unwrap_err().rule,
            "policy.hostPaths"
        );
        let ro = Policy {
            host_paths: vec![HostPathRule {
                path: "/srv/data".into(),
                read_only: true,
            }],
            ..Policy::default()
        };
        let v = check(&p, &ro).unwrap_err();
        assert!(v.message.contains("writable"), "{v}");
        let p_ro = spec(
            "  volumes: [{name: d, hostPath: {path: /srv/data/x}}]\n  containers: [{name: c, image: host, volumeMounts: [{name: d, mountPath: /d, readOnly: true}]}]\n",
        );
        assert_eq!(check(&p_ro, &ro), Ok(()));
        let rw = Policy {
            host_paths: vec![HostPathRule {
                path: "/srv/data".into(),
                read_only: false,
            }],
            ..Policy::default()
        };
        assert_eq!(check(&p, &rw), Ok(()));
        // Prefix match is per path component, and `..` never matches.
        for bad in ["/srv/database", "/srv/data/../../etc", "srv/data"] {
            let p = spec(&format!(
                "  volumes: [{{name: d, hostPath: {{path: '{bad}'}}}}]\n  containers: [{{name: c, image: host}}]\n"
            ));
            assert_eq!(
                check(&p, &rw).unwrap_err().rule,
                "policy.hostPaths",
                "{bad}"
            );
        }
    }

    #[test]
    fn host_network() {
        let p = spec("  hostNetwork: true\n  containers: [{name: c, image: host}]\n");
        assert_eq!(check(&p, &Policy::default()), Ok(()));
        let pol = Policy {
            allow_host_network: false,
            ..Policy::default()
        };
        assert_eq!(check(&p, &pol).unwrap_err().rule, "policy.hostNetwork");
    }

    #[test]
    fn host_ipc_and_pid_need_the_node_to_allow_them() {
        for (field, rule) in [("hostIPC", "policy.hostIPC"), ("hostPID", "policy.hostPID")] {
            let p = spec(&format!(
                "  {field}: true\n  containers: [{{name: c, image: host}}]\n"
            ));
            assert_eq!(check(&p, &Policy::default()).unwrap_err().rule, rule);
            let pol = Policy {
                allow_host_ipc: true,
                allow_host_pid: true,
                ..Policy::default()
            };
            assert_eq!(check(&p, &pol), Ok(()));
        }
    }

    #[test]
    fn policy_parses_from_yaml() {
        let pol: Policy = serde_saphyr::from_str(
            "images: [host, rootfs]\nhostPaths: [{path: /srv, readOnly: true}]\nprivileged: true\nlocal: enforce\n",
        )
        .unwrap();
        assert_eq!(
            pol.allowed_image_kinds,
            vec![ImageKind::Host, ImageKind::Rootfs]
        );
        assert_eq!(pol.local, Local::Enforce);
        assert!(pol.allow_privileged);
        assert!(pol.allow_run_as_root);
        assert_eq!(pol.host_paths[0].path, "/srv");
    }
}
