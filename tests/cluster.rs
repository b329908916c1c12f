//! Cluster mode against the test API server double (tests/fake-apiserver): podunit-sync's node
//! agent with node credentials, over TLS, with systemd replaced by a small simulation of the units
//! (what runs on real systemd is shown by the end-to-end tests).
//!
//! Each test waits for the state it expects with a deadline; none asserts on durations.

use fake_apiserver::{Config as ServerConfig, FakeApiServer};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use podunit::agent::units::{Changes, UnitStates, Units};
use podunit::agent::{self, AgentConfig, IMAGE_NEVER_PULL, Shared};
use podunit::common::config::ClusterTiming;
use podunit::common::paths::Paths;
use podunit::common::policy::Policy;
use podunit::kube::client::{self, Client, DeleteOptions};
use podunit::kube::kubeconfig::{self, OwnerCheck};
use podunit::systemd::unit::{ExitKind, UnitState};
use serde_json::json;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODE: &str = "n1";

// ---------------------------------------------------------------------------------------------
// A simulated systemd: units come up when their pod's spool file appears at a reload. A reload
// runs the real generator (its tree, with the pods' plans, goes where systemd's would) and a pod
// that starts runs the real pod-prepare, so volumes look as on a host.

#[derive(Default)]
struct FakeUnits {
    spool: PathBuf,
    paths: Option<Paths>,
    state: Mutex<HashMap<String, UnitState>>,
    reloads: AtomicU64,
    /// Transient units started (`run_once`): pod-refresh runs.
    runs: AtomicU64,
    /// What the next wait reports: as the D-Bus edge does, the units that changed, and reloads.
    pending: Mutex<Option<Changes>>,
    /// pod unit -> uid of the pod its units belong to (a new pod of the same name starts afresh)
    uids: Mutex<HashMap<String, String>>,
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn running(start: u64) -> UnitState {
    UnitState {
        load_state: "loaded".into(),
        active_state: "active".into(),
        sub_state: "running".into(),
        exec_main_start_us: start,
        active_enter_us: start,
        main_pid: 42,
        ..Default::default()
    }
}

impl FakeUnits {
    fn new(paths: &Paths) -> Arc<FakeUnits> {
        Arc::new(FakeUnits {
            spool: paths.spool(),
            paths: Some(paths.clone()),
            ..Default::default()
        })
    }

    /// What the generator and pod-prepare do at a reload: the tree is rewritten; pods in `starting`
    /// (pod unit -> uid) get their volumes prepared.
    fn generate_and_prepare(&self, starting: &HashMap<String, String>) {
        let paths = self.paths.as_ref().unwrap();
        let catalog = podunit::manifest::Catalog::load(paths);
        let (facts, images, _) = podunit::generate::node_setup(paths);
        let g = podunit::generate::generate(&catalog, &facts, &images);
        let tree = paths.host(podunit::translate::plan::GENERATOR_DIR);
        let _ = std::fs::remove_dir_all(&tree);
        std::fs::create_dir_all(&tree).unwrap();
        assert!(podunit::generate::write_tree(&tree, &g).is_empty());
        for pod in &g.pods {
            let unit = podunit::translate::naming::pod_service(&pod.plan.namespace, &pod.plan.name);
            if starting.get(&unit) == Some(&pod.plan.uid)
                && let Err(e) =
                    podunit::podstart::prepare::prepare(&pod.plan, paths, &catalog, &node_net())
            {
                eprintln!("pod-prepare {unit}: {e}");
            }
        }
    }

    fn signal(&self, c: Changes) {
        self.pending
            .lock()
            .unwrap()
            .get_or_insert(Changes::None)
            .merge(c);
    }

    /// Test hook: change a unit without a signal for it, as a daemon-reload can (a unit whose
    /// file stopped loading, say); only the next reload's listing of the units shows it.
    fn set_unsignalled(&self, unit: &str, f: impl FnOnce(&mut UnitState)) {
        f(self
            .state
            .lock()
            .unwrap()
            .entry(unit.to_string())
            .or_default());
    }

    /// Test hook: change a unit as systemd would, and signal it.
    fn set(&self, unit: &str, f: impl FnOnce(&mut UnitState)) {
        let mut s = self.state.lock().unwrap();
        f(s.entry(unit.to_string()).or_default());
        drop(s);
        self.signal(Changes::Units(BTreeSet::from([unit.to_string()])));
    }

    fn run_once_count(&self) -> u64 {
        self.runs.load(Ordering::SeqCst)
    }

    fn is_running(&self, unit: &str) -> bool {
        self.state
            .lock()
            .unwrap()
            .get(unit)
            .is_some_and(|u| u.active_state == "active")
    }

