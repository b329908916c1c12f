//! Pulled images on real systemd: public Pod manifests from the corpus, unchanged, run in their
//! images' roots. The images are built here from Debian's busybox-static (tests/image), pushed
//! under the public names to a real registry (Debian's docker-registry, TLS and htpasswd) on the
//! host's loopback, and pulled by podunit's puller into the machine's image store: the machine has
//! a private network, so the host pulls for it, exactly as `podunit image pull` would in it.
//! systemd then runs each container's process in its image's layers, nothing else.
//!
//! Needs root, systemd-nspawn, docker-registry, htpasswd and openssl; fails (never skips) without
//! them. Run: `cargo test --test images_e2e -- --test-threads=1` (part of `make test-e2e`).

mod image;
mod support;

use image::oci::{self, Comp, Layer, TarBuilder};
use image::registry::{Certs, PASSWORD, Registry, USER};
use podunit::image::Store;
use podunit::image::registry::Client;
use std::path::PathBuf;
use support::nspawn::Machine;
use support::pods::{SOON, container_pid, ctr_unit, start_pods, start_sync, wait_state};
use support::registry::{self, host_arch};
use support::status::status_row;

/// The corpus's `pods/` directory: `PODUNIT_K8S_EXAMPLES` as for
/// tests/manifest_k8s_examples_cli.rs, else where it is kept beside the repository.
fn corpus(file: &str) -> Vec<u8> {
    let dir = std::env::var_os("PODUNIT_K8S_EXAMPLES")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata/k8s-examples/pods")
        });
    let p = dir.join(file);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// busybox-static with the applets the corpus manifests call.
fn busybox_root(extra: &mut dyn FnMut(&mut TarBuilder)) -> Vec<u8> {
    let bin = std::fs::read("/bin/busybox").expect("/bin/busybox (Debian package busybox-static)");
    let mut t = TarBuilder::new();
    t.dir("bin/").file("bin/busybox", &bin, 0o755);
    for a in [
        "sh", "echo", "cat", "ls", "sleep", "env", "id", "wget", "httpd", "date", "hostname",
        "mkdir", "true",
    ] {
        t.symlink(&format!("bin/{a}"), "busybox");
    }
    // Debian's busybox-static has no printenv applet ("applet not found"); the images the
    // manifests name have one. This one behaves as theirs: each named variable's value on a
    // line, exit status 1 when one is not set, the whole environment without names.
    t.file("bin/printenv", PRINTENV, 0o755);
    t.dir("etc/")
        .file(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnginx:x:101:101:nginx:/nonexistent:/bin/false\n",
            0o644,
        )
        .file("etc/group", b"root:x:0:\nnginx:x:101:\n", 0o644)
        .dir("tmp/");
    extra(&mut t);
    t.finish()
}

