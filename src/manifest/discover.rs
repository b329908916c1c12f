//! Which files in a manifest directory count (DESIGN.md §3).

use std::path::{Path, PathBuf};

/// Manifest files larger than this are refused unread: a hostile file cannot cost memory or time.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Whether `name` is a manifest file name. Dotfiles, editor backups and package-manager leftovers
/// are skipped silently, as systemd skips them in unit directories.
pub fn is_manifest_name(name: &str) -> bool {
    if name.starts_with('.') || name.ends_with('~') {
        return false;
    }
    if name.contains(".dpkg-")
        || name.ends_with(".rpmnew")
        || name.ends_with(".rpmsave")
        || name.ends_with(".rpmorig")
    {
        return false;
    }
    name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json")
}

/// The manifest files directly in `dir`, sorted by name for a stable order. A missing directory is
/// simply empty (most hosts have no /run/pods.d).
pub fn list_dir(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if is_manifest_name(name) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Refuses a manifest that someone other than root could have written, as sshd's StrictModes
/// refuses such authorized_keys: the file (or what its symlink points to, which must stay in the
/// same directory), its directory, and the directories above it up to `root`, must be owned by
/// root and not writable by group or others. Whatever runs from these files runs as root.
pub fn check_trusted(root: &Path, dir: &Path, file: &Path) -> Result<(), String> {
    let link = std::fs::symlink_metadata(file).map_err(|e| format!("cannot read: {e}"))?;
    if link.file_type().is_symlink() {
        let target = std::fs::canonicalize(file).map_err(|e| format!("dangling symlink: {e}"))?;
        let home = std::fs::canonicalize(dir)
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        if target.parent() != Some(home.as_path()) {
            return Err(format!(
                "symlink leads out of {} (to {})",
                dir.display(),
                target.display()
            ));
        }
    }
    root_only(file)?;
    root_only_up_to(root, dir)
}

/// `dir` and the directories above it up to `root` are owned by root, writable by nobody else.
pub fn root_only_up_to(root: &Path, dir: &Path) -> Result<(), String> {
    let mut d = Some(dir);
    while let Some(p) = d {
        root_only(p)?;
        if p == root || !p.starts_with(root) {
            break;
        }
        d = p.parent();
    }
    Ok(())
}

/// `p` is owned by root and writable by nobody else (following symlinks).
pub fn root_only(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    if m.uid() != 0 {
        return Err(format!(
            "{} is owned by uid {}, not root",
            p.display(),
            m.uid()
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by group or others (mode {:o})",
            p.display(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["web.yaml", "a.yml", "b.json", "x.y.yaml"] {
            assert!(is_manifest_name(ok), "{ok}");
        }
        for skip in [
            ".hidden.yaml",
            "web.yaml~",
            "web.yaml.dpkg-old",
            "web.yaml.dpkg-dist",
            "w.yaml.rpmnew",
            "w.yaml.rpmsave",
            "README",
            "web.yaml.bak",
        ] {
            assert!(!is_manifest_name(skip), "{skip}");
        }
    }
}
