//! Layer tarballs: any bytes, applied as a layer, never panic or hang, and never create, change or
//! remove anything outside the layer's directory, wherever an escape would land.
//!
//! An escape need not land beside the layer: `/etc/absolute`, `abs -> /` then `abs/through`, or
//! `x -> /tmp` then `x/file` aim at the root. So before the first run the process enters a
//! private mount namespace, mounts a fresh tmpfs and chroots into it: the whole filesystem the
//! unpacker can reach is then that tmpfs, with canary files where escapes aim (`/etc/passwd`,
//! `/tmp`, `/`, a sibling of the layer), and every file of it (type, mode, owner, size, link
//! count, content, link target, device number) is compared before and after each run. Only the
//! run's own layer directory may differ. Run as root (layers make device nodes and set owners;
//! the namespace needs CAP_SYS_ADMIN), as the store does.
//!
//! libFuzzer keeps writing its corpus and artifacts: the directories it is given (and the
//! current directory) are bind-mounted at their own paths inside, and are not part of the
//! comparison (another filesystem). A layer aimed at exactly those absolute paths would go
//! unnoticed; nothing else would.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podunit::image::unpack::Unpacker;
use podunit::image::unpack::bounds::{Bounded, Unbounded};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

static RUN: AtomicU64 = AtomicU64::new(0);
static ENTER: Once = Once::new();

/// Where the layers are unpacked, inside the chroot.
const SANDBOX: &str = "/sandbox";

/// The canaries: files an escape would overwrite, link to or sit beside.
const CANARIES: &[(&str, &[u8])] = &[
    ("/canary", b"root"),
    ("/etc/passwd", b"root:x:0:0::/root:/bin/sh\n"),
    ("/tmp/canary", b"tmp"),
    ("/sandbox/sibling/canary", b"untouched"),
];

