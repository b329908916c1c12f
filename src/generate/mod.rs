//! From a catalog of manifests to the generated tree (pure), and writing that tree (the edge).
//! The generator, `podunit render` and `podunit check` all run [`generate`], so what they show is
//! what boot gets.

pub mod output;
pub mod report;

use crate::common::diag::Problem;
use crate::manifest::Catalog;
use crate::manifest::host_ports::Clash;
use crate::translate::image::{ImageResolver, Probe};
use crate::translate::naming;
use crate::translate::{NodeFacts, Output, PodUnits, translate};
use crate::validate;
use std::io;
use std::path::Path;

/// The result of one generation.
#[derive(Debug, Default)]
pub struct Generated {
    pub pods: Vec<PodUnits>,
    /// Every problem, errors and warnings, in file order.
    pub problems: Vec<Problem>,
}

impl Generated {
    pub fn has_errors(&self) -> bool {
        self.problems.iter().any(Problem::is_error)
    }

    /// All outputs of all pods.
    pub fn outputs(&self) -> impl Iterator<Item = &Output> {
        self.pods.iter().flat_map(|p| p.outputs.iter())
    }
}

/// Validates and translates every pod of the catalog. A pod with an error is skipped; the others
/// are not affected.
pub fn generate(catalog: &Catalog, node: &NodeFacts, images: &dyn ImageResolver) -> Generated {
    generate_with_policy(catalog, node, images, None)
}

/// As [`generate`], and a local pod (from /etc/pods.d or /run/pods.d) that breaks `policy` is
/// refused whole, naming the rule (node config `policy.local: enforce`). Pods from the API server
/// were checked by podunit-sync before they reached the spool.
pub fn generate_with_policy(
    catalog: &Catalog,
    node: &NodeFacts,
    images: &dyn ImageResolver,
    policy: Option<&LocalPolicy>,
) -> Generated {
    let mut g = Generated {
        pods: Vec::new(),
        problems: catalog.problems.clone(),
    };
    // Pods are independent (but for host ports): validated and translated in parallel,
    // gathered in catalog order.
    let clashes = port_clashes(catalog);
    let bindings = bind_claims(catalog, node);
    let results = crate::common::parallel::map(&catalog.pods, |entry| {
        let clash = clashes.get(&clash_key(entry));
        generate_pod(entry, node, images, policy, clash, &bindings)
    });
    for (problems, units) in results {
        g.problems.extend(problems);
        g.pods.extend(units);
    }
    sort_problems(&mut g.problems);
    g
}

/// Problems in file order, then pod order (stable: a pod's own problems keep their order).
fn sort_problems(problems: &mut [Problem]) {
    problems.sort_by(|a, b| (&a.file, &a.pod).cmp(&(&b.file, &b.pod)));
}

/// What [`generate_into`] did: every problem (as [`Generated::problems`]) and the pods whose
/// units could not be written, with why.
#[derive(Debug, Default)]
pub struct Written {
    pub problems: Vec<Problem>,
    pub failed: Vec<(String, io::Error)>,
}

/// The generator's path: [`generate_with_policy`] and [`write_tree`] in one pass, each pod written
/// as soon as it is translated, so no pod's units outlive their writing (with thousands of pods,
/// holding every pod's units until the end doubled the generator's memory). Same tree, same
/// problems, same order.
pub fn generate_into(
    dir: &Path,
    catalog: &Catalog,
    node: &NodeFacts,
    images: &dyn ImageResolver,
    policy: Option<&LocalPolicy>,
) -> Written {
    let mut w = Written {
        problems: catalog.problems.clone(),
        failed: Vec::new(),
    };
    let clashes = port_clashes(catalog);
    let bindings = bind_claims(catalog, node);
    let results = crate::common::parallel::map(&catalog.pods, |entry| {
        let clash = clashes.get(&clash_key(entry));
        let (problems, units) = generate_pod(entry, node, images, policy, clash, &bindings);
        (problems, units.and_then(|pod| write_reported(dir, &pod)))
    });
    for (problems, failed) in results {
        w.problems.extend(problems);
        w.failed.extend(failed);
    }
    sort_problems(&mut w.problems);
    w
}

