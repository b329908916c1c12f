//! `podunit pod-prepare` / `pod-cleanup`: the start-time work of a pod, run by its pod unit
//! (ExecStart= / ExecStopPost=). Creates volume directories, writes configMap, secret and downward
//! API files with their owner and mode, checks hostPaths, and writes the env files whose values exist
//! only now. Secret values go only into root-only files on tmpfs.

use crate::common::atomicfile;
use crate::common::paths::Paths;
use crate::escape;
use crate::manifest::Catalog;
use crate::translate::plan::{EnvEntry, EnvFilePlan, FileSource, PodPlan, VolumeKind, VolumePlan};
use crate::translate::service_env::{self, ServiceRef};
use crate::workload::claims::PROVISIONED;
use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub enum PrepareError {
    Io {
        path: PathBuf,
        error: io::Error,
    },
    /// A ConfigMap or Secret (or one of its keys) the pod needs is not there.
    Missing {
        what: String,
    },
    /// Cluster mode: the Services' environment is asked for, and the node agent has not listed
    /// the Services yet (the kubelet refuses to start an API pod's containers then, so none
    /// starts without `KUBERNETES_SERVICE_HOST`).
    ServicesNotRead,
    /// A hostPath is not what its `type` demands.
    HostPathType {
        path: String,
        expected: String,
    },
    /// A value cannot be written to an env file.
    Env {
        name: String,
        error: escape::EscapeError,
    },
    /// A path in the plan would leave its volume.
    Escapes {
        path: String,
    },
    /// A container's root could not be mounted from its image.
    Root(crate::podstart::root::RootError),
    /// The pod's network could not be set up (the kubelet's FailedCreatePodSandBox).
    Network(crate::podstart::network::NetworkError),
}

impl fmt::Display for PrepareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrepareError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            PrepareError::Missing { what } => write!(f, "{what} not found"),
            PrepareError::ServicesNotRead => f.write_str(
                "services have not yet been read at least once, cannot construct envvars",
            ),
            PrepareError::HostPathType { path, expected } => {
                write!(f, "hostPath {path:?} is not {expected}")
            }
            PrepareError::Env { name, error } => {
                write!(f, "environment variable {name:?}: {error}")
            }
            PrepareError::Escapes { path } => write!(f, "{path:?} leaves its volume"),
            PrepareError::Root(e) => write!(f, "{e}"),
            PrepareError::Network(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PrepareError {}

impl PrepareError {
    /// The kubelet's waiting reason for a pod that fails this way: a missing ConfigMap, Secret
    /// or key is `CreateContainerConfigError`; anything else keeps the pod `ContainerCreating`
    /// (the kubelet's volume setup failing).
    pub fn waiting_reason(&self) -> &'static str {
        match self {
            PrepareError::Missing { .. }
            | PrepareError::Env { .. }
            | PrepareError::ServicesNotRead => "CreateContainerConfigError",
            PrepareError::Root(_) => "CreateContainerError",
            _ => "ContainerCreating",
        }
    }

    /// The Event the kubelet posts when a pod's sync fails this way, for pod `uid`: no network
    /// configuration is `NetworkNotReady` (the pod is not tried), a failed setup
    /// `FailedCreatePodSandBox` with the plugin's error, as containerd words it.
    pub fn event(&self, uid: &str) -> Option<(&'static str, String)> {
        use crate::podstart::network::NetworkError;
        let PrepareError::Network(e) = self else {
            return None;
        };
        let (reason, message) = match e {
            NetworkError::Config(c) => (
                "NetworkNotReady",
                format!(
                    "network is not ready: container runtime network not ready: \
                     NetworkReady=false reason:NetworkPluginNotReady message:Network plugin \
                     returns error: {c}"
                ),
            ),
            NetworkError::Plugin(p) => (
                "FailedCreatePodSandBox",
                format!(
                    "Failed to create pod sandbox: failed to setup network for sandbox \"{uid}\": {p}"
                ),
            ),
            other => (
                "FailedCreatePodSandBox",
                format!("Failed to create pod sandbox: {other}"),
            ),
        };
        Some((reason, message))
    }
}

