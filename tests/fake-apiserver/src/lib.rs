//! # fake-apiserver: a test double of the Kubernetes API server
//!
//! This is **not** a Kubernetes API server. It is a small, in-memory stand-in that implements only
//! the parts of the API that podunit's cluster mode uses, following the Kubernetes API conventions
//! (resourceVersion, watch events and bookmarks, 410 Gone, the status subresource, graceful
//! deletion with preconditions, Status errors, the Node authorizer and the admission plugins that
//! shape what a kubelet sees). Its purpose is to test podunit against the real API's semantics
//! without a cluster. See README.md beside this crate for what it does and does not implement.
//!
//! ```no_run
//! let server = fake_apiserver::FakeApiServer::start(
//!     fake_apiserver::Config::new("/tmp/fake-api").node("node-1"),
//! ).unwrap();
//! println!("{} {}", server.url(), server.node_kubeconfig("node-1").display());
//! ```

pub mod admission;
pub mod api;
pub mod audit;
pub mod auth;
pub mod authz;
pub mod files;
pub mod http;
pub mod patch;
pub mod refs;
pub mod resources;
pub mod router;
pub mod selector;
pub mod server;
pub mod status;
pub mod store;
pub mod tls;
pub mod util;

use api::Api;
pub use api::Fault;
use auth::{Auth, User};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How to start the server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where `ca.crt`, the kubeconfigs, the credentials and (by default) nothing else go. Created if
    /// missing; reused on restart (same CA, same tokens).
    pub dir: PathBuf,
    /// 0: an ephemeral port, or the one recorded in `dir/url` by a previous run.
    pub port: u16,
    /// Nodes to make credentials for (token and client certificate).
    pub nodes: Vec<String>,
    /// Persist the store here after every change and load it at start.
    pub state_file: Option<PathBuf>,
    /// How many changes are kept for resuming watches; older resourceVersions get 410 Gone.
    pub history_window: usize,
    /// Quiet time after which a watch that allows bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Watch duration when the client gives no timeoutSeconds.
    pub watch_timeout: Duration,
    /// Append a JSON line per request here (method, path, query, user, code, time).
    pub access_log: Option<PathBuf>,
    /// The shortest `expirationSeconds` a TokenRequest may ask for. The real API server's minimum
    /// is 600 (the default here); lowering it is a test-only knob, so that token refresh at 80 % of
    /// the lifetime can be watched without waiting minutes. Requests below it still get `422`.
    pub min_token_expiration_seconds: i64,
}

impl Config {
    pub fn new(dir: impl Into<PathBuf>) -> Config {
        Config {
            dir: dir.into(),
            port: 0,
            nodes: Vec::new(),
            state_file: None,
            history_window: 1000,
            bookmark_interval: Duration::from_secs(60),
            watch_timeout: Duration::from_secs(1800),
            access_log: None,
            min_token_expiration_seconds: 600,
        }
    }

    pub fn node(mut self, name: &str) -> Config {
        self.nodes.push(name.to_string());
        self
    }

    pub fn history_window(mut self, n: usize) -> Config {
        self.history_window = n;
        self
    }

    pub fn bookmark_interval(mut self, d: Duration) -> Config {
        self.bookmark_interval = d;
        self
    }

    /// Test-only: accept TokenRequests down to `seconds` (the real minimum is 600).
    pub fn min_token_expiration_seconds(mut self, seconds: i64) -> Config {
        self.min_token_expiration_seconds = seconds;
        self
    }

    pub fn state_file(mut self, p: impl Into<PathBuf>) -> Config {
        self.state_file = Some(p.into());
        self
    }
}