/// The pod as the local policy judges it: a claim bound to a PersistentVolume mounts the
/// volume's host path, held to `policy.hostPaths` as a hostPath volume is (a provisioned claim's
/// directory is podunit's own).
fn policy_view(
    entry: &crate::manifest::PodEntry,
) -> std::borrow::Cow<'_, k8s_openapi::api::core::v1::Pod> {
    use k8s_openapi::api::core::v1::HostPathVolumeSource;
    let on_volume = |name: &str| match entry.claims.get(name) {
        Some(Ok(b)) if b.volume.is_some() => Some(b),
        _ => None,
    };
    let uses_volume = entry
        .pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| on_volume(&c.claim_name).is_some())
        });
    if !uses_volume {
        return std::borrow::Cow::Borrowed(&entry.pod);
    }
    let mut pod = entry.pod.clone();
    for v in pod
        .spec
        .iter_mut()
        .flat_map(|s| s.volumes.iter_mut().flatten())
    {
        let Some(b) = v
            .persistent_volume_claim
            .as_ref()
            .and_then(|c| on_volume(&c.claim_name))
        else {
            continue;
        };
        v.host_path = Some(HostPathVolumeSource {
            path: b.path.clone(),
            type_: Some(b.host_type.clone()).filter(|t| !t.is_empty()),
        });
        v.persistent_volume_claim = None;
    }
    std::borrow::Cow::Owned(pod)
}

/// The manifests' claims, bound for this node.
fn bind_claims(catalog: &Catalog, node: &NodeFacts) -> crate::workload::claims::Bindings {
    catalog.bind_claims(&node.storage_classes, &node.node_name, &node.labels)
}

type ClashKey = (std::path::PathBuf, String);

fn clash_key(entry: &crate::manifest::PodEntry) -> ClashKey {
    (entry.file.clone(), entry.key())
}

/// The kubelet's NodePorts admission over the pods that ask for host ports and are otherwise
/// valid, in catalog order (files in order, documents in order): the pods it refuses.
fn port_clashes(catalog: &Catalog) -> std::collections::HashMap<ClashKey, Clash> {
    use crate::manifest::host_ports;
    let asking: Vec<&crate::manifest::PodEntry> = catalog
        .pods
        .iter()
        .filter(|e| !host_ports::host_ports(&e.pod).is_empty())
        .filter(|e| !validate::validate(e).iter().any(Problem::is_error))
        .collect();
    if asking.len() < 2 {
        return Default::default();
    }
    let verdicts = host_ports::admit(asking.iter().map(|e| (e.key(), &e.pod)));
    asking
        .into_iter()
        .zip(verdicts)
        .filter_map(|(e, c)| Some((clash_key(e), c?)))
        .collect()
}

/// One pod: its problems, and its units unless one of those problems is an error.
fn generate_pod(
    entry: &crate::manifest::PodEntry,
    node: &NodeFacts,
    images: &dyn ImageResolver,
    policy: Option<&LocalPolicy>,
    clash: Option<&Clash>,
    bindings: &crate::workload::claims::Bindings,
) -> (Vec<Problem>, Option<PodUnits>) {
    // A pod with claims is translated with them bound (a copy: the catalog stays as read).
    let with_claims;
    let entry = match entry.bound_claims(bindings) {
        Some(claims) => {
            with_claims = crate::manifest::PodEntry {
                claims,
                ..entry.clone()
            };
            &with_claims
        }
        None => entry,
    };
    if let Some(p) = policy
        && entry.source.is_static()
        && let Err(v) =
            crate::common::policy::check_resolved(&policy_view(entry), &p.policy, &|path| {
                host_realpath(&p.paths, path)
            })
    {
        return (
            vec![
                Problem::error(&entry.file, v.to_string())
                    .pod(entry.key())
                    .reason(crate::common::policy::Violation::REASON),
            ],
            None,
        );
    }
    // A DaemonSet that does not select this node has no pod here (its controller makes none):
    // said, not refused.
    if let Some(("DaemonSet", ds)) = crate::workload::replicas::controller_of(&entry.pod)
        && let Err(r) = crate::manifest::admission::check_node_affinity(
            &entry.pod,
            &node.node_name,
            &node.labels,
        )
        // The taints are the DaemonSet controller's to weigh: the cluster's did it for its own.
        .and_then(|()| {
            if entry.source.is_static() {
                crate::manifest::admission::check_taints(&entry.pod, &node.taints)
            } else {
                Ok(())
            }
        })
    {
        return (
            vec![
                Problem::note(
                    &entry.file,
                    format!(
                        "DaemonSet {}/{ds} has no pod on this node: {}",
                        entry.namespace(),
                        r.message
                    ),
                )
                .pod(format!("{}/{ds}", entry.namespace()))
                .at(r.path),
            ],
            None,
        );
    }
    let mut problems = validate::validate(entry);
    if problems.iter().any(Problem::is_error) {
        return (problems, None);
    }
    // What the kubelet refuses before it runs a static pod. The translation still runs, so that
    // `podunit check` says everything that is wrong with the pod at once.
    let refused =
        crate::manifest::admission::check_node_affinity(&entry.pod, &node.node_name, &node.labels)
            .err()
            .map(|r| {
                Problem::error(
                    &entry.file,
                    format!(
                        "refused as the kubelet refuses it ({}): {}",
                        r.reason, r.message
                    ),
                )
                .pod(entry.key())
                .at(r.path)
                .reason(r.reason)
            })
            .or_else(|| {
                use crate::manifest::host_ports::{MESSAGE, NODE_PORTS};
                let c = clash?;
                Some(
                    Problem::error(
                        &entry.file,
                        format!(
                            "refused as the kubelet refuses it ({NODE_PORTS}): {MESSAGE}: {} is \
                             held by pod {}",
                            c.port, c.holder
                        ),
                    )
                    .pod(entry.key())
                    .at(c.path.clone())
                    .reason(NODE_PORTS),
                )
            });
    match translate(entry, node, images) {
        Ok(units) => {
            problems.extend(units.warnings.iter().cloned());
            match refused {
                Some(r) => {
                    problems.push(r);
                    (problems, None)
                }
                None => (problems, Some(units)),
            }
        }
        Err(found) => {
            problems.extend(refused);
            problems.extend(found);
            (problems, None)
        }
    }
}