    fn stop_prefix(&self, pod_unit: &str) {
        let stem = pod_unit.trim_end_matches(".service");
        let mut s = self.state.lock().unwrap();
        let mut stopped = BTreeSet::new();
        for (name, u) in s.iter_mut() {
            if (name == pod_unit || name.starts_with(&format!("{stem}_")))
                && u.active_state == "active"
            {
                u.active_state = "inactive".into();
                u.sub_state = "dead".into();
                u.exec_main_code = ExitKind::Killed;
                u.exec_main_status = 15;
                u.exec_main_exit_us = now_us();
                stopped.insert(name.clone());
            }
        }
        drop(s);
        self.signal(Changes::Units(stopped));
    }
}

impl Units for FakeUnits {
    fn reload(&self) -> Result<(), String> {
        self.reloads.fetch_add(1, Ordering::SeqCst);
        let mut starting = HashMap::new();
        let mut s = self.state.lock().unwrap();
        for e in std::fs::read_dir(&self.spool).map_err(|e| e.to_string())? {
            let path = e.map_err(|e| e.to_string())?.path();
            if path.file_name().unwrap().to_string_lossy().starts_with('.') {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            let docs: Vec<serde_json::Value> =
                serde_saphyr::from_multiple(&text).map_err(|e| e.to_string())?;
            let pod: Pod = serde_json::from_value(docs[0].clone()).map_err(|e| e.to_string())?;
            let ns = pod.metadata.namespace.clone().unwrap();
            let name = pod.metadata.name.clone().unwrap();
            let start = now_us();
            let pu = podunit::translate::naming::pod_service(&ns, &name);
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let mut uids = self.uids.lock().unwrap();
            if uids.get(&pu) != Some(&uid) {
                let stem = pu.trim_end_matches(".service").to_string();
                s.retain(|n, _| n != &pu && !n.starts_with(&format!("{stem}_")));
                uids.insert(pu.clone(), uid);
            }
            drop(uids);
            if !s.contains_key(&pu) {
                starting.insert(pu.clone(), pod.metadata.uid.clone().unwrap_or_default());
            }
            s.entry(pu).or_insert_with(|| UnitState {
                sub_state: "exited".into(),
                ..running(start)
            });
            let spec = pod.spec.unwrap();
            for c in spec.init_containers.iter().flatten() {
                let u = podunit::translate::naming::container_service(&ns, &name, &c.name);
                s.entry(u).or_insert_with(|| UnitState {
                    sub_state: "exited".into(),
                    exec_main_code: ExitKind::Exited,
                    exec_main_exit_us: start,
                    ..running(start)
                });
            }
            for c in &spec.containers {
                let u = podunit::translate::naming::container_service(&ns, &name, &c.name);
                s.entry(u).or_insert_with(|| running(start));
            }
        }
        drop(s);
        self.generate_and_prepare(&starting);
        self.signal(Changes::Reloaded(BTreeSet::new()));
        Ok(())
    }

    fn props(&self, units: &[String]) -> Result<HashMap<String, UnitState>, String> {
        let s = self.state.lock().unwrap();
        Ok(units
            .iter()
            .filter_map(|u| s.get(u).map(|p| (u.clone(), p.clone())))
            .collect())
    }

    fn stop(&self, units: &[String], _kill: bool) -> Result<(), String> {
        for u in units {
            self.stop_prefix(u);
        }
        Ok(())
    }

    fn wait_change(&self, timeout: Duration) -> bool {
        self.wait_changes(timeout) != Changes::None
    }

    fn wait_changes(&self, timeout: Duration) -> Changes {
        std::thread::sleep(timeout.min(Duration::from_millis(50)));
        self.pending.lock().unwrap().take().unwrap_or(Changes::None)
    }

    fn states(&self) -> Option<HashMap<String, UnitStates>> {
        let s = self.state.lock().unwrap();
        Some(
            s.iter()
                .map(|(name, u)| {
                    let states = (
                        u.load_state.clone(),
                        u.active_state.clone(),
                        u.sub_state.clone(),
                    );
                    (name.clone(), states)
                })
                .collect(),
        )
    }

    /// As systemd would (synchronously here): this build's podunit, under the test root.
    fn run_once(&self, name: &str, _description: &str, argv: &[String]) -> Result<(), String> {
        assert_eq!(argv[0], Paths::PODUNIT_BIN, "{name}: {argv:?}");
        self.runs.fetch_add(1, Ordering::SeqCst);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_podunit"))
            .args(&argv[1..])
            .env("PODUNIT_ROOT", &self.paths.as_ref().unwrap().root)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            eprintln!("{name}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Harness

struct Env {
    server: FakeApiServer,
    admin: Client,
    root: PathBuf,
    units: Arc<FakeUnits>,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    cfg: AgentConfig,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.server.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Env {
    /// What the agent left for `podunit status` about pod `name`, if anything.
    fn held(&self, name: &str) -> Option<podunit::status::waiting::Record> {
        podunit::status::waiting::read_all(&self.cfg.paths)
            .unwrap()
            .into_iter()
            .find(|r| r.name == name)
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("podunit-cluster-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn client_from(kubeconfig: &Path) -> Client {
    let me = OwnerCheck {
        uid: std::fs::metadata(kubeconfig)
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap(),
    };
    Client::new(kubeconfig::load(kubeconfig, me).unwrap()).unwrap()
}

fn start(name: &str, policy: Policy, tweak: impl FnOnce(ServerConfig) -> ServerConfig) -> Env {
    start_timed(name, policy, tweak, |t| t)
}

fn start_timed(
    name: &str,
    policy: Policy,
    tweak: impl FnOnce(ServerConfig) -> ServerConfig,
    timing: impl FnOnce(ClusterTiming) -> ClusterTiming,
) -> Env {
    let root = scratch(name);
    let server =
        FakeApiServer::start(tweak(ServerConfig::new(root.join("api")).node(NODE))).unwrap();
    let admin = client_from(&root.join("api/admin.kubeconfig"));
    let node_client = client_from(&server.node_kubeconfig(NODE));
    let paths = Paths::with_root(root.join("host"));
    std::fs::create_dir_all(paths.spool()).unwrap();
    let units = FakeUnits::new(&paths);
    let cfg = AgentConfig {
        node_name: NODE.into(),
        timing: timing(ClusterTiming {
            lease_renew_seconds: 1,
            node_status_report_seconds: 2,
            reload_debounce_millis: 500,
            max_backoff_seconds: 2,
            ..ClusterTiming::default()
        }),
        policy,
        labels: Default::default(),
        taints: Vec::new(),
        paths,
        node_ip: Some("127.0.0.1".into()),
        runtime_version: "systemd://test".into(),
        kubelet_port: 0,
        cni_conf_dir: None,
        cni_pod_subnet: None,
    };
    let shared = Arc::new(Shared::default());
    let thread = spawn_agent(node_client, cfg.clone(), &units, &shared);
    Env {
        server,
        admin,
        root,
        units,
        shared,
        thread: Some(thread),
        cfg,
    }
}

fn spawn_agent(
    client: Client,
    cfg: AgentConfig,
    units: &Arc<FakeUnits>,
    shared: &Arc<Shared>,
) -> std::thread::JoinHandle<()> {
    let (u, s) = (units.clone() as Arc<dyn Units>, shared.clone());
    std::thread::spawn(move || {
        agent::run(client, cfg, u, s).unwrap();
    })
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Env {
    /// Stops the agent and starts a new one on the same host state, as a restart of podunit-sync
    /// does (the fake systemd keeps its units running meanwhile).
    fn restart_agent(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.shared = Arc::new(Shared::default());
        let client = client_from(&self.server.node_kubeconfig(NODE));
        self.thread = Some(spawn_agent(
            client,
            self.cfg.clone(),
            &self.units,
            &self.shared,
        ));
    }

    /// TokenRequests the API server has answered so far.
    fn token_requests(&self) -> usize {
        self.server
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/token"))
            .count()
    }

    fn spool_file(&self, name: &str) -> PathBuf {
        self.root
            .join(format!("host/var/lib/podunit/spool/default_{name}.yaml"))
    }

    fn create_pod(&self, name: &str, spec: serde_json::Value) -> Pod {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec});
        self.admin
            .create(&client::path::<Pod>(Some("default"), None), &pod)
            .unwrap()
    }

    fn get_pod(&self, name: &str) -> Option<Pod> {
        match self
            .admin
            .get::<Pod>(&client::path::<Pod>(Some("default"), Some(name)))
        {
            Ok(p) => Some(p),
            Err(e) if e.is_not_found() => None,
            Err(e) => panic!("{e}"),
        }
    }

    /// Pod `name` runs after a wait: spooled, and nothing is held back for `podunit status`.
    fn runs_once_held_no_more(&self, name: &str) {
        self.wait_phase(name, "Running");
        assert!(self.spool_file(name).exists(), "{name} is spooled");
        assert!(
            self.held(name).is_none(),
            "{name} spooled: nothing held back any more"
        );
    }

    fn wait_phase(&self, name: &str, phase: &str) -> Pod {
        wait_for(&format!("{name} in phase {phase}"), || {
            self.get_pod(name)
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase))
        })
    }
}

fn simple(cmd: &str) -> serde_json::Value {
    json!({"nodeName": NODE, "containers": [{"name": "app", "image": "host", "command": ["/bin/sh", "-c", cmd]}]})
}

fn app_unit(pod: &str) -> String {
    podunit::translate::naming::container_service("default", pod, "app")
}

// ---------------------------------------------------------------------------------------------

#[test]
fn registers_the_node_and_renews_its_lease() {
    let env = start("node", Policy::default(), |c| c);
    let node: Node = wait_for("the Node", || {
        env.admin
            .get::<Node>(&client::path::<Node>(None, Some(NODE)))
            .ok()
    });
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], NODE);
    assert_eq!(labels["kubernetes.io/os"], "linux");
    let st = node.status.unwrap();
    assert!(st.node_info.unwrap().kubelet_version.contains("podunit"));
    assert_eq!(st.capacity.as_ref().unwrap()["pods"].0, "110");
    let ready = wait_for("Ready=True", || {
        let n = env
            .admin
            .get::<Node>(&client::path::<Node>(None, Some(NODE)))
            .ok()?;
        n.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "True")
    });
    assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
    let lease_path = client::path::<Lease>(Some("kube-node-lease"), Some(NODE));
    let first: Lease = wait_for("the Lease", || env.admin.get(&lease_path).ok());
    let spec = first.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(NODE));
    assert_eq!(
        first.metadata.owner_references.unwrap()[0].kind,
        "Node",
        "the Lease is owned by the Node"
    );
    let t0 = spec.renew_time.unwrap().0;
    wait_for("a renewed Lease", || {
        let l: Lease = env.admin.get(&lease_path).ok()?;
        (l.spec?.renew_time?.0 > t0).then_some(())
    });
}

#[test]
fn a_reload_updates_the_status_of_the_pods_whose_units_it_changed() {
    let env = start("reload", Policy::default(), |c| c);
    env.create_pod("web", simple("sleep 1000"));
    env.wait_phase("web", "Running");
    // After a reload, web's container has failed to load; no unit signal says so.
    env.units.set_unsignalled(&app_unit("web"), |u| {
        u.load_state = "error".into();
        u.active_state = "inactive".into();
        u.sub_state = "dead".into();
    });
    // Another pod's arrival makes the next reload.
    env.create_pod("cache", simple("sleep 1000"));
    env.wait_phase("cache", "Running");
    wait_for("web's container no longer running in its status", || {
        let cs = env
            .get_pod("web")?
            .status?
            .container_statuses?
            .into_iter()
            .next()?;
        (!cs.ready && cs.state?.running.is_none()).then_some(())
    });
}

#[test]
fn pod_runs_and_status_follows_its_units() {
    let env = start("pod", Policy::default(), |c| c);
    let created = env.create_pod("web", simple("sleep 1000"));
    let uid = created.metadata.uid.clone().unwrap();
    let file = wait_for("the spool file", || {
        env.spool_file("web")
            .exists()
            .then(|| env.spool_file("web"))
    });
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("\"kube-root-ca.crt\""),
        "the ConfigMap the pod uses is spooled"
    );
    // The admission plugin gave the pod a kube-api-access volume: its token was requested.
    let token_dir = env.root.join(format!("host/run/podunit/tokens/{uid}"));
    let token = wait_for("the service account token", || {
        std::fs::read_to_string(token_dir.join("token")).ok()
    });
    assert_eq!(token.split('.').count(), 3, "a JWT");
    assert_eq!(
        std::fs::metadata(token_dir.join("token")).unwrap().mode() & 0o777,
        0o600
    );

