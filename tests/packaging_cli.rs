//! The built packages: contents, modes and owners against packaging/files.tsv, metadata, lintian,
//! linked libraries, the rpm installed into a scratch root, `make install`/`make uninstall`.
//! Run by `make test-packaging`, which builds the packages first (this target has `test = false`).
//! The .deb on a booted systemd is tests/packaging_e2e.rs.

mod pkg;

use pkg::{manifest, perms, repo, run_ok, scratch, stdout};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// path -> (type char, permission string, owner/group) from `dpkg-deb -c`.
fn deb_listing() -> BTreeMap<String, (char, String, String)> {
    let out = run_ok(Command::new("dpkg-deb").arg("-c").arg(pkg::deb()));
    let mut m = BTreeMap::new();
    for line in stdout(&out).lines() {
        // drwxr-xr-x root/root         0 2026-11-30 15:38 ./usr/bin/
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert!(cols.len() >= 6, "dpkg-deb -c line {line:?}");
        let path = cols[5]
            .trim_start_matches('.')
            .trim_end_matches('/')
            .to_string();
        if path.is_empty() {
            continue; // "./"
        }
        let t = cols[0].chars().next().unwrap();
        m.insert(path, (t, cols[0][1..].to_string(), cols[1].to_string()));
    }
    m
}

#[test]
fn deb_contents_match_manifest() {
    let listing = deb_listing();
    let want: BTreeMap<String, u32> = manifest()
        .into_iter()
        .filter(|e| e.in_deb())
        .map(|e| (e.path, e.mode))
        .collect();
    let files: BTreeSet<&str> = listing
        .iter()
        .filter(|(_, (t, _, _))| *t != 'd')
        .map(|(p, _)| p.as_str())
        .collect();
    let want_files: BTreeSet<&str> = want.keys().map(String::as_str).collect();
    assert_eq!(
        files, want_files,
        "files in the .deb differ from packaging/files.tsv"
    );
    for (path, (t, p, owner)) in &listing {
        assert!(
            owner == "root/root" || owner == "0/0",
            "{path} owned by {owner}"
        );
        match t {
            '-' => assert_eq!(*p, perms(want[path]), "{path} mode"),
            'd' => assert_eq!(p, "rwxr-xr-x", "directory {path} mode"),
            _ => panic!("{path}: unexpected file type {t}"),
        }
    }
    // No directory that no file needs (cargo-deb cannot ship empty ones: /etc/pods.d has a README).
    let dirs: BTreeSet<String> = listing
        .iter()
        .filter(|(_, (t, _, _))| *t == 'd')
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(dirs, pkg::ancestors(want_files.iter().copied()));
    assert!(dirs.contains("/etc/pods.d"));
}

