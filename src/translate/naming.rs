//! Unit names of a pod (DESIGN.md §5), and their reverse.
//!
//! `podunit-<namespace>_<pod>.service`            the pod: prepares volumes and env, groups the containers
//! `podunit-<namespace>_<pod>.slice`              the pod's cgroup (resources), with `-` escaped
//! `podunit-<namespace>_<pod>_<container>.service` one per init and app container
//!
//! Kubernetes names never contain `_`, so `_` separates the parts unambiguously. A name that would
//! exceed the length limit keeps a prefix of the pod name and appends `H` and a hash of the full
//! `namespace/pod`; upper-case letters never occur in a Kubernetes name, so such a name is
//! recognisable, and its identity is read from the unit's `X-PodunitPod=` key instead. (`:` would
//! be valid too, but `systemd-analyze verify` cannot handle unit names that contain it.)

use sha2::{Digest, Sha256};

pub const PREFIX: &str = "podunit";
pub const TARGET: &str = "podunit.target";
pub const SYNC_SERVICE: &str = "podunit-sync.service";
/// systemd's limit on unit names is 255 (UNIT_NAME_MAX), but `<unit>.wants/` and `<unit>.d/`
/// directories must fit in a file name too (NAME_MAX 255): keep room for `.requires`.
pub const UNIT_NAME_MAX: usize = 255 - ".requires".len();
const HASH_LEN: usize = 16;

/// What a unit belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnitId {
    pub namespace: String,
    pub pod: String,
    /// None for pod-level units.
    pub container: Option<String>,
}

/// A parsed unit name: either fully reversible, or shortened (look up `X-PodunitPod=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Exact(UnitId),
    Shortened {
        namespace: String,
        hash: String,
        container: Option<String>,
    },
}

fn hash(namespace: &str, pod: &str) -> String {
    let digest = Sha256::digest(format!("{namespace}/{pod}").as_bytes());
    digest
        .iter()
        .take(HASH_LEN / 2)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `-` inside a slice name means nesting; systemd-escape writes it as `\x2d`.
fn slice_escape(s: &str) -> String {
    s.replace('-', "\\x2d")
}

fn slice_unescape(s: &str) -> String {
    s.replace("\\x2d", "-")
}

/// Builds `<prefix>-<ns>_<pod>[_<container>]<suffix>`, shortening the pod part when needed.
fn build(namespace: &str, pod: &str, container: Option<&str>, suffix: &str, slice: bool) -> String {
    let esc = |s: &str| {
        if slice {
            slice_escape(s)
        } else {
            s.to_string()
        }
    };
    // The usual case, built in one string of its exact length (this runs for every unit).
    fn esc_cow(s: &str, slice: bool) -> std::borrow::Cow<'_, str> {
        match slice && s.contains('-') {
            true => std::borrow::Cow::Owned(slice_escape(s)),
            false => std::borrow::Cow::Borrowed(s),
        }
    }
    let (ns, p) = (esc_cow(namespace, slice), esc_cow(pod, slice));
    let c = container.map(|c| esc_cow(c, slice));
    let c = c.as_deref();
    let full = crate::common::text::concat(&[
        PREFIX,
        "-",
        &ns,
        "_",
        &p,
        if c.is_some() { "_" } else { "" },
        c.unwrap_or_default(),
        suffix,
    ]);
    if full.len() <= UNIT_NAME_MAX {
        return full;
    }
    let tail = container
        .map(|c| format!("_{}", esc(c)))
        .unwrap_or_default();
    let fixed =
        PREFIX.len() + 1 + esc(namespace).len() + 1 + 1 + HASH_LEN + tail.len() + suffix.len();
    let room = UNIT_NAME_MAX.saturating_sub(fixed);
    let mut short = String::new();
    for ch in pod.chars() {
        let e = esc(&ch.to_string());
        if short.len() + e.len() > room {
            break;
        }
        short.push_str(&e);
    }
    format!(
        "{PREFIX}-{}_{short}H{}{tail}{suffix}",
        esc(namespace),
        hash(namespace, pod)
    )
}

