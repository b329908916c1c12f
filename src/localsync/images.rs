//! Pods that wait for images: podunit-sync pulls what the generator found missing (its report's
//! `waiting`), then reloads so that the generator renders the pods.
//!
//! Local pods whose image is in the store start from it, whatever their `imagePullPolicy`, so
//! that a node boots its pods with no network (edge autonomy). The kubelet asks the registry again
//! at every start of an `Always` container ([`crate::image::policy`]); here each start of such a
//! container (a job of its unit that leaves it active) asks the registry what the tag is now, and
//! when the tag moved, the reload renders the pod from the new image (its plan changes, so the
//! pod restarts). A registry that cannot be reached leaves the pod running on what it has.
//!
//! Pulls run on the one pull queue ([`crate::image::queue`]), which the cluster agent uses too,
//! keyed as the kubelet keys its back-off, `<pod uid>_<image>`: each pod pulls with its own
//! `imagePullSecrets` (Secrets in the manifest directories, read when the pull is asked for),
//! before the node's credentials file. The main thread keeps the waiting records `podunit status`
//! shows: `ContainerCreating` while a pull runs, `ErrImagePull` with the registry's message when
//! it failed, `ImagePullBackOff` until the retry, `ErrImageNeverPull` for `imagePullPolicy: Never`,
//! as the kubelet shows them.

use crate::common::paths::Paths;
use crate::generate::output::GeneratedPod;
use crate::generate::report::{WaitingImage, WaitingPod};
use crate::image::auth::Keyring;
use crate::image::policy::{self, AtStart};
use crate::image::queue::{self, PullQueue, Request};
use crate::localsync::{Msg, log};
use crate::status::waiting::{self, Record, Writer};
use crate::translate::plan::{PLAN_DIR, PodPlan};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::mpsc;
use std::time::Instant;

/// What one image of a waiting pod shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageState {
    Pulling,
    NeverPull,
    Failed(String),
    BackOff,
}

impl ImageState {
    fn reason(&self) -> &'static str {
        match self {
            ImageState::Pulling => "ContainerCreating",
            ImageState::NeverPull => "ErrImageNeverPull",
            ImageState::Failed(_) => "ErrImagePull",
            ImageState::BackOff => "ImagePullBackOff",
        }
    }

    fn message(&self, image: &str) -> String {
        match self {
            ImageState::Pulling => format!("Pulling image {image:?}"),
            ImageState::NeverPull => {
                format!("Container image {image:?} is not present with pull policy of Never")
            }
            ImageState::Failed(m) => m.clone(),
            ImageState::BackOff => format!("Back-off pulling image {image:?}"),
        }
    }

    /// Which of a pod's images speaks for it: an error before a pull under way.
    fn rank(&self) -> u8 {
        match self {
            ImageState::Pulling => 0,
            ImageState::BackOff => 1,
            ImageState::Failed(_) => 2,
            ImageState::NeverPull => 3,
        }
    }
}

/// A container of a rendered local pod whose root is a stored image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningImage {
    pub unit: String,
    /// The pull queue's key: `<pod uid>_<reference>`.
    pub key: String,
    pub namespace: String,
    /// The names of the pod's `imagePullSecrets`.
    pub pull_secrets: Vec<String>,
    /// As the manifest names it (the pull queue's key).
    pub reference: String,
    pub pull_policy: String,
    /// The `imageID` its root is made of.
    pub image_id: String,
}

/// The stored-image containers of the rendered local pods, from their plans (spool pods, whose
/// manifests are under `spool`, are the cluster agent's: it pulls them with their pull secrets).
pub fn running_images(
    generator_dir: &Path,
    pods: &[GeneratedPod],
    spool: &Path,
) -> Vec<RunningImage> {
    let mut out = Vec::new();
    for pod in pods {
        let Some(unit) = &pod.pod_unit else { continue };
        let file = generator_dir.join(PLAN_DIR).join(PodPlan::file_name(unit));
        let Some(plan) = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<PodPlan>(&b).ok())
        else {
            continue;
        };
        let source = Path::new(&plan.source);
        if source.starts_with(Paths::SPOOL) || source.starts_with(spool) {
            continue;
        }
        for root in plan.roots.iter().filter(|r| !r.reference.is_empty()) {
            let Some(c) = pod.containers.iter().find(|c| c.name == root.container) else {
                continue;
            };
            out.push(RunningImage {
                unit: c.unit.clone(),
                key: pull_key(&plan.uid, &root.reference),
                namespace: plan.namespace.clone(),
                pull_secrets: plan.pull_secrets.clone(),
                reference: root.reference.clone(),
                pull_policy: root.pull_policy.clone(),
                image_id: root.image.clone(),
            });
        }
    }
    out
}