    let pod = env.wait_phase("web", "Running");
    let st = pod.status.unwrap();
    assert_eq!(st.host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(st.pod_ip.as_deref(), Some("127.0.0.1"));
    assert!(st.start_time.is_some());
    let cs = &st.container_statuses.unwrap()[0];
    assert!(cs.ready);
    assert!(
        cs.state
            .as_ref()
            .unwrap()
            .running
            .as_ref()
            .unwrap()
            .started_at
            .is_some()
    );
    for c in [
        "PodScheduled",
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ] {
        assert!(
            st.conditions
                .as_ref()
                .unwrap()
                .iter()
                .any(|x| x.type_ == c && x.status == "True"),
            "{c}"
        );
    }

    // The container exits 3 and systemd restarts it twice: exit code and restarts are posted.
    env.units.set(&app_unit("web"), |u| {
        u.active_state = "activating".into();
        u.sub_state = "auto-restart".into();
        u.exec_main_code = ExitKind::Exited;
        u.exec_main_status = 3;
        u.exec_main_exit_us = now_us();
        u.n_restarts = 2;
    });
    let cs = wait_for("CrashLoopBackOff with exit code 3", || {
        let p = env.get_pod("web")?;
        let cs = p.status?.container_statuses?.into_iter().next()?;
        (cs.state.as_ref()?.waiting.as_ref()?.reason.as_deref() == Some("CrashLoopBackOff"))
            .then_some(cs)
    });
    assert_eq!(cs.restart_count, 2);
    assert_eq!(
        cs.last_state.unwrap().terminated.unwrap().exit_code,
        3,
        "the real exit code"
    );
}

#[test]
fn many_pods_at_once_are_few_reloads() {
    let env = start("burst", Policy::default(), |c| c);
    wait_for("the Node", || {
        env.admin
            .get::<Node>(&client::path::<Node>(None, Some(NODE)))
            .ok()
    });
    let n = 30;
    for i in 0..n {
        env.create_pod(&format!("p{i}"), simple("sleep 1000"));
    }
    for i in 0..n {
        env.wait_phase(&format!("p{i}"), "Running");
    }
    let reloads = env.units.reloads.load(Ordering::SeqCst);
    assert!(
        reloads < n / 3,
        "{n} pods created together caused {reloads} reloads"
    );
}

#[test]
fn deletion_is_two_phase_with_a_uid_precondition() {
    let env = start("delete", Policy::default(), |c| c);
    let pod = env.create_pod("gone", simple("sleep 1000"));
    env.wait_phase("gone", "Running");
    assert!(env.units.is_running(&app_unit("gone")));
    // kubectl delete: the API server only marks the pod.
    env.admin
        .delete(
            &client::path::<Pod>(Some("default"), Some("gone")),
            &DeleteOptions::default(),
        )
        .unwrap();
    wait_for("the pod object to be removed", || {
        env.get_pod("gone").is_none().then_some(())
    });
    assert!(
        !env.units.is_running(&app_unit("gone")),
        "units stopped first"
    );
    assert!(!env.spool_file("gone").exists(), "spool cleaned");
    let uid = pod.metadata.uid.unwrap();
    assert!(
        !env.root
            .join(format!("host/run/podunit/pods/{uid}"))
            .exists(),
        "runtime state cleaned"
    );
    // A new pod with the same name is a different pod: the old UID must not delete it.
    let again = env.create_pod("gone", simple("sleep 1000"));
    assert_ne!(again.metadata.uid.as_deref(), Some(uid.as_str()));
    env.wait_phase("gone", "Running");
}

#[test]
fn a_pod_the_policy_refuses_fails_with_an_event_and_never_runs() {
    let env = start("policy", Policy::default(), |c| c);
    env.create_pod(
        "priv",
        json!({"nodeName": NODE, "containers": [{"name": "app", "image": "host",
            "command": ["/bin/true"], "securityContext": {"privileged": true}}]}),
    );
    let pod = env.wait_phase("priv", "Failed");
    let st = pod.status.unwrap();
    assert_eq!(st.reason.as_deref(), Some("PolicyViolation"));
    assert!(st.message.unwrap().contains("policy.privileged"));
    assert!(!env.spool_file("priv").exists());
    assert!(!env.units.is_running(&app_unit("priv")));
    let events: k8s_openapi::List<Event> = env
        .admin
        .get(&client::path::<Event>(Some("default"), None))
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("PolicyViolation")
                && e.involved_object.name.as_deref() == Some("priv")),
        "an Event says why"
    );
    // `podunit status` shows it, though it has no units.
    let rec = env.held("priv").expect("a record for podunit status");
    assert!(rec.refused);
    let row = podunit::status::knownpods::unspooled(&rec);
    assert_eq!(row.display, "PolicyViolation");
    assert_eq!(row.phase, podunit::status::phase::Phase::Failed);
    assert!(row.message.unwrap().contains("policy.privileged"));
}

