//! tests/machine/make-rootfs.sh takes its Debian mirror from the host's apt sources
//! (`--print-mirror` shows the choice), so the real-systemd suite builds wherever the host's apt
//! works. Each case is an apt configuration of its own, pointed at by `APT_CONFIG`, read by the
//! real `apt-config`.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `make-rootfs.sh --print-mirror` against the given sources.list and sources.list.d files.
fn mirror(
    case: &str,
    list: Option<&str>,
    parts: &[(&str, &str)],
    env: &[(&str, &str)],
) -> Option<String> {
    let dir = Scratch(std::env::temp_dir().join(format!(
        "podunit-rootfs-mirror-{}-{case}",
        std::process::id()
    )));
    let parts_dir = dir.0.join("sources.list.d");
    std::fs::create_dir_all(&parts_dir).unwrap();
    let list_path = dir.0.join("sources.list");
    if let Some(text) = list {
        std::fs::write(&list_path, text).unwrap();
    }
    for (name, text) in parts {
        std::fs::write(parts_dir.join(name), text).unwrap();
    }
    let conf = dir.0.join("apt.conf");
    std::fs::write(
        &conf,
        format!(
            "Dir::Etc::sourcelist \"{}\";\nDir::Etc::sourceparts \"{}\";\n",
            list_path.display(),
            parts_dir.display()
        ),
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/machine/make-rootfs.sh");
    let mut cmd = Command::new(script);
    cmd.arg("--print-mirror")
        .env("APT_CONFIG", &conf)
        .env_remove("PODUNIT_TEST_MIRROR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run make-rootfs.sh (needs apt-config)");
    let text = String::from_utf8(out.stdout).unwrap().trim().to_string();
    match out.status.success() {
        true => Some(text),
        false => {
            assert!(text.is_empty(), "{case}: failed but printed {text:?}");
            None
        }
    }
}

const DEB822: &str = "\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
";

#[test]
fn the_mirror_comes_from_the_hosts_apt_sources() {
    assert!(
        Command::new("apt-config").arg("dump").output().is_ok(),
        "apt-config is needed (apt)"
    );
    // Debian's own default layout (deb822), security first in another file.
    assert_eq!(
        mirror(
            "deb822",
            None,
            &[
                ("a-security.sources", "Types: deb\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\n"),
                ("debian.sources", DEB822),
            ],
            &[]
        )
        .as_deref(),
        Some("http://mirror.example/debian")
    );
    // One-line format with options; deb-src, disabled paragraphs and other suites do not count;
    // a source of bookworm wins over one of another release.
    assert_eq!(
        mirror(
            "one-line",
            Some(
                "# deb http://commented.example/debian bookworm main\n\
                 deb-src http://src.example/debian bookworm main\n\
                 deb [arch=amd64 signed-by=/k.gpg] http://trixie.example/debian trixie main\n\
                 deb [ arch=amd64 ] http://one.example/debian bookworm main contrib\n"
            ),
            &[(
                "off.sources",
                "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n"
            )],
            &[]
        )
        .as_deref(),
        Some("http://one.example/debian")
    );
    // Only another Debian release: any Debian mirror carries bookworm too.
    assert_eq!(
        mirror(
            "other-release",
            None,
            &[(
                "debian.sources",
                "Types: deb deb-src\nURIs:\n http://trixie.example/debian\nSuites: trixie\n"
            )],
            &[]
        )
        .as_deref(),
        Some("http://trixie.example/debian")
    );
    // Not a Debian host (no Debian release among the suites): a clear failure, no guess.
    assert_eq!(
        mirror(
            "ubuntu",
            Some("deb http://archive.example/ubuntu noble main\n"),
            &[],
            &[]
        ),
        None
    );
    // PODUNIT_TEST_MIRROR overrides whatever apt says.
    assert_eq!(
        mirror(
            "override",
            None,
            &[("debian.sources", DEB822)],
            &[("PODUNIT_TEST_MIRROR", "http://override.example/debian")]
        )
        .as_deref(),
        Some("http://override.example/debian")
    );
}
