//! The images of API pods, as the kubelet's image manager handles them: before a pod is first
//! spooled each container's image is checked against its `imagePullPolicy` (`Never`: only what
//! is on the node; `IfNotPresent`: pulled when absent; `Always`: pulled, i.e. the tag resolved
//! again at the registry, once for this pod, the layers already here reused) and pulled through
//! the node's one pull queue ([`crate::image::queue`], local mode's too) with the pod's
//! `imagePullSecrets` before the node's credentials. Meanwhile the containers wait:
//! `ContainerCreating` while a pull runs, `ErrImagePull` with the registry's message, then
//! `ImagePullBackOff` (10 s doubling to 300 s), `ErrImageNeverPull`; with the kubelet's Events
//! `Pulling`, `Pulled`, `Failed`, `BackOff`.
//!
//! The kubelet runs the same image manager at every start of a container, its restarts
//! included. systemd restarts a container by itself; while it waits to (`CrashLoopBackOff`, its
//! `RestartSec=`) the agent does what the image manager does for that start: `Always` asks the
//! registry again, and when the tag moved the pod is rendered again from the new image (the
//! reload changes its plan, and the pod restarts on it); otherwise `Container image "X" already
//! present on machine`.

use super::context::{IMAGE_NEVER_PULL, log, uid_of};
use super::state::Phase;
use super::worker::Worker;
use crate::image::auth::Keyring;
use crate::image::policy::{self, AtStart};
use crate::image::queue::{Done, Request, State};
use crate::kube::events::{Involved, message};
use crate::translate::image::{self as timage, ImageRoot, Unresolved};
use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use std::collections::BTreeMap;
use std::time::Instant;

pub(super) const ERR_IMAGE_PULL: &str = "ErrImagePull";
pub(super) const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
const CREATING: &str = "ContainerCreating";
/// What `shown` notes for an image found on the node without a pull.
const PRESENT: &str = "Present";

/// One container's wait: how much it says (the worst one speaks for the pod), reason, message.
struct Wait {
    container: String,
    rank: u8,
    reason: &'static str,
    message: String,
}

fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    })
}

/// The image a pull can bring: not the host, a path or a hand-made root, nor a reference the
/// generator will refuse (InvalidPod). `Some(imageID)` when the store has it.
fn registry_image(
    reference: &str,
    fs: &crate::generate::FsImages,
) -> Option<Result<String, Unresolved>> {
    if reference.is_empty() || reference.starts_with('/') || timage::store_path(reference).is_none()
    {
        return None;
    }
    match timage::resolve(reference, fs) {
        Ok(ImageRoot::Stored(s)) => Some(Ok(s.image_id)),
        Ok(_) | Err(Unresolved::Invalid(_)) => None,
        Err(absent) => Some(Err(absent)),
    }
}

impl Worker {
    fn fs_images(&self) -> crate::generate::FsImages {
        crate::generate::FsImages {
            paths: self.cfg.paths.clone(),
            host_aliases: self.cfg.policy.host_images.clone(),
        }
    }