impl From<atomicfile::Error> for PrepareError {
    fn from(e: atomicfile::Error) -> Self {
        PrepareError::Io {
            path: e.path,
            error: e.error,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PrepareError + '_ {
    move |error| PrepareError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// The data of a ConfigMap or Secret, as bytes per key.
fn object_data(
    catalog: &Catalog,
    ns: &str,
    secret: bool,
    name: &str,
) -> Option<BTreeMap<String, Vec<u8>>> {
    let key = (ns.to_string(), name.to_string());
    let mut out = BTreeMap::new();
    if secret {
        let (s, _) = catalog.secrets.get(&key)?;
        for (k, v) in s.data.iter().flatten() {
            out.insert(k.clone(), v.0.clone());
        }
        for (k, v) in s.string_data.iter().flatten() {
            out.insert(k.clone(), v.clone().into_bytes());
        }
    } else {
        let (c, _) = catalog.config_maps.get(&key)?;
        for (k, v) in c.data.iter().flatten() {
            out.insert(k.clone(), v.clone().into_bytes());
        }
        for (k, v) in c.binary_data.iter().flatten() {
            out.insert(k.clone(), v.0.clone());
        }
    }
    Some(out)
}

fn kind(secret: bool) -> &'static str {
    if secret { "Secret" } else { "ConfigMap" }
}

/// What the node gives a starting pod: its address (status.hostIP, and status.podIP on the host
/// network) and, on `network: cni`, where the CNI configuration is.
#[derive(Debug, Clone)]
pub struct NodeNet {
    pub node_ip: String,
    pub cni: crate::common::config::Cni,
    /// What the network is when `cni.conf_dir` holds no configuration.
    pub fallback: crate::cni::default_network::Fallback,
    /// The node's resolver configuration (`resolvConf`), the base of the pods' own.
    pub resolv_conf: PathBuf,
}

/// Prepares the pod described by `plan`.
pub fn prepare(
    plan: &PodPlan,
    paths: &Paths,
    catalog: &Catalog,
    node: &NodeNet,
) -> Result<(), PrepareError> {
    check_dirs(plan)?;
    if paths.root == Path::new("/") {
        // The pod unit's own namespace has a private /tmp and /var/tmp, but a hostPath is always
        // the host's (the kubelet's view), and containers' binds look for their sources there.
        crate::podstart::root::enter_manager_namespace().map_err(PrepareError::Root)?;
    }
    let state = paths.host(&plan.state_dir);
    let runtime = paths.host(&plan.runtime_dir);
    mkdir(&state, 0o700)?;
    mkdir(&runtime, 0o700)?;
    // First: a pod whose network cannot be set up starts nothing (the kubelet's sandbox).
    let pod_ips: Vec<String> = match &plan.network {
        Some(n) => crate::podstart::network::attach(plan, n, &node.cni, &node.fallback, paths)
            .map_err(PrepareError::Network)?
            .iter()
            .map(|ip| ip.to_string())
            .collect(),
        None => vec![node.node_ip.clone()],
    };
    let ips = Ips {
        node: &node.node_ip,
        pod: &pod_ips,
    };
    ensure_ids(plan, paths)?;
    for v in &plan.volumes {
        prepare_volume(plan, paths, catalog, v)?;
    }
    if !plan.env_files.is_empty() {
        mkdir(&runtime.join("env"), 0o700)?;
    }
    let wants_services = plan.env_files.iter().any(|f| {
        f.entries
            .iter()
            .any(|e| matches!(e, EnvEntry::Services { .. }))
    });
    let services = services_for(
        wants_services.then(|| read_services(paths)),
        is_api_pod(plan, paths),
    )?;
    for f in &plan.env_files {
        let text = env_file(plan, catalog, f, &ips, &services)?;
        let opts = atomicfile::Options::new(0o600).owner(0, 0);
        atomicfile::write(&paths.host(&f.path), text.as_bytes(), opts)?;
    }
    if let Some(etc) = &plan.etc {
        write_etc_files(plan, paths, etc, &pod_ips[0], &node.resolv_conf)?;
    }
    if let Some(name) = &plan.uts_hostname {
        let at = paths.host(&plan.uts_namespace());
        crate::pidinit::pin_uts_namespace(&at, name).map_err(|message| PrepareError::Io {
            path: at,
            error: io::Error::other(message),
        })?;
    }
    // It moves this process into the service manager's mount namespace.
    crate::podstart::root::mount_all(plan, paths).map_err(PrepareError::Root)?;
    if plan.share_process_namespace {
        // Last: this process's children from now on are in the pod's PID namespace.
        crate::pidinit::start_pod_namespace(&paths.host(&plan.pid_namespace())).map_err(
            |message| PrepareError::Io {
                path: paths.host(&plan.pid_namespace()),
                error: io::Error::other(message),
            },
        )?;
    }
    Ok(())
}

/// The pod's name files, world-readable as in any container (the runtime directory above them is
/// root-only; systemd binds the files themselves).
fn write_etc_files(
    plan: &PodPlan,
    paths: &Paths,
    etc: &crate::translate::plan::EtcPlan,
    pod_ip: &str,
    resolv_conf: &Path,
) -> Result<(), PrepareError> {
    use crate::podstart::etcfiles;
    let read = |p: &str| fs::read_to_string(paths.host(p)).unwrap_or_default();
    let node_resolv = read(&resolv_conf.to_string_lossy());
    let files = [
        ("hosts", etcfiles::hosts(etc, pod_ip, &read("/etc/hosts"))),
        ("hostname", etcfiles::hostname(etc)),
        ("resolv.conf", etcfiles::resolv_conf(&etc.dns, &node_resolv)),
    ];
    let opts = atomicfile::Options::new(0o644).owner(0, 0);
    for (name, text) in files {
        atomicfile::write(&paths.host(&plan.etc_file(name)), text.as_bytes(), opts)?;
    }
    Ok(())
}

/// A plan is the generator's output, but a tampered or stale one must still never make
/// `remove_dir_all` or `mkdir` reach outside podunit's own directories.
fn check_dirs(plan: &PodPlan) -> Result<(), PrepareError> {
    let uid_ok = !plan.uid.is_empty()
        && plan
            .uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let expected = (
        format!("{}/{}", Paths::STATE, plan.uid),
        format!("{}/{}", Paths::RUNTIME, plan.uid),
    );
    if !uid_ok || (plan.state_dir.clone(), plan.runtime_dir.clone()) != expected {
        return Err(PrepareError::Escapes {
            path: plan.runtime_dir.clone(),
        });
    }
    Ok(())
}

/// Where nss-systemd reads user and group records (tmpfs: gone at reboot, written again at start).
const USERDB: &str = "/run/userdb";

/// Gives every numeric user and group of the pod an entry in the user database, as systemd needs
/// one for `User=`, `Group=` and `SupplementaryGroups=` while Kubernetes does not. IDs the host
/// already knows are left alone.
fn ensure_ids(plan: &PodPlan, paths: &Paths) -> Result<(), PrepareError> {
    use nix::unistd::{Gid, Group, Uid, User};
    if plan.users.is_empty() && plan.groups.is_empty() {
        return Ok(());
    }
    let dir = paths.host(USERDB);
    let known_user = |uid: u32| matches!(User::from_uid(Uid::from_raw(uid)), Ok(Some(_)));
    let known_group = |gid: u32| matches!(Group::from_gid(Gid::from_raw(gid)), Ok(Some(_)));
    for &(uid, gid) in &plan.users {
        if !known_user(uid) {
            let name = format!("podunit-{uid}");
            let record = serde_json::json!({
                "userName": name, "uid": uid, "gid": gid, "homeDirectory": "/",
                "shell": "/usr/sbin/nologin", "disposition": "container", "realName": "podunit pod user",
            });
            write_record(&dir, &name, &uid.to_string(), "user", &record)?;
        }
    }
    let primary: Vec<u32> = plan.users.iter().map(|(_, g)| *g).collect();
    for &gid in plan.groups.iter().chain(&primary) {
        if gid != 0 && !known_group(gid) {
            let name = format!("podunit-g{gid}");
            let record =
                serde_json::json!({ "groupName": name, "gid": gid, "disposition": "container" });
            write_record(&dir, &name, &gid.to_string(), "group", &record)?;
        }
    }
    Ok(())
}

/// `<name>.<kind>` plus the `<id>.<kind>` link nss-systemd looks numeric IDs up by.
fn write_record(
    dir: &Path,
    name: &str,
    id: &str,
    kind: &str,
    record: &serde_json::Value,
) -> Result<(), PrepareError> {
    mkdir(dir, 0o755)?;
    let file = format!("{name}.{kind}");
    let opts = atomicfile::Options::new(0o644).owner(0, 0);
    atomicfile::write(&dir.join(&file), record.to_string().as_bytes(), opts)?;
    atomicfile::symlink(Path::new(&file), &dir.join(format!("{id}.{kind}")))?;
    Ok(())
}

/// Removes the pod's runtime files (secrets and env files). Persistent state stays until the pod is
/// deleted, as the kubelet keeps emptyDir across container restarts and reboots.
pub fn cleanup(
    plan: &PodPlan,
    paths: &Paths,
    cni: &crate::common::config::Cni,
    fallback: &crate::cni::default_network::Fallback,
) -> Result<(), PrepareError> {
    check_dirs(plan)?;
    if plan.network.is_some() && paths.root == Path::new("/") {
        // The namespace is pinned in the service manager's mount namespace.
        crate::podstart::root::enter_manager_namespace().map_err(PrepareError::Root)?;
    }
    // Whatever else fails: the address and the host port rules must not outlive the pod.
    let detached = match plan.network {
        Some(_) => crate::podstart::network::detach(&plan.uid, cni, fallback, paths)
            .map_err(PrepareError::Network),
        None => Ok(()),
    };
    if plan.share_process_namespace || plan.uts_hostname.is_some() {
        // Bound in the service manager's mount namespace, and unbound there.
        if paths.root == Path::new("/") {
            crate::podstart::root::enter_manager_namespace().map_err(PrepareError::Root)?;
        }
        crate::pidinit::release_pod_namespace(&paths.host(&plan.pid_namespace()));
        crate::pidinit::release_pod_namespace(&paths.host(&plan.uts_namespace()));
    }
    crate::podstart::root::release_all(plan, paths);
    let runtime = paths.host(&plan.runtime_dir);
    match fs::remove_dir_all(&runtime) {
        Ok(()) => detached,
        Err(e) if e.kind() == io::ErrorKind::NotFound => detached,
        Err(e) => Err(PrepareError::Io {
            path: runtime,
            error: e,
        }),
    }
}

fn mkdir(path: &Path, mode: u32) -> Result<(), PrepareError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(io_err(path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_err(path))
}

/// A provisioned claim's directory, made on its first use and kept: world-writable as the
/// kubelet makes an emptyDir (any container user may write to it), in parents only root can
/// enter, so no user of the host reaches a pod's data.
fn provision(dir: &Path) -> Result<(), PrepareError> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent()
        && !parent.is_dir()
    {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(io_err(parent))?;
    }
    mkdir(dir, 0o777)
}

fn prepare_volume(
    plan: &PodPlan,
    paths: &Paths,
    catalog: &Catalog,
    v: &VolumePlan,
) -> Result<(), PrepareError> {
    let dir = paths.host(&v.path);
    match &v.kind {
        VolumeKind::EmptyDir { .. } => {
            // Set up once, as the kubelet does (its ready marker is the directory here): what
            // containers did to it since stays.
            if dir.is_dir() {
                return Ok(());
            }
            // The kubelet makes emptyDir world-writable so any container user can use it.
            mkdir(&dir, 0o777)?;
            if let Some(g) = plan.fs_group {
                std::os::unix::fs::chown(&dir, None, Some(g)).map_err(io_err(&dir))?;
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o777 | FS_GROUP_DIR))
                    .map_err(io_err(&dir))?;
            }
            Ok(())
        }
        VolumeKind::HostPath { host_type } => check_host_path(&dir, &v.path, host_type),
        VolumeKind::Claim { host_type, .. } if host_type == PROVISIONED => provision(&dir),
        VolumeKind::Claim { host_type, .. } => check_host_path(&dir, &v.path, host_type),
        VolumeKind::Files { .. } => write_files(plan, paths, catalog, v).map(|_| ()),
    }
}

