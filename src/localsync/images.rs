//! Pods that wait for images: podunit-sync pulls what the generator found missing (its report's
//! `waiting`), then reloads so that the generator renders the pods.
//!
//! Pulls run one at a time on a worker thread of their own: a pull is bounded by the puller's
//! limits but can still take minutes, and the main thread must keep reconciling every other pod.
//! The main thread keeps the state (in flight, back-off) and the waiting records `podunit status`
//! shows: `ContainerCreating` while a pull runs, `ErrImagePull` with the registry's message when
//! it failed, `ImagePullBackOff` until the retry, `ErrImageNeverPull` for `imagePullPolicy: Never`,
//! as the kubelet shows them.

use crate::common::paths::Paths;
use crate::generate::report::WaitingPod;
use crate::localsync::{Msg, log};
use crate::status::waiting::{self, Record, Writer};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The kubelet's image pull back-off: 10 s, doubling, at most 300 s.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// After a failed pull the kubelet's next sync of the pod finds the image in back-off and shows
/// `ImagePullBackOff`; podunit-sync looks again this long after the failure.
pub const RESYNC_AFTER_FAILURE: Duration = Duration::from_secs(2);

/// The back-off after `failures` failed pulls in a row (the first: 10 s).
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (BACKOFF_INITIAL * 2u32.pow(doublings)).min(BACKOFF_MAX)
}

#[derive(Debug, Clone)]
struct Failure {
    count: u32,
    message: String,
    at: Instant,
    retry_at: Instant,
}

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

pub struct ImagePulls {
    paths: Paths,
    worker: mpsc::Sender<String>,
    in_flight: BTreeSet<String>,
    failures: HashMap<String, Failure>,
    waiting: Vec<WaitingPod>,
    /// The uids this process wrote records for.
    recorded: HashSet<String>,
}

impl ImagePulls {
    /// Starts the worker; its results come back on `results` as [`Msg::Pulled`].
    pub fn spawn(paths: Paths, results: mpsc::Sender<Msg>) -> ImagePulls {
        let (tx, rx) = mpsc::channel::<String>();
        let worker_paths = paths.clone();
        std::thread::spawn(move || {
            for image in rx {
                let result = pull(&worker_paths, &image);
                if results.send(Msg::Pulled { image, result }).is_err() {
                    return;
                }
            }
        });
        ImagePulls {
            paths,
            worker: tx,
            in_flight: BTreeSet::new(),
            failures: HashMap::new(),
            waiting: Vec::new(),
            recorded: HashSet::new(),
        }
    }

    /// The pods the generator's last run left waiting for images.
    pub fn set_waiting(&mut self, waiting: Vec<WaitingPod>) {
        self.waiting = waiting;
    }

    /// When [`Self::pass`] has something to do next (a retry, a back-off to show).
    pub fn next_deadline(&self) -> Option<Instant> {
        let now = Instant::now();
        self.failures
            .iter()
            .filter(|(image, _)| self.wanted(image))
            .flat_map(|(_, f)| [f.at + RESYNC_AFTER_FAILURE, f.retry_at])
            .filter(|t| *t > now)
            .min()
            .or_else(|| {
                // A retry that is due, not yet asked for.
                self.failures
                    .iter()
                    .any(|(i, f)| {
                        self.wanted(i) && f.retry_at <= now && !self.in_flight.contains(i)
                    })
                    .then_some(now)
            })
    }

    fn wanted(&self, image: &str) -> bool {
        self.waiting
            .iter()
            .flat_map(|p| &p.images)
            .any(|i| i.image == image && i.pull_policy != "Never")
    }

    /// Asks for the pulls that are due and writes every waiting pod's record.
    pub fn pass(&mut self) {
        let now = Instant::now();
        let mut states: HashMap<String, ImageState> = HashMap::new();
        for img in self.waiting.iter().flat_map(|p| &p.images) {
            if states.contains_key(&img.image) {
                continue;
            }
            let state = if img.pull_policy == "Never" {
                ImageState::NeverPull
            } else if self.in_flight.contains(&img.image) {
                ImageState::Pulling
            } else {
                match self.failures.get(&img.image) {
                    Some(f) if now < f.at + RESYNC_AFTER_FAILURE => {
                        ImageState::Failed(f.message.clone())
                    }
                    Some(f) if now < f.retry_at => ImageState::BackOff,
                    _ => {
                        log(&format!("pulling image {:?}", img.image));
                        if self.worker.send(img.image.clone()).is_ok() {
                            self.in_flight.insert(img.image.clone());
                        }
                        ImageState::Pulling
                    }
                }
            };
            states.insert(img.image.clone(), state);
        }
        self.write_records(&states);
    }