/// The pod unit: `podunit-<ns>_<pod>.service`.
pub fn pod_service(namespace: &str, pod: &str) -> String {
    build(namespace, pod, None, ".service", false)
}

/// The pod's slice: `podunit-<ns>_<pod>.slice`, a child of `podunit.slice`.
pub fn pod_slice(namespace: &str, pod: &str) -> String {
    build(namespace, pod, None, ".slice", true)
}

/// A container's unit: `podunit-<ns>_<pod>_<container>.service`.
pub fn container_service(namespace: &str, pod: &str, container: &str) -> String {
    build(namespace, pod, Some(container), ".service", false)
}

/// A CronJob's timer: `podunit-<ns>_<cronjob>.timer`.
pub fn cron_timer(namespace: &str, cron_job: &str) -> String {
    build(namespace, cron_job, None, ".timer", false)
}

/// The unit a CronJob's timer activates: `podunit-<ns>_<cronjob>.target`.
pub fn cron_target(namespace: &str, cron_job: &str) -> String {
    build(namespace, cron_job, None, ".target", false)
}

/// Reverses the names of pods' units above. None for units that are not a pod's.
pub fn parse(unit: &str) -> Option<Parsed> {
    let (stem, slice) = if let Some(s) = unit.strip_suffix(".service") {
        (s, false)
    } else if let Some(s) = unit.strip_suffix(".slice") {
        (s, true)
    } else {
        return None;
    };
    let rest = stem.strip_prefix(PREFIX)?.strip_prefix('-')?;
    let parts: Vec<&str> = rest.split('_').collect();
    let un = |s: &str| {
        if slice {
            slice_unescape(s)
        } else {
            s.to_string()
        }
    };
    let (ns, pod, container) = match parts.as_slice() {
        [ns, pod] => (un(ns), un(pod), None),
        [ns, pod, c] if !slice => (un(ns), un(pod), Some(un(c))),
        _ => return None,
    };
    if ns.is_empty() || pod.is_empty() || container.as_deref() == Some("") {
        return None;
    }
    match pod.split_once('H') {
        Some((_, h)) => Some(Parsed::Shortened {
            namespace: ns,
            hash: h.to_string(),
            container,
        }),
        None => Some(Parsed::Exact(UnitId {
            namespace: ns,
            pod,
            container,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let n = container_service("kube-system", "my-web.v1", "side-car");
        assert_eq!(n, "podunit-kube-system_my-web.v1_side-car.service");
        assert_eq!(
            parse(&n),
            Some(Parsed::Exact(UnitId {
                namespace: "kube-system".into(),
                pod: "my-web.v1".into(),
                container: Some("side-car".into())
            }))
        );
        let s = pod_slice("kube-system", "my-web");
        assert_eq!(s, "podunit-kube\\x2dsystem_my\\x2dweb.slice");
        assert_eq!(
            parse(&s),
            Some(Parsed::Exact(UnitId {
                namespace: "kube-system".into(),
                pod: "my-web".into(),
                container: None
            }))
        );
        assert_eq!(parse("podunit.target"), None);
        assert_eq!(parse("podunit-sync.service"), None);
        assert_eq!(parse("sshd.service"), None);
    }

    #[test]
    fn long_names_are_shortened_deterministically() {
        let pod = "a".repeat(253);
        let c = "c".repeat(63);
        let n = container_service(&"n".repeat(63), &pod, &c);
        assert!(n.len() <= UNIT_NAME_MAX, "{}", n.len());
        assert_eq!(n, container_service(&"n".repeat(63), &pod, &c));
        assert_ne!(
            n,
            container_service(&"n".repeat(63), &format!("{}b", "a".repeat(252)), &c)
        );
        match parse(&n) {
            Some(Parsed::Shortened { container, .. }) => {
                assert_eq!(container.as_deref(), Some(c.as_str()))
            }
            other => panic!("{other:?}"),
        }
        let s = pod_slice(&"n-".repeat(31), &"a-".repeat(126));
        assert!(s.len() <= UNIT_NAME_MAX, "{}", s.len());
        assert!(s.ends_with(".slice"));
    }
}