/// The pull queue's key for `image` of the pod `uid`, as the kubelet's back-off key.
pub fn pull_key(uid: &str, image: &str) -> String {
    format!("{uid}_{image}")
}

pub struct ImagePulls {
    paths: Paths,
    /// Keyed by [`pull_key`].
    queue: PullQueue,
    waiting: Vec<WaitingPod>,
    /// Rendered containers on stored images, by unit.
    running: HashMap<String, RunningImage>,
    /// Whether the running containers were looked at once: at boot they start before
    /// podunit-sync does, and that start asks the registry too.
    running_seen: bool,
    /// The uids this process wrote records for.
    recorded: HashSet<String>,
    /// Container units whose image tag moved: their pod's next restart is for that.
    moved: HashSet<String>,
}

impl ImagePulls {
    /// Starts the pull thread; its results come back on `results` as [`Msg::Pulled`].
    pub fn spawn(paths: Paths, results: mpsc::Sender<Msg>) -> ImagePulls {
        let queue = PullQueue::spawn(paths.clone(), move |d| {
            let result = d.result.map(|p| p.image_id);
            results
                .send(Msg::Pulled {
                    key: d.key,
                    image: d.image,
                    result,
                })
                .is_ok()
        });
        ImagePulls {
            paths,
            queue,
            waiting: Vec::new(),
            running: HashMap::new(),
            running_seen: false,
            recorded: HashSet::new(),
            moved: HashSet::new(),
        }
    }

    /// The rendered containers on stored images (after each reconcile).
    pub fn set_running(&mut self, running: Vec<RunningImage>) {
        self.running = running.into_iter().map(|r| (r.unit.clone(), r)).collect();
        if !std::mem::replace(&mut self.running_seen, true) {
            let mut units: Vec<String> = self.running.keys().cloned().collect();
            units.sort();
            for u in units {
                self.container_started(&u);
            }
        }
    }

    /// Whether a start of `unit` asks the registry again (its image's policy is `Always`).
    pub fn pulls_at_start(&self, unit: &str) -> bool {
        self.running
            .get(unit)
            .is_some_and(|r| policy::at_start(&r.pull_policy, true) == AtStart::Pull)
    }

    /// `unit` started (a start or an automatic restart): an `Always` image is asked for again,
    /// unless a pull of it runs already or it is in back-off (then the container runs on what
    /// it has, and the next start asks again).
    pub fn container_started(&mut self, unit: &str) {
        if !self.pulls_at_start(unit) {
            return;
        }
        let Some(r) = self.running.get(unit).cloned() else {
            return;
        };
        let reference = &r.reference;
        match self.queue.state(&r.key, Instant::now()) {
            Some(queue::State::Pulling) => {}
            Some(_) => log(&format!(
                "{unit}: image {reference:?} is in pull back-off; it runs on the stored image"
            )),
            None => {
                log(&format!(
                    "{unit} started: asking the registry for image {reference:?} again \
                     (imagePullPolicy Always)"
                ));
                self.request(&r.key, reference, &r.namespace, &r.pull_secrets);
            }
        }
    }

    /// Whether one of `units` (a pod's containers) is restarted because its image tag moved;
    /// forgets it.
    pub fn take_moved(&mut self, units: &[String]) -> bool {
        let before = self.moved.len();
        self.moved.retain(|u| !units.contains(u));
        self.moved.len() != before
    }

    /// The pods the generator's last run left waiting for images.
    pub fn set_waiting(&mut self, waiting: Vec<WaitingPod>) {
        self.waiting = waiting;
    }

