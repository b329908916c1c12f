//! Validation of a parsed pod, as the API server's would refuse it, plus what podunit cannot honour.
//! Every problem carries its field path. Above the translation and the probes' spec: what podunit
//! can map is theirs to say.

use crate::common::diag::{FieldPath, Problem};
use crate::common::quantity;
use crate::escape::is_env_name;
use crate::manifest::PodEntry;
use crate::manifest::names::{is_dns1123_label, is_dns1123_subdomain};
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, Volume, VolumeMount};
use std::collections::{BTreeMap, BTreeSet};

/// Collects problems about one pod.
struct Check<'a> {
    entry: &'a PodEntry,
    out: Vec<Problem>,
}

impl Check<'_> {
    fn err(&mut self, path: &FieldPath, msg: impl Into<String>) {
        self.out.push(
            Problem::error(&self.entry.file, msg)
                .pod(self.entry.key())
                .at(path.to_string()),
        );
    }

    fn warn(&mut self, path: &FieldPath, msg: impl Into<String>) {
        self.out.push(
            Problem::warning(&self.entry.file, msg)
                .pod(self.entry.key())
                .at(path.to_string()),
        );
    }
}

impl Check<'_> {
    /// A probe's or hook's problem, whose dotted path (`httpGet.port`) is below `base`.
    fn below(&mut self, base: &FieldPath, pr: crate::probe::handler::Problem) {
        let mut path = base.clone();
        for part in pr.path.split('.').filter(|s| !s.is_empty()) {
            path = path.field(part);
        }
        if pr.error {
            self.err(&path, pr.message);
        } else {
            self.warn(&path, pr.message);
        }
    }
}

/// All problems of a pod; the pod is refused when any is an error.
pub fn validate(entry: &PodEntry) -> Vec<Problem> {
    let mut c = Check {
        entry,
        out: Vec::new(),
    };
    let pod: &Pod = &entry.pod;
    let meta = FieldPath::new("metadata");
    match pod.metadata.name.as_deref() {
        None | Some("") => c.err(&meta.field("name"), "required"),
        Some(n) if !is_dns1123_subdomain(n) => c.err(
            &meta.field("name"),
            format!("{n:?} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253)"),
        ),
        _ => {}
    }
    // The UID names the pod's directories (/var/lib/podunit/pods/<uid>, /run/podunit/pods/<uid>):
    // a UUID's characters only, so it can never be `..` or hold a `/`.
    let uid = entry.uid();
    if uid.is_empty()
        || uid.len() > 128
        || !uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        c.err(
            &meta.field("uid"),
            format!("{uid:?} is not a UID (letters, digits and '-', as in a UUID)"),
        );
    }
    let ns = entry.namespace();
    if !is_dns1123_label(ns) {
        c.err(
            &meta.field("namespace"),
            format!("{ns:?} is not a DNS-1123 label (lowercase letters, digits, '-', at most 63)"),
        );
    }
    let Some(spec) = &pod.spec else {
        c.err(&FieldPath::new("spec"), "required");
        return c.out;
    };
    let sp = FieldPath::new("spec");
    if spec.containers.is_empty() {
        c.err(
            &sp.field("containers"),
            "at least one container is required",
        );
    }
    if let Some(p) = spec.restart_policy.as_deref()
        && !matches!(p, "Always" | "OnFailure" | "Never")
    {
        c.err(
            &sp.field("restartPolicy"),
            format!("{p:?} is not one of Always, OnFailure, Never"),
        );
    }
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        c.err(
            &sp.field("terminationGracePeriodSeconds"),
            "must be 0 or more",
        );
    }

    let volumes = check_volumes(
        &mut c,
        spec.volumes.as_deref().unwrap_or_default(),
        &sp.field("volumes"),
    );
    let mut names = BTreeSet::new();
    let lists: [(&str, &[Container]); 2] = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
        ("containers", &spec.containers),
    ];
    for (list, containers) in lists {
        for (i, ctr) in containers.iter().enumerate() {
            let p = sp.field(list).index(i);
            if !names.insert(ctr.name.clone()) {
                c.err(
                    &p.field("name"),
                    format!("container name {:?} is used twice in this pod", ctr.name),
                );
            }
            check_container(&mut c, ctr, &p, list == "initContainers", &volumes);
        }
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        c.err(
            &sp.field("ephemeralContainers"),
            "ephemeral containers are not supported",
        );
    }
    if let Some(r) = &spec.resources {
        check_resources(&mut c, r, &sp.field("resources"));
    }
    check_not_honoured(&mut c, spec, &sp);
    check_dns(&mut c, spec, &sp);
    for key in pod.metadata.annotations.iter().flatten().map(|(k, _)| k) {
        if key.starts_with("container.apparmor.security.beta.kubernetes.io/")
            || key.starts_with("seccomp.security.alpha.kubernetes.io/")
            || key.starts_with("container.seccomp.security.alpha.kubernetes.io/")
        {
            c.warn(
                &meta.field("annotations").key(key),
                "ignored: use securityContext (seccompProfile; AppArmor is not supported)",
            );
        }
    }
    c.out
}

