//! podunit-sync's one image-pull queue, for local and API pods alike: pulls run one at a time on
//! a thread of their own (a pull can take minutes; the caller's loop must keep serving every other
//! pod), and a failed pull backs off as the kubelet's image manager does. The caller decides what
//! to pull (pull policy, which pods wait) and what to show; this module only runs pulls and keeps
//! the in-flight and back-off state, per key (an image, or a pod's image: the kubelet's back-off
//! key is `<pod uid>_<image>`).

use super::auth::Keyring;
use super::pull::{NodePull, Puller};
use crate::common::paths::Paths;
use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The kubelet's image pull back-off: 10 s, doubling, at most 300 s.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// After a failed pull the kubelet's next sync of the pod finds the image in back-off and shows
/// `ImagePullBackOff`; until then (this long) it shows `ErrImagePull`.
pub const RESYNC_AFTER_FAILURE: Duration = Duration::from_secs(2);

/// The back-off after `failures` failed pulls in a row (the first: 10 s).
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (BACKOFF_INITIAL * 2u32.pow(doublings)).min(BACKOFF_MAX)
}

/// One pull to run. `keyring`: credentials tried before the node's (a pod's `imagePullSecrets`).
pub struct Request {
    pub key: String,
    pub image: String,
    pub keyring: Keyring,
}

/// A pull that worked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// `registry/repository@sha256:...`: the container's `imageID`.
    pub image_id: String,
    /// How long the pull took, from the request.
    pub took: Duration,
}

/// A pull that ended: the image, or the registry's message.
#[derive(Debug, Clone)]
pub struct Done {
    pub key: String,
    pub image: String,
    pub result: Result<Pulled, String>,
}

/// What a key shows while it is not free to pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Pulling,
    /// It just failed: `ErrImagePull` with the registry's message.
    Failed(String),
    /// `ImagePullBackOff` until the next try.
    BackOff,
}

#[derive(Debug, Clone)]
struct Failure {
    count: u32,
    message: String,
    /// When `ErrImagePull` was first shown for it.
    shown: Option<Instant>,
    retry_at: Instant,
}

pub struct PullQueue {
    worker: mpsc::Sender<(Request, Instant)>,
    in_flight: BTreeSet<String>,
    failures: HashMap<String, Failure>,
}

impl PullQueue {
    /// Starts the pull thread; `done` gets each result (it returns false once nobody listens, and
    /// the thread ends).
    pub fn spawn(paths: Paths, done: impl Fn(Done) -> bool + Send + 'static) -> PullQueue {
        let (tx, rx) = mpsc::channel::<(Request, Instant)>();
        std::thread::spawn(move || {
            for (req, asked) in rx {
                let result = pull(&paths, &req.image, req.keyring).map(|image_id| Pulled {
                    image_id,
                    took: asked.elapsed(),
                });
                let d = Done {
                    key: req.key,
                    image: req.image,
                    result,
                };
                if !done(d) {
                    return;
                }
            }
        });
        PullQueue::with_sender(tx)
    }

    /// A queue whose requests go to `sender` instead of a pull thread (tests of the callers).
    pub fn with_sender(sender: mpsc::Sender<(Request, Instant)>) -> PullQueue {
        PullQueue {
            worker: sender,
            in_flight: BTreeSet::new(),
            failures: HashMap::new(),
        }
    }

    /// What `key` shows at `now`; `None`: nothing under way and no back-off, a pull may start.
    /// A failure shows as `ErrImagePull` for `RESYNC_AFTER_FAILURE` from the first time it is
    /// asked for, however late that is: a slow pass must not go straight to `ImagePullBackOff`.
    pub fn state(&mut self, key: &str, now: Instant) -> Option<State> {
        if self.in_flight.contains(key) {
            return Some(State::Pulling);
        }
        let f = self.failures.get_mut(key)?;
        let shown = *f.shown.get_or_insert(now);
        if now < shown + RESYNC_AFTER_FAILURE {
            Some(State::Failed(f.message.clone()))
        } else if now < f.retry_at {
            Some(State::BackOff)
        } else {
            None
        }
    }

    /// Queues a pull. False if the pull thread is gone.
    pub fn request(&mut self, req: Request) -> bool {
        let key = req.key.clone();
        let sent = self.worker.send((req, Instant::now())).is_ok();
        if sent {
            self.in_flight.insert(key);
        }
        sent
    }

    /// Records a pull's end. On a failure, returns the wait before the next try.
    pub fn finished(&mut self, key: &str, result: &Result<Pulled, String>) -> Option<Duration> {
        self.in_flight.remove(key);
        match result {
            Ok(_) => {
                self.failures.remove(key);
                None
            }
            Err(message) => {
                let now = Instant::now();
                let count = self.failures.get(key).map_or(0, |f| f.count) + 1;
                let wait = backoff(count);
                self.failures.insert(
                    key.to_string(),
                    Failure {
                        count,
                        message: message.clone(),
                        shown: None,
                        retry_at: now + wait,
                    },
                );
                Some(wait)
            }
        }
    }