/// Writes a files volume (configMap, secret, downwardAPI, projected) as the kubelet's AtomicWriter
/// does: every file of the new version appears at once (see [`crate::podstart::atomicdir`]). Returns whether
/// anything changed.
fn write_files(
    plan: &PodPlan,
    paths: &Paths,
    catalog: &Catalog,
    v: &VolumePlan,
) -> Result<bool, PrepareError> {
    let VolumeKind::Files {
        sources,
        uid,
        gid,
        mode,
    } = &v.kind
    else {
        return Ok(false);
    };
    let dir = paths.host(&v.path);
    let mut payload = crate::podstart::atomicdir::Payload::new();
    for s in sources {
        collect_source(plan, paths, catalog, &mut payload, s, *mode)?;
    }
    let mut dir_mode = 0o755;
    if plan.fs_group.is_some() {
        // These volumes are read-only to containers: the kubelet adds group read (and search,
        // and setgid, to directories) for fsGroup.
        for f in payload.values_mut() {
            f.mode |= FS_GROUP_READ;
        }
        dir_mode |= FS_GROUP_READ | FS_GROUP_DIR;
    }
    crate::podstart::atomicdir::write(&dir, &payload, (*uid, *gid), dir_mode).map_err(io_err(&dir))
}

/// What the kubelet's `SetVolumeOwnership` (pkg/volume/volume_linux.go) adds to the mode of a
/// volume's files for fsGroup: group read (`roMask`) on the read-only volumes (configMap, secret,
/// downwardAPI, projected), and on directories group search and setgid too, so what is created
/// in them gets the group. The emptyDir directory, read-write, gets group read-write
/// (`rwMask`) as well, which its 0777 already has.
const FS_GROUP_READ: u32 = 0o440;
const FS_GROUP_DIR: u32 = 0o110 | 0o2000;

