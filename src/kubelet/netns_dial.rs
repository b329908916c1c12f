//! Connecting to a port inside a pod's own network namespace (`network: private`), for
//! port-forward. podunit-sync cannot enter a namespace (its sandbox has `RestrictNamespaces=` and
//! no `CAP_SYS_ADMIN`), so a port-forward session starts one transient unit in PID 1's context
//! that systemd itself puts into the pod's namespace, as it puts the pod's containers there
//! (`JoinsNamespaceOf=` the pod unit, `PrivateNetwork=yes`): the dialer
//! (`podunit port-forward-dialer`).
//!
//! Its stdin is one end of a socket pair. For each port asked for (two bytes, big-endian) it
//! connects to that port on its loopback, IPv4 then IPv6, and hands the connected socket back
//! over the pair (`SCM_RIGHTS`: a socket stays in the namespace it was made in, so the session
//! then copies bytes through it as for a host-network pod), or one line saying why not. It ends
//! when the session closes its end.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::{Ipv6Addr, SocketAddr, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Connecting on a loopback either succeeds or fails at once; bound it anyway.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the session waits for the dialer's answer: both connects, and slack.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest reason read back.
const MAX_REASON: usize = 4096;
/// The answer's first byte: a socket comes with it, or a reason follows.
const CONNECTED: u8 = b'+';
const FAILED: u8 = b'-';

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Why no dialer could be started.
#[derive(Debug)]
pub enum StartError {
    Socket(io::Error),
    Systemd(crate::systemd::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Socket(e) => write!(f, "a socket pair for the pod's network: {e}"),
            StartError::Systemd(e) => write!(f, "entering the pod's network: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Connects to `port` on this network namespace's loopback as the runtimes do: IPv4, then
/// IPv6. The error is the kubelet's wording.
pub fn dial_localhost(port: u16) -> Result<TcpStream, String> {
    let v4 = SocketAddr::from(([127, 0, 0, 1], port));
    let e4 = match TcpStream::connect_timeout(&v4, CONNECT_TIMEOUT) {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&v6, CONNECT_TIMEOUT).map_err(|e6| {
        format!(
            "failed to connect to localhost:{port} in the pod's network, IPv4: dial tcp4 {v4}: \
             {e4} IPv6: dial tcp6 {v6}: {e6}"
        )
    })
}

/// A running dialer in one pod's network namespace; dropping it ends the dialer.
pub struct Dialer {
    ctl: UnixStream,
}

impl Dialer {
    /// Starts the dialer of the pod whose unit is `pod_unit`, through the CLI binary `podunit`.
    /// `Requisite=` the pod unit: a pod that is not running has no namespace to join (systemd
    /// would make the dialer a fresh, empty one), so starting fails instead.
    pub fn start(
        client: &crate::systemd::Client,
        podunit: &str,
        pod_unit: &str,
    ) -> Result<Dialer, StartError> {
        let (ours, theirs) = UnixStream::pair().map_err(StartError::Socket)?;
        let name = format!(
            "podunit-portforward-{}-{}.service",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let argv = [podunit.to_string(), "port-forward-dialer".into()];
        client
            .run_transient_in_network_of(
                &name,
                &format!("Port-forward dialer in {pod_unit}"),
                &argv,
                theirs.as_fd(),
                pod_unit,
            )
            .map_err(StartError::Systemd)?;
        let _ = ours.set_read_timeout(Some(ANSWER_TIMEOUT));
        Ok(Dialer { ctl: ours })
    }

    /// A connection to `port` on the pod's loopback, or why not.
    pub fn dial(&self, port: u16) -> Result<TcpStream, String> {
        (&self.ctl)
            .write_all(&port.to_be_bytes())
            .map_err(|e| format!("asking the pod's network namespace to connect: {e}"))?;
        let (first, fd, rest) = receive(&self.ctl)
            .map_err(|e| format!("no answer from the pod's network namespace: {e}"))?;
        match (first, fd) {
            (CONNECTED, Some(fd)) => Ok(TcpStream::from(fd)),
            (FAILED, _) => Err(read_reason(&self.ctl, rest)),
            _ => Err("the pod's network namespace gave no connection".into()),
        }
    }
}

/// One answer's first byte, the descriptor that came with it and the bytes read after it.
fn receive(sock: &UnixStream) -> io::Result<(u8, Option<OwnedFd>, Vec<u8>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut buf = [0u8; 512];
    let got = recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fd = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            // One is sent; any other is closed here.
            fd = fds.into_iter().next().or(fd);
        }
    }
    if got.bytes == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok((buf[0], fd, buf[1..got.bytes].to_vec()))
}

/// The rest of a reason line, `rest` being what came with its first byte.
fn read_reason(sock: &UnixStream, mut rest: Vec<u8>) -> String {
    let mut buf = [0u8; 512];
    while !rest.contains(&b'\n') && rest.len() < MAX_REASON {
        match (&*sock).read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => rest.extend_from_slice(&buf[..n]),
        }
    }
    let line = rest.split(|b| *b == b'\n').next().unwrap_or_default();
    String::from_utf8_lossy(line).into_owned()
}

/// Sends a connected socket, or the reason there is none.
fn answer(sock: &UnixStream, r: &Result<TcpStream, String>) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    match r {
        Ok(s) => {
            let fds = [s.as_fd()];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            control.push(SendAncillaryMessage::ScmRights(&fds));
            sendmsg(
                sock,
                &[IoSlice::new(&[CONNECTED])],
                &mut control,
                SendFlags::empty(),
            )?;
            Ok(())
        }
        Err(why) => {
            let mut line = vec![FAILED];
            line.extend(why.replace('\n', " ").bytes().take(MAX_REASON - 2));
            line.push(b'\n');
            (&*sock).write_all(&line)
        }
    }
}

