//! Manifests only root could have written are read (sshd's StrictModes): a file or directory
//! that another user owns or that group/others may write, and symlinks leading out of the
//! directory, are refused with the reason, and the other pods still come up.

use std::os::unix::fs::{PermissionsExt, chown, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: NAME}\nspec:\n  containers: [{name: c, image: host, command: [/bin/true]}]\n";

fn root(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("podunit-strict-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("etc/pods.d")).unwrap();
    for p in [&d, &d.join("etc"), &d.join("etc/pods.d")] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    d
}

fn write(path: &Path, name: &str, mode: u32) {
    std::fs::write(path, POD.replace("NAME", name)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn generate(root: &Path) -> (String, Vec<String>, bool) {
    let out = root.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_podunit-generator"))
        .arg(&out)
        .env("PODUNIT_ROOT", root)
        .output()
        .unwrap();
    let mut units: Vec<String> = std::fs::read_dir(&out)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    units.retain(|u| u.ends_with("_c.service"));
    units.sort();
    (
        String::from_utf8(o.stderr).unwrap(),
        units,
        o.status.success(),
    )
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap()
}

#[test]
fn untrusted_files_are_refused_and_the_rest_run() {
    assert!(is_root(), "this test needs root (it chowns files)");
    let r = root("files");
    let pods = r.join("etc/pods.d");
    write(&pods.join("good.yaml"), "good", 0o644);
    write(&pods.join("world.yaml"), "world", 0o646);
    write(&pods.join("group.yaml"), "group", 0o664);
    write(&pods.join("user.yaml"), "user", 0o644);
    chown(pods.join("user.yaml"), Some(1000), Some(1000)).unwrap();
    write(&r.join("outside.yaml"), "outside", 0o644);
    symlink(r.join("outside.yaml"), pods.join("link-out.yaml")).unwrap();
    write(&pods.join("real.yml"), "linked", 0o644);
    symlink("real.yml", pods.join("link-in.yaml")).unwrap();

    let (err, units, ok) = generate(&r);
    assert!(!ok, "skipped manifests make the exit status non-zero");
    assert_eq!(units, vec!["podunit-default_good_c.service"], "{err}");
    for (file, why) in [
        ("world.yaml", "writable by group or others"),
        ("group.yaml", "writable by group or others"),
        ("user.yaml", "owned by uid 1000, not root"),
        ("link-out.yaml", "symlink leads out of"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("/etc/pods.d/{file}: refused:")) && l.contains(why)),
            "{file}: {why}\n{err}"
        );
    }
    // A symlink within the directory is fine, so `real.yml` is read twice and its pod is a duplicate.
    assert!(
        err.contains("default/linked is defined more than once"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&r);
}

#[test]
fn an_unsafe_directory_refuses_every_file_in_it() {
    assert!(is_root(), "this test needs root (it chowns files)");
    let r = root("dir");
    let pods = r.join("etc/pods.d");
    write(&pods.join("a.yaml"), "a", 0o644);
    std::fs::set_permissions(&pods, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (err, units, ok) = generate(&r);
    assert!(!ok);
    assert!(units.is_empty(), "{units:?}");
    assert!(
        err.contains("/etc/pods.d is writable by group or others (mode 777)"),
        "{err}"
    );

    std::fs::set_permissions(&pods, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown(r.join("etc"), Some(1000), None).unwrap();
    let (err, units, _) = generate(&r);
    assert!(
        units.is_empty(),
        "a parent owned by another user: {units:?}"
    );
    assert!(err.contains("/etc is owned by uid 1000, not root"), "{err}");

    chown(r.join("etc"), Some(0), None).unwrap();
    let (err, units, ok) = generate(&r);
    assert!(ok, "{err}");
    assert_eq!(units, vec!["podunit-default_a_c.service"]);
    let _ = std::fs::remove_dir_all(&r);
}
