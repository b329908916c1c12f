//! Replacing a file, a symlink or a directory atomically: a reader, or the file system after a
//! crash at any point, sees the old one or the new one, never a torn or missing one. Every writer
//! of podunit's state, spool, records, caches and image store goes through here.
//!
//! A file is written to a temp file in its own directory (unique name, `O_EXCL`, created with its
//! final mode, owner and mode set before the first byte), synced, renamed over its name, and the
//! directory synced; the temp file is removed on every error. Temp names start with `.tmp-`
//! ([`is_temp`]): readers of these directories skip dotfiles, and a crash's leftovers can be told
//! apart.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const TEMP_PREFIX: &str = ".tmp-";

/// Makes temp names unique among the threads of this process (the process ID among processes).
static SEQ: AtomicU64 = AtomicU64::new(0);

/// How [`write`] leaves the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    mode: u32,
    owner: Option<(u32, u32)>,
    sync: bool,
}

impl Options {
    /// Permission bits `mode` exactly (the umask does not apply), the writer's owner, and
    /// durable: file and directory synced before [`write`] returns.
    pub const fn new(mode: u32) -> Options {
        Options {
            mode,
            owner: None,
            sync: true,
        }
    }

    /// Owned by `uid`:`gid` (set before any byte is written).
    pub const fn owner(self, uid: u32, gid: u32) -> Options {
        Options {
            owner: Some((uid, gid)),
            ..self
        }
    }

    /// Still atomic, but not synced: only for what can be lost in a crash and is checked when
    /// read, so a torn file after a crash costs nothing but its rebuilding.
    pub const fn without_sync(self) -> Options {
        Options {
            sync: false,
            ..self
        }
    }
}

/// A write, rename or sync that failed: the file or directory it was about, and why.
#[derive(Debug)]
pub struct Error {
    pub path: PathBuf,
    pub error: io::Error,
}

impl Error {
    fn at(path: &Path, error: io::Error) -> Error {
        Error {
            path: path.to_path_buf(),
            error,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

impl std::error::Error for Error {}

/// For callers that report `io::Error`: the kind is kept, the message names the path.
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.error.kind(), e)
    }
}

/// Whether `name` is one of the temp files made here (left behind only by a crash).
pub fn is_temp(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
}