/// Serves requests on `sock` until it is closed.
fn serve(sock: &UnixStream) -> io::Result<()> {
    let mut port = [0u8; 2];
    loop {
        match (&*sock).read_exact(&mut port) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let r = dial_localhost(u16::from_be_bytes(port));
        // Our copy goes once sent.
        answer(sock, &r)?;
    }
}

/// The dialer, in its transient unit: requests on stdin until the session closes it.
pub fn run_dialer() -> ExitCode {
    let Ok(fd) = io::stdin().as_fd().try_clone_to_owned() else {
        return ExitCode::FAILURE;
    };
    match serve(&UnixStream::from(fd)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// The two sides over a socket pair, in this process's own network namespace.
    fn pair() -> (Dialer, std::thread::JoinHandle<io::Result<()>>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || serve(&theirs));
        (Dialer { ctl: ours }, server)
    }

    #[test]
    fn a_connected_socket_comes_back_and_carries_bytes() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (d, server) = pair();
        let mut s = d.dial(port).unwrap();
        let (mut peer, _) = l.accept().unwrap();
        s.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        peer.write_all(b"pong").unwrap();
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong");
        // A second connection on the same dialer.
        assert!(d.dial(port).is_ok());
        drop(d);
        server.join().unwrap().unwrap();
    }

    #[test]
    fn a_refused_port_comes_back_as_the_kubelets_reason() {
        // A port just released: nothing listens on it.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let (d, _server) = pair();
        let why = d.dial(port).unwrap_err();
        assert!(
            why.starts_with(&format!(
                "failed to connect to localhost:{port} in the pod's network, IPv4: dial tcp4 \
                 127.0.0.1:{port}: "
            )),
            "{why}"
        );
        assert!(why.contains("refused"), "{why}");
        assert!(!why.contains('\n'));
    }

    #[test]
    fn a_dialer_that_is_gone_is_an_error_not_a_hang() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(theirs);
        let d = Dialer { ctl: ours };
        assert!(d.dial(80).is_err());
    }
}
