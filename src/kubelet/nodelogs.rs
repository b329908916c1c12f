//! `/logs/`: the node's own logs, the files under /var/log, as the kubelet serves them (Go's
//! `http.FileServer` over /var/log: a directory is an HTML list of its entries, a file its bytes).
//! Authorised as `nodes/log` (the gate maps `/logs` to it).
//!
//! Nothing outside /var/log is reachable: a path with `..` is refused before anything is
//! opened, and the file is opened with `openat2(RESOLVE_BENEATH)` from /var/log, so a symlink
//! that points out of it fails (where the kernel has no `openat2`, each component is opened
//! with `O_NOFOLLOW`: no symlink is followed at all). Only directories and regular files are
//! served (a FIFO or a device is refused, never read), a listing has at most
//! [`MAX_ENTRIES`] entries, and a file is streamed through a fixed buffer.

use rustix::fd::OwnedFd;
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use std::io::{Read, Write};
use std::path::Path;

pub const ROOT: &str = "/var/log";
/// The most entries a directory listing shows.
pub const MAX_ENTRIES: usize = 10_000;

/// What a `/logs/...` request gets.
#[derive(Debug)]
pub enum Answer {
    /// An HTML directory listing.
    Listing(String),
    /// A regular file, opened; its type and length.
    File(std::fs::File, &'static str, u64),
    /// A directory asked for without its trailing slash: where to go (relative).
    Redirect(String),
    /// The status and a message.
    Refused(u16, &'static str),
}

/// The components of a request path below `/logs/`, or None when one would climb out.
pub fn components(rest: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    for c in rest.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// Answers `/logs/{rest}` from the directory `root`.
pub fn answer(root: &Path, rest: &str) -> Answer {
    let Some(parts) = components(rest) else {
        return Answer::Refused(400, "invalid URL path\n");
    };
    let Ok(root_fd) = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Answer::Refused(404, "404 page not found\n");
    };
    let fd = match open_beneath(&root_fd, &parts) {
        Ok(fd) => fd,
        Err(e) if e == rustix::io::Errno::NOENT || e == rustix::io::Errno::NOTDIR => {
            return Answer::Refused(404, "404 page not found\n");
        }
        Err(_) => return Answer::Refused(403, "403 Forbidden\n"),
    };
    let Ok(st) = rustix::fs::fstat(&fd) else {
        return Answer::Refused(500, "500 Internal Server Error\n");
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {
            if !rest.is_empty() && !rest.ends_with('/') {
                let base = parts.last().copied().unwrap_or_default();
                return Answer::Redirect(format!("{}/", escape_path(base)));
            }
            listing(fd)
        }
        FileType::RegularFile => {
            let mut f = std::fs::File::from(fd);
            let mut head = [0u8; 512];
            let n = read_some(&mut f, &mut head);
            if std::io::Seek::rewind(&mut f).is_err() {
                return Answer::Refused(500, "500 Internal Server Error\n");
            }
            Answer::File(f, content_type(&head[..n]), st.st_size as u64)
        }
        _ => Answer::Refused(403, "403 Forbidden\n"),
    }
}

fn read_some(f: &mut std::fs::File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}

/// Opens `parts` below `root`: never a FIFO's blocking open, never outside `root`.
fn open_beneath(root: &OwnedFd, parts: &[&str]) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let path = if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    };
    match rustix::fs::openat2(
        root,
        path.as_str(),
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(rustix::io::Errno::NOSYS) => {}
        // A symlink out of the root: EXDEV.
        r => return r,
    }
    let mut fd = rustix::fs::openat(root, ".", flags, Mode::empty())?;
    for p in parts {
        fd = rustix::fs::openat(&fd, *p, flags | OFlags::NOFOLLOW, Mode::empty())?;
    }
    Ok(fd)
}