fn check(what: &str, rc: libc::c_int) {
    assert!(
        rc == 0,
        "{what}: {} (the unpack target runs as root)",
        std::io::Error::last_os_error()
    );
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Binds `src` (opened before the tmpfs hid it: `fd`) at its own path under `root`.
fn bind(src: &Path, fd: &std::fs::File, root: &Path) {
    use std::os::fd::AsRawFd;
    let dst = root.join(src.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&dst).unwrap();
    let (s, d) = (
        CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap(),
        c(&dst),
    );
    check(&format!("bind {}", src.display()), unsafe {
        libc::mount(
            s.as_ptr(),
            d.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    });
}

/// The directories libFuzzer reads and writes: the current one, the corpus directories and the
/// artifacts' (absolute, as they are before the chroot).
fn fuzzer_dirs(cwd: &Path) -> Vec<PathBuf> {
    let mut out = vec![cwd.to_path_buf()];
    for a in std::env::args_os().skip(1) {
        let a = a.to_string_lossy().into_owned();
        let path = if let Some(flag) = a.strip_prefix('-') {
            match flag.split_once('=') {
                Some(("artifact_prefix", p)) if p.ends_with('/') => PathBuf::from(p),
                Some(("artifact_prefix" | "exact_artifact_path", p)) => Path::new(p)
                    .parent()
                    .unwrap_or(Path::new("."))
                    .to_path_buf(),
                _ => continue,
            }
        } else {
            PathBuf::from(a)
        };
        let path = cwd.join(path);
        let dir = if path.is_dir() {
            path
        } else {
            path.parent().unwrap_or(cwd).to_path_buf()
        };
        if dir.is_dir() {
            out.push(dir);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Private mount namespace, a tmpfs as the whole visible filesystem, canaries in place.
fn enter() {
    let cwd = std::env::current_dir().unwrap();
    check("unshare(CLONE_NEWNS)", unsafe {
        libc::unshare(libc::CLONE_NEWNS)
    });
    let root = c(Path::new("/"));
    check("make / private", unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    });
    // Opened in this namespace (a mount of another cannot be bound), before the tmpfs hides them.
    let dirs: Vec<_> = fuzzer_dirs(&cwd)
        .into_iter()
        .map(|d| {
            // Bound over a canary's directory it would hide the canary behind the host's files.
            for near in CANARIES.iter().map(|(p, _)| *p).chain([SANDBOX]) {
                assert!(
                    !Path::new(near).starts_with(&d),
                    "run the unpack target with its corpus, artifacts and current directory \
                     elsewhere than {} (it holds {near} of the sandbox)",
                    d.display()
                );
            }
            let fd = std::fs::File::open(&d).unwrap();
            (d, fd)
        })
        .collect();
    // Over /tmp of this namespace only: nothing is left on the host.
    let new_root = PathBuf::from("/tmp");
    let (tmpfs, target, opts) = (
        CString::new("tmpfs").unwrap(),
        c(&new_root),
        CString::new("mode=0755").unwrap(),
    );
    check("mount tmpfs", unsafe {
        libc::mount(
            tmpfs.as_ptr(),
            target.as_ptr(),
            tmpfs.as_ptr(),
            0,
            opts.as_ptr().cast(),
        )
    });
    for (d, fd) in &dirs {
        bind(d, fd, &new_root);
    }
    for (path, content) in CANARIES {
        let p = new_root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
    }
    std::fs::set_permissions(
        new_root.join("tmp"),
        std::fs::Permissions::from_mode(0o1777),
    )
    .unwrap();
    check("chroot", unsafe { libc::chroot(c(&new_root).as_ptr()) });
    std::env::set_current_dir(&cwd).unwrap();
    assert!(Path::new("/canary").exists(), "inside the new root");
}

/// Every entry of the filesystem the unpacker sees, but `skip` and the fuzzer's own directories
/// (other filesystems: not followed).
fn snapshot(skip: &Path) -> BTreeMap<PathBuf, String> {
    let dev = std::fs::symlink_metadata("/").unwrap().dev();
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::from("/")];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p == skip {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.dev() != dev {
                continue;
            }
            let ft = m.file_type();
            let what = if ft.is_symlink() {
                format!("-> {:?}", std::fs::read_link(&p).unwrap())
            } else if ft.is_file() {
                format!("{:?}", std::fs::read(&p).unwrap())
            } else if ft.is_dir() {
                todo.push(p.clone());
                String::new()
            } else {
                format!("rdev {}", m.rdev())
            };
            let line = format!(
                "mode {:o} uid {} gid {} nlink {} size {} {what}",
                m.mode(),
                m.uid(),
                m.gid(),
                m.nlink(),
                m.len()
            );
            out.insert(p, line);
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    ENTER.call_once(enter);
    let base = Path::new(SANDBOX).join(RUN.fetch_add(1, Ordering::Relaxed).to_string());
    let layer = base.join("layer");
    std::fs::create_dir_all(&layer).unwrap();
    let before = snapshot(&layer);
    if let Ok(mut u) = Unpacker::new(&layer) {
        // Through the bounds a pull applies (header sizes, data after the end marker).
        let mut tar = Bounded::new(data, Unbounded);
        if let Err(e) = u.apply(&mut tar) {
            // Every refusal can be shown, and is short whatever the input.
            assert!(
                e.to_string().len() < 4096,
                "a message of {} bytes",
                e.to_string().len()
            );
        }
        let _ = std::io::copy(&mut tar, &mut std::io::sink());
    }
    let after = snapshot(&layer);
    if before != after {
        let mut diff = Vec::new();
        for (p, was) in &before {
            match after.get(p) {
                None => diff.push(format!("removed {}: {was}", p.display())),
                Some(now) if now != was => {
                    diff.push(format!("changed {}: {was} => {now}", p.display()))
                }
                Some(_) => {}
            }
        }
        for (p, now) in &after {
            if !before.contains_key(p) {
                diff.push(format!("created {}: {now}", p.display()));
            }
        }
        panic!(
            "the layer reached outside its directory:\n{}",
            diff.join("\n")
        );
    }
    std::fs::remove_dir_all(&base).unwrap();
});