/// Writes the tree under `dir` (the generator's normal directory, or `render --output-dir`).
/// Each pod is written on its own: one that cannot be written (a full disk, say) is reported and
/// the others are still written. Returns the pods that failed, with why.
pub fn write_tree(dir: &Path, g: &Generated) -> Vec<(String, io::Error)> {
    crate::common::parallel::map(&g.pods, |pod| write_reported(dir, pod))
        .into_iter()
        .flatten()
        .collect()
}

/// Writes one pod; a failure comes back named by the pod.
fn write_reported(dir: &Path, pod: &PodUnits) -> Option<(String, io::Error)> {
    write_pod(dir, pod)
        .err()
        .map(|e| (format!("{}/{}", pod.plan.namespace, pod.plan.name), e))
}

fn write_pod(dir: &Path, pod: &PodUnits) -> io::Result<()> {
    // Every unit was rendered when it was translated: nothing here can fail half-way for a
    // value that does not encode.
    for o in &pod.outputs {
        match o {
            Output::Unit(u) => in_dir(&dir.join(&u.name), |path| std::fs::write(path, &u.text))?,
            Output::File { path, content } => {
                in_dir(&dir.join(path), |p| std::fs::write(p, content))?
            }
            Output::Symlink { .. } => {}
        }
    }
    for o in &pod.outputs {
        if let Output::Symlink { link, target } = o {
            in_dir(&dir.join(link), |path| {
                match std::os::unix::fs::symlink(target, path) {
                    // `render --output-dir` into a used directory: the new tree wins.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        std::fs::remove_file(path)?;
                        std::os::unix::fs::symlink(target, path)
                    }
                    r => r,
                }
            })?;
        }
    }
    Ok(())
}

/// Runs `create` on `path`, making its directory first if that is what it lacked. The directory
/// is made on demand rather than checked before every file: most files go where another already
/// went, and the generator writes thousands.
fn in_dir(path: &Path, create: impl Fn(&Path) -> io::Result<()>) -> io::Result<()> {
    match create(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            create(path)
        }
        r => r,
    }
}

/// The tree as text, in the order `podunit render` prints it.
pub fn render_text(g: &Generated) -> String {
    let mut out = String::new();
    for o in g.outputs() {
        match o {
            Output::Unit(u) => {
                out.push_str(&format!("# ==> {} <==\n", u.name));
                out.push_str(&u.text);
                out.push('\n');
            }
            Output::Symlink { link, target } => {
                out.push_str(&format!("# ==> {link} -> {target} <==\n\n"))
            }
            Output::File { path, content } => {
                out.push_str(&format!("# ==> {path} <==\n"));
                for l in content.lines() {
                    out.push_str("# ");
                    out.push_str(l);
                    out.push('\n');
                }
                out.push('\n');
            }
        }
    }
    out
}

