//! `make bench-images`: pulling a ~100 MB multi-layer image from a registry on loopback, like for
//! like: podunit's fetch stage alone against `skopeo copy` of the same image to a directory, and
//! podunit's whole pull (fetch and unpack) against `skopeo copy` followed by `tar -xf` of the
//! layers; and unpacking its layers against `tar -xf` of the same tarballs. Wall-clock medians of
//! interleaved rounds (the baselines are other programs, so no instruction counts). Then, on the nspawn harness, `daemon-reload` to running for pods whose
//! image is in the node's store against the same pods with `image: host`. The numbers go to
//! docs/benchmarks.md. Needs root, systemd-nspawn, docker-registry, htpasswd, skopeo and GNU tar.
//!
//! Arguments pick parts (`pull`, `unpack`, `start`; default all):
//! `cargo test --release --test bench_images -- start`.

mod image;
mod support;

use image::oci::{self, Comp, Layer};
use image::registry::{Certs, PASSWORD, Registry, USER};
use podunit::common::registries::Registries;
use podunit::image::registry::Client;
use podunit::image::unpack::Unpacker;
use podunit::image::{Reference, Store};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::nspawn::Machine;
use support::reload::reload_to_running;

/// Rounds of each comparison (medians are reported).
const RUNS: usize = 5;
/// Uncompressed bytes per layer (gzip brings the image to about 100 MB).
const LAYER_BYTES: u64 = 55 << 20;

/// Layers of real files from the host's /usr, `LAYER_BYTES` each.
fn layers() -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    for d in [
        "/usr/bin",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/share",
        "/usr/lib",
    ] {
        walk(Path::new(d), &mut files);
    }
    let mut out = Vec::new();
    let mut b = tar::Builder::new(Vec::new());
    let mut size = 0;
    for f in files {
        let Ok(meta) = std::fs::symlink_metadata(&f) else {
            continue;
        };
        if !meta.is_file() || meta.len() > 8 << 20 {
            continue;
        }
        let rel = f.strip_prefix("/").unwrap();
        if b.append_path_with_name(&f, rel).is_err() {
            continue;
        }
        size += meta.len();
        if size >= LAYER_BYTES {
            out.push(
                std::mem::replace(&mut b, tar::Builder::new(Vec::new()))
                    .into_inner()
                    .unwrap(),
            );
            size = 0;
            if out.len() == 4 {
                break;
            }
        }
    }
    out
}