/// Brings the files volumes of a running pod up to date with `catalog` (its ConfigMaps and Secrets
/// now) and the issued service account tokens, as the kubelet does for mounted volumes of running
/// pods. Only volumes pod-prepare already wrote are touched: a pod that is not running gets its
/// files at its next start. Environment variables are never changed (they were fixed at start),
/// and files bound one by one (`subPath`) keep the version they were bound to, as in Kubernetes.
/// A volume whose object or key is now missing keeps its previous content and is reported.
/// Returns the names of the volumes that changed.
pub fn refresh_files(
    plan: &PodPlan,
    paths: &Paths,
    catalog: &Catalog,
) -> Result<Vec<String>, PrepareError> {
    check_dirs(plan)?;
    let mut changed = Vec::new();
    let mut first_error = None;
    for v in &plan.volumes {
        if !matches!(v.kind, VolumeKind::Files { .. }) || !paths.host(&v.path).is_dir() {
            continue;
        }
        match write_files(plan, paths, catalog, v) {
            Ok(true) => changed.push(v.name.clone()),
            Ok(false) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(changed),
    }
}

fn check_host_path(path: &Path, shown: &str, t: &str) -> Result<(), PrepareError> {
    let meta = fs::metadata(path);
    let bad = |expected: &str| {
        Err(PrepareError::HostPathType {
            path: shown.to_string(),
            expected: expected.to_string(),
        })
    };
    match t {
        "" => Ok(()),
        "DirectoryOrCreate" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => bad("a directory"),
            Err(_) => mkdir(path, 0o755),
        },
        "FileOrCreate" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => bad("a file"),
            Err(_) => {
                fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o644)
                    .open(path)
                    .map_err(io_err(path))?;
                Ok(())
            }
        },
        "Directory" => {
            if meta.is_ok_and(|m| m.is_dir()) {
                Ok(())
            } else {
                bad("an existing directory")
            }
        }
        "File" => {
            if meta.is_ok_and(|m| m.is_file()) {
                Ok(())
            } else {
                bad("an existing file")
            }
        }
        "Socket" => {
            if meta.is_ok_and(|m| m.file_type().is_socket()) {
                Ok(())
            } else {
                bad("a socket")
            }
        }
        "CharDevice" => {
            if meta.is_ok_and(|m| m.file_type().is_char_device()) {
                Ok(())
            } else {
                bad("a character device")
            }
        }
        "BlockDevice" => {
            if meta.is_ok_and(|m| m.file_type().is_block_device()) {
                Ok(())
            } else {
                bad("a block device")
            }
        }
        other => bad(other),
    }
}

