//! The containers' roots from pulled images: each image's layers (read-only, shared by every
//! container of every image that has them) under a writable layer of the container's own, mounted
//! with overlayfs by `pod-prepare` when the pod starts and unmounted by `pod-cleanup` when it
//! stops. The pod unit runs in a mount namespace of its own (its private /tmp, which the
//! containers join), so the mounts are made in the service manager's namespace, where systemd
//! sets up each container's `RootDirectory=` from.

use crate::common::paths::Paths;
use crate::translate::plan::{PodPlan, RootPlan};
use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use std::fmt;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

#[derive(Debug)]
pub enum RootError {
    /// The plan names no root for this container, or a root that is not podunit's to mount.
    BadPlan(String),
    /// The service manager's mount namespace could not be entered.
    Namespace(nix::Error),
    Io(PathBuf, io::Error),
    Mount {
        container: String,
        image: String,
        error: nix::Error,
    },
}

impl fmt::Display for RootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootError::BadPlan(m) => write!(f, "{m}"),
            RootError::Namespace(e) => {
                write!(f, "cannot enter the service manager's mount namespace: {e}")
            }
            RootError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            RootError::Mount {
                container,
                image,
                error,
            } => write!(
                f,
                "container {container:?}: cannot mount the root of image {image}: {error}"
            ),
        }
    }
}

impl std::error::Error for RootError {}

fn io_err(p: &Path) -> impl FnOnce(io::Error) -> RootError + '_ {
    move |e| RootError::Io(p.to_path_buf(), e)
}

/// The layers directory of the store: every layer of a plan must be a direct child of it.
fn layers_dir() -> String {
    format!("{}/layers/", Paths::STORE)
}

/// The root of `container` in `plan`, checked: a tampered or stale plan must never make this
/// (root) helper mount, create or remove anything outside podunit's directories.
fn root_of<'a>(plan: &'a PodPlan, container: &str) -> Result<&'a RootPlan, RootError> {
    let plain = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let uid_ok = !plan.uid.is_empty()
        && plan
            .uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let dirs_ok = plan.runtime_dir == format!("{}/{}", Paths::RUNTIME, plan.uid)
        && plan.state_dir == format!("{}/{}", Paths::STATE, plan.uid);
    if !plain(container) || !uid_ok || !dirs_ok {
        return Err(RootError::BadPlan(format!(
            "container {container:?}: not a container root podunit mounts"
        )));
    }
    let root = plan
        .roots
        .iter()
        .find(|r| r.container == container)
        .ok_or_else(|| {
            RootError::BadPlan(format!(
                "container {container:?}: the pod's plan has no image root for it"
            ))
        })?;
    for l in &root.layers {
        let ok = l.strip_prefix(&layers_dir()).is_some_and(|rest| {
            let mut parts = rest.split('/');
            matches!(
                (parts.next(), parts.next(), parts.next()),
                (Some(a), Some(h), None) if a == "sha256" && h.len() == 64
                    && h.bytes().all(|b| b.is_ascii_hexdigit())
            )
        });
        if !ok {
            return Err(RootError::BadPlan(format!(
                "container {container:?}: {l:?} is not a layer of the image store"
            )));
        }
    }
    if root.layers.is_empty() {
        return Err(RootError::BadPlan(format!(
            "container {container:?}: image {} has no layers",
            root.image
        )));
    }
    Ok(root)
}

/// Mounts every container root of the pod (afresh: a previous writable layer is discarded).
pub fn mount_all(plan: &PodPlan, paths: &Paths) -> Result<(), RootError> {
    if plan.roots.is_empty() {
        return Ok(());
    }
    enter_manager_namespace()?;
    for r in &plan.roots {
        mount(plan, paths, &r.container)?;
    }
    Ok(())
}

/// Joins PID 1's mount namespace unless this process is in it already.
pub fn enter_manager_namespace() -> Result<(), RootError> {
    let ns = |p: &str| std::fs::read_link(p).map_err(io_err(Path::new(p)));
    if ns("/proc/self/ns/mnt")? == ns("/proc/1/ns/mnt")? {
        return Ok(());
    }
    let f = std::fs::File::open("/proc/1/ns/mnt").map_err(io_err(Path::new("/proc/1/ns/mnt")))?;
    nix::sched::setns(&f, CloneFlags::CLONE_NEWNS).map_err(RootError::Namespace)
}

