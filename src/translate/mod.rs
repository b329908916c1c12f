//! The translation: one pod -> its units, symlinks and start-time plan. A pure function of the
//! manifest and a few facts about the node; it reads and writes nothing.

pub mod container;
pub mod cron_timer;
pub mod dns;
pub mod env;
pub mod image;
pub mod imagerun;
pub mod naming;
pub mod network;
pub mod plan;
pub mod resources;
pub mod security;
pub mod service_env;
pub mod unit;
pub mod volumes;

use crate::common::diag::Problem;
use crate::common::paths::Paths;
use crate::common::text::concat;
use crate::manifest::PodEntry;
use crate::translate::plan::{PLAN_DIR, PodPlan};
use crate::translate::unit::{UnitFile, Value};
use image::ImageResolver;

/// A problem found while translating, located by field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub path: String,
    pub message: String,
    /// Not wrong: the pod waits for an image a pull brings (a note, see [`image::IMAGE_PENDING`]).
    pub pending: bool,
}

impl Fault {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Fault {
            path: path.into(),
            message: message.into(),
            pending: false,
        }
    }

    pub fn pending(path: impl Into<String>, message: impl Into<String>) -> Self {
        Fault {
            pending: true,
            ..Fault::new(path, message)
        }
    }
}

/// What the translation needs to know about the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub node_name: String,
    /// Capacity, for `resourceFieldRef` of unset limits.
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// Give each pod a private network namespace (node config `network: private`, and `cni`).
    pub private_network: bool,
    /// Attach that namespace to the network by CNI (node config `network: cni`).
    pub cni_network: bool,
    /// `clusterDNS` and `clusterDomain` of the node config.
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// systemd is new enough (254+) for `RestartSteps=`/`RestartMaxDelaySec=`.
    pub restart_steps: bool,
    /// The `podunit` binary the pod unit runs for `pod-prepare`/`pod-cleanup`: where this
    /// installation put it (see [`crate::generate::installed_podunit_bin`]).
    pub podunit_bin: String,
    /// The labels of this node's Node object, which `nodeSelector` and node affinity must match.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Cluster mode: containers get the Services' environment at start ([`service_env`]).
    pub service_env: bool,
    /// The taints the node is registered with (`registerWithTaints`).
    pub taints: Vec<crate::manifest::admission::NodeTaint>,
    /// The storage classes claims are provisioned by (node config `storageClasses`).
    pub storage_classes: crate::workload::claims::StorageClasses,
}

impl Default for NodeFacts {
    fn default() -> Self {
        NodeFacts {
            node_name: "localhost".into(),
            cpu_millis: 1000,
            memory_bytes: 1 << 30,
            private_network: false,
            cni_network: false,
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".into(),
            restart_steps: false,
            podunit_bin: Paths::PODUNIT_BIN.to_string(),
            labels: crate::manifest::admission::host_node_labels("localhost", &Default::default()),
            service_env: false,
            taints: Vec::new(),
            storage_classes: Default::default(),
        }
    }
}

/// A file in the generated tree: a unit, a symlink, or a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Unit(Rendered),
    /// `link` (relative to the output dir) -> `target`.
    Symlink {
        link: String,
        target: String,
    },
    /// A non-unit file (relative path, content).
    File {
        path: String,
        content: String,
    },
}

/// A unit and its text. Translation renders every unit once, which also proves that every
/// untrusted value in it encodes; writers write `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub unit: UnitFile,
    pub text: String,
}

impl Rendered {
    /// Renders `unit`; a value that cannot be written safely is a fault at `path`.
    fn new(unit: UnitFile, path: &str) -> Result<Rendered, Fault> {
        match unit.render() {
            Ok(text) => Ok(Rendered { unit, text }),
            Err(e) => Err(Fault::new(
                path,
                format!("{}= cannot be written safely: {}", e.key, e.error),
            )),
        }
    }
}

impl std::ops::Deref for Rendered {
    type Target = UnitFile;

    fn deref(&self) -> &UnitFile {
        &self.unit
    }
}

/// Everything one pod becomes.
#[derive(Debug, Clone)]
pub struct PodUnits {
    pub pod_unit: String,
    pub outputs: Vec<Output>,
    pub plan: PodPlan,
    /// Accepted-with-a-warning findings.
    pub warnings: Vec<Problem>,
}

/// One pod as the builders of its units read it.
struct PodInput<'a> {
    entry: &'a PodEntry,
    spec: &'a k8s_openapi::api::core::v1::PodSpec,
    node: &'a NodeFacts,
    pod_unit: String,
    slice: String,
    /// The manifest's path as units name it (`SourcePath=`, the header).
    source: String,
    /// The plan's file name in [`PLAN_DIR`].
    plan_name: String,
}