    /// When [`Self::pass`] has something to do next (a retry, a back-off to show).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.queue.next_deadline(|image| self.wanted(image))
    }

    fn wanted(&self, key: &str) -> bool {
        self.waiting.iter().any(|p| {
            p.images
                .iter()
                .any(|i| pull_key(&p.uid, &i.image) == key && i.pull_policy != "Never")
        })
    }

    /// Queues a pull of `image` for the pod of `key`, with the pod's pull secrets (`secrets`,
    /// Secrets of `namespace` in the manifest directories) before the node's credentials. A
    /// Secret that is missing is logged and passed over, as the kubelet does; one that is no
    /// valid image pull secret fails the pull (`ErrImagePull` with why, then back-off).
    fn request(&mut self, key: &str, image: &str, namespace: &str, secrets: &[String]) {
        match pod_keyring(&self.paths, namespace, secrets) {
            Ok(keyring) => {
                self.queue.request(Request {
                    key: key.to_string(),
                    image: image.to_string(),
                    keyring,
                });
            }
            Err(message) => {
                log(&format!("pulling image {image:?}: {message}"));
                self.queue.finished(key, &Err(message));
            }
        }
    }

    /// Asks for the pulls that are due and writes every waiting pod's record.
    pub fn pass(&mut self) {
        self.pass_at(Instant::now());
    }

    fn pass_at(&mut self, now: Instant) {
        let mut states: HashMap<String, ImageState> = HashMap::new();
        let waiting = std::mem::take(&mut self.waiting);
        for pod in &waiting {
            for img in &pod.images {
                let key = pull_key(&pod.uid, &img.image);
                if states.contains_key(&key) {
                    continue;
                }
                let state = if img.pull_policy == "Never" {
                    ImageState::NeverPull
                } else {
                    if self.queue.state(&key, now).is_none() {
                        log(&format!("pulling image {:?}", img.image));
                        self.request(&key, &img.image, &pod.namespace, &pod.pull_secrets);
                    }
                    match self.queue.state(&key, now) {
                        Some(queue::State::Failed(m)) => ImageState::Failed(m),
                        Some(queue::State::BackOff) => ImageState::BackOff,
                        _ => ImageState::Pulling,
                    }
                };
                states.insert(key, state);
            }
        }
        self.waiting = waiting;
        self.write_records(&states);
    }

    /// A pull (of `key`) ended. Returns whether to reload: a pod waits for the image, or a
    /// container runs on another digest than the registry's now.
    pub fn pulled(&mut self, key: &str, image: &str, result: Result<String, String>) -> bool {
        let result = result.map(|image_id| queue::Pulled {
            image_id,
            took: std::time::Duration::ZERO,
        });
        match (self.queue.finished(key, &result), &result) {
            (_, Ok(p)) => {
                log(&format!("pulled image {image:?} ({})", p.image_id));
                let waited = self
                    .waiting
                    .iter()
                    .flat_map(|w| &w.images)
                    .any(|i| i.image == image);
                let moved: Vec<&str> = self
                    .running
                    .values()
                    .filter(|r| r.reference == image && policy::moved(&r.image_id, &p.image_id))
                    .map(|r| r.unit.as_str())
                    .collect();
                if !moved.is_empty() {
                    log(&format!(
                        "image {image:?} moved from what {} runs: the pod is rendered again",
                        moved.join(", ")
                    ));
                }
                let reload = waited || !moved.is_empty();
                self.moved.extend(moved.into_iter().map(String::from));
                reload
            }
            (wait, Err(message)) => {
                let runs = self.running.values().any(|r| r.reference == image);
                log(&format!(
                    "pulling image {image:?} failed: {message}; next try in {}s{}",
                    wait.unwrap_or_default().as_secs(),
                    if runs {
                        "; its containers keep the stored image"
                    } else {
                        ""
                    }
                ));
                false
            }
        }
    }

    fn write_records(&mut self, states: &HashMap<String, ImageState>) {
        let mut now_waiting = HashSet::new();
        for pod in &self.waiting {
            let state_of = |i: &WaitingImage| states.get(&pull_key(&pod.uid, &i.image));
            let Some((img, state)) = pod
                .images
                .iter()
                .filter_map(|i| Some((i, state_of(i)?)))
                .max_by_key(|(_, s)| s.rank())
            else {
                continue;
            };
            let rec = Record {
                uid: pod.uid.clone(),
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                writer: Writer::Agent,
                reason: state.reason().to_string(),
                message: state.message(&img.image),
                containers: pod
                    .images
                    .iter()
                    .filter(|i| state_of(i) == Some(state))
                    .map(|i| i.container.clone())
                    .collect(),
                all_containers: pod.containers.clone(),
                refused: false,
                at_us: waiting::now_us(),
                event: None,
            };
            match waiting::write(&self.paths, &rec) {
                Ok(()) => {
                    now_waiting.insert(pod.uid.clone());
                }
                Err(e) => log(&format!("pod {}/{}: {e}", pod.namespace, pod.name)),
            }
        }
        for uid in self.recorded.difference(&now_waiting) {
            if let Err(e) = waiting::clear(&self.paths, uid, Some(Writer::Agent)) {
                log(&format!("pod {uid}: {e}"));
            }
        }
        self.recorded = now_waiting;
    }
}

