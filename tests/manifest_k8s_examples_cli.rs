//! Every manifest of the Kubernetes documentation's Pod examples goes through `podunit check`, one
//! file at a time, as a process. The examples are not part of the repository: `PODUNIT_K8S_EXAMPLES`
//! names their `pods/` directory (`.ci/run` sets it to `../shared/testdata/k8s-examples/pods`).
//! Without it the suite says loudly that it did not run, and fails under `CI=true`.
//! The table below says what podunit does with each file, and why; docs/k8s-examples.md shows the
//! same table (this test keeps it in sync: `UPDATE_K8S_EXAMPLES=1` rewrites that section).
//!
//! Each file is checked twice:
//! - on a fresh host: empty root, nothing in the local image store (what a user sees first);
//! - with its images in the store (an empty root filesystem directory for every `image:` it names),
//!   which gets past the image lookup and shows what the translation itself makes of the pod.
//!
//! "renders" means `podunit check` exits 0; then `podunit render --output-dir` writes the units and
//! `systemd-analyze verify` accepts every one of them. "refused" lists the reasons: each error line
//! `podunit check` prints must contain one of them, and each must appear.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/verify.rs"]
mod verify;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Renders,
    Refused(&'static [&'static str]),
}
use Verdict::{Refused, Renders};

struct Case {
    /// Path below the examples' pods/ directory.
    file: &'static str,
    fresh: Verdict,
    with_images: Verdict,
    /// Why, for a person: what podunit cannot do, or what is wrong with the manifest.
    why: &'static str,
}

// Reasons, as substrings of what `podunit check` prints.
const NO_COMMAND: &str = "podunit does not read an image's entrypoint";
const UNKNOWN_FIELD: &str = "unknown field";
const NO_CLAIM: &str = "not found (no PersistentVolumeClaim of this name";
const NO_IMAGE_VOLUME: &str = "image volumes are not supported";
const NO_LOCALHOST_SECCOMP: &str = "\"Localhost\" profiles are not supported";
const BAD_YAML: &str = "not valid YAML or JSON";
const NODE_AFFINITY: &str = "refused as the kubelet refuses it (NodeAffinity)";
const OTHER_KIND: &str = "is not supported here";

const WHY_CLAIM: &str = "its claim is in a file of its own (alone: `persistentvolumeclaim not \
    found`); beside it, the pod runs on the claim's directory (tests/manifest_k8s_examples_cli.rs \
    checks the documentation's PV walkthrough as its three files together)";
const WHY_IMAGE: &str =
    "the image is not on the node yet: podunit-sync pulls it, then the pod starts";
const WHY_AFFINITY: &str = "its node selector or required node affinity asks for labels this node \
    does not have (the kubelet refuses it with NodeAffinity); its image is pulled when the pod starts";
const WHY_IMAGE_COMMAND: &str = "on a fresh host the image is pulled when the pod starts and \
    supplies the command; an image put in place by hand as a bare root filesystem has no \
    Entrypoint, so there no command is given";

