//! Pulling from a real registry (Debian's docker-registry, the CNCF distribution registry) on
//! loopback with TLS and htpasswd Basic auth, and a second instance as a pull-through mirror.
//! Images are built here (busybox from Debian's busybox-static) and pushed under the names public
//! manifests use. Needs root (layers keep owners and device nodes), docker-registry, htpasswd
//! (apache2-utils) and openssl: `make test` installs them (tests/setup.sh).

mod image;
mod support;

use image::hostile::{self, Hostile, Reply};
use image::oci::{self, Comp, Layer, TarBuilder};
use image::registry::{Certs, PASSWORD, Registry, USER};
use podunit::common::registries::Registries;
use podunit::image::auth::Keyring;
use podunit::image::error::PullErrorKind;
use podunit::image::pull::{Progress, Puller};
use podunit::image::registry::Client;
use podunit::image::{Reference, Store};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::registry::{self, host_arch};

struct Env {
    dir: PathBuf,
    certs: Certs,
    reg: Registry,
}

impl Env {
    fn new(name: &str) -> Env {
        let dir = std::env::temp_dir().join(format!("podunit-image-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let certs = Certs::make(&dir.join("certs"));
        let reg = Registry::start(&dir.join("reg"), &certs, None, true);
        Env { dir, certs, reg }
    }

    fn store(&self) -> Store {
        Store::open(self.dir.join("store"))
    }

    /// docker.io and registry.k8s.io served by the local registry (a plain mirror), its CA trusted.
    fn settings(&self) -> Registries {
        registry::settings(&self.reg.host, &self.certs.ca())
    }

    fn keyring(&self, password: &str) -> Keyring {
        registry::keyring(&self.reg.host, USER, password)
    }

    fn pull_with(
        &self,
        store: &Store,
        client: &Client,
        r: &str,
    ) -> Result<podunit::image::ResolvedImage, podunit::image::error::PullError> {
        registry::pull(store, client, r)
    }

    fn pull(
        &self,
        r: &str,
    ) -> Result<podunit::image::ResolvedImage, podunit::image::error::PullError> {
        let client = Client::new(self.settings(), self.keyring(PASSWORD));
        self.pull_with(&self.store(), &client, r)
    }

    /// Nothing of a failed pull is left that a reader would trust.
    fn assert_nothing_kept(&self, r: &str) {
        let s = self.store();
        assert_eq!(s.lookup(&Reference::parse(r).unwrap()).unwrap(), None);
        assert_eq!(count(&s.root().join("layers/sha256")), 0, "no layer kept");
        assert_eq!(count(&s.root().join("tmp")), 0, "no temporary files left");
        assert_eq!(s.list().0.len(), 0, "no record");
    }
}

/// `len` bytes that do not compress.
fn noise(len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for b in out.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    out
}

/// A one-layer image of `tar`, gzip.
fn one_layer(tar: Vec<u8>) -> oci::Image {
    layers(vec![tar])
}

fn layers(tars: Vec<Vec<u8>>) -> oci::Image {
    let l: Vec<Layer> = tars
        .into_iter()
        .map(|tar| Layer {
            tar,
            comp: Comp::Gzip,
            declared_size: None,
        })
        .collect();
    oci::image(host_arch(), &l, serde_json::json!({}))
}

/// A small file system for a store, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "tmpfs mount");
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn busybox() -> oci::Image {
    oci::image(
        "amd64",
        &[Layer {
            tar: oci::busybox_layer(),
            comp: Comp::Gzip,
            declared_size: None,
        }],
        serde_json::json!({"Cmd": ["sh"], "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}),
    )
}

#[test]
fn pulls_public_names_over_tls_with_basic_auth() {
    let env = Env::new("basic");
    let img = busybox();
    env.reg.push("library/busybox", "1.28", &img);
    env.reg.push("busybox", "latest", &img);

    let got = env.pull("busybox:1.28").unwrap();
    assert_eq!(got.reference.to_string(), "docker.io/library/busybox:1.28");
    assert_eq!(
        got.image_id(),
        format!("docker.io/library/busybox@{}", img.digest())
    );
    assert_eq!(got.config.config.cmd, Some(vec!["sh".to_string()]));
    assert_eq!(got.layers.len(), 1);
    let bb = got.layers[0].join("bin/busybox");
    assert_eq!(
        std::fs::read(&bb).unwrap(),
        std::fs::read("/bin/busybox").unwrap()
    );
    assert_eq!(
        std::fs::metadata(&bb).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert_eq!(
        std::fs::read_link(got.layers[0].join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    // The busybox in the layer runs.
    let out = std::process::Command::new(&bb)
        .args(["echo", "from the layer"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from the layer\n");

    // Read back without the network; by name and by the digest the pod records.
    let s = env.store();
    assert_eq!(s.lookup(&got.reference).unwrap().as_ref(), Some(&got));
    let pinned = Reference::parse(&got.image_id()).unwrap();
    assert_eq!(s.lookup(&pinned).unwrap().unwrap().layers, got.layers);

    // A second name with the same layer shares its directory; nothing is downloaded again.
    let events = std::sync::Mutex::new(Vec::new());
    let report = |p: &Progress| events.lock().unwrap().push(p.clone());
    let client = Client::new(env.settings(), env.keyring(PASSWORD));
    let p = Puller {
        progress: Some(&report),
        ..registry::puller(&s, &client)
    };
    let k8s = p
        .pull(&Reference::parse("registry.k8s.io/busybox").unwrap())
        .unwrap();
    assert_eq!(k8s.layers, got.layers);
    assert!(
        events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, Progress::LayerDone { cached: true, .. }))
    );
    assert_eq!(count(&s.root().join("layers/sha256")), 1);

    // The registry itself, by its own name, with its CA.
    let direct = env
        .pull(&format!("{}/library/busybox:1.28", env.reg.host))
        .unwrap();
    assert_eq!(direct.digest, got.digest);

    // The policy's registries.
    let only = vec!["quay.io".to_string()];
    let p = Puller {
        allowed_registries: Some(&only),
        ..registry::puller(&s, &client)
    };
    let e = p
        .pull(&Reference::parse("busybox:1.28").unwrap())
        .unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::NotAllowed { .. }), "{e}");
}

/// `auth: token` on the real registry, with a test double of the token service as its realm
/// (tests/image/token.rs): the registry answers `WWW-Authenticate: Bearer realm=…,service=…,
/// scope=…`, podunit's client takes its Basic credentials to the realm, gets a JWT, and pulls
/// with it; the registry verifies the token's signature and access claims itself.
#[test]
fn bearer_token_challenges_are_followed_to_the_realm() {
    use image::token::{self, SERVICE, TokenService};
    let dir = std::env::temp_dir().join(format!("podunit-image-{}-token", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let certs = Certs::make(&dir.join("certs"));
    let tokens = TokenService::start(&dir.join("token"), &certs);
    let reg = Registry::start_with_tokens(&dir.join("reg"), &certs, &tokens, &["library/busybox"]);
    let env = Env { dir, certs, reg };
    let img = busybox();
    env.reg.push("library/busybox", "1.28", &img);

    let got = env.pull("busybox:1.28").unwrap();
    assert_eq!(
        got.image_id(),
        format!("docker.io/library/busybox@{}", img.digest())
    );
    let asked = tokens.asked.lock().unwrap().clone();
    let to_realm: Vec<String> = asked.iter().map(|a| token::unescape(&a.target)).collect();
    assert!(
        asked.iter().zip(&to_realm).any(|(a, t)| a.granted
            && t.starts_with("/token?")
            && t.contains("scope=repository:library/busybox:pull")
            && t.contains(&format!("service={SERVICE}"))),
        "a token was asked for with the challenge's scope and service: {to_realm:?}"
    );

    // A wrong password: the token service refuses it, so does the pull, and nothing is kept.
    let fresh = Store::open(env.dir.join("store-wrong"));
    let wrong = Client::new(env.settings(), env.keyring("wrong"));
    let e = env.pull_with(&fresh, &wrong, "busybox:1.28").unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::Unauthorized(_)), "{e}");
    assert!(e.to_string().contains("token request to"), "{e}");
    assert!(
        tokens
            .asked
            .lock()
            .unwrap()
            .iter()
            .any(|a| a.with_credentials && !a.granted),
        "the wrong password went to the realm"
    );
    assert_eq!(
        fresh
            .lookup(&Reference::parse("busybox:1.28").unwrap())
            .unwrap(),
        None
    );
    let anon = Client::new(env.settings(), Keyring::default());
    let e = env.pull_with(&fresh, &anon, "busybox:1.28").unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::Unauthorized(_)), "{e}");

    // The registry checks the tokens: one signed by a key it does not trust is refused.
    let other = TokenService::start(&env.dir.join("other"), &env.certs);
    let forged = other.token(&["library/busybox"], &["pull"]);
    let resp = env
        .reg
        .agent()
        .get(format!(
            "https://{}/v2/library/busybox/manifests/1.28",
            env.reg.host
        ))
        .header("Authorization", format!("Bearer {forged}"))
        .header("Accept", "application/vnd.oci.image.manifest.v1+json")
        .call()
        .unwrap();
    assert_eq!(resp.status(), 401, "a token from another issuer key");
    let _ = std::fs::remove_dir_all(&env.dir);
}

#[test]
fn credentials_are_required_and_checked() {
    let env = Env::new("auth");
    env.reg.push("library/busybox", "1.28", &busybox());
    let store = env.store();
    let anon = Client::new(env.settings(), Keyring::default());
    let e = env.pull_with(&store, &anon, "busybox:1.28").unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::Unauthorized(_)), "{e}");
    assert!(
        e.to_string().contains("docker.io/library/busybox:1.28"),
        "{e}"
    );
    let wrong = Client::new(env.settings(), env.keyring("wrong"));
    let e = env.pull_with(&store, &wrong, "busybox:1.28").unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::Unauthorized(_)), "{e}");
    assert!(
        e.to_string().contains("UNAUTHORIZED"),
        "the registry's own message: {e}"
    );
    env.assert_nothing_kept("busybox:1.28");

    // The same credentials from an imagePullSecret (dockerconfigjson) and from the node file.
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let json = format!(
        r#"{{"auths":{{"https://{}/v2/":{{"auth":"{auth}"}}}}}}"#,
        env.reg.host
    );
    let data = [(".dockerconfigjson".to_string(), json.clone().into_bytes())].into();
    let secret = Keyring::from_secret("kubernetes.io/dockerconfigjson", &data).unwrap();
    env.pull_with(&store, &Client::new(env.settings(), secret), "busybox:1.28")
        .unwrap();
    let node = env.dir.join("auth.json");
    std::fs::write(&node, &json).unwrap();
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o600)).unwrap();
    let k = Keyring::load_node_file(&node).unwrap();
    env.pull_with(
        &Store::open(env.dir.join("store2")),
        &Client::new(env.settings(), k),
        "busybox:1.28",
    )
    .unwrap();
}

