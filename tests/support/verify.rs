//! `systemd-analyze verify` on a generated unit tree, shared by the golden tests
//! (generator/tests/generator_golden_cli.rs) and the k8s-examples test.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Copies `from` into `to` (files, directories, symlinks as symlinks). A missing `from` copies
/// nothing.
pub fn copy_tree(from: &Path, to: &Path) {
    if !from.exists() {
        return;
    }
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            let _ = std::fs::remove_file(&dst);
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), dst).unwrap();
        } else if ft.is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// The unit files (`.service`, `.slice`) at the top of a generated tree.
pub fn units_in(tree: &Path) -> Vec<String> {
    let mut units: Vec<String> = match std::fs::read_dir(tree) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".service") || n.ends_with(".slice"))
            .collect(),
        Err(_) => Vec::new(),
    };
    units.sort();
    units
}

/// Runs `systemd-analyze verify` on `units` of the generated `tree` inside `root`, a scratch
/// root that may already hold files the units refer to. It gets systemd's own units, the tree
/// in /etc/systemd/system, a `podunit.target`, and an empty executable for every program an
/// `Exec*=` line names (a bare name as /usr/bin/<name>). Err holds verify's complaints.
pub fn verify_units(root: &Path, tree: &Path, units: &[String]) -> Result<(), String> {
    let system_units = Path::new("/usr/lib/systemd/system");
    assert!(
        system_units.join("sysinit.target").exists(),
        "systemd is not installed: apt-get install systemd"
    );
    copy_tree(system_units, &root.join("usr/lib/systemd/system"));
    copy_tree(tree, &root.join("etc/systemd/system"));
    std::fs::write(
        root.join("etc/systemd/system/podunit.target"),
        "[Unit]\nDescription=Pods\n",
    )
    .unwrap();
    for u in units {
        let text = std::fs::read_to_string(tree.join(u)).unwrap();
        for line in text.lines().filter(|l| l.starts_with("Exec")) {
            let exe = line.split('"').nth(1).unwrap_or_default();
            if exe.is_empty() {
                continue;
            }
            // A bare name (`sh`) is looked up in systemd's search path; `verify` looks on the
            // host even when the unit has RootDirectory=, so the stand-in goes there.
            let exe = if exe.starts_with('/') {
                exe.to_string()
            } else {
                format!("/usr/bin/{exe}")
            };
            let p = root.join(exe.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .arg("--man=no")
        .args(units)
        .current_dir(root.join("etc/systemd/system"))
        .output()
        .expect("systemd-analyze");
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() || !err.trim().is_empty() {
        return Err(format!("systemd-analyze verify:\n{err}"));
    }
    Ok(())
}