/// Translates one validated pod. Errors name the field that cannot be honoured.
pub fn translate(
    entry: &PodEntry,
    node: &NodeFacts,
    images: &dyn ImageResolver,
) -> Result<PodUnits, Vec<Problem>> {
    let spec = entry.pod.spec.as_ref().ok_or_else(|| {
        vec![
            Problem::error(&entry.file, "required")
                .pod(entry.key())
                .at("spec"),
        ]
    })?;
    let (ns, name) = (entry.namespace(), entry.name());
    let pod_unit = naming::pod_service(ns, name);
    let p = PodInput {
        entry,
        spec,
        node,
        slice: naming::pod_slice(ns, name),
        source: entry.file.display().to_string(),
        plan_name: PodPlan::file_name(&pod_unit),
        pod_unit,
    };
    let fault = |f: Fault| problem(entry, f);

    let mut errors = Vec::new();
    // Volumes first: containers bind them.
    let vol_plans = volume_plans(&p, &mut errors);
    let mut plan = pod_plan(&p, vol_plans);
    if node.cni_network {
        match network::plan(&entry.pod, spec) {
            Ok(n) => plan.network = n,
            Err(f) => errors.push(fault(f)),
        }
    }
    let hostname = uts_hostname(&p);
    plan.uts_hostname = hostname.clone();
    let ctx = container::PodContext {
        entry,
        node,
        images,
        pod_unit: &p.pod_unit,
        slice: &p.slice,
        plan: &plan,
        source: &p.source,
        hostname: hostname.as_deref(),
    };
    let mut containers = Vec::new();
    match container::all(&ctx) {
        Ok(cs) => containers = cs,
        Err(fs) => errors.extend(fs.into_iter().map(fault)),
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    add_containers_to_plan(&mut plan, &containers, &p);

    let mut outputs = Vec::new();
    outputs.push(Output::Unit(slice_unit(&p).map_err(|f| vec![fault(f)])?));
    outputs.push(Output::Unit(
        pod_unit_file(&p, &containers).map_err(|f| vec![fault(f)])?,
    ));
    // A Job's pods start when its controller (podunit-sync) says, not with the node.
    // So do an OrderedReady StatefulSet's, each once the ones before it are Ready.
    match &entry.job {
        None if entry.ordered().is_some() => {}
        None => outputs.push(Output::Symlink {
            link: concat(&[naming::TARGET, ".wants/", &p.pod_unit]),
            target: concat(&["../", &p.pod_unit]),
        }),
        // A CronJob's timer goes with its Job's first pod.
        Some(job) if job.index == 0 => {
            if let Some(timer) = cron_timer::outputs(job, &p.source) {
                outputs.extend(timer.map_err(|f| vec![fault(f)])?);
            }
        }
        Some(_) => {}
    }
    let mut warnings = Vec::new();
    let own_dns = spec.dns_config.is_some() || spec.dns_policy.as_deref() == Some("None");
    if own_dns && plan.network.is_none() && containers.iter().any(|c| c.root.is_none()) {
        warnings.push(
            Problem::warning(
                &entry.file,
                "not applied to containers on the host's root: they keep the node's \
                 /etc/resolv.conf (`network: cni` gives them the pod's)",
            )
            .pod(entry.key())
            .at("spec.dnsConfig"),
        );
    }
    warnings.extend(
        name_warnings(&p, hostname.is_some(), &plan, &containers)
            .into_iter()
            .map(|(at, m)| Problem::warning(&entry.file, m).pod(entry.key()).at(at)),
    );
    for c in containers {
        outputs.push(Output::Unit(Rendered {
            unit: c.unit,
            text: c.text,
        }));
        warnings.extend(c.warnings.into_iter().map(|f: Fault| {
            Problem::warning(&entry.file, f.message)
                .pod(entry.key())
                .at(f.path)
        }));
    }
    outputs.push(Output::File {
        path: concat(&[PLAN_DIR, "/", &p.plan_name]),
        content: plan_json(&plan),
    });
    Ok(PodUnits {
        pod_unit: p.pod_unit,
        outputs,
        plan,
        warnings,
    })
}

/// A fault as the pod's problem: an error, or a note while the pod waits for an image.
fn problem(entry: &PodEntry, f: Fault) -> Problem {
    if f.pending {
        return Problem::note(&entry.file, f.message)
            .pod(entry.key())
            .at(f.path)
            .reason(image::IMAGE_PENDING);
    }
    Problem::error(&entry.file, f.message)
        .pod(entry.key())
        .at(f.path)
}

/// The plans of the pod's volumes; each one that cannot be planned is an error.
fn volume_plans(p: &PodInput<'_>, errors: &mut Vec<Problem>) -> Vec<plan::VolumePlan> {
    let pod = &p.entry.pod;
    let mut vol_plans = Vec::new();
    for (i, v) in p
        .spec
        .volumes
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let owner = container::volume_owner(pod, &v.name);
        match volumes::plan(
            pod,
            p.node,
            &p.entry.claims,
            v,
            &owner,
            &crate::common::text::item(&["spec.volumes"], i),
        ) {
            Ok(vp) => vol_plans.push(vp),
            Err(f) => errors.push(problem(p.entry, f)),
        }
    }
    vol_plans
}

