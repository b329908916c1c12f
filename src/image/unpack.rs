//! Applying one layer tarball to an empty directory, as an overlayfs lower directory.
//!
//! Layer content is hostile. No entry may create, change or read anything outside the layer:
//! every directory is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)` from the layer's root (where `openat2` is missing, one component at
//! a time with `O_NOFOLLOW | O_DIRECTORY`, which refuses the same paths), and every change is made relative to that
//! descriptor with a single final name (`mkdirat`, `openat(O_NOFOLLOW|O_EXCL)`, `symlinkat`,
//! `linkat`, `mknodat`). So `..`, absolute paths, and paths through a symlink (whatever it points
//! to) cannot leave the layer; a path through a symlink is refused outright (a tar made from a real
//! file system never has one), as is a `..` component and a hard link to anything not already in
//! this layer.
//!
//! OCI whiteouts become overlayfs ones: `.wh.NAME` a `0:0` character device `NAME`,
//! `.wh..wh..opq` the `trusted.overlay.opaque=y` attribute on its directory. Of extended
//! attributes only `user.*` and `security.capability` (file capabilities) are kept: a layer must
//! not set `trusted.overlay.*` (overlayfs's own metadata) or SELinux labels.

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags, Timestamps};
use rustix::io::Errno;
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Why a layer could not be applied, naming the tar entry.
#[derive(Debug)]
pub struct UnpackError {
    pub entry: String,
    pub why: String,
    /// The disk (or the inode table) is full: not the layer's fault.
    pub no_space: bool,
}

impl fmt::Display for UnpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entry.is_empty() {
            write!(f, "{}", self.why)
        } else {
            write!(f, "entry {}: {}", shown(self.entry.as_bytes()), self.why)
        }
    }
}

/// Longest part of a name from the layer that a message repeats.
const SHOWN_MAX: usize = 200;

/// A name from the layer as a message shows it: quoted and escaped, and cut to its first
/// [`SHOWN_MAX`] bytes (a hostile name can be a megabyte; messages reach the journal and Events).
pub fn shown(name: &[u8]) -> String {
    let lossy = String::from_utf8_lossy(name);
    if name.len() <= SHOWN_MAX {
        return format!("{lossy:?}");
    }
    let mut end = SHOWN_MAX;
    while !lossy.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &lossy[..end], name.len())
}

impl std::error::Error for UnpackError {}

/// What was applied.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub entries: u64,
    pub file_bytes: u64,
}

const OPAQUE: &str = ".wh..wh..opq";
const WHITEOUT: &str = ".wh.";
const OPAQUE_XATTR: &str = "trusted.overlay.opaque";
const BUF: usize = 256 << 10;

fn err(entry: &str, why: impl Into<String>) -> UnpackError {
    UnpackError {
        entry: entry.to_string(),
        why: why.into(),
        no_space: false,
    }
}

fn os(entry: &str, what: &str, e: impl Into<io::Error>) -> UnpackError {
    let e: io::Error = e.into();
    let no_space = matches!(e.raw_os_error(), Some(libc_enospc) if libc_enospc == Errno::NOSPC.raw_os_error() || libc_enospc == Errno::DQUOT.raw_os_error());
    UnpackError {
        entry: entry.to_string(),
        why: if no_space {
            format!("{what}: no space left on the image store's file system")
        } else {
            format!("{what}: {e}")
        },
        no_space,
    }
}

/// The entry's path as clean components; `..` is refused, `/` and `.` parts are dropped.
pub fn components(path: &[u8]) -> Result<Vec<&str>, String> {
    let s = std::str::from_utf8(path).map_err(|_| "the path is not UTF-8".to_string())?;
    let mut out = Vec::new();
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err("the path has a \"..\" component".into()),
            c if c.contains('\0') => return Err("the path has a NUL byte".into()),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

fn dir_flags() -> OFlags {
    OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW
}

/// Set once `openat2` answered ENOSYS: a kernel before 5.6, or a seccomp filter that does not
/// know it (systemd-nspawn's, older container runtimes').
static NO_OPENAT2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Opens the directory `path` below `dir`, never through a symlink or out of `dir`: `openat2`
/// with [`resolve_flags`], or where it is missing the same walk done by hand.
fn open_dir_beneath(dir: &OwnedFd, path: &str) -> Result<OwnedFd, Errno> {
    use std::sync::atomic::Ordering;
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        match rfs::openat2(dir, path, dir_flags(), Mode::empty(), resolve_flags()) {
            Err(Errno::NOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
            r => return r,
        }
    }
    walk_dir_beneath(dir, path)
}

/// One component at a time, each opened with `O_NOFOLLOW | O_DIRECTORY` from the one before:
/// a symlink anywhere is ELOOP or ENOTDIR, and `..` (or an absolute path) is refused as
/// `RESOLVE_BENEATH` refuses it, with EXDEV.
fn walk_dir_beneath(dir: &OwnedFd, path: &str) -> Result<OwnedFd, Errno> {
    if path.starts_with('/') {
        return Err(Errno::XDEV);
    }
    let mut cur = rustix::io::dup(dir)?;
    for c in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if c == ".." {
            return Err(Errno::XDEV);
        }
        cur = rfs::openat(&cur, c, dir_flags(), Mode::empty())?;
    }
    Ok(cur)
}

