//! Pods that wait for images: podunit-sync pulls what the generator found missing (its report's
//! `waiting`), then reloads so that the generator renders the pods.
//!
//! Pulls run on the one pull queue ([`crate::image::queue`]), which the cluster agent uses too.
//! The main thread keeps the waiting records `podunit status`
//! shows: `ContainerCreating` while a pull runs, `ErrImagePull` with the registry's message when
//! it failed, `ImagePullBackOff` until the retry, `ErrImageNeverPull` for `imagePullPolicy: Never`,
//! as the kubelet shows them.

use crate::common::paths::Paths;
use crate::generate::report::WaitingPod;
use crate::image::auth::Keyring;
use crate::image::queue::{self, PullQueue, Request};
use crate::localsync::{Msg, log};
use crate::status::waiting::{self, Record, Writer};
use std::collections::{HashMap, HashSet};
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

pub struct ImagePulls {
    paths: Paths,
    /// Keyed by image: local pods have no pull secrets, so one pull serves every pod.
    queue: PullQueue,
    waiting: Vec<WaitingPod>,
    /// The uids this process wrote records for.
    recorded: HashSet<String>,
}

impl ImagePulls {
    /// Starts the pull thread; its results come back on `results` as [`Msg::Pulled`].
    pub fn spawn(paths: Paths, results: mpsc::Sender<Msg>) -> ImagePulls {
        let queue = PullQueue::spawn(paths.clone(), move |d| {
            let result = d.result.map(|p| p.image_id);
            results
                .send(Msg::Pulled {
                    image: d.image,
                    result,
                })
                .is_ok()
        });
        ImagePulls {
            paths,
            queue,
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
        self.queue.next_deadline(|image| self.wanted(image))
    }

    fn wanted(&self, image: &str) -> bool {
        self.waiting
            .iter()
            .flat_map(|p| &p.images)
            .any(|i| i.image == image && i.pull_policy != "Never")
    }

    /// Asks for the pulls that are due and writes every waiting pod's record.
    pub fn pass(&mut self) {
        self.pass_at(Instant::now());
    }

    fn pass_at(&mut self, now: Instant) {
        let mut states: HashMap<String, ImageState> = HashMap::new();
        for img in self.waiting.iter().flat_map(|p| &p.images) {
            if states.contains_key(&img.image) {
                continue;
            }
            let state = if img.pull_policy == "Never" {
                ImageState::NeverPull
            } else {
                match self.queue.state(&img.image, now) {
                    Some(queue::State::Pulling) => ImageState::Pulling,
                    Some(queue::State::Failed(m)) => ImageState::Failed(m),
                    Some(queue::State::BackOff) => ImageState::BackOff,
                    None => {
                        log(&format!("pulling image {:?}", img.image));
                        self.queue.request(Request {
                            key: img.image.clone(),
                            image: img.image.clone(),
                            keyring: Keyring::default(),
                        });
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
        let result = result.map(|image_id| queue::Pulled {
            image_id,
            took: std::time::Duration::ZERO,
        });
        match (self.queue.finished(image, &result), &result) {
            (_, Ok(p)) => {
                log(&format!("pulled image {image:?} ({})", p.image_id));
                true
            }
            (wait, Err(message)) => {
                log(&format!(
                    "pulling image {image:?} failed: {message}; next try in {}s",
                    wait.unwrap_or_default().as_secs()
                ));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::report::WaitingImage;
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
        }
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

        assert!(!p.pulled("busybox:1.36", Err("manifest unknown".into())));
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
        p.pulled("busybox:1.36", Err("again".into()));
        assert_eq!(p.queue.failures("busybox:1.36"), 2);
        // Pulled: reload; once the pods render they wait no more and their records go.
        assert!(p.pulled(
            "busybox:1.36",
            Ok("docker.io/library/busybox@sha256:00".into())
        ));
        p.set_waiting(Vec::new());
        p.pass();
        assert!(waiting::read_all(&paths).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }
}