/// Go's `DetectContentType`, for what a log directory holds: gzip, text, or bytes.
fn content_type(head: &[u8]) -> &'static str {
    if head.starts_with(&[0x1f, 0x8b, 0x08]) {
        return "application/x-gzip";
    }
    let binary = head.iter().any(|&b| {
        b <= 0x08 || b == 0x0b || (0x0e..=0x1a).contains(&b) || (0x1c..=0x1f).contains(&b)
    });
    if binary {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// Go's `dirList`: names sorted, directories with a trailing slash.
fn listing(fd: OwnedFd) -> Answer {
    let Ok(mut dir) = rustix::fs::Dir::read_from(&fd) else {
        return Answer::Refused(500, "Error reading directory\n");
    };
    let mut names = Vec::new();
    while let Some(Ok(e)) = dir.read() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        if names.len() >= MAX_ENTRIES {
            break;
        }
        let is_dir = match e.file_type() {
            FileType::Unknown => {
                rustix::fs::statat(&fd, e.file_name(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .map(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
                    .unwrap_or(false)
            }
            t => t == FileType::Directory,
        };
        names.push(if is_dir { format!("{name}/") } else { name });
    }
    names.sort();
    let mut html = String::from("<pre>\n");
    for n in &names {
        html += &format!("<a href=\"{}\">{}</a>\n", escape_path(n), escape_html(n));
    }
    html += "</pre>\n";
    Answer::Listing(html)
}

/// A name as a relative URL path (Go's `url.URL{Path: name}.String()`; a colon in the first
/// segment is guarded with `./`).
fn escape_path(name: &str) -> String {
    let mut s = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&b) {
            s.push(b as char);
        } else {
            s += &format!("%{b:02X}");
        }
    }
    if s.split('/').next().is_some_and(|f| f.contains(':')) {
        s.insert_str(0, "./");
    }
    s
}

fn escape_html(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '<' => s += "&lt;",
            '>' => s += "&gt;",
            '&' => s += "&amp;",
            '"' => s += "&#34;",
            '\'' => s += "&#39;",
            c => s.push(c),
        }
    }
    s
}

/// Copies an opened file to `w` through a fixed buffer: `len` bytes, its size when it was opened
/// (what Content-Length said). A file that shrank meanwhile is an error: the connection must
/// end short, as Go's server ends it.
pub fn copy_file(f: &mut std::fs::File, len: u64, w: &mut impl Write) -> std::io::Result<()> {
    let mut buf = [0u8; 16 * 1024];
    let mut left = len;
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = f.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        w.write_all(&buf[..n])?;
        left -= n as u64;
    }
    w.flush()
}