/// Applies layers to directories.
pub struct Unpacker {
    root_path: PathBuf,
    root: OwnedFd,
    /// The directory of the previous entry, which is usually the next one's too.
    last_parent: Option<(String, OwnedFd)>,
    dir_times: Vec<(String, u64)>,
    buf: Vec<u8>,
}

impl Unpacker {
    /// `dest` must be an existing, empty directory that only this process writes to.
    pub fn new(dest: &Path) -> Result<Unpacker, UnpackError> {
        let root = rfs::open(dest, dir_flags(), Mode::empty())
            .map_err(|e| os("", &dest.display().to_string(), e))?;
        Ok(Unpacker {
            root_path: dest.to_path_buf(),
            root,
            last_parent: None,
            dir_times: Vec::new(),
            buf: vec![0; BUF],
        })
    }

    /// Applies the tar stream `tar` (already decompressed). Stops at the end-of-archive marker;
    /// the caller drains the rest of the stream (it is part of the layer's digest).
    pub fn apply<R: Read>(&mut self, tar: R) -> Result<Stats, UnpackError> {
        let mut stats = Stats::default();
        let mut archive = tar::Archive::new(tar);
        let entries = archive
            .entries()
            .map_err(|e| err("", format!("not a tar archive: {e}")))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| err("", format!("bad tar header: {e}")))?;
            let raw = entry.path_bytes().into_owned();
            let name = String::from_utf8_lossy(&raw).into_owned();
            self.entry(&mut entry, &raw, &name)?;
            stats.entries += 1;
            stats.file_bytes += entry.size();
        }
        self.finish_dir_times()?;
        Ok(stats)
    }

    fn entry<R: Read>(
        &mut self,
        e: &mut tar::Entry<'_, R>,
        raw: &[u8],
        name: &str,
    ) -> Result<(), UnpackError> {
        use tar::EntryType as T;
        let kind = e.header().entry_type();
        if matches!(kind, T::XGlobalHeader) {
            return Ok(());
        }
        let comps = components(raw).map_err(|w| err(name, w))?;
        let meta = Meta::of(e, name)?;
        let Some((last, dirs)) = comps.split_last() else {
            // The layer's root itself ("./"): only a directory may describe it.
            if kind != T::Directory {
                return Err(err(name, "names the layer's root but is not a directory"));
            }
            let fd = rustix::io::dup(&self.root).map_err(|e| os(name, "dup", e))?;
            return self.set_meta(&fd, &meta, name, true);
        };
        let parent = self.parent(dirs, name)?;
        if let Some(hidden) = last.strip_prefix(WHITEOUT) {
            if *last == OPAQUE {
                return rfs::fsetxattr(&parent, OPAQUE_XATTR, b"y", rfs::XattrFlags::empty())
                    .map_err(|e| os(name, "marking the directory opaque", e));
            }
            if hidden.starts_with(WHITEOUT) {
                return Ok(()); // other AUFS metadata (.wh..wh.plnk, ...): meaningless here
            }
            if hidden.is_empty() || hidden == "." || hidden == ".." {
                return Err(err(name, "a whiteout of nothing"));
            }
            remove_existing(&parent, hidden, &self.root_path, dirs, false, name)?;
            return rfs::mknodat(
                &parent,
                hidden,
                FileType::CharacterDevice,
                Mode::empty(),
                rfs::makedev(0, 0),
            )
            .map_err(|e| os(name, "creating the whiteout", e));
        }
        match kind {
            T::Regular | T::Continuous => {
                remove_existing(&parent, last, &self.root_path, dirs, false, name)?;
                let fd = rfs::openat(
                    &parent,
                    *last,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(|e| os(name, "creating the file", e))?;
                let mut f = std::fs::File::from(fd);
                copy(e, &mut f, &mut self.buf).map_err(|x| os(name, "writing the file", x))?;
                let fd = OwnedFd::from(f);
                self.set_meta(&fd, &meta, name, false)
            }
            T::Directory => {
                let existing = rfs::statat(&parent, *last, AtFlags::SYMLINK_NOFOLLOW);
                let is_dir = matches!(&existing, Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory);
                if !is_dir {
                    remove_existing(&parent, last, &self.root_path, dirs, false, name)?;
                    rfs::mkdirat(&parent, *last, Mode::from_raw_mode(0o700))
                        .map_err(|e| os(name, "creating the directory", e))?;
                }
                let fd = open_dir_beneath(&parent, last)
                    .map_err(|e| os(name, "opening the directory", e))?;
                self.set_meta(&fd, &meta, name, true)?;
                self.dir_times.push((comps.join("/"), meta.mtime));
                // The parent cache may hold this path's old fd if it was replaced.
                self.last_parent = None;
                Ok(())
            }
            T::Symlink => {
                let target = e
                    .link_name_bytes()
                    .ok_or_else(|| err(name, "a symlink without a target"))?;
                if target.is_empty() || target.contains(&0) {
                    return Err(err(name, "a symlink with an empty or NUL target"));
                }
                remove_existing(&parent, last, &self.root_path, dirs, false, name)?;
                // The target is only text here: it is resolved inside the container's root at run
                // time, and no later entry of this layer is written through it.
                rfs::symlinkat(&*target, &parent, *last)
                    .map_err(|e| os(name, "creating the symlink", e))?;
                set_meta_at(&parent, last, &meta, false, name)
            }
            T::Link => {
                let target = e
                    .link_name_bytes()
                    .ok_or_else(|| err(name, "a hard link without a target"))?
                    .into_owned();
                let tcomps =
                    components(&target).map_err(|w| err(name, format!("hard link target: {w}")))?;
                let Some((tlast, tdirs)) = tcomps.split_last() else {
                    return Err(err(name, "a hard link to the layer's root"));
                };
                if tcomps == comps {
                    return Err(err(name, "a hard link to itself"));
                }
                let tparent = self.existing_dir(tdirs).map_err(|why| {
                    err(
                        name,
                        format!(
                            "hard link target {} is not in this layer: {why}",
                            shown(&target)
                        ),
                    )
                })?;
                match rfs::statat(&tparent, *tlast, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                        return Err(err(name, "a hard link to a directory"));
                    }
                    Ok(_) => {}
                    Err(_) => {
                        return Err(err(
                            name,
                            format!("hard link target {} is not in this layer", shown(&target)),
                        ));
                    }
                }
                let parent = self.parent(dirs, name)?;
                remove_existing(&parent, last, &self.root_path, dirs, false, name)?;
                rfs::linkat(&tparent, *tlast, &parent, *last, AtFlags::empty())
                    .map_err(|e| os(name, "creating the hard link", e))
            }
            T::Char | T::Block | T::Fifo => {
                let ft = match kind {
                    T::Char => FileType::CharacterDevice,
                    T::Block => FileType::BlockDevice,
                    _ => FileType::Fifo,
                };
                let (maj, min) = (
                    e.header().device_major().ok().flatten().unwrap_or(0),
                    e.header().device_minor().ok().flatten().unwrap_or(0),
                );
                remove_existing(&parent, last, &self.root_path, dirs, false, name)?;
                rfs::mknodat(&parent, *last, ft, Mode::empty(), rfs::makedev(maj, min))
                    .map_err(|e| os(name, "creating the device node", e))?;
                set_meta_at(&parent, last, &meta, true, name)
            }
            T::GNUSparse => Err(err(name, "GNU sparse files are not supported")),
            other => Err(err(
                name,
                format!(
                    "tar entry type {:?} is not supported",
                    other.as_byte() as char
                ),
            )),
        }
    }

    /// The directory `dirs` (relative to the root), created (0755, root) where missing.
    fn parent(&mut self, dirs: &[&str], name: &str) -> Result<OwnedFd, UnpackError> {
        let key = dirs.join("/");
        if let Some((k, fd)) = &self.last_parent
            && *k == key
        {
            return rustix::io::dup(fd).map_err(|e| os(name, "dup", e));
        }
        let fd = if dirs.is_empty() {
            rustix::io::dup(&self.root).map_err(|e| os(name, "dup", e))?
        } else {
            match open_dir_beneath(&self.root, key.as_str()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => self.make_dirs(dirs, name)?,
                Err(e) => return Err(escape_error(name, e)),
            }
        };
        let keep = rustix::io::dup(&fd).map_err(|e| os(name, "dup", e))?;
        self.last_parent = Some((key, keep));
        Ok(fd)
    }

    fn make_dirs(&self, dirs: &[&str], name: &str) -> Result<OwnedFd, UnpackError> {
        let mut cur = rustix::io::dup(&self.root).map_err(|e| os(name, "dup", e))?;
        for d in dirs {
            match rfs::mkdirat(&cur, *d, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(os(name, "creating a parent directory", e)),
            }
            cur = open_dir_beneath(&cur, d).map_err(|e| escape_error(name, e))?;
        }
        Ok(cur)
    }

    fn existing_dir(&self, dirs: &[&str]) -> Result<OwnedFd, String> {
        if dirs.is_empty() {
            return rustix::io::dup(&self.root).map_err(|e| e.to_string());
        }
        open_dir_beneath(&self.root, dirs.join("/").as_str()).map_err(|e| match e {
            Errno::LOOP | Errno::XDEV | Errno::NOTDIR => {
                "its path goes through a symlink or a non-directory".to_string()
            }
            e => e.to_string(),
        })
    }

    fn set_meta(
        &self,
        fd: &OwnedFd,
        m: &Meta,
        name: &str,
        is_dir: bool,
    ) -> Result<(), UnpackError> {
        rfs::fchown(fd, Some(m.uid()), Some(m.gid()))
            .map_err(|e| os(name, "setting the owner", e))?;
        // After chown, which clears set-user-ID bits.
        rfs::fchmod(fd, Mode::from_raw_mode(m.mode))
            .map_err(|e| os(name, "setting the mode", e))?;
        for (k, v) in &m.xattrs {
            rfs::fsetxattr(fd, k.as_str(), v, rfs::XattrFlags::empty())
                .map_err(|e| os(name, &format!("setting the attribute {k}"), e))?;
        }
        if !is_dir {
            rfs::futimens(fd, &m.times()).map_err(|e| os(name, "setting the time", e))?;
        }
        Ok(())
    }

    /// Directory times last: creating entries inside a directory changes its mtime.
    fn finish_dir_times(&mut self) -> Result<(), UnpackError> {
        self.last_parent = None;
        for (rel, mtime) in std::mem::take(&mut self.dir_times) {
            let fd = match open_dir_beneath(&self.root, rel.as_str()) {
                Ok(fd) => fd,
                // A later entry replaced the directory (a file, a symlink, a whiteout) or
                // removed it: the tar is valid, its time no longer applies.
                Err(Errno::NOTDIR | Errno::NOENT | Errno::LOOP) => continue,
                Err(e) => return Err(os(&rel, "opening the directory", e)),
            };
            let t = Meta::times_of(mtime);
            rfs::futimens(&fd, &t).map_err(|e| os(&rel, "setting the time", e))?;
        }
        Ok(())
    }
}

