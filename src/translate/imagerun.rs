//! What an image's config decides about running a container, as Kubernetes and its container
//! runtimes decide it: the command line, the environment under the container's, the user. Pure:
//! the image's config and its `/etc/passwd`/`/etc/group` come in as values (untrusted, like the
//! manifest's).

use crate::image::manifest::RunConfig;

/// One element of the command line and where it came from: the container's `command`/`args` are
/// `$(VAR)`-expanded, the image's `Entrypoint`/`Cmd` are not (the kubelet expands only its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgSource<'a> {
    Pod(&'a str),
    Image(&'a str),
}

/// The command line, as containerd's CRI builds it: `command` replaces `Entrypoint` and drops
/// `Cmd`; `args` replaces `Cmd`; neither gives `Entrypoint` + `Cmd`. `None`: nothing to run.
pub fn command_line<'a>(
    command: &'a [String],
    args: &'a [String],
    image: &'a RunConfig,
) -> Option<Vec<ArgSource<'a>>> {
    let mut out: Vec<ArgSource<'a>> = Vec::new();
    if !command.is_empty() {
        out.extend(command.iter().map(|s| ArgSource::Pod(s)));
        out.extend(args.iter().map(|s| ArgSource::Pod(s)));
    } else {
        let entrypoint = image.entrypoint.as_deref().unwrap_or_default();
        // `ENTRYPOINT [""]` is Docker's way to clear an inherited one.
        if !(entrypoint.len() == 1 && entrypoint[0].is_empty()) {
            out.extend(entrypoint.iter().map(|s| ArgSource::Image(s)));
        }
        if args.is_empty() {
            let cmd = image.cmd.as_deref().unwrap_or_default();
            out.extend(cmd.iter().map(|s| ArgSource::Image(s)));
        } else {
            out.extend(args.iter().map(|s| ArgSource::Pod(s)));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The image's `Env` as (name, value) pairs, in order; entries systemd cannot hold (no `=`, a
/// name that is not a valid variable name) come back apart, for a warning.
pub fn image_env(image: &RunConfig) -> (Vec<(String, String)>, Vec<String>) {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for e in &image.env {
        match e.split_once('=') {
            Some((k, v)) if crate::escape::is_env_name(k) => {
                // A later entry of the same name wins, as in the runtime.
                ok.retain(|(n, _): &(String, String)| n != k);
                ok.push((k.to_string(), v.to_string()));
            }
            _ => bad.push(e.clone()),
        }
    }
    (ok, bad)
}

/// The numeric identity a container runs with when the image (or `runAsUser`) names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageUser {
    pub uid: u32,
    pub gid: u32,
    /// Groups of `/etc/group` that list the user: containerd's additional GIDs.
    pub groups: Vec<u32>,
}

struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
}

fn passwd_entries(passwd: &str) -> impl Iterator<Item = PasswdEntry<'_>> {
    passwd.lines().filter_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let _pw = f.next()?;
        let uid = f.next()?.parse().ok()?;
        let gid = f.next()?.parse().ok()?;
        Some(PasswdEntry { name, uid, gid })
    })
}

struct GroupEntry<'a> {
    name: &'a str,
    gid: u32,
    members: &'a str,
}

fn group_entries(group: &str) -> impl Iterator<Item = GroupEntry<'_>> {
    group.lines().filter_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let _pw = f.next()?;
        let gid = f.next()?.parse().ok()?;
        Some(GroupEntry {
            name,
            gid,
            members: f.next().unwrap_or(""),
        })
    })
}

fn numeric(s: &str) -> Option<u32> {
    s.parse::<u32>().ok().filter(|v| *v != u32::MAX)
}

