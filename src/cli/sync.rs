//! `podunit-sync`: the reconcile helper (local mode) and, with a kubeconfig, the node agent.
use crate::common::paths::Paths;
use crate::localsync::{self, Msg, Options, Syncer};
use crate::systemd::{Client, notify::notify};
use clap::Parser;
use nix::sys::signal::{SigSet, Signal};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;

#[derive(Parser, Debug)]
#[command(
    name = "podunit-sync",
    version,
    about = "Start, restart and stop pods after each systemd daemon-reload"
)]
pub struct Args {
    /// The generator's output directory (default: /run/systemd/generator under PODUNIT_ROOT).
    #[arg(long)]
    pub generator_dir: Option<PathBuf>,
    /// The state file (default: /var/lib/podunit/sync-state.json under PODUNIT_ROOT).
    #[arg(long)]
    pub state_file: Option<PathBuf>,
    /// Reconcile once and exit, without waiting for reloads.
    #[arg(long)]
    pub once: bool,
}

pub fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(super::EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
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
    syncer.pull_waiting_images();
    if config.watch_manifests {
        crate::localsync::watch::spawn(syncer.opts.paths.clone(), tx.clone());
    }
    drop(tx);
    match cluster {
        Some(agent) => agent.spawn(),
        None => {
            crate::probe::runner::spawn(
                &syncer.opts.paths,
                Box::new(crate::probe::runner::JournalOnly),
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
