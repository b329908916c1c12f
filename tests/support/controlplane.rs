//! A real Kubernetes control plane for the cluster suites: etcd (Debian's etcd-server) and a
//! kube-apiserver built from Debian's `kubernetes` source package by tests/controlplane/install.sh,
//! both running in a machine's network namespace (tests/support/nspawn.rs), so podunit-sync in the
//! machine reaches them on its loopback and tests running in parallel never share a port.
//!
//! Every control plane has its own directory (certificates made here with the openssl CLI, etcd's
//! data, logs) and is killed on Drop. The API server runs with client-certificate authentication,
//! `--authorization-mode=Node,RBAC`, the NodeRestriction admission plugin and service-account
//! signing keys, as a production cluster does. There is no controller manager by default: what
//! its controllers would make and the suites need (the `default` ServiceAccount, the
//! `kube-root-ca.crt` ConfigMap) is created here; a test that needs certificates signed starts
//! one with only its CSR signer ([`ControlPlane::start_controller_manager`]). Nothing skips: a missing binary fails the test
//! and names the install script.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use podunit::kube::client::{self, Client};
use podunit::kube::kubeconfig::Credentials;
use serde_json::json;

use super::nspawn::Machine;
use super::run_ok;

/// Where tests/controlplane/install.sh puts the kube-apiserver; `PODUNIT_TEST_KUBERNETES` overrides.
pub const DEFAULT_KUBERNETES: &str = "/var/cache/podunit-test/kubernetes-v1.20.2";
/// The stamp the install script writes last.
const STAMP: &str = ".podunit-kubernetes-v1";
/// Inside the machine's network namespace (its own loopback): fixed ports never collide.
pub const API_PORT: u16 = 6443;
const ETCD_CLIENT: &str = "http://127.0.0.1:2379";
const ETCD_PEER: &str = "http://127.0.0.1:2380";
/// Where the node's kubeconfig goes inside the machine.
pub const NODE_KUBECONFIG: &str = "/etc/podunit/node.kubeconfig";
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// The user the API server is when it calls a kubelet.
pub const KUBELET_CLIENT: &str = "kube-apiserver-kubelet-client";

fn kubernetes_dir() -> PathBuf {
    std::env::var_os("PODUNIT_TEST_KUBERNETES")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KUBERNETES))
}

/// The kube-apiserver binary; fails (never skips) when it was not built.
pub fn kube_apiserver() -> PathBuf {
    built("kube-apiserver")
}

/// kube-proxy, built from the same source as the API server.
pub fn kube_proxy() -> PathBuf {
    built("kube-proxy")
}

/// The kubectl the suites run (the machine's, or the one the install script built).
pub fn kubectl_binary() -> PathBuf {
    tool("kubectl")
}

/// A binary the install script builds; fails (never skips) when it is not there.
fn built(name: &str) -> PathBuf {
    let dir = kubernetes_dir();
    assert!(
        dir.join(STAMP).exists() && dir.join(name).exists(),
        "no {name} at {}: run tests/controlplane/install.sh (as root; it builds it once \
         from Debian's kubernetes source package, 10 minutes or more)",
        dir.display()
    );
    dir.join(name)
}

fn tool(name: &str) -> PathBuf {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .expect("run sh");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !path.is_empty(),
        "{name} not found: run tests/controlplane/install.sh"
    );
    PathBuf::from(path)
}

/// A certificate authority and the certificates signed by it, made with the openssl CLI.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: PathBuf) -> Pki {
        fs::create_dir_all(&dir).unwrap();
        let pki = Pki { dir };
        run_ok(
            pki.openssl()
                .args(["req", "-x509", "-nodes", "-days", "2"])
                .args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
                .args([
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-subj",
                    "/CN=podunit-test-ca",
                ]),
        );
        pki
    }

    fn openssl(&self) -> Command {
        let mut c = Command::new("openssl");
        c.current_dir(&self.dir);
        c
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn read(&self, file: &str) -> Vec<u8> {
        fs::read(self.path(file)).unwrap_or_else(|e| panic!("read {file}: {e}"))
    }

    /// `name.crt` and `name.key` for `subject`, with the given extensions.
    fn issue(&self, name: &str, subject: &str, ext: &str) {
        let (key, csr, crt, cnf) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        fs::write(
            self.path(&cnf),
            format!("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n{ext}\n"),
        )
        .unwrap();
        run_ok(
            self.openssl()
                .args(["req", "-new", "-nodes"])
                .args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
                .args(["-keyout", &key, "-out", &csr, "-subj", subject]),
        );
        run_ok(
            self.openssl()
                .args(["x509", "-req", "-days", "2", "-in", &csr])
                .args(["-CA", "ca.crt", "-CAkey", "ca.key", "-CAserial", "ca.srl"])
                .args(["-CAcreateserial", "-out", &crt, "-extfile", &cnf]),
        );
    }

    fn client(&self, name: &str, cn: &str, org: &str) {
        self.issue(
            name,
            &format!("/O={org}/CN={cn}"),
            "extendedKeyUsage=clientAuth",
        );
    }
}