/// `dnsPolicy` and `dnsConfig` as the API server's `validateDNSPolicy` and
/// `validatePodDNSConfig` check them.
fn check_dns(c: &mut Check<'_>, spec: &k8s_openapi::api::core::v1::PodSpec, sp: &FieldPath) {
    const POLICIES: [&str; 4] = ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"];
    let policy = spec.dns_policy.as_deref();
    if let Some(p) = policy.filter(|p| !POLICIES.contains(p)) {
        c.err(
            &sp.field("dnsPolicy"),
            format!(
                "Unsupported value: {p:?}: supported values: \"ClusterFirst\", \
                 \"ClusterFirstWithHostNet\", \"Default\", \"None\""
            ),
        );
    }
    let cp = sp.field("dnsConfig");
    let Some(cfg) = &spec.dns_config else {
        if policy == Some("None") {
            c.err(
                &cp,
                "Required value: must provide `dnsConfig` when `dnsPolicy` is None",
            );
        }
        return;
    };
    let servers = cfg.nameservers.as_deref().unwrap_or_default();
    if servers.len() > 3 {
        c.err(
            &cp.field("nameservers"),
            format!("Invalid value: {servers:?}: must not have more than 3 nameservers"),
        );
    }
    for (i, ns) in servers.iter().enumerate() {
        if ns.parse::<std::net::IpAddr>().is_err() {
            c.err(
                &cp.field("nameservers").index(i),
                format!("Invalid value: {ns:?}: must be a valid IP address"),
            );
        }
    }
    if policy == Some("None") && servers.is_empty() {
        c.err(
            &cp.field("nameservers"),
            "Required value: must provide at least one DNS nameserver when `dnsPolicy` is None",
        );
    }
    let searches = cfg.searches.as_deref().unwrap_or_default();
    if searches.len() > 32 {
        c.err(
            &cp.field("searches"),
            format!("Invalid value: {searches:?}: must not have more than 32 search paths"),
        );
    }
    if searches.join(" ").len() > 2048 {
        c.err(
            &cp.field("searches"),
            format!(
                "Invalid value: {searches:?}: must not have more than 2048 characters (including \
                 spaces) in the search list"
            ),
        );
    }
    for (i, d) in searches.iter().enumerate() {
        // "." is the root domain; a trailing dot is allowed.
        if d != "." && !is_dns1123_subdomain(d.strip_suffix('.').unwrap_or(d)) {
            c.err(
                &cp.field("searches").index(i),
                format!(
                    "Invalid value: {d:?}: a lowercase RFC 1123 subdomain must consist of lower \
                     case alphanumeric characters, '-' or '.', and must start and end with an \
                     alphanumeric character"
                ),
            );
        }
    }
    for (i, o) in cfg.options.iter().flatten().enumerate() {
        if o.name.as_deref().is_none_or(str::is_empty) {
            c.err(
                &cp.field("options").index(i),
                "Required value: Option.Name must not be empty",
            );
        }
    }
}

/// The kubelet ignores `windowsOptions` on Linux; podunit says so.
const WINDOWS_ONLY: &str = "ignored: Windows options have no effect on Linux";