#[derive(Debug)]
pub enum StartError {
    Io(String, std::io::Error),
    Tls(tls::TlsError),
    State(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Io(what, e) => write!(f, "{what}: {e}"),
            StartError::Tls(e) => write!(f, "TLS setup: {e}"),
            StartError::State(e) => write!(f, "state: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> StartError + '_ {
    move |e| StartError::Io(what.to_string(), e)
}

/// A running (or stopped) test API server. Dropping it stops the listener.
pub struct FakeApiServer {
    config: Config,
    api: Arc<Api>,
    ca: tls::Ca,
    listener: Option<server::Listener>,
    addr: SocketAddr,
}

impl FakeApiServer {
    pub fn start(config: Config) -> Result<FakeApiServer, StartError> {
        std::fs::create_dir_all(&config.dir).map_err(io("creating the directory"))?;
        let ca = tls::Ca::load_or_create(&config.dir).map_err(StartError::Tls)?;
        let auth = Auth::load_or_create(&config.dir).map_err(io("auth.json"))?;
        let store = store::Store::open(config.history_window, config.state_file.clone())
            .map_err(StartError::State)?;
        let mut api = Api::new(store, auth, ca.pem.clone());
        if let Some(log) = &config.access_log {
            api.audit
                .log_to(log)
                .map_err(io("opening the access log"))?;
        }
        api.bookmark_interval = config.bookmark_interval;
        api.watch_timeout = config.watch_timeout;
        api.min_token_expiration_seconds = config.min_token_expiration_seconds;
        let api = Arc::new(api);
        api.bootstrap();
        let port = match config.port {
            0 => previous_port(&config.dir).unwrap_or(0),
            p => p,
        };
        let mut s = FakeApiServer {
            addr: server::default_addr(port),
            config,
            api,
            ca,
            listener: None,
        };
        s.listen()?;
        for node in s.config.nodes.clone() {
            s.add_node(&node)?;
        }
        s.write_admin_files()?;
        Ok(s)
    }

    fn listen(&mut self) -> Result<(), StartError> {
        let tls = self.ca.server_config().map_err(StartError::Tls)?;
        let l = match server::Listener::start(self.api.clone(), tls.clone(), self.addr) {
            Ok(l) => l,
            // The remembered port is taken: any port will do for a fresh start.
            Err(_) if self.listener.is_none() && self.config.port == 0 && self.addr.port() != 0 => {
                server::Listener::start(self.api.clone(), tls, server::default_addr(0))
                    .map_err(io("listening"))?
            }
            Err(e) => return Err(io("listening")(e)),
        };
        self.addr = l.addr;
        self.listener = Some(l);
        files::write_public(
            &self.config.dir.join("url"),
            format!("{}\n", self.url()).as_bytes(),
        )
        .map_err(io("writing url"))
    }

    /// `https://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca.pem
    }

    pub fn ca_path(&self) -> PathBuf {
        self.config.dir.join("ca.crt")
    }

    /// The bearer token of `system:masters` user `kubernetes-admin`: for tests acting as kubectl.
    pub fn admin_token(&self) -> String {
        self.api.auth.admin_token()
    }

    /// Credentials for node `name`: token, client certificate, and two kubeconfigs
    /// (`node-<name>.kubeconfig` with the token, `node-<name>-cert.kubeconfig` with the certificate).
    pub fn add_node(&self, name: &str) -> Result<String, StartError> {
        let token = self.api.auth.node_token(name).map_err(io("auth.json"))?;
        let der = self
            .ca
            .node_client_cert(&self.config.dir, name)
            .map_err(StartError::Tls)?;
        self.api.auth.register_cert(&der, User::node(name));
        let dir = &self.config.dir;
        let user = format!("system:node:{name}");
        let with_token = kubeconfig(
            &self.url(),
            &self.ca_path(),
            &user,
            &format!("    token: {token}\n"),
        );
        files::write_private(
            &dir.join(format!("node-{name}.kubeconfig")),
            with_token.as_bytes(),
        )
        .map_err(io("writing a kubeconfig"))?;
        let certs = format!(
            "    client-certificate: {}\n    client-key: {}\n",
            dir.join(format!("node-{name}.crt")).display(),
            dir.join(format!("node-{name}.key")).display()
        );
        let with_cert = kubeconfig(&self.url(), &self.ca_path(), &user, &certs);
        files::write_private(
            &dir.join(format!("node-{name}-cert.kubeconfig")),
            with_cert.as_bytes(),
        )
        .map_err(io("writing a kubeconfig"))?;
        files::write_private(&dir.join(format!("node-{name}.token")), token.as_bytes())
            .map_err(io("writing a token"))?;
        // Self-contained: usable where the directory is not (inside a container).
        let b64 = |file: String| -> Result<String, StartError> {
            use base64::Engine;
            let pem = std::fs::read(dir.join(file)).map_err(io("reading a node certificate"))?;
            Ok(base64::engine::general_purpose::STANDARD.encode(pem))
        };
        let inline = kubeconfig_inline(
            &self.url(),
            &base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &self.ca.pem),
            &user,
            &format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(format!("node-{name}.crt"))?,
                b64(format!("node-{name}.key"))?
            ),
        );
        files::write_private(
            &dir.join(format!("node-{name}-inline.kubeconfig")),
            inline.as_bytes(),
        )
        .map_err(io("writing a kubeconfig"))?;
        Ok(token)
    }

    fn write_admin_files(&self) -> Result<(), StartError> {
        let token = self.admin_token();
        let kc = kubeconfig(
            &self.url(),
            &self.ca_path(),
            "kubernetes-admin",
            &format!("    token: {token}\n"),
        );
        files::write_private(&self.config.dir.join("admin.kubeconfig"), kc.as_bytes())
            .map_err(io("writing admin.kubeconfig"))?;
        files::write_private(&self.config.dir.join("admin.token"), token.as_bytes())
            .map_err(io("writing admin.token"))
    }

    pub fn node_token(&self, name: &str) -> Result<String, StartError> {
        self.api.auth.node_token(name).map_err(io("auth.json"))
    }

    pub fn node_kubeconfig(&self, name: &str) -> PathBuf {
        self.config.dir.join(format!("node-{name}.kubeconfig"))
    }

    pub fn node_cert_kubeconfig(&self, name: &str) -> PathBuf {
        self.config.dir.join(format!("node-{name}-cert.kubeconfig"))
    }

    /// A kubeconfig with everything inline (certificate-authority-data, client-certificate-data,
    /// client-key-data): copy it anywhere, e.g. into a container.
    pub fn node_inline_kubeconfig(&self, name: &str) -> PathBuf {
        self.config
            .dir
            .join(format!("node-{name}-inline.kubeconfig"))
    }

    /// Stops the listener and closes every connection; the store is kept.
    pub fn stop(&mut self) {
        if let Some(mut l) = self.listener.take() {
            l.stop();
        }
    }

    /// Listens again on the same address with the same store, CA and credentials.
    pub fn restart(&mut self) -> Result<(), StartError> {
        self.stop();
        self.listen()
    }

    pub fn is_running(&self) -> bool {
        self.listener.is_some()
    }

    /// Drops the watch history, as an etcd compaction does: every older resourceVersion now gets
    /// 410 Gone from a watch.
    pub fn compact(&self) {
        self.api.store.write(|inner| inner.compact());
    }

    /// Every request served so far (the last 100 000), oldest first.
    pub fn requests(&self) -> Vec<audit::Record> {
        self.api.audit.records()
    }

    /// Forgets the requests recorded so far.
    pub fn clear_requests(&self) {
        self.api.audit.clear();
    }

    /// Answer every request with this failure (None: serve normally again). Open watches go on.
    pub fn set_fault(&self, fault: Option<api::Fault>) {
        *self.api.fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
    }

    /// The store's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.api.store.lock().rv()
    }
}

fn previous_port(dir: &Path) -> Option<u16> {
    let url = std::fs::read_to_string(dir.join("url")).ok()?;
    url.trim().rsplit(':').next()?.parse().ok()
}

fn kubeconfig(server: &str, ca: &Path, user: &str, credentials: &str) -> String {
    kubeconfig_with(
        server,
        &format!("certificate-authority: {}", ca.display()),
        user,
        credentials,
    )
}

fn kubeconfig_inline(server: &str, ca_b64: &str, user: &str, credentials: &str) -> String {
    kubeconfig_with(
        server,
        &format!("certificate-authority-data: {ca_b64}"),
        user,
        credentials,
    )
}

fn kubeconfig_with(server: &str, ca_line: &str, user: &str, credentials: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake-apiserver\n  cluster:\n    server: {server}\n    {ca_line}\nusers:\n- name: {user:?}\n  user:\n{credentials}contexts:\n- name: fake-apiserver\n  context:\n    cluster: fake-apiserver\n    user: {user:?}\ncurrent-context: fake-apiserver\n"
    )
}