/// How the API server is set up; [`Default`] is a production-like cluster.
#[derive(Clone)]
pub struct Options {
    /// `--authorization-mode`.
    pub authorization: String,
    /// An address of the machine's the API server listens on and advertises, so that the
    /// `kubernetes` Service has it as its endpoint (pods reach the API server through its
    /// ClusterIP). None: loopback only, and the Service without endpoints.
    pub advertise: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            authorization: "Node,RBAC".into(),
            advertise: None,
        }
    }
}

/// etcd and kube-apiserver in a machine's network namespace. Dropping it kills both.
pub struct ControlPlane {
    pub dir: PathBuf,
    pub node: String,
    netns: PathBuf,
    opts: Options,
    pki: Pki,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    controller_manager: Option<Child>,
    /// Controller managers with other controllers (endpoints, node IPAM).
    more_controllers: Vec<Child>,
    /// How many times the API server was started (names its log files).
    starts: usize,
}

impl ControlPlane {
    /// Starts etcd and the API server for `node` in `m`'s network, waits until the API server is
    /// ready, creates what the controllers would, and writes the node's kubeconfig into the machine
    /// ([`NODE_KUBECONFIG`]).
    pub fn start(m: &Machine, node: &str) -> ControlPlane {
        ControlPlane::start_with(m, node, Options::default())
    }

    pub fn start_with(m: &Machine, node: &str, opts: Options) -> ControlPlane {
        let apiserver = kube_apiserver();
        let dir = m.dir().join("controlplane");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let pki = Pki::new(dir.join("pki"));
        pki.issue(
            "apiserver",
            "/CN=kube-apiserver",
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,\
             DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1",
        );
        pki.client("admin", "podunit-test-admin", "system:masters");
        pki.client("node", &format!("system:node:{node}"), "system:nodes");
        // How the API server authenticates to kubelets (`--kubelet-client-certificate`); RBAC
        // gives it system:kubelet-api-admin in `bootstrap`.
        pki.issue(
            "kubelet-client",
            &format!("/CN={KUBELET_CLIENT}"),
            "extendedKeyUsage=clientAuth",
        );
        run_ok(pki.openssl().args([
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-out",
            "sa.key",
        ]));
        run_ok(
            pki.openssl()
                .args(["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"]),
        );
        assert!(apiserver.exists(), "{} missing", apiserver.display());
        let mut cp = ControlPlane {
            dir,
            node: node.to_string(),
            netns: PathBuf::from(format!("/proc/{}/ns/net", m.leader())),
            opts,
            pki,
            etcd: None,
            apiserver: None,
            controller_manager: None,
            more_controllers: Vec::new(),
            starts: 0,
        };
        cp.start_etcd();
        cp.start_apiserver();
        cp.bootstrap();
        m.write(NODE_KUBECONFIG, cp.kubeconfig("node").as_bytes());
        m.sh_ok(&format!("chmod 0600 {NODE_KUBECONFIG}"));
        cp
    }