/// Resolves a user string (`name`, `uid`, `name:group`, `uid:gid`, ...) against the image's own
/// files, as containerd's `WithUser` does: a numeric user not in `/etc/passwd` gets group 0, a
/// name that is not there is an error. `""`: none given (the runtime's default, root).
pub fn resolve_user(
    user: &str,
    passwd: Option<&str>,
    group: Option<&str>,
) -> Result<Option<ImageUser>, String> {
    if user.is_empty() {
        return Ok(None);
    }
    let passwd = passwd.unwrap_or("");
    let group = group.unwrap_or("");
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let entry = match numeric(u) {
        Some(uid) => passwd_entries(passwd).find(|e| e.uid == uid),
        None => Some(
            passwd_entries(passwd)
                .find(|e| e.name == u)
                .ok_or_else(|| {
                    format!(
                        "unable to find user {u:?}: no matching entries in the image's /etc/passwd"
                    )
                })?,
        ),
    };
    let uid = match (numeric(u), &entry) {
        (Some(uid), _) => uid,
        (None, Some(e)) => e.uid,
        (None, None) => unreachable!("a name without an entry is an error above"),
    };
    let gid = match g {
        None => entry.as_ref().map(|e| e.gid).unwrap_or(0),
        Some(g) => match numeric(g) {
            Some(gid) => gid,
            None => group_entries(group)
                .find(|e| e.name == g)
                .map(|e| e.gid)
                .ok_or_else(|| {
                    format!(
                        "unable to find group {g:?}: no matching entries in the image's /etc/group"
                    )
                })?,
        },
    };
    let mut groups: Vec<u32> = match &entry {
        Some(e) => group_entries(group)
            .filter(|g| g.members.split(',').any(|m| m == e.name))
            .map(|g| g.gid)
            .filter(|g| *g != gid)
            .collect(),
        None => Vec::new(),
    };
    groups.sort_unstable();
    groups.dedup();
    Ok(Some(ImageUser { uid, gid, groups }))
}

/// The kubelet's `runAsNonRoot` check when the container gives no `runAsUser`: the image's user
/// must be numeric and not 0 (a name cannot be verified, so it is refused).
pub fn verify_non_root(image_user: &str) -> Result<(), String> {
    let user = image_user.split_once(':').map_or(image_user, |(u, _)| u);
    match user.parse::<i64>() {
        _ if user.is_empty() => Err("container has runAsNonRoot and image will run as root".into()),
        Ok(0) => Err("container has runAsNonRoot and image will run as root".into()),
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root"
        )),
    }
}

/// The pod's hostname and name files, as the kubelet's `GeneratePodHostNameAndDomain` decides:
/// `spec.hostname` or the pod's name (at most 63 characters); the node's on the host network.
pub fn etc_plan(
    pod: &k8s_openapi::api::core::v1::Pod,
    node: &crate::translate::NodeFacts,
) -> crate::translate::plan::EtcPlan {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network) == Some(true);
    let name = pod.metadata.name.clone().unwrap_or_default();
    let hostname = if host_network {
        node.node_name.clone()
    } else {
        let h = spec
            .and_then(|s| s.hostname.clone())
            .filter(|h| !h.is_empty())
            .unwrap_or(name);
        let cut: String = h.chars().take(63).collect();
        cut.trim_end_matches(['-', '.']).to_string()
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let fqdn = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|d| !d.is_empty() && !host_network)
        .map(|d| format!("{hostname}.{d}.{ns}.svc.{}", node.cluster_domain));
    let host_aliases = spec
        .and_then(|s| s.host_aliases.as_ref())
        .into_iter()
        .flatten()
        .map(|a| (a.ip.clone(), a.hostnames.clone().unwrap_or_default()))
        .collect();
    crate::translate::plan::EtcPlan {
        hostname,
        fqdn,
        host_network,
        host_aliases,
        dns: crate::translate::dns::plan(pod, node),
    }
}