#[test]
fn a_pod_bound_to_a_node_it_does_not_fit_is_rejected_as_the_kubelet_does() {
    let env = start("affinity", Policy::default(), |c| c);
    // Bound here directly, without the scheduler: the kubelet's own admission refuses it.
    env.create_pod(
        "windows",
        json!({"nodeName": NODE, "nodeSelector": {"kubernetes.io/os": "windows"},
            "containers": [{"name": "app", "image": "host", "command": ["/bin/true"]}]}),
    );
    env.create_pod(
        "elsewhere",
        json!({"nodeName": NODE, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other-node"]}]}]}}},
            "containers": [{"name": "app", "image": "host", "command": ["/bin/true"]}]}),
    );
    // This node's own labels match.
    let mut here = simple("sleep 1000");
    here["nodeSelector"] = json!({"kubernetes.io/os": "linux", "kubernetes.io/hostname": NODE});
    env.create_pod("here", here);
    for name in ["windows", "elsewhere"] {
        let st = env.wait_phase(name, "Failed").status.unwrap();
        assert_eq!(st.reason.as_deref(), Some("NodeAffinity"), "{name}");
        assert_eq!(
            st.message.as_deref(),
            Some(
                "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
            ),
            "{name}"
        );
        assert!(!env.spool_file(name).exists(), "{name} never spooled");
    }
    env.wait_phase("here", "Running");
}

#[test]
fn host_ipc_and_host_pid_need_the_node_policy() {
    let env = start("hostns", Policy::default(), |c| c);
    env.create_pod(
        "ipc",
        json!({"nodeName": NODE, "hostIPC": true,
            "containers": [{"name": "app", "image": "host", "command": ["/bin/true"]}]}),
    );
    let st = env.wait_phase("ipc", "Failed").status.unwrap();
    assert_eq!(st.reason.as_deref(), Some("PolicyViolation"));
    assert!(st.message.unwrap().contains("policy.hostIPC"));
    assert!(!env.spool_file("ipc").exists());
}

#[test]
fn watch_resumes_and_relists_across_api_server_restarts() {
    let mut env = start("restart", Policy::default(), |c| {
        c.bookmark_interval(Duration::from_millis(200))
    });
    env.create_pod("a", simple("sleep 1000"));
    env.wait_phase("a", "Running");

    // Restart with history kept: the agent resumes from its resourceVersion.
    env.server.stop();
    env.server.restart().unwrap();
    env.create_pod("b", simple("sleep 1000"));
    env.wait_phase("b", "Running");

    // Restart without history: the resume gets 410 Gone and the agent lists again.
    env.server.stop();
    env.server.compact();
    env.server.restart().unwrap();
    env.create_pod("c", simple("sleep 1000"));
    env.wait_phase("c", "Running");

    // API server down while a container exits: nothing is lost, the status catches up.
    env.server.stop();
    env.units.set(&app_unit("a"), |u| {
        u.active_state = "failed".into();
        u.sub_state = "failed".into();
        u.exec_main_code = ExitKind::Exited;
        u.exec_main_status = 7;
        u.exec_main_exit_us = now_us();
    });
    assert!(env.units.is_running(&app_unit("b")), "pods keep running");
    env.server.restart().unwrap();
    wait_for("the exit posted after the restart", || {
        let p = env.get_pod("a")?;
        let cs = p.status?.container_statuses?.into_iter().next()?;
        (cs.state?.terminated?.exit_code == 7).then_some(())
    });
}