#[test]
fn deb_control_fields() {
    let deb = pkg::deb();
    let field = |f: &str| stdout(&run_ok(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(f)));
    assert_eq!(field("Package").trim(), "podunit");
    assert_eq!(
        field("Version").trim(),
        format!("{}-1", env!("CARGO_PKG_VERSION"))
    );
    // Only what a minimal host has: the C library family and systemd, with its NSS module (pods'
    // numeric users and groups are served from /run/userdb by nss-systemd).
    let depends = field("Depends");
    let names: BTreeSet<String> = depends
        .split(',')
        .map(|d| d.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    assert!(
        names.contains("systemd") && names.contains("libc6") && names.contains("libnss-systemd"),
        "Depends: {depends}"
    );
    for n in &names {
        assert!(
            ["libc6", "libgcc-s1", "systemd", "libnss-systemd"].contains(&n.as_str()),
            "unexpected dependency {n} in Depends: {depends}"
        );
    }
    // What `network: cni` needs, recommended: a minimal host may keep the host network.
    assert_eq!(
        field("Recommends").trim(),
        "containernetworking-plugins, iptables"
    );
    let conffiles = stdout(&run_ok(
        Command::new("dpkg-deb")
            .arg("-I")
            .arg(&deb)
            .arg("conffiles"),
    ));
    let got: BTreeSet<&str> = conffiles.lines().map(str::trim).collect();
    let want_conf: Vec<String> = manifest()
        .into_iter()
        .filter(|e| e.in_deb() && e.is_conf())
        .map(|e| e.path)
        .collect();
    let want: BTreeSet<&str> = want_conf.iter().map(String::as_str).collect();
    assert_eq!(got, want, "conffiles");
    for script in ["postinst", "prerm", "postrm"] {
        let text = stdout(&run_ok(
            Command::new("dpkg-deb").arg("-I").arg(&deb).arg(script),
        ));
        assert_eq!(
            text,
            fs::read_to_string(repo().join("packaging/debian").join(script)).unwrap(),
            "{script} in the .deb differs from packaging/debian/{script}"
        );
    }
}

#[test]
fn lintian_finds_no_errors() {
    let out = Command::new("lintian")
        .args(["--no-tag-display-limit", "--display-info"])
        .arg(pkg::deb())
        .output()
        .expect("run lintian (apt-get install lintian, see tests/setup.sh)");
    let text = stdout(&out);
    // Printed so the run shows the warnings (docs/install.md lists the accepted ones).
    println!("lintian:\n{text}{}", String::from_utf8_lossy(&out.stderr));
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("E:")).collect();
    assert!(errors.is_empty(), "lintian errors:\n{}", errors.join("\n"));
    // lintian exits non-zero on errors only (warnings do not fail it by default).
    assert!(
        out.status.success(),
        "lintian failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The binaries as shipped, extracted from the .deb.
fn extracted() -> std::path::PathBuf {
    let dir = scratch("deb-x");
    run_ok(Command::new("dpkg-deb").arg("-x").arg(pkg::deb()).arg(&dir));
    dir
}

const BINARIES: &[&str] = &[
    "usr/bin/podunit",
    "usr/bin/podunit-sync",
    "usr/lib/systemd/system-generators/podunit-generator",
];

#[test]
fn binaries_link_only_libc_and_are_stripped() {
    let root = extracted();
    // The C library family (libgcc_s is the unwinder glibc itself needs) and, if ever, libsystemd.
    let allowed = [
        "linux-vdso.so.1",
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "libsystemd.so.0",
    ];
    for b in BINARIES {
        let path = root.join(b);
        let ldd = stdout(&run_ok(Command::new("ldd").arg(&path)));
        for line in ldd.lines() {
            let lib = line.split_whitespace().next().unwrap_or("");
            let name = Path::new(lib).file_name().unwrap().to_string_lossy();
            let ok = allowed.contains(&name.as_ref()) || name.starts_with("ld-linux");
            assert!(ok, "{b} links {lib}:\n{ldd}");
        }
        let sections = stdout(&run_ok(Command::new("readelf").arg("-SW").arg(&path)));
        for s in [".symtab", ".debug_info", ".debug_line"] {
            assert!(
                !sections.contains(&format!(" {s} ")),
                "{b} is not stripped ({s})"
            );
        }
    }
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn shipped_units_verify_and_sync_is_hardened() {
    let root = extracted();
    let units = root.join("usr/lib/systemd/system");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(["podunit.target", "podunit.slice", "podunit-sync.service"].map(|u| units.join(u)))
        .output()
        .expect("systemd-analyze");
    let err = String::from_utf8_lossy(&out.stderr);
    // Checked against the host's systemd, where podunit itself is not installed and man: links in
    // Documentation= may not resolve; everything else must be clean.
    let problems: Vec<&str> = err
        .lines()
        .filter(|l| {
            !l.contains("Command 'man ") && !l.contains("/usr/bin/podunit-sync is not executable")
        })
        .collect();
    assert!(problems.is_empty(), "systemd-analyze verify:\n{err}");
    let sec = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--threshold=25", "--no-pager"])
        .arg(units.join("podunit-sync.service"))
        .output()
        .expect("systemd-analyze security");
    let report = stdout(&sec);
    println!("{report}");
    assert!(
        sec.status.success(),
        "podunit-sync.service exposure above 2.5:\n{report}{}",
        String::from_utf8_lossy(&sec.stderr)
    );
    fs::remove_dir_all(root).unwrap();
}

/// path -> (rpm perms string, user, group, fflags) from the .rpm's header.
fn rpm_listing() -> BTreeMap<String, (String, String, String, String)> {
    let out = run_ok(Command::new("rpm").arg("-qp").arg("--qf").arg(
        "[%{FILEMODES:perms}\\t%{FILEUSERNAME}\\t%{FILEGROUPNAME}\\t%{FILEFLAGS:fflags}\\t%{FILENAMES}\\n]",
    ).arg(pkg::rpm()));
    stdout(&out)
        .lines()
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            assert_eq!(c.len(), 5, "rpm line {l:?}");
            (
                c[4].to_string(),
                (c[0].into(), c[1].into(), c[2].into(), c[3].into()),
            )
        })
        .collect()
}

#[test]
fn rpm_contents_match_manifest() {
    let listing = rpm_listing();
    let want: BTreeMap<String, pkg::Entry> = manifest()
        .into_iter()
        .filter(|e| e.in_rpm())
        .map(|e| (e.path.clone(), e))
        .collect();
    let got: BTreeSet<&String> = listing.keys().collect();
    assert_eq!(
        got,
        want.keys().collect(),
        "files in the .rpm differ from packaging/files.tsv"
    );
    for (path, (mode, user, group, fflags)) in &listing {
        let e = &want[path];
        let t = if e.is_dir() { 'd' } else { '-' };
        assert_eq!(*mode, format!("{t}{}", perms(e.mode)), "{path} mode");
        assert_eq!(
            (user.as_str(), group.as_str()),
            ("root", "root"),
            "{path} owner"
        );
        // c = %config, n = noreplace.
        assert_eq!(
            e.is_conf(),
            fflags.contains('c') && fflags.contains('n'),
            "{path}: {fflags}"
        );
    }
}

#[test]
fn rpm_metadata_and_scripts() {
    let rpm = pkg::rpm();
    let q = |fmt: &str| {
        stdout(&run_ok(
            Command::new("rpm").args(["-qp", "--qf", fmt]).arg(&rpm),
        ))
    };
    assert_eq!(
        q("%{NAME} %{VERSION} %{RELEASE}"),
        format!("podunit {} 1", env!("CARGO_PKG_VERSION"))
    );
    let recommends = stdout(&run_ok(
        Command::new("rpm").args(["-qp", "--recommends"]).arg(&rpm),
    ));
    assert_eq!(
        recommends.lines().map(str::trim).collect::<Vec<_>>(),
        ["containernetworking-plugins", "iptables"],
        "Recommends:\n{recommends}"
    );
    let requires = stdout(&run_ok(Command::new("rpm").arg("-qpR").arg(&rpm)));
    assert!(
        requires.lines().any(|l| l.trim() == "systemd"),
        "Requires:\n{requires}"
    );
    for r in requires.lines().map(str::trim) {
        let ok = r == "systemd"
            || r == "/bin/sh"
            || r.starts_with("config(podunit) = ")
            || r.starts_with("rpmlib(")
            || [
                "libc.so.6",
                "libm.so.6",
                "libgcc_s.so.1",
                "ld-linux",
                "rtld(",
            ]
            .iter()
            .any(|l| r.starts_with(l));
        assert!(ok, "unexpected requirement {r}:\n{requires}");
    }
    let scripts = stdout(&run_ok(
        Command::new("rpm").args(["-qp", "--scripts"]).arg(&rpm),
    ));
    for (header, file) in [
        ("postinstall scriptlet", "post_install.sh"),
        ("preuninstall scriptlet", "pre_uninstall.sh"),
        ("postuninstall scriptlet", "post_uninstall.sh"),
    ] {
        assert!(scripts.contains(header), "no {header}:\n{scripts}");
        let body = fs::read_to_string(repo().join("packaging/rpm").join(file)).unwrap();
        assert!(
            scripts.contains(body.trim()),
            "{file} not in the package:\n{scripts}"
        );
    }
}

/// A scratch root with just enough to run the scriptlets: a shell, rm, and stand-ins for systemctl
/// and systemd-tmpfiles that record their arguments.
fn scratch_root(name: &str) -> std::path::PathBuf {
    let root = scratch(name);
    for tool in ["/bin/sh", "/bin/rm"] {
        let real = fs::canonicalize(tool).unwrap();
        let ldd = stdout(&run_ok(Command::new("ldd").arg(&real)));
        let mut files = vec![(real.clone(), tool.to_string())];
        for line in ldd.lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
            let lib = line
                .split("=>")
                .last()
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap_or("");
            if lib.starts_with('/') {
                files.push((fs::canonicalize(lib).unwrap(), lib.to_string()));
            }
        }
        for (src, dst) in files {
            let to = root.join(dst.trim_start_matches('/'));
            fs::create_dir_all(to.parent().unwrap()).unwrap();
            fs::copy(&src, &to).unwrap();
        }
    }
    for (tool, log) in [("systemctl", "systemctl"), ("systemd-tmpfiles", "tmpfiles")] {
        let p = root.join("usr/bin").join(tool);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, format!("#!/bin/sh\necho \"$*\" >> /{log}.log\n")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    for d in ["tmp", "var/tmp", "run", "dev"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    // The scriptlets redirect to /dev/null; without it their commands would silently not run.
    run_ok(
        Command::new("mknod")
            .arg(root.join("dev/null"))
            .args(["c", "1", "3"]),
    );
    fs::set_permissions(root.join("dev/null"), fs::Permissions::from_mode(0o666)).unwrap();
    run_ok(Command::new("rpm").arg("--root").arg(&root).arg("--initdb"));
    root
}

fn rpm_in(root: &Path, args: &[&str]) -> String {
    let out = run_ok(Command::new("rpm").arg("--root").arg(root).args(args));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("scriptlet failed"), "rpm {args:?}:\n{err}");
    err
}

/// Takes (and clears) what the stand-in tool logged.
fn take_log(root: &Path, log: &str) -> String {
    let p = root.join(format!("{log}.log"));
    let s = fs::read_to_string(&p).unwrap_or_default();
    let _ = fs::remove_file(p);
    s
}

#[test]
fn rpm_installs_into_a_scratch_root() {
    let root = scratch_root("rpm-root");
    let rpm = pkg::rpm();
    let rpm = rpm.to_str().unwrap();

    // 1. First install, no running systemd (an image build): preset, tmpfiles, no reload.
    rpm_in(&root, &["-i", "--nodeps", rpm]);
    for e in manifest().into_iter().filter(|e| e.in_rpm()) {
        let p = root.join(e.path.trim_start_matches('/'));
        let md = fs::symlink_metadata(&p).unwrap_or_else(|_| panic!("{} not installed", e.path));
        assert_eq!(md.is_dir(), e.is_dir(), "{}", e.path);
        assert_eq!(md.mode() & 0o7777, e.mode, "{} mode", e.path);
    }
    assert_eq!(
        take_log(&root, "systemctl"),
        "--no-reload preset podunit.target podunit-sync.service\n"
    );
    assert_eq!(take_log(&root, "tmpfiles"), "--create podunit.conf\n");

    // 2. Reinstall (an upgrade for the scripts) on a running systemd: reload and restart the
    // reconciler only; no pod is stopped, nothing is preset again.
    fs::create_dir_all(root.join("run/systemd/system")).unwrap();
    fs::write(root.join("etc/pods.d/web.yaml"), "kind: Pod\n").unwrap();
    fs::create_dir_all(root.join("var/lib/podunit/spool")).unwrap();
    fs::write(root.join("var/lib/podunit/spool/x.yaml"), "kind: Pod\n").unwrap();
    rpm_in(&root, &["-U", "--replacepkgs", "--nodeps", rpm]);
    let log = take_log(&root, "systemctl");
    assert!(log.contains("daemon-reload\n"), "{log}");
    assert!(log.contains("try-restart podunit-sync.service\n"), "{log}");
    assert!(
        !log.contains("stop") && !log.contains("preset"),
        "upgrade stopped or preset:\n{log}"
    );
    assert!(
        root.join("var/lib/podunit/spool/x.yaml").exists(),
        "upgrade removed the spool"
    );

    // 3. Erase: pods stopped, units disabled, systemd reloaded, state gone, manifests kept.
    rpm_in(&root, &["-e", "--nodeps", "podunit"]);
    let log = take_log(&root, "systemctl");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            "stop podunit-sync.service",
            "stop podunit.target podunit.slice",
            "reset-failed podunit-*",
            "--no-reload disable podunit.target podunit-sync.service",
            "daemon-reload",
        ],
        "erase"
    );
    assert!(
        !root.join("var/lib/podunit").exists(),
        "erase left /var/lib/podunit"
    );
    assert!(
        root.join("etc/pods.d/web.yaml").exists(),
        "erase removed a manifest"
    );
    for e in manifest().into_iter().filter(|e| e.in_rpm() && !e.is_dir()) {
        assert!(
            !root.join(e.path.trim_start_matches('/')).exists(),
            "{} left behind",
            e.path
        );
    }
    fs::remove_dir_all(root).unwrap();
}