fn escape_error(name: &str, e: Errno) -> UnpackError {
    match e {
        Errno::LOOP | Errno::XDEV => err(
            name,
            "its path goes through a symlink (refused: it could lead outside the layer)",
        ),
        // O_NOFOLLOW|O_DIRECTORY on a symlink gives ENOTDIR.
        Errno::NOTDIR => err(
            name,
            "its path goes through a symlink or a non-directory (refused: it could lead outside the layer)",
        ),
        e => os(name, "opening its directory", e),
    }
}

/// Sets the owner, the mode (`with_mode`: a symlink has none of its own) and the time of the entry
/// just created at `parent/last`, never following it.
fn set_meta_at(
    parent: &OwnedFd,
    last: &str,
    meta: &Meta,
    with_mode: bool,
    name: &str,
) -> Result<(), UnpackError> {
    rfs::chownat(
        parent,
        last,
        Some(meta.uid()),
        Some(meta.gid()),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| os(name, "setting the owner", e))?;
    if with_mode {
        rfs::chmodat(
            parent,
            last,
            Mode::from_raw_mode(meta.mode),
            AtFlags::empty(),
        )
        .map_err(|e| os(name, "setting the mode", e))?;
    }
    rfs::utimensat(parent, last, &meta.times(), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| os(name, "setting the time", e))
}