#[test]
fn static_pods_get_mirror_pods() {
    let env = start("mirror", Policy::default(), |c| c);
    let etc = env.root.join("host/etc/pods.d");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(
        etc.join("local.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: local, namespace: default}\nspec:\n  containers: [{name: app, image: host, command: [/bin/sleep, '1000']}]\n",
    )
    .unwrap();
    let m = wait_for("the mirror pod", || env.get_pod(&format!("local-{NODE}")));
    let a = m.metadata.annotations.clone().unwrap();
    assert_eq!(a["kubernetes.io/config.source"], "file");
    assert_eq!(
        a["kubernetes.io/config.mirror"],
        a["kubernetes.io/config.hash"]
    );
    let o = &m.metadata.owner_references.unwrap()[0];
    assert_eq!((o.kind.as_str(), o.name.as_str()), ("Node", NODE));
    assert!(
        !env.spool_file(&format!("local-{NODE}")).exists(),
        "a mirror is never spooled"
    );
    // The static pod's units run: the mirror shows it.
    env.units.set(
        &podunit::translate::naming::pod_service("default", "local"),
        |u| {
            *u = UnitState {
                sub_state: "exited".into(),
                ..running(now_us())
            }
        },
    );
    env.units.set(
        &podunit::translate::naming::container_service("default", "local", "app"),
        |u| *u = running(now_us()),
    );
    env.wait_phase(&format!("local-{NODE}"), "Running");
    // Removing the manifest removes the mirror.
    std::fs::remove_file(etc.join("local.yaml")).unwrap();
    wait_for("the mirror pod to go", || {
        env.get_pod(&format!("local-{NODE}"))
            .is_none()
            .then_some(())
    });
}

#[test]
fn a_loose_kubeconfig_stops_the_start_with_the_reason() {
    use std::os::unix::fs::PermissionsExt;
    let root = scratch("loose");
    let etc = root.join("etc/podunit");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(
        etc.join("config.yaml"),
        "nodeName: n1\nkubeconfig: /etc/podunit/kubeconfig\n",
    )
    .unwrap();
    let kc = etc.join("kubeconfig");
    std::fs::write(&kc, "apiVersion: v1\nkind: Config\n").unwrap();
    std::fs::set_permissions(&kc, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_podunit-sync"))
        .env("PODUNIT_ROOT", &root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("refusing to start") && err.contains("not root-only (mode 0644"),
        "{err}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// Child side of the test below (run only by it): rewrites one spool file forever, alternating two
/// large versions.
#[test]
#[ignore = "helper process of a_writer_killed_mid_write_never_leaves_a_partial_file"]
fn spool_writer_child() {
    let dir = std::env::var_os("PODUNIT_TEST_SPOOL_WRITER").expect("run by the SIGKILL test");
    let spool = podunit::agent::spool::Spool::new(PathBuf::from(dir));
    for i in 0u64.. {
        let v = if i % 2 == 0 { b'a' } else { b'b' };
        spool.put("default_p.yaml", &vec![v; 4 << 20]).unwrap();
    }
}

#[test]
fn a_writer_killed_mid_write_never_leaves_a_partial_file() {
    let root = scratch("sigkill");
    let spool = podunit::agent::spool::Spool::new(root.join("spool"));
    spool.init().unwrap();
    let mut whole = 0;
    for round in 0..20 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "spool_writer_child",
                "--ignored",
                "--test-threads=1",
            ])
            .env("PODUNIT_TEST_SPOOL_WRITER", &spool.dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Let it get into its write loop (a varying amount each round), then SIGKILL it.
        std::thread::sleep(Duration::from_millis(20 + 13 * round));
        child.kill().unwrap();
        child.wait().unwrap();
        // What a reader (the generator) lists: only whole versions, never a torn file.
        for f in spool.list().unwrap() {
            let data = std::fs::read(spool.dir.join(&f)).unwrap();
            assert_eq!(data.len(), 4 << 20, "round {round}: {f} is partial");
            assert!(
                data.iter().all(|b| *b == data[0]),
                "round {round}: {f} mixes versions"
            );
            whole += 1;
        }
        // A restarted podunit-sync removes what the crash left (dotfiles, never read anyway).
        spool.init().unwrap();
        assert!(
            std::fs::read_dir(&spool.dir).unwrap().all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.')),
            "temp files cleaned"
        );
    }
    assert!(
        whole > 0,
        "the writer never got a file written: the test proved nothing"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// The claims of a JWT (its middle part, base64url without padding).
fn jwt_claims(token: &str) -> serde_json::Value {
    let part = token.trim().split('.').nth(1).expect("a JWT");
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => panic!("not base64url: {part}"),
    };
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for c in part.bytes() {
        acc = (acc << 6) | val(c) as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn a_restarted_agent_keeps_the_tokens_that_are_still_good() {
    let mut env = start("restart", Policy::default(), |c| c);
    let uid = env
        .create_pod("web", simple("sleep 1000"))
        .metadata
        .uid
        .unwrap();
    env.wait_phase("web", "Running");
    let issued = env
        .root
        .join(format!("host/run/podunit/tokens/{uid}/token"));
    let token = wait_for("web's token", || std::fs::read_to_string(&issued).ok());
    let requests = env.token_requests();
    assert_eq!(requests, 1, "one TokenRequest for web");
    let refreshes = env.units.run_once_count();

    env.restart_agent();
    // The new agent handles its first list before this pod: once it runs, web was seen again.
    env.create_pod("db", simple("sleep 1000"));
    env.wait_phase("db", "Running");
    assert_eq!(
        env.token_requests(),
        requests + 1,
        "only db's token was requested: web's is still good"
    );
    assert_eq!(std::fs::read_to_string(&issued).unwrap(), token);
    assert_eq!(
        env.units.run_once_count(),
        refreshes,
        "no volume of a running pod was rewritten"
    );
}

#[test]
fn service_account_token_is_bound_and_refreshed_at_80_percent() {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    // The real API server refuses lifetimes under 10 minutes; the double's test-only knob lets the
    // refresh at 80 % happen within the test.
    const LIFE: i64 = 30;
    let env = start("token", Policy::default(), |c| {
        c.min_token_expiration_seconds(LIFE)
    });
    let vol = "kube-api-access-short";
    let created = env.create_pod(
        "tok",
        json!({"nodeName": NODE, "securityContext": {"fsGroup": 2345},
            "containers": [{"name": "app", "image": "host", "command": ["/bin/sleep", "1000"],
                "volumeMounts": [{"name": vol, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]}],
            "volumes": [{"name": vol, "projected": {"defaultMode": 0o640, "sources": [
                {"serviceAccountToken": {"path": "token", "audience": "vault", "expirationSeconds": LIFE}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}]}),
    );
    let uid = created.metadata.uid.clone().unwrap();
    assert!(
        !created
            .spec
            .as_ref()
            .unwrap()
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .any(|v| v.name != vol),
        "admission added no second token volume"
    );
    env.wait_phase("tok", "Running");
    // What the container sees: the volume pod-prepare wrote, token included.
    let in_volume = env
        .root
        .join(format!("host/run/podunit/pods/{uid}/volumes/{vol}/token"));
    let first = wait_for("the token in the pod's volume", || {
        std::fs::read_to_string(&in_volume).ok()
    });
    let c = jwt_claims(&first);
    assert_eq!(c["aud"], json!(["vault"]), "the requested audience");
    assert_eq!(
        c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(),
        LIFE,
        "the requested expiry"
    );
    assert_eq!(
        c["kubernetes.io"]["pod"]["uid"],
        uid.as_str(),
        "bound to the pod"
    );
    assert_eq!(c["kubernetes.io"]["pod"]["name"], "tok");
    let meta = std::fs::metadata(&in_volume).unwrap();
    assert_eq!(
        (meta.mode() & 0o777, meta.gid()),
        (0o640, 2345),
        "defaultMode, fsGroup"
    );
    let (uid0, gid0, mode0) = (meta.uid(), meta.gid(), meta.mode() & 0o777);
    // A reader that opened the old token keeps reading the whole old token: the file is replaced
    // by a rename, never rewritten in place.
    let mut old_reader = std::fs::File::open(&in_volume).unwrap();

    let second = wait_for("a new token in the volume", || {
        std::fs::read_to_string(&in_volume)
            .ok()
            .filter(|t| !t.is_empty() && *t != first)
    });
    let c2 = jwt_claims(&second);
    let (iat1, exp1) = (c["iat"].as_i64().unwrap(), c["exp"].as_i64().unwrap());
    let iat2 = c2["iat"].as_i64().unwrap();
    assert!(
        iat2 >= iat1 + LIFE * 8 / 10,
        "refreshed at 80 % of the lifetime, not before: issued {iat1}, refreshed {iat2}"
    );
    assert!(
        iat2 < exp1,
        "refreshed before the old token expired ({iat2} vs {exp1})"
    );
    assert_eq!(c2["aud"], json!(["vault"]));
    assert_eq!(c2["kubernetes.io"]["pod"]["uid"], uid.as_str());
    let meta = std::fs::metadata(&in_volume).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (uid0, gid0, mode0),
        "owner and mode unchanged"
    );
    let mut was = String::new();
    old_reader.read_to_string(&mut was).unwrap();
    assert_eq!(was, first, "the old file was replaced whole, not rewritten");
    // The copy pod-prepare reads at the next start is the new one too.
    let issued = env
        .root
        .join(format!("host/run/podunit/tokens/{uid}/token"));
    assert_eq!(std::fs::read_to_string(issued).unwrap(), second);
}

#[test]
fn config_map_and_secret_updates_reach_the_spool_and_running_volumes() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let env = start_timed(
        "objects",
        Policy::default(),
        |c| c,
        |t| ClusterTiming {
            object_refresh_seconds: 3,
            ..t
        },
    );
    let ns = Some("default");
    env.admin
        .create::<_, ConfigMap>(
            &client::path::<ConfigMap>(ns, None),
            &json!({"metadata": {"name": "app-config"}, "data": {"greeting": "hello"}}),
        )
        .unwrap();
    env.admin
        .create::<_, Secret>(
            &client::path::<Secret>(ns, None),
            &json!({"metadata": {"name": "app-secret"}, "data": {"password": "b25l"}}),
        )
        .unwrap();
    let created = env.create_pod(
        "cfg",
        json!({"nodeName": NODE, "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": "host", "command": ["/bin/sleep", "1000"],
                "env": [{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "greeting"}}}],
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"},
                                 {"name": "sec", "mountPath": "/etc/sec"}]}],
            "volumes": [{"name": "cfg", "configMap": {"name": "app-config"}},
                        {"name": "sec", "secret": {"secretName": "app-secret"}}]}),
    );
    let uid = created.metadata.uid.clone().unwrap();
    env.wait_phase("cfg", "Running");
    let vols = env
        .root
        .join(format!("host/run/podunit/pods/{uid}/volumes"));
    let read = |rel: &str| std::fs::read_to_string(vols.join(rel)).ok();
    wait_for("the volumes written at start", || {
        (read("cfg/greeting")? == "hello" && read("sec/password")? == "one").then_some(())
    });
    let env_dir = env.root.join(format!("host/run/podunit/pods/{uid}/env"));
    let env_text = || -> String {
        std::fs::read_dir(&env_dir)
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect()
    };
    assert!(env_text().contains("GREETING=\"hello\""), "{}", env_text());
    let spool = env.spool_file("cfg");
    let before = std::fs::read_to_string(&spool).unwrap();
    assert!(before.contains("\"hello\"") && before.contains("\"b25l\""));

    // A reader (the generator, a container) polls the files the whole time.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, spool, vols) = (stop.clone(), spool.clone(), vols.clone());
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            let mut volume_views = std::collections::BTreeSet::new();
            while !stop.load(Ordering::SeqCst) {
                let text = std::fs::read_to_string(&spool).unwrap();
                let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
                    .unwrap_or_else(|e| panic!("a spool read that does not parse: {e}\n{text}"));
                assert_eq!(docs.len(), 3, "{text}");
                seen.insert(text);
                // Both files of a volume come from one version (here: one key each, read via ..data).
                if let (Ok(g), Ok(p)) = (
                    std::fs::read_to_string(vols.join("cfg/greeting")),
                    std::fs::read_to_string(vols.join("sec/password")),
                ) {
                    volume_views.insert((g, p));
                }
            }
            (seen, volume_views)
        })
    };

    // Update both right after a refresh pass read them, so one pass sees both changes.
    let secret_reads = |env: &Env| {
        env.server
            .requests()
            .iter()
            .filter(|r| {
                r.method == "GET"
                    && r.user == format!("system:node:{NODE}")
                    && r.path.ends_with("/secrets/app-secret")
            })
            .count()
    };
    let reads0 = secret_reads(&env);
    wait_for("a refresh pass", || {
        (secret_reads(&env) > reads0).then_some(())
    });
    let reloads0 = env.units.reloads.load(Ordering::SeqCst);
    env.admin
        .merge_patch::<ConfigMap>(
            &client::path::<ConfigMap>(ns, Some("app-config")),
            &json!({"data": {"greeting": "hi there"}}),
        )
        .unwrap();
    env.admin
        .merge_patch::<Secret>(
            &client::path::<Secret>(ns, Some("app-secret")),
            &json!({"data": {"password": "dHdv"}}),
        )
        .unwrap();
    let reads1 = secret_reads(&env);

    let after = wait_for("both updates in the spool", || {
        let t = std::fs::read_to_string(&spool).ok()?;
        (t.contains("\"hi there\"") && t.contains("\"dHdv\"")).then_some(t)
    });
    // The running pod's volumes follow (the kubelet updates mounted configMap and secret volumes).
    wait_for("the running volumes updated", || {
        (read("cfg/greeting")? == "hi there" && read("sec/password")? == "two").then_some(())
    });
    wait_for("the reload", || {
        (env.units.reloads.load(Ordering::SeqCst) > reloads0).then_some(())
    });
    // Two more passes that find nothing new: no further write, no further reload.
    wait_for("two more refresh passes", || {
        (secret_reads(&env) >= reads1 + 2).then_some(())
    });
    stop.store(true, Ordering::SeqCst);
    let (seen, views) = reader.join().unwrap();
    assert_eq!(
        env.units.reloads.load(Ordering::SeqCst),
        reloads0 + 1,
        "both updates make one reload"
    );
    assert!(
        seen.iter().all(|t| *t == before || *t == after),
        "only whole versions of the spool file were read ({} distinct)",
        seen.len()
    );
    assert!(
        views.iter().all(|v| matches!(
            (v.0.as_str(), v.1.as_str()),
            ("hello" | "hi there", "one" | "two")
        )),
        "{views:?}"
    );
    // Environment variables keep the value the container started with, as in Kubernetes.
    assert!(env_text().contains("GREETING=\"hello\""), "{}", env_text());
    assert!(!env_text().contains("hi there"));
    // The files are the kubelet's layout: names point through ..data to one version directory.
    assert_eq!(
        std::fs::read_link(vols.join("cfg/greeting")).unwrap(),
        Path::new("..data/greeting")
    );
}