    /// A command run in the machine's network namespace (the host's other namespaces).
    fn in_net(&self, program: &Path) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.netns.display()))
            .arg("--")
            .arg(program)
            .stdin(Stdio::null());
        c
    }

    fn log(&self, name: &str) -> fs::File {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(name))
            .unwrap()
    }

    fn start_etcd(&mut self) {
        let data = self.dir.join("etcd");
        let log = self.log("etcd.log");
        let child = self
            .in_net(&tool("etcd"))
            .arg(format!("--data-dir={}", data.display()))
            .args(["--name=default", "--listen-client-urls", ETCD_CLIENT])
            .args(["--advertise-client-urls", ETCD_CLIENT])
            .args(["--listen-peer-urls", ETCD_PEER])
            .args(["--initial-advertise-peer-urls", ETCD_PEER])
            .arg(format!("--initial-cluster=default={ETCD_PEER}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn etcd");
        self.etcd = Some(child);
    }

    /// Starts (or starts again, after [`Self::kill_apiserver`]) the API server and waits until it
    /// is ready.
    pub fn start_apiserver(&mut self) {
        self.starts += 1;
        let log = self.log(&format!("kube-apiserver-{}.log", self.starts));
        let p = |f: &str| self.pki.path(f).display().to_string();
        let mut cmd = self.in_net(&kube_apiserver());
        match &self.opts.advertise {
            Some(addr) => cmd
                .arg("--bind-address=0.0.0.0")
                .arg(format!("--advertise-address={addr}")),
            // Loopback is its only address, which may not be an Endpoints address.
            None => cmd
                .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
                .arg("--endpoint-reconciler-type=none"),
        };
        let child = cmd
            .arg(format!("--secure-port={API_PORT}"))
            .arg("--insecure-port=0")
            .arg(format!("--etcd-servers={ETCD_CLIENT}"))
            .arg(format!("--cert-dir={}", self.dir.join("certs").display()))
            .arg(format!("--tls-cert-file={}", p("apiserver.crt")))
            .arg(format!("--tls-private-key-file={}", p("apiserver.key")))
            .arg(format!("--client-ca-file={}", p("ca.crt")))
            .arg(format!("--authorization-mode={}", self.opts.authorization))
            .arg("--enable-admission-plugins=NodeRestriction")
            // As kubeadm runs it: node components (kube-proxy) are privileged pods.
            .arg("--allow-privileged=true")
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!("--service-account-key-file={}", p("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                p("sa.key")
            ))
            // The projected kube-api-access volume (bound tokens), on by default from v1.21.
            .arg("--feature-gates=BoundServiceAccountTokenVolume=true")
            .arg("--profiling=false")
            .arg(format!(
                "--kubelet-client-certificate={}",
                p("kubelet-client.crt")
            ))
            .arg(format!("--kubelet-client-key={}", p("kubelet-client.key")))
            // The node reports its loopback address; its host name means nothing here.
            .arg("--kubelet-preferred-address-types=InternalIP,Hostname")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn kube-apiserver");
        self.apiserver = Some(child);
        self.wait_ready();
    }

    /// Starts kube-controller-manager with only its CSR signer (`csrsigning`), signing with the
    /// cluster's CA for `duration` (`--cluster-signing-duration`, e.g. `8m`). Approving is left
    /// to the test (`kubectl certificate approve`), as no controller approves serving
    /// certificates. The signer backdates by 5 minutes, so a certificate lives `duration`
    /// from 5 minutes ago.
    pub fn start_controller_manager(&mut self, duration: &str) {
        let p = |f: &str| self.pki.path(f).display().to_string();
        let signing = [
            format!("--cluster-signing-cert-file={}", p("ca.crt")),
            format!("--cluster-signing-key-file={}", p("ca.key")),
            format!("--cluster-signing-duration={duration}"),
        ];
        let child = self.controllers("kube-controller-manager.log", "csrsigning", &signing);
        self.controller_manager = Some(child);
    }

    /// Starts kube-controller-manager with only the controllers that keep Services' endpoints
    /// (`endpoint`, `endpointslice`), as kube-proxy needs them.
    pub fn start_endpoint_controllers(&mut self) {
        let child = self.controllers(
            "kube-controller-manager-endpoints.log",
            "endpoint,endpointslice",
            &[],
        );
        self.more_controllers.push(child);
    }

    /// Starts kube-controller-manager with only its node IPAM controller, giving each Node a
    /// `podCIDR` out of `cluster_cidr` (`--allocate-node-cidrs`, /24 per node).
    pub fn start_node_ipam(&mut self, cluster_cidr: &str) {
        let flags = [
            "--allocate-node-cidrs=true".to_string(),
            format!("--cluster-cidr={cluster_cidr}"),
            "--node-cidr-mask-size=24".to_string(),
        ];
        let child = self.controllers("kube-controller-manager-nodeipam.log", "nodeipam", &flags);
        self.more_controllers.push(child);
    }

    /// A kube-controller-manager running `controllers` (with `extra` flags) as the cluster's
    /// admin, logging to `log_name`.
    fn controllers(&self, log_name: &str, controllers: &str, extra: &[String]) -> Child {
        let admin = self.dir.join("admin.kubeconfig");
        if !admin.exists() {
            fs::write(&admin, self.kubeconfig("admin")).unwrap();
        }
        let log = self.log(log_name);
        self.in_net(&built("kube-controller-manager"))
            .arg(format!("--kubeconfig={}", admin.display()))
            .arg(format!("--controllers={controllers}"))
            .args(extra)
            .args(["--leader-elect=false", "--port=0", "--secure-port=0"])
            .arg("--profiling=false")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn kube-controller-manager")
    }

    /// Kills the API server (SIGKILL), leaving etcd; connections to it are refused until
    /// [`Self::start_apiserver`].
    pub fn kill_apiserver(&mut self) {
        if let Some(mut c) = self.apiserver.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let out = self
                .kubectl()
                .args(["get", "--raw", "/readyz"])
                .stderr(Stdio::null())
                .output()
                .expect("run kubectl");
            if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok" {
                return;
            }
            let exited = |c: &mut Option<Child>| c.as_mut().and_then(|c| c.try_wait().unwrap());
            if let Some(st) = exited(&mut self.etcd) {
                panic!("etcd exited ({st}):\n{}", self.logs());
            }
            if let Some(st) = exited(&mut self.apiserver) {
                panic!("kube-apiserver exited ({st}):\n{}", self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The end of each log, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        let mut names: Vec<_> = fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".log"))
            .collect();
        names.sort();
        for n in names {
            let text = fs::read_to_string(self.dir.join(&n)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            s += &format!("--- {n} ---\n");
            for l in tail.into_iter().rev() {
                s += l;
                s.push('\n');
            }
        }
        s
    }

    /// A kubeconfig with the `name` client certificate (`admin` or `node`), everything inline.
    pub fn kubeconfig(&self, name: &str) -> String {
        let b64 = |f: &str| base64::engine::general_purpose::STANDARD.encode(self.pki.read(f));
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: \
             https://127.0.0.1:{API_PORT}\n    certificate-authority-data: {}\nusers:\n- name: {name}\n  \
             user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: \
             test\n  context:\n    cluster: test\n    user: {name}\ncurrent-context: test\n",
            b64("ca.crt"),
            b64(&format!("{name}.crt")),
            b64(&format!("{name}.key")),
        )
    }

    /// A client certificate and key from the cluster's CA for user `cn` in group `org` (none when
    /// empty): (cert, key) paths on the host.
    pub fn client_cert(&self, name: &str, cn: &str, org: &str) -> (PathBuf, PathBuf) {
        if org.is_empty() {
            self.pki
                .issue(name, &format!("/CN={cn}"), "extendedKeyUsage=clientAuth");
        } else {
            self.pki.client(name, cn, org);
        }
        (
            self.pki.path(&format!("{name}.crt")),
            self.pki.path(&format!("{name}.key")),
        )
    }

    /// The cluster's CA certificate (also the CSR signer's), on the host.
    pub fn ca_cert(&self) -> PathBuf {
        self.pki.path("ca.crt")
    }

    /// A client certificate for `cn` from a CA the cluster does not know.
    pub fn foreign_client_cert(&self, cn: &str) -> (PathBuf, PathBuf) {
        let other = Pki::new(self.dir.join("pki-foreign"));
        other.client("foreign", cn, "system:masters");
        (other.path("foreign.crt"), other.path("foreign.key"))
    }

    /// kubectl (the host's) as the cluster admin, in the machine's network.
    pub fn kubectl(&self) -> Command {
        let cfg = self.dir.join("admin.kubeconfig");
        if !cfg.exists() {
            fs::write(&cfg, self.kubeconfig("admin")).unwrap();
        }
        let mut c = self.in_net(&tool("kubectl"));
        c.arg(format!("--kubeconfig={}", cfg.display()));
        c
    }

    /// Runs kubectl with `args` (and `stdin`), which must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        use std::io::Write;
        let mut c = self.kubectl();
        c.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn kubectl");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn credentials(&self, name: &str) -> Credentials {
        Credentials {
            server: format!("https://127.0.0.1:{API_PORT}"),
            ca_pem: self.pki.read("ca.crt"),
            client_cert: Some((
                self.pki.read(&format!("{name}.crt")),
                self.pki.read(&format!("{name}.key")),
            )),
            token: None,
            token_file: None,
        }
    }

    /// An admin client (call from a thread that joined the machine's network).
    pub fn admin(&self) -> Client {
        Client::new(self.credentials("admin")).unwrap()
    }

    /// A client with the node's own credentials (what podunit-sync uses).
    pub fn node_client(&self) -> Client {
        Client::new(self.credentials("node")).unwrap()
    }

    /// What kube-controller-manager's controllers would make that the suites need: the default
    /// ServiceAccount (pods are refused without it) and the `kube-root-ca.crt` ConfigMap (part of
    /// every kube-api-access volume).
    fn bootstrap(&self) {
        let ca = String::from_utf8(self.pki.read("ca.crt")).unwrap();
        let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "default", "namespace": "default"}},
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "kube-root-ca.crt", "namespace": "default"},
             "data": {"ca.crt": ca}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "kube-apiserver-kubelet-client"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "system:kubelet-api-admin"},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                           "name": KUBELET_CLIENT}]},
        ]});
        self.kubectl_ok(&["create", "-f", "-"], Some(&objects.to_string()));
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for c in self
            .controller_manager
            .take()
            .into_iter()
            .chain(std::mem::take(&mut self.more_controllers))
        {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
        self.kill_apiserver();
        if let Some(mut c) = self.etcd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A pod's phase through `api`; None while it does not exist (or the server is not answering).
pub fn pod_phase(api: &Client, ns: &str, name: &str) -> Option<String> {
    use k8s_openapi::api::core::v1::Pod;
    api.get::<Pod>(&client::path::<Pod>(Some(ns), Some(name)))
        .ok()?
        .status?
        .phase
}