const PRINTENV: &[u8] = br#"#!/bin/sh
[ $# -eq 0 ] && exec env
rc=0
for n in "$@"; do
  if eval "[ \"\${$n+set}\" = set ]"; then eval "printf '%s\n' \"\${$n}\""; else rc=1; fi
done
exit $rc
"#;

const PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// "nginx" for the tests: busybox's httpd serving /usr/share/nginx/html, started by the image's
/// Entrypoint and Cmd as the real image starts nginx (the manifests give no command).
fn nginx() -> oci::Image {
    let base = busybox_root(&mut |_| {});
    let mut t = TarBuilder::new();
    t.dir("usr/")
        .dir("usr/share/")
        .dir("usr/share/nginx/")
        .dir("usr/share/nginx/html/")
        .file(
            "usr/share/nginx/html/index.html",
            b"Welcome to nginx!\n",
            0o644,
        );
    let html = t.finish();
    oci::image(
        host_arch(),
        &[
            Layer {
                tar: base,
                comp: Comp::Gzip,
                declared_size: None,
            },
            Layer {
                tar: html,
                comp: Comp::Zstd,
                declared_size: None,
            },
        ],
        serde_json::json!({
            "Env": [PATH, "NGINX_VERSION=1.14.2"],
            "Entrypoint": ["httpd", "-f", "-v"],
            "Cmd": ["-p", "80", "-h", "/usr/share/nginx/html"],
            "StopSignal": "SIGQUIT",
        }),
    )
}

/// "debian" and "busybox" for the tests: a shell and its tools, `Cmd ["sh"]` as the real ones.
fn shell_image() -> oci::Image {
    oci::image(
        host_arch(),
        &[Layer {
            tar: busybox_root(&mut |_| {}),
            comp: Comp::Gzip,
            declared_size: None,
        }],
        serde_json::json!({"Env": [PATH], "Cmd": ["sh"]}),
    )
}

/// The shell image with one more layer, `extra` (a tar).
fn shell_image_plus(extra: Vec<u8>) -> oci::Image {
    oci::image(
        host_arch(),
        &[
            Layer {
                tar: busybox_root(&mut |_| {}),
                comp: Comp::Gzip,
                declared_size: None,
            },
            Layer {
                tar: extra,
                comp: Comp::Gzip,
                declared_size: None,
            },
        ],
        serde_json::json!({"Env": [PATH], "Cmd": ["sh"]}),
    )
}

/// `busybox` moved on: the shell image with a layer adding `/etc/podunit-v2`.
fn busybox_v2() -> oci::Image {
    shell_image_plus(
        TarBuilder::new()
            .dir("etc/")
            .file("etc/podunit-v2", b"2\n", 0o644)
            .finish(),
    )
}

/// Moves `busybox` (`:latest`) to [`busybox_v2`], kills the container `unit` (which prints
/// `running-v2` when it starts on it) and waits for systemd's restart to run the new image,
/// pulled again at that start. Returns podunit-sync's journal.
fn move_tag_and_restart(m: &Machine, images: &Images, unit: &str) -> String {
    let v2 = busybox_v2();
    registry::in_machine_network(m, || images.reg.push("library/busybox", "latest", &v2));
    m.sh_ok(&format!(
        "systemctl kill --signal=KILL --kill-whom=main {unit}"
    ));
    m.wait_for("the pod on the moved tag", SOON * 3, || {
        journal(m, unit).contains("running-v2").then_some(())
    });
    let sync = m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service");
    assert!(
        sync.contains("asking the registry for image \"busybox\" again"),
        "{sync}"
    );
    sync
}

/// A registry with the corpus's images under their public names, and a way to pull them into a
/// machine's store.
struct Images {
    dir: PathBuf,
    certs: Certs,
    reg: Registry,
}

impl Images {
    fn start(name: &str) -> Images {
        Images::start_on(name, None)
    }

    /// The same registry, listening in the machine's own network (on its loopback), where
    /// podunit-sync in the machine pulls from it.
    fn start_in(m: &Machine, name: &str) -> Images {
        Images::start_on(name, Some(m))
    }

    fn start_on(name: &str, machine: Option<&Machine>) -> Images {
        let dir =
            std::env::temp_dir().join(format!("podunit-images-e2e-{}-{name}", std::process::id()));
        let (web, shell) = (nginx(), shell_image());
        let (reg, certs) = Registry::serving(
            &dir,
            machine,
            &[
                ("library/nginx", "1.14.2", &web),
                ("library/nginx", "latest", &web),
                ("library/debian", "latest", &shell),
                ("library/busybox", "latest", &shell),
                ("busybox", "1.27.2", &shell),
            ],
        );
        Images { dir, certs, reg }
    }

    /// The machine's node configuration for this registry (started in its network): the
    /// mirrors, the CA, and the credentials file, root-only.
    fn configure_node(&self, m: &Machine) {
        self.configure_node_without_credentials(m);
        m.write(
            "/etc/podunit/auth.json",
            registry::config_json(&self.reg.host, USER, PASSWORD).as_bytes(),
        );
        m.sh_ok("chmod 0600 /etc/podunit/auth.json");
    }

    /// The mirrors and the CA only: the node itself has no credentials for the registry.
    fn configure_node_without_credentials(&self, m: &Machine) {
        m.write(
            "/etc/podunit/config.yaml",
            registry::node_config(&self.reg.host, registry::MACHINE_CA).as_bytes(),
        );
    }

    /// Pulls `reference` into the machine's image store, as `podunit image pull` does; docker.io
    /// and registry.k8s.io are mirrored by the local registry.
    fn pull_into(&self, m: &Machine, reference: &str) -> String {
        let client = Client::new(
            registry::settings(&self.reg.host, &self.certs.ca()),
            registry::keyring(&self.reg.host, USER, PASSWORD),
        );
        let store = Store::open(m.dir().join("root/var/lib/podunit/store"));
        registry::pull(&store, &client, reference)
            .unwrap_or_else(|e| panic!("pull {reference}: {e}"))
            .image_id()
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The main process's view of its root: what it sees at `path`.
fn in_root(m: &Machine, unit: &str, path: &str) -> String {
    let pid = m.prop(unit, "MainPID");
    assert_ne!(pid, "0", "{unit} has no main process");
    m.sh_ok(&format!("cat /proc/{pid}/root{path}"))
}

fn journal(m: &Machine, unit: &str) -> String {
    m.sh_ok(&format!("journalctl --no-pager -o cat -u {unit}"))
}

/// What the container's processes wrote to stdout and stderr in the unit's current (or last) run:
/// the journal entries of the unit's output stream (`_TRANSPORT=stdout`) of that invocation, not
/// the unit's whole journal, where systemd's own messages about the unit (`Started Container X
/// of pod ns/name`) name the pod and container too. (Not by `_PID`: journald gives each line the
/// PID of the process that wrote it, a child such as printenv as well as the main process.)
fn process_output(m: &Machine, unit: &str) -> String {
    let run = m.prop(unit, "InvocationID");
    assert!(!run.is_empty(), "{unit} never ran");
    m.sh_ok(&format!(
        "journalctl --no-pager -o cat _SYSTEMD_UNIT={unit} _SYSTEMD_INVOCATION_ID={run} \
         _TRANSPORT=stdout"
    ))
}

/// How a unit's main process ended and what became of the unit.
#[derive(Debug, PartialEq)]
struct Ended {
    /// ExecMainCode: 1 CLD_EXITED, 2 CLD_KILLED, 3 CLD_DUMPED.
    code: String,
    status: String,
    active: String,
    restarts: String,
}

impl Ended {
    fn exited(status: i32, active: &str, restarts: u32) -> Ended {
        Ended {
            code: "1".into(),
            status: status.to_string(),
            active: active.into(),
            restarts: restarts.to_string(),
        }
    }
}

/// Waits until `unit`'s first main process has really run and ended (ExecMainExitTimestamp is
/// set only then: a unit that never started also reports ExecMainStatus=0), and the unit is done
/// with it: stopped, failed, or waiting to restart.
fn ended(m: &Machine, unit: &str) -> Ended {
    m.wait_for(&format!("{unit}'s process to end"), SOON, || {
        let exit = m.prop(unit, "ExecMainExitTimestampMonotonic");
        let active = m.prop(unit, "ActiveState");
        let sub = m.prop(unit, "SubState");
        let done = matches!(active.as_str(), "inactive" | "failed") || sub == "auto-restart";
        (!exit.is_empty() && exit != "0" && done).then(|| Ended {
            code: m.prop(unit, "ExecMainCode"),
            status: m.prop(unit, "ExecMainStatus"),
            active,
            restarts: m.prop(unit, "NRestarts"),
        })
    })
}

/// A GET on the machine's loopback (the pods share the machine's network).
fn http_get(m: &Machine, port: u16, path: &str) -> String {
    m.wait_for(&format!("port {port} to answer"), SOON, || {
        let out = m.exec(&[
            "bash",
            "-c",
            &format!(
                "exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET {path} HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"
            ),
        ]);
        let body = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && body.contains("200 OK")).then_some(body)
    })
}

#[test]
fn corpus_pods_run_unchanged_in_their_pulled_images() {
    let images = Images::start("corpus");
    let m = Machine::boot("images-corpus");
    for r in [
        "nginx:1.14.2",
        "nginx",
        "debian",
        "registry.k8s.io/busybox:1.27.2",
    ] {
        images.pull_into(&m, r);
    }

    // simple-pod.yaml: no command; the image's Entrypoint + Cmd serve its own files.
    m.write("/etc/pods.d/simple-pod.yaml", &corpus("simple-pod.yaml"));
    start_pods(&m);
    let nginx = ctr_unit("default", "nginx", "nginx");
    wait_state(&m, &nginx, &["active"]);
    assert!(http_get(&m, 80, "/").contains("Welcome to nginx!"));
    // In the image's root, with the kubelet's name files, as the image's configured process.
    assert_eq!(in_root(&m, &nginx, "/etc/hostname"), "nginx\n");
    let hosts = in_root(&m, &nginx, "/etc/hosts");
    assert!(
        hosts.starts_with("# Kubernetes-managed hosts file."),
        "{hosts}"
    );
    assert!(hosts.contains("\tnginx\n"), "{hosts}");
    assert!(in_root(&m, &nginx, "/usr/share/nginx/html/index.html").contains("Welcome"));
    let pid = container_pid(&m, &nginx);
    let cmdline = m.sh_ok(&format!("tr '\\0' ' ' < /proc/{pid}/cmdline"));
    assert_eq!(cmdline.trim(), "httpd -f -v -p 80 -h /usr/share/nginx/html");
    // A PID namespace of its own, its command PID 1 of it, in an image's root too; what was bound
    // into the root to start it (podunit, the host's loader and C library) is gone from its view.
    assert_eq!(
        m.sh_ok(&format!(
            "cat /proc/{pid}/root/proc/1/comm; ls /proc/{pid}/root/proc | grep -c '^[0-9]'"
        )),
        "httpd\n1\n"
    );
    assert_eq!(
        m.sh_ok(&format!(
            "r=/proc/{pid}/root; [ -s $r/usr/bin/podunit ] || echo no podunit; [ -e $r/lib/x86_64-linux-gnu/libc.so.6 ] || [ -e $r/usr/lib64/libc.so.6 ] || echo no libc"
        )),
        "no podunit\nno libc\n"
    );
    let environ = m.sh_ok(&format!("tr '\\0' '\\n' < /proc/{pid}/environ"));
    assert!(environ.contains("NGINX_VERSION=1.14.2\n"), "{environ}");
    assert!(environ.contains("HOSTNAME=nginx\n"), "{environ}");
    // The host's files are not there: this root is the image's.
    assert!(
        m.sh(&format!("test -e /proc/{pid}/root/usr/bin/systemctl"))
            .status
            .code()
            == Some(1)
    );
    // A write lands in the container's own layer, never in the shared image layers.
    m.sh_ok(&format!("echo scratch > /proc/{pid}/root/tmp-write"));
    let layers = m.sh_ok("ls /var/lib/podunit/store/layers/sha256/*/ | grep -c tmp-write || true");
    assert_eq!(layers.trim(), "0");
    let mounted = || {
        m.sh_ok("grep -c ' /run/podunit/pods/.*/roots/' /proc/self/mountinfo || true")
            .trim()
            .to_string()
    };
    assert_eq!(
        mounted(),
        "1",
        "the root is an overlay mount in the manager's namespace"
    );
    // Stopping the pod (what podunit-sync does for a removed manifest) unmounts its roots.
    m.sh_ok("rm /etc/pods.d/simple-pod.yaml");
    m.sh_ok("systemctl stop podunit-default_nginx.service");
    m.daemon_reload();
    assert_eq!(mounted(), "0", "the root is unmounted when the pod stops");
    assert_eq!(
        m.sh_ok("ls /var/lib/podunit/store/layers/sha256/ | wc -l")
            .trim(),
        "2",
        "the image layers stay in the store (busybox's is shared by every image)"
    );

    // two-container-pod.yaml: a second image writes the page the first one serves.
    m.write(
        "/etc/pods.d/two-container-pod.yaml",
        &corpus("two-container-pod.yaml"),
    );
    // commands.yaml and dapi-envars-pod.yaml: the container's command in the image's root.
    m.write("/etc/pods.d/commands.yaml", &corpus("commands.yaml"));
    m.write(
        "/etc/pods.d/dapi-envars-pod.yaml",
        &corpus("inject/dapi-envars-pod.yaml"),
    );
    start_pods(&m);
    let debian = ctr_unit("default", "two-containers", "debian-container");
    let end = ended(&m, &debian);
    assert_eq!(
        end,
        Ended::exited(0, "inactive", 0),
        "the debian container ran once and exited 0\n{}",
        process_output(&m, &debian)
    );
    let web = ctr_unit("default", "two-containers", "nginx-container");
    wait_state(&m, &web, &["active"]);
    assert!(http_get(&m, 80, "/index.html").contains("Hello from the debian container"));

    let demo = ctr_unit("default", "command-demo", "command-demo-container");
    // `printenv HOSTNAME KUBERNETES_PORT`: the pod's name, then the API server's service address,
    // which a kubelet gives a container only when it has an API server: a kubelet without one
    // lists no services (getServiceEnvVarMap over an empty service lister) and sets no service
    // variables. So here, as under a standalone kubelet, printenv prints one line and exits 1
    // (a variable was missing), and restartPolicy OnFailure runs it again.
    let end = ended(&m, &demo);
    let out = process_output(&m, &demo);
    assert_eq!(out, "command-demo\n", "HOSTNAME only");
    assert_eq!(
        (end.code.as_str(), end.status.as_str()),
        ("1", "1"),
        "printenv missed KUBERNETES_PORT\n{out}"
    );
    m.wait_for("command-demo to run again (OnFailure)", SOON, || {
        (m.prop(&demo, "NRestarts").parse::<u32>().unwrap_or(0) >= 1).then_some(())
    });

    // The downward API values the process prints, each exactly: the node's name (the kubelet's
    // default, its host name in lower case), the pod's name and namespace, the pod's IP, which
    // on the host's network is the node's, here loopback only (--private-network: no route but
    // lo), and the service account, `default` when the pod names none.
    let dapi = ctr_unit("default", "dapi-envars-fieldref", "test-container");
    wait_state(&m, &dapi, &["active"]);
    let routes = m.sh_ok("cat /proc/net/route");
    assert_eq!(
        routes.lines().skip(1).count(),
        0,
        "the machine has no route besides loopback's\n{routes}"
    );
    let node = m
        .sh_ok("cat /proc/sys/kernel/hostname")
        .trim()
        .to_ascii_lowercase();
    // Each round: an empty line (`echo -en '\n'`, which the journal does not keep), then the
    // five values, one a line.
    let want = [
        node.as_str(),
        "dapi-envars-fieldref",
        "default",
        "127.0.0.1",
        "default",
    ];
    let printed = m.wait_for("the first round of downward API values", SOON, || {
        let out = process_output(&m, &dapi);
        (out.lines().filter(|l| !l.is_empty()).count() >= want.len()).then_some(out)
    });
    let first: Vec<&str> = printed
        .lines()
        .filter(|l| !l.is_empty())
        .take(want.len())
        .collect();
    assert_eq!(first, want, "printed {printed:?}");
    assert!(
        in_root(&m, &dapi, "/bin/busybox").len() > 100_000,
        "busybox of the image"
    );
}

/// What a user does, and nothing more: drop a manifest naming an image the node does not have
/// into /etc/pods.d and run `systemctl daemon-reload`. podunit-sync (the packaged unit) pulls the
/// image with the node's mirror, CA and credentials file, reloads, and the pod runs. A pod whose
/// image the registry does not have waits with ErrImagePull, then ImagePullBackOff, in `podunit
/// status`, and holds up nothing else.
#[test]
fn a_dropped_manifest_gets_its_image_pulled_by_podunit_sync_and_runs() {
    let m = Machine::boot("images-pull");
    let images = Images::start_in(&m, "pull");
    images.configure_node(&m);
    start_sync(&m);

    m.write("/etc/pods.d/simple-pod.yaml", &corpus("simple-pod.yaml"));
    m.write(
        "/etc/pods.d/absent.yaml",
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: absent\nspec:\n  containers:\n  - name: main\n    image: busybox:0.0-not-pushed\n",
    );
    m.daemon_reload();
    let nginx = ctr_unit("default", "nginx", "nginx");
    m.wait_for("nginx to be pulled and started", SOON * 3, || {
        (m.prop(&nginx, "ActiveState") == "active").then_some(())
    });
    assert!(http_get(&m, 80, "/").contains("Welcome to nginx!"));
    let pid = container_pid(&m, &nginx);
    let cmdline = m.sh_ok(&format!("tr '\\0' ' ' < /proc/{pid}/cmdline"));
    assert_eq!(
        cmdline.trim(),
        "httpd -f -v -p 80 -h /usr/share/nginx/html",
        "the image's own Entrypoint and Cmd"
    );
    let images_listed = m.sh_ok("podunit image ls");
    assert!(images_listed.contains("nginx"), "{images_listed}");

    m.wait_for("absent to show ImagePullBackOff", SOON, || {
        let table = m.sh_ok("podunit status");
        (status_row(&table, "absent")[3] == "ImagePullBackOff").then_some(())
    });
    let journal = m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service");
    assert!(
        journal.contains("busybox:0.0-not-pushed"),
        "the failed pull is in podunit-sync's journal:\n{journal}"
    );
    assert!(
        !journal.contains(PASSWORD),
        "the node's credentials are not logged"
    );
    let table = m.sh_ok("podunit status");
    assert_eq!(status_row(&table, "nginx")[3], "Running", "{table}");
}

/// Local pods honour `imagePullPolicy: Always` as the kubelet does at every start of the
/// container: a restart by systemd makes podunit-sync ask the registry again, and when the tag
/// moved the pod runs the new image. With the registry gone, a restart runs on the stored image
/// (edge autonomy, docs/images.md).
#[test]
fn local_always_images_are_asked_for_again_at_each_start() {
    let m = Machine::boot("images-always");
    let images = Images::start_in(&m, "always");
    images.configure_node(&m);
    start_sync(&m);
    m.write(
        "/etc/pods.d/always.yaml",
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: always\nspec:\n  containers:\n  - name: main\n    image: busybox\n    command: [sh, -c, 'if test -e /etc/podunit-v2; then echo running-v2; else echo running-v1; fi; exec sleep 100000']\n",
    );
    m.daemon_reload();
    let unit = ctr_unit("default", "always", "main");
    m.wait_for("the first version running", SOON * 3, || {
        journal(&m, &unit).contains("running-v1").then_some(())
    });
    // The tag moves; the container is killed and systemd restarts it.
    let sync = move_tag_and_restart(&m, &images, &unit);
    assert!(sync.contains("moved from what"), "{sync}");
    // No registry: a restart runs on what the store has.
    drop(images);
    let runs = |m: &Machine| journal(m, &unit).matches("running-v2").count();
    let before = runs(&m);
    m.sh_ok(&format!(
        "systemctl kill --signal=KILL --kill-whom=main {unit}"
    ));
    m.wait_for("a restart without the registry", SOON * 2, || {
        (runs(&m) > before && m.prop(&unit, "ActiveState") == "active").then_some(())
    });
    m.wait_for("the failed pull in the journal", SOON, || {
        m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service")
            .contains("its containers keep the stored image")
            .then_some(())
    });
}

/// A local pod's `imagePullSecrets` name a Secret in /etc/pods.d: podunit-sync pulls with it, at
/// the first pull and at the `Always` pull of a later start, as the kubelet pulls an API pod's
/// image with its secrets. The node itself has no credentials: a pod without the secret is
/// refused by the registry (ErrImagePull, then ImagePullBackOff).
#[test]
fn local_pods_pull_with_their_image_pull_secrets() {
    use base64::Engine;
    let m = Machine::boot("images-secrets");
    let images = Images::start_in(&m, "secrets");
    images.configure_node_without_credentials(&m);
    start_sync(&m);
    let auth = registry::config_json(&images.reg.host, USER, PASSWORD);
    let encoded = base64::engine::general_purpose::STANDARD.encode(auth);
    m.write(
        "/etc/pods.d/regcred.yaml",
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {encoded}\n"
        )
        .as_bytes(),
    );
    m.write(
        "/etc/pods.d/private.yaml",
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: private\nspec:\n  imagePullSecrets:\n  - name: regcred\n  containers:\n  - name: main\n    image: busybox\n    command: [sh, -c, 'if test -e /etc/podunit-v2; then echo running-v2; else echo running-v1; fi; exec sleep 100000']\n",
    );
    m.write(
        "/etc/pods.d/nocreds.yaml",
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: nocreds\nspec:\n  containers:\n  - name: main\n    image: debian\n    command: [sleep, '100000']\n",
    );
    m.daemon_reload();
    let unit = ctr_unit("default", "private", "main");
    m.wait_for("the private image pulled with the secret", SOON * 3, || {
        journal(&m, &unit).contains("running-v1").then_some(())
    });
    m.wait_for("nocreds to show ImagePullBackOff", SOON * 2, || {
        let table = m.sh_ok("podunit status");
        (status_row(&table, "nocreds")[3] == "ImagePullBackOff").then_some(())
    });
    let sync = m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service");
    assert!(
        sync.contains("pulling image \"debian\" failed")
            && sync.contains("pull access denied")
            && sync.contains("no credentials for it"),
        "the node has no credentials of its own:\n{sync}"
    );

    // The tag moves; at the container's next start the Always pull uses the secret again.
    let sync = move_tag_and_restart(&m, &images, &unit);
    assert!(
        !sync.contains(PASSWORD),
        "the secret's password is not logged"
    );
    let plans = m.sh_ok("cat /run/systemd/generator/podunit/*.json");
    assert!(plans.contains("regcred"), "the plan names the secret");
    assert!(
        !plans.contains(&encoded) && !plans.contains(PASSWORD),
        "never its value"
    );
}

/// An image's device nodes and setuid files are the image's, not the host's: a container that is
/// not privileged can open none of them, nor any host device beyond a runtime's default list,
/// and its root is `nosuid` where it may not gain privileges. A privileged container keeps both,
/// as under a container runtime.
#[test]
fn an_images_device_nodes_never_reach_the_host() {
    let dir = std::env::temp_dir().join(format!("podunit-images-e2e-{}-dev", std::process::id()));
    let evil = oci::image(
        host_arch(),
        &[Layer {
            tar: busybox_root(&mut |t| {
                // 0666 nodes: a loop disk and a second /dev/null, which any process could open
                // if the kernel let it.
                t.dir("evil/")
                    .device("evil/disk", b'4', 7, 0, 0o666)
                    .device("evil/null", b'3', 1, 3, 0o666);
            }),
            comp: Comp::Gzip,
            declared_size: None,
        }],
        serde_json::json!({"Env": [PATH]}),
    );
    let (reg, certs) = Registry::serving(&dir, None, &[("evil/devices", "1", &evil)]);
    let m = Machine::boot("images-devices");
    let client = Client::new(
        registry::settings(&reg.host, &certs.ca()),
        registry::keyring(&reg.host, USER, PASSWORD),
    );
    let store = Store::open(m.dir().join("root/var/lib/podunit/store"));
    registry::pull(&store, &client, "evil/devices:1").unwrap();
    // Each container tries to open each node and says what the kernel answered.
    // (No scratch file: the pod's containers share one /tmp, and a root-owned file there would
    // not be the non-root container's to write.)
    let script = "for f in /evil/disk /evil/null /dev/null /dev/net/tun; do \
                  if err=$(cat $f 2>&1 > /dev/null < /dev/null); then echo \"$f: opened\"; \
                  else echo \"$f: $err\"; fi; done; echo done; exec sleep 1000";
    let container = |name: &str, sc: &str| {
        format!(
            "  - name: {name}\n    image: evil/devices:1\n    command: [sh, -c, {script:?}]\n    securityContext: {sc}\n"
        )
    };
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: devices\nspec:\n  containers:\n{}{}{}",
        container("user", "{runAsUser: 1000}"),
        container("root", "{allowPrivilegeEscalation: false}"),
        container("privileged", "{privileged: true}"),
    );
    m.write("/etc/pods.d/devices.yaml", pod.as_bytes());
    start_pods(&m);
    // The container's own output: its process's journal entries, not the unit's (systemd's
    // messages about the unit name the files too).
    let said = |c: &str| {
        let unit = ctr_unit("default", "devices", c);
        m.wait_for(&format!("{c} to finish its checks"), SOON, || {
            let out = m.sh_ok(&format!(
                "journalctl --no-pager -o cat _SYSTEMD_UNIT={unit}"
            ));
            out.contains("done\n").then_some(out)
        })
    };
    let denied = "Permission denied"; // nodev: the mount refuses device nodes (EACCES)
    let cgroup = "Operation not permitted"; // DevicePolicy=closed: the device cgroup (EPERM)
    let user = said("user");
    let root = said("root");
    for (who, out) in [("user", &user), ("root", &root)] {
        for node in ["/evil/disk", "/evil/null"] {
            let want = format!("{node}: cat: can't open '{node}': {denied}");
            assert!(out.contains(&want), "{who}: {want}\n{out}");
        }
        assert!(out.contains("/dev/null: opened"), "{who}: {out}");
    }
    // The host's /dev is in sight (systemd binds it into the root), its devices are not: a root
    // container with CAP_DAC_OVERRIDE still cannot open /dev/net/tun.
    assert!(
        root.contains(&format!(
            "/dev/net/tun: cat: can't open '/dev/net/tun': {cgroup}"
        )),
        "{root}"
    );
    let privileged = said("privileged");
    assert!(privileged.contains("/evil/null: opened"), "{privileged}");

    // The roots' mount flags, from each main process's own mount table.
    let root_flags = |c: &str| {
        let pid = m.prop(&ctr_unit("default", "devices", c), "MainPID");
        let table = m.sh_ok(&format!("cat /proc/{pid}/mountinfo"));
        let line = table
            .lines()
            .find(|l| l.split(' ').nth(4) == Some("/"))
            .unwrap_or_else(|| panic!("no / in {c}'s mount table:\n{table}"))
            .to_string();
        line.split(' ').nth(5).unwrap().to_string()
    };
    let has = |flags: &str, f: &str| flags.split(',').any(|x| x == f);
    let (u, r, p) = (
        root_flags("user"),
        root_flags("root"),
        root_flags("privileged"),
    );
    assert!(has(&u, "nodev") && !has(&u, "nosuid"), "user: {u}");
    assert!(has(&r, "nodev") && has(&r, "nosuid"), "root: {r}");
    assert!(!has(&p, "nodev") && !has(&p, "nosuid"), "privileged: {p}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `app` fixed: the shell image with the `/bin/app` its pod runs.
fn app_fixed() -> oci::Image {
    shell_image_plus(
        TarBuilder::new()
            .dir("bin/")
            .file(
                "bin/app",
                b"#!/bin/sh\necho app-fixed\nexec sleep 100000\n",
                0o755,
            )
            .finish(),
    )
}

/// `podunit status POD -o json` as JSON.
fn status_json(m: &Machine, pod: &str) -> serde_json::Value {
    let out = m.sh_ok(&format!("podunit status {pod} -o json"));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A local pod whose image lacks its command, on real systemd and a real registry:
/// - before podunit-sync has looked at it, right after the reload, it is Pending
///   (`ContainerCreating`) with its manifest as its source and an age, as the kubelet shows a
///   static pod pulling its image;
/// - systemd cannot exec the command (203/EXEC): the container is a `StartError` with exit code
///   128 and the runtime's message, as containerd reports a task that did not start;
/// - every start attempt of its `Always` image pulls again, failed ones included, so the fixed
///   image pushed under the same tag ends the crash loop;
/// - a crash-looping pod whose manifest changes is a new pod: its restarts count from 0.
#[test]
fn a_pod_that_cannot_start_says_why_pulls_at_each_attempt_and_recovers() {
    let m = Machine::boot("images-start-error");
    let images = Images::start_in(&m, "start-error");
    images.configure_node(&m);
    registry::in_machine_network(&m, || {
        images.reg.push("library/app", "latest", &shell_image())
    });
    let app = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: app\nspec:\n  containers:\n  - name: main\n    image: app\n    command: [/bin/app]\n";
    let looping = |command: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: looping\nspec:\n  containers:\n  - name: main\n    image: debian\n    command: {command}\n"
        )
    };
    m.write("/etc/pods.d/app.yaml", app);
    m.write(
        "/etc/pods.d/looping.yaml",
        looping("[/bin/missing]").as_bytes(),
    );
    // podunit-sync stopped: what the reload left is all there is to see.
    m.sh_ok("systemctl stop podunit-sync.service");
    m.daemon_reload();
    let table = m.sh_ok("podunit status");
    let row = status_row(&table, "app");
    assert_eq!(
        (row[2].as_str(), row[3].as_str(), row[6].as_str()),
        ("0/1", "ContainerCreating", "etc"),
        "{table}"
    );
    assert_ne!(row[5], "<unknown>", "{table}");
    let one = m.sh_ok("podunit status app");
    assert!(
        one.contains("Source:      etc (/etc/pods.d/app.yaml)"),
        "{one}"
    );
    let j = status_json(&m, "app");
    assert_eq!(
        (j["source"].as_str(), j["phase"].as_str()),
        (Some("etc"), Some("Pending")),
        "{j}"
    );

    start_sync(&m);
    let unit = ctr_unit("default", "app", "main");
    // Checked while systemd waits to try again (RestartSec=), not in the instant of an attempt.
    m.wait_for("app to fail its starts", SOON * 3, || {
        (m.prop(&unit, "NRestarts").parse::<u32>().unwrap_or(0) >= 1
            && m.prop(&unit, "SubState") == "auto-restart")
            .then_some(())
    });
    assert_eq!(m.prop(&unit, "ExecMainStatus"), "203", "systemd's 203/EXEC");
    let j = status_json(&m, "app");
    let last = &j["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(
        (last["reason"].as_str(), last["exitCode"].as_i64()),
        (Some("StartError"), Some(128)),
        "{j}"
    );
    let message = last["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("exec: \"/bin/app\": stat /bin/app: no such file or directory")
            && message.contains("203/EXEC"),
        "{j}"
    );
    let one = m.sh_ok("podunit status app");
    assert!(
        one.contains("Message:     container main: StartError: exec: \"/bin/app\""),
        "{one}"
    );
    let logs = m.sh_ok("podunit logs app 2>&1");
    assert!(
        logs.contains("container \"main\" did not start: StartError: exec: \"/bin/app\""),
        "{logs}"
    );
    let sync = m.sh_ok("journalctl -b --no-pager -o cat -u podunit-sync.service");
    assert!(
        sync.contains("asking the registry for image \"app\" again"),
        "a start that failed is a start: the next one pulls first\n{sync}"
    );

    // The fixed image under the same tag: a start attempt pulls it and the pod runs it.
    registry::in_machine_network(&m, || {
        images.reg.push("library/app", "latest", &app_fixed())
    });
    m.wait_for("the fixed image running", SOON * 4, || {
        (journal(&m, &unit).contains("app-fixed") && m.prop(&unit, "ActiveState") == "active")
            .then_some(())
    });

    // The other pod crash-loops; its manifest changes: a new pod, whose restarts count from 0.
    let other = ctr_unit("default", "looping", "main");
    m.wait_for("looping to have restarted", SOON * 2, || {
        (m.prop(&other, "NRestarts").parse::<u32>().unwrap_or(0) >= 1).then_some(())
    });
    m.write(
        "/etc/pods.d/looping.yaml",
        looping("[sh, -c, 'echo fixed-manifest; exec sleep 100000']").as_bytes(),
    );
    m.daemon_reload();
    m.wait_for("the changed pod running", SOON * 2, || {
        (journal(&m, &other).contains("fixed-manifest")
            && m.prop(&other, "ActiveState") == "active")
            .then_some(())
    });
    let table = m.sh_ok("podunit status");
    let row = status_row(&table, "looping");
    assert_eq!(
        (row[3].as_str(), row[4].as_str()),
        ("Running", "0"),
        "{table}"
    );
}