/// Adds the files of one source to `payload` (later sources win on the same path, as in a
/// projected volume).
fn collect_source(
    plan: &PodPlan,
    paths: &Paths,
    catalog: &Catalog,
    payload: &mut crate::podstart::atomicdir::Payload,
    s: &FileSource,
    mode: u32,
) -> Result<(), PrepareError> {
    let mut put = |rel: &str, data: &[u8], m: Option<u32>| -> Result<(), PrepareError> {
        let rel = rel.trim_start_matches("./");
        if !crate::podstart::atomicdir::valid_path(rel) {
            return Err(PrepareError::Escapes {
                path: rel.to_string(),
            });
        }
        payload.insert(
            rel.to_string(),
            crate::podstart::atomicdir::File {
                data: data.to_vec(),
                mode: m.unwrap_or(mode),
            },
        );
        Ok(())
    };
    match s {
        FileSource::Object {
            secret,
            name,
            items,
            optional,
            mode: m,
        } => {
            let Some(data) = object_data(catalog, &plan.namespace, *secret, name) else {
                if *optional {
                    return Ok(());
                }
                return Err(PrepareError::Missing {
                    what: format!("{} {}/{name}", kind(*secret), plan.namespace),
                });
            };
            match items {
                None => {
                    for (k, v) in &data {
                        put(k, v, *m)?;
                    }
                }
                Some(items) => {
                    for it in items {
                        match data.get(&it.key) {
                            Some(v) => put(&it.path, v, it.mode.or(*m))?,
                            None if *optional => {}
                            None => {
                                return Err(PrepareError::Missing {
                                    what: format!(
                                        "key {:?} of {} {}/{name}",
                                        it.key,
                                        kind(*secret),
                                        plan.namespace
                                    ),
                                });
                            }
                        }
                    }
                }
            }
            Ok(())
        }
        FileSource::Literal {
            path,
            content,
            mode: m,
        } => put(path, content.as_bytes(), *m),
        FileSource::ServiceAccountToken { path, mode: m, .. } => {
            // podunit-sync requests the token from the API server and leaves it here for us.
            let issued = crate::common::paths::join_inside(
                &paths.host(&format!("{}/{}", Paths::TOKENS, plan.uid)),
                path,
            )
            .ok_or_else(|| PrepareError::Escapes { path: path.clone() })?;
            let token = fs::read(&issued).map_err(|_| PrepareError::Missing {
                what: format!(
                    "service account token {path:?} (issued by podunit-sync in cluster mode)"
                ),
            })?;
            put(path, &token, *m)
        }
    }
}