/// Removes whatever is at `parent/last` so an entry can take its place (a later entry wins).
fn remove_existing(
    parent: &OwnedFd,
    last: &str,
    root: &Path,
    dirs: &[&str],
    _keep_dir: bool,
    name: &str,
) -> Result<(), UnpackError> {
    match rfs::statat(parent, last, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(os(name, "looking at the existing entry", e)),
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            // The parents were opened without following any symlink, so this path is inside the
            // layer; remove_dir_all does not follow symlinks either.
            let mut p = root.to_path_buf();
            p.extend(dirs);
            p.push(last);
            std::fs::remove_dir_all(&p).map_err(|e| os(name, "replacing a directory", e))
        }
        Ok(_) => rfs::unlinkat(parent, last, AtFlags::empty())
            .map_err(|e| os(name, "replacing a file", e)),
    }
}

fn copy<R: Read>(from: &mut R, to: &mut std::fs::File, buf: &mut [u8]) -> io::Result<()> {
    loop {
        let n = match from.read(buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
    }
}

/// A user or group ID from a header. `u32::MAX` is `(uid_t) -1`, which `chown` takes as "leave
/// it", so a file would keep the unpacker's owner, root: refused, as the kernel refuses it as an
/// ID.
fn id_of(v: u64) -> Option<u32> {
    u32::try_from(v).ok().filter(|v| *v != u32::MAX)
}

/// Ownership, mode, time and kept attributes of an entry.
struct Meta {
    uid: u32,
    gid: u32,
    mode: u32,
    mtime: u64,
    xattrs: Vec<(String, Vec<u8>)>,
}

impl Meta {
    fn of<R: Read>(e: &mut tar::Entry<'_, R>, name: &str) -> Result<Meta, UnpackError> {
        let h = e.header();
        let bad = |what: &str| err(name, format!("bad {what} in the tar header"));
        // An empty numeric field means 0, as GNU tar reads it.
        let blank = |f: &[u8]| f.iter().all(|b| *b == 0 || *b == b' ');
        let id = |f: &[u8], v: io::Result<u64>, what: &str| -> Result<u32, UnpackError> {
            if blank(f) {
                return Ok(0);
            }
            v.ok().and_then(id_of).ok_or_else(|| bad(what))
        };
        let old = h.as_old();
        let mut m = Meta {
            uid: id(&old.uid, h.uid(), "uid")?,
            gid: id(&old.gid, h.gid(), "gid")?,
            mode: if blank(&old.mode) {
                0
            } else {
                h.mode().map_err(|_| bad("mode"))? & 0o7777
            },
            mtime: h.mtime().unwrap_or(0),
            xattrs: Vec::new(),
        };
        if let Ok(Some(pax)) = e.pax_extensions() {
            for ext in pax.flatten() {
                let Ok(key) = ext.key() else { continue };
                let num = || {
                    std::str::from_utf8(ext.value_bytes())
                        .ok()
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .and_then(id_of)
                };
                match key {
                    "uid" => m.uid = num().ok_or_else(|| bad("PAX uid"))?,
                    "gid" => m.gid = num().ok_or_else(|| bad("PAX gid"))?,
                    k => {
                        if let Some(x) = k.strip_prefix("SCHILY.xattr.")
                            && (x.starts_with("user.") || x == "security.capability")
                        {
                            m.xattrs.push((x.to_string(), ext.value_bytes().to_vec()));
                        }
                    }
                }
            }
        }
        Ok(m)
    }

    fn uid(&self) -> rfs::Uid {
        rfs::Uid::from_raw(self.uid)
    }

    fn gid(&self) -> rfs::Gid {
        rfs::Gid::from_raw(self.gid)
    }

    fn times(&self) -> Timestamps {
        Meta::times_of(self.mtime)
    }

    fn times_of(mtime: u64) -> Timestamps {
        let t = rfs::Timespec {
            tv_sec: i64::try_from(mtime).unwrap_or(i64::MAX),
            tv_nsec: 0,
        };
        Timestamps {
            last_access: t,
            last_modification: t,
        }
    }
}

pub mod bounds;
#[cfg(test)]
mod tests;
