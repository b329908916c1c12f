//! `podunit check FILE` says what boot will do with that file: the generator's ownership, mode
//! and symlink rules for a file in a manifest directory (naming the manifest, not its target), a
//! note for a file elsewhere, warnings counted, a missing manifest directory said.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: NAME}\nspec:\n  containers: [{name: c, image: host, command: [/bin/true]}]\n";

/// A test root with /etc/pods.d (0755, like every directory above it) unless `pods_d` is false.
fn root(name: &str, pods_d: bool) -> PathBuf {
    let d = std::env::temp_dir().join(format!("podunit-check-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    if pods_d {
        std::fs::create_dir_all(d.join("etc/pods.d")).unwrap();
    }
    for p in [d.clone(), d.join("etc"), d.join("etc/pods.d")] {
        if p.exists() {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    d
}

fn write(path: &Path, name: &str, mode: u32) {
    std::fs::write(path, POD.replace("NAME", name)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// (exit code, stdout, stderr) of `podunit check ARGS` under the test root, from `cwd`.
fn check(root: &Path, cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_podunit"))
        .arg("check")
        .args(args)
        .current_dir(cwd)
        .env("PODUNIT_ROOT", root)
        .output()
        .unwrap();
    let clean = |b: &[u8]| String::from_utf8_lossy(b).replace(root.to_str().unwrap(), "$ROOT");
    (
        o.status.code().unwrap_or(-1),
        clean(&o.stdout),
        clean(&o.stderr),
    )
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap()
}

#[test]
fn a_file_in_a_manifest_directory_gets_the_generator_s_rules() {
    assert!(
        is_root(),
        "this test needs root (files must be root's to be trusted)"
    );
    let r = root("rules", true);
    let pods = r.join("etc/pods.d");
    write(&pods.join("good.yaml"), "good", 0o644);
    write(&pods.join("loose.yaml"), "loose", 0o666);
    write(&r.join("outside.yaml"), "outside", 0o644);
    symlink(r.join("outside.yaml"), pods.join("link-out.yaml")).unwrap();

    let (code, out, err) = check(&r, &r, &["etc/pods.d/loose.yaml"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("/etc/pods.d/loose.yaml: refused: ")
            && out.contains("writable by group or others"),
        "{out}"
    );
    assert!(err.contains("0 pod(s) ok, 1 error(s)"), "{err}");

    // Named as the generator names it: the link, never its target.
    let (code, out, _) = check(&r, &pods, &["link-out.yaml"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("/etc/pods.d/link-out.yaml: refused: symlink leads out of"),
        "{out}"
    );
    assert!(!out.starts_with("$ROOT/outside.yaml"), "{out}");

    // The directory itself: each file as boot reads it.
    let (code, out, err) = check(&r, &r, &[pods.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.contains("loose.yaml: refused"), "{out}");
    assert!(out.contains("link-out.yaml: refused"), "{out}");
    assert!(err.contains("1 pod(s) ok, 2 error(s)"), "{err}");
    assert!(!err.contains("not in a manifest directory"), "{err}");

    let (code, out, err) = check(&r, &r, &["etc/pods.d/good.yaml"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("1 pod(s) ok, 0 error(s), 0 warning(s)"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&r);
}

#[test]
fn a_file_elsewhere_gets_a_note_and_warnings_are_counted() {
    let r = root("elsewhere", true);
    let f = r.join("web.yaml");
    std::fs::write(
        &f,
        POD.replace("NAME", "web").replace(
            "spec:\n",
            "spec:\n  volumes: [{name: v, emptyDir: {medium: Memory, sizeLimit: 1Mi}}]\n",
        ),
    )
    .unwrap();
    // Group-writable: boot would refuse it, so the note says when the rules apply.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o664)).unwrap();
    let (code, out, err) = check(&r, &r, &["web.yaml"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("sizeLimit: warning: not enforced yet"),
        "{out}"
    );
    assert!(
        err.contains("note: $ROOT/web.yaml is not in a manifest directory")
            && err.contains("apply once it is installed there"),
        "{err}"
    );
    assert!(
        err.contains("1 pod(s) ok, 0 error(s), 1 warning(s)"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&r);
}

#[test]
fn a_missing_manifest_directory_is_said_not_counted_as_ok() {
    let r = root("missing", false);
    let (code, out, err) = check(&r, &r, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("no manifest directory exists: $ROOT/etc/pods.d, $ROOT/run/pods.d"),
        "{err}"
    );
    assert!(!err.contains("0 pod(s) ok"), "{err}");

    // Only the spool: /etc/pods.d is said to be missing, the spool's pods counted.
    std::fs::create_dir_all(r.join("var/lib/podunit/spool")).unwrap();
    let (_, _, err) = check(&r, &r, &[]);
    assert!(
        err.contains("note: $ROOT/etc/pods.d does not exist"),
        "{err}"
    );
    assert!(
        err.contains("0 pod(s) ok, 0 error(s), 0 warning(s)"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&r);
}

/// A chart's output as it comes: the Service and ServiceAccount beside the pod are skipped with
/// a warning naming the kind and why; the pod is checked as if alone; a kind podunit does not
/// know stays an error.
#[test]
fn control_plane_kinds_beside_a_pod_are_skipped_with_a_warning() {
    let r = root("bundle", true);
    let f = r.join("etc/pods.d/web.yaml");
    let bundle = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: web}}\n---\n{}---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: web}}\nspec: {{ports: [{{port: 80}}]}}\n",
        POD.replace("NAME", "web")
    );
    std::fs::write(&f, &bundle).unwrap();
    let (code, out, err) = check(&r, &r, &["etc/pods.d/web.yaml"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("web.yaml: default/web: document[2].kind: warning: v1/Service skipped: "),
        "{out}"
    );
    assert!(
        out.contains("web.yaml: default/web: kind: warning: v1/ServiceAccount skipped: "),
        "{out}"
    );
    assert!(
        err.contains("1 pod(s) ok, 0 error(s), 2 warning(s)"),
        "{err}"
    );
    std::fs::write(&f, bundle.replace("kind: Service\n", "kind: Servise\n")).unwrap();
    let (code, out, err) = check(&r, &r, &["etc/pods.d/web.yaml"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("document[2].kind: v1/Servise is not supported here"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&r);
}
