//! `podunit-sync`: the reconcile helper (local mode) and, with a kubeconfig, the node agent.
use crate::common::paths::Paths;
use crate::localsync::{self, Msg, Options, Syncer};
use crate::systemd::{Client, notify::notify};
use nix::sys::signal::{SigSet, Signal};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;

const USAGE: &str = "\
Start, restart and stop pods after each systemd daemon-reload

Usage: podunit-sync [OPTIONS]

Options:
      --generator-dir <GENERATOR_DIR>
          The generator's output directory (default: /run/systemd/generator under PODUNIT_ROOT)
      --state-file <STATE_FILE>
          The state file (default: /var/lib/podunit/sync-state.json under PODUNIT_ROOT)
      --once
          Reconcile once and exit, without waiting for reloads
  -h, --help
          Print help
  -V, --version
          Print version
";

/// podunit-sync's command line. Parsed by hand: clap (the CLI's parser) would be a fifth of a
/// megabyte of this long-running process's resident pages for three options.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Args {
    pub generator_dir: Option<PathBuf>,
    pub state_file: Option<PathBuf>,
    pub once: bool,
}

/// What the command line asks for: a run, or help / version text to print and exit.
#[derive(Debug, PartialEq)]
enum Parsed {
    Run(Args),
    Print(String),
}

fn parse(argv: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Parsed, String> {
    let mut args = Args::default();
    let mut it = argv.into_iter();
    while let Some(a) = it.next() {
        let a = a
            .into_string()
            .map_err(|a| format!("argument {a:?} is not valid UTF-8"))?;
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a, None),
        };
        let mut value = || -> Result<PathBuf, String> {
            match inline.clone().map(Into::into).or_else(|| it.next()) {
                Some(v) if !v.is_empty() => Ok(PathBuf::from(v)),
                _ => Err(format!("a value is required for '{flag}'")),
            }
        };
        match flag.as_str() {
            "--generator-dir" => args.generator_dir = Some(value()?),
            "--state-file" => args.state_file = Some(value()?),
            "--once" if inline.is_none() => args.once = true,
            "-h" | "--help" if inline.is_none() => return Ok(Parsed::Print(USAGE.to_string())),
            "-V" | "--version" if inline.is_none() => {
                return Ok(Parsed::Print(format!(
                    "podunit-sync {}\n",
                    env!("CARGO_PKG_VERSION")
                )));
            }
            _ => return Err(format!("unexpected argument '{flag}'")),
        }
    }
    Ok(Parsed::Run(args))
}

