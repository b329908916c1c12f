//! podunit-generator: systemd.generator(7) that turns Pod manifests into units.
//!
//! Called as `podunit-generator NORMAL_DIR [EARLY_DIR LATE_DIR]`; writes only into NORMAL_DIR.
//! Reads files and writes units: no network, no D-Bus, no waiting on anything.

use podunit::generate::{FsImages, detect_node, generate, write_tree};
use podunit::manifest::Catalog;
use podunit::paths::Paths;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let normal = match args.as_slice() {
        [n] | [n, _, _] => n.clone(),
        _ => {
            eprintln!("usage: podunit-generator NORMAL_DIR [EARLY_DIR LATE_DIR]");
            return ExitCode::from(2);
        }
    };
    let paths = Paths::from_env();
    let catalog = Catalog::load(&paths);
    let node = detect_node(&paths);
    let images = FsImages {
        paths: paths.clone(),
        host_aliases: Vec::new(),
    };
    let generated = generate(&catalog, &node, &images);
    for p in &generated.problems {
        report(&p.to_string(), p.is_error());
    }
    if let Err(e) = write_tree(&normal, &generated) {
        report(
            &format!("cannot write units to {}: {e}", normal.display()),
            true,
        );
        return ExitCode::FAILURE;
    }
    if generated.has_errors() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// To stderr and, at boot when nothing else listens yet, to the kernel log.
fn report(msg: &str, error: bool) {
    eprintln!("podunit-generator: {msg}");
    // Priority 3 = err, 4 = warning (syslog levels); kmsg takes one record per write.
    let line = format!(
        "<{}>podunit-generator[{}]: {}\n",
        if error { 3 } else { 4 },
        std::process::id(),
        msg.replace('\n', " ")
    );
    // Under a test root the host's kernel log is not ours to write.
    if std::env::var_os(podunit::paths::ROOT_ENV).is_some_and(|r| !r.is_empty()) {
        return;
    }
    if let Ok(mut k) = std::fs::OpenOptions::new().write(true).open("/dev/kmsg") {
        let _ = k.write_all(line.as_bytes());
    }
}