    /// Whether the pod's images are all on the node, pulling what its policies ask for first.
    /// `Some(false)`: its containers wait (posted, and admitted again when that changes);
    /// `None`: the API server did not answer (nothing changed).
    pub(super) fn ensure_images(&mut self, k: &(String, String), pod: &Pod) -> Option<bool> {
        let fs = self.fs_images();
        let uid = uid_of(pod);
        let now = Instant::now();
        let mut waits: Vec<Wait> = Vec::new();
        let mut present: Vec<(String, String)> = Vec::new();
        let mut keyring: Option<Keyring> = None;
        // An ErrImagePull not posted yet (statuses wait while a reload is pending, or behind
        // other pods' PATCHes) is held until it is: the API shows ErrImagePull before
        // ImagePullBackOff however late the status pass comes, as the kubelet's sync does.
        let unposted = self.status_due.pods.contains(k);
        let held = match self.pods.get(k).map(|r| &r.phase) {
            Some(Phase::Blocked {
                reason, message, ..
            }) if unposted && reason == ERR_IMAGE_PULL => Some(message.clone()),
            _ => None,
        };
        for c in containers(pod) {
            let reference = c.image.clone().unwrap_or_default();
            let Some(stored) = registry_image(&reference, &fs) else {
                continue;
            };
            let policy =
                crate::image::policy::pull_policy(&reference, c.image_pull_policy.as_deref());
            let rec = self.pods.get(k)?;
            let pulled_here = rec.images.pulled.contains_key(&reference);
            let need_pull = match (policy.as_str(), &stored) {
                ("Never", _) => false,
                ("IfNotPresent", s) => s.is_err(),
                // Always: the registry decides what the tag is now, once for this pod.
                (_, s) => s.is_err() || !pulled_here,
            };
            if !need_pull {
                match stored {
                    Ok(_) if !pulled_here => present.push((c.name.clone(), reference)),
                    Ok(_) => {}
                    Err(_) => waits.push(Wait {
                        container: c.name.clone(),
                        rank: 3,
                        reason: IMAGE_NEVER_PULL,
                        message: message::never_pull(&reference),
                    }),
                }
                continue;
            }
            let key = format!("{uid}_{reference}");
            let state = match self.pulls.as_mut() {
                Some(q) => q.state(&key, now),
                None => Some(State::Failed("podunit-sync has no image pull queue".into())),
            };
            let wait = |rank, reason, message| Wait {
                container: c.name.clone(),
                rank,
                reason,
                message,
            };
            match state {
                Some(State::Pulling) => waits.push(wait(0, CREATING, String::new())),
                Some(State::Failed(m)) => waits.push(wait(2, ERR_IMAGE_PULL, m)),
                Some(State::BackOff) => match &held {
                    Some(m) => waits.push(wait(2, ERR_IMAGE_PULL, m.clone())),
                    None => waits.push(wait(
                        1,
                        IMAGE_PULL_BACK_OFF,
                        message::back_off_pulling(&reference),
                    )),
                },
                None => {
                    let ring = match &keyring {
                        Some(r) => r.clone(),
                        None => match self.pull_keyring(pod) {
                            Ok(r) => keyring.insert(r).clone(),
                            Err(None) => return None,
                            Err(Some(m)) => {
                                waits.push(wait(2, ERR_IMAGE_PULL, m));
                                continue;
                            }
                        },
                    };
                    log(format!("{}/{}: pulling image {reference:?}", k.0, k.1));
                    self.request_pull(pod, &c.name, key, &reference, ring);
                    waits.push(wait(0, CREATING, String::new()));
                }
            }
        }
        self.note_image_changes(k, pod, &waits, &present);
        let rec = self.pods.get_mut(k)?;
        rec.images.recheck_at = self.pulls.as_ref().and_then(|q| {
            let prefix = format!("{uid}_");
            q.next_deadline(|key| key.starts_with(&prefix))
        });
        let Some(top) = waits.iter().map(|w| w.rank).max() else {
            return Some(true);
        };
        let worst: Vec<&Wait> = waits.iter().filter(|w| w.rank == top).collect();
        let (reason, message) = (worst[0].reason, worst[0].message.clone());
        let only = worst.iter().map(|w| w.container.clone()).collect();
        self.wait_containers(k, reason, &message, None, only);
        Some(false)
    }

    /// The Events of waits that are new since the last look: `BackOff` and `Failed` when a
    /// back-off begins, `ErrImageNeverPull`, `Pulled` for an image that was already here.
    fn note_image_changes(
        &mut self,
        k: &(String, String),
        pod: &Pod,
        waits: &[Wait],
        present: &[(String, String)],
    ) {
        let image_of = |name: &str| {
            containers(pod)
                .find(|c| c.name == name)
                .and_then(|c| c.image.clone())
                .unwrap_or_default()
        };
        let now: Vec<(String, &str)> = waits
            .iter()
            .map(|w| (w.container.clone(), w.reason))
            .chain(present.iter().map(|(c, _)| (c.clone(), PRESENT)))
            .collect();
        for (container, reason) in now {
            let Some(rec) = self.pods.get_mut(k) else {
                return;
            };
            let before = rec
                .images
                .shown
                .insert(container.clone(), reason.to_string());
            if before.as_deref() == Some(reason) {
                continue;
            }
            let image = image_of(&container);
            let obj = Involved::container(pod, &container);
            match reason {
                IMAGE_PULL_BACK_OFF => {
                    self.post_event(
                        &obj,
                        "Normal",
                        "BackOff",
                        &message::back_off_pulling(&image),
                    );
                    self.post_event(&obj, "Warning", "Failed", &message::error(reason));
                }
                IMAGE_NEVER_PULL => {
                    self.post_event(&obj, "Warning", reason, &message::never_pull(&image));
                    self.post_event(&obj, "Warning", "Failed", &message::error(reason));
                }
                PRESENT => {
                    self.post_event(&obj, "Normal", "Pulled", &message::already_present(&image))
                }
                _ => {}
            }
        }
    }

