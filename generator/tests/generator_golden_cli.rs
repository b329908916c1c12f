//! Golden tests: each directory under golden/ beside this file holds manifests (`pods.d/`, optional
//! `spool/` and `root/` for other host files) and the expected result: the unit tree (`expected/`,
//! with the generator's report of its problems, `podunit/problems.json`, when it found any), the
//! generator's stderr (`expected.stderr`) and its exit status (`expected.status`). The generator
//! runs as a process, exactly as systemd runs it. `UPDATE_GOLDEN=1` rewrites the expectations.
//! Each case runs twice: cold, and warm with the parsed-manifest cache as podunit-sync fills it
//! (the same tree, messages and status, byte for byte).
//! Every expected tree also passes `systemd-analyze verify` with no complaint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../tests/support/verify.rs"]
mod verify;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// path relative to `root` -> file content or "-> target" for symlinks.
fn read_tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                out.insert(
                    rel,
                    format!("-> {}", std::fs::read_link(&p).unwrap().display()),
                );
            } else if ft.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn write_tree(root: &Path, tree: &BTreeMap<String, String>) {
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root).unwrap();
    for (rel, content) in tree {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        match content.strip_prefix("-> ") {
            Some(target) => std::os::unix::fs::symlink(target, &p).unwrap(),
            None => std::fs::write(&p, content).unwrap(),
        }
    }
}