fn walk(d: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(d) else { return };
    let mut v: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    v.sort();
    for p in v {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => walk(&p, out),
            Ok(m) if m.is_file() => out.push(p),
            _ => {}
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn fresh(p: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(p);
    std::fs::create_dir_all(p).unwrap();
    p.to_path_buf()
}

/// The bench's registry and what it serves.
struct Served {
    dir: PathBuf,
    certs: Certs,
    reg: Registry,
}

impl Served {
    fn start() -> Served {
        let dir = fresh(
            &std::env::temp_dir().join(format!("podunit-bench-images-{}", std::process::id())),
        );
        let certs = Certs::make(&dir.join("certs"));
        let reg = Registry::start(&dir.join("reg"), &certs, None, true);
        Served { dir, certs, reg }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn main() {
    let parts: Vec<String> = std::env::args().skip(1).collect();
    let wanted = |p: &str| parts.is_empty() || parts.iter().any(|a| a == p);
    println!(
        "bench_images ({} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    let served = Served::start();
    if wanted("pull") || wanted("unpack") {
        pull_and_unpack(&served, wanted("pull"), wanted("unpack"));
    }
    if wanted("start") {
        start_to_running(&served);
    }
}

fn pull_and_unpack(served: &Served, pull: bool, unpack: bool) {
    let reg = &served.reg;
    let tars = layers();
    let img = oci::image(
        "amd64",
        &tars
            .iter()
            .map(|t| Layer {
                tar: t.clone(),
                comp: Comp::Gzip,
                declared_size: None,
            })
            .collect::<Vec<_>>(),
        serde_json::json!({}),
    );
    reg.push("bench/big", "1", &img);
    let blobs: Vec<&Vec<u8>> = img.blobs.iter().take(tars.len()).collect();
    let compressed: u64 = blobs.iter().map(|b| b.len() as u64).sum();
    let plain: u64 = tars.iter().map(|t| t.len() as u64).sum();
    println!(
        "image: {} layers, {:.1} MB gzip, {:.1} MB uncompressed",
        tars.len(),
        compressed as f64 / 1e6,
        plain as f64 / 1e6
    );

    if pull {
        pull_bench(served);
    }
    if unpack {
        unpack_bench(&served.dir, &blobs);
    }
}

/// `tar -xf` of each file of `tars` into a fresh directory `layer<i>` of `into`.
fn untar(tars: &[PathBuf], into: &Path) {
    for (i, f) in tars.iter().enumerate() {
        let dest = fresh(&into.join(format!("layer{i}")));
        let st = Command::new("tar")
            .arg("-xf")
            .arg(f)
            .arg("-C")
            .arg(&dest)
            .status()
            .unwrap();
        assert!(st.success());
    }
}

/// Seconds, median of `v`.
fn secs(v: &[Duration]) -> f64 {
    median(v.to_vec()).as_secs_f64()
}

/// Pull, like for like, rounds interleaved (the machine is shared: each round runs every
/// contender once, one after the other):
/// - fetch: podunit's fetch stage alone (download, digest checks, blobs written and synced,
///   `Puller::download`) against `skopeo copy docker://... dir:...` (the same work);
/// - pull: podunit's whole pull into an empty store (fetch, and unpacking pipelined with it,
///   one syncfs) against skopeo copy then `tar -xf` of each layer blob into a directory of its
///   own, and against the same followed by `sync -f` (syncfs: the durability podunit's pull has).
fn pull_bench(served: &Served) {
    let Served { dir, certs, reg } = served;
    let mut settings = Registries {
        ca: [(reg.host.clone(), certs.ca())].into(),
        ..Default::default()
    };
    // The host's disk is not the bench's to judge (the reserve is checked by statvfs, a cost
    // the bench still pays).
    settings.limits.store_reserve_percent = 0;
    let keyring = support::registry::keyring(&reg.host, USER, PASSWORD);
    let r = Reference::parse(&format!("{}/bench/big:1", reg.host)).unwrap();
    let skodir = fresh(&dir.join("skopeo-certs"));
    std::fs::copy(certs.ca(), skodir.join("ca.crt")).unwrap();
    let skopeo = |dest: &Path| {
        let st = Command::new("skopeo")
            .args([
                "copy",
                "--quiet",
                "--src-creds",
                &format!("{USER}:{PASSWORD}"),
            ])
            .arg(format!("--src-cert-dir={}", skodir.display()))
            .arg(format!("docker://{}/bench/big:1", reg.host))
            .arg(format!("dir:{}", dest.display()))
            .status()
            .expect("skopeo");
        assert!(st.success());
    };
    let layer_blobs = |d: &Path| -> Vec<PathBuf> {
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join("manifest.json")).unwrap()).unwrap();
        manifest["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let digest = l["digest"].as_str().unwrap();
                d.join(digest.strip_prefix("sha256:").unwrap())
            })
            .collect()
    };
    let (mut fetch, mut sko) = (Vec::new(), Vec::new());
    let (mut pull, mut sko_tar, mut sko_tar_sync) = (Vec::new(), Vec::new(), Vec::new());
    println!(
        "pull rounds: {RUNS}, load average at the start {}",
        support::load_average()
    );
    for _ in 0..RUNS {
        let client = Client::new(settings.clone(), keyring.clone());
        let store = Store::open(fresh(&dir.join("store")));
        let p = support::registry::puller(&store, &client);
        let out = fresh(&dir.join("podunit-out"));
        let t = Instant::now();
        let got = p.download(&r, &out).expect("download");
        fetch.push(t.elapsed());
        assert_eq!(got.len(), 6, "manifest, config and 4 layers");

        let out = fresh(&dir.join("skopeo-out"));
        let t = Instant::now();
        skopeo(&out);
        sko.push(t.elapsed());

        let client = Client::new(settings.clone(), keyring.clone());
        let p = support::registry::puller(&store, &client);
        let t = Instant::now();
        p.pull(&r).expect("pull");
        pull.push(t.elapsed());

        for (sync, times) in [(false, &mut sko_tar), (true, &mut sko_tar_sync)] {
            let out = fresh(&dir.join("skopeo-out"));
            let tree = fresh(&dir.join("tar-out"));
            let t = Instant::now();
            skopeo(&out);
            untar(&layer_blobs(&out), &tree);
            if sync {
                assert!(
                    Command::new("sync")
                        .arg("-f")
                        .arg(&tree)
                        .status()
                        .unwrap()
                        .success()
                );
            }
            times.push(t.elapsed());
        }
    }
    println!("load average at the end {}", support::load_average());
    let row = |what: &str, ours: &[Duration], base: &str, theirs: &[Duration]| {
        println!(
            "{what:<6} podunit {:>7.3} s   {base:<26} {:>7.3} s   ratio {:.2}",
            secs(ours),
            secs(theirs),
            secs(ours) / secs(theirs)
        )
    };
    row("fetch:", &fetch, "skopeo copy", &sko);
    row("pull:", &pull, "skopeo copy + tar -xf", &sko_tar);
    row("pull:", &pull, "skopeo copy + tar + sync", &sko_tar_sync);
    let all = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "every round (s): fetch [{}] skopeo [{}] pull [{}] skopeo+tar [{}] skopeo+tar+sync [{}]",
        all(&fetch),
        all(&sko),
        all(&pull),
        all(&sko_tar),
        all(&sko_tar_sync)
    );
}

/// Unpack: the same .tar.gz files, podunit's unpacker (with the diff_id hash a pull does) vs
/// GNU tar -xf (which runs gzip -d).
fn unpack_bench(dir: &Path, blobs: &[&Vec<u8>]) {
    let gz: Vec<PathBuf> = blobs
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let p = dir.join(format!("layer{i}.tar.gz"));
            std::fs::write(&p, b).unwrap();
            p
        })
        .collect();
    let mut ours = Vec::new();
    let mut tar = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        for (i, f) in gz.iter().enumerate() {
            let dest = fresh(&dir.join(format!("ours{i}")));
            let file =
                std::io::BufReader::with_capacity(256 << 10, std::fs::File::open(f).unwrap());
            let mut plain =
                podunit::image::digest::HashingReader::new(flate2::read::MultiGzDecoder::new(file));
            Unpacker::new(&dest).unwrap().apply(&mut plain).unwrap();
            std::io::copy(&mut plain, &mut std::io::sink()).unwrap();
            let _ = plain.finish();
        }
        ours.push(t.elapsed());
        let t = Instant::now();
        untar(&gz, dir);
        tar.push(t.elapsed());
    }
    let (o, t) = (median(ours), median(tar));
    println!(
        "unpack: podunit {:>7.3} s   tar -xf     {:>7.3} s   ratio {:.2}",
        o.as_secs_f64(),
        t.as_secs_f64(),
        o.as_secs_f64() / t.as_secs_f64()
    );
}