/// Mounts one container's root afresh: the previous writable layer, if any, is discarded.
pub fn mount(plan: &PodPlan, paths: &Paths, container: &str) -> Result<(), RootError> {
    let root = root_of(plan, container)?;
    let target = paths.host(&plan.root_dir(container));
    let state = paths.host(&plan.root_state_dir(container));
    // A start after a crash or a killed stop: the old mount goes first.
    detach(&target);
    match std::fs::remove_dir_all(&state) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(&state)(e)),
        _ => {}
    }
    let (upper, work) = (state.join("upper"), state.join("work"));
    for d in [&upper, &work, &target] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(d)
            .map_err(io_err(d))?;
    }
    // Layers by their names inside the store's layers directory (the mount runs there): a mount's
    // options fit one page, and a full path per layer would limit an image to about 40 layers.
    let base = paths.host(&layers_dir());
    std::env::set_current_dir(&base).map_err(io_err(&base))?;
    let lower: Vec<&str> = root
        .layers
        .iter()
        .rev()
        .map(|l| &l[layers_dir().len()..])
        .collect();
    let data = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.join(":"),
        upper.display(),
        work.display()
    );
    // Device nodes and setuid programs of an image are hostile until the pod says otherwise.
    let mut flags = MsFlags::empty();
    if !root.devices {
        flags |= MsFlags::MS_NODEV;
    }
    if !root.setuid {
        flags |= MsFlags::MS_NOSUID;
    }
    nix::mount::mount(
        Some("overlay"),
        &target,
        Some("overlay"),
        flags,
        Some(data.as_str()),
    )
    .map_err(|error| RootError::Mount {
        container: container.to_string(),
        image: root.image.clone(),
        error,
    })?;
    if let Some(wd) = &root.working_dir {
        make_dirs_inside(&target, wd)?;
    }
    Ok(())
}

/// Unmounts the container's root and drops its writable layer.
pub fn release(plan: &PodPlan, paths: &Paths, container: &str) -> Result<(), RootError> {
    root_of(plan, container)?;
    let target = paths.host(&plan.root_dir(container));
    let state = paths.host(&plan.root_state_dir(container));
    detach(&target);
    let _ = std::fs::remove_dir(&target);
    match std::fs::remove_dir_all(&state) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(&state)(e)),
        _ => Ok(()),
    }
}

/// Every container root of the pod, released (the pod's cleanup, before its runtime directory
/// goes: nothing may be removed through a mount that is still there).
pub fn release_all(plan: &PodPlan, paths: &Paths) {
    if plan.roots.is_empty() {
        return;
    }
    if let Err(e) = enter_manager_namespace() {
        eprintln!("podunit: pod {}/{}: {e}", plan.namespace, plan.name);
        return;
    }
    for r in &plan.roots {
        if let Err(e) = release(plan, paths, &r.container) {
            eprintln!("podunit: pod {}/{}: {e}", plan.namespace, plan.name);
        }
    }
}

/// A lazy unmount: processes still inside keep their view; nothing new gets in.
fn detach(target: &Path) {
    let _ = nix::mount::umount2(target, MntFlags::MNT_DETACH);
}

/// The working directory, created inside the mounted root when missing, as container runtimes
/// create it. Only through real directories: at a symlink (the image's), systemd resolves the rest
/// inside the root itself, so nothing here follows a link to a host path.
fn make_dirs_inside(root: &Path, dir: &str) -> Result<(), RootError> {
    let mut at = root.to_path_buf();
    for c in Path::new(dir).components() {
        let Component::Normal(name) = c else {
            continue;
        };
        at.push(name);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .mode(0o755)
                    .create(&at)
                    .map_err(io_err(&at))?;
            }
            Err(e) => return Err(io_err(&at)(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(layers: Vec<String>) -> PodPlan {
        PodPlan {
            namespace: "default".into(),
            name: "p".into(),
            uid: "u-1".into(),
            source: "/etc/pods.d/p.yaml".into(),
            state_dir: format!("{}/u-1", Paths::STATE),
            runtime_dir: format!("{}/u-1", Paths::RUNTIME),
            volumes: vec![],
            fs_group: None,
            share_process_namespace: false,
            env_files: vec![],
            users: vec![],
            groups: vec![],
            probes: vec![],
            roots: vec![RootPlan {
                container: "app".into(),
                image: "docker.io/library/busybox@sha256:00".into(),
                layers,
                working_dir: None,
                reference: "busybox".into(),
                pull_policy: "Always".into(),
                devices: false,
                setuid: true,
            }],
            etc: None,
            pull_secrets: vec![],
            network: None,
            uts_hostname: None,
        }
    }

    #[test]
    fn only_store_layers_of_plain_containers() {
        let good = format!("{}/layers/sha256/{}", Paths::STORE, "a".repeat(64));
        assert!(root_of(&plan(vec![good.clone()]), "app").is_ok());
        assert!(root_of(&plan(vec![good.clone()]), "other").is_err());
        assert!(root_of(&plan(vec![good.clone()]), "../app").is_err());
        for bad in [
            "/etc".to_string(),
            format!("{}/layers/sha256/../../../etc", Paths::STORE),
            format!("{}/layers/sha256/{}/x", Paths::STORE, "a".repeat(64)),
            format!("{}/layers/sha256/{}", Paths::STORE, "g".repeat(64)),
        ] {
            assert!(root_of(&plan(vec![bad.clone()]), "app").is_err(), "{bad}");
        }
        assert!(root_of(&plan(vec![]), "app").is_err());
        let mut p = plan(vec![good]);
        p.runtime_dir = "/".into();
        assert!(root_of(&p, "app").is_err());
    }

    #[test]
    fn working_dirs_are_made_only_through_real_directories() {
        let tmp = std::env::temp_dir().join(format!("podunit-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let root = tmp.join("root");
        std::fs::create_dir_all(&root).unwrap();
        make_dirs_inside(&root, "/srv/app/data").unwrap();
        assert!(root.join("srv/app/data").is_dir());
        let outside = tmp.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        make_dirs_inside(&root, "/link/made").unwrap();
        assert!(!outside.join("made").exists());
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