/// The start-time plan as the pod alone decides it; the containers add theirs afterwards
/// ([`add_containers_to_plan`]).
fn pod_plan(p: &PodInput<'_>, vol_plans: Vec<plan::VolumePlan>) -> PodPlan {
    let (spec, uid) = (p.spec, p.entry.uid());
    let mut plan = PodPlan {
        namespace: p.entry.namespace().to_string(),
        name: p.entry.name().to_string(),
        uid: uid.to_string(),
        source: p.source.clone(),
        state_dir: concat(&[Paths::STATE, "/", uid]),
        runtime_dir: concat(&[Paths::RUNTIME, "/", uid]),
        volumes: vol_plans,
        fs_group: spec
            .security_context
            .as_ref()
            .and_then(|sc| sc.fs_group)
            .and_then(|g| u32::try_from(g).ok()),
        share_process_namespace: spec.share_process_namespace == Some(true)
            && spec.host_pid != Some(true),
        env_files: Vec::new(),
        users: Vec::new(),
        groups: Vec::new(),
        probes: Vec::new(),
        roots: Vec::new(),
        etc: None,
        pull_secrets: Vec::new(),
        network: None,
        uts_hostname: None,
    };
    (plan.users, plan.groups) = ids(&p.entry.pod);
    plan.probes = crate::probe::spec::pod_probes(spec);
    plan
}

/// The containers' part of the plan: environment files, pulled roots (with the /etc files and
/// pull secrets they need) and the users their images named.
fn add_containers_to_plan(plan: &mut PodPlan, containers: &[container::Built], p: &PodInput<'_>) {
    for c in containers {
        if let Some(f) = &c.env_file {
            plan.env_files.push(f.clone());
        }
        if let Some(r) = &c.root {
            plan.roots.push(r.clone());
        }
        if let Some(u) = &c.image_user {
            add_ids(plan, u);
        }
    }
    // The name files go to containers with roots of their own, and to every container of a pod
    // with an address of its own: its /etc/hosts names that address, its resolver is the pod's.
    if !plan.roots.is_empty() || plan.network.is_some() {
        plan.etc = Some(imagerun::etc_plan(&p.entry.pod, p.node));
    }
    if !plan.roots.is_empty() {
        plan.pull_secrets = image::pull_secret_names(Some(p.spec));
    }
}

/// Where the pod's names are not honoured: the hostname (and FQDN) on the host network, where
/// containers see the node's (hostNetwork: true asks for that); `subdomain` and `hostAliases` in
/// the /etc/hosts of containers on the host's root without the pod's name files.
fn name_warnings(
    p: &PodInput<'_>,
    own_uts: bool,
    plan: &PodPlan,
    containers: &[container::Built],
) -> Vec<(&'static str, &'static str)> {
    let spec = p.spec;
    let mut out = Vec::new();
    if !own_uts && spec.host_network != Some(true) {
        let node_name = "ignored: on the host network the containers' hostname is the node's \
                         (`network: cni` gives each pod its own)";
        // An Indexed Job's controller names its pods' hosts; that is no one's request to warn of.
        // So does a StatefulSet's.
        let by_controller = p.entry.job.as_ref().is_some_and(|j| {
            j.indexed && spec.hostname.as_deref() == Some(&format!("{}-{}", j.name, j.index))
        }) || set_by_stateful_set(p);
        if spec.hostname.is_some() && !by_controller {
            out.push(("spec.hostname", node_name));
        }
        if spec.set_hostname_as_fqdn == Some(true) {
            out.push(("spec.setHostnameAsFQDN", node_name));
        }
    }
    let host_root = plan.network.is_none() && containers.iter().any(|c| c.root.is_none());
    if host_root {
        let hosts = "not applied to containers on the host's root: they keep the node's \
                     /etc/hosts (`network: cni` gives them the pod's)";
        // The kubelet ignores a subdomain on the host network.
        if spec.subdomain.is_some() && spec.host_network != Some(true) && !set_by_stateful_set(p) {
            out.push(("spec.subdomain", hosts));
        }
        if spec.host_aliases.as_ref().is_some_and(|a| !a.is_empty()) {
            out.push(("spec.hostAliases", hosts));
        }
    }
    out
}