/// Looks image paths up on the real filesystem (under the `PODUNIT_ROOT` prefix).
pub struct FsImages {
    pub paths: crate::common::paths::Paths,
    pub host_aliases: Vec<String>,
}

impl ImageResolver for FsImages {
    fn probe(&self, path: &str) -> Probe {
        match std::fs::metadata(self.paths.host(path)) {
            Ok(m) if m.is_dir() => Probe::Directory,
            Ok(m) if m.is_file() => Probe::File,
            _ => Probe::Missing,
        }
    }

    fn is_host_alias(&self, reference: &str) -> bool {
        reference == "host" || self.host_aliases.iter().any(|a| a == reference)
    }

    fn stored(
        &self,
        reference: &crate::image::Reference,
    ) -> Result<Option<crate::translate::image::StoredImage>, String> {
        use crate::image::store::files::read_file;
        /// Larger user databases are not an image's.
        const ID_FILE_MAX: u64 = 1 << 20;
        let store = crate::image::Store::from_paths(&self.paths);
        let Some(img) = store.lookup(reference).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let text =
            |p: &str| read_file(&img, p, ID_FILE_MAX).and_then(|b| String::from_utf8(b).ok());
        let (passwd, group) = (text("/etc/passwd"), text("/etc/group"));
        Ok(Some(crate::translate::image::StoredImage::new(
            &img, passwd, group,
        )))
    }
}

/// The node policy local pods must meet, and where their host paths are resolved.
pub struct LocalPolicy {
    pub policy: crate::common::policy::Policy,
    pub paths: crate::common::paths::Paths,
}

/// The canonical host path of `path` (under the test root), if it exists.
pub fn host_realpath(paths: &crate::common::paths::Paths, path: &str) -> Option<String> {
    let real = std::fs::canonicalize(paths.host(path)).ok()?;
    let rel = real.strip_prefix(&paths.root).ok()?;
    Some(std::path::Path::new("/").join(rel).display().to_string())
}

/// Node facts read from the host: hostname, CPUs, memory.
pub fn detect_node(paths: &crate::common::paths::Paths) -> NodeFacts {
    let read = |p: &str| std::fs::read_to_string(paths.host(p)).unwrap_or_default();
    let hostname = read("/proc/sys/kernel/hostname").trim().to_string();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as u64)
        .unwrap_or(1);
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    NodeFacts {
        node_name: if hostname.is_empty() {
            "localhost".into()
        } else {
            hostname.to_lowercase()
        },
        cpu_millis: cpus * 1000,
        memory_bytes: mem_kib * 1024,
        ..NodeFacts::default()
    }
}

/// Node facts and image resolution as the node configuration sets them. A configuration that
/// cannot be read is reported (the returned problem) and the defaults are used: a typo there must
/// not keep every pod from starting.
pub fn node_setup(paths: &crate::common::paths::Paths) -> (NodeFacts, FsImages, Option<String>) {
    let (node, images, problem, _) = node_setup_with_policy(paths);
    (node, images, problem)
}

/// As [`node_setup`], plus the policy local pods must meet (`policy.local: enforce`), if any.
pub fn node_setup_with_policy(
    paths: &crate::common::paths::Paths,
) -> (NodeFacts, FsImages, Option<String>, Option<LocalPolicy>) {
    let (config, problem) = match crate::common::config::Config::load(&paths.config_file()) {
        Ok(l) => {
            let unknown = (!l.unknown_keys.is_empty()).then(|| {
                format!(
                    "{}: unknown keys (ignored): {}",
                    crate::common::paths::Paths::CONFIG,
                    l.unknown_keys.join(", ")
                )
            });
            (l.config, unknown)
        }
        Err(e) => (
            crate::common::config::Config::default(),
            Some(format!("{e} (using the defaults)")),
        ),
    };
    let mut node = detect_node(paths);
    if let Some(n) = config.node_name.as_deref().filter(|n| !n.is_empty()) {
        node.node_name = n.to_string();
    }
    use crate::common::config::Network;
    node.private_network = matches!(config.network, Network::Private | Network::Cni);
    node.cni_network = config.network == Network::Cni;
    node.cluster_dns = config.cluster_dns.clone();
    node.cluster_domain = config.cluster_domain().to_string();
    node.restart_steps = config.restart_backoff_steps;
    node.podunit_bin = podunit_bin(paths);
    node.service_env = config.kubeconfig.is_some();
    node.storage_classes = config.storage_classes();
    node.taints = config
        .register_with_taints
        .iter()
        .map(crate::manifest::admission::NodeTaint::of)
        .collect();
    node.labels =
        crate::manifest::admission::host_node_labels(&node.node_name, &config.node_labels);
    let images = FsImages {
        paths: paths.clone(),
        host_aliases: config
            .policy
            .host_images
            .iter()
            .chain(&config.host_images)
            .cloned()
            .collect(),
    };
    let policy =
        (config.policy.local == crate::common::policy::Local::Enforce).then(|| LocalPolicy {
            policy: config.policy.clone(),
            paths: paths.clone(),
        });
    (node, images, problem, policy)
}