#[test]
fn a_pod_whose_image_is_not_on_the_node_and_may_not_be_pulled_waits_with_err_image_never_pull() {
    let env = start_timed(
        "image",
        Policy::default(),
        |c| c,
        |t| ClusterTiming {
            object_refresh_seconds: 2,
            ..t
        },
    );
    let image = "registry.example/app:1.0";
    env.create_pod(
        "noimg",
        json!({"nodeName": NODE, "containers": [
            {"name": "app", "image": image, "imagePullPolicy": "Never", "command": ["/app"]},
            {"name": "side", "image": "host", "command": ["/bin/sleep", "1000"]}]}),
    );
    let st = wait_for("the waiting reason", || {
        let st = env.get_pod("noimg")?.status?;
        let cs = st.container_statuses.as_ref()?;
        let app = cs.iter().find(|c| c.name == "app")?;
        (app.state.as_ref()?.waiting.as_ref()?.reason.as_deref() == Some("ErrImageNeverPull"))
            .then_some(st)
    });
    assert_eq!(st.phase.as_deref(), Some("Pending"), "waiting, not Failed");
    let cs = st.container_statuses.unwrap();
    let app = cs.iter().find(|c| c.name == "app").unwrap();
    let msg = app
        .state
        .as_ref()
        .unwrap()
        .waiting
        .as_ref()
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert_eq!(
        msg,
        format!("Container image \"{image}\" is not present with pull policy of Never")
    );
    let side = cs.iter().find(|c| c.name == "side").unwrap();
    assert_ne!(
        side.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("ErrImageNeverPull"),
        "only the container whose image is missing"
    );
    assert!(!env.spool_file("noimg").exists(), "nothing of it runs");
    let events: k8s_openapi::List<Event> = env
        .admin
        .get(&client::path::<Event>(Some("default"), None))
        .unwrap();
    let ev = events
        .items
        .iter()
        .find(|e| {
            e.reason.as_deref() == Some("ErrImageNeverPull")
                && e.involved_object.name.as_deref() == Some("noimg")
        })
        .expect("an Event says why");
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert!(ev.message.as_deref().unwrap().contains(image));
    // `podunit status` shows the wait, on the container it is about.
    let rec = env.held("noimg").expect("a record for podunit status");
    assert_eq!(
        (rec.reason.as_str(), rec.containers.as_slice(), rec.refused),
        (IMAGE_NEVER_PULL, &["app".to_string()][..], false)
    );
    let row = podunit::status::knownpods::unspooled(&rec);
    assert_eq!(
        (row.display.as_str(), row.total_containers),
        (IMAGE_NEVER_PULL, 2)
    );

    // Put into the local store, the image is found at the next retry and the pod runs.
    std::fs::create_dir_all(
        env.root
            .join("host/var/lib/podunit/images/registry.example/app/1.0/rootfs"),
    )
    .unwrap();
    env.runs_once_held_no_more("noimg");
}

