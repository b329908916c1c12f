//! Shared by the packaging tests: packaging/files.tsv (the list of every installed file) and
//! helpers to run the packaging tools.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One line of packaging/files.tsv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub mode: u32,
    pub source: Option<String>,
    pub flags: Vec<String>,
}

impl Entry {
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
    /// Whether the entry is restricted to some of deb/rpm/install, and if so whether `to` is one.
    fn goes_to(&self, to: &str) -> bool {
        let restricted = ["deb", "rpm", "install"].iter().any(|t| self.has(t));
        !restricted || self.has(to)
    }
    pub fn in_deb(&self) -> bool {
        self.goes_to("deb")
    }
    pub fn in_rpm(&self) -> bool {
        self.goes_to("rpm")
    }
    pub fn in_install(&self) -> bool {
        self.goes_to("install") && !self.generated()
    }
    pub fn is_conf(&self) -> bool {
        self.has("conf")
    }
    pub fn is_dir(&self) -> bool {
        self.has("dir")
    }
    pub fn generated(&self) -> bool {
        self.has("generated")
    }
}

const FLAGS: &[&str] = &["conf", "dir", "deb", "rpm", "install", "generated"];

pub fn manifest() -> Vec<Entry> {
    let text = std::fs::read_to_string(repo().join("packaging/files.tsv")).expect("files.tsv");
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(
            cols.len(),
            4,
            "files.tsv:{}: want 4 tab-separated columns",
            n + 1
        );
        let mode = u32::from_str_radix(cols[1], 8)
            .unwrap_or_else(|_| panic!("files.tsv:{}: bad mode {}", n + 1, cols[1]));
        let flags: Vec<String> = match cols[3] {
            "-" => vec![],
            f => f.split(',').map(str::to_string).collect(),
        };
        for f in &flags {
            assert!(
                FLAGS.contains(&f.as_str()),
                "files.tsv:{}: unknown flag {f}",
                n + 1
            );
        }
        assert!(
            cols[0].starts_with('/'),
            "files.tsv:{}: path not absolute",
            n + 1
        );
        out.push(Entry {
            path: cols[0].to_string(),
            mode,
            source: (cols[2] != "-").then(|| cols[2].to_string()),
            flags,
        });
    }
    out
}

/// Runs a command, panicking with its output unless it succeeds.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (see .ci/run for the tools)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ls -l` style permission string (without the type character) for `mode`.
pub fn perms(mode: u32) -> String {
    let mut s = String::new();
    for shift in [6, 3, 0] {
        let b = (mode >> shift) & 7;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// The built packages (made by `make packages`, which `make test-packaging` runs first).
pub fn deb() -> PathBuf {
    let arch = stdout(&run_ok(Command::new("dpkg").arg("--print-architecture")));
    built(&format!(
        "target/packages/podunit_{}-1_{}.deb",
        env!("CARGO_PKG_VERSION"),
        arch.trim()
    ))
}

pub fn rpm() -> PathBuf {
    let arch = stdout(&run_ok(Command::new("uname").arg("-m")));
    built(&format!(
        "target/packages/podunit-{}-1.{}.rpm",
        env!("CARGO_PKG_VERSION"),
        arch.trim()
    ))
}

fn built(rel: &str) -> PathBuf {
    let p = repo().join(rel);
    assert!(
        p.is_file(),
        "{} is missing: run `make test-packaging` (it builds the packages first)",
        p.display()
    );
    p
}

/// A fresh scratch directory under target/ (not /tmp: a package install may not fit a tmpfs).
pub fn scratch(name: &str) -> PathBuf {
    let d = repo()
        .join("target/packaging-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every directory a set of paths implies (their ancestors), without "/".
pub fn ancestors<'a>(paths: impl Iterator<Item = &'a str>) -> std::collections::BTreeSet<String> {
    let mut dirs = std::collections::BTreeSet::new();
    for p in paths {
        let mut cur = Path::new(p).parent();
        while let Some(d) = cur {
            if d == Path::new("/") {
                break;
            }
            dirs.insert(d.to_string_lossy().into_owned());
            cur = d.parent();
        }
    }
    dirs
}