/// The keyring of a local pod's `imagePullSecrets`: the named Secrets of its namespace in the
/// manifest directories (read now, so an edited Secret counts at the next pull).
fn pod_keyring(paths: &Paths, namespace: &str, names: &[String]) -> Result<Keyring, String> {
    if names.is_empty() {
        return Ok(Keyring::default());
    }
    let catalog = crate::manifest::Catalog::load(paths);
    let mut found = Vec::new();
    for name in names {
        match catalog.secrets.get(&(namespace.to_string(), name.clone())) {
            Some((secret, _)) => found.push(secret),
            None => log(&format!(
                "pull secret {namespace}/{name} not found in the manifest directories; \
                 the image pull may not succeed"
            )),
        }
    }
    Keyring::from_pull_secrets(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::queue::{BACKOFF_INITIAL, RESYNC_AFTER_FAILURE};

    fn pod(uid: &str, image: &str, policy: &str) -> WaitingPod {
        WaitingPod {
            namespace: "default".into(),
            name: uid.into(),
            uid: uid.into(),
            file: "/etc/pods.d/p.yaml".into(),
            containers: vec!["a".into(), "b".into()],
            images: vec![WaitingImage {
                container: "a".into(),
                image: image.into(),
                pull_policy: policy.into(),
            }],
            pull_secrets: vec![],
        }
    }

    fn running(unit: &str, reference: &str, policy: &str, id: &str) -> RunningImage {
        RunningImage {
            unit: unit.into(),
            key: pull_key("u", reference),
            namespace: "default".into(),
            pull_secrets: vec![],
            reference: reference.into(),
            pull_policy: policy.into(),
            image_id: id.into(),
        }
    }

    #[test]
    fn always_images_are_asked_for_at_every_start_and_a_moved_tag_reloads() {
        let root = std::env::temp_dir().join(format!("podunit-restart-{}", std::process::id()));
        let paths = Paths::with_root(&root);
        let (tx, _rx) = mpsc::channel();
        let mut p = ImagePulls::spawn(paths, tx);
        let (worker, requests) = mpsc::channel();
        p.queue = PullQueue::with_sender(worker);
        let image = |r: Result<(Request, Instant), _>| r.map(|(r, _)| r.image);
        let old = "docker.io/library/busybox@sha256:01";
        p.set_running(vec![
            running("a.service", "busybox", "Always", old),
            running("b.service", "busybox:1.36", "IfNotPresent", old),
            running("c.service", "busybox:1.37", "Never", old),
        ]);
        // podunit-sync's start counts as the start of what runs already (at boot it comes last).
        assert_eq!(image(requests.try_recv()).as_deref(), Ok("busybox"));
        assert!(requests.try_recv().is_err(), "only Always asks again");
        p.container_started("a.service");
        assert!(requests.try_recv().is_err(), "one pull under way is enough");
        // The tag did not move: nothing to render again.
        assert!(!p.pulled("u_busybox", "busybox", Ok(old.into())));
        p.container_started("b.service");
        p.container_started("c.service");
        p.container_started("unknown.service");
        assert!(requests.try_recv().is_err());
        // A restart asks again; the tag moved: reload (the pod renders from the new image).
        p.container_started("a.service");
        assert_eq!(image(requests.try_recv()).as_deref(), Ok("busybox"));
        assert!(p.pulled(
            "u_busybox",
            "busybox",
            Ok("docker.io/library/busybox@sha256:02".into())
        ));
        // The pod's restart that follows is for the moved tag, once.
        assert!(!p.take_moved(&["b.service".into()]));
        assert!(p.take_moved(&["a.service".into(), "b.service".into()]));
        assert!(!p.take_moved(&["a.service".into()]));
        // Unreachable registry: the container keeps its image, no reload, back-off respected.
        p.container_started("a.service");
        assert_eq!(image(requests.try_recv()).as_deref(), Ok("busybox"));
        assert!(!p.pulled("u_busybox", "busybox", Err("connection refused".into())));
        p.container_started("a.service");
        assert!(requests.try_recv().is_err(), "in back-off: not asked again");
        assert!(p.pulls_at_start("a.service"));
        assert!(!p.pulls_at_start("b.service"));
    }

    #[test]
    fn running_images_come_from_local_plans_only() {
        use crate::translate::plan::RootPlan;
        let dir = std::env::temp_dir().join(format!("podunit-plans-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(PLAN_DIR)).unwrap();
        let plan = |source: &str| PodPlan {
            namespace: "default".into(),
            uid: "u".into(),
            source: source.into(),
            roots: vec![RootPlan {
                container: "app".into(),
                image: "docker.io/library/busybox@sha256:01".into(),
                layers: vec![],
                working_dir: None,
                reference: "busybox".into(),
                pull_policy: "Always".into(),
                devices: false,
                setuid: true,
            }],
            ..PodPlan::default()
        };
        let pod = |unit: &str| GeneratedPod {
            key: crate::generate::output::PodKey {
                namespace: "default".into(),
                name: unit.into(),
            },
            uid: Some("u".into()),
            pod_unit: Some(format!("{unit}.service")),
            slice: None,
            containers: vec![crate::generate::output::GeneratedContainer {
                name: "app".into(),
                unit: format!("{unit}-app.service"),
                kind: crate::generate::output::ContainerKind::App,
                order: 0,
                restart: "always".into(),
                stop_timeout_s: None,
            }],
            source_path: None,
            hash: String::new(),
            job: None,
            ordered: None,
            workload: None,
        };
        for (unit, source) in [
            ("local", "/etc/pods.d/p.yaml".to_string()),
            ("api", format!("{}/default_p.yaml", Paths::SPOOL)),
        ] {
            let file = dir.join(PLAN_DIR).join(PodPlan::file_name(unit));
            std::fs::write(file, serde_json::to_vec(&plan(&source)).unwrap()).unwrap();
        }
        let spool = Path::new(Paths::SPOOL);
        let got = running_images(&dir, &[pod("local"), pod("api"), pod("noplan")], spool);
        assert_eq!(
            got,
            [running(
                "local-app.service",
                "busybox",
                "Always",
                "docker.io/library/busybox@sha256:01"
            )]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn records_follow_pulls_failures_and_back_off() {
        let root = std::env::temp_dir().join(format!("podunit-pulls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let paths = Paths::with_root(&root);
        let (tx, _rx) = mpsc::channel();
        let mut p = ImagePulls::spawn(paths.clone(), tx);
        // No pull thread: requests are only recorded as in flight here.
        let (worker, requests) = mpsc::channel();
        p.queue = PullQueue::with_sender(worker);
        let image = |r: Result<(Request, Instant), _>| r.map(|(r, _)| r.image);
        p.set_waiting(vec![
            pod("u1", "busybox:1.36", "IfNotPresent"),
            pod("u2", "x:1", "Never"),
        ]);
        p.pass();
        assert_eq!(image(requests.try_recv()).as_deref(), Ok("busybox:1.36"));
        assert!(requests.try_recv().is_err(), "Never is never pulled");
        let recs = waiting::read_all(&paths).unwrap();
        let reasons: Vec<_> = recs
            .iter()
            .map(|r| (r.uid.as_str(), r.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [("u1", "ContainerCreating"), ("u2", "ErrImageNeverPull")]
        );
        assert_eq!(recs[0].containers, ["a"]);
        assert_eq!(recs[0].all_containers, ["a", "b"]);

        assert!(!p.pulled(
            "u1_busybox:1.36",
            "busybox:1.36",
            Err("manifest unknown".into())
        ));
        p.pass();
        assert!(requests.try_recv().is_err(), "no retry before the back-off");
        let r = &waiting::read_all(&paths).unwrap()[0];
        assert_eq!(
            (r.reason.as_str(), r.message.as_str()),
            ("ErrImagePull", "manifest unknown")
        );
        // Past the resync, before the retry: back-off.
        let failed_at = Instant::now();
        p.pass_at(failed_at + RESYNC_AFTER_FAILURE);
        let r = &waiting::read_all(&paths).unwrap()[0];
        assert_eq!(r.reason, "ImagePullBackOff");
        assert_eq!(r.message, "Back-off pulling image \"busybox:1.36\"");
        assert!(p.next_deadline().is_some());
        // Retry due: pulled again.
        p.pass_at(failed_at + BACKOFF_INITIAL);
        assert_eq!(image(requests.try_recv()).as_deref(), Ok("busybox:1.36"));
        p.pulled("u1_busybox:1.36", "busybox:1.36", Err("again".into()));
        assert_eq!(p.queue.failures("u1_busybox:1.36"), 2);
        // Pulled: reload; once the pods render they wait no more and their records go.
        assert!(p.pulled(
            "u1_busybox:1.36",
            "busybox:1.36",
            Ok("docker.io/library/busybox@sha256:00".into())
        ));
        p.set_waiting(Vec::new());
        p.pass();
        assert!(waiting::read_all(&paths).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn local_pods_pull_with_their_pull_secrets_from_the_manifest_directories() {
        let root = std::env::temp_dir().join(format!("podunit-secrets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let paths = Paths::with_root(&root);
        let pods_d = paths.host(Paths::ETC_PODS);
        std::fs::create_dir_all(&pods_d).unwrap();
        let secret = |name: &str, json: &str| {
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}}}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{json}'\n"
            )
        };
        std::fs::write(
            pods_d.join("secrets.yaml"),
            [
                secret(
                    "regcred",
                    r#"{"auths":{"reg.example:5000":{"username":"u","password":"p"}}}"#,
                ),
                secret("broken", "not json"),
            ]
            .join("---\n"),
        )
        .unwrap();
        let (tx, _rx) = mpsc::channel();
        let mut p = ImagePulls::spawn(paths.clone(), tx);
        let (worker, requests) = mpsc::channel();
        p.queue = PullQueue::with_sender(worker);
        let image = "reg.example:5000/app:1";
        let with = |uid: &str, secrets: &[&str]| WaitingPod {
            pull_secrets: secrets.iter().map(|s| s.to_string()).collect(),
            ..pod(uid, image, "IfNotPresent")
        };
        p.set_waiting(vec![
            with("u1", &["missing", "regcred"]),
            with("u2", &["broken"]),
            with("u3", &[]),
        ]);
        p.pass();
        // Each pod pulls on its own key, with its own secrets.
        let (first, _) = requests.try_recv().unwrap();
        assert_eq!(first.key, "u1_reg.example:5000/app:1");
        let r = crate::image::Reference::parse(image).unwrap();
        let creds = first.keyring.lookup(&r);
        assert_eq!(creds.len(), 1);
        assert_eq!(
            (creds[0].username.as_str(), creds[0].password.as_str()),
            ("u", "p")
        );
        let (third, _) = requests.try_recv().unwrap();
        assert_eq!(third.key, "u3_reg.example:5000/app:1");
        assert!(third.keyring.lookup(&r).is_empty());
        assert!(requests.try_recv().is_err());
        // A secret that is no pull secret's JSON fails that pod's pull, and says which.
        let recs = waiting::read_all(&paths).unwrap();
        let u2 = recs.iter().find(|r| r.uid == "u2").unwrap();
        assert_eq!(u2.reason, "ErrImagePull");
        assert!(u2.message.contains("\"broken\""), "{}", u2.message);
        let _ = std::fs::remove_dir_all(&root);
    }
}
