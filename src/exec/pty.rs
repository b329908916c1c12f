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
}
