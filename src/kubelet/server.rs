//! Starting the server, accepting connections and serving each on its own thread.

use super::context::{State, Tls};
use super::{auth, certificate, http, routes, stats, tls};
use crate::common::config::KubeletServer;
use crate::common::paths::Paths;
use crate::kube::client::Client;
use k8s_openapi::api::core::v1::NodeAddress;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Connections served at once; more are closed at once (the API server retries).
const MAX_CONNECTIONS: usize = 128;
/// A connection that sends nothing (or takes a write) for this long is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the server could not start.
#[derive(Debug)]
pub enum StartError {
    Tls(tls::TlsError),
    Listen(SocketAddr, std::io::Error),
    Address(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Tls(e) => write!(f, "{e}"),
            StartError::Listen(a, e) => write!(f, "listen on {a}: {e}"),
            StartError::Address(a) => write!(f, "kubeletServer.address: not an IP address: {a:?}"),
        }
    }
}

impl std::error::Error for StartError {}

/// The Node's addresses, asked again whenever a certificate is made.
pub type Addresses = Box<dyn Fn() -> Vec<NodeAddress> + Send>;

/// Starts the server in the background for the life of the process; returns the port it
/// listens on. `kube_ca_pem` is the client CA unless the config names one; `addresses` are the
/// Node's, for the serving certificate.
pub fn start(
    client: Client,
    cfg: &KubeletServer,
    node_name: &str,
    paths: &Paths,
    kube_ca_pem: &[u8],
    addresses: Addresses,
) -> Result<u16, StartError> {
    let ca = match &cfg.client_ca_file {
        Some(p) => {
            let p = paths.host(&p.to_string_lossy());
            std::fs::read(&p).map_err(|e| StartError::Tls(tls::TlsError::File(p, e.to_string())))?
        }
        None => kube_ca_pem.to_vec(),
    };
    let verifier = tls::client_verifier(&ca).map_err(StartError::Tls)?;
    let dir = paths.host(tls::SERVING_DIR);
    let (serving, rotate) = match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
        // Configured files win over both the self-signed and the requested certificate.
        (Some(c), Some(k)) => (
            tls::load_files(
                &paths.host(&c.to_string_lossy()),
                &paths.host(&k.to_string_lossy()),
            ),
            false,
        ),
        (None, None) => {
            let issued = cfg
                .server_tls_bootstrap
                .then(|| certificate::load_current(&dir))
                .flatten();
            match issued {
                Some(s) => (Ok(s), true),
                None => (
                    tls::self_signed(&dir, &self_signed_names(&addresses())),
                    cfg.server_tls_bootstrap,
                ),
            }
        }
        _ => (
            Err(tls::TlsError::Config(
                "kubeletServer: tlsCertFile and tlsPrivateKeyFile go together".into(),
            )),
            false,
        ),
    };
    let current = tls::Current::new(serving.map_err(StartError::Tls)?).map_err(StartError::Tls)?;
    let tls_cfg = tls::server_config(current.clone(), verifier.clone()).map_err(StartError::Tls)?;
    let ip = cfg
        .address
        .parse()
        .map_err(|_| StartError::Address(cfg.address.clone()))?;
    let addr = SocketAddr::new(ip, cfg.port);
    let listener = TcpListener::bind(addr).map_err(|e| StartError::Listen(addr, e))?;
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(cfg.port);
    if rotate {
        let issued = certificate::load_current(&dir);
        if issued.is_none() {
            eprintln!(
                "podunit-sync: serving a self-signed certificate until the requested one is issued"
            );
        }
        certificate::spawn_rotator(
            client.clone(),
            node_name.to_string(),
            addresses,
            dir,
            current,
            issued,
        );
    }
    let state = Arc::new(State {
        node_name: node_name.to_string(),
        paths: paths.clone(),
        gate: auth::Gate::new(client, node_name.to_string(), verifier),
        rates: stats::CpuRates::default(),
    });
    std::thread::spawn(move || accept_loop(listener, tls_cfg, state));
    Ok(port)
}

/// A self-signed certificate's names: the host name first, then the addresses.
fn self_signed_names(addresses: &[NodeAddress]) -> Vec<String> {
    let mut names: Vec<String> = addresses
        .iter()
        .filter(|a| a.type_ == "Hostname")
        .map(|a| a.address.clone())
        .collect();
    names.extend(
        addresses
            .iter()
            .filter(|a| a.type_ != "Hostname")
            .map(|a| a.address.clone()),
    );
    names.dedup();
    names
}

fn accept_loop(listener: TcpListener, tls_cfg: Arc<rustls::ServerConfig>, state: Arc<State>) {
    let open = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(tcp) = conn else { continue };
        if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (cfg, state, done) = (tls_cfg.clone(), state.clone(), open.clone());
        let spawned = std::thread::Builder::new()
            .name("kubelet-conn".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                serve_connection(tcp, cfg, &state);
                // The last connection out: what the requests allocated (log pages, TLS and
                // stats buffers) goes back to the system rather than staying in the heap.
                if done.fetch_sub(1, Ordering::SeqCst) == 1 {
                    crate::localsync::heap::release_free();
                }
            });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn serve_connection(tcp: TcpStream, cfg: Arc<rustls::ServerConfig>, state: &State) {
    let _ = tcp.set_read_timeout(Some(IO_TIMEOUT));
    let _ = tcp.set_write_timeout(Some(IO_TIMEOUT));
    let _ = tcp.set_nodelay(true);
    let Ok(conn) = rustls::ServerConnection::new(cfg) else {
        return;
    };
    let mut stream: Tls = rustls::StreamOwned::new(conn, tcp);
    let mut buf = Vec::new();
    loop {
        let req = match http::read_request(&mut stream, &mut buf) {
            Ok(Some(r)) => r,
            Ok(None) | Err(http::ReadError::Io(_)) => return,
            Err(http::ReadError::Head(e)) => {
                let msg = format!("{e:?}\n");
                let _ = http::write_response(
                    &mut stream,
                    e.status(),
                    "text/plain; charset=utf-8",
                    msg.as_bytes(),
                    true,
                );
                return;
            }
        };
        let keep = routes::handle(state, &mut stream, &req);
        if !keep || req.close {
            let _ = std::io::Write::flush(&mut stream);
            stream.conn.send_close_notify();
            let _ = stream.conn.complete_io(&mut stream.sock);
            return;
        }
    }
}
