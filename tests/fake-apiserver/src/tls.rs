//! The certificate authority, the serving certificate and node client certificates, kept in the
//! server's directory so that a restarted server is still trusted by clients that read `ca.crt`.

use crate::files::{write_private, write_public};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug)]
pub struct TlsError(pub String);

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

fn err(what: &str) -> impl Fn(String) -> TlsError + '_ {
    move |e| TlsError(format!("{what}: {e}"))
}

pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
    der: CertificateDer<'static>,
}

fn ca_params() -> Result<CertificateParams, TlsError> {
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(|e| err("CA")(e.to_string()))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "fake-apiserver-ca");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

impl Ca {
    /// Loads the CA from `dir/ca.crt` and `dir/ca.key`, or makes and writes a new one.
    pub fn load_or_create(dir: &Path) -> Result<Ca, TlsError> {
        let (crt, key) = (dir.join("ca.crt"), dir.join("ca.key"));
        let params = ca_params()?;
        if crt.exists() && key.exists() {
            let pem =
                std::fs::read_to_string(&crt).map_err(|e| err("reading ca.crt")(e.to_string()))?;
            let key_pem =
                std::fs::read_to_string(&key).map_err(|e| err("reading ca.key")(e.to_string()))?;
            let kp = KeyPair::from_pem(&key_pem).map_err(|e| err("ca.key")(e.to_string()))?;
            let der = CertificateDer::from_pem_slice(pem.as_bytes())
                .map_err(|e| err("ca.crt")(e.to_string()))?;
            // Same subject and key: what was signed before verifies against the file clients hold.
            return Ok(Ca {
                issuer: Issuer::new(params, kp),
                pem,
                der,
            });
        }
        let kp = KeyPair::generate().map_err(|e| err("CA key")(e.to_string()))?;
        let cert = params
            .self_signed(&kp)
            .map_err(|e| err("CA")(e.to_string()))?;
        write_private(&key, kp.serialize_pem().as_bytes())
            .map_err(|e| err("writing ca.key")(e.to_string()))?;
        write_public(&crt, cert.pem().as_bytes())
            .map_err(|e| err("writing ca.crt")(e.to_string()))?;
        Ok(Ca {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(params, kp),
        })
    }

    fn issue(
        &self,
        sans: Vec<String>,
        dn: DistinguishedName,
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<(rcgen::Certificate, KeyPair), TlsError> {
        let mut params =
            CertificateParams::new(sans).map_err(|e| err("certificate")(e.to_string()))?;
        params.distinguished_name = dn;
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let kp = KeyPair::generate().map_err(|e| err("key")(e.to_string()))?;
        let cert = params
            .signed_by(&kp, &self.issuer)
            .map_err(|e| err("certificate")(e.to_string()))?;
        Ok((cert, kp))
    }

    /// The client certificate of node `name` (CN `system:node:<name>`, O `system:nodes`, as the
    /// kubelet's), loaded from or written to `dir/node-<name>.crt` and `.key`. Returns its DER.
    pub fn node_client_cert(&self, dir: &Path, name: &str) -> Result<Vec<u8>, TlsError> {
        let crt = dir.join(format!("node-{name}.crt"));
        let key = dir.join(format!("node-{name}.key"));
        if crt.exists() && key.exists() {
            let der = CertificateDer::from_pem_file(&crt)
                .map_err(|e| err("node certificate")(e.to_string()))?;
            return Ok(der.to_vec());
        }
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("system:node:{name}"));
        dn.push(DnType::OrganizationName, "system:nodes");
        let (cert, kp) = self.issue(Vec::new(), dn, ExtendedKeyUsagePurpose::ClientAuth)?;
        write_private(&key, kp.serialize_pem().as_bytes())
            .map_err(|e| err("writing node key")(e.to_string()))?;
        write_public(&crt, cert.pem().as_bytes())
            .map_err(|e| err("writing node certificate")(e.to_string()))?;
        Ok(cert.der().to_vec())
    }

    /// A rustls server configuration: a fresh serving certificate for 127.0.0.1, ::1 and localhost,
    /// HTTP/1.1 only, client certificates requested (verified against this CA) but not required.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "fake-apiserver");
        let sans = vec!["127.0.0.1".into(), "::1".into(), "localhost".into()];
        let (cert, kp) = self.issue(sans, dn, ExtendedKeyUsagePurpose::ServerAuth)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.der.clone())
            .map_err(|e| err("CA")(e.to_string()))?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(|e| err("client verifier")(e.to_string()))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(kp.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| err("TLS")(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![cert.der().clone()], key)
            .map_err(|e| err("TLS")(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