/// The node's and the pod's addresses, for the downward API and /etc/hosts.
struct Ips<'a> {
    node: &'a str,
    /// At least one: the node's on the host network.
    pod: &'a [String],
}

/// The Services a pod's environment gets: `read` is None when it wants none, Some(None) when
/// podunit-sync has not listed them yet. Then an API pod waits, as the kubelet makes it
/// (`makeEnvironmentVariables`); a static pod starts without them (it may be what serves them).
fn services_for(
    read: Option<Option<Vec<ServiceRef>>>,
    api_pod: bool,
) -> Result<Vec<ServiceRef>, PrepareError> {
    match read {
        None => Ok(Vec::new()),
        Some(Some(s)) => Ok(s),
        Some(None) if !api_pod => Ok(Vec::new()),
        Some(None) => Err(PrepareError::ServicesNotRead),
    }
}

/// Whether the pod came from the API server (through the spool), not a static pod.
fn is_api_pod(plan: &PodPlan, paths: &Paths) -> bool {
    let source = Path::new(&plan.source);
    source.starts_with(paths.spool()) || source.starts_with(Paths::SPOOL)
}

/// The Services podunit-sync last saw; None before it first wrote them (or when they cannot
/// be read: the next try reads them again).
fn read_services(paths: &Paths) -> Option<Vec<ServiceRef>> {
    std::fs::read(paths.host(Paths::SERVICES))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// The text of one env file: Kubernetes order (later wins), `$(VAR)` expanded over what came before.
fn env_file(
    plan: &PodPlan,
    catalog: &Catalog,
    f: &EnvFilePlan,
    ips: &Ips<'_>,
    services: &[ServiceRef],
) -> Result<String, PrepareError> {
    let mut vars: Vec<(String, String)> = Vec::new();
    let set = |vars: &mut Vec<(String, String)>, k: String, v: String| {
        vars.retain(|(n, _)| *n != k);
        vars.push((k, v));
    };
    for e in &f.entries {
        match e {
            EnvEntry::Value { name, value } => set(&mut vars, name.clone(), value.clone()),
            EnvEntry::Services { links } => {
                for (k, v) in service_env::env(services, &plan.namespace, *links) {
                    set(&mut vars, k, v);
                }
            }
            EnvEntry::HostIp { name } => set(&mut vars, name.clone(), ips.node.to_string()),
            EnvEntry::PodIp { name, all } => {
                let v = if *all {
                    ips.pod.join(",")
                } else {
                    ips.pod.first().cloned().unwrap_or_default()
                };
                set(&mut vars, name.clone(), v)
            }
            EnvEntry::Template { name, template } => {
                let map: BTreeMap<&str, &str> =
                    vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let v = expand_runtime(template, &map);
                set(&mut vars, name.clone(), v);
            }
            EnvEntry::Key {
                name,
                secret,
                object,
                key,
                optional,
            } => {
                match object_data(catalog, &plan.namespace, *secret, object)
                    .and_then(|d| d.get(key).cloned())
                {
                    Some(v) => set(
                        &mut vars,
                        name.clone(),
                        String::from_utf8_lossy(&v).into_owned(),
                    ),
                    None if *optional => {}
                    None => {
                        return Err(PrepareError::Missing {
                            what: format!(
                                "key {key:?} of {} {}/{object}",
                                kind(*secret),
                                plan.namespace
                            ),
                        });
                    }
                }
            }
            EnvEntry::All {
                secret,
                object,
                prefix,
                optional,
            } => match object_data(catalog, &plan.namespace, *secret, object) {
                Some(d) => {
                    for (k, v) in d {
                        let name = format!("{prefix}{k}");
                        // The kubelet skips keys that are not valid variable names.
                        if crate::escape::is_env_name(&name) {
                            set(&mut vars, name, String::from_utf8_lossy(&v).into_owned());
                        }
                    }
                }
                None if *optional => {}
                None => {
                    return Err(PrepareError::Missing {
                        what: format!("{} {}/{object}", kind(*secret), plan.namespace),
                    });
                }
            },
        }
    }
    let mut out = String::new();
    for (k, v) in vars.iter().filter(|(k, _)| !f.overridden.contains(k)) {
        out.push_str(
            &escape::env_file_line(k, v).map_err(|error| PrepareError::Env {
                name: k.clone(),
                error,
            })?,
        );
    }
    Ok(out)
}

/// `$(VAR)` expansion with every value known (the same rules as at generation).
fn expand_runtime(template: &str, vars: &BTreeMap<&str, &str>) -> String {
    crate::translate::env::expand_known(template, &|n| vars.get(n).map(|v| v.to_string()))
}

/// The node's primary IPv4 address (the source address of its default route); loopback when the
/// host has no route. Connecting a UDP socket sends nothing.
pub fn node_ip() -> String {
    let probe = || -> io::Result<String> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        s.connect("192.0.2.1:9")?;
        Ok(s.local_addr()?.ip().to_string())
    };
    probe().unwrap_or_else(|_| "127.0.0.1".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_pods_wait_for_the_first_service_list_and_static_pods_do_not() {
        assert!(services_for(None, true).unwrap().is_empty());
        assert!(services_for(Some(None), false).unwrap().is_empty());
        let e = services_for(Some(None), true).unwrap_err();
        assert_eq!(e.waiting_reason(), "CreateContainerConfigError");
        assert_eq!(
            e.to_string(),
            "services have not yet been read at least once, cannot construct envvars"
        );
        assert!(services_for(Some(Some(Vec::new())), true).is_ok());
    }
}