pub fn main() -> ExitCode {
    let args = match parse(std::env::args_os().skip(1)) {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!(
                "error: {e}\n\nUsage: podunit-sync [OPTIONS]\n\nFor more information, try '--help'."
            );
            return ExitCode::from(super::EXIT_USAGE);
        }
    };
    let mut opts = Options::from_paths(Paths::from_env());
    if let Some(d) = args.generator_dir {
        opts.generator_dir = d;
    }
    if let Some(s) = args.state_file {
        opts.state_file = s;
    }
    let config = match crate::common::config::Config::load(&opts.paths.config_file()) {
        Ok(l) => l.config,
        Err(e) => {
            localsync::log(&format!("{e}"));
            return ExitCode::FAILURE;
        }
    };

    // Block the termination signals before any thread exists (zbus starts its own), so only the
    // signal thread below receives them and the main loop exits between two reconciles.
    let mut sigs = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        sigs.add(s);
    }
    if let Err(e) = sigs.thread_block() {
        localsync::log(&format!("cannot block signals: {e}"));
        return ExitCode::FAILURE;
    }

    // At boot the generator ran before journald, and where there is no kernel log (containers)
    // what it said about broken manifests is lost: say it again, from its report.
    localsync::log_refused(&opts.generator_dir);
    if let Some(m) = crate::manifest::cache::refresh_message(&opts.paths) {
        localsync::log(&m);
    }

    // Cluster mode: with a kubeconfig this node is also a kubelet. Its credentials are checked now,
    // so a loose kubeconfig stops the start with the reason.
    let cluster = match super::cluster::prepare(&opts.paths) {
        Ok(c) => c,
        Err(code) => return code,
    };

    let client = match Client::system() {
        Ok(c) => c,
        Err(e) => {
            localsync::log(&format!("{e}"));
            return ExitCode::FAILURE;
        }
    };
    let (tx, rx) = mpsc::channel();
    // Subscribe before the first reconcile: a reload that happens meanwhile is not lost.
    let events = match client.events(false) {
        Ok(ev) => ev,
        Err(e) => {
            localsync::log(&format!("{e}"));
            return ExitCode::FAILURE;
        }
    };
    let bus_tx = tx.clone();
    std::thread::spawn(move || {
        for ev in events {
            if bus_tx.send(Msg::Bus(ev)).is_err() {
                return;
            }
        }
        let _ = bus_tx.send(Msg::BusClosed);
    });
    let sig_tx = tx.clone();
    std::thread::spawn(move || {
        if let Ok(sig) = sigs.wait() {
            let _ = sig_tx.send(Msg::Terminate(sig as i32));
        }
    });

    let mut syncer = Syncer::new(client, opts);
    if !args.once {
        syncer.images = Some(crate::localsync::images::ImagePulls::spawn(
            syncer.opts.paths.clone(),
            tx.clone(),
        ));
    }
    // /var may have been mounted after the generator ran at boot: spool pods would be missing.
    match syncer.spool_needs_reload() {
        Ok(Some((unseen, fingerprint))) => {
            localsync::log(&format!(
                "spool manifests not rendered yet ({}): daemon-reload",
                unseen.join(", ")
            ));
            match syncer.client.reload() {
                Ok(()) => {
                    if let Err(e) = syncer.record_spool_reload(fingerprint) {
                        localsync::log(&format!("{e}"));
                    }
                }
                Err(e) => localsync::log(&format!("{e}")),
            }
        }
        Ok(None) => {}
        Err(e) => localsync::log(&format!("spool check: {e}")),
    }
    let status = match syncer.reconcile() {
        Ok(sum) => {
            localsync::log(&format!("reconciled: {sum}"));
            format!("Reconciled: {sum}")
        }
        Err(e) => {
            localsync::log(&format!("reconcile failed: {e}"));
            format!("Reconcile failed: {e}")
        }
    };
    if args.once {
        return ExitCode::SUCCESS;
    }
    // After a crash or a reboot: attachments of pods that are gone (their record lost, too).
    let cni_cache = syncer
        .opts
        .paths
        .host(&config.cni.cache_dir.to_string_lossy());
    syncer.sweep_networks_at_rest(cni_cache);
    syncer.pull_waiting_images();
    if config.watch_manifests {
        crate::localsync::watch::spawn(syncer.opts.paths.clone(), tx.clone());
    }
    drop(tx);
    match cluster {
        Some(agent) => agent.spawn(),
        None => {
            crate::prober::runner::spawn(
                &syncer.opts.paths,
                Box::new(crate::prober::runner::JournalOnly),
            );
        }
    }
    let _ = notify(&format!("READY=1\nSTATUS={status}"));
    let code = match localsync::run(&mut syncer, rx) {
        Ok(c) => c,
        Err(e) => {
            localsync::log(&format!("{e}"));
            1
        }
    };
    let _ = notify("STOPPING=1");
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(argv: &[&str]) -> Result<Parsed, String> {
        parse(argv.iter().map(Into::into))
    }

    #[test]
    fn options_as_clap_took_them() {
        assert_eq!(run(&[]), Ok(Parsed::Run(Args::default())));
        let want = Args {
            generator_dir: Some("/g".into()),
            state_file: Some("/s.json".into()),
            once: true,
        };
        for argv in [
            &["--generator-dir", "/g", "--state-file", "/s.json", "--once"][..],
            &["--once", "--generator-dir=/g", "--state-file=/s.json"],
        ] {
            assert_eq!(
                run(argv),
                Ok(Parsed::Run(Args { ..want.clone() })),
                "{argv:?}"
            );
        }
        assert!(
            matches!(run(&["--help"]), Ok(Parsed::Print(t)) if t.contains("--state-file <STATE_FILE>"))
        );
        assert_eq!(
            run(&["-V"]),
            Ok(Parsed::Print(format!(
                "podunit-sync {}\n",
                env!("CARGO_PKG_VERSION")
            )))
        );
    }

    #[test]
    fn mistakes_are_usage_errors() {
        for argv in [
            &["--bogus"][..],
            &["--generator-dir"],
            &["--generator-dir="],
            &["--once=yes"],
            &["extra"],
        ] {
            assert!(run(argv).is_err(), "{argv:?}");
        }
    }
}