/// Fields podunit accepts but cannot honour (warnings) or must not pretend to honour (errors).
/// docs/mapping.md gives each its verdict; harmless ones (ports, imagePullPolicy, scheduling)
/// are not reported.
fn check_not_honoured(
    c: &mut Check<'_>,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    sp: &FieldPath,
) {
    // hostname, subdomain, setHostnameAsFQDN and hostAliases depend on the node's network
    // mode: translation says where they are not honoured.
    if spec.host_users == Some(false) {
        c.warn(
            &sp.field("hostUsers"),
            "ignored: user namespaces are not supported; IDs are the host's",
        );
    }
    if spec.share_process_namespace == Some(true) && spec.host_pid == Some(true) {
        // The API server's own validation.
        c.err(
            &sp.field("shareProcessNamespace"),
            "ShareProcessNamespace and HostPID cannot both be enabled",
        );
    }
    if spec.active_deadline_seconds.is_some() {
        c.warn(&sp.field("activeDeadlineSeconds"), "not enforced yet");
    }
    if spec.readiness_gates.as_ref().is_some_and(|g| !g.is_empty()) {
        c.warn(
            &sp.field("readinessGates"),
            "ignored: readiness comes from the containers only",
        );
    }
    if spec.resource_claims.as_ref().is_some_and(|g| !g.is_empty()) {
        c.err(
            &sp.field("resourceClaims"),
            "dynamic resource allocation is not supported",
        );
    }
    if let Some(os) = &spec.os
        && os.name != "linux"
    {
        c.err(
            &sp.field("os").field("name"),
            format!("{:?}: this node runs Linux", os.name),
        );
    }
    if let Some(psc) = &spec.security_context {
        let p = sp.field("securityContext");
        if psc.sysctls.as_ref().is_some_and(|s| !s.is_empty()) {
            c.err(
                &p.field("sysctls"),
                "not supported: without a network namespace of its own they would change the host",
            );
        }
        if psc.supplemental_groups_policy.as_deref() == Some("Strict") {
            c.warn(
                &p.field("supplementalGroupsPolicy"),
                "Strict is not honoured: the user database's groups are added",
            );
        }
        if psc.se_linux_options.is_some() {
            c.warn(&p.field("seLinuxOptions"), "ignored: no SELinux labelling");
        }
        if psc.app_armor_profile.is_some() {
            c.warn(&p.field("appArmorProfile"), "ignored: no AppArmor profiles");
        }
        if psc.windows_options.is_some() {
            c.warn(&p.field("windowsOptions"), WINDOWS_ONLY);
        }
    }
    for (list, containers) in [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
        ("containers", &spec.containers[..]),
    ] {
        for (i, ctr) in containers.iter().enumerate() {
            let p = sp.field(list).index(i);
            if ctr.volume_devices.as_ref().is_some_and(|d| !d.is_empty()) {
                c.err(&p.field("volumeDevices"), "block volumes are not supported");
            }
            if let Some(sc) = &ctr.security_context {
                let sp = p.field("securityContext");
                if sc.se_linux_options.is_some() {
                    c.warn(&sp.field("seLinuxOptions"), "ignored: no SELinux labelling");
                }
                if sc.app_armor_profile.is_some() {
                    c.warn(
                        &sp.field("appArmorProfile"),
                        "ignored: no AppArmor profiles",
                    );
                }
                if sc.windows_options.is_some() {
                    c.warn(&sp.field("windowsOptions"), WINDOWS_ONLY);
                }
                if sc.proc_mount.as_deref() == Some("Unmasked") {
                    c.warn(
                        &sp.field("procMount"),
                        "ignored: /proc is masked as for Default",
                    );
                }
            }
            for (field, map) in [
                (
                    "limits",
                    ctr.resources.as_ref().and_then(|r| r.limits.as_ref()),
                ),
                (
                    "requests",
                    ctr.resources.as_ref().and_then(|r| r.requests.as_ref()),
                ),
            ] {
                if map.is_some_and(|m| m.contains_key("ephemeral-storage")) {
                    c.warn(
                        &p.field("resources").field(field).key("ephemeral-storage"),
                        "not enforced",
                    );
                }
            }
        }
    }
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if let Some(e) = &v.empty_dir {
            let p = sp.field("volumes").index(i).field("emptyDir");
            match e.medium.as_deref() {
                None | Some("") | Some("Memory") => {}
                Some(m) => c.err(
                    &p.field("medium"),
                    format!("{m:?} is not supported (\"\" or Memory)"),
                ),
            }
            if e.size_limit.is_some() {
                c.warn(&p.field("sizeLimit"), "not enforced yet");
            }
        }
    }
}