/// The `podunit` units should run: this installation's (see [`installed_podunit_bin`]), else
/// `/usr/bin/podunit`.
pub fn podunit_bin(paths: &crate::common::paths::Paths) -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| installed_podunit_bin(&paths.root, &exe))
        .unwrap_or_else(|| crate::common::paths::Paths::PODUNIT_BIN.to_string())
}

/// Where `podunit` is, judged from where this program runs: `<prefix>/bin/podunit` when it is
/// `<prefix>/lib/systemd/system-generators/podunit-generator`, `<prefix>/bin/podunit` or
/// `<prefix>/bin/podunit-sync` (so a
/// `make install PREFIX=/usr/local` gets units that call `/usr/local/bin/podunit`). `exe` is taken
/// relative to the test root `root`. None anywhere else (a build tree, a `/lib` generator of a
/// system without merged /usr): the caller keeps `/usr/bin/podunit`.
pub fn installed_podunit_bin(root: &Path, exe: &Path) -> Option<String> {
    let rel = Path::new("/").join(exe.strip_prefix(root).ok()?);
    let s = rel.to_str()?;
    let prefix = s
        .strip_suffix("/lib/systemd/system-generators/podunit-generator")
        .or_else(|| s.strip_suffix("/bin/podunit"))
        .or_else(|| s.strip_suffix("/bin/podunit-sync"))?;
    // The value lands in ExecStart= (escaped, but still): only a plain absolute path counts.
    let plain = prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b));
    (prefix.starts_with('/') && plain && !prefix.contains("/.."))
        .then(|| format!("{prefix}/bin/podunit"))
}

/// The unit every pod hangs off (shipped by the package, referenced here for symlinks).
pub const TARGET: &str = naming::TARGET;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podunit_bin_follows_the_install_prefix() {
        let bin = |root: &str, exe: &str| installed_podunit_bin(Path::new(root), Path::new(exe));
        let gen_in = |p: &str| format!("{p}/lib/systemd/system-generators/podunit-generator");
        assert_eq!(
            bin("/", &gen_in("/usr")).as_deref(),
            Some("/usr/bin/podunit")
        );
        assert_eq!(
            bin("/", &gen_in("/usr/local")).as_deref(),
            Some("/usr/local/bin/podunit")
        );
        assert_eq!(
            bin("/", "/usr/local/bin/podunit-sync").as_deref(),
            Some("/usr/local/bin/podunit")
        );
        assert_eq!(
            bin("/", "/opt/podunit/bin/podunit").as_deref(),
            Some("/opt/podunit/bin/podunit")
        );
        // Under a test root, the path inside it counts.
        assert_eq!(
            bin("/tmp/r", &gen_in("/tmp/r/usr/local")).as_deref(),
            Some("/usr/local/bin/podunit")
        );
        // A build tree, a generator in /lib (no merged /usr), a program outside the test root,
        // a prefix with odd characters: none.
        for (root, exe) in [
            ("/", "/src/podunit/target/release/podunit-generator"),
            ("/", "/src/podunit/target/debug/podunit"),
            ("/", "/lib/systemd/system-generators/podunit-generator"),
            (
                "/tmp/r",
                "/usr/lib/systemd/system-generators/podunit-generator",
            ),
            ("/", "/opt/we ird/bin/podunit"),
        ] {
            assert_eq!(bin(root, exe), None, "{exe} under {root}");
        }
    }
}