/// The hostname a pod with a network namespace of its own gets in its containers' UTS
/// namespaces, as the kubelet sets it: `spec.hostname` or the pod's name (63 characters at most),
/// its FQDN with `setHostnameAsFQDN` and a `subdomain`. None: the node's (the host network).
fn uts_hostname(p: &PodInput<'_>) -> Option<String> {
    if !p.node.private_network || p.spec.host_network == Some(true) {
        return None;
    }
    let etc = imagerun::etc_plan(&p.entry.pod, p.node);
    Some(match etc.fqdn {
        Some(fqdn) if p.spec.set_hostname_as_fqdn == Some(true) => fqdn,
        _ => etc.hostname,
    })
}

/// The slice: the pod's cgroup, with pod-level resources.
fn slice_unit(p: &PodInput<'_>) -> Result<Rendered, Fault> {
    let spec = p.spec;
    let mut s = UnitFile::new(p.slice.clone());
    s.header = header(&p.source);
    let u = s.section("Unit");
    u.add(
        "Description",
        Value::Plain(concat(&["Pod ", p.entry.namespace(), "/", p.entry.name()])),
    );
    u.add("SourcePath", Value::Path(p.source.clone()));
    let sl = s.section("Slice");
    if spec
        .resources
        .as_ref()
        .and_then(|r| resources::cpu_request(Some(r)))
        .is_none()
    {
        sl.trusted("CPUWeight", resources::pod_cpu_weight(spec).to_string());
    }
    resources::apply(sl, spec.resources.as_ref(), "spec.resources")?;
    Rendered::new(s, "spec.resources")
}

/// The pod unit: prepares the pod's files when it starts, removes runtime files when it stops.
fn pod_unit_file(p: &PodInput<'_>, containers: &[container::Built]) -> Result<Rendered, Fault> {
    let mut u = UnitFile::new(p.pod_unit.clone());
    u.header = header(&p.source);
    pod_unit_section(u.section("Unit"), p, containers);
    pod_service_section(u.section("Service"), p);
    Rendered::new(u, "metadata")
}

/// The pod unit's [Unit]: what it is, and the containers it starts.
fn pod_unit_section(u: &mut unit::Section, p: &PodInput<'_>, containers: &[container::Built]) {
    let (ns, name) = (p.entry.namespace(), p.entry.name());
    u.add(
        "Description",
        Value::Plain(concat(&["Pod ", ns, "/", name])),
    );
    u.add("Documentation", Value::Trusted("man:podunit(1)".into()));
    u.add("SourcePath", Value::Path(p.source.clone()));
    u.trusted("After", "network.target");
    u.trusted("PartOf", naming::TARGET);
    // Starting the pod starts its containers. A `Wants=` line does what a `.wants/` link does,
    // without a directory and a symlink per container in a tree systemd reads at every reload.
    for c in containers {
        u.trusted("Wants", c.unit.name.clone());
    }
    u.add("X-PodunitPod", Value::Plain(concat(&[ns, "/", name])));
    u.add("X-PodunitUid", Value::Plain(p.entry.uid().to_string()));
    if let Some(job) = &p.entry.job {
        u.add("X-PodunitJob", Value::Plain(job.to_line()));
    }
    if let Some(o) = p.entry.ordered() {
        u.add("X-PodunitOrderedReady", Value::Plain(o.to_line()));
    }
    // The workload a local pod is one of, for `podunit status` (a cluster's are the cluster's).
    if p.entry.source.is_static()
        && let Some((kind, owner)) = crate::workload::replicas::workload_of(&p.entry.pod)
    {
        u.add(
            "X-PodunitWorkload",
            Value::Plain(concat(&[kind, "/", &owner])),
        );
    }
}

/// Whether the pod's hostname and subdomain are its StatefulSet's doing (its name, the set's
/// `serviceName`), not a request of the manifest's author.
fn set_by_stateful_set(p: &PodInput<'_>) -> bool {
    let pod = &p.entry.pod;
    crate::workload::replicas::controller_of(pod).is_some_and(|(kind, _)| kind == "StatefulSet")
        && p.spec.hostname.as_deref() == pod.metadata.name.as_deref()
}