fn check_container(
    c: &mut Check<'_>,
    ctr: &Container,
    p: &FieldPath,
    init: bool,
    volumes: &BTreeSet<String>,
) {
    if !is_dns1123_label(&ctr.name) {
        c.err(
            &p.field("name"),
            format!(
                "{:?} is not a DNS-1123 label (lowercase letters, digits, '-', at most 63)",
                ctr.name
            ),
        );
    }
    match ctr.image.as_deref() {
        None | Some("") => c.err(
            &p.field("image"),
            "required (use `host` to run on the host's root filesystem)",
        ),
        _ => {}
    }
    if let Some(rp) = ctr.restart_policy.as_deref() {
        if !init {
            c.err(
                &p.field("restartPolicy"),
                "only init containers may set a restartPolicy",
            );
        } else if rp != "Always" {
            c.err(
                &p.field("restartPolicy"),
                format!("{rp:?}: the only restartPolicy of an init container is Always"),
            );
        }
    }
    let mut env_seen = BTreeMap::new();
    for (i, e) in ctr.env.as_deref().unwrap_or_default().iter().enumerate() {
        check_env(c, e, &p.field("env").index(i));
        env_seen.insert(e.name.clone(), i);
    }
    for (i, ef) in ctr
        .env_from
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let ep = p.field("envFrom").index(i);
        match (&ef.config_map_ref, &ef.secret_ref) {
            (Some(_), Some(_)) | (None, None) => {
                c.err(&ep, "exactly one of configMapRef and secretRef is required")
            }
            _ => {}
        }
        if let Some(prefix) = ef.prefix.as_deref()
            && !prefix.is_empty()
            && !is_env_name(&format!("{prefix}X"))
        {
            c.err(
                &ep.field("prefix"),
                format!("{prefix:?} does not start a valid environment variable name"),
            );
        }
    }
    let mut mount_paths = BTreeSet::new();
    for (i, m) in crate::translate::volumes::mounts(ctr) {
        check_mount(c, m, &p.field("volumeMounts").index(i), volumes);
        if !mount_paths.insert(m.mount_path.trim_end_matches('/').to_string()) {
            c.err(
                &p.field("volumeMounts").index(i).field("mountPath"),
                format!("{:?} is mounted twice", m.mount_path),
            );
        }
    }
    if let Some(r) = &ctr.resources {
        check_resources(c, r, &p.field("resources"));
    }
    if let Some(wd) = ctr.working_dir.as_deref()
        && !wd.is_empty()
        && !wd.starts_with('/')
    {
        c.err(&p.field("workingDir"), "must be an absolute path");
    }
    for (kind, pr) in
        crate::probe::spec::check(ctr, init && ctr.restart_policy.as_deref() != Some("Always"))
    {
        c.below(&p.field(kind.field()), pr);
    }
    if ctr.stdin == Some(true) || ctr.tty == Some(true) {
        c.warn(
            &p.field(if ctr.tty == Some(true) {
                "tty"
            } else {
                "stdin"
            }),
            "ignored: containers have no terminal or stdin",
        );
    }
    if let Some(lc) = &ctr.lifecycle {
        // The API server checks a sleep against the pod's grace period as written (default 30).
        let grace = c
            .entry
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        for (field, h) in [("postStart", &lc.post_start), ("preStop", &lc.pre_stop)] {
            let Some(h) = h else { continue };
            for pr in crate::probe::hook::check(ctr, h, grace) {
                c.below(&p.field("lifecycle").field(field), pr);
            }
        }
        if init
            && (lc.post_start.is_some() || lc.pre_stop.is_some())
            && ctr.restart_policy.is_none()
        {
            c.err(
                &p.field("lifecycle"),
                "init containers may not have lifecycle hooks",
            );
        }
    }
}

