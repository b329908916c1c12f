//! `docker-registry serve` on 127.0.0.1 with a CA and certificate made here, htpasswd Basic auth,
//! optionally as a pull-through mirror of another instance. Pushes go over the distribution API.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const USER: &str = "tester";
pub const PASSWORD: &str = "s3cret-pass";

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA and a server certificate for 127.0.0.1 / localhost, made with openssl.
pub struct Certs {
    pub dir: PathBuf,
}

impl Certs {
    pub fn make(dir: &Path) -> Certs {
        std::fs::create_dir_all(dir).unwrap();
        let p = |n: &str| dir.join(n);
        run(Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=podunit test CA",
            ])
            .arg("-keyout")
            .arg(p("ca.key"))
            .arg("-out")
            .arg(p("ca.pem")));
        run(Command::new("openssl")
            .args([
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                "/CN=127.0.0.1",
            ])
            .arg("-keyout")
            .arg(p("server.key"))
            .arg("-out")
            .arg(p("server.csr")));
        std::fs::write(p("ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n").unwrap();
        run(Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
            .arg("-in")
            .arg(p("server.csr"))
            .arg("-CA")
            .arg(p("ca.pem"))
            .arg("-CAkey")
            .arg(p("ca.key"))
            .arg("-extfile")
            .arg(p("ext.cnf"))
            .arg("-out")
            .arg(p("server.pem")));
        Certs {
            dir: dir.to_path_buf(),
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
}

pub struct Registry {
    pub host: String,
    pub dir: PathBuf,
    child: Child,
    ca: PathBuf,
    /// The `Authorization` of pushes.
    push_auth: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Registry {
    /// A registry storing under `dir/data`, Basic auth with [`USER`]/[`PASSWORD`] when `auth`;
    /// with `upstream`, a pull-through mirror of it. (The 2.8 proxy cannot answer an upstream's
    /// Basic challenge, only token ones: its upstream here is open.)
    pub fn start(dir: &Path, certs: &Certs, upstream: Option<&Registry>, auth: bool) -> Registry {
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let auth = if auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .expect("htpasswd (apache2-utils)");
            assert!(out.status.success());
            std::fs::write(dir.join("htpasswd"), out.stdout).unwrap();
            format!(
                "auth:\n  htpasswd:\n    realm: podunit-test\n    path: {}\n",
                dir.join("htpasswd").display()
            )
        } else {
            String::new()
        };
        Self::serve(dir, certs, upstream, &auth, Self::basic())
    }

    /// A registry whose `auth: token` trusts `tokens` (a test double of the token service:
    /// the registry verifies its tokens itself). Pushes to `repos` carry a token for them.
    pub fn start_with_tokens(
        dir: &Path,
        certs: &Certs,
        tokens: &super::token::TokenService,
        repos: &[&str],
    ) -> Registry {
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let push = format!("Bearer {}", tokens.token(repos, &["pull", "push"]));
        Self::serve(dir, certs, None, &tokens.registry_auth(), push)
    }

    /// A registry over plain HTTP (for a node that lists it as insecure) whose `auth: token`
    /// challenge names `realm`, wherever that is; it trusts `tokens`' issuer.
    pub fn start_plain_with_realm(
        dir: &Path,
        certs: &Certs,
        tokens: &super::token::TokenService,
        realm: &str,
    ) -> Registry {
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let auth = tokens.registry_auth().replace(&tokens.realm, realm);
        Self::serve_with(dir, certs, None, &auth, String::new(), false)
    }

    fn serve(
        dir: &Path,
        certs: &Certs,
        upstream: Option<&Registry>,
        auth: &str,
        push_auth: String,
    ) -> Registry {
        Self::serve_with(dir, certs, upstream, auth, push_auth, true)
    }

    fn serve_with(
        dir: &Path,
        certs: &Certs,
        upstream: Option<&Registry>,
        auth: &str,
        push_auth: String,
        tls: bool,
    ) -> Registry {
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let proxy = match upstream {
            Some(u) => format!("proxy:\n  remoteurl: https://{}\n", u.host),
            None => String::new(),
        };
        let tls = if tls {
            format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                certs.dir.join("server.pem").display(),
                certs.dir.join("server.key").display()
            )
        } else {
            String::new()
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: {level}\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n  secret: podunit-test-secret\n{tls}{auth}{proxy}",
            level = if upstream.is_some() { "info" } else { "error" },
            data = dir.join("data").display(),
        );
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.join("registry.log")).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            // The mirror trusts the upstream's certificate through Go's usual variable.
            .env("SSL_CERT_FILE", certs.ca())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("docker-registry (Debian package docker-registry)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&host).is_err() {
            assert!(
                Instant::now() < deadline,
                "registry did not listen: {}",
                std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry {
            host,
            dir: dir.to_path_buf(),
            child,
            ca: certs.ca(),
            push_auth,
        }
    }

    /// A registry (TLS, Basic auth) under `dir` (`certs/`, `reg/`) with `images` pushed as
    /// (repository, tag, image). With `machine`, it listens in that machine's network, where
    /// podunit-sync in it pulls, and the machine trusts its CA at
    /// [`crate::support::registry::MACHINE_CA`].
    pub fn serving(
        dir: &Path,
        machine: Option<&crate::support::nspawn::Machine>,
        images: &[(&str, &str, &super::oci::Image)],
    ) -> (Registry, Certs) {
        let _ = std::fs::remove_dir_all(dir);
        let certs = Certs::make(&dir.join("certs"));
        let start = || {
            let reg = Registry::start(&dir.join("reg"), &certs, None, true);
            for (repo, tag, img) in images {
                reg.push(repo, tag, img);
            }
            reg
        };
        let reg = match machine {
            Some(m) => {
                let reg = crate::support::registry::in_machine_network(m, start);
                m.write(
                    crate::support::registry::MACHINE_CA,
                    &std::fs::read(certs.ca()).unwrap(),
                );
                reg
            }
            None => start(),
        };
        (reg, certs)
    }

    pub fn agent(&self) -> ureq::Agent {
        let pem = std::fs::read(&self.ca).unwrap();
        let roots: Vec<_> = ureq::tls::parse_pem(&pem)
            .filter_map(|i| match i {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .build();
        ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .build()
            .into()
    }

    fn basic() -> String {
        // Sent to open registries too, which ignore it.
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
        )
    }

    /// Uploads a blob (monolithic: POST then PUT with the digest).
    pub fn push_blob(&self, agent: &ureq::Agent, repo: &str, bytes: &[u8]) {
        let digest = super::oci::digest(bytes);
        let head = agent
            .head(format!("https://{}/v2/{repo}/blobs/{digest}", self.host))
            .header("Authorization", &self.push_auth)
            .call()
            .unwrap();
        if head.status() == 200 {
            return;
        }
        let resp = agent
            .post(format!("https://{}/v2/{repo}/blobs/uploads/", self.host))
            .header("Authorization", &self.push_auth)
            .send_empty()
            .unwrap();
        assert_eq!(resp.status(), 202, "blob upload start");
        let loc = resp
            .headers()
            .get("location")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let loc = if loc.starts_with('/') {
            format!("https://{}{loc}", self.host)
        } else {
            loc
        };
        let sep = if loc.contains('?') { '&' } else { '?' };
        let resp = agent
            .put(format!("{loc}{sep}digest={digest}"))
            .header("Authorization", &self.push_auth)
            .header("Content-Type", "application/octet-stream")
            .send(bytes)
            .unwrap();
        assert_eq!(resp.status(), 201, "blob upload");
    }

    pub fn push_manifest(
        &self,
        agent: &ureq::Agent,
        repo: &str,
        reference: &str,
        media_type: &str,
        body: &[u8],
    ) {
        let mut resp = agent
            .put(format!(
                "https://{}/v2/{repo}/manifests/{reference}",
                self.host
            ))
            .header("Authorization", &self.push_auth)
            .header("Content-Type", media_type)
            .send(body)
            .unwrap();
        let status = resp.status();
        assert_eq!(
            status,
            201,
            "manifest push: {}",
            resp.body_mut().read_to_string().unwrap_or_default()
        );
    }

    /// Pushes `img` as `repo:tag` (layers, config, manifest; children first for an index).
    pub fn push(&self, repo: &str, tag: &str, img: &super::oci::Image) {
        let agent = self.agent();
        for b in &img.blobs {
            self.push_blob(&agent, repo, b);
        }
        for (mt, body) in &img.children {
            self.push_manifest(&agent, repo, &super::oci::digest(body), mt, body);
        }
        self.push_manifest(&agent, repo, tag, &img.media_type, &img.manifest);
    }

    /// The file the registry keeps a blob in (to damage it).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir.join(format!(
            "data/docker/registry/v2/blobs/sha256/{}/{hex}/data",
            &hex[..2]
        ))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