struct Run {
    tree: BTreeMap<String, String>,
    stderr: String,
    status: i32,
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("podunit-golden-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the generator on `case`; `warm`: after podunit-sync's cache refresh, which returns how
/// many entries it wrote.
fn run_case(case: &Path, warm: bool) -> (Run, usize) {
    let name = case.file_name().unwrap().to_str().unwrap();
    let tmp = tempdir(&format!("{name}-{}", if warm { "warm" } else { "cold" }));
    let root = tmp.join("root");
    verify::copy_tree(&case.join("root"), &root);
    verify::copy_tree(&case.join("pods.d"), &root.join("etc/pods.d"));
    verify::copy_tree(&case.join("spool"), &root.join("var/lib/podunit/spool"));
    let cached = if warm {
        let paths = podunit::common::paths::Paths::with_root(&root);
        podunit::manifest::cache::refresh(&paths).unwrap().written
    } else {
        0
    };
    let out = tmp.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_podunit-generator"))
        .arg(&out)
        .arg(tmp.join("early"))
        .arg(tmp.join("late"))
        .env("PODUNIT_ROOT", &root)
        .output()
        .unwrap();
    assert!(
        !tmp.join("early").exists() && !tmp.join("late").exists(),
        "the generator wrote outside NORMAL_DIR"
    );
    let run = Run {
        tree: read_tree(&out),
        stderr: String::from_utf8(o.stderr)
            .unwrap()
            .replace(root.to_str().unwrap(), "$ROOT"),
        status: o.status.code().unwrap_or(-1),
    };
    let _ = std::fs::remove_dir_all(&tmp);
    (run, cached)
}

fn cases() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    assert!(v.len() >= 20, "golden cases missing");
    v
}

#[test]
fn golden_trees() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut failures = Vec::new();
    let mut cached = 0;
    for (case, warm) in cases()
        .into_iter()
        .flat_map(|c| [(c.clone(), false), (c, true)])
    {
        if update && warm {
            continue;
        }
        let (run, written) = run_case(&case, warm);
        cached += written;
        let name = format!(
            "{}{}",
            case.file_name().unwrap().to_string_lossy(),
            if warm { " (warm cache)" } else { "" }
        );
        if update {
            write_tree(&case.join("expected"), &run.tree);
            std::fs::write(case.join("expected.stderr"), &run.stderr).unwrap();
            std::fs::write(case.join("expected.status"), format!("{}\n", run.status)).unwrap();
            continue;
        }
        let want = read_tree(&case.join("expected"));
        if want != run.tree {
            let keys: std::collections::BTreeSet<_> = want.keys().chain(run.tree.keys()).collect();
            for k in keys {
                if want.get(k) != run.tree.get(k) {
                    failures.push(format!(
                        "{name}: {k}\n--- expected\n{}\n--- got\n{}",
                        want.get(k).map(String::as_str).unwrap_or("(missing)"),
                        run.tree.get(k).map(String::as_str).unwrap_or("(missing)")
                    ));
                }
            }
        }
        let want_err = std::fs::read_to_string(case.join("expected.stderr")).unwrap_or_default();
        if want_err != run.stderr {
            failures.push(format!(
                "{name}: stderr\n--- expected\n{want_err}--- got\n{}",
                run.stderr
            ));
        }
        let want_status: i32 = std::fs::read_to_string(case.join("expected.status"))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(-99);
        if want_status != run.status {
            failures.push(format!(
                "{name}: exit status {} (expected {want_status})",
                run.status
            ));
        }
        // The report is there exactly when the generator said something.
        assert_eq!(
            run.tree.contains_key(podunit::generate::report::FILE),
            !run.stderr.is_empty(),
            "{name}: {}",
            run.stderr
        );
        // The generator contract: non-zero exactly when a manifest was skipped.
        assert_eq!(
            run.status != 0,
            name.starts_with("error-"),
            "{name}: exit status {}",
            run.status
        );
    }
    assert!(
        update || cached >= 20,
        "the warm runs read only {cached} cached manifests"
    );
    assert!(
        failures.is_empty(),
        "{} golden mismatch(es):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_golden_unit_passes_systemd_analyze_verify() {
    let system_units = Path::new("/usr/lib/systemd/system");
    assert!(
        system_units.join("sysinit.target").exists(),
        "systemd is not installed: apt-get install systemd"
    );
    let mut verified = 0;
    for case in cases() {
        let expected = case.join("expected");
        let units = verify::units_in(&expected);
        if units.is_empty() {
            continue;
        }
        // A root with the case's own files; verify adds systemd's units, ours, and stand-ins
        // for the executables the units name.
        let root = tempdir(&format!(
            "verify-{}",
            case.file_name().unwrap().to_string_lossy()
        ));
        verify::copy_tree(&case.join("root"), &root);
        if let Err(e) = verify::verify_units(&root, &expected, &units) {
            panic!("{}: {e}", case.display());
        }
        verified += units.len();
        let _ = std::fs::remove_dir_all(&root);
    }
    assert!(verified > 30, "only {verified} units verified");
}

/// `podunit render --output-dir` (generate, then write_tree) and the generator (generate_into,
/// which writes each pod as it goes) must give the same tree and the same problems: DESIGN.md
/// promises that what render shows is what boot gets.
#[test]
fn render_and_the_generator_write_the_same_tree() {
    use podunit::common::paths::Paths;
    use podunit::generate::{
        generate_into, generate_with_policy, node_setup_with_policy, write_tree,
    };
    use podunit::manifest::Catalog;
    for case in cases() {
        let tmp = tempdir(&format!(
            "same-{}",
            case.file_name().unwrap().to_string_lossy()
        ));
        let root = tmp.join("root");
        verify::copy_tree(&case.join("root"), &root);
        verify::copy_tree(&case.join("pods.d"), &root.join("etc/pods.d"));
        verify::copy_tree(&case.join("spool"), &root.join("var/lib/podunit/spool"));
        let paths = Paths::with_root(&root);
        let catalog = Catalog::load(&paths);
        let (node, images, _, policy) = node_setup_with_policy(&paths);

        let rendered = tmp.join("rendered");
        let g = generate_with_policy(&catalog, &node, &images, policy.as_ref());
        assert!(write_tree(&rendered, &g).is_empty());
        let streamed = tmp.join("streamed");
        let w = generate_into(&streamed, &catalog, &node, &images, policy.as_ref());
        assert!(w.failed.is_empty());

        assert_eq!(
            read_tree(&rendered),
            read_tree(&streamed),
            "{}",
            case.display()
        );
        let text = |ps: &[podunit::common::diag::Problem]| {
            ps.iter().map(|p| p.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(text(&g.problems), text(&w.problems), "{}", case.display());
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