fn check_env(c: &mut Check<'_>, e: &EnvVar, p: &FieldPath) {
    if !is_env_name(&e.name) {
        c.err(
            &p.field("name"),
            format!(
                "{:?} is not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
                e.name
            ),
        );
    }
    let Some(vf) = &e.value_from else { return };
    if e.value.as_deref().is_some_and(|v| !v.is_empty()) {
        c.err(&p.field("valueFrom"), "may not be set together with value");
    }
    let n = [
        vf.field_ref.is_some(),
        vf.resource_field_ref.is_some(),
        vf.config_map_key_ref.is_some(),
        vf.secret_key_ref.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if n != 1 {
        c.err(&p.field("valueFrom"), "exactly one of fieldRef, resourceFieldRef, configMapKeyRef and secretKeyRef is required");
    }
    if let Some(f) = &vf.field_ref
        && crate::translate::env::field_ref_supported(&f.field_path).is_none()
    {
        c.err(
            &p.field("valueFrom").field("fieldRef").field("fieldPath"),
            format!("{:?} is not a supported field", f.field_path),
        );
    }
}

fn check_volumes(c: &mut Check<'_>, volumes: &[Volume], p: &FieldPath) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let vp = p.index(i);
        if !is_dns1123_label(&v.name) {
            c.err(
                &vp.field("name"),
                format!("{:?} is not a DNS-1123 label", v.name),
            );
        }
        if !names.insert(v.name.clone()) {
            c.err(
                &vp.field("name"),
                format!("volume name {:?} is used twice", v.name),
            );
        }
        if let Err((field, msg)) = crate::translate::volumes::kind_of(v) {
            c.err(&vp.field(&field), msg);
        }
        if let Some(h) = &v.host_path {
            if !h.path.starts_with('/') || h.path.split('/').any(|s| s == "..") {
                c.err(
                    &vp.field("hostPath").field("path"),
                    "must be an absolute path without '..'",
                );
            }
            if let Some(t) = h.type_.as_deref()
                && !matches!(
                    t,
                    "" | "DirectoryOrCreate"
                        | "Directory"
                        | "FileOrCreate"
                        | "File"
                        | "Socket"
                        | "CharDevice"
                        | "BlockDevice"
                )
            {
                c.err(
                    &vp.field("hostPath").field("type"),
                    format!("{t:?} is not a hostPath type"),
                );
            }
        }
        if let Some(e) = &v.empty_dir
            && let Some(q) = &e.size_limit
            && let Err(err) = quantity::bytes(&q.0)
        {
            c.err(&vp.field("emptyDir").field("sizeLimit"), err.to_string());
        }
        for (field, items) in [
            (
                "configMap",
                v.config_map.as_ref().and_then(|s| s.items.as_ref()),
            ),
            ("secret", v.secret.as_ref().and_then(|s| s.items.as_ref())),
        ] {
            for (j, item) in items
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                check_rel_path(
                    c,
                    &item.path,
                    &vp.field(field).field("items").index(j).field("path"),
                );
            }
        }
        if let Some(d) = &v.downward_api {
            for (j, item) in d.items.as_deref().unwrap_or_default().iter().enumerate() {
                check_rel_path(
                    c,
                    &item.path,
                    &vp.field("downwardAPI")
                        .field("items")
                        .index(j)
                        .field("path"),
                );
            }
        }
        for (field, mode) in [
            (
                "configMap",
                v.config_map.as_ref().and_then(|s| s.default_mode),
            ),
            ("secret", v.secret.as_ref().and_then(|s| s.default_mode)),
            (
                "downwardAPI",
                v.downward_api.as_ref().and_then(|s| s.default_mode),
            ),
            (
                "projected",
                v.projected.as_ref().and_then(|s| s.default_mode),
            ),
        ] {
            if let Some(m) = mode
                && !(0..=0o777).contains(&m)
            {
                c.err(
                    &vp.field(field).field("defaultMode"),
                    format!("{m} is not a file mode (0 to 0777)"),
                );
            }
        }
    }
    names
}