/// The default `PATH` of container runtimes, when neither the image nor the container sets one;
/// systemd gives services that set none the same.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `PATH` as systemd's `ExecSearchPath=` may take it: only when every entry is a plain absolute
/// path (image values are untrusted, and this one is written without escaping).
pub fn search_path(path: &str) -> Option<String> {
    let ok = |p: &str| {
        p.starts_with('/')
            && p.len() < 256
            && !p.split('/').any(|c| c == "..")
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b))
    };
    let parts: Vec<&str> = path.split(':').filter(|p| !p.is_empty()).collect();
    (!parts.is_empty() && parts.len() <= 64 && parts.iter().all(|p| ok(p))).then(|| parts.join(":"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(ep: Option<&[&str]>, cmd: Option<&[&str]>) -> RunConfig {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
        RunConfig {
            entrypoint: ep.map(v),
            cmd: cmd.map(v),
            ..Default::default()
        }
    }

    fn line(c: &[&str], a: &[&str], image: &RunConfig) -> Option<Vec<String>> {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (c, a) = (v(c), v(a));
        command_line(&c, &a, image).map(|l| {
            l.into_iter()
                .map(|s| match s {
                    ArgSource::Pod(s) => format!("pod:{s}"),
                    ArgSource::Image(s) => format!("img:{s}"),
                })
                .collect()
        })
    }

    #[test]
    fn command_and_args_against_entrypoint_and_cmd() {
        let img = cfg(Some(&["/docker-entrypoint.sh"]), Some(&["nginx", "-g"]));
        // Neither: Entrypoint + Cmd.
        assert_eq!(
            line(&[], &[], &img).unwrap(),
            ["img:/docker-entrypoint.sh", "img:nginx", "img:-g"]
        );
        // args replaces Cmd.
        assert_eq!(
            line(&[], &["x"], &img).unwrap(),
            ["img:/docker-entrypoint.sh", "pod:x"]
        );
        // command replaces Entrypoint and drops Cmd.
        assert_eq!(line(&["sh"], &[], &img).unwrap(), ["pod:sh"]);
        assert_eq!(
            line(&["sh"], &["-c", "x"], &img).unwrap(),
            ["pod:sh", "pod:-c", "pod:x"]
        );
        // An emptied Entrypoint, and nothing at all.
        let cleared = cfg(Some(&[""]), Some(&["sh"]));
        assert_eq!(line(&[], &[], &cleared).unwrap(), ["img:sh"]);
        assert_eq!(line(&[], &[], &cfg(None, None)), None);
        assert_eq!(line(&[], &[], &cfg(Some(&[""]), None)), None);
    }

    #[test]
    fn image_env_keeps_valid_names_in_order() {
        let c = RunConfig {
            env: vec![
                "PATH=/bin".into(),
                "A=1=2".into(),
                "bad name=x".into(),
                "NOEQ".into(),
                "PATH=/usr/bin".into(),
            ],
            ..Default::default()
        };
        let (ok, bad) = image_env(&c);
        assert_eq!(
            ok,
            [
                ("A".into(), "1=2".into()),
                ("PATH".into(), "/usr/bin".into())
            ]
        );
        assert_eq!(bad, ["bad name=x", "NOEQ"]);
    }

    #[test]
    fn users_resolve_in_the_image_files() {
        let passwd = "root:x:0:0::/root:/bin/sh\nnginx:x:101:101::/:/bin/false\nbroken\n";
        let group = "root:x:0:\nnginx:x:101:\nwww:x:33:nginx,other\nadm:x:4:nginx\n";
        let r = |u: &str| resolve_user(u, Some(passwd), Some(group));
        assert_eq!(r("").unwrap(), None);
        assert_eq!(
            r("nginx").unwrap().unwrap(),
            ImageUser {
                uid: 101,
                gid: 101,
                groups: vec![4, 33]
            }
        );
        assert_eq!(r("101").unwrap().unwrap().gid, 101);
        assert_eq!(
            r("5000").unwrap().unwrap(),
            ImageUser {
                uid: 5000,
                gid: 0,
                groups: vec![]
            }
        );
        assert_eq!(r("nginx:www").unwrap().unwrap().gid, 33);
        assert_eq!(r("nginx:7").unwrap().unwrap().gid, 7);
        assert!(r("nobody").unwrap_err().contains("nobody"));
        assert!(r("nginx:staff").unwrap_err().contains("staff"));
        // No passwd at all: names fail, numbers run with group 0.
        assert!(resolve_user("app", None, None).is_err());
        assert_eq!(resolve_user("7:8", None, None).unwrap().unwrap().gid, 8);
    }

    #[test]
    fn non_root_as_the_kubelet_verifies_it() {
        assert!(verify_non_root("").unwrap_err().contains("run as root"));
        assert!(verify_non_root("0:10").unwrap_err().contains("run as root"));
        assert!(
            verify_non_root("nginx")
                .unwrap_err()
                .contains("non-numeric user (nginx)")
        );
        assert!(verify_non_root("101").is_ok());
        assert!(verify_non_root("101:101").is_ok());
    }

    #[test]
    fn search_paths_only_when_plain() {
        assert_eq!(search_path(DEFAULT_PATH).as_deref(), Some(DEFAULT_PATH));
        assert_eq!(
            search_path("/bin::/usr/bin").as_deref(),
            Some("/bin:/usr/bin")
        );
        assert_eq!(search_path("relative:/bin"), None);
        assert_eq!(search_path("/bin:/x%n"), None);
        assert_eq!(search_path("/a/../b"), None);
        assert_eq!(search_path(""), None);
    }
}