/// Replaces `path` with `bytes` as `opts` says. Missing directories above it are made as
/// `create_dir_all` makes them: a caller that wants a stricter directory makes it first. An
/// error names `path`, or its directory when that is what failed; on error no temp file is left,
/// and `path` is untouched unless only the final directory sync failed.
pub fn write(path: &Path, bytes: &[u8], opts: Options) -> Result<(), Error> {
    let dir = parent(path);
    fs::create_dir_all(dir).map_err(|e| Error::at(dir, e))?;
    // Created with the final mode (less the umask): never more open than it ends up.
    let (tmp, file) = create_temp(dir, |t| {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(opts.mode)
            .open(t)
    })
    .map_err(|e| Error::at(path, e))?;
    let result = fill(file, &tmp, bytes, opts)
        .map_err(|e| Error::at(path, e))
        .and_then(|()| place(&tmp, path, opts.sync));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn fill(mut f: fs::File, tmp: &Path, bytes: &[u8], opts: Options) -> io::Result<()> {
    step(Step::Own, tmp, || {
        if let Some((uid, gid)) = opts.owner {
            std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
        }
        // After the owner: a chown clears set-user/group-ID bits, and open() applied the umask.
        f.set_permissions(fs::Permissions::from_mode(opts.mode))
    })?;
    step(Step::Write, tmp, || f.write_all(bytes))?;
    if opts.sync {
        step(Step::SyncFile, tmp, || f.sync_all())?;
    }
    Ok(())
}

/// Points the symlink `link` at `target`, replacing what `link` was with one rename of a new
/// symlink: whoever resolves `link` meanwhile gets the old target or the new one, never nothing.
/// Pointing a link at a freshly filled directory is how a whole directory changes at once.
/// Synced, and errors as [`write`]'s.
pub fn symlink(target: &Path, link: &Path) -> Result<(), Error> {
    let (tmp, ()) = create_temp(parent(link), |t| std::os::unix::fs::symlink(target, t))
        .map_err(|e| Error::at(link, e))?;
    let result = place(&tmp, link, true);
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Moves the finished file or directory `from` to `to` with one rename, then syncs `to`'s
/// directory. The error names `to` when the rename failed (nothing moved, `from` is still the
/// caller's), `to`'s directory when only the sync did.
pub fn rename(from: &Path, to: &Path) -> Result<(), Error> {
    place(from, to, true)
}

fn place(from: &Path, to: &Path, sync: bool) -> Result<(), Error> {
    step(Step::Rename, from, || fs::rename(from, to)).map_err(|e| Error::at(to, e))?;
    if sync { sync_dir(parent(to)) } else { Ok(()) }
}

/// Makes the entries of `dir` (new names, renames, removals) durable.
pub fn sync_dir(dir: &Path) -> Result<(), Error> {
    step(Step::SyncDir, dir, || fs::File::open(dir)?.sync_all()).map_err(|e| Error::at(dir, e))
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A new entry in `dir` under a temp name no one else uses, made by `create`, which must fail
/// with `AlreadyExists` on a name that is taken (`O_EXCL`, or `symlink(2)`): a name a crashed
/// process with the same ID left is skipped, never reused.
fn create_temp<T>(
    dir: &Path,
    mut create: impl FnMut(&Path) -> io::Result<T>,
) -> io::Result<(PathBuf, T)> {
    let mut taken = 0;
    loop {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!("{TEMP_PREFIX}{}-{n}", std::process::id()));
        match create(&tmp) {
            Ok(made) => return Ok((tmp, made)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && taken < 100 => taken += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The steps of a write, as the test double (`double` below) sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Giving the new temp file its owner and mode.
    Own,
    Write,
    SyncFile,
    Rename,
    SyncDir,
}

/// Does `op`, the step `what` on `path`; in tests the double sees the step first.
fn step<T>(what: Step, path: &Path, op: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    #[cfg(test)]
    double::before(what, path)?;
    #[cfg(not(test))]
    let _ = (what, path);
    op()
}

/// Test double: a hook a test installs on its own thread, called before every step with the
/// path the step is about, to watch the steps (an fsync leaves no trace to check afterwards)
/// and to make one fail instead of doing it.
#[cfg(test)]
mod double {
    use super::Step;
    use std::cell::RefCell;
    use std::io;
    use std::path::Path;

    type Hook = Box<dyn FnMut(Step, &Path) -> io::Result<()>>;

    thread_local! {
        static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
    }

    pub fn before(step: Step, path: &Path) -> io::Result<()> {
        HOOK.with_borrow_mut(|h| h.as_mut().map_or(Ok(()), |h| h(step, path)))
    }

    /// Installs `hook` for this thread until the returned guard is dropped.
    pub fn install(hook: impl FnMut(Step, &Path) -> io::Result<()> + 'static) -> Installed {
        HOOK.set(Some(Box::new(hook)));
        Installed
    }

    pub struct Installed;

    impl Drop for Installed {
        fn drop(&mut self) {
            HOOK.set(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::os::unix::fs::MetadataExt;
    use std::rc::Rc;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("podunit-atomicfile-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn temps(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| is_temp(n))
            .collect()
    }

    /// The steps seen, each with the name of the file or directory it was about.
    type Seen = Rc<RefCell<Vec<(Step, String)>>>;

    /// Records every step, failing `fail` with EIO.
    fn watch(fail: Option<Step>) -> (Seen, double::Installed) {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let log = seen.clone();
        let guard = double::install(move |step, path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            log.borrow_mut().push((step, name));
            match fail {
                Some(f) if f == step => Err(io::Error::from_raw_os_error(5)),
                _ => Ok(()),
            }
        });
        (seen, guard)
    }

    /// Whether this process may give files away (it runs as root).
    fn root(dir: &Path) -> bool {
        let probe = dir.join("whoami");
        fs::write(&probe, "").unwrap();
        let uid = fs::metadata(&probe).unwrap().uid();
        fs::remove_file(&probe).unwrap();
        uid == 0
    }

    #[test]
    fn the_file_is_replaced_whole_with_its_exact_mode_and_no_temp_left() {
        let dir = scratch("replace");
        let path = dir.join("sub/state.json");
        write(&path, b"old", Options::new(0o600)).unwrap();
        write(&path, b"new", Options::new(0o666)).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        // 0666 despite the umask (022 or stricter) open() applies.
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o666);
        assert!(temps(path.parent().unwrap()).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_temp_file_has_its_final_mode_and_owner_before_any_byte() {
        let dir = scratch("never-open");
        let owner = if root(&dir) {
            (1234, 1234)
        } else {
            let m = fs::metadata(&dir).unwrap();
            (m.uid(), m.gid())
        };
        let path = dir.join("secret");
        let at_created = Rc::new(RefCell::new(None));
        let at_write = Rc::new(RefCell::new(None));
        let (c, w) = (at_created.clone(), at_write.clone());
        let _hook = double::install(move |step, p| {
            let m = fs::symlink_metadata(p).unwrap();
            let seen = (m.mode() & 0o7777, m.uid(), m.gid(), m.len());
            match step {
                Step::Own => *c.borrow_mut() = Some(seen),
                Step::Write => *w.borrow_mut() = Some(seen),
                _ => {}
            }
            Ok(())
        });
        write(&path, b"token", Options::new(0o400).owner(owner.0, owner.1)).unwrap();
        let (mode, _, _, len) = at_created.borrow().unwrap();
        assert_eq!(
            mode & !0o400,
            0,
            "created with no bit beyond 0400: {mode:o}"
        );
        assert_eq!(len, 0);
        assert_eq!(at_write.borrow().unwrap(), (0o400, owner.0, owner.1, 0));
        let m = fs::metadata(&path).unwrap();
        assert_eq!(
            (m.mode() & 0o7777, m.uid(), m.gid()),
            (0o400, owner.0, owner.1)
        );
        assert_eq!(fs::read(&path).unwrap(), b"token");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_owner_is_set() {
        let dir = scratch("owner");
        // Giving a file away needs root (as `make test-unit` runs); without it this fails
        // rather than pass unchecked.
        assert!(root(&dir), "not root: giving a file away cannot be checked");
        let path = dir.join("f");
        write(&path, b"x", Options::new(0o644).owner(1234, 4321)).unwrap();
        let m = fs::metadata(&path).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 4321));
        assert_eq!(m.mode() & 0o7777, 0o644);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_then_rename_then_directory_are_synced_unless_asked_not_to() {
        let dir = scratch("synced");
        let path = dir.join("f");
        let (seen, hook) = watch(None);
        write(&path, b"x", Options::new(0o600)).unwrap();
        let steps: Vec<Step> = seen.borrow().iter().map(|(s, _)| *s).collect();
        use Step::*;
        assert_eq!(steps, [Own, Write, SyncFile, Rename, SyncDir]);
        let names: Vec<String> = seen.borrow().iter().map(|(_, n)| n.clone()).collect();
        assert!(is_temp(&names[0]) && names[..4].iter().all(|n| n == &names[0]));
        assert_eq!(names[4], dir.file_name().unwrap().to_string_lossy());
        seen.borrow_mut().clear();
        write(&path, b"y", Options::new(0o600).without_sync()).unwrap();
        let steps: Vec<Step> = seen.borrow().iter().map(|(s, _)| *s).collect();
        assert_eq!(steps, [Own, Write, Rename]);
        drop(hook);
        assert_eq!(fs::read(&path).unwrap(), b"y");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_step_leaves_the_old_file_and_no_temp() {
        use Step::*;
        let dir = scratch("fail");
        let path = dir.join("state.json");
        for step in [Own, Write, SyncFile, Rename, SyncDir] {
            write(&path, b"old", Options::new(0o600)).unwrap();
            let (_, hook) = watch(Some(step));
            let e = write(&path, b"new", Options::new(0o644)).unwrap_err();
            drop(hook);
            assert_eq!(e.error.raw_os_error(), Some(5), "{step:?}");
            assert!(temps(&dir).is_empty(), "{step:?}: a temp file is left");
            if step == SyncDir {
                // Renamed already: the new file, whose durability is what failed.
                assert_eq!(e.path, dir, "{step:?}");
                assert_eq!(fs::read(&path).unwrap(), b"new");
            } else {
                assert_eq!(e.path, path, "{step:?}");
                assert_eq!(fs::read(&path).unwrap(), b"old", "{step:?}");
                assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
            }
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_rename_removes_the_temp_file() {
        let dir = scratch("rename-fails");
        // A non-empty directory cannot be renamed over.
        let path = dir.join("target");
        fs::create_dir_all(path.join("inside")).unwrap();
        let e = write(&path, b"x", Options::new(0o600)).unwrap_err();
        assert_eq!(e.path, path);
        assert!(path.join("inside").is_dir());
        assert!(temps(&dir).is_empty(), "{:?}", temps(&dir));
        let as_io = io::Error::from(e);
        assert!(as_io.to_string().contains("rename-fails/target"), "{as_io}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_crashed_writers_temp_name_is_skipped() {
        let dir = scratch("leftover");
        let next = SEQ.load(Ordering::Relaxed);
        for n in next..next + 3 {
            fs::write(dir.join(format!(".tmp-{}-{n}", std::process::id())), "torn").unwrap();
        }
        write(&dir.join("f"), b"whole", Options::new(0o600)).unwrap();
        assert_eq!(fs::read(dir.join("f")).unwrap(), b"whole");
        // Leftovers are whoever cleans up's: untouched here.
        assert_eq!(temps(&dir).len(), 3);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlink_switch_shows_the_old_directory_or_the_new_one() {
        let dir = scratch("switch");
        for (v, text) in [("v1", "old"), ("v2", "new")] {
            fs::create_dir(dir.join(v)).unwrap();
            fs::write(dir.join(v).join("f"), text).unwrap();
        }
        let link = dir.join("current");
        symlink(Path::new("v1"), &link).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (stop, file) = (stop.clone(), link.join("f"));
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    let got = fs::read_to_string(&file).expect("never missing");
                    assert!(got == "old" || got == "new", "{got:?}");
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..200 {
            symlink(Path::new(if i % 2 == 0 { "v2" } else { "v1" }), &link).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        assert_eq!(fs::read_link(&link).unwrap(), Path::new("v1"));
        // A switch that fails leaves the old target, and no temp link.
        let (seen, hook) = watch(Some(Step::Rename));
        assert!(symlink(Path::new("v2"), &link).is_err());
        drop(hook);
        assert_eq!(fs::read_link(&link).unwrap(), Path::new("v1"));
        assert!(temps(&dir).is_empty());
        assert_eq!(seen.borrow()[0].0, Step::Rename);
        // And a switch that works is synced.
        let (seen, hook) = watch(None);
        symlink(Path::new("v2"), &link).unwrap();
        drop(hook);
        let steps: Vec<Step> = seen.borrow().iter().map(|(s, _)| *s).collect();
        assert_eq!(steps, [Step::Rename, Step::SyncDir]);
        assert_eq!(fs::read_to_string(link.join("f")).unwrap(), "new");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_finished_directory_is_renamed_into_place_and_its_new_parent_synced() {
        let dir = scratch("place");
        fs::create_dir_all(dir.join("tmp/work/layer")).unwrap();
        fs::write(dir.join("tmp/work/layer/f"), "x").unwrap();
        fs::create_dir(dir.join("layers")).unwrap();
        let dest = dir.join("layers/abc");
        let (seen, hook) = watch(None);
        rename(&dir.join("tmp/work/layer"), &dest).unwrap();
        drop(hook);
        assert_eq!(fs::read_to_string(dest.join("f")).unwrap(), "x");
        assert_eq!(
            *seen.borrow(),
            [
                (Step::Rename, "layer".to_string()),
                (Step::SyncDir, "layers".to_string())
            ]
        );
        // Onto a directory that has entries: refused, naming the destination; both stay.
        fs::create_dir_all(dir.join("tmp/work/other")).unwrap();
        fs::write(dir.join("tmp/work/other/g"), "y").unwrap();
        let e = rename(&dir.join("tmp/work/other"), &dest).unwrap_err();
        assert_eq!(e.path, dest);
        assert!(dest.join("f").exists() && dir.join("tmp/work/other/g").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
