//! Optional: watch /etc/pods.d and reload by itself, as the kubelet does for static pod files.
//! Off by default (`watchManifests: true` in /etc/podunit/config.yaml turns it on): the documented
//! workflow stays "copy the file, `systemctl daemon-reload`".
//!
//! Changes are debounced (an editor's save is several events) and validated first with the
//! generator's own code: a changed file that does not render (half-written, broken) is reported
//! and does not trigger a reload; the next save does.

use crate::common::paths::Paths;
use crate::localsync::{Msg, log};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::collections::BTreeSet;
use std::os::fd::AsFd;
use std::sync::mpsc::Sender;

/// Quiet time after the last change before acting on a burst of changes.
pub const DEBOUNCE_MS: u16 = 500;

pub fn spawn(paths: Paths, tx: Sender<Msg>) {
    std::thread::spawn(move || {
        if let Err(e) = watch(&paths, &tx) {
            log(&format!("manifest watch stopped: {e}"));
        }
    });
}

fn watch(paths: &Paths, tx: &Sender<Msg>) -> nix::Result<()> {
    let dir = paths.host(Paths::ETC_PODS);
    let ino = Inotify::init(InitFlags::IN_CLOEXEC)?;
    ino.add_watch(
        &dir,
        AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_DELETE,
    )?;
    log(&format!("watching {} for manifest changes", dir.display()));
    loop {
        let mut changed = BTreeSet::new();
        collect(&ino, &mut changed)?;
        // Debounce: keep reading until the directory has been quiet for DEBOUNCE_MS.
        loop {
            let mut fds = [PollFd::new(ino.as_fd(), PollFlags::POLLIN)];
            if poll(&mut fds, PollTimeout::from(DEBOUNCE_MS))? == 0 {
                break;
            }
            collect(&ino, &mut changed)?;
        }
        if changed.is_empty() {
            continue;
        }
        let broken = invalid_changes(paths, &changed);
        if !broken.is_empty() {
            for p in broken {
                log(&format!("not reloading: {p}"));
            }
            continue;
        }
        if tx.send(Msg::ManifestsChanged).is_err() {
            return Ok(());
        }
    }
}

fn collect(ino: &Inotify, changed: &mut BTreeSet<String>) -> nix::Result<()> {
    for ev in ino.read_events()? {
        if let Some(name) = ev.name.as_ref().and_then(|n| n.to_str())
            && crate::manifest::discover::is_manifest_name(name)
        {
            changed.insert(format!("{}/{name}", Paths::ETC_PODS));
        }
    }
    Ok(())
}

/// Errors of the generator's own code that concern the changed files (host paths).
fn invalid_changes(paths: &Paths, changed: &BTreeSet<String>) -> Vec<String> {
    use crate::generate::{FsImages, detect_node, generate};
    let catalog = crate::manifest::Catalog::load(paths);
    let node = detect_node(paths);
    let images = FsImages {
        paths: paths.clone(),
        host_aliases: Vec::new(),
    };
    let g = generate(&catalog, &node, &images);
    g.problems
        .iter()
        .filter(|p| p.is_error() && changed.contains(&p.file.to_string_lossy().into_owned()))
        .map(|p| p.to_string())
        .collect()
}