/// A pull that fails: the registry (a closed port here) answers nothing. The kubelet's
/// `ErrImagePull` with the message, then `ImagePullBackOff`, and its Events; nothing runs. (Pulls
/// that work, with pull secrets, are tested against a real registry and API server in
/// tests/cluster_apiserver_e2e.rs.)
#[test]
fn a_failed_pull_is_err_image_pull_then_image_pull_back_off() {
    let env = start("pullfail", Policy::default(), |c| c);
    let image = "127.0.0.1:1/app:1.0";
    env.create_pod(
        "pullfail",
        json!({"nodeName": NODE, "containers": [{"name": "app", "image": image}]}),
    );
    let waiting = |reason: &str| {
        wait_for(reason, || {
            let st = env.get_pod("pullfail")?.status?;
            let w = st.container_statuses?[0].state.clone()?.waiting?;
            (w.reason.as_deref() == Some(reason)).then_some((st.phase, w.message))
        })
    };
    let (phase, msg) = waiting("ErrImagePull");
    assert_eq!(phase.as_deref(), Some("Pending"));
    let msg = msg.unwrap();
    assert!(msg.contains("127.0.0.1:1"), "the registry's error: {msg}");
    let (_, msg) = waiting("ImagePullBackOff");
    assert_eq!(
        msg.as_deref(),
        Some(format!("Back-off pulling image \"{image}\"").as_str())
    );
    assert!(!env.spool_file("pullfail").exists(), "nothing of it runs");
    let events: k8s_openapi::List<Event> = env
        .admin
        .get(&client::path::<Event>(Some("default"), None))
        .unwrap();
    let said = |reason: &str, text: &str| {
        events.items.iter().any(|e| {
            e.reason.as_deref() == Some(reason)
                && e.involved_object.name.as_deref() == Some("pullfail")
                && e.involved_object.field_path.as_deref() == Some("spec.containers{app}")
                && e.message.as_deref().is_some_and(|m| m.starts_with(text))
        })
    };
    assert!(said("Pulling", &format!("Pulling image \"{image}\"")));
    assert!(said(
        "Failed",
        &format!("Failed to pull image \"{image}\": ")
    ));
    assert!(said("Failed", "Error: ErrImagePull"));
    assert!(said(
        "BackOff",
        &format!("Back-off pulling image \"{image}\"")
    ));
    assert!(said("Failed", "Error: ImagePullBackOff"));
}

