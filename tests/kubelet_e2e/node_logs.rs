//! `/logs/`: the node's /var/log through the API server's node proxy, and nothing outside it.

use super::support::controlplane::ControlPlane;
use super::support::nspawn::Machine;
use super::support::pods::SOON;
use super::{NODE, PORT, cert_args, in_machine_net, kubectl, start_sync};

#[test]
fn node_logs_are_served_and_nothing_outside_var_log() {
    let m = Machine::boot("kubelet-logs");
    let cp = ControlPlane::start(&m, NODE);
    start_sync(&m);
    m.write("/var/log/podunit-probe.log", b"first line\nsecond line\n");
    m.sh_ok("mkdir -p /var/log/probe-dir && ln -sfn /etc /var/log/escape && ln -sfn ../../etc/hostname /var/log/probe-dir/up");
    let raw = |p: &str| {
        kubectl(
            &cp,
            &[
                "get",
                "--raw",
                &format!("/api/v1/nodes/{NODE}/proxy/logs/{p}"),
            ],
        )
    };
    let listing = m.wait_for("the /logs/ listing", SOON, || raw("").ok());
    assert!(listing.starts_with("<pre>\n"), "{listing}");
    assert!(
        listing.contains("<a href=\"podunit-probe.log\">podunit-probe.log</a>\n"),
        "{listing}"
    );
    assert!(
        listing.contains("<a href=\"probe-dir/\">probe-dir/</a>\n"),
        "{listing}"
    );
    assert_eq!(
        raw("podunit-probe.log").unwrap(),
        "first line\nsecond line\n"
    );
    // Symlinks out of /var/log are refused, whatever they point at.
    let out = raw("escape/hostname").unwrap_err();
    assert!(out.contains("Forbidden") || out.contains("403"), "{out}");
    let out = raw("probe-dir/up").unwrap_err();
    assert!(out.contains("Forbidden") || out.contains("403"), "{out}");
    // A path that climbs, sent to the node as it is.
    let (acrt, akey) = cp.client_cert("logs-admin", "logs-admin", "system:masters");
    let admin = cert_args(&acrt, &akey);
    let out = in_machine_net(&m, "curl")
        .args([
            "-sk",
            "--path-as-is",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args(&admin)
        .arg(format!("https://127.0.0.1:{PORT}/logs/../../etc/hostname"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "400");
    // Only for those allowed nodes/log.
    let (ncrt, nkey) = cp.client_cert("nobody-logs", "nobody", "");
    let nobody = cert_args(&ncrt, &nkey);
    let out = in_machine_net(&m, "curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(&nobody)
        .arg(format!("https://127.0.0.1:{PORT}/logs/"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "403");
}