/// security/security-context.yaml, unchanged, from the registry: runAsUser 1000 and no
/// runAsGroup (so group 0, the group procfs's hidepid would have exempted), fsGroup 2000 on an
/// emptyDir. The container sees its own processes only, its emptyDir is the fsGroup's with the
/// setgid bit, and the fsGroup is among its groups, as under a kubelet.
#[test]
fn security_context_demo_is_isolated_and_owns_its_volume() {
    let dir =
        std::env::temp_dir().join(format!("podunit-images-e2e-{}-secctx", std::process::id()));
    // The sample's image runs a long-lived server from its Cmd; this one sleeps.
    let image = oci::image(
        host_arch(),
        &[Layer {
            tar: busybox_root(&mut |_| {}),
            comp: Comp::Gzip,
            declared_size: None,
        }],
        serde_json::json!({"Env": [PATH], "Cmd": ["sleep", "100000"]}),
    );
    let (reg, certs) =
        Registry::serving(&dir, None, &[("google-samples/node-hello", "1.0", &image)]);
    let m = Machine::boot("images-secctx");
    let mut settings = registry::settings(&reg.host, &certs.ca());
    settings
        .mirrors
        .insert("gcr.io".to_string(), vec![reg.host.clone()]);
    let client = Client::new(settings, registry::keyring(&reg.host, USER, PASSWORD));
    let store = Store::open(m.dir().join("root/var/lib/podunit/store"));
    registry::pull(&store, &client, "gcr.io/google-samples/node-hello:1.0").unwrap();
    m.write(
        "/etc/pods.d/security-context.yaml",
        &corpus("security/security-context.yaml"),
    );
    start_pods(&m);
    let unit = ctr_unit("default", "security-context-demo", "sec-ctx-demo");
    wait_state(&m, &unit, &["active"]);
    // The command runs as the first process of the container's PID namespace, a child of the
    // unit's main process (which holds the namespace).
    let main = m.prop(&unit, "MainPID");
    let child = m.wait_for("the container's first process", SOON, || {
        let c = m.sh_ok(&format!("cat /proc/{main}/task/{main}/children"));
        let c = c.split_whitespace().next()?.to_string();
        m.sh_ok(&format!("cat /proc/{c}/cmdline"))
            .starts_with("sleep")
            .then_some(c)
    });
    let status = m.sh_ok(&format!("cat /proc/{child}/status"));
    let field = |f: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{f}:")))
            .unwrap_or_else(|| panic!("{f} in {status}"))
            .trim()
            .to_string()
    };
    assert_eq!(field("Uid"), "1000\t1000\t1000\t1000");
    assert_eq!(field("Gid"), "0\t0\t0\t0", "no runAsGroup: group 0");
    assert!(
        field("Groups").split_whitespace().any(|g| g == "2000"),
        "fsGroup among the groups: {status}"
    );
    // What the container's /proc shows: its own process, nothing of the machine's.
    let pids = m.sh_ok(&format!(
        "ls /proc/{child}/root/proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '"
    ));
    assert_eq!(pids.trim(), "1", "only itself, as PID 1");
    // The emptyDir: group fsGroup, setgid, writable by all, as the kubelet makes it.
    assert_eq!(
        m.sh_ok(&format!("stat -c '%a %g' /proc/{child}/root/data/demo"))
            .trim(),
        "2777 2000"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