fn check_rel_path(c: &mut Check<'_>, path: &str, p: &FieldPath) {
    if path.is_empty() || path.starts_with('/') || path.split('/').any(|s| s == "..") {
        c.err(p, format!("{path:?} must be a relative path without '..'"));
    }
}

fn check_mount(c: &mut Check<'_>, m: &VolumeMount, p: &FieldPath, volumes: &BTreeSet<String>) {
    if !volumes.contains(&m.name) {
        c.err(
            &p.field("name"),
            format!("no volume named {:?} in spec.volumes", m.name),
        );
    }
    if !m.mount_path.starts_with('/') {
        c.err(
            &p.field("mountPath"),
            format!("{:?} must be an absolute path", m.mount_path),
        );
    } else if m.mount_path.split('/').any(|s| s == "..") {
        c.err(
            &p.field("mountPath"),
            format!("{:?} must not contain '..'", m.mount_path),
        );
    } else if m.mount_path.contains(':') {
        c.err(
            &p.field("mountPath"),
            format!("{:?} must not contain ':'", m.mount_path),
        );
    }
    if let Some(sp) = m.sub_path.as_deref()
        && !sp.is_empty()
    {
        check_rel_path(c, sp, &p.field("subPath"));
    }
    if m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()) {
        c.err(&p.field("subPathExpr"), "not supported; use subPath");
    }
    if let Some(mp) = m.mount_propagation.as_deref()
        && mp != "None"
    {
        c.warn(
            &p.field("mountPropagation"),
            format!("{mp:?} is ignored: mounts are private to the container"),
        );
    }
}