    /// The image manager at the restarts systemd is about to make (containers in
    /// `CrashLoopBackOff` between two runs): an `Always` image is pulled again.
    pub(super) fn images_at_restart(&mut self, k: &(String, String), pod: &Pod, st: &PodStatus) {
        let fs = self.fs_images();
        let statuses = st
            .init_container_statuses
            .iter()
            .flatten()
            .chain(st.container_statuses.iter().flatten());
        for cs in statuses {
            let reason = cs
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.as_deref());
            let Some(restart) = policy::pending_restart(reason, cs.restart_count) else {
                continue;
            };
            let Some(rec) = self.pods.get_mut(k) else {
                return;
            };
            if rec.images.restarts.insert(cs.name.clone(), restart) == Some(restart) {
                continue;
            }
            let Some(c) = containers(pod).find(|c| c.name == cs.name) else {
                continue;
            };
            let reference = c.image.clone().unwrap_or_default();
            let Some(stored) = registry_image(&reference, &fs) else {
                continue;
            };
            let pull_policy =
                crate::image::policy::pull_policy(&reference, c.image_pull_policy.as_deref());
            let obj = Involved::container(pod, &c.name);
            match policy::at_start(&pull_policy, stored.is_ok()) {
                AtStart::Present => self.post_event(
                    &obj,
                    "Normal",
                    "Pulled",
                    &message::already_present(&reference),
                ),
                AtStart::NeverPull => self.post_event(
                    &obj,
                    "Warning",
                    IMAGE_NEVER_PULL,
                    &message::never_pull(&reference),
                ),
                AtStart::Pull => self.pull_at_restart(k, pod, &c.name, &reference),
            }
        }
    }

    fn pull_at_restart(&mut self, k: &(String, String), pod: &Pod, container: &str, image: &str) {
        let key = format!("{}_{image}", uid_of(pod));
        let obj = Involved::container(pod, container);
        match self
            .pulls
            .as_mut()
            .and_then(|q| q.state(&key, Instant::now()))
        {
            Some(State::Pulling) => {}
            Some(_) => {
                self.post_event(&obj, "Normal", "BackOff", &message::back_off_pulling(image))
            }
            None => {
                let ring = match self.pull_keyring(pod) {
                    Ok(r) => r,
                    Err(None) => return,
                    Err(Some(m)) => {
                        let text = message::failed_to_pull(image, &m);
                        self.post_event(&obj, "Warning", "Failed", &text);
                        return;
                    }
                };
                log(format!(
                    "{}/{}: container {container:?} restarts: pulling image {image:?}",
                    k.0, k.1
                ));
                self.request_pull(pod, container, key, image, ring);
            }
        }
    }

    /// Queues a pull and posts `Pulling` for `container` once it is under way.
    fn request_pull(
        &mut self,
        pod: &Pod,
        container: &str,
        key: String,
        image: &str,
        ring: Keyring,
    ) {
        let asked = self.pulls.as_mut().is_some_and(|q| {
            q.request(Request {
                key,
                image: image.to_string(),
                keyring: ring,
            })
        });
        if asked {
            let obj = Involved::container(pod, container);
            self.post_event(&obj, "Normal", "Pulling", &message::pulling(image));
        }
    }

    /// The pod's `imagePullSecrets` as one keyring (the kubelet merges them). `Err(None)`: the API
    /// server did not answer; `Err(Some)`: a secret that is no image pull secret's JSON.
    fn pull_keyring(&mut self, pod: &Pod) -> Result<Keyring, Option<String>> {
        let secrets = self.fetch_pull_secrets(pod).map_err(|()| None)?;
        Keyring::from_pull_secrets(&secrets).map_err(Some)
    }

    /// A pull ended: its Events, and the pod it was for admitted again (spooled now, or waiting
    /// with the failure).
    pub(super) fn image_pulled(&mut self, done: Done) {
        let wait = self
            .pulls
            .as_mut()
            .and_then(|q| q.finished(&done.key, &done.result));
        let uid = done.key.split_once('_').map_or("", |(u, _)| u);
        let Some(k) = self
            .pods
            .iter()
            .find(|(_, r)| r.uid == uid)
            .map(|(k, _)| k.clone())
        else {
            return;
        };
        let Some(rec) = self.pods.get_mut(&k) else {
            return;
        };
        let pod = rec.pod.get();
        match &done.result {
            Ok(p) => {
                log(format!(
                    "{}/{}: pulled image {:?} ({})",
                    k.0, k.1, done.image, p.image_id
                ));
                rec.images
                    .pulled
                    .insert(done.image.clone(), p.image_id.clone());
                let moved = containers(&pod).any(|c| {
                    c.image.as_deref() == Some(done.image.as_str())
                        && rec
                            .images
                            .ids
                            .get(&c.name)
                            .is_some_and(|id| policy::moved(id, &p.image_id))
                });
                if moved {
                    log(format!(
                        "{}/{}: image {:?} moved to {}: the pod is rendered again from it",
                        k.0, k.1, done.image, p.image_id
                    ));
                    rec.images.ids.clear();
                    self.mark_dirty(&k);
                }
            }
            Err(m) => log(format!(
                "{}/{}: pulling image {:?} failed: {m}; next try in {}s",
                k.0,
                k.1,
                done.image,
                wait.unwrap_or_default().as_secs()
            )),
        }
        let users: Vec<String> = containers(&pod)
            .filter(|c| c.image.as_deref() == Some(done.image.as_str()))
            .map(|c| c.name.clone())
            .collect();
        for c in users {
            let obj = Involved::container(&pod, &c);
            match &done.result {
                Ok(p) => {
                    let text = message::pulled(&done.image, p.took);
                    self.post_event(&obj, "Normal", "Pulled", &text);
                }
                Err(m) => {
                    let text = message::failed_to_pull(&done.image, m);
                    self.post_event(&obj, "Warning", "Failed", &text);
                    let text = message::error(ERR_IMAGE_PULL);
                    self.post_event(&obj, "Warning", "Failed", &text);
                }
            }
        }
        if self
            .pods
            .get(&k)
            .is_some_and(|r| matches!(r.phase, Phase::Blocked { .. } | Phase::Active))
        {
            self.admit(&k);
        }
    }

    /// Pods whose image wait changes now (a failure turning into a back-off, a retry due).
    pub(super) fn recheck_images(&mut self) {
        let now = Instant::now();
        let due: Vec<(String, String)> = self
            .pods
            .iter()
            .filter(|(_, r)| {
                matches!(r.phase, Phase::Blocked { .. })
                    && r.images.recheck_at.is_some_and(|t| t <= now)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            if let Some(r) = self.pods.get_mut(&k) {
                r.images.recheck_at = None;
            }
            self.admit(&k);
        }
    }

    /// Each container's imageID: the digest its image resolved to (as containerd reports it,
    /// `docker.io/library/busybox@sha256:...`); other images (the host, a path) are not listed.
    pub(super) fn note_image_ids(&mut self, k: &(String, String)) {
        let fs = self.fs_images();
        let Some(rec) = self.pods.get(k) else { return };
        if !rec.images.ids.is_empty() {
            return;
        }
        let pod = rec.pod.get();
        let ids: BTreeMap<String, String> = containers(&pod)
            .filter_map(|c| {
                let id = registry_image(c.image.as_deref()?, &fs)?.ok()?;
                Some((c.name.clone(), id))
            })
            .collect();
        if let Some(rec) = self.pods.get_mut(k) {
            rec.images.ids = ids;
        }
    }

    /// Forgets the pull state of a pod that is gone.
    pub(super) fn forget_pulls(&mut self, uid: &str, pod: &Pod) {
        if let Some(q) = self.pulls.as_mut() {
            for c in containers(pod) {
                q.forget(&format!("{uid}_{}", c.image.as_deref().unwrap_or_default()));
            }
        }
    }
}