/// All files (not directories) under `dir`, relative with a leading '/', with their modes.
fn tree(dir: &Path) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                stack.push(p);
            } else {
                let rel = format!("/{}", p.strip_prefix(dir).unwrap().display());
                out.insert(rel, md.mode() & 0o7777);
            }
        }
    }
    out
}

fn make(target: &str, destdir: &Path, prefix: &str) {
    run_ok(
        Command::new("make")
            .current_dir(repo())
            .args(["--no-print-directory", target])
            .arg(format!("DESTDIR={}", destdir.display()))
            .arg(format!("PREFIX={prefix}")),
    );
}

#[test]
fn make_install_and_uninstall() {
    for prefix in ["/usr", "/usr/local"] {
        let dest = scratch(&format!("install{}", prefix.replace('/', "-")));
        make("install", &dest, prefix);
        let want: BTreeMap<String, u32> = manifest()
            .into_iter()
            .filter(|e| e.in_install() && !e.is_dir())
            .map(|e| {
                let p = match e.path.strip_prefix("/usr/") {
                    Some(rest) => format!("{prefix}/{rest}"),
                    None => e.path.clone(),
                };
                (p, e.mode)
            })
            .collect();
        assert_eq!(tree(&dest), want, "make install PREFIX={prefix}");
        let pods_d = fs::metadata(dest.join("etc/pods.d")).unwrap();
        assert!(pods_d.is_dir() && pods_d.mode() & 0o7777 == 0o755);
        let unit = fs::read_to_string(dest.join(format!(
            "{}/lib/systemd/system/podunit-sync.service",
            prefix.trim_start_matches('/')
        )))
        .unwrap();
        assert!(
            unit.contains(&format!("\nExecStart={prefix}/bin/podunit-sync\n")),
            "{unit}"
        );

        // The installed generator writes pod units that call the installed podunit.
        let manifest_file = dest.join("etc/pods.d/web.yaml");
        fs::write(
            &manifest_file,
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: host, command: [/bin/true]}\n",
        )
        .unwrap();
        let out = dest.join("run-generator");
        run_ok(
            Command::new(dest.join(format!(
                "{}/lib/systemd/system-generators/podunit-generator",
                prefix.trim_start_matches('/')
            )))
            .arg(&out)
            .env("PODUNIT_ROOT", &dest),
        );
        let pod_unit = fs::read_to_string(out.join("podunit-default_web.service")).unwrap();
        assert!(
            pod_unit.contains(&format!(
                "\nExecStart=\"{prefix}/bin/podunit\" \"pod-prepare\" "
            )),
            "PREFIX={prefix}: {pod_unit}"
        );
        fs::remove_file(manifest_file).unwrap();
        fs::remove_dir_all(out).unwrap();

        // Config files survive a reinstall and an uninstall, like conffiles.
        let conf = dest.join("etc/podunit/config.yaml");
        fs::write(&conf, "nodeName: edited\n").unwrap();
        make("install", &dest, prefix);
        assert_eq!(fs::read_to_string(&conf).unwrap(), "nodeName: edited\n");
        make("uninstall", &dest, prefix);
        let left: BTreeSet<String> = tree(&dest).into_keys().collect();
        let conf_files: BTreeSet<String> = manifest()
            .into_iter()
            .filter(|e| e.in_install() && e.is_conf())
            .map(|e| e.path)
            .collect();
        assert_eq!(left, conf_files, "make uninstall PREFIX={prefix} left");
        fs::remove_dir_all(dest).unwrap();
    }
}
