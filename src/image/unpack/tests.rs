use super::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

/// Writes tar entries with raw names (the tar crate's builder refuses `..`, which is the point).
pub struct RawTar(Vec<u8>);

impl RawTar {
    pub fn new() -> Self {
        RawTar(Vec::new())
    }

    pub fn entry(&mut self, kind: u8, name: &str, link: &str, data: &[u8], mode: u32) -> &mut Self {
        let mut h = tar::Header::new_ustar();
        {
            let old = h.as_old_mut();
            old.name[..name.len()].copy_from_slice(name.as_bytes());
            old.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        h.set_entry_type(tar::EntryType::new(kind));
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_uid(1000);
        h.set_gid(1001);
        h.set_mtime(1_600_000_000);
        h.set_cksum();
        self.0.extend_from_slice(h.as_bytes());
        self.0.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.0.extend(std::iter::repeat_n(0, pad));
        self
    }

    pub fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.entry(b'0', name, "", data, 0o644)
    }

    pub fn dir(&mut self, name: &str) -> &mut Self {
        self.entry(b'5', name, "", b"", 0o755)
    }

    pub fn pax(&mut self, records: &[(&str, &[u8])]) -> &mut Self {
        let mut body = Vec::new();
        for (k, v) in records {
            let rest = format!(" {k}=").len() + v.len() + 1;
            let mut len = rest + 1;
            while len.to_string().len() + rest != len {
                len += 1;
            }
            body.extend_from_slice(format!("{len} {k}=").as_bytes());
            body.extend_from_slice(v);
            body.push(b'\n');
        }
        self.entry(b'x', "PaxHeader", "", &body, 0o644)
    }

    pub fn finish(&mut self) -> Vec<u8> {
        self.0.extend(std::iter::repeat_n(0, 1024));
        std::mem::take(&mut self.0)
    }
}