/// The pod unit's [Service]: pod-prepare and pod-cleanup, and the namespaces its containers join.
fn pod_service_section(svc: &mut unit::Section, p: &PodInput<'_>) {
    let plan_file = concat(&[
        crate::translate::plan::GENERATOR_DIR,
        "/",
        PLAN_DIR,
        "/",
        &p.plan_name,
    ]);
    svc.trusted("Type", "oneshot");
    svc.trusted("RemainAfterExit", "yes");
    svc.trusted("Slice", p.slice.clone());
    let bin = escape_arg(&p.node.podunit_bin);
    svc.add(
        "ExecStart",
        Value::Exec(vec![
            bin.clone(),
            escape_arg("pod-prepare"),
            escape_arg(&plan_file),
        ]),
    );
    svc.add(
        "ExecStopPost",
        Value::Exec(vec![bin, escape_arg("pod-cleanup"), escape_arg(&plan_file)]),
    );
    // The pod's namespaces, which its containers join (JoinsNamespaceOf=): one IPC namespace per
    // pod, as in Kubernetes (the host's with hostIPC: true), and with `network: private` one
    // loopback-only network. A joining unit takes the joined unit's /tmp too (systemd 252): the
    // pod unit has a private one, or the containers' PrivateTmp= would silently be the host's.
    if p.spec.host_ipc != Some(true) {
        svc.trusted("PrivateIPC", "yes");
    }
    if p.node.private_network && p.spec.host_network != Some(true) {
        svc.trusted("PrivateNetwork", "yes");
    }
    svc.trusted("PrivateTmp", "yes");
    let (ns, name, uid) = (p.entry.namespace(), p.entry.name(), p.entry.uid());
    svc.add(
        "LogExtraFields",
        Value::LogFields(container::log_fields(ns, name, uid, None)),
    );
}

/// The plan as its file holds it: pretty JSON and a newline. Written into one buffer of a typical
/// plan's size rather than grown by doubling and copied once more for the newline.
fn plan_json(plan: &PodPlan) -> String {
    let mut buf = Vec::with_capacity(2048);
    serde_json::to_writer_pretty(&mut buf, plan).expect("a plan always serializes");
    buf.push(b'\n');
    String::from_utf8(buf).expect("serde_json writes UTF-8")
}

/// The numeric users and groups the pod's containers run with (see [`PodPlan::users`]).
fn ids(pod: &k8s_openapi::api::core::v1::Pod) -> (Vec<(u32, u32)>, Vec<u32>) {
    let Some(spec) = &pod.spec else {
        return (Vec::new(), Vec::new());
    };
    let psc = spec.security_context.as_ref();
    let id = |v: i64| u32::try_from(v).ok();
    let mut users = std::collections::BTreeMap::new();
    let mut groups = std::collections::BTreeSet::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        let who = security::identity(psc, c.security_context.as_ref());
        let gid = who.gid.and_then(id).unwrap_or(0);
        if let Some(uid) = who.uid.and_then(id) {
            users.entry(uid).or_insert(gid);
        }
        groups.insert(gid);
    }
    for g in psc
        .and_then(|p| p.supplemental_groups.clone())
        .unwrap_or_default()
    {
        groups.extend(id(g));
    }
    groups.extend(psc.and_then(|p| p.fs_group).and_then(id));
    users.remove(&0);
    groups.remove(&0);
    (users.into_iter().collect(), groups.into_iter().collect())
}

/// The user and groups an image named, added to the pod's (see [`PodPlan::users`]).
fn add_ids(plan: &mut PodPlan, u: &imagerun::ImageUser) {
    if u.uid != 0 && !plan.users.iter().any(|(uid, _)| *uid == u.uid) {
        plan.users.push((u.uid, u.gid));
        plan.users.sort_unstable();
    }
    for g in std::iter::once(u.gid).chain(u.groups.iter().copied()) {
        if g != 0 && !plan.groups.contains(&g) {
            plan.groups.push(g);
            plan.groups.sort_unstable();
        }
    }
}

fn escape_arg(s: &str) -> crate::escape::Arg {
    crate::escape::Arg::text(s)
}

/// The comment every generated file starts with.
pub fn header(source: &str) -> Vec<String> {
    vec![
        concat(&["Automatically generated by podunit-generator from ", source]),
        "Do not edit: edit the manifest and run `systemctl daemon-reload`.".into(),
    ]
}