    /// A pull ended. Returns whether to reload (an image came: its pods can render now).
    pub fn pulled(&mut self, image: &str, result: Result<String, String>) -> bool {
        self.in_flight.remove(image);
        match result {
            Ok(digest) => {
                log(&format!("pulled image {image:?} ({digest})"));
                self.failures.remove(image);
                true
            }
            Err(message) => {
                let now = Instant::now();
                let count = self.failures.get(image).map_or(0, |f| f.count) + 1;
                let wait = backoff(count);
                log(&format!(
                    "pulling image {image:?} failed: {message}; next try in {}s",
                    wait.as_secs()
                ));
                self.failures.insert(
                    image.to_string(),
                    Failure {
                        count,
                        message,
                        at: now,
                        retry_at: now + wait,
                    },
                );
                false
            }
        }
    }

    fn write_records(&mut self, states: &HashMap<String, ImageState>) {
        let mut now_waiting = HashSet::new();
        for pod in &self.waiting {
            let Some((img, state)) = pod
                .images
                .iter()
                .filter_map(|i| Some((i, states.get(&i.image)?)))
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
                    .filter(|i| states.get(&i.image) == Some(state))
                    .map(|i| i.container.clone())
                    .collect(),
                all_containers: pod.containers.clone(),
                refused: false,
                at_us: waiting::now_us(),
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

/// One pull with the node's registries config and credentials. Returns the resolved digest, or
/// the registry's message.
fn pull(paths: &Paths, image: &str) -> Result<String, String> {
    use crate::image::pull::{NodePull, Puller};
    let reference = crate::image::Reference::parse(image)
        .map_err(|e| format!("{image:?} is not a valid image reference: {e}"))?;
    let node = NodePull::load(paths)?;
    let store = crate::image::Store::from_paths(paths);
    let puller = Puller {
        store: &store,
        client: &node.client,
        platform: crate::image::platform::host(),
        allowed_registries: node.allowed_registries.as_deref(),
        progress: None,
    };
    puller
        .pull(&reference)
        .map(|img| img.digest.to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::report::WaitingImage;

    #[test]
    fn backoff_as_the_kubelet_10s_doubling_to_300s() {
        let secs: Vec<u64> = (1..=7).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff(1000), BACKOFF_MAX);
    }

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
        }
    }

    #[test]
    fn records_follow_pulls_failures_and_back_off() {
        let root = std::env::temp_dir().join(format!("podunit-pulls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let paths = Paths::with_root(&root);
        let (tx, _rx) = mpsc::channel();
        let mut p = ImagePulls::spawn(paths.clone(), tx);
        // The worker is not used: requests are only recorded as in flight here.
        let (worker, requests) = mpsc::channel();
        p.worker = worker;
        p.set_waiting(vec![
            pod("u1", "busybox:1.36", "IfNotPresent"),
            pod("u2", "x:1", "Never"),
        ]);
        p.pass();
        assert_eq!(requests.try_recv().as_deref(), Ok("busybox:1.36"));
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

        assert!(!p.pulled("busybox:1.36", Err("manifest unknown".into())));
        p.pass();
        assert!(requests.try_recv().is_err(), "no retry before the back-off");
        let r = &waiting::read_all(&paths).unwrap()[0];
        assert_eq!(
            (r.reason.as_str(), r.message.as_str()),
            ("ErrImagePull", "manifest unknown")
        );
        // Past the resync, before the retry: back-off.
        let f = p.failures.get_mut("busybox:1.36").unwrap();
        f.at -= RESYNC_AFTER_FAILURE;
        p.pass();
        let r = &waiting::read_all(&paths).unwrap()[0];
        assert_eq!(r.reason, "ImagePullBackOff");
        assert_eq!(r.message, "Back-off pulling image \"busybox:1.36\"");
        assert!(p.next_deadline().is_some());
        // Retry due: pulled again; a second failure doubles the wait.
        p.failures.get_mut("busybox:1.36").unwrap().retry_at = Instant::now();
        p.pass();
        assert_eq!(requests.try_recv().as_deref(), Ok("busybox:1.36"));
        p.pulled("busybox:1.36", Err("again".into()));
        assert_eq!(p.failures["busybox:1.36"].count, 2);
        let left = p.failures["busybox:1.36"].retry_at - Instant::now();
        assert!(
            left > BACKOFF_INITIAL && left <= 2 * BACKOFF_INITIAL,
            "{left:?}"
        );
        // Pulled: reload; once the pods render they wait no more and their records go.
        assert!(p.pulled("busybox:1.36", Ok("sha256:00".into())));
        p.set_waiting(Vec::new());
        p.pass();
        assert!(waiting::read_all(&paths).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }
}