/// Serves `/logs/{rest}` (the gate has authorised it); whether the connection may go on.
#[cfg(feature = "cli")]
pub(super) fn serve(
    state: &super::context::State,
    stream: &mut super::context::Tls,
    req: &super::http::Request,
    rest: &str,
) -> bool {
    use super::http;
    let head = |status: u16, ctype: &str, len: u64, extra: &str| {
        format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: {ctype}\r\nContent-Length: {len}\r\n{extra}{}\r\n",
            http::reason(status),
            if req.close {
                "Connection: close\r\n"
            } else {
                ""
            }
        )
    };
    let body_too = req.method != "HEAD";
    match answer(&state.paths.host(ROOT), rest) {
        Answer::Listing(html) => {
            let ctype = "text/html; charset=utf-8";
            let body = if body_too { html.as_bytes() } else { &[][..] };
            http::write_response(stream, 200, ctype, body, req.close).is_ok()
        }
        Answer::Redirect(to) => {
            let h = head(
                301,
                "text/plain; charset=utf-8",
                0,
                &format!("Location: {to}\r\n"),
            );
            stream
                .write_all(h.as_bytes())
                .and_then(|_| stream.flush())
                .is_ok()
        }
        Answer::Refused(status, msg) => {
            let body = if body_too { msg.as_bytes() } else { &[][..] };
            http::write_response(stream, status, "text/plain; charset=utf-8", body, req.close)
                .is_ok()
        }
        Answer::File(mut f, ctype, len) => {
            let h = head(200, ctype, len, "");
            if stream.write_all(h.as_bytes()).is_err() {
                return false;
            }
            if !body_too {
                return stream.flush().is_ok();
            }
            copy_file(&mut f, len, stream).is_ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A /var/log of the test's own: tests run at once, each under its own name.
    fn tree(test: &str) -> std::path::PathBuf {
        let base =
            std::env::temp_dir().join(format!("podunit-nodelogs-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("log");
        std::fs::create_dir_all(root.join("apt")).unwrap();
        std::fs::write(root.join("syslog"), "line one\n").unwrap();
        std::fs::write(root.join("apt/history.log"), "apt\n").unwrap();
        std::fs::write(root.join("a<b>&c"), "x").unwrap();
        std::fs::write(base.join("secret"), "outside\n").unwrap();
        symlink("../secret", root.join("out-rel")).unwrap();
        symlink(base.join("secret"), root.join("out-abs")).unwrap();
        symlink("syslog", root.join("in")).unwrap();
        nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        root
    }

    fn body(a: Answer) -> String {
        match a {
            Answer::Listing(s) => s,
            Answer::File(mut f, _, len) => {
                let mut out = Vec::new();
                copy_file(&mut f, len, &mut out).unwrap();
                String::from_utf8(out).unwrap()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lists_reads_and_never_leaves_the_root() {
        let root = tree("lists_reads_and_never_leaves_the_root");
        let list = body(answer(&root, ""));
        assert!(
            list.starts_with("<pre>\n") && list.ends_with("</pre>\n"),
            "{list}"
        );
        assert!(list.contains("<a href=\"apt/\">apt/</a>\n"), "{list}");
        assert!(list.contains("<a href=\"syslog\">syslog</a>\n"), "{list}");
        assert!(
            list.contains("<a href=\"a%3Cb%3E&c\">a&lt;b&gt;&amp;c</a>\n"),
            "{list}"
        );
        let pos = |s: &str| list.find(s).unwrap();
        assert!(pos("apt/") < pos("syslog"), "sorted");
        assert_eq!(body(answer(&root, "syslog")), "line one\n");
        assert_eq!(body(answer(&root, "apt/history.log")), "apt\n");
        assert_eq!(
            body(answer(&root, "in")),
            "line one\n",
            "a link inside is followed"
        );
        assert!(matches!(answer(&root, "apt"), Answer::Redirect(r) if r == "apt/"));
        for bad in ["../secret", "apt/../../secret", ".."] {
            assert!(
                matches!(answer(&root, bad), Answer::Refused(400, _)),
                "{bad}"
            );
        }
        for out in ["out-rel", "out-abs"] {
            assert!(
                matches!(answer(&root, out), Answer::Refused(403, _)),
                "{out}"
            );
        }
        assert!(matches!(answer(&root, "fifo"), Answer::Refused(403, _)));
        assert!(matches!(answer(&root, "nosuch"), Answer::Refused(404, _)));
        assert!(matches!(answer(&root, "syslog/x"), Answer::Refused(404, _)));
        let _ = std::fs::remove_dir_all(root.parent().unwrap());
    }

    #[test]
    fn types_and_escapes_follow_go() {
        assert_eq!(
            content_type(b"Dec  1 20:00:00 host x\n"),
            "text/plain; charset=utf-8"
        );
        assert_eq!(content_type(&[0x1f, 0x8b, 0x08, 0]), "application/x-gzip");
        assert_eq!(content_type(&[0, 0, 1, 2]), "application/octet-stream");
        assert_eq!(escape_path("a b"), "a%20b");
        assert_eq!(escape_path("c:d"), "./c:d");
        assert_eq!(components("a//./b/"), Some(vec!["a", "b"]));
        assert_eq!(components("a/../b"), None);
    }

    #[test]
    fn a_file_is_sent_at_the_length_it_had() {
        let root = tree("a_file_is_sent_at_the_length_it_had");
        let Answer::File(mut f, _, len) = answer(&root, "syslog") else {
            panic!()
        };
        std::fs::write(root.join("syslog"), "line one\nline two\n").unwrap();
        let mut out = Vec::new();
        copy_file(&mut f, len, &mut out).unwrap();
        assert_eq!(out, b"line one\n", "what was appended is not sent");
        let Answer::File(mut f, _, len) = answer(&root, "syslog") else {
            panic!()
        };
        std::fs::write(root.join("syslog"), "li").unwrap();
        let mut out = Vec::new();
        assert!(
            copy_file(&mut f, len, &mut out).is_err(),
            "a shrunk file ends short"
        );
        let _ = std::fs::remove_dir_all(root.parent().unwrap());
    }
}