    /// How many pulls of `key` failed in a row.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures.get(key).map_or(0, |f| f.count)
    }

    /// Drops what is known of `key` (its pod is gone).
    pub fn forget(&mut self, key: &str) {
        self.failures.remove(key);
    }

    /// When the state of one of the keys `wanted` accepts changes next (failed -> back-off ->
    /// free to pull); `now` when a retry is already due.
    pub fn next_deadline(&self, wanted: impl Fn(&str) -> bool) -> Option<Instant> {
        let now = Instant::now();
        let mut due = false;
        let next = self
            .failures
            .iter()
            .filter(|(k, _)| wanted(k) && !self.in_flight.contains(*k))
            .flat_map(|(_, f)| {
                due |= f.retry_at <= now;
                [f.shown.map(|t| t + RESYNC_AFTER_FAILURE), Some(f.retry_at)]
                    .into_iter()
                    .flatten()
            })
            .filter(|t| *t > now)
            .min();
        if due { Some(now) } else { next }
    }
}

/// One pull with the node's registries config and credentials (after `keyring`'s). Returns the
/// image's `imageID`, or the registry's message.
pub fn pull(paths: &Paths, image: &str, keyring: Keyring) -> Result<String, String> {
    let reference = super::Reference::parse(image)
        .map_err(|e| format!("{image:?} is not a valid image reference: {e}"))?;
    let node = NodePull::load_with(paths, keyring)?;
    let store = super::Store::from_paths(paths);
    let puller = Puller {
        store: &store,
        client: &node.client,
        platform: super::platform::host(),
        allowed_registries: node.allowed_registries.as_deref(),
        progress: None,
    };
    puller
        .pull(&reference)
        .map(|img| img.image_id())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_as_the_kubelet_10s_doubling_to_300s() {
        let secs: Vec<u64> = (1..=7).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff(1000), BACKOFF_MAX);
    }

    #[test]
    fn a_failure_asked_for_late_still_shows_err_image_pull_first() {
        let (tx, _rx) = mpsc::channel();
        let mut q = PullQueue::with_sender(tx);
        q.request(Request {
            key: "k".into(),
            image: "busybox".into(),
            keyring: Keyring::default(),
        });
        q.finished("k", &Err("denied".into()));
        // The first look comes after what would have been the whole ErrImagePull window.
        let late = Instant::now() + 3 * RESYNC_AFTER_FAILURE;
        assert_eq!(q.state("k", late), Some(State::Failed("denied".into())));
        assert_eq!(
            q.state("k", late + RESYNC_AFTER_FAILURE),
            Some(State::BackOff)
        );
    }

    #[test]
    fn states_follow_requests_failures_and_back_off() {
        let (tx, rx) = mpsc::channel();
        let mut q = PullQueue::with_sender(tx);
        let t0 = Instant::now();
        assert_eq!(q.state("u_busybox", t0), None);
        assert!(q.request(Request {
            key: "u_busybox".into(),
            image: "busybox".into(),
            keyring: Keyring::default(),
        }));
        assert_eq!(rx.try_recv().unwrap().0.image, "busybox");
        assert_eq!(q.state("u_busybox", t0), Some(State::Pulling));
        assert_eq!(
            q.finished("u_busybox", &Err("unauthorized".into())),
            Some(BACKOFF_INITIAL)
        );
        let now = Instant::now();
        assert_eq!(
            q.state("u_busybox", now),
            Some(State::Failed("unauthorized".into()))
        );
        let later = now + RESYNC_AFTER_FAILURE;
        assert_eq!(q.state("u_busybox", later), Some(State::BackOff));
        assert_eq!(
            q.next_deadline(|k| k == "u_busybox"),
            Some(later),
            "the turn to back-off is the next change"
        );
        assert!(q.next_deadline(|k| k == "u_busybox").is_some());
        assert_eq!(q.next_deadline(|_| false), None);
        assert_eq!(q.state("u_busybox", now + BACKOFF_INITIAL), None);
        // A second failure doubles the wait; a success forgets them.
        q.request(Request {
            key: "u_busybox".into(),
            image: "busybox".into(),
            keyring: Keyring::default(),
        });
        assert_eq!(
            q.finished("u_busybox", &Err("again".into())),
            Some(2 * BACKOFF_INITIAL)
        );
        assert_eq!(q.failures("u_busybox"), 2);
        let ok = Ok(Pulled {
            image_id: "docker.io/library/busybox@sha256:00".into(),
            took: Duration::ZERO,
        });
        assert_eq!(q.finished("u_busybox", &ok), None);
        assert_eq!(q.failures("u_busybox"), 0);
        assert_eq!(q.state("u_busybox", Instant::now()), None);
    }
}
