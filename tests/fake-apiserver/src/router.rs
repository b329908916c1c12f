//! URL paths to API targets, following the REST layout of the Kubernetes API.

use crate::resources::{self, Resource};

#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub res: &'static Resource,
    /// The namespace in the path, if any.
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

#[derive(Debug, PartialEq)]
pub enum Route {
    /// /healthz, /livez, /readyz
    Health,
    Version,
    /// /api, /apis, /api/v1, /apis/<group>/<version>
    Discovery(String),
    Api(Target),
    NotFound,
}

pub fn route(path: &str) -> Route {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let (group, rest): (&str, &[&str]) = match segs.as_slice() {
        ["healthz" | "livez" | "readyz", ..] => return Route::Health,
        ["version"] => return Route::Version,
        ["api"] | ["apis"] | ["api", "v1"] | ["apis", _] | ["apis", _, _] => {
            return Route::Discovery(segs.join("/"));
        }
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", g, "v1", rest @ ..] => (g, rest),
        _ => return Route::NotFound,
    };
    let target = match rest {
        ["namespaces", ns, plural, tail @ ..] if tail.len() <= 2 => {
            match resources::lookup(group, plural).filter(|r| r.namespaced) {
                Some(res) => Target {
                    res,
                    ns: Some(ns.to_string()),
                    name: tail.first().map(|s| s.to_string()),
                    sub: tail.get(1).map(|s| s.to_string()),
                },
                // /api/v1/namespaces/<name>/status and friends: the Namespace object itself.
                None if group.is_empty() && tail.is_empty() => Target {
                    res: &resources::NAMESPACES,
                    ns: None,
                    name: Some(ns.to_string()),
                    sub: Some(plural.to_string()),
                },
                None => return Route::NotFound,
            }
        }
        [plural, tail @ ..] if tail.len() <= 2 => match resources::lookup(group, plural) {
            // A namespaced resource without a namespace: the list or watch across all of them.
            Some(res) if res.namespaced && tail.is_empty() => Target {
                res,
                ns: None,
                name: None,
                sub: None,
            },
            Some(res) if !res.namespaced => Target {
                res,
                ns: None,
                name: tail.first().map(|s| s.to_string()),
                sub: tail.get(1).map(|s| s.to_string()),
            },
            _ => return Route::NotFound,
        },
        _ => return Route::NotFound,
    };
    Route::Api(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{LEASES, NAMESPACES, NODES, PODS};

    fn t(res: &'static Resource, ns: Option<&str>, name: Option<&str>, sub: Option<&str>) -> Route {
        Route::Api(Target {
            res,
            ns: ns.map(Into::into),
            name: name.map(Into::into),
            sub: sub.map(Into::into),
        })
    }

    #[test]
    fn paths() {
        assert_eq!(route("/api/v1/pods"), t(&PODS, None, None, None));
        assert_eq!(
            route("/api/v1/namespaces/d/pods"),
            t(&PODS, Some("d"), None, None)
        );
        assert_eq!(
            route("/api/v1/namespaces/d/pods/p/status"),
            t(&PODS, Some("d"), Some("p"), Some("status"))
        );
        assert_eq!(
            route("/api/v1/nodes/n1/status"),
            t(&NODES, None, Some("n1"), Some("status"))
        );
        assert_eq!(
            route("/api/v1/namespaces/d"),
            t(&NAMESPACES, None, Some("d"), None)
        );
        assert_eq!(
            route("/api/v1/namespaces/d/status"),
            t(&NAMESPACES, None, Some("d"), Some("status"))
        );
        assert_eq!(
            route("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"),
            t(&LEASES, Some("kube-node-lease"), Some("n1"), None)
        );
        assert_eq!(route("/api/v1/widgets"), Route::NotFound);
        assert_eq!(
            route("/api/v1/namespaces/d/pods/p/status/x"),
            Route::NotFound
        );
        assert_eq!(
            route("/apis/coordination.k8s.io/v1/leases/x"),
            Route::NotFound
        );
        assert_eq!(route("/healthz"), Route::Health);
        assert_eq!(route("/api"), Route::Discovery("api".into()));
    }
}