/// The pods of the start bench: one container sleeping, in a pulled image or on the host.
fn sleeper(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: bench}}\nspec:\n  containers:\n  - name: c\n    image: {image}\n    command: [/bin/sleep, \"3600\"]\n"
    )
}

/// `daemon-reload` to every container running, for pods whose image (busybox, one layer) is
/// already in the node's store against the same pods with `image: host`, in one machine, the
/// rounds interleaved. The image pods' extra work is podunit's: the generator resolving the image
/// from the store, and `pod-prepare` mounting each container's root (an overlay of the image's
/// layers and a writable layer of its own).
fn start_to_running(served: &Served) {
    const SIZES: [usize; 2] = [1, 10];
    const ROUNDS: usize = 5;
    let m = Machine::boot("bench-image-start");
    let img = oci::busybox_image(support::registry::host_arch());
    served.reg.push("library/busybox", "1.36", &img);
    // The machine has a private network: the host pulls into its store, as `podunit image pull`.
    let client = Client::new(
        support::registry::settings(&served.reg.host, &served.certs.ca()),
        support::registry::keyring(&served.reg.host, USER, PASSWORD),
    );
    let store = Store::open(m.dir().join("root/var/lib/podunit/store"));
    support::registry::pull(&store, &client, "busybox:1.36").expect("pull busybox:1.36");
    support::pods::start_sync(&m);
    // One unmeasured pod of each kind: warms the caches, and shows the image pod runs in the
    // image's root (busybox there, the host's systemctl not).
    for (image, root_check) in [
        ("host", "test -e /proc/$pid/root/usr/bin/systemctl"),
        (
            "busybox:1.36",
            "test -e /proc/$pid/root/bin/busybox && ! test -e /proc/$pid/root/usr/bin/systemctl",
        ),
    ] {
        let unit = support::pods::ctr_unit("bench", "warm", "c");
        m.write("/etc/pods.d/warm.yaml", sleeper("warm", image).as_bytes());
        m.daemon_reload();
        support::pods::wait_state(&m, &unit, &["active"]);
        let pid = m.prop(&unit, "MainPID");
        m.sh_ok(&format!("pid={pid}; {root_check}"));
        m.sh_ok("rm /etc/pods.d/warm.yaml && systemctl daemon-reload");
        support::reload::wait_gone(&m, "podunit-bench_*");
    }
    println!(
        "daemon-reload to all containers running (median of {ROUNDS} rounds, ms)\n{:>5}  {:>12}  {:>12}  {:>6}",
        "pods", "image: host", "cached image", "ratio"
    );
    for n in SIZES {
        let (mut host, mut cached) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            for (image, out) in [("host", &mut host), ("busybox:1.36", &mut cached)] {
                let files: Vec<(String, String)> = (0..n)
                    .map(|i| (format!("s{i}.yaml"), sleeper(&format!("s{i}"), image)))
                    .collect();
                let units: Vec<String> = (0..n)
                    .map(|i| support::pods::ctr_unit("bench", &format!("s{i}"), "c"))
                    .collect();
                out.push(reload_to_running(&m, "bench", &files, &units));
            }
        }
        let (h, c) = (
            support::reload::median(host),
            support::reload::median(cached),
        );
        println!("{n:>5}  {h:>12.1}  {c:>12.1}  {:>6.2}", c / h);
    }
    println!("(ratio: cached image / image: host)");
}
