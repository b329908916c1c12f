//! `podunit check PATH` and `render PATH`: the files named, read as boot will read them. A file in
//! a manifest directory gets the generator's ownership, mode and symlink rules and is named as the
//! generator names it (the manifest, never the target of its symlink); a file elsewhere is read
//! as an admin-written manifest, with a note that those rules apply once it is installed.

use super::{Catalog, discover, read_and_parse};
use crate::common::diag::Problem;
use crate::common::paths::{Paths, Source};
use std::path::{Path, PathBuf};

/// Where a file or directory lies, for the rules boot applies to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// In a manifest directory: `dir` as podunit opens it (under the test root).
    Manifests {
        source: Source,
        dir: PathBuf,
    },
    Elsewhere,
}

/// `p` made absolute without following a symlink in its last part (a relative path is taken from
/// `cwd`; the directories above are resolved, as the generator resolves its own).
pub fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    };
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|d| d.join(name))
            .unwrap_or(abs.clone()),
        _ => abs,
    }
}

/// Which manifest directory `dir` is, if it is one.
pub fn place_dir(paths: &Paths, dir: &Path) -> Placement {
    let Ok(real) = std::fs::canonicalize(dir) else {
        return Placement::Elsewhere;
    };
    paths
        .manifest_dirs()
        .into_iter()
        .find(|(_, d)| std::fs::canonicalize(d).is_ok_and(|d| d == real))
        .map(|(source, dir)| Placement::Manifests { source, dir })
        .unwrap_or(Placement::Elsewhere)
}

/// What is noted about paths outside every manifest directory.
pub fn elsewhere_note(p: &Path) -> String {
    format!(
        "note: {} is not in a manifest directory ({}, {}): the generator's ownership, mode and symlink rules apply once it is installed there",
        p.display(),
        Paths::ETC_PODS,
        Paths::RUN_PODS
    )
}

impl Catalog {
    /// Loads explicit files and directories as boot would (see the module). Returns the catalog
    /// and the notes about paths outside the manifest directories.
    pub fn load_placed(paths: &Paths, items: &[PathBuf]) -> (Catalog, Vec<String>) {
        let mut c = Catalog::default();
        let mut notes = Vec::new();
        for item in items {
            if item.is_dir() {
                let place = place_dir(paths, item);
                if place == Placement::Elsewhere {
                    notes.push(elsewhere_note(item));
                }
                match discover::list_dir(item) {
                    Ok(files) => files.iter().for_each(|f| c.add_placed(paths, &place, f)),
                    Err(e) => c
                        .problems
                        .push(Problem::error(item, format!("cannot read directory: {e}"))),
                }
                continue;
            }
            let place = match item.parent() {
                Some(d) if item.exists() || item.is_symlink() => place_dir(paths, d),
                _ => Placement::Elsewhere,
            };
            if place == Placement::Elsewhere && item.exists() {
                notes.push(elsewhere_note(item));
            }
            c.add_placed(paths, &place, item);
        }
        c.refuse_duplicates();
        (c, notes)
    }

    fn add_placed(&mut self, paths: &Paths, place: &Placement, file: &Path) {
        match place {
            Placement::Elsewhere => self.add_file(file, Source::Etc),
            Placement::Manifests { source, dir } => {
                // Named as the generator names it: the host path of the manifest itself.
                let in_dir = dir.join(file.file_name().unwrap_or_default());
                let shown =
                    Path::new("/").join(in_dir.strip_prefix(&paths.root).unwrap_or(&in_dir));
                let (objects, problems) = match discover::check_trusted(&paths.root, dir, &in_dir) {
                    Ok(()) => {
                        read_and_parse(&in_dir, &shown, *source, &super::cache::Reader::none())
                    }
                    Err(why) => (
                        Vec::new(),
                        vec![Problem::error(&shown, format!("refused: {why}"))],
                    ),
                };
                self.add_parsed(&shown, *source, objects, problems);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_link_keeps_its_own_name() {
        let d = std::env::temp_dir().join(format!("podunit-placement-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("etc/pods.d")).unwrap();
        std::fs::write(d.join("target.yaml"), "").unwrap();
        std::os::unix::fs::symlink(d.join("target.yaml"), d.join("etc/pods.d/link.yaml")).unwrap();
        let real = std::fs::canonicalize(&d).unwrap();
        assert_eq!(
            absolute(Path::new("pods.d/link.yaml"), &d.join("etc")),
            real.join("etc/pods.d/link.yaml")
        );
        let paths = Paths::with_root(&d);
        assert_eq!(
            place_dir(&paths, &real.join("etc/pods.d")),
            Placement::Manifests {
                source: Source::Etc,
                dir: d.join("etc/pods.d")
            }
        );
        assert_eq!(place_dir(&paths, &d), Placement::Elsewhere);
        let _ = std::fs::remove_dir_all(&d);
    }
}