fn check_resources(
    c: &mut Check<'_>,
    r: &k8s_openapi::api::core::v1::ResourceRequirements,
    p: &FieldPath,
) {
    for (field, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (k, q) in map.iter().flatten() {
            // The path is built only for a problem: this runs for every quantity of every pod.
            let qp = || p.field(field).key(k);
            let res = match k.as_str() {
                "cpu" => quantity::cpu_millis(&q.0).map(|_| ()),
                "memory" | "ephemeral-storage" => quantity::bytes(&q.0).map(|_| ()),
                _ if k.starts_with("hugepages-") => {
                    c.err(&qp(), "hugepages are not supported");
                    continue;
                }
                _ => {
                    c.warn(&qp(), format!("resource {k:?} is ignored"));
                    continue;
                }
            };
            if let Err(e) = res {
                c.err(&qp(), e.to_string());
            }
        }
    }
    if let Some(l) = r.limits.as_ref().and_then(|l| l.get("memory"))
        && let Some(q) = r.requests.as_ref().and_then(|r| r.get("memory"))
        && let (Ok(l), Ok(q)) = (quantity::bytes(&l.0), quantity::bytes(&q.0))
        && q > l
    {
        c.err(
            &p.field("requests").key("memory"),
            "must be less than or equal to the memory limit",
        );
    }
    if let Some(l) = r.limits.as_ref().and_then(|l| l.get("cpu"))
        && let Some(q) = r.requests.as_ref().and_then(|r| r.get("cpu"))
        && let (Ok(l), Ok(q)) = (quantity::cpu_millis(&l.0), quantity::cpu_millis(&q.0))
        && q > l
    {
        c.err(
            &p.field("requests").key("cpu"),
            "must be less than or equal to the cpu limit",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_dns1123_label("web-1"));
        assert!(!is_dns1123_label("Web"));
        assert!(!is_dns1123_label("a_b"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(!is_dns1123_subdomain("../etc"));
        assert!(!is_dns1123_subdomain("a/b"));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
        // The API server's rule: 253 in all, no 63-character limit on a part.
        assert!(is_dns1123_subdomain(&"a".repeat(64)));
        assert!(is_dns1123_subdomain(&"a".repeat(253)));
        assert!(is_dns1123_subdomain(&format!(
            "{}.{}",
            "a".repeat(100),
            "b".repeat(100)
        )));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain("a.-b"));
        assert!(!is_dns1123_subdomain(".a"));
        assert!(is_env_name("_A1"));
        assert!(!is_env_name("1A"));
        assert!(!is_env_name("A=B"));
        assert!(!is_env_name("A-B"));
    }

    fn problems(spec_yaml: &str) -> Vec<String> {
        let mut c = crate::manifest::Catalog::default();
        c.add_text(
            std::path::Path::new("t.yaml"),
            &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{spec_yaml}"),
            crate::common::paths::Source::Etc,
        );
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        validate(&c.pods[0]).iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn dns_policy_and_config_as_the_api_server_checks_them() {
        let c = "  containers: [{name: c, image: host}]\n";
        assert_eq!(
            problems(&format!(
                "  dnsPolicy: ClusterFirst\n  dnsConfig: {{nameservers: [1.1.1.1], searches: [a.example., .], options: [{{name: ndots, value: '2'}}]}}\n{c}"
            )),
            Vec::<String>::new()
        );
        assert_eq!(
            problems(&format!("  dnsPolicy: Cluster\n{c}")),
            [
                "t.yaml: default/p: spec.dnsPolicy: Unsupported value: \"Cluster\": supported values: \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\", \"None\""
            ]
        );
        assert_eq!(
            problems(&format!("  dnsPolicy: None\n{c}")),
            [
                "t.yaml: default/p: spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"
            ]
        );
        assert_eq!(
            problems(&format!(
                "  dnsPolicy: None\n  dnsConfig: {{searches: [a.example]}}\n{c}"
            )),
            [
                "t.yaml: default/p: spec.dnsConfig.nameservers: Required value: must provide at least one DNS nameserver when `dnsPolicy` is None"
            ]
        );
        let bad = problems(&format!(
            "  dnsConfig: {{nameservers: [1.1.1.1, 2.2.2.2, 3.3.3.3, dns.example], searches: [Bad_Domain], options: [{{value: x}}]}}\n{c}"
        ));
        assert_eq!(bad.len(), 4, "{bad:?}");
        assert!(
            bad[0].contains("spec.dnsConfig.nameservers: Invalid value: ")
                && bad[0].ends_with("must not have more than 3 nameservers")
        );
        assert!(bad[1].contains("spec.dnsConfig.nameservers[3]: Invalid value: \"dns.example\": must be a valid IP address"));
        assert!(bad[2].contains("spec.dnsConfig.searches[0]: Invalid value: \"Bad_Domain\""));
        assert!(
            bad[3].ends_with(
                "spec.dnsConfig.options[0]: Required value: Option.Name must not be empty"
            )
        );
    }

    #[test]
    fn a_long_pod_name_without_dots_is_valid() {
        let mut c = crate::manifest::Catalog::default();
        let name = "a".repeat(64);
        c.add_text(
            std::path::Path::new("t.yaml"),
            &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers: [{{name: c, image: host}}]\n"),
            crate::common::paths::Source::Etc,
        );
        assert_eq!(validate(&c.pods[0]), []);
    }

    #[test]
    fn namespaces_and_windows_options_are_never_passed_over_in_silence() {
        let warned = problems(
            "  shareProcessNamespace: true\n  hostPID: true\n  securityContext:\n    windowsOptions: {runAsUserName: x}\n  containers:\n  - name: c\n    image: host\n    securityContext:\n      windowsOptions: {hostProcess: false}\n",
        );
        assert_eq!(warned.len(), 3, "{warned:?}");
        assert_eq!(
            warned[0],
            "t.yaml: default/p: spec.shareProcessNamespace: ShareProcessNamespace and HostPID cannot both be enabled",
        );
        assert_eq!(
            warned[1..],
            [
                "t.yaml: default/p: spec.securityContext.windowsOptions: warning: ignored: Windows options have no effect on Linux",
                "t.yaml: default/p: spec.containers[0].securityContext.windowsOptions: warning: ignored: Windows options have no effect on Linux",
            ]
        );
    }
}
