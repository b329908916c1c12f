//! The serving certificate through `certificates.k8s.io`, as the kubelet's `serverTLSBootstrap`:
//! a key made on the node for each request, a CertificateSigningRequest for the
//! `kubernetes.io/kubelet-serving` signer naming the node's addresses, the issued certificate served
//! as soon as it arrives, and a new request at 70-90 % of its lifetime (jittered, so nodes started
//! together do not renew together). Until one is issued the server keeps what it had (the
//! self-signed certificate at first).
//!
//! The request follows pkg/kubelet/certificate/kubelet.go and client-go's util/certificate: the
//! subject is `O=system:nodes, CN=system:node:NAME`; the SANs are the Node's addresses (host
//! names and DNS addresses as DNS names, IP addresses as IPs, sorted, each once); the usages are
//! exactly `digital signature, key encipherment, server auth` (what the signer accepts for this
//! signer in v1.20).

use super::subject::element;
use super::tls::{self, Current, Serving};
use crate::kube::client::{Client, ListParams};
use crate::kube::watch::Event;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::NodeAddress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const SIGNER: &str = "kubernetes.io/kubelet-serving";
pub const USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];
/// The issued certificate and its key, one root-only PEM file (the kubelet's name for it).
pub const CURRENT: &str = "kubelet-server-current.pem";
/// How long one request is waited for (client-go's `certificateWaitTimeout`).
const WAIT: Duration = Duration::from_secs(15 * 60);
/// Retries after a failed request: 2 s doubling up to 32 s, then every 32 s (client-go's backoff).
const FIRST_RETRY: Duration = Duration::from_secs(2);
const MAX_RETRY: Duration = Duration::from_secs(32);
/// How often a waiting rotator looks again at the node's addresses.
const RECHECK: Duration = Duration::from_secs(60);

/// What the certificate must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub common_name: String,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
}

/// The request's template for node `node` with `addresses` (the kubelet's
/// `addressesToHostnamesAndIPs`); None when there is no address to ask for.
pub fn template(node: &str, addresses: &[NodeAddress]) -> Option<Template> {
    let mut dns = std::collections::BTreeSet::new();
    let mut ips = std::collections::BTreeMap::new();
    for a in addresses.iter().filter(|a| !a.address.is_empty()) {
        let ip = a.address.parse::<IpAddr>().ok();
        match (a.type_.as_str(), ip) {
            ("Hostname", None) | ("ExternalDNS" | "InternalDNS", _) => {
                dns.insert(a.address.clone());
            }
            ("Hostname" | "ExternalIP" | "InternalIP", Some(ip)) => {
                // Sorted as strings, as the kubelet sorts them.
                ips.insert(ip.to_string(), ip);
            }
            _ => {}
        }
    }
    if dns.is_empty() && ips.is_empty() {
        return None;
    }
    Some(Template {
        common_name: format!("system:node:{node}"),
        dns_names: dns.into_iter().collect(),
        ips: ips.into_values().collect(),
    })
}

/// Why a certificate could not be had.
#[derive(Debug)]
pub enum CsrError {
    Generate(String),
    Api(String),
    Denied(String),
    Failed(String),
    Gone(String),
    Timeout(String),
    Certificate(String),
    Store(PathBuf, String),
}