#[test]
fn pulls_through_a_mirror() {
    let env = Env::new("mirror");
    let upstream = Registry::start(&env.dir.join("upstream"), &env.certs, None, false);
    upstream.push("library/busybox", "1.28", &busybox());
    let mirror = Registry::start(&env.dir.join("mirror"), &env.certs, Some(&upstream), false);
    // A dead mirror first: skipped, as containerd does.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let mut settings = Registries {
        mirrors: [("docker.io".to_string(), vec![dead, mirror.host.clone()])].into(),
        ca: [(mirror.host.clone(), env.certs.ca())].into(),
        ..Default::default()
    };
    settings.limits.store_reserve_percent = 0;
    let client = Client::new(settings, Keyring::default());
    let got = env
        .pull_with(&env.store(), &client, "docker.io/library/busybox:1.28")
        .unwrap();
    assert!(got.layers[0].join("bin/busybox").is_file());
    assert_eq!(got.digest.to_string(), busybox().digest());
}

#[test]
fn layers_with_whiteouts_in_every_compression_are_shared() {
    let env = Env::new("layers");
    let base = TarBuilder::new()
        .dir("etc/")
        .file("etc/a", b"a", 0o644)
        .file("etc/b", b"b", 0o600)
        .dir("var/")
        .dir("var/cache/")
        .file("var/cache/old", b"old", 0o644)
        .finish();
    let top = TarBuilder::new()
        .file("etc/.wh.a", b"", 0o644)
        .dir("var/cache/")
        .file("var/cache/.wh..wh..opq", b"", 0o644)
        .file("var/cache/new", b"new", 0o644)
        .finish();
    let extra = TarBuilder::new()
        .file("opt/zstd", b"zstd layer", 0o644)
        .finish();
    let layers = |comp_top| {
        vec![
            Layer {
                tar: base.clone(),
                comp: Comp::Gzip,
                declared_size: None,
            },
            Layer {
                tar: top.clone(),
                comp: comp_top,
                declared_size: None,
            },
            Layer {
                tar: extra.clone(),
                comp: Comp::Zstd,
                declared_size: None,
            },
        ]
    };
    let one = oci::image(host_arch(), &layers(Comp::None), serde_json::json!({}));
    // The same layers, the middle one compressed differently: same diff_id, one directory.
    let two = oci::image(host_arch(), &layers(Comp::Gzip), serde_json::json!({}));
    env.reg.push("team/app", "v1", &one);
    env.reg.push("team/other", "v1", &two);
    let a = env.pull("team/app:v1").unwrap();
    assert_eq!(a.layers.len(), 3);
    let wh = std::fs::symlink_metadata(a.layers[1].join("etc/a")).unwrap();
    assert!(
        wh.file_type().is_char_device() && wh.rdev() == 0,
        "overlayfs whiteout"
    );
    let mut v = [0u8; 2];
    let n = rustix::fs::getxattr(
        a.layers[1].join("var/cache"),
        "trusted.overlay.opaque",
        &mut v,
    )
    .unwrap();
    assert_eq!(&v[..n], b"y");
    assert_eq!(
        std::fs::read(a.layers[2].join("opt/zstd")).unwrap(),
        b"zstd layer"
    );
    assert_eq!(
        std::fs::metadata(a.layers[0].join("etc/b"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let b = env.pull("team/other:v1").unwrap();
    assert_eq!(a.layers, b.layers);
    assert_ne!(a.digest, b.digest);
    assert_eq!(count(&env.store().root().join("layers/sha256")), 3);

    // The layers stack with overlayfs as the Run side mounts them.
    let merged = env.dir.join("merged");
    std::fs::create_dir_all(&merged).unwrap();
    let lower: Vec<String> = a
        .layers
        .iter()
        .rev()
        .map(|p| p.display().to_string())
        .collect();
    let st = std::process::Command::new("mount")
        .args([
            "-t",
            "overlay",
            "overlay",
            "-o",
            &format!("lowerdir={}", lower.join(":")),
        ])
        .arg(&merged)
        .status()
        .unwrap();
    assert!(st.success(), "overlay mount");
    let gone = !merged.join("etc/a").exists();
    let kept = merged.join("etc/b").exists();
    let cache: Vec<_> = std::fs::read_dir(merged.join("var/cache"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    std::process::Command::new("umount")
        .arg(&merged)
        .status()
        .unwrap();
    assert!(gone && kept);
    assert_eq!(cache, ["new"]);
}

#[test]
fn picks_this_hosts_entry_of_a_multi_arch_index() {
    let env = Env::new("index");
    let mk = |arch: &str| {
        let tar = TarBuilder::new()
            .file("arch", arch.as_bytes(), 0o644)
            .finish();
        oci::image(
            arch,
            &[Layer {
                tar,
                comp: Comp::Gzip,
                declared_size: None,
            }],
            serde_json::json!({"Cmd": [arch]}),
        )
    };
    let idx = oci::index(vec![
        ("arm", Some("v7"), mk("arm")),
        ("amd64", None, mk("amd64")),
        ("arm64", Some("v8"), mk("arm64")),
    ]);
    env.reg.push("library/multi", "1", &idx);
    let got = env.pull("multi:1").unwrap();
    assert_eq!(
        got.digest.to_string(),
        idx.digest(),
        "imageID is the index digest"
    );
    assert_ne!(got.manifest, got.digest);
    assert_eq!(
        std::fs::read(got.layers[0].join("arch")).unwrap(),
        host_arch().as_bytes()
    );
    let only_s390 = oci::index(vec![("s390x", None, mk("s390x"))]);
    env.reg.push("library/s390", "1", &only_s390);
    let e = env.pull("s390:1").unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::NoPlatform { .. }), "{e}");
    assert!(e.to_string().contains("linux/s390x"), "{e}");
}

#[test]
fn keeps_a_named_user_and_docker_manifests() {
    let env = Env::new("user");
    let tar = TarBuilder::new()
        .dir("etc/")
        .file(
            "etc/passwd",
            b"root:x:0:0::/root:/bin/sh\napp:x:1234:1234::/home/app:/bin/sh\n",
            0o644,
        )
        .finish();
    let mut img = oci::image(
        host_arch(),
        &[Layer {
            tar,
            comp: Comp::Gzip,
            declared_size: None,
        }],
        serde_json::json!({"User": "app", "WorkingDir": "/home/app", "Entrypoint": ["/bin/app"], "ExposedPorts": {"8080/tcp": {}}}),
    );
    // As Docker pushes it: Docker media types.
    let mut m: serde_json::Value = serde_json::from_slice(&img.manifest).unwrap();
    m["mediaType"] = oci::DOCKER_MANIFEST.into();
    m["config"]["mediaType"] = "application/vnd.docker.container.image.v1+json".into();
    m["layers"][0]["mediaType"] = "application/vnd.docker.image.rootfs.diff.tar.gzip".into();
    img.manifest = serde_json::to_vec(&m).unwrap();
    img.media_type = oci::DOCKER_MANIFEST.into();
    env.reg.push("library/app", "latest", &img);
    let got = env.pull("app").unwrap();
    let c = &got.config.config;
    assert_eq!(c.user.as_deref(), Some("app"));
    assert_eq!(c.working_dir.as_deref(), Some("/home/app"));
    assert_eq!(c.entrypoint, Some(vec!["/bin/app".to_string()]));
    assert_eq!(c.cmd, None);
    assert!(c.exposed_ports.contains_key("8080/tcp"));
}

#[test]
fn a_corrupted_blob_is_never_kept() {
    let env = Env::new("corrupt");
    let img = busybox();
    env.reg.push("library/busybox", "1.28", &img);
    let f = env.reg.blob_file(&img.layer_digests[0]);
    let mut b = std::fs::read(&f).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0xff;
    std::fs::write(&f, b).unwrap();
    let e = env.pull("busybox:1.28").unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::Digest { .. }), "{e}");
    assert!(e.to_string().contains(&img.layer_digests[0]), "{e}");
    env.assert_nothing_kept("busybox:1.28");

    let cfg = env.reg.blob_file(&img.config_digest);
    let mut c = std::fs::read(&cfg).unwrap();
    c[0] = b' ';
    std::fs::write(&cfg, c).unwrap();
    let e = env.pull("busybox:1.28").unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::Digest { .. }), "{e}");
    env.assert_nothing_kept("busybox:1.28");
}

