//! `podunit image pull|ls|inspect|rm|prune`: the local image store by hand.

use crate::common::paths::Paths;
use crate::image::pull::{NodePull, Progress, Puller};
use crate::image::{Reference, Store};
use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum Cmd {
    /// Pull images from their registries into the local store.
    Pull {
        #[arg(required = true)]
        images: Vec<String>,
        /// No progress display, even on a terminal.
        #[arg(short, long)]
        quiet: bool,
    },
    /// List the images in the store.
    Ls,
    /// Print an image's record, config and layer directories as JSON.
    Inspect { image: String },
    /// Remove images from the store (refused for an image a pod uses, unless --force).
    Rm {
        #[arg(required = true)]
        images: Vec<String>,
        #[arg(short, long)]
        force: bool,
    },
    /// Remove every image no pod uses, then the blobs and layers nothing refers to.
    Prune,
}

pub fn run(a: Args) -> ExitCode {
    let paths = Paths::from_env();
    let store = Store::from_paths(&paths);
    let res = match a.command {
        Cmd::Pull { images, quiet } => pull(&paths, &store, &images, quiet),
        Cmd::Ls => ls(&store),
        Cmd::Inspect { image } => inspect(&store, &image),
        Cmd::Rm { images, force } => rm(&paths, &store, &images, force),
        Cmd::Prune => prune(&paths, &store),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("podunit image: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse(image: &str) -> Result<Reference, String> {
    Reference::parse(image)
}

fn pull(paths: &Paths, store: &Store, images: &[String], quiet: bool) -> Result<(), String> {
    let node = NodePull::load(paths)?;
    let show = !quiet && std::io::stderr().is_terminal();
    let bar = Bar::default();
    let report = |p: &Progress| bar.update(p);
    let puller = Puller {
        store,
        client: &node.client,
        platform: crate::image::platform::host(),
        allowed_registries: node.allowed_registries.as_deref(),
        progress: if show { Some(&report) } else { None },
    };
    let mut failed = false;
    for i in images {
        let r = parse(i)?;
        match puller.pull(&r) {
            Ok(img) => {
                bar.clear(show);
                outln!("{} {}", img.reference, img.digest);
            }
            Err(e) => {
                bar.clear(show);
                errln!("podunit image: {e}");
                failed = true;
            }
        }
    }
    if failed {
        return Err("some images were not pulled".into());
    }
    Ok(())
}

/// One status line on the terminal: layers done and bytes fetched.
#[derive(Default)]
struct Bar {
    state: std::sync::Mutex<(usize, usize, u64, std::collections::HashMap<String, u64>)>,
}

impl Bar {
    fn update(&self, p: &Progress) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match p {
            Progress::Resolved { layers, .. } => *s = (0, *layers, 0, Default::default()),
            Progress::LayerStart { .. } => {}
            Progress::LayerBytes { digest, done } => {
                s.3.insert(digest.hex().to_string(), *done);
            }
            Progress::LayerDone { .. } => s.0 += 1,
        }
        let bytes: u64 = s.3.values().sum();
        s.2 = bytes;
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r\x1b[2Klayers {}/{}, {:.1} MB",
            s.0,
            s.1,
            bytes as f64 / 1e6
        );
        let _ = err.flush();
    }

    fn clear(&self, show: bool) {
        if show {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}

fn ls(store: &Store) -> Result<(), String> {
    let (records, errs) = store.list();
    outln!(
        "{:<60} {:<20} {:<15} {:>6}",
        "IMAGE",
        "TAG",
        "DIGEST",
        "LAYERS"
    );
    for rec in &records {
        let Ok(r) = Reference::parse(&rec.reference) else {
            continue;
        };
        if r.tag.is_none()
            && records
                .iter()
                .any(|o| o.digest == rec.digest && o.reference != rec.reference)
        {
            continue; // the name@digest twin of a tagged record
        }
        let layers = match store.resolve_record(&r, rec) {
            Ok(Some(i)) => i.layers.len().to_string(),
            Ok(None) => "incomplete".into(),
            Err(_) => "damaged".into(),
        };
        outln!(
            "{:<60} {:<20} {:<15} {:>6}",
            r.name(),
            r.tag.as_deref().unwrap_or("<none>"),
            &rec.digest.hex()[..12],
            layers
        );
    }
    for e in errs {
        errln!("podunit image: {e}");
    }
    Ok(())
}

fn inspect(store: &Store, image: &str) -> Result<(), String> {
    let r = parse(image)?;
    let img = store
        .lookup(&r)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("image {r} is not in the store"))?;
    let out = serde_json::json!({
        "reference": img.reference.to_string(),
        "imageID": img.image_id(),
        "digest": img.digest,
        "manifest": img.manifest,
        "configDigest": img.config_digest,
        "config": img.config,
        "layers": img.layers,
    });
    outln!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
    Ok(())
}

/// Normalised references of every image a pod in the manifest directories or the spool names.
fn images_in_use(paths: &Paths) -> BTreeSet<String> {
    let catalog = crate::manifest::Catalog::load(paths);
    for p in &catalog.problems {
        errln!("podunit image: warning: {p}");
    }
    let mut used = BTreeSet::new();
    for e in &catalog.pods {
        let Some(spec) = &e.pod.spec else { continue };
        let all = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .filter_map(|c| c.image.as_deref())
            .chain(
                spec.ephemeral_containers
                    .iter()
                    .flatten()
                    .filter_map(|c| c.image.as_deref()),
            );
        for i in all {
            if let Ok(r) = Reference::parse(i) {
                used.insert(r.to_string());
            }
        }
    }
    used
}

/// Records of `r`'s image: the name and the name@digest twins with the same digest.
fn records_of(store: &Store, r: &Reference) -> Result<Vec<Reference>, String> {
    let rec = store
        .record(r)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("image {r} is not in the store"))?;
    let (all, _) = store.list();
    let mut out = vec![r.clone()];
    for o in all {
        if let Ok(or) = Reference::parse(&o.reference)
            && o.digest == rec.digest
            && or.name() == r.name()
            && or.tag.is_none()
            && &or != r
        {
            out.push(or);
        }
    }
    Ok(out)
}

fn rm(paths: &Paths, store: &Store, images: &[String], force: bool) -> Result<(), String> {
    let used = if force {
        BTreeSet::new()
    } else {
        images_in_use(paths)
    };
    // Each name on its own, as `docker rmi` does: one that cannot be removed is reported and the
    // others still go, and so does what they alone held (blobs, layers).
    let mut failed = Vec::new();
    for i in images {
        let one = || -> Result<Reference, String> {
            let r = parse(i)?;
            if used.contains(&r.to_string()) {
                return Err(format!(
                    "image {r} is used by a pod (--force removes it anyway)"
                ));
            }
            for rr in records_of(store, &r)? {
                store.remove_record(&rr).map_err(|e| e.to_string())?;
            }
            Ok(r)
        };
        match one() {
            Ok(r) => outln!("removed {r}"),
            Err(e) => {
                errln!("podunit: {e}");
                failed.push(i.as_str());
            }
        }
    }
    let (b, l) = store.gc().map_err(|e| e.to_string())?;
    errln!("freed {b} blobs and {l} layers");
    match failed.as_slice() {
        [] => Ok(()),
        f => Err(format!("not removed: {}", f.join(", "))),
    }
}

fn prune(paths: &Paths, store: &Store) -> Result<(), String> {
    let used = images_in_use(paths);
    let (records, errs) = store.list();
    if let Some(e) = errs.into_iter().next() {
        return Err(e.to_string());
    }
    // A record is kept when its name, or the tagged name it is the digest twin of, is in use.
    let used_digests: BTreeSet<String> = records
        .iter()
        .filter(|r| used.contains(&r.reference))
        .map(|r| r.digest.to_string())
        .collect();
    for rec in &records {
        let Ok(r) = Reference::parse(&rec.reference) else {
            continue;
        };
        if used.contains(&rec.reference) || used_digests.contains(&rec.digest.to_string()) {
            continue;
        }
        store.remove_record(&r).map_err(|e| e.to_string())?;
        outln!("removed {}", rec.reference);
    }
    let (b, l) = store.gc().map_err(|e| e.to_string())?;
    errln!("freed {b} blobs and {l} layers");
    Ok(())
}
