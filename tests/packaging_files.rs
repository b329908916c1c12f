//! The packaging sources agree with each other, without building anything: packaging/files.tsv,
//! the cargo-deb and cargo-generate-rpm metadata in Cargo.toml, the unit files, tmpfiles.d and the
//! library's idea of the host paths. (tests/packaging_cli.rs checks the built packages.)

mod pkg;

use pkg::{Entry, manifest, repo};
use podunit::common::paths::Paths;
use std::collections::BTreeSet;
use std::process::Command;

fn metadata() -> serde_json::Value {
    let out = pkg::run_ok(Command::new(env!("CARGO")).current_dir(repo()).args([
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--offline",
    ]));
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata json");
    all["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "podunit")
        .expect("package podunit")["metadata"]
        .clone()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn every_source_exists() {
    for e in manifest() {
        let Some(src) = &e.source else { continue };
        if src.starts_with("target/") {
            continue; // built by `make release stage`
        }
        assert!(
            repo().join(src).is_file(),
            "{}: source {src} missing",
            e.path
        );
    }
}

#[test]
fn every_shipped_source_file_is_listed() {
    let listed: BTreeSet<String> = manifest().into_iter().filter_map(|e| e.source).collect();
    let mut dirs = vec![
        "examples".to_string(),
        "packaging/systemd".into(),
        "packaging/tmpfiles.d".into(),
    ];
    while let Some(dir) = dirs.pop() {
        for f in std::fs::read_dir(repo().join(&dir)).unwrap() {
            let f = f.unwrap();
            let rel = format!("{dir}/{}", f.file_name().to_string_lossy());
            if f.file_type().unwrap().is_dir() {
                dirs.push(rel);
                continue;
            }
            assert!(listed.contains(&rel), "{rel} is not in packaging/files.tsv");
        }
    }
    for f in std::fs::read_dir(repo().join("packaging/man")).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().into_owned();
        let staged = format!("target/packaging/man/{name}.gz");
        assert!(
            listed.contains(&staged),
            "man page {name} is not in packaging/files.tsv"
        );
    }
}

#[test]
fn deb_metadata_matches_manifest() {
    let md = metadata();
    let assets = md["deb"]["assets"].as_array().expect("deb assets");
    let got: BTreeSet<(String, String, u32)> = assets
        .iter()
        .map(|a| {
            let a = a.as_array().expect("[source, dest, mode]");
            (
                a[0].as_str().unwrap().to_string(),
                a[1].as_str().unwrap().to_string(),
                u32::from_str_radix(a[2].as_str().unwrap(), 8).unwrap(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String, u32)> = manifest()
        .into_iter()
        .filter(|e| e.in_deb() && !e.generated() && !e.is_dir())
        .map(|e| (e.source.clone().unwrap(), e.path.clone(), e.mode))
        .collect();
    assert_eq!(
        got, want,
        "[package.metadata.deb] assets differ from packaging/files.tsv"
    );
    let scripts = md["deb"]["maintainer-scripts"].as_str().unwrap();
    for s in ["postinst", "prerm", "postrm"] {
        assert!(
            repo().join(scripts).join(s).is_file(),
            "{scripts}{s} missing"
        );
    }
}

#[test]
fn rpm_metadata_matches_manifest() {
    let md = metadata();
    let assets = md["generate-rpm"]["assets"].as_array().expect("rpm assets");
    let key = |src: Option<&str>, dest: &str, mode: u32, conf: bool, dir: bool| {
        (src.map(str::to_string), dest.to_string(), mode, conf, dir)
    };
    let got: BTreeSet<_> = assets
        .iter()
        .map(|a| {
            let dir = a["dir"].as_bool().unwrap_or(false);
            let conf = match &a["config"] {
                serde_json::Value::Null => false,
                serde_json::Value::String(s) if s == "noreplace" => true,
                other => panic!("{}: config = {other}: want \"noreplace\"", a["dest"]),
            };
            key(
                if dir { None } else { a["source"].as_str() },
                a["dest"].as_str().unwrap(),
                u32::from_str_radix(a["mode"].as_str().unwrap(), 8).unwrap(),
                conf,
                dir,
            )
        })
        .collect();
    let want: BTreeSet<_> = manifest()
        .iter()
        .filter(|e| e.in_rpm())
        .map(|e: &Entry| {
            key(
                e.source.as_deref(),
                &e.path,
                e.mode,
                e.is_conf(),
                e.is_dir(),
            )
        })
        .collect();
    assert_eq!(
        got, want,
        "[package.metadata.generate-rpm] assets differ from packaging/files.tsv"
    );
    for s in [
        "post_install_script",
        "pre_uninstall_script",
        "post_uninstall_script",
    ] {
        let f = md["generate-rpm"][s]
            .as_str()
            .unwrap_or_else(|| panic!("{s} not set"));
        assert!(repo().join(f).is_file(), "{s}: {f} missing");
    }
}

#[test]
fn tmpfiles_creates_the_library_paths_with_their_modes() {
    let conf = read("packaging/tmpfiles.d/podunit.conf");
    let lines: BTreeSet<(String, String, String)> = conf
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(c.len(), 6, "tmpfiles line {l:?}");
            assert_eq!((c[3], c[4], c[5]), ("root", "root", "-"), "{l:?}");
            (c[0].to_string(), c[1].to_string(), c[2].to_string())
        })
        .collect();
    let d = |p: &str, m: &str| ("d".to_string(), p.to_string(), m.to_string());
    for want in [
        d("/var/lib/podunit", "0700"),
        d(Paths::SPOOL, "0700"),
        d(Paths::STATE, "0700"),
        d("/run/podunit", "0700"),
        d(Paths::RUNTIME, "0700"),
        d(Paths::RUN_PODS, "0755"),
        d(Paths::ETC_PODS, "0755"),
    ] {
        assert!(
            lines.contains(&want),
            "tmpfiles.d/podunit.conf lacks {want:?}"
        );
    }
}

#[test]
fn units_name_the_installed_binaries() {
    let files: BTreeSet<String> = manifest().into_iter().map(|e| e.path).collect();
    assert!(
        files.contains(Paths::PODUNIT_BIN),
        "generated units call {}",
        Paths::PODUNIT_BIN
    );
    let sync = read("packaging/systemd/podunit-sync.service");
    let exec: Vec<&str> = sync
        .lines()
        .filter(|l| l.starts_with("ExecStart="))
        .collect();
    assert_eq!(exec, ["ExecStart=/usr/bin/podunit-sync"]);
    assert!(files.contains("/usr/bin/podunit-sync"));
    for want in [
        "Type=notify",
        "Restart=always",
        "WantedBy=multi-user.target",
    ] {
        assert!(
            sync.lines().any(|l| l == want),
            "podunit-sync.service lacks {want}"
        );
    }
    let target = read("packaging/systemd/podunit.target");
    assert!(target.lines().any(|l| l == "WantedBy=multi-user.target"));
    // Pods must survive the reconciler: nothing ties podunit.target to it.
    for unit in [&target, &read("packaging/systemd/podunit.slice")] {
        assert!(
            !unit.contains("podunit-sync"),
            "a pod-side unit refers to podunit-sync:\n{unit}"
        );
    }
    let preset = read("packaging/systemd/50-podunit.preset");
    let rules: Vec<&str> = preset.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        rules,
        ["enable podunit.target", "enable podunit-sync.service"]
    );
}

/// The shipped config with its commented-out settings turned on. Settings are the lines `#key:`,
/// `#  key:` or `#  - item` (a `#` right before the YAML); prose comments are `# text`.
fn uncommented_config() -> String {
    read("packaging/config.yaml")
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter(|l| {
            let rest = l.trim_start_matches(' ');
            let indent = l.len() - rest.len();
            indent % 2 == 0
                && !rest.starts_with('#')
                && (rest.contains(':') || rest.starts_with("- "))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn shipped_config_documents_the_real_keys_and_defaults() {
    use podunit::common::config::Config;
    // As shipped, it is the default configuration.
    let shipped = Config::parse(&read("packaging/config.yaml")).unwrap();
    assert_eq!(shipped.config, Config::default());
    // Every documented setting, turned on, is a real key with its real default.
    let text = uncommented_config();
    assert!(
        text.contains("policy:") && text.contains("kubeconfig:"),
        "{text}"
    );
    let on = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        on.config,
        Config::default(),
        "documented defaults differ:\n{text}"
    );
    assert!(
        on.unknown_keys.is_empty(),
        "undocumented or misspelt keys: {:?}",
        on.unknown_keys
    );
}

/// What `make install` would run (`make -n`; the recursive `make stage` is dry-run too).
fn make_install_dry_run(cargo: &str) -> (String, String) {
    let out = Command::new("make")
        .current_dir(repo())
        .args([
            "-n",
            "install",
            &format!("CARGO={cargo}"),
            "DESTDIR=/nonexistent/podunit-destdir",
        ])
        .output()
        .expect("make");
    assert!(out.status.success(), "make -n install: {out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh clone installs: `make install` builds and stages what it installs first. Where there is
/// no cargo (root's PATH under sudo), it installs what an earlier `make stage` left, and says so.
#[test]
fn make_install_builds_what_it_installs_first() {
    let (plan, _) = make_install_dry_run(env!("CARGO"));
    let at = |what: &str| {
        plan.find(what)
            .unwrap_or_else(|| panic!("make install does not run {what:?}:\n{plan}"))
    };
    let install = at("packaging/install.sh install");
    for step in [
        "build --release -p podunit --bins",
        "build --release -p podunit-generator",
        "completions bash",
        "packaging/changelog.sh",
    ] {
        assert!(at(step) < install, "{step} after the install:\n{plan}");
    }

    let (plan, said) = make_install_dry_run("/nonexistent/cargo");
    assert!(!plan.contains("build --release"), "{plan}");
    assert!(plan.contains("packaging/install.sh install"), "{plan}");
    assert!(
        said.contains("no /nonexistent/cargo on PATH: installing what make stage built before"),
        "{said}"
    );
}