#[rustfmt::skip]
const CASES: &[Case] = &[
    Case { file: "assigning-pods-to-nodes-affinity.yaml", fresh: Refused(&[NODE_AFFINITY]), with_images: Refused(&[NODE_AFFINITY, NO_COMMAND]), why: WHY_AFFINITY },
    Case { file: "commands.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "config/example-redis-config.yaml", fresh: Renders, with_images: Renders, why: "a ConfigMap only: nothing to run" },
    Case { file: "config/redis-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "emptydir-volume-mode.yaml", fresh: Refused(&[UNKNOWN_FIELD]), with_images: Refused(&[UNKNOWN_FIELD]), why: "`emptyDir.mode` is newer than the Kubernetes API podunit is built for (1.33): an unknown field is refused, not silently dropped" },
    Case { file: "image-volumes-subpath.yaml", fresh: Refused(&[NO_IMAGE_VOLUME]), with_images: Refused(&[NO_IMAGE_VOLUME]), why: "`image` volumes need a container runtime's image store; podunit has no storage drivers" },
    Case { file: "image-volumes.yaml", fresh: Refused(&[NO_IMAGE_VOLUME]), with_images: Refused(&[NO_IMAGE_VOLUME]), why: "`image` volumes need a container runtime's image store; podunit has no storage drivers" },
    Case { file: "init-containers.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "inject/configmap-envFrom.yaml", fresh: Renders, with_images: Renders, why: "a ConfigMap only: nothing to run" },
    Case { file: "inject/dapi-envars-container.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "inject/dapi-envars-pod.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "inject/dapi-volume-resources.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "inject/dapi-volume.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "inject/dependent-envars.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "inject/envFrom.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "inject/envars-file-container.yaml", fresh: Refused(&[BAD_YAML]), with_images: Refused(&[BAD_YAML]), why: "`\\'` in a double-quoted scalar is not a YAML 1.2 escape, so serde-saphyr refuses the file; go-yaml, which kubectl uses, accepts it (a compatibility gap). The example also uses `fileKeyRef`, newer than the 1.33 API" },
    Case { file: "inject/envars.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "inject/pod-multiple-secret-env-variable.yaml", fresh: Refused(&[BAD_YAML]), with_images: Refused(&[BAD_YAML]), why: "not valid YAML: a tab indents line 15 (and `env` would be a duplicate key)" },
    Case { file: "inject/pod-secret-envFrom.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "inject/pod-single-secret-env-variable.yaml", fresh: Refused(&["apiVersion is required"]), with_images: Refused(&["apiVersion is required"]), why: "the manifest has no `apiVersion`; the API server refuses it too" },
    Case { file: "inject/secret-envars-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "inject/secret-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "inject/secret.yaml", fresh: Renders, with_images: Renders, why: "a Secret only: nothing to run" },
    Case { file: "lifecycle-events.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "multi-container/adapter.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "multi-container/ambassador.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "multi-container/localhost.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "multi-container/resources.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "multi-container/shared-volume.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "multi-container/startup-coordination.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "pod-configmap-env-var-valueFrom.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "pod-configmap-envFrom.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "pod-configmap-volume-specific-key.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "pod-configmap-volume.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "pod-multiple-configmap-env-variable.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "pod-nginx-preferred-affinity.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-nginx-required-affinity.yaml", fresh: Refused(&[NODE_AFFINITY]), with_images: Refused(&[NODE_AFFINITY, NO_COMMAND]), why: WHY_AFFINITY },
    Case { file: "pod-nginx-specific-node.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-nginx.yaml", fresh: Refused(&[NODE_AFFINITY]), with_images: Refused(&[NODE_AFFINITY, NO_COMMAND]), why: WHY_AFFINITY },
    Case { file: "pod-projected-svc-token.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-rs.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-single-configmap-env-variable.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "pod-with-affinity-anti-affinity.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-with-affinity-preferred-weight.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-with-node-affinity-1.yaml", fresh: Refused(&[NODE_AFFINITY]), with_images: Refused(&[NODE_AFFINITY, NO_COMMAND]), why: WHY_AFFINITY },
    Case { file: "pod-with-node-affinity-2.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-with-node-affinity.yaml", fresh: Refused(&["Invalid value: list: must be an object"]), with_images: Refused(&["Invalid value: list: must be an object"]), why: "invalid manifest: `requiredDuringSchedulingIgnoredDuringExecution` must be a NodeSelector, not a list; the API server refuses it too" },
    Case { file: "pod-with-numeric-toleration.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-with-pod-affinity.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-with-scheduling-gates.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-with-toleration.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "pod-without-scheduling-gates.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "private-reg-pod.yaml", fresh: Refused(&["\"<your-private-image>\" is not a valid image reference", NO_COMMAND]), with_images: Refused(&["\"<your-private-image>\" is not a valid image reference", NO_COMMAND]), why: "a placeholder image reference (`<your-private-image>`) and no command" },
    Case { file: "probe/exec-liveness.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "probe/grpc-liveness.yaml", fresh: Refused(&[UNKNOWN_FIELD]), with_images: Refused(&[UNKNOWN_FIELD]), why: "typo in the example: the probe field is `grpc`, not `gRPC`" },
    Case { file: "probe/http-liveness.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "probe/pod-with-http-healthcheck.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "probe/pod-with-tcp-socket-healthcheck.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "probe/tcp-liveness-readiness.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "qos/qos-pod-2.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "qos/qos-pod-3.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "qos/qos-pod-4.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "qos/qos-pod-5.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "qos/qos-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/cpu-request-limit-2.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/cpu-request-limit.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/extended-resource-pod-2.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/extended-resource-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/memory-request-limit-2.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "resource/memory-request-limit-3.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "resource/memory-request-limit.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "resource/pod-level-cpu-request-limit.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/pod-level-memory-request-limit.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "resource/pod-level-pid-limit.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/pod-level-resize.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/pod-level-resource-managers-container-scope-mixed.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/pod-level-resource-managers-empty-shared-pool.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/pod-level-resource-managers-pod-scope-mixed.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/pod-level-resources.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "resource/pod-resize.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "restart-policy/restart-all-containers.yaml", fresh: Refused(&[UNKNOWN_FIELD]), with_images: Refused(&[UNKNOWN_FIELD]), why: "`restartPolicyRules` is newer than the Kubernetes API podunit is built for (1.33)" },
    Case { file: "security/apparmor/default-pod.yaml", fresh: Renders, with_images: Renders, why: "on a fresh host the image is pulled when the pod starts; the pod renders with a warning: `appArmorProfile` is ignored" },
    Case { file: "security/apparmor/hello-apparmor.yaml", fresh: Renders, with_images: Renders, why: "on a fresh host the image is pulled when the pod starts; the pod renders with a warning: `appArmorProfile` is ignored" },
    Case { file: "security/hello-apparmor-2.yaml", fresh: Renders, with_images: Renders, why: "on a fresh host the image is pulled when the pod starts; the pod renders with a warning: `appArmorProfile` is ignored" },
    Case { file: "security/hello-apparmor.yaml", fresh: Renders, with_images: Renders, why: "on a fresh host the image is pulled when the pod starts; the pod renders, and its AppArmor annotation (`container.apparmor.security.beta.kubernetes.io/hello`) is ignored without a warning" },
    Case { file: "security/seccomp/alpha/audit-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "security/seccomp/alpha/default-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "security/seccomp/alpha/fine-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "security/seccomp/alpha/violation-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "security/seccomp/fields.yaml", fresh: Refused(&[NO_LOCALHOST_SECCOMP]), with_images: Refused(&[NO_COMMAND, NO_LOCALHOST_SECCOMP]), why: "a `Localhost` seccomp profile is asked for: podunit only knows RuntimeDefault and Unconfined" },
    Case { file: "security/seccomp/ga/audit-pod.yaml", fresh: Refused(&[NO_LOCALHOST_SECCOMP]), with_images: Refused(&[NO_COMMAND, NO_LOCALHOST_SECCOMP]), why: "a `Localhost` seccomp profile is asked for: podunit only knows RuntimeDefault and Unconfined" },
    Case { file: "security/seccomp/ga/default-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "security/seccomp/ga/fine-pod.yaml", fresh: Refused(&[NO_LOCALHOST_SECCOMP]), with_images: Refused(&[NO_COMMAND, NO_LOCALHOST_SECCOMP]), why: "a `Localhost` seccomp profile is asked for: podunit only knows RuntimeDefault and Unconfined" },
    Case { file: "security/seccomp/ga/violation-pod.yaml", fresh: Refused(&[NO_LOCALHOST_SECCOMP]), with_images: Refused(&[NO_COMMAND, NO_LOCALHOST_SECCOMP]), why: "a `Localhost` seccomp profile is asked for: podunit only knows RuntimeDefault and Unconfined" },
    Case { file: "security/seccomp/kind.yaml", fresh: Refused(&[OTHER_KIND]), with_images: Refused(&[OTHER_KIND]), why: "a kind cluster configuration, not a Pod" },
    Case { file: "security/security-context-2.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "security/security-context-3.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "security/security-context-4.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "security/security-context-5.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "security/security-context-6.yaml", fresh: Renders, with_images: Renders, why: "on a fresh host the image is pulled when the pod starts; the pod renders with a warning: `supplementalGroupsPolicy: Strict` is not honoured" },
    Case { file: "security/security-context-7.yaml", fresh: Refused(&[UNKNOWN_FIELD]), with_images: Refused(&[UNKNOWN_FIELD]), why: "`securityContext.cgroupOptions` is not in the Kubernetes API podunit is built for (1.33)" },
    Case { file: "security/security-context.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "share-process-namespace.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "simple-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "storage/expandable-pvc-pod.yaml", fresh: Refused(&[NO_CLAIM]), with_images: Refused(&[NO_CLAIM]), why: WHY_CLAIM },
    Case { file: "storage/expandable-pvc.yaml", fresh: Renders, with_images: Renders, why: "a PersistentVolumeClaim only: provisioned (local-path) when a pod uses it" },
    Case { file: "storage/projected-clustertrustbundle.yaml", fresh: Refused(&["no volume named \"token-vol\" in spec.volumes"]), with_images: Refused(&["no volume named \"token-vol\" in spec.volumes"]), why: "invalid manifest: the mount names volume `token-vol`, the pod defines `root-certificates-vol`" },
    Case { file: "storage/projected-podcertificate.yaml", fresh: Refused(&[UNKNOWN_FIELD]), with_images: Refused(&[UNKNOWN_FIELD]), why: "`podCertificate` projections are newer than the Kubernetes API podunit is built for (1.33)" },
    Case { file: "storage/projected-secret-downwardapi-configmap.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "storage/projected-secrets-nondefault-permission-mode.yaml", fresh: Renders, with_images: Renders, why: WHY_IMAGE },
    Case { file: "storage/projected-service-account-token.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "storage/projected.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "storage/pv-claim.yaml", fresh: Renders, with_images: Renders, why: "a PersistentVolumeClaim only: bound to a PersistentVolume of class manual when one is beside it" },
    Case { file: "storage/pv-duplicate.yaml", fresh: Refused(&[NO_CLAIM]), with_images: Refused(&[NO_CLAIM, NO_COMMAND]), why: WHY_CLAIM },
    Case { file: "storage/pv-pod-backup.yaml", fresh: Refused(&[NO_CLAIM]), with_images: Refused(&[NO_CLAIM, NO_COMMAND]), why: WHY_CLAIM },
    Case { file: "storage/pv-pod.yaml", fresh: Refused(&[NO_CLAIM]), with_images: Refused(&[NO_CLAIM, NO_COMMAND]), why: WHY_CLAIM },
    Case { file: "storage/pv-volume.yaml", fresh: Renders, with_images: Renders, why: "a hostPath PersistentVolume only: bound to a matching claim beside it" },
    Case { file: "storage/redis.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "topology-spread-constraints/one-constraint-with-nodeaffinity.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "topology-spread-constraints/one-constraint.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "topology-spread-constraints/two-constraints.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "two-container-pod.yaml", fresh: Renders, with_images: Refused(&[NO_COMMAND]), why: WHY_IMAGE_COMMAND },
    Case { file: "user-namespaces-stateless.yaml", fresh: Renders, with_images: Renders, why: "on a fresh host the image is pulled when the pod starts; the pod renders with a warning: `hostUsers: false` is ignored (no user namespaces)" },
];

/// Names the corpus; the variable's name is what `.ci/run` sets.
const CORPUS_VAR: &str = "PODUNIT_K8S_EXAMPLES";

/// The examples' directory, or None (said on the terminal) when the corpus is not configured
/// outside CI. Under `CI=true` a missing corpus is a failure: CI must run this suite.
fn examples_dir() -> Option<PathBuf> {
    let Some(dir) = std::env::var_os(CORPUS_VAR).filter(|v| !v.is_empty()) else {
        let why = format!(
            "tests/manifest_k8s_examples_cli.rs DID NOT RUN: {CORPUS_VAR} is not set. It names the Kubernetes \
             Pod examples (shared/testdata/k8s-examples/pods beside the repository; .ci/run sets it)"
        );
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        // Straight to the terminal: the test harness captures println! of passing tests.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "\n*** {why} ***\n");
        return None;
    };
    let dir = PathBuf::from(dir);
    assert!(
        dir.is_dir(),
        "{CORPUS_VAR}={} is not a directory: it must name the Kubernetes Pod examples \
         (shared/testdata/k8s-examples/pods)",
        dir.display()
    );
    // Canonical: podunit names the file in SourcePath=, which must be a normalized absolute path.
    Some(dir.canonicalize().unwrap())
}

/// Every file below `dir`, as paths relative to it, sorted.
fn list_files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "podunit-k8s-examples-{}-{}",
        std::process::id(),
        name.replace('/', "_")
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The image references of every container of every pod in the file.
fn image_refs(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap_or_default();
    let mut refs = Vec::new();
    for doc in &docs {
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            if let Some(cs) = doc["spec"][list].as_array() {
                refs.extend(
                    cs.iter()
                        .filter_map(|c| c["image"].as_str())
                        .map(str::to_string),
                );
            }
        }
    }
    refs
}

/// A root whose local image store holds an (empty) root filesystem for each reference.
fn root_with_images(root: &Path, refs: &[String]) {
    for r in refs {
        if let Some(dir) = podunit::translate::image::store_path(r) {
            std::fs::create_dir_all(root.join(dir.trim_start_matches('/')).join("rootfs")).unwrap();
        }
    }
}

struct Outcome {
    verdict: Verdict,
    /// The error lines `podunit check` printed.
    errors: Vec<String>,
}

/// Runs `podunit check FILE` under `root` and turns what it printed into a verdict, checked against
/// the expected one (the reasons of a refusal are matched, not copied).
fn check(file: &Path, root: &Path, expected: Verdict) -> Result<Outcome, String> {
    let o = Command::new(env!("CARGO_BIN_EXE_podunit"))
        .arg("check")
        .arg(file)
        .env("PODUNIT_ROOT", root)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    if stderr.contains("panicked") || o.status.code().is_none() {
        return Err(format!("podunit check crashed: {}\n{stderr}", o.status));
    }
    let errors: Vec<String> = stdout
        .lines()
        .filter(|l| !l.contains(": warning: ") && !l.contains(": note: "))
        .map(str::to_string)
        .collect();
    match (o.status.code(), errors.is_empty()) {
        (Some(0), true) => Ok(Outcome {
            verdict: Renders,
            errors,
        }),
        (Some(1), false) => {
            let verdict = match expected {
                Refused(reasons) => {
                    let unmatched: Vec<&String> = errors
                        .iter()
                        .filter(|e| !reasons.iter().any(|r| e.contains(r)))
                        .collect();
                    let unseen: Vec<&&str> = reasons
                        .iter()
                        .filter(|r| !errors.iter().any(|e| e.contains(*r)))
                        .collect();
                    if unmatched.is_empty() && unseen.is_empty() {
                        expected
                    } else {
                        // Not the expected refusal; the caller reports the lines.
                        Refused(&[])
                    }
                }
                Renders => Refused(&[]),
            };
            Ok(Outcome { verdict, errors })
        }
        (code, _) => Err(format!(
            "podunit check exited {code:?} with {} error line(s):\n{stdout}{stderr}",
            errors.len()
        )),
    }
}

/// `podunit render FILE --output-dir D` under `root`, then `systemd-analyze verify` over the units,
/// in a root holding systemd's own units and stand-ins for the programs the units run (as the
/// golden tests do it). Returns how many units were verified.
fn render_and_verify(file: &Path, root: &Path, scratch: &Path) -> Result<usize, String> {
    let out = scratch.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_podunit"))
        .arg("render")
        .arg(file)
        .arg("--output-dir")
        .arg(&out)
        .env("PODUNIT_ROOT", root)
        .output()
        .unwrap();
    if !o.status.success() {
        return Err(format!(
            "podunit render failed ({}):\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let units = verify::units_in(&out);
    if units.is_empty() {
        return Ok(0);
    }
    let vroot = scratch.join("verify");
    verify::copy_tree(root, &vroot);
    verify::verify_units(&vroot, &out, &units)?;
    Ok(units.len())
}

/// Runs one file in one setting; a mismatch or failure is described in the returned string.
fn run_one(file: &Path, name: &str, setting: &str, expected: Verdict) -> (Option<String>, usize) {
    let scratch = tempdir(&format!("{name}-{setting}"));
    let root = scratch.join("root");
    std::fs::create_dir_all(&root).unwrap();
    if setting == "with-images" {
        root_with_images(&root, &image_refs(file));
    }
    let result = match check(file, &root, expected) {
        Err(e) => Some(format!("{name} ({setting}): {e}")),
        Ok(out) if out.verdict != expected => Some(format!(
            "{name} ({setting}): expected {expected:?}, podunit check printed:\n  {}",
            if out.errors.is_empty() {
                "(no error: renders)".to_string()
            } else {
                out.errors.join("\n  ")
            }
        )),
        Ok(_) if expected == Renders => match render_and_verify(file, &root, &scratch) {
            Ok(n) => {
                let _ = std::fs::remove_dir_all(&scratch);
                return (None, n);
            }
            Err(e) => Some(format!("{name} ({setting}): {e}")),
        },
        Ok(_) => None,
    };
    let _ = std::fs::remove_dir_all(&scratch);
    (result, 0)
}

#[test]
fn every_k8s_example_has_its_documented_verdict() {
    let Some(dir) = examples_dir() else {
        return;
    };
    let files = list_files(&dir);
    let table: BTreeMap<&str, &Case> = CASES.iter().map(|c| (c.file, c)).collect();
    assert_eq!(table.len(), CASES.len(), "a file is listed twice in CASES");
    let mut failures = Vec::new();
    for f in &files {
        if !table.contains_key(f.as_str()) {
            failures.push(format!(
                "{f}: new file, not in the table: add a row to CASES"
            ));
        }
    }
    for name in table.keys() {
        if !files.iter().any(|f| f == name) {
            failures.push(format!(
                "{name}: in the table but no longer in {}",
                dir.display()
            ));
        }
    }
    let mut verified = 0;
    for case in CASES.iter().filter(|c| files.iter().any(|f| f == c.file)) {
        let file = dir.join(case.file);
        for (setting, expected) in [("fresh", case.fresh), ("with-images", case.with_images)] {
            let (failure, n) = run_one(&file, case.file, setting, expected);
            failures.extend(failure);
            verified += n;
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatch(es) with the table:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(verified > 0, "no unit was verified");
}

/// The table as docs/k8s-examples.md shows it.
fn markdown_table() -> String {
    let show = |v: Verdict| match v {
        Renders => "renders".to_string(),
        Refused(rs) => format!(
            "refused: {}",
            rs.iter()
                .map(|r| format!("`{}`", r.replace('|', "\\|")))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut s =
        String::from("| file | fresh host | images in the store | why |\n|---|---|---|---|\n");
    for c in CASES {
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            c.file,
            show(c.fresh),
            show(c.with_images),
            c.why.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    s
}

const DOC: &str = "docs/k8s-examples.md";
const BEGIN: &str = "<!-- table: generated by tests/manifest_k8s_examples_cli.rs, UPDATE_K8S_EXAMPLES=1 rewrites it -->\n";
const END: &str = "<!-- end of table -->\n";

#[test]
fn docs_show_the_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let want = format!("{BEGIN}{}{END}", markdown_table());
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        panic!("{DOC} has no generated table (markers {BEGIN:?} ... {END:?})");
    };
    let current = &text[b..e + END.len()];
    if current == want {
        return;
    }
    if std::env::var_os("UPDATE_K8S_EXAMPLES").is_some() {
        let new = format!("{}{want}{}", &text[..b], &text[e + END.len()..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    panic!(
        "{DOC}: the table differs from tests/manifest_k8s_examples_cli.rs; run with UPDATE_K8S_EXAMPLES=1"
    );
}

/// The documentation's PersistentVolume walkthrough, as its three files: checked together the
/// claim binds to the volume and the pod passes (it waits for its image only; alone, each of
/// the pod's files is refused with `persistentvolumeclaim not found`).
#[test]
fn the_persistent_volume_walkthrough_passes_as_its_three_files() {
    let Some(dir) = examples_dir() else {
        return;
    };
    let scratch = tempdir("pv-walkthrough");
    let root = scratch.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let files: Vec<PathBuf> = ["pv-volume.yaml", "pv-claim.yaml", "pv-pod.yaml"]
        .iter()
        .map(|f| dir.join("storage").join(f))
        .collect();
    let o = Command::new(env!("CARGO_BIN_EXE_podunit"))
        .arg("check")
        .args(&files)
        .env("PODUNIT_ROOT", &root)
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("0 error(s), 0 warning(s), 1 image(s) to pull when the pods start"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}