fn hostile(env: &Env, repo: &str, tar: Vec<u8>, declared: Option<u64>) -> String {
    let img = oci::image(
        host_arch(),
        &[Layer {
            tar,
            comp: Comp::Gzip,
            declared_size: declared,
        }],
        serde_json::json!({}),
    );
    env.reg.push(repo, "evil", &img);
    let r = format!("{repo}:evil");
    let e = env.pull(&r).unwrap_err().to_string();
    env.assert_nothing_kept(&r);
    assert!(
        e.contains(&format!("docker.io/{repo}:evil")),
        "names the image: {e}"
    );
    e
}

/// Raw tar entries (the tar crate refuses to write `..`).
fn raw_entry(out: &mut Vec<u8>, kind: u8, name: &str, link: &str, data: &[u8]) {
    let mut h = tar::Header::new_ustar();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
    h.set_entry_type(tar::EntryType::new(kind));
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out.extend(std::iter::repeat_n(0, (512 - data.len() % 512) % 512));
}

#[test]
fn hostile_layers_are_refused() {
    let env = Env::new("hostile");
    let outside = env.dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let end = |mut t: Vec<u8>| {
        t.extend(std::iter::repeat_n(0, 1024));
        t
    };

    let mut t = Vec::new();
    raw_entry(
        &mut t,
        b'0',
        "../../../../../../../tmp/podunit-evil",
        "",
        b"x",
    );
    let e = hostile(&env, "evil/traversal", end(t), None);
    assert!(
        e.contains("\"../../../../../../../tmp/podunit-evil\"") && e.contains(".."),
        "{e}"
    );

    let mut t = Vec::new();
    raw_entry(&mut t, b'2', "link", outside.to_str().unwrap(), b"");
    raw_entry(&mut t, b'0', "link/evil", "", b"x");
    let e = hostile(&env, "evil/symlink", end(t), None);
    assert!(e.contains("\"link/evil\"") && e.contains("symlink"), "{e}");

    let mut t = Vec::new();
    raw_entry(&mut t, b'1', "shadow", "../../../etc/shadow", b"");
    let e = hostile(&env, "evil/hardlink", end(t), None);
    assert!(e.contains("\"shadow\""), "{e}");
    let mut t = Vec::new();
    raw_entry(&mut t, b'1', "passwd", "/etc/passwd", b"");
    let e = hostile(&env, "evil/hardlink-abs", end(t), None);
    assert!(
        e.contains("\"passwd\"") && e.contains("not in this layer"),
        "{e}"
    );

    let big = TarBuilder::new()
        .file("big", &vec![7u8; 100_000], 0o644)
        .finish();
    let small = oci::compress(&big, Comp::Gzip).len() as u64 / 2;
    let e = hostile(&env, "evil/oversize", big.clone(), Some(small));
    assert!(e.contains("larger than its descriptor"), "{e}");
    // A stream shorter than its descriptor says: the two sizes, not the digest twice.
    let long = oci::compress(&big, Comp::Gzip).len() as u64 + 100;
    let e = hostile(&env, "evil/short", big, Some(long));
    assert!(
        e.contains(&format!(
            "the registry sent {} bytes, its descriptor says {long}",
            long - 100
        )),
        "{e}"
    );

    // A GNU long name of 8 MiB (an 8 KiB blob): refused at its header, never held in memory, and
    // never echoed whole (messages reach the journal and the pod's Events).
    let mut t = Vec::new();
    raw_entry(&mut t, b'L', "././@LongLink", "", &vec![b'a'; 8 << 20]);
    raw_entry(&mut t, b'0', "x", "", b"x");
    let e = hostile(&env, "evil/longname", end(t), None);
    assert!(
        e.contains("a GNU long name header of 8388608 bytes (at most 1048576 are read)"),
        "{}",
        &e[..e.len().min(500)]
    );
    assert!(e.len() < 1000, "the name is not echoed: {} bytes", e.len());
    // The same for PAX records.
    let mut t = Vec::new();
    let rec = format!("{} path={}\n", 2 << 20, "p".repeat((2 << 20) - 16));
    raw_entry(&mut t, b'x', "PaxHeader", "", rec.as_bytes());
    raw_entry(&mut t, b'0', "x", "", b"x");
    let e = hostile(&env, "evil/pax", end(t), None);
    assert!(e.contains("a PAX header of"), "{}", &e[..e.len().min(500)]);
    // Gigabytes of zeros after the end marker are not read through: 2 MiB are refused.
    let mut t = TarBuilder::new().file("f", b"f", 0o644).finish();
    t.extend(vec![0u8; 2 << 20]);
    let e = hostile(&env, "evil/trailer", t, None);
    assert!(
        e.contains("more than 1048576 bytes after the end of the tar archive"),
        "{e}"
    );

    // (uid_t) -1, chown's "leave it": refused rather than left root's.
    let mut t = Vec::new();
    let rec = "18 uid=4294967295\n";
    raw_entry(&mut t, b'x', "PaxHeader", "", rec.as_bytes());
    raw_entry(&mut t, b'0', "mine", "", b"x");
    let e = hostile(&env, "evil/noid", end(t), None);
    assert!(
        e.contains("entry \"mine\": bad uid in the tar header"),
        "{e}"
    );

    assert_eq!(count(&outside), 0);
    assert!(!Path::new("/tmp/podunit-evil").exists());

    // Valid, though it looks odd: a directory replaced later in the same layer by a file, a
    // symlink or a whiteout, as the tar tools apply it.
    let mut t = Vec::new();
    raw_entry(&mut t, b'5', "d/", "", b"");
    raw_entry(&mut t, b'0', "d", "", b"now a file");
    raw_entry(&mut t, b'5', "e/", "", b"");
    raw_entry(&mut t, b'0', "e/x", "", b"x");
    raw_entry(&mut t, b'2', "e", "elsewhere", b"");
    raw_entry(&mut t, b'5', "w/", "", b"");
    raw_entry(&mut t, b'0', "w/x", "", b"x");
    raw_entry(&mut t, b'0', ".wh.w", "", b"");
    env.reg.push("odd/replaced", "1", &one_layer(end(t)));
    let img = env.pull("odd/replaced:1").unwrap();
    let top = &img.layers[0];
    assert_eq!(std::fs::read(top.join("d")).unwrap(), b"now a file");
    assert_eq!(
        std::fs::read_link(top.join("e")).unwrap(),
        Path::new("elsewhere")
    );
    assert!(
        std::fs::symlink_metadata(top.join("w"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

#[test]
fn concurrent_pulls_fetch_once_and_dead_pulls_leave_nothing_trusted() {
    let env = Env::new("concurrent");
    env.reg.push("library/busybox", "1.28", &busybox());
    let s = env.store();
    s.create().unwrap();
    // What a pull killed mid-layer leaves: a half layer under tmp/ of a process that is gone.
    let dead = s.tmp_dir().join("999999999-0/layer/bin");
    std::fs::create_dir_all(&dead).unwrap();
    std::fs::write(dead.join("busybox"), b"half").unwrap();
    assert_eq!(
        s.lookup(&Reference::parse("busybox:1.28").unwrap())
            .unwrap(),
        None
    );
    let results: Vec<_> = std::thread::scope(|sc| {
        let h: Vec<_> = (0..3)
            .map(|_| sc.spawn(|| env.pull("busybox:1.28")))
            .collect();
        h.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &results {
        assert_eq!(
            r.as_ref().unwrap().layers,
            results[0].as_ref().unwrap().layers
        );
    }
    assert_eq!(count(&s.root().join("layers/sha256")), 1);
    assert_eq!(count(&s.tmp_dir()), 0, "the dead pull's leftovers are gone");
    let bb = results[0].as_ref().unwrap().layers[0].join("bin/busybox");
    assert_eq!(
        std::fs::read(bb).unwrap(),
        std::fs::read("/bin/busybox").unwrap()
    );
}

#[test]
fn a_full_disk_is_a_clear_error() {
    let env = Env::new("enospc");
    let tar = TarBuilder::new()
        .file("noise", &noise(3 << 20), 0o644)
        .finish();
    let img = oci::image(
        host_arch(),
        &[Layer {
            tar,
            comp: Comp::Gzip,
            declared_size: None,
        }],
        serde_json::json!({}),
    );
    env.reg.push("library/big", "1", &img);
    let small = Tmpfs::mount(&env.dir.join("small"), "1m");
    let store = Store::open(small.0.join("store"));
    let client = Client::new(env.settings(), env.keyring(PASSWORD));
    let e = env.pull_with(&store, &client, "big:1");
    let layers = count(&store.root().join("layers/sha256"));
    let tmp = count(&store.tmp_dir());
    drop(small);
    let e = e.unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::NoSpace(_)), "{e}");
    assert!(e.to_string().contains("no space left"), "{e}");
    assert_eq!((layers, tmp), (0, 0));
}

#[test]
fn the_cli_pulls_lists_inspects_and_prunes() {
    let env = Env::new("cli");
    env.reg.push("library/busybox", "1.28", &busybox());
    let other = oci::image(
        host_arch(),
        &[Layer {
            tar: TarBuilder::new().file("x", b"x", 0o644).finish(),
            comp: Comp::Gzip,
            declared_size: None,
        }],
        serde_json::json!({}),
    );
    env.reg.push("library/unused", "1", &other);
    let root = env.dir.join("root");
    std::fs::create_dir_all(root.join("etc/podunit")).unwrap();
    std::fs::create_dir_all(root.join("etc/pods.d")).unwrap();
    std::fs::write(
        root.join("etc/podunit/config.yaml"),
        format!(
            "registries:\n  mirrors:\n    docker.io: [\"{h}\"]\n  ca:\n    \"{h}\": {ca}\n  limits:\n    storeReservePercent: 0\n",
            h = env.reg.host,
            ca = env.certs.ca().display()
        ),
    )
    .unwrap();
    let auth = root.join("etc/podunit/auth.json");
    std::fs::write(
        &auth,
        format!(
            r#"{{"auths":{{"{}":{{"username":"{USER}","password":"{PASSWORD}"}}}}}}"#,
            env.reg.host
        ),
    )
    .unwrap();
    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(
        root.join("etc/pods.d/bb.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bb\nspec:\n  containers:\n  - name: c\n    image: busybox:1.28\n    command: [sleep, '1000']\n",
    )
    .unwrap();
    let podunit = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_podunit"))
            .args(args)
            .env("PODUNIT_ROOT", &root)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = podunit(&["image", "pull", "busybox:1.28", "unused:1"]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!(
            "docker.io/library/busybox:1.28 {}",
            busybox().digest()
        )),
        "{out}"
    );
    assert!(
        !err.contains("layers"),
        "no progress display off a terminal: {err}"
    );
    let (ok, out, _) = podunit(&["image", "ls"]);
    assert!(
        ok && out.contains("docker.io/library/busybox") && out.contains("docker.io/library/unused"),
        "{out}"
    );
    let (ok, out, err) = podunit(&["image", "inspect", "busybox:1.28"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["imageID"],
        format!("docker.io/library/busybox@{}", busybox().digest())
    );
    assert_eq!(v["config"]["config"]["Cmd"][0], "sh");
    let (ok, _, err) = podunit(&["image", "rm", "busybox:1.28"]);
    assert!(!ok && err.contains("used by a pod"), "{err}");
    // One name that cannot be removed does not keep the others, or what they alone held.
    env.reg.push(
        "library/spare",
        "1",
        &one_layer(TarBuilder::new().file("s", b"s", 0o644).finish()),
    );
    let (ok, _, err) = podunit(&["image", "pull", "spare:1"]);
    assert!(ok, "{err}");
    let store = Store::open(root.join("var/lib/podunit/store"));
    assert_eq!(count(&store.root().join("layers/sha256")), 3);
    let (ok, out, err) = podunit(&["image", "rm", "spare:1", "missing:1"]);
    assert!(!ok, "a name that is not there fails the command");
    assert!(out.contains("removed docker.io/library/spare:1"), "{out}");
    assert!(
        err.contains("image docker.io/library/missing:1 is not in the store")
            && err.contains("not removed: missing:1"),
        "{err}"
    );
    assert_eq!(
        count(&store.root().join("layers/sha256")),
        2,
        "the removed image's layer is collected"
    );
    let (ok, out, err) = podunit(&["image", "prune"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("removed docker.io/library/unused:1") && !out.contains("busybox"),
        "{out}"
    );
    let store = Store::open(root.join("var/lib/podunit/store"));
    assert!(
        store
            .lookup(&Reference::parse("busybox:1.28").unwrap())
            .unwrap()
            .is_some()
    );
    assert_eq!(
        count(&store.root().join("layers/sha256")),
        1,
        "the unused image's layer is gone"
    );
    let (ok, _, err) = podunit(&["image", "rm", "--force", "busybox:1.28"]);
    assert!(ok, "{err}");
    assert_eq!(store.list().0.len(), 0);
    assert_eq!(count(&store.root().join("layers/sha256")), 0);
    // A credentials file others can read is refused.
    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, _, err) = podunit(&["image", "pull", "busybox:1.28"]);
    assert!(!ok && err.contains("0600"), "{err}");
}

/// A node's limits, on top of the test registry's settings.
fn limited(env: &Env, set: impl FnOnce(&mut podunit::common::pull_limits::Limits)) -> Client {
    let mut settings = env.settings();
    set(&mut settings.limits);
    Client::new(settings, env.keyring(PASSWORD))
}

#[test]
fn layers_over_the_node_limits_are_refused_and_nothing_is_kept() {
    let env = Env::new("limits");
    // A 40 KiB blob that unpacks to 32 MiB of zeros, against 16 MiB a layer.
    let bomb = TarBuilder::new()
        .file("zeros", &vec![0u8; 32 << 20], 0o644)
        .finish();
    env.reg.push("evil/bomb", "1", &one_layer(bomb));
    let client = limited(&env, |l| l.max_layer_bytes = 16 << 20);
    let e = env
        .pull_with(&env.store(), &client, "evil/bomb:1")
        .unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::TooLarge(_)), "{e}");
    assert!(
        e.to_string().contains(
            "a layer is larger than 16777216 bytes uncompressed (registries.limits.maxLayerBytes)"
        ),
        "{e}"
    );
    env.assert_nothing_kept("evil/bomb:1");

    // Two layers of 12 MiB each, against 20 MiB an image.
    let twelve = |n: &str| {
        TarBuilder::new()
            .file(n, &vec![0u8; 12 << 20], 0o644)
            .finish()
    };
    env.reg
        .push("evil/wide", "1", &layers(vec![twelve("a"), twelve("b")]));
    let client = limited(&env, |l| {
        l.max_layer_bytes = 16 << 20;
        l.max_image_bytes = 20 << 20;
    });
    let e = env
        .pull_with(&env.store(), &client, "evil/wide:1")
        .unwrap_err();
    assert!(
        e.to_string().contains("(registries.limits.maxImageBytes)"),
        "{e}"
    );
    env.assert_nothing_kept("evil/wide:1");

    // What the manifest declares is checked before anything is fetched.
    env.reg.push(
        "evil/heavy",
        "1",
        &one_layer(TarBuilder::new().file("n", &noise(3 << 20), 0o644).finish()),
    );
    let client = limited(&env, |l| l.max_layer_bytes = 1 << 20);
    let e = env
        .pull_with(&env.store(), &client, "evil/heavy:1")
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("bytes, more than 1048576 (registries.limits.maxLayerBytes)"),
        "{e}"
    );
    env.assert_nothing_kept("evil/heavy:1");
}

#[test]
fn a_pull_never_eats_the_store_reserve() {
    let env = Env::new("reserve");
    let small = Tmpfs::mount(&env.dir.join("small"), "32m");
    // 75 % of 32 MiB kept free: 8 MiB for pulls.
    let client = limited(&env, |l| l.store_reserve_percent = 75);
    let store = Store::open(small.0.join("store"));
    // Blobs that would not fit: refused before they are fetched.
    env.reg.push(
        "big/blob",
        "1",
        &one_layer(
            TarBuilder::new()
                .file("n", &noise(10 << 20), 0o644)
                .finish(),
        ),
    );
    let blob = env.pull_with(&store, &client, "big/blob:1");
    // A small blob that grows past the reserve as it unpacks: stopped while writing.
    env.reg.push(
        "big/unpacked",
        "1",
        &one_layer(
            TarBuilder::new()
                .file("zeros", &vec![0u8; 20 << 20], 0o644)
                .finish(),
        ),
    );
    let unpacked = env.pull_with(&store, &client, "big/unpacked:1");
    let left = (
        count(&store.root().join("layers/sha256")),
        count(&store.tmp_dir()),
    );
    drop(small);
    for (what, r) in [("blob", blob), ("unpacked", unpacked)] {
        let e = r.unwrap_err();
        assert!(matches!(e.kind, PullErrorKind::NoSpace(_)), "{what}: {e}");
        assert!(
            e.to_string().contains(
                "a pull leaves at least 75% free (registries.limits.storeReservePercent)"
            ),
            "{what}: {e}"
        );
    }
    assert_eq!(left, (0, 0), "nothing of either pull is left");
}

/// The node's settings for an image served by a [`Hostile`] double (plain HTTP, listed insecure).
fn hostile_settings(
    h: &Hostile,
    set: impl FnOnce(&mut podunit::common::pull_limits::Limits),
) -> Registries {
    let mut s = Registries {
        insecure: vec![h.host.clone()],
        ..Default::default()
    };
    s.limits.store_reserve_percent = 0;
    set(&mut s.limits);
    s
}

/// A test double stands for the registry: the real one cannot be made to stall or dribble.
#[test]
fn a_stalled_dribbling_or_endless_registry_is_abandoned() {
    let dir = std::env::temp_dir().join(format!("podunit-image-{}-stall", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let img = one_layer(TarBuilder::new().file("n", &noise(200_000), 0o644).finish());
    let store = Store::open(dir.join("store"));
    let cases: Vec<(&str, Hostile, Registries, &str)> = vec![
        {
            // Headers and 100 bytes, then nothing.
            let h = Hostile::start(hostile::image_routes("evil/stall", "1", &img, |b| {
                Reply::Stall {
                    body: b.to_vec(),
                    sent: 100,
                }
            }));
            let s = hostile_settings(&h, |l| l.low_speed_seconds = 2);
            (
                "evil/stall:1",
                h,
                s,
                "the registry sent nothing for 2 s (registries.limits.lowSpeedSeconds)",
            )
        },
        {
            // 10 bytes every 100 ms: 100 bytes a second.
            let h = Hostile::start(hostile::image_routes("evil/dribble", "1", &img, |b| {
                Reply::Dribble {
                    body: b.to_vec(),
                    chunk: 10,
                    every: Duration::from_millis(100),
                }
            }));
            let s = hostile_settings(&h, |l| {
                l.low_speed_seconds = 2;
                l.low_speed_bytes_per_second = 1000;
            });
            (
                "evil/dribble:1",
                h,
                s,
                "slower than 1000 bytes a second (registries.limits.lowSpeedBytesPerSecond)",
            )
        },
        {
            // Fast enough, but the whole pull may take 3 s and this one would take 10.
            let h = Hostile::start(hostile::image_routes("evil/slow", "1", &img, |b| {
                Reply::Dribble {
                    body: b.to_vec(),
                    chunk: 2000,
                    every: Duration::from_millis(100),
                }
            }));
            let s = hostile_settings(&h, |l| l.pull_timeout_seconds = 3);
            (
                "evil/slow:1",
                h,
                s,
                "the pull took longer than 3 s (registries.limits.pullTimeoutSeconds)",
            )
        },
    ];
    for (name, h, settings, want) in &cases {
        let client = Client::new(settings.clone(), Keyring::default());
        let e = registry::pull(&store, &client, &format!("{}/{name}", h.host)).unwrap_err();
        assert!(matches!(e.kind, PullErrorKind::Timeout(_)), "{name}: {e}");
        assert!(e.to_string().contains(want), "{name}: {e}");
        assert!(
            h.requests().iter().any(|r| r.target.contains("/blobs/")),
            "{name}: the layer was being fetched"
        );
        // The store is free again: another pull (or `image rm`) takes its lock at once.
        drop(store.lock_store(true).unwrap());
    }
    assert_eq!(count(&store.root().join("layers/sha256")), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A registry that redirects blobs (to object storage, or a hostile host): the credentials
/// stay with the registry. Test doubles both: the real registry redirects only to S3-like
/// storage drivers.
#[test]
fn credentials_never_follow_a_redirect() {
    let dir = std::env::temp_dir().join(format!("podunit-image-{}-redirect", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let img = one_layer(TarBuilder::new().file("f", b"f", 0o644).finish());
    let layer = img
        .blobs
        .iter()
        .find(|b| oci::digest(b) != img.config_digest)
        .unwrap()
        .clone();
    let elsewhere = Hostile::start(move |_| Reply::ok(layer.clone(), "application/octet-stream"));
    let to = format!("http://{}/storage/blob", elsewhere.host);
    let serve = hostile::image_routes("app/web", "1", &img, move |_| {
        Reply::status(307, &[("Location", to.as_str())])
    });
    let reg = Hostile::start(move |req| {
        if req.header("authorization").is_none() {
            return Reply::status(401, &[("WWW-Authenticate", "Basic realm=\"r\"")]);
        }
        serve(req)
    });
    let mut settings = hostile_settings(&reg, |_| {});
    settings.insecure.push(elsewhere.host.clone());
    let client = Client::new(settings, registry::keyring(&reg.host, USER, PASSWORD));
    let store = Store::open(dir.join("store"));
    registry::pull(&store, &client, &format!("{}/app/web:1", reg.host)).unwrap();
    let creds = format!("Basic {}", base64_of(&format!("{USER}:{PASSWORD}")));
    assert!(
        reg.requests()
            .iter()
            .any(|r| r.target.contains("/blobs/") && r.header("authorization") == Some(&creds)),
        "the registry got the credentials"
    );
    let there = elsewhere.requests();
    assert_eq!(there.len(), 1, "{there:?}");
    assert_eq!(there[0].header("authorization"), None, "{there:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The registry (real, plain HTTP, listed insecure) challenges with a token realm on another
/// host; a listener stands for that realm (a test double: it only records who came).
#[test]
fn credentials_go_to_a_token_realm_only_over_https_or_to_a_host_listed_insecure() {
    use image::token::TokenService;
    let dir = std::env::temp_dir().join(format!("podunit-image-{}-realm", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let certs = Certs::make(&dir.join("certs"));
    let tokens = TokenService::start(&dir.join("token"), &certs);
    let realm = Hostile::start(|_| Reply::status(403, &[]));
    let port = realm.host.rsplit_once(':').unwrap().1.to_string();
    let realm_host = format!("localhost:{port}");
    let reg = Registry::start_plain_with_realm(
        &dir.join("reg"),
        &certs,
        &tokens,
        &format!("http://{realm_host}/token"),
    );
    let keyring = registry::keyring(&reg.host, USER, PASSWORD);
    let store = Store::open(dir.join("store"));
    let r = format!("{}/library/busybox:1.28", reg.host);

    let mut only_registry = Registries {
        insecure: vec![reg.host.clone()],
        ..Default::default()
    };
    only_registry.limits.store_reserve_percent = 0;
    let e = registry::pull(
        &store,
        &Client::new(only_registry.clone(), keyring.clone()),
        &r,
    )
    .unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::Unauthorized(_)), "{e}");
    assert!(
        e.to_string().contains(&format!(
            "is plain HTTP and {realm_host} is not in registries.insecure"
        )),
        "{e}"
    );
    assert!(
        realm.requests().is_empty(),
        "nothing went to the realm: {:?}",
        realm.requests()
    );

    // Listed, the realm is trusted like a registry: the credentials go there (and the double
    // gives no token).
    let mut both = only_registry;
    both.insecure.push(realm_host);
    let e = registry::pull(&store, &Client::new(both, keyring), &r).unwrap_err();
    assert!(matches!(e.kind, PullErrorKind::Unauthorized(_)), "{e}");
    let asked = realm.requests();
    let creds = format!("Basic {}", base64_of(&format!("{USER}:{PASSWORD}")));
    assert!(
        asked
            .iter()
            .any(|a| a.header("authorization") == Some(&creds)),
        "{asked:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
