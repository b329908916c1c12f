//! podunit-generator: systemd.generator(7) that turns Pod manifests into units.
//!
//! Called as `podunit-generator NORMAL_DIR [EARLY_DIR LATE_DIR]`; writes only into NORMAL_DIR.
//! Reads files and writes units: no network, no D-Bus, no waiting on anything.

mod alloc;

use podunit::common::paths::Paths;
use podunit::generate::{generate_into, node_setup_with_policy};
use podunit::manifest::Catalog;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: alloc::Cached = alloc::Cached;

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
    let (node, images, config_problem, policy) = node_setup_with_policy(&paths);
    if let Some(p) = &config_problem {
        report(p, false);
    }
    let written = generate_into(&normal, &catalog, &node, &images, policy.as_ref());
    for p in &written.problems {
        report(&p.to_string(), p.is_error());
    }
    // What it refused, for `podunit status` and podunit-sync to show.
    let problems =
        podunit::generate::report::build(&catalog, &written.problems, config_problem.as_deref());
    if let Err(e) = podunit::generate::report::write(&normal, &problems) {
        report(
            &format!(
                "cannot write {}: {e}",
                normal.join(podunit::generate::report::FILE).display()
            ),
            true,
        );
    }
    for (pod, e) in &written.failed {
        report(
            &format!(
                "pod {pod}: cannot write its units to {}: {e}",
                normal.display()
            ),
            true,
        );
    }
    let code = if written.problems.iter().any(|p| p.is_error()) || !written.failed.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    // Every manifest's objects are held until here; the process ends now, and freeing them one
    // by one would cost more than a tenth of a pod's instructions. The kernel takes it all back.
    std::mem::forget(catalog);
    code
}

/// To stderr and to the journal; at boot, before journald runs, to the kernel log, which journald
/// reads later. systemd 252 does not connect a generator's stderr to the journal.
fn report(msg: &str, error: bool) {
    // One line each, whatever names a manifest holds.
    let msg = podunit::common::diag::one_line(msg);
    eprintln!("podunit-generator: {msg}");
    // Under a test root the host's logs are not ours to write.
    if std::env::var_os(podunit::common::paths::ROOT_ENV).is_some_and(|r| !r.is_empty()) {
        return;
    }
    let flat = msg.replace(['\n', '\r'], " ");
    // syslog priorities: 3 = err, 4 = warning.
    let prio = if error { 3 } else { 4 };
    let native = format!("PRIORITY={prio}\nSYSLOG_IDENTIFIER=podunit-generator\nMESSAGE={flat}\n");
    let sent = std::os::unix::net::UnixDatagram::unbound()
        .and_then(|s| s.send_to(native.as_bytes(), "/run/systemd/journal/socket"))
        .is_ok();
    if sent {
        return;
    }
    let line = format!(
        "<{prio}>podunit-generator[{}]: {flat}\n",
        std::process::id()
    );
    if let Ok(mut k) = std::fs::OpenOptions::new().write(true).open("/dev/kmsg") {
        let _ = k.write_all(line.as_bytes());
    }
}
