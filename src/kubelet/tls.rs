//! The server's TLS: the serving certificate (configured files, else a key made on the node and a
//! self-signed certificate for the node's names and addresses) and the client-certificate check.
//!
//! A client certificate is asked for but not required at the handshake, as the kubelet does: one
//! that does not chain to the client CA makes the request anonymous (401), it does not break the
//! connection, and a client with a bearer token needs none.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use std::fmt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Why the server's TLS could not be set up.
#[derive(Debug)]
pub enum TlsError {
    File(PathBuf, String),
    ClientCa(String),
    Generate(String),
    Config(String),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::File(p, e) => write!(f, "{}: {e}", p.display()),
            TlsError::ClientCa(e) => write!(f, "client CA: {e}"),
            TlsError::Generate(e) => write!(f, "serving certificate: {e}"),
            TlsError::Config(e) => write!(f, "TLS: {e}"),
        }
    }
}

impl std::error::Error for TlsError {}

/// Where the node keeps the key it made and its self-signed certificate.
pub const SERVING_DIR: &str = "/var/lib/podunit/kubelet";

/// The serving certificate chain and key.
pub struct Serving {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

/// The configured certificate and key files.
pub fn load_files(cert: &Path, key: &Path) -> Result<Serving, TlsError> {
    let err = |p: &Path| {
        let p = p.to_path_buf();
        move |e: rustls::pki_types::pem::Error| TlsError::File(p.clone(), e.to_string())
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(err(cert))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err(cert))?;
    if chain.is_empty() {
        return Err(TlsError::File(cert.into(), "no certificate in it".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(err(key))?;
    Ok(Serving { chain, key })
}

/// The node's own key (made once, root-only) and a self-signed certificate for `names` (host
/// names and IP addresses), made anew at every start so it always names the current addresses.
pub fn self_signed(dir: &Path, names: &[String]) -> Result<Serving, TlsError> {
    use crate::common::atomicfile;
    let gen_err = |e: rcgen::Error| TlsError::Generate(e.to_string());
    let io_err = |p: &Path| {
        let p = p.to_path_buf();
        move |e: std::io::Error| TlsError::File(p.clone(), e.to_string())
    };
    let written_err = |e: atomicfile::Error| TlsError::File(e.path, e.error.to_string());
    make_private_dir(dir).map_err(io_err(dir))?;
    let key_path = dir.join("kubelet.key");
    let key = match std::fs::read_to_string(&key_path) {
        Ok(pem) => rcgen::KeyPair::from_pem(&pem).map_err(gen_err)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let k = rcgen::KeyPair::generate().map_err(gen_err)?;
            let pem = k.serialize_pem();
            atomicfile::write(&key_path, pem.as_bytes(), atomicfile::Options::new(0o600))
                .map_err(written_err)?;
            k
        }
        Err(e) => return Err(io_err(&key_path)(e)),
    };
    // A key someone made readable is not used as it is: tighten it.
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))
        .map_err(io_err(&key_path))?;
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(gen_err)?;
    let mut dn = rcgen::DistinguishedName::new();
    let host = names.first().cloned().unwrap_or_default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    // The kubelet's self-signed certificate is named `<host>@<unix time>`.
    dn.push(rcgen::DnType::CommonName, format!("{host}@{now}"));
    params.distinguished_name = dn;
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    let year = 1970 + (now / 31_556_952) as i32;
    params.not_after = rcgen::date_time_ymd(year + 1, 12, 31);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.self_signed(&key).map_err(gen_err)?;
    let crt_path = dir.join("kubelet.crt");
    atomicfile::write(
        &crt_path,
        cert.pem().as_bytes(),
        atomicfile::Options::new(0o644),
    )
    .map_err(written_err)?;
    Ok(Serving {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| TlsError::Generate(e.into()))?,
    })
}

/// The node's certificate directory, root-only.
pub fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The certificate the server presents, replaced in place when a new one is issued: connections
/// made after that get the new one, those open keep theirs.
#[derive(Debug)]
pub struct Current(RwLock<Arc<CertifiedKey>>);

impl Current {
    pub fn new(serving: Serving) -> Result<Arc<Current>, TlsError> {
        Ok(Arc::new(Current(RwLock::new(certified(serving)?))))
    }

    pub fn replace(&self, serving: Serving) -> Result<(), TlsError> {
        let ck = certified(serving)?;
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = ck;
        Ok(())
    }

    /// The chain presented now.
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .cert
            .clone()
    }
}

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

fn certified(serving: Serving) -> Result<Arc<CertifiedKey>, TlsError> {
    // Also checks that the key is the certificate's.
    CertifiedKey::from_der(serving.chain, serving.key, &provider())
        .map(Arc::new)
        .map_err(|e| TlsError::Config(format!("certificate and key: {e}")))
}

/// The verifier of client certificates against the CA bundle `ca_pem`.
pub fn client_verifier(ca_pem: &[u8]) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        let c = c.map_err(|e| TlsError::ClientCa(e.to_string()))?;
        roots
            .add(c)
            .map_err(|e| TlsError::ClientCa(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsError::ClientCa("no certificate in it".into()));
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::ClientCa(e.to_string()))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Asks for a client certificate and checks that its holder has the key; whether it chains to the
/// CA is decided per request ([`super::auth::Gate::authenticate`]).
#[derive(Debug)]
struct DeferredChain(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for DeferredChain {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The rustls server configuration.
pub fn server_config(
    serving: Arc<Current>,
    client_ca: Arc<dyn ClientCertVerifier>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let cfg = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_client_cert_verifier(Arc::new(DeferredChain(client_ca)))
        .with_cert_resolver(serving);
    Ok(Arc::new(no_resumption(cfg)))
}

/// No session resumption. Its clients (the API server, metrics-server: Go's TLS client without
/// a session cache) never resume, and rustls's default stores two TLS 1.3 tickets for every full
/// handshake, each with the client's certificate chain, up to 256 of them kept for nothing.
fn no_resumption(mut cfg: ServerConfig) -> ServerConfig {
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    cfg.send_tls13_tickets = 0;
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_made_once_root_only_and_the_cert_names_the_node() {
        let dir = std::env::temp_dir().join(format!("podunit-kubelet-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let names = vec!["edge-1".to_string(), "192.0.2.7".to_string()];
        let a = self_signed(&dir, &names).unwrap();
        let key_mode = std::fs::metadata(dir.join("kubelet.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(key_mode & 0o777, 0o600);
        let b = self_signed(&dir, &names).unwrap();
        assert_eq!(a.key.secret_der(), b.key.secret_der(), "the key is kept");
        let loaded = load_files(&dir.join("kubelet.crt"), &dir.join("kubelet.key")).unwrap();
        assert_eq!(loaded.chain.len(), 1);
        // The certificate holds the IP address as an IP SAN (tag [7], 4 bytes).
        let der = loaded.chain[0].as_ref();
        assert!(der.windows(6).any(|w| w == [0x87, 4, 192, 0, 2, 7]));
        assert!(
            der.windows(6).any(|w| w == b"edge-1"),
            "the host name is in the certificate"
        );
        let v =
            client_verifier(std::fs::read(dir.join("kubelet.crt")).unwrap().as_slice()).unwrap();
        let cfg = server_config(Current::new(loaded).unwrap(), v).unwrap();
        // Nothing kept per handshake for a resumption that never comes.
        assert!(!cfg.session_storage.can_cache());
        assert_eq!(cfg.send_tls13_tickets, 0);
        assert!(matches!(
            client_verifier(b"nothing"),
            Err(TlsError::ClientCa(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