impl std::fmt::Display for CsrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CsrError::Generate(e) => write!(f, "unable to generate a certificate request: {e}"),
            CsrError::Api(e) => write!(f, "certificate signing request: {e}"),
            CsrError::Denied(e) => write!(f, "certificate signing request is denied, {e}"),
            CsrError::Failed(e) => write!(f, "certificate signing request failed, {e}"),
            CsrError::Gone(n) => write!(f, "csr {n:?} was deleted or replaced"),
            CsrError::Timeout(n) => write!(f, "csr {n:?} was not issued in time"),
            CsrError::Certificate(e) => write!(f, "issued certificate: {e}"),
            CsrError::Store(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for CsrError {}

/// A new key and the PEM certificate request for `t`, signed with it.
pub fn request(t: &Template) -> Result<(rcgen::KeyPair, String), CsrError> {
    let gen_err = |e: rcgen::Error| CsrError::Generate(e.to_string());
    let key = rcgen::KeyPair::generate().map_err(gen_err)?;
    let csr = params(t)?.serialize_request(&key).map_err(gen_err)?;
    Ok((key, csr.pem().map_err(gen_err)?))
}

/// The subject and names of `t`.
fn params(t: &Template) -> Result<rcgen::CertificateParams, CsrError> {
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    // Go's pkix.Name puts O before CN.
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    dn.push(rcgen::DnType::CommonName, t.common_name.clone());
    params.distinguished_name = dn;
    for d in &t.dns_names {
        let name = d
            .clone()
            .try_into()
            .map_err(|e: rcgen::Error| CsrError::Generate(format!("{d:?}: {e}")))?;
        params.subject_alt_names.push(rcgen::SanType::DnsName(name));
    }
    params
        .subject_alt_names
        .extend(t.ips.iter().map(|ip| rcgen::SanType::IpAddress(*ip)));
    Ok(params)
}

/// The CertificateSigningRequest object for a PEM request, named by the API server (`csr-`).
pub fn object(csr_pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some("csr-".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: SIGNER.into(),
            usages: Some(USAGES.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    }
}

/// Where a request stands: `Ok(Some(pem))` once issued, `Ok(None)` while pending (approved or
/// not), an error once denied or failed, or when it is not the request made (`uid`).
pub fn issued(csr: &CertificateSigningRequest, uid: &str) -> Result<Option<Vec<u8>>, CsrError> {
    let name = csr.metadata.name.clone().unwrap_or_default();
    if csr.metadata.uid.as_deref() != Some(uid) {
        return Err(CsrError::Gone(name));
    }
    let Some(st) = &csr.status else {
        return Ok(None);
    };
    let mut approved = false;
    for c in st.conditions.iter().flatten() {
        let why = || {
            format!(
                "reason: {}, message: {}",
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default()
            )
        };
        match c.type_.as_str() {
            "Denied" => return Err(CsrError::Denied(why())),
            "Failed" => return Err(CsrError::Failed(why())),
            "Approved" => approved = true,
            _ => {}
        }
    }
    match &st.certificate {
        Some(c) if approved && !c.0.is_empty() => Ok(Some(c.0.clone())),
        _ => Ok(None),
    }
}

/// The certificate's validity (notBefore, notAfter).
pub fn validity(cert_der: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let mut rest = tbs_after_version(cert_der)?;
    // serial, signature algorithm, issuer; then validity.
    for _ in 0..3 {
        rest = element(rest)?.2;
    }
    let (0x30, v, _) = element(rest)? else {
        return None;
    };
    let (t1, nb, v) = element(v)?;
    let (t2, na, _) = element(v)?;
    Some((asn1_time(t1, nb)?, asn1_time(t2, na)?))
}

/// The certificate's DNS and IP subject alternative names.
pub fn alt_names(cert_der: &[u8]) -> Option<(Vec<String>, Vec<IpAddr>)> {
    let mut rest = tbs_after_version(cert_der)?;
    // serial, signature algorithm, issuer, validity, subject, public key.
    for _ in 0..6 {
        rest = element(rest)?.2;
    }
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    while !rest.is_empty() {
        let (tag, body, r) = element(rest)?;
        rest = r;
        if tag != 0xa3 {
            continue;
        }
        let (0x30, mut exts, _) = element(body)? else {
            return None;
        };
        while !exts.is_empty() {
            let (0x30, ext, r) = element(exts)? else {
                return None;
            };
            exts = r;
            let (0x06, oid, mut ext) = element(ext)? else {
                return None;
            };
            if oid != [0x55, 0x1d, 0x11] {
                continue;
            }
            if let Some((0x01, _, r)) = element(ext) {
                ext = r;
            }
            let (0x04, value, _) = element(ext)? else {
                return None;
            };
            let (0x30, mut names, _) = element(value)? else {
                return None;
            };
            while !names.is_empty() {
                let (tag, n, r) = element(names)?;
                names = r;
                match (tag, n.len()) {
                    (0x82, _) => dns.push(String::from_utf8(n.to_vec()).ok()?),
                    (0x87, 4) => ips.push(IpAddr::from(<[u8; 4]>::try_from(n).ok()?)),
                    (0x87, 16) => ips.push(IpAddr::from(<[u8; 16]>::try_from(n).ok()?)),
                    _ => {}
                }
            }
        }
    }
    Some((dns, ips))
}

fn tbs_after_version(cert_der: &[u8]) -> Option<&[u8]> {
    let (0x30, cert, _) = element(cert_der)? else {
        return None;
    };
    let (0x30, tbs, _) = element(cert)? else {
        return None;
    };
    let (tag, _, after) = element(tbs)?;
    Some(if tag == 0xa0 { after } else { tbs })
}

/// UTCTime (YYMMDDHHMMSSZ) or GeneralizedTime (YYYYMMDDHHMMSSZ).
fn asn1_time(tag: u8, b: &[u8]) -> Option<SystemTime> {
    let s = std::str::from_utf8(b).ok()?.strip_suffix('Z')?;
    let (year, s) = match (tag, s.len()) {
        (0x17, 12) => {
            let y: i16 = s[..2].parse().ok()?;
            (if y >= 50 { 1900 + y } else { 2000 + y }, &s[2..])
        }
        (0x18, 14) => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    let n = |i: usize| s.get(i..i + 2)?.parse::<i8>().ok();
    let dt =
        k8s_openapi::jiff::civil::DateTime::new(year, n(0)?, n(2)?, n(4)?, n(6)?, n(8)?, 0).ok()?;
    let ts = dt.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).ok()?;
    let secs = u64::try_from(ts.timestamp().as_second()).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// When to ask for the next certificate: 70-90 % into the validity, `jitter` in [0, 1) picking
/// where (client-go: `wait.Jitter(total, 0.2) - 0.3 * total`).
pub fn rotation_deadline(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let total = not_after
        .duration_since(not_before)
        .unwrap_or_default()
        .as_secs_f64();
    not_before + Duration::from_secs_f64(total * (0.7 + 0.2 * jitter.clamp(0.0, 1.0)))
}

/// Whether a certificate names everything `t` asks for (names it has beyond are fine, as in
/// client-go's `certSatisfiesTemplate`).
pub fn satisfies(cert_der: &[u8], t: &Template) -> bool {
    let Some((cn, orgs)) = super::subject::user_of(cert_der) else {
        return false;
    };
    let Some((dns, ips)) = alt_names(cert_der) else {
        return false;
    };
    cn == t.common_name
        && orgs.iter().any(|o| o == "system:nodes")
        && t.dns_names.iter().all(|d| dns.contains(d))
        && t.ips.iter().all(|i| ips.contains(i))
}

fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    // A per-process random seed, enough to spread nodes over the window.
    let h = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// The certificate last issued to this node, if it is still valid (a restart does not ask again).
pub fn load_current(dir: &Path) -> Option<Serving> {
    let path = dir.join(CURRENT);
    let s = tls::load_files(&path, &path).ok()?;
    let (_, not_after) = validity(s.chain.first()?.as_ref())?;
    (SystemTime::now() < not_after).then_some(s)
}

/// Asks for a certificate, waits for it, stores it (root-only) and returns it.
fn obtain(client: &Client, t: &Template, dir: &Path) -> Result<Serving, CsrError> {
    use crate::common::atomicfile;
    let (key, pem) = request(t)?;
    let api = |e: crate::kube::client::ApiError| CsrError::Api(e.to_string());
    let path = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let made: CertificateSigningRequest = client.create(path, &object(&pem)).map_err(api)?;
    let name = made.metadata.name.clone().unwrap_or_default();
    let uid = made.metadata.uid.clone().unwrap_or_default();
    eprintln!("podunit-sync: serving certificate requested: csr {name}");
    let until = std::time::Instant::now() + WAIT;
    let cert = 'wait: loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(CsrError::Timeout(name));
        }
        // A list first, then a watch from its version: nothing between the two is missed.
        let params = ListParams {
            field_selector: Some(format!("metadata.name={name}")),
            ..Default::default()
        };
        let list = client
            .list::<CertificateSigningRequest>(path, &params)
            .map_err(api)?;
        if list.items.is_empty() {
            return Err(CsrError::Gone(name));
        }
        for c in &list.items {
            if let Some(cert) = issued(c, &uid)? {
                break 'wait cert;
            }
        }
        let params = ListParams {
            resource_version: list.metadata.resource_version.clone(),
            timeout_seconds: Some(left.as_secs().clamp(1, 300) as u32),
            ..params
        };
        let Ok(events) = client.watch::<CertificateSigningRequest>(path, &params) else {
            std::thread::sleep(FIRST_RETRY);
            continue;
        };
        for ev in events {
            match ev {
                Ok(Event::Added(c) | Event::Modified(c)) => {
                    if let Some(cert) = issued(&c, &uid)? {
                        break 'wait cert;
                    }
                }
                Ok(Event::Deleted(_)) => return Err(CsrError::Gone(name)),
                Ok(Event::Bookmark(_)) => {}
                Err(_) => break,
            }
        }
    };
    let mut file = cert.clone();
    if !file.ends_with(b"\n") {
        file.push(b'\n');
    }
    file.extend_from_slice(key.serialize_pem().as_bytes());
    let store = dir.join(CURRENT);
    let store_err = |e: String| CsrError::Store(store.clone(), e);
    tls::make_private_dir(dir).map_err(|e| store_err(e.to_string()))?;
    atomicfile::write(&store, &file, atomicfile::Options::new(0o600))
        .map_err(|e| CsrError::Store(e.path, e.error.to_string()))?;
    let serving =
        tls::load_files(&store, &store).map_err(|e| CsrError::Certificate(e.to_string()))?;
    let leaf = serving
        .chain
        .first()
        .map(|c| c.as_ref())
        .unwrap_or_default();
    if !satisfies(leaf, t) || validity(leaf).is_none() {
        return Err(CsrError::Certificate(format!(
            "csr {name}: the certificate does not name {t:?}"
        )));
    }
    eprintln!("podunit-sync: serving certificate issued: csr {name}");
    Ok(serving)
}

/// Keeps the served certificate issued and fresh, for the life of the process. `addresses` gives
/// the Node's current addresses; `issued` is what [`load_current`] found.
pub fn spawn_rotator(
    client: Client,
    node: String,
    addresses: Box<dyn Fn() -> Vec<NodeAddress> + Send>,
    dir: PathBuf,
    current: Arc<Current>,
    issued: Option<Serving>,
) {
    let run = move || {
        let mut leaf: Option<Vec<u8>> = issued.and_then(|s| Some(s.chain.first()?.to_vec()));
        let mut j = jitter();
        let mut retry = FIRST_RETRY;
        loop {
            let Some(t) = template(&node, &addresses()) else {
                std::thread::sleep(RECHECK);
                continue;
            };
            let now = SystemTime::now();
            let deadline = leaf
                .as_deref()
                .filter(|l| satisfies(l, &t))
                .and_then(validity)
                .map(|(nb, na)| rotation_deadline(nb, na, j))
                .unwrap_or(now);
            if let Ok(wait) = deadline.duration_since(now)
                && !wait.is_zero()
            {
                std::thread::sleep(wait.min(RECHECK));
                continue;
            }
            match obtain(&client, &t, &dir) {
                Ok(s) => {
                    leaf = s.chain.first().map(|c| c.to_vec());
                    match current.replace(s) {
                        Ok(()) => {
                            j = jitter();
                            retry = FIRST_RETRY;
                        }
                        Err(e) => eprintln!("podunit-sync: serving certificate: {e}"),
                    }
                }
                Err(e) => {
                    eprintln!("podunit-sync: serving certificate: {e}; retrying in {retry:?}");
                    std::thread::sleep(retry);
                    retry = (retry * 2).min(MAX_RETRY);
                }
            }
        }
    };
    let _ = std::thread::Builder::new()
        .name("kubelet-cert".into())
        .spawn(run);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(t: &str, a: &str) -> NodeAddress {
        NodeAddress {
            type_: t.into(),
            address: a.into(),
        }
    }

    #[test]
    fn the_template_sorts_and_dedups_names_as_the_kubelet_does() {
        let t = template(
            "edge-1",
            &[
                addr("InternalIP", "192.0.2.9"),
                addr("InternalIP", "192.0.2.10"),
                addr("Hostname", "edge-1"),
                addr("ExternalIP", "192.0.2.9"),
                addr("ExternalIP", "not-an-ip"),
                addr("InternalDNS", "edge-1.lan"),
                addr("Hostname", "10.0.0.1"),
                addr("InternalIP", ""),
            ],
        )
        .unwrap();
        assert_eq!(t.common_name, "system:node:edge-1");
        assert_eq!(t.dns_names, vec!["edge-1", "edge-1.lan"]);
        let ips: Vec<String> = t.ips.iter().map(|i| i.to_string()).collect();
        // String order: "10.0.0.1" < "192.0.2.10" < "192.0.2.9".
        assert_eq!(ips, vec!["10.0.0.1", "192.0.2.10", "192.0.2.9"]);
        assert_eq!(template("edge-1", &[addr("InternalIP", "")]), None);
    }

    /// What a signer would issue for `t` (the signer copies the request's subject and names).
    fn issue(t: &Template, days: i64) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let mut p = params(t).unwrap();
        p.not_before = rcgen::date_time_ymd(2030, 1, 1);
        p.not_after = p.not_before + Duration::from_secs(days as u64 * 86400);
        p.signed_by(&key, &issuer).unwrap().der().to_vec()
    }

    #[test]
    fn the_request_names_the_node_and_an_issued_certificate_is_read_back() {
        let t = template(
            "edge-1",
            &[addr("InternalIP", "192.0.2.7"), addr("Hostname", "edge-1")],
        )
        .unwrap();
        let (_, pem) = request(&t).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
        let der = issue(&t, 10);
        assert_eq!(
            super::super::subject::user_of(&der),
            Some((
                "system:node:edge-1".to_string(),
                vec!["system:nodes".to_string()]
            ))
        );
        let (dns, ips) = alt_names(&der).unwrap();
        assert_eq!(dns, vec!["edge-1"]);
        assert_eq!(ips, vec!["192.0.2.7".parse::<IpAddr>().unwrap()]);
        assert!(satisfies(&der, &t));
        let mut more = t.clone();
        more.ips.push("192.0.2.8".parse().unwrap());
        assert!(!satisfies(&der, &more), "a new address asks again");
        let (nb, na) = validity(&der).unwrap();
        assert_eq!(
            nb.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_893_456_000
        );
        assert_eq!(na.duration_since(nb).unwrap(), Duration::from_secs(864_000));
    }

    #[test]
    fn both_time_forms_are_read() {
        let secs = |t: Option<SystemTime>| t.unwrap().duration_since(UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs(asn1_time(0x17, b"700101000001Z")), 1);
        assert_eq!(secs(asn1_time(0x17, b"491231235959Z")), 2_524_607_999);
        assert_eq!(secs(asn1_time(0x18, b"20500101000000Z")), 2_524_608_000);
        assert_eq!(asn1_time(0x17, b"7001010000Z"), None);
        assert_eq!(asn1_time(0x18, b"20500101000000"), None);
        assert_eq!(asn1_time(0x17, b"70013200000aZ"), None);
    }

    #[test]
    fn rotation_falls_between_70_and_90_percent() {
        let nb = UNIX_EPOCH + Duration::from_secs(1000);
        let na = nb + Duration::from_secs(100);
        let at = |j| rotation_deadline(nb, na, j).duration_since(nb).unwrap();
        assert_eq!(at(0.0), Duration::from_secs(70));
        assert_eq!(at(0.5), Duration::from_secs(80));
        assert!(at(0.999) < Duration::from_secs(90));
        assert_eq!(at(7.0), Duration::from_secs(90));
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }

    #[test]
    fn the_object_and_its_states() {
        let o = object("PEM");
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["metadata"]["generateName"], "csr-");
        assert_eq!(v["spec"]["signerName"], "kubernetes.io/kubelet-serving");
        assert_eq!(
            v["spec"]["usages"],
            serde_json::json!(["digital signature", "key encipherment", "server auth"])
        );
        assert_eq!(v["spec"]["request"], "UEVN");
        let with = |conds: serde_json::Value, cert: Option<&str>| {
            let mut v = serde_json::json!({"metadata": {"name": "csr-x", "uid": "u1"},
                "spec": {"request": "", "signerName": SIGNER},
                "status": {"conditions": conds}});
            if let Some(c) = cert {
                v["status"]["certificate"] = c.into();
            }
            serde_json::from_value::<CertificateSigningRequest>(v).unwrap()
        };
        let approved = serde_json::json!([{"type": "Approved", "status": "True"}]);
        assert_eq!(
            issued(&with(serde_json::json!([]), None), "u1").unwrap(),
            None
        );
        assert_eq!(issued(&with(approved.clone(), None), "u1").unwrap(), None);
        assert_eq!(
            issued(&with(approved.clone(), Some("Q0VSVA==")), "u1").unwrap(),
            Some(b"CERT".to_vec())
        );
        assert!(matches!(
            issued(&with(approved, Some("Q0VSVA==")), "other"),
            Err(CsrError::Gone(_))
        ));
        let denied = serde_json::json!([{"type": "Denied", "status": "True", "reason": "no"}]);
        assert!(matches!(
            issued(&with(denied, None), "u1"),
            Err(CsrError::Denied(_))
        ));
        let failed = serde_json::json!([{"type": "Failed", "status": "True"}]);
        assert!(matches!(
            issued(&with(failed, None), "u1"),
            Err(CsrError::Failed(_))
        ));
    }
}
