//! A terminal for a command that asked for one (`kubectl exec -t`, `podunit exec -t`): a new
//! pseudo-terminal whose subordinate side becomes the command's stdin, stdout, stderr and
//! controlling terminal; the caller keeps the controlling side.

use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use std::os::fd::{AsFd, OwnedFd};

/// A new terminal: (controlling side, subordinate side).
pub fn open() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    // The subordinate side straight from the controlling one: no path, so no /dev/pts lookup
    // that another mount namespace could see differently.
    let sub = rustix::pty::ioctl_tiocgptpeer(
        &master,
        OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
    )?;
    Ok((master, sub))
}

/// Sets the terminal's window size (columns and rows), as a resize asks.
pub fn resize(master: impl AsFd, cols: u16, rows: u16) -> std::io::Result<()> {
    let ws = Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(master, ws)?;
    Ok(())
}

/// The window size of the terminal `fd` (columns, rows), when it is one.
pub fn size(fd: impl AsFd) -> Option<(u16, u16)> {
    rustix::termios::tcgetwinsize(fd)
        .ok()
        .map(|w| (w.ws_col, w.ws_row))
}

/// SIGWINCH alone.
fn resize_signal() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    set.add(nix::sys::signal::Signal::SIGWINCH);
    set
}

/// Blocks SIGWINCH in the calling thread and in the threads it starts from then on, so that
/// [`follow_resizes`] gets every one: a thread that left it unblocked could be picked to take
/// it, and would drop it (its default action is to ignore it). Call it before any thread starts.
pub fn block_resize_signal() -> std::io::Result<()> {
    resize_signal().thread_block().map_err(std::io::Error::from)
}

/// At each SIGWINCH, gives `master` the window size `local` has now (a resize of the caller's
/// terminal resizes the command's). Runs until the process ends.
pub fn follow_resizes(local: impl AsFd, master: OwnedFd) {
    let set = resize_signal();
    // Blocked here too: sigwait takes only blocked signals.
    if set.thread_block().is_err() {
        return;
    }
    while set.wait().is_ok() {
        if let Some((cols, rows)) = size(&local) {
            let _ = resize(&master, cols, rows);
        }
    }
}

/// A terminal put into raw mode for as long as this lives (the command's terminal does the
/// line editing and echo), restored on drop.
pub struct RawMode {
    fd: OwnedFd,
    saved: rustix::termios::Termios,
}

impl RawMode {
    /// None when `fd` is not a terminal.
    pub fn enter(fd: impl AsFd) -> Option<RawMode> {
        let fd = fd.as_fd().try_clone_to_owned().ok()?;
        let saved = rustix::termios::tcgetattr(&fd).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&fd, rustix::termios::OptionalActions::Now, &raw).ok()?;
        Some(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            &self.fd,
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_carries_bytes_and_its_size() {
        let (master, sub) = open().unwrap();
        resize(&master, 132, 43).unwrap();
        assert_eq!(size(&sub), Some((132, 43)));
        rustix::io::write(&master, b"hi\n").unwrap();
        let mut buf = [0u8; 16];
        let n = rustix::io::read(&sub, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hi\n");
    }

    #[test]
    fn a_resize_signal_copies_the_local_size() {
        use nix::sys::pthread::{pthread_kill, pthread_self};
        use nix::sys::signal::Signal;
        let (local, _local_sub) = open().unwrap();
        let (master, sub) = open().unwrap();
        resize(&local, 80, 24).unwrap();
        resize(&master, 80, 24).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let watched = master.try_clone().unwrap();
        let local_copy = local.try_clone().unwrap();
        std::thread::spawn(move || {
            // Blocked before the test may signal this thread.
            block_resize_signal().unwrap();
            tx.send(pthread_self()).unwrap();
            follow_resizes(local_copy, watched);
        });
        let thread = rx.recv().unwrap();
        resize(&local, 132, 43).unwrap();
        assert_eq!(size(&sub), Some((80, 24)), "nothing before the signal");
        pthread_kill(thread, Signal::SIGWINCH).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while size(&sub) != Some((132, 43)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(size(&sub), Some((132, 43)));
    }
}
