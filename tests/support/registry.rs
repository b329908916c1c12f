//! Pulling from the tests' registry (tests/image/registry.rs) as a node configured for it does:
//! docker.io and registry.k8s.io mirrored by it, its CA trusted, its Basic credentials. One
//! setup for the image suites, the image benchmark and the cluster-mode pulls.
//! (`Registry::serving` in tests/image/registry.rs starts the registry, on the host or in a
//! machine's network through [`in_machine_network`].)

use podunit::common::registries::Registries;
use podunit::image::auth::Keyring;
use podunit::image::error::PullError;
use podunit::image::pull::Puller;
use podunit::image::registry::Client;
use podunit::image::{Reference, ResolvedImage, Store};
use std::path::Path;

/// docker.io and registry.k8s.io served by the registry at `host` (a plain mirror), `ca` trusted.
/// No store reserve: the tests' stores are on the host's disk, whose fullness is not theirs to
/// decide (tests/images_api.rs checks the reserve on a file system of its own).
pub fn settings(host: &str, ca: &Path) -> Registries {
    let mut s = Registries {
        mirrors: [
            ("docker.io".to_string(), vec![host.to_string()]),
            ("registry.k8s.io".to_string(), vec![host.to_string()]),
        ]
        .into(),
        ca: [(host.to_string(), ca.to_path_buf())].into(),
        ..Default::default()
    };
    s.limits.store_reserve_percent = 0;
    s
}

/// The same, as a node's `/etc/podunit/config.yaml` says it (`ca` as the node sees the file).
pub fn node_config(host: &str, ca: &str) -> String {
    format!(
        "registries:\n  mirrors:\n    docker.io: [\"{host}\"]\n    registry.k8s.io: [\"{host}\"]\n  ca:\n    \"{host}\": {ca}\n  limits:\n    storeReservePercent: 0\n"
    )
}

/// `{"auths": {host: {username, password}}}` for `host`.
pub fn config_json(host: &str, user: &str, password: &str) -> String {
    format!(r#"{{"auths":{{"{host}":{{"username":"{user}","password":"{password}"}}}}}}"#)
}

pub fn keyring(host: &str, user: &str, password: &str) -> Keyring {
    Keyring::parse_config_json(config_json(host, user, password).as_bytes()).unwrap()
}

/// A puller for this host's platform, any registry allowed, no progress display.
pub fn puller<'a>(store: &'a Store, client: &'a Client) -> Puller<'a> {
    Puller {
        store,
        client,
        platform: podunit::image::platform::host(),
        allowed_registries: None,
        progress: None,
    }
}

/// Pulls `reference` into `store` through `client`.
pub fn pull(store: &Store, client: &Client, reference: &str) -> Result<ResolvedImage, PullError> {
    puller(store, client).pull(&Reference::parse(reference).unwrap())
}

/// The OCI architecture of this host, for the images the tests build.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        a => panic!("test images are built for amd64 and arm64, not {a}"),
    }
}

/// Where a machine trusts the tests' registry CA (what [`node_config`] is given as `ca`).
pub const MACHINE_CA: &str = "/etc/podunit/registry-ca.pem";

/// Runs `f` on a thread that joined `m`'s network namespace: a registry process started there
/// inherits it and listens on the machine's loopback, where podunit-sync in the machine pulls.
pub fn in_machine_network<R: Send>(m: &super::nspawn::Machine, f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| {
            super::api::join_machine_network(m);
            f()
        })
        .join()
        .unwrap()
    })
}
