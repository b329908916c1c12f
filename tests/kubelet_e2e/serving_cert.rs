//! `kubeletServer.serverTLSBootstrap`: the node asks the cluster for its serving certificate
//! (CertificateSigningRequest, `kubernetes.io/kubelet-serving`), serves the issued one once a
//! person approved it and kube-controller-manager's signer signed it, and asks again before it
//! expires. Until then it serves its self-signed certificate.

use super::support::controlplane::ControlPlane;
use super::support::nspawn::Machine;
use super::support::pods::SOON;
use super::{NODE, NODE_KUBECONFIG, in_machine_net, kubectl};
use base64::Engine;
use serde_json::Value;
use std::time::Duration;

/// The signer's certificate lifetime. It backdates by 5 minutes, so an issued certificate has
/// 3 minutes left and is renewed 0.6 to 2.2 minutes after it was issued (70-90 % of 8 minutes).
const SIGNING_DURATION: &str = "8m";
const RENEWAL: Duration = Duration::from_secs(240);

/// The node's serving CSRs, oldest first: (name, object).
fn node_csrs(cp: &ControlPlane) -> Vec<(String, Value)> {
    let Ok(out) = kubectl(cp, &["get", "csr", "-o", "json"]) else {
        return Vec::new();
    };
    let list: Value = serde_json::from_str(&out).unwrap();
    let mut v: Vec<(String, Value)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
                && c["spec"]["username"] == format!("system:node:{NODE}")
        })
        .map(|c| {
            (
                c["metadata"]["name"].as_str().unwrap().to_string(),
                c.clone(),
            )
        })
        .collect();
    v.sort_by(|a, b| {
        let t = |c: &Value| {
            c["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or("")
                .to_string()
        };
        t(&a.1).cmp(&t(&b.1)).then(a.0.cmp(&b.0))
    });
    v
}

/// `openssl` on the host with `args`, which must succeed; its stdout.
fn openssl(args: &[&str]) -> String {
    let out = crate::support::run_ok(std::process::Command::new("openssl").args(args));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The certificate the node's port presents now, written to a file on the host.
fn served(m: &Machine, name: &str) -> std::path::PathBuf {
    let out = in_machine_net(m, "openssl")
        .args(["s_client", "-connect", "127.0.0.1:10250", "-showcerts"])
        .output()
        .expect("run openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout);
    let begin = text
        .find("-----BEGIN CERTIFICATE-----")
        .unwrap_or_else(|| panic!("no certificate from the node:\n{text}"));
    let end = text[begin..].find("-----END CERTIFICATE-----").unwrap() + begin + 25;
    let path = m.dir().join(name);
    std::fs::write(&path, format!("{}\n", &text[begin..end])).unwrap();
    path
}

fn field(cert: &std::path::Path, what: &str) -> String {
    let what: Vec<&str> = what.split(' ').collect();
    openssl(
        &[
            &["x509", "-noout"][..],
            &what,
            &["-in", cert.to_str().unwrap()],
        ]
        .concat(),
    )
    .trim()
    .to_string()
}

/// Whether `cert` chains to the CA `ca`.
fn chains_to(ca: &std::path::Path, cert: &std::path::Path) -> bool {
    std::process::Command::new("openssl")
        .args([
            "verify",
            "-CAfile",
            ca.to_str().unwrap(),
            cert.to_str().unwrap(),
        ])
        .output()
        .unwrap()
        .status
        .success()
}

fn approve(cp: &ControlPlane, name: &str) {
    cp.kubectl_ok(&["certificate", "approve", name], None);
}

#[test]
fn the_serving_certificate_is_requested_served_and_renewed() {
    let m = Machine::boot("kubelet-cert");
    let mut cp = ControlPlane::start(&m, NODE);
    cp.start_controller_manager(SIGNING_DURATION);
    m.write(
        "/etc/podunit/config.yaml",
        format!(
            "nodeName: {NODE}\nkubeconfig: {NODE_KUBECONFIG}\nkubeletServer:\n  serverTLSBootstrap: true\n"
        )
        .as_bytes(),
    );
    super::support::pods::start_sync(&m);

    // The request: the node's own, for the kubelet-serving signer, with the kubelet's usages.
    let (name, csr) = m.wait_for("the node's serving CSR", SOON, || {
        node_csrs(&cp).into_iter().next()
    });
    assert_eq!(
        csr["spec"]["usages"],
        serde_json::json!(["digital signature", "key encipherment", "server auth"]),
        "{csr}"
    );
    assert!(
        csr["spec"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g == "system:nodes"),
        "{csr}"
    );
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["spec"]["request"].as_str().unwrap())
        .unwrap();
    let req = m.dir().join("request.csr");
    std::fs::write(&req, pem).unwrap();
    let subject = openssl(&["req", "-noout", "-subject", "-in", req.to_str().unwrap()]);
    assert_eq!(
        subject.trim(),
        format!("subject=O = system:nodes, CN = system:node:{NODE}")
    );

    // Until it is issued, the self-signed certificate.
    let before = served(&m, "before.crt");
    assert_eq!(
        field(&before, "-subject").replace("subject=", ""),
        field(&before, "-issuer").replace("issuer=", ""),
        "self-signed"
    );

    // The SANs the kubelet asks for: the Node's host name and addresses, DNS names then IPs.
    let node: Value =
        serde_json::from_str(&cp.kubectl_ok(&["get", "node", NODE, "-o", "json"], None)).unwrap();
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    for a in node["status"]["addresses"].as_array().unwrap() {
        let addr = a["address"].as_str().unwrap().to_string();
        if addr.parse::<std::net::IpAddr>().is_ok() {
            ips.push(format!("IP Address:{addr}"));
        } else {
            dns.push(format!("DNS:{addr}"));
        }
    }
    dns.sort();
    ips.sort();
    ips.dedup();
    let want_sans = [dns, ips].concat().join(", ");

    approve(&cp, &name);
    let ca = cp.ca_cert();
    let issued = m.wait_for("the issued certificate served", SOON, || {
        let c = served(&m, "issued.crt");
        chains_to(&ca, &c).then_some(c)
    });
    assert_eq!(
        field(&issued, "-subject"),
        format!("subject=O = system:nodes, CN = system:node:{NODE}")
    );
    let sans = field(&issued, "-ext subjectAltName");
    assert_eq!(
        sans.lines().nth(1).map(str::trim),
        Some(want_sans.as_str()),
        "{sans}"
    );
    let mode = m.sh_ok("stat -c %a /var/lib/podunit/kubelet/kubelet-server-current.pem");
    assert_eq!(mode.trim(), "600", "the key is root-only");
    let first_serial = field(&issued, "-serial");

    // Renewal: a second request before the first certificate expires, served once signed.
    let (second, _) = m.wait_for("a renewal CSR", RENEWAL, || {
        node_csrs(&cp).into_iter().find(|(n, _)| *n != name)
    });
    approve(&cp, &second);
    m.wait_for("the renewed certificate served", SOON, || {
        let c = served(&m, "renewed.crt");
        (chains_to(&ca, &c) && field(&c, "-serial") != first_serial).then_some(())
    });
    // The API server still reaches the node through it.
    cp.kubectl_ok(
        &[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{NODE}/proxy/healthz"),
        ],
        None,
    );
}