fn scratch(name: &str) -> (PathBuf, PathBuf) {
    let base = std::env::temp_dir().join(format!("podunit-unpack-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let layer = base.join("layer");
    std::fs::create_dir_all(&layer).unwrap();
    std::fs::create_dir_all(base.join("outside")).unwrap();
    (base, layer)
}

fn apply(layer: &Path, tar: &[u8]) -> Result<Stats, UnpackError> {
    Unpacker::new(layer).unwrap().apply(tar)
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn applies_every_kind_of_entry() {
    assert!(
        is_root(),
        "layer unpacking sets owners and makes device nodes: run the tests as root"
    );
    let (_b, layer) = scratch("kinds");
    let tar = RawTar::new()
        .dir("./")
        .dir("etc/")
        .file("etc/passwd", b"root:x:0:0::/root:/bin/sh\n")
        .entry(b'0', "bin/su", "", b"ELF", 0o4755)
        .entry(b'2', "bin/sh", "busybox", b"", 0o777)
        .entry(b'2', "abs", "/etc/passwd", b"", 0o777)
        .entry(b'1', "etc/passwd-hard", "etc/passwd", b"", 0o644)
        .entry(b'3', "dev/null", "", b"", 0o666)
        .entry(b'6', "run/fifo", "", b"", 0o600)
        .pax(&[
            ("SCHILY.xattr.user.note", b"hi"),
            ("SCHILY.xattr.trusted.overlay.redirect", b"/x"),
        ])
        .file("bin/ping", b"ELF")
        .file("/rooted/file", b"inside")
        .file("usr/lib/.wh.gone", b"")
        .file("var/cache/.wh..wh..opq", b"")
        .file("etc/passwd", b"replaced\n")
        .finish();
    let s = apply(&layer, &tar).unwrap();
    assert_eq!(s.entries, 14);
    assert_eq!(
        std::fs::read(layer.join("etc/passwd")).unwrap(),
        b"replaced\n"
    );
    // The hard link was made to the first passwd: replacing a name does not change the link.
    assert_eq!(
        std::fs::read(layer.join("etc/passwd-hard")).unwrap(),
        b"root:x:0:0::/root:/bin/sh\n"
    );
    let su = std::fs::metadata(layer.join("bin/su")).unwrap();
    assert_eq!(su.permissions().mode() & 0o7777, 0o4755);
    assert_eq!((su.uid(), su.gid()), (1000, 1001));
    assert_eq!(su.mtime(), 1_600_000_000);
    assert_eq!(
        std::fs::read_link(layer.join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    assert_eq!(
        std::fs::read_link(layer.join("abs")).unwrap(),
        Path::new("/etc/passwd")
    );
    assert!(
        std::fs::metadata(layer.join("dev/null"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
    assert!(
        std::fs::metadata(layer.join("run/fifo"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert_eq!(std::fs::read(layer.join("rooted/file")).unwrap(), b"inside");
    let wh = std::fs::symlink_metadata(layer.join("usr/lib/gone")).unwrap();
    assert!(wh.file_type().is_char_device() && wh.rdev() == 0);
    assert!(!layer.join("usr/lib/.wh.gone").exists());
    let opq = rfs::getxattr(layer.join("var/cache"), OPAQUE_XATTR, &mut [0u8; 4]).unwrap();
    assert_eq!(opq, 1);
    let mut v = [0u8; 8];
    let n = rfs::getxattr(layer.join("bin/ping"), "user.note", &mut v).unwrap();
    assert_eq!(&v[..n], b"hi");
    assert!(rfs::getxattr(layer.join("bin/ping"), "trusted.overlay.redirect", &mut v).is_err());
    let etc = std::fs::metadata(layer.join("etc")).unwrap();
    assert_eq!(
        etc.mtime(),
        1_600_000_000,
        "directory times are set after their content"
    );
}

fn refused(name: &str, tar: Vec<u8>, entry: &str, why: &str) -> PathBuf {
    let (base, layer) = scratch(name);
    let e = apply(&layer, &tar).unwrap_err();
    assert_eq!(e.entry, entry, "{e}");
    assert!(e.why.contains(why), "{e}");
    assert_eq!(std::fs::read_dir(base.join("outside")).unwrap().count(), 0);
    base
}

#[test]
fn dotdot_is_refused() {
    let tar = RawTar::new().file("../outside/evil", b"x").finish();
    refused("dotdot", tar, "../outside/evil", "\"..\"");
    let tar = RawTar::new().file("a/../../outside/evil", b"x").finish();
    refused("dotdot2", tar, "a/../../outside/evil", "\"..\"");
}

#[test]
fn symlink_escapes_are_refused() {
    let (base, _) = scratch("symlink-abs");
    let out = base.join("outside");
    let tar = RawTar::new()
        .entry(b'2', "esc", out.to_str().unwrap(), b"", 0o777)
        .file("esc/evil", b"x")
        .finish();
    refused("symlink-abs", tar, "esc/evil", "symlink");
    let tar = RawTar::new()
        .entry(b'2', "up", "../outside", b"", 0o777)
        .file("up/evil", b"x")
        .finish();
    refused("symlink-rel", tar, "up/evil", "symlink");
    // A symlink in the middle of a hard link's target is refused too.
    let tar = RawTar::new()
        .entry(b'2', "up", "../outside", b"", 0o777)
        .entry(b'1', "h", "up/secret", b"", 0o644)
        .finish();
    let base = refused("symlink-hard", tar, "h", "symlink");
    let _ = base;
    // Replacing a directory with a symlink, then writing "through" it.
    let tar = RawTar::new()
        .dir("d/")
        .entry(b'2', "d", "../outside", b"", 0o777)
        .file("d/evil", b"x")
        .finish();
    refused("symlink-replace", tar, "d/evil", "symlink");
}

#[test]
fn hard_link_escapes_are_refused() {
    let tar = RawTar::new()
        .entry(b'1', "h", "../outside/x", b"", 0o644)
        .finish();
    refused("hard-dotdot", tar, "h", "\"..\"");
    // An absolute target means the layer's own path, which is not there: refused, never the host's.
    let tar = RawTar::new()
        .entry(b'1', "shadow", "/etc/shadow", b"", 0o644)
        .finish();
    refused("hard-abs", tar, "shadow", "not in this layer");
}

#[test]
fn whiteouts_of_nothing_are_refused() {
    let tar = RawTar::new().file("a/.wh.", b"").finish();
    refused("wh-empty", tar, "a/.wh.", "whiteout");
}

#[test]
fn the_walk_without_openat2_refuses_what_openat2_refuses() {
    let dir = std::env::temp_dir().join(format!("podunit-walk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a/b")).unwrap();
    std::fs::write(dir.join("a/file"), b"x").unwrap();
    std::os::unix::fs::symlink("/etc", dir.join("a/link")).unwrap();
    std::os::unix::fs::symlink("b", dir.join("a/inner")).unwrap();
    let root = rfs::open(&dir, dir_flags(), Mode::empty()).unwrap();
    for (path, want) in [
        ("a/b", None),
        ("./a//b/", None),
        ("a/link", Some(vec![Errno::LOOP, Errno::NOTDIR])),
        ("a/link/ssl", Some(vec![Errno::LOOP, Errno::NOTDIR])),
        ("a/inner", Some(vec![Errno::LOOP, Errno::NOTDIR])),
        ("a/file", Some(vec![Errno::NOTDIR])),
        ("a/../..", Some(vec![Errno::XDEV])),
        ("/etc", Some(vec![Errno::XDEV])),
    ] {
        let walked = walk_dir_beneath(&root, path);
        let kernel = rfs::openat2(&root, path, dir_flags(), Mode::empty(), resolve_flags());
        match want {
            None => {
                assert!(walked.is_ok(), "{path}: {walked:?}");
                assert!(kernel.is_ok(), "{path}: {kernel:?}");
            }
            Some(errs) => {
                let e = walked.err().unwrap();
                assert!(errs.contains(&e), "{path}: {e:?}");
                // openat2, where the kernel has it, refuses the same.
                assert!(kernel.is_err(), "{path}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_directory_replaced_later_in_the_same_layer_is_valid() {
    // `d/` then `d` as a file; `e/`, `e/x` then `e` as a symlink; `w/`, `w/x` then `.wh.w`.
    let tar = RawTar::new()
        .dir("d/")
        .file("d", b"now a file")
        .dir("e/")
        .file("e/x", b"x")
        .entry(b'2', "e", "elsewhere", b"", 0o777)
        .dir("w/")
        .file("w/x", b"x")
        .file(".wh.w", b"")
        .finish();
    let (base, layer) = scratch("replaced");
    apply(&layer, &tar).unwrap();
    assert_eq!(std::fs::read(layer.join("d")).unwrap(), b"now a file");
    assert_eq!(
        std::fs::read_link(layer.join("e")).unwrap(),
        Path::new("elsewhere")
    );
    let w = std::fs::symlink_metadata(layer.join("w")).unwrap();
    assert!(
        w.file_type().is_char_device() && w.rdev() == 0,
        "a whiteout"
    );
    let _ = std::fs::remove_dir_all(base);
}

#[test]
fn the_no_change_id_is_refused_not_taken_as_root() {
    // (uid_t) -1 is chown's "leave it": the file would keep the unpacker's owner, root.
    // The tar crate copies PAX ids into the header, so the header's check says it.
    for k in ["uid", "gid"] {
        let tar = RawTar::new()
            .pax(&[(k, b"4294967295")])
            .file("f", b"x")
            .finish();
        let (base, layer) = scratch(&format!("noid-{k}"));
        let e = apply(&layer, &tar).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("entry \"f\": bad {k} in the tar header")
        );
        let _ = std::fs::remove_dir_all(base);
    }
}

#[test]
fn a_long_hostile_name_is_shown_cut_and_escaped() {
    let name = format!("{}\u{1b}[2J{}", "a/".repeat(150), "b".repeat(5000));
    let tar = RawTar::new()
        .pax(&[("path", name.as_bytes())])
        .entry(b'3', "x", "", b"", 0o666)
        .finish();
    let (base, layer) = scratch("longname");
    let e = apply(&layer, &tar).unwrap_err().to_string();
    assert!(e.len() < 400, "{e}");
    assert!(e.contains(&format!("... ({} bytes)", name.len())), "{e}");
    assert!(
        !e.contains('\u{1b}'),
        "control characters are escaped: {e:?}"
    );
    let _ = std::fs::remove_dir_all(base);
}
