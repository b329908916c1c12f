//! sd_notify(3) without a C library: one datagram to `$NOTIFY_SOCKET`. The protocol is a stable
//! interface (systemd documents it for reimplementation), and the whole of it that podunit needs
//! is these few lines, so no crate is pulled in for it.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. `READY=1\nSTATUS=...`) to the service manager. Not run under systemd
/// (no `$NOTIFY_SOCKET`): does nothing, as sd_notify does.
pub fn notify(state: &str) -> io::Result<()> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let path = path.to_string_lossy().into_owned();
    let addr = socket_addr(&path)?;
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

/// `@name` is an abstract socket, anything else a path.
fn socket_addr(path: &str) -> io::Result<SocketAddr> {
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())
        }
        None if path.starts_with('/') => SocketAddr::from_pathname(path),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("NOTIFY_SOCKET {path:?} is neither absolute nor abstract"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_one_datagram_to_a_path_socket() {
        let dir = std::env::temp_dir().join(format!("podunit-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("notify");
        let rx = UnixDatagram::bind(&p).unwrap();
        let addr = socket_addr(p.to_str().unwrap()).unwrap();
        UnixDatagram::unbound()
            .unwrap()
            .send_to_addr(b"READY=1\nSTATUS=x", &addr)
            .unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=x");
        assert!(socket_addr("relative").is_err());
        assert!(socket_addr("@abstract").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