/// The cluster-mode half of "a pod waiting on something is in `podunit status`": a ConfigMap the
/// pod needs is not there yet. The kubelet's CreateContainerConfigError with its message, on the
/// API and in what `podunit status` reads; nothing runs; the ConfigMap created, the pod runs and
/// the wait is over in both.
#[test]
fn a_pod_whose_config_map_is_missing_waits_and_says_which() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let env = start_timed(
        "missing-cm",
        Policy::default(),
        |c| c,
        |t| ClusterTiming {
            object_refresh_seconds: 2,
            ..t
        },
    );
    env.create_pod(
        "app",
        json!({"nodeName": NODE, "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": "host", "command": ["/bin/sleep", "1000"],
                "env": [{"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "level"}}}]}]}),
    );
    let want = "configmap \"app-config\" not found";
    let st = wait_for("the waiting reason", || {
        let st = env.get_pod("app")?.status?;
        let w = st
            .container_statuses
            .as_ref()?
            .first()?
            .state
            .as_ref()?
            .waiting
            .clone()?;
        (w.reason.as_deref() == Some("CreateContainerConfigError")).then_some((st, w))
    });
    let (st, waiting) = st;
    assert_eq!(st.phase.as_deref(), Some("Pending"), "waiting, not Failed");
    assert_eq!(waiting.message.as_deref(), Some(want));
    assert!(!env.spool_file("app").exists(), "nothing of it runs");

    // What `podunit status` shows for it: its row and why.
    let rec = env.held("app").expect("a record for podunit status");
    assert_eq!(
        (rec.reason.as_str(), rec.message.as_str(), rec.refused),
        ("CreateContainerConfigError", want, false)
    );
    let row = podunit::status::knownpods::unspooled(&rec);
    assert_eq!(
        (row.display.as_str(), row.total_containers, row.phase),
        (
            "CreateContainerConfigError",
            1,
            podunit::status::phase::Phase::Pending
        )
    );
    assert_eq!(
        podunit::status::knownpods::notes(&[row], None, None),
        vec![format!("default/app: {want}")],
        "the line under the table"
    );

    // The ConfigMap arrives: found at the next retry, the pod runs, and nothing is held back.
    env.admin
        .create::<_, ConfigMap>(
            &client::path::<ConfigMap>(Some("default"), None),
            &json!({"metadata": {"name": "app-config"}, "data": {"level": "debug"}}),
        )
        .unwrap();
    env.runs_once_held_no_more("app");
}

#[test]
fn container_events_are_posted_as_the_kubelet_posts_them() {
    let env = start("events", Policy::default(), |c| c);
    let created = env.create_pod("ev", simple("sleep 1000"));
    let uid = created.metadata.uid.clone().unwrap();
    env.wait_phase("ev", "Running");
    let events = |reason: &str| -> Vec<Event> {
        let list: k8s_openapi::List<Event> = env
            .admin
            .get(&client::path::<Event>(Some("default"), None))
            .unwrap();
        list.items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.involved_object.name.as_deref() == Some("ev")
            })
            .collect()
    };
    for (reason, message) in [
        ("Created", "Created container app"),
        ("Started", "Started container app"),
    ] {
        let ev = wait_for(reason, || events(reason).into_iter().next());
        assert_eq!(ev.message.as_deref(), Some(message));
        assert_eq!(ev.type_.as_deref(), Some("Normal"));
        assert_eq!(ev.count, Some(1));
        let src = ev.source.unwrap();
        assert_eq!(src.component.as_deref(), Some("kubelet"));
        assert_eq!(src.host.as_deref(), Some(NODE));
        assert_eq!(
            ev.involved_object.field_path.as_deref(),
            Some("spec.containers{app}")
        );
        assert_eq!(ev.involved_object.uid.as_deref(), Some(uid.as_str()));
    }
    env.units.set(&app_unit("ev"), |u| {
        u.active_state = "activating".into();
        u.sub_state = "auto-restart".into();
        u.exec_main_code = ExitKind::Exited;
        u.exec_main_status = 1;
        u.exec_main_exit_us = now_us();
        u.n_restarts = 1;
    });
    let ev = wait_for("BackOff", || events("BackOff").into_iter().next());
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(
        ev.message.unwrap(),
        format!("Back-off restarting failed container app in pod ev_default({uid})")
    );
    assert_eq!(
        events("Created").len(),
        1,
        "one event per run, not per status post"
    );
}

/// The node's address as pod-prepare is given it, on the host network.
fn node_net() -> podunit::podstart::prepare::NodeNet {
    podunit::podstart::prepare::NodeNet {
        node_ip: "127.0.0.1".into(),
        cni: Default::default(),
        fallback: Default::default(),
        resolv_conf: "/etc/resolv.conf".into(),
    }
}
