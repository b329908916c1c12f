//! The resources this test double serves, with the properties that change how requests are handled.

#[derive(Debug, PartialEq, Eq)]
pub struct Resource {
    pub plural: &'static str,
    pub kind: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub namespaced: bool,
    /// Has a `/status` subresource: the main resource ignores status writes and vice versa.
    pub status: bool,
}

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods`, or `leases.coordination.k8s.io` for grouped resources, as error messages spell them.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

const fn core(
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    status: bool,
) -> Resource {
    Resource {
        plural,
        kind,
        group: "",
        version: "v1",
        namespaced,
        status,
    }
}

pub static PODS: Resource = core("pods", "Pod", true, true);
pub static NODES: Resource = core("nodes", "Node", false, true);
pub static NAMESPACES: Resource = core("namespaces", "Namespace", false, true);
pub static EVENTS: Resource = core("events", "Event", true, false);
pub static CONFIGMAPS: Resource = core("configmaps", "ConfigMap", true, false);
pub static SECRETS: Resource = core("secrets", "Secret", true, false);
pub static SERVICEACCOUNTS: Resource = core("serviceaccounts", "ServiceAccount", true, false);
pub static SERVICES: Resource = core("services", "Service", true, true);
pub static LEASES: Resource = Resource {
    plural: "leases",
    kind: "Lease",
    group: "coordination.k8s.io",
    version: "v1",
    namespaced: true,
    status: false,
};

pub static ALL: [&Resource; 9] = [
    &PODS,
    &NODES,
    &NAMESPACES,
    &EVENTS,
    &CONFIGMAPS,
    &SECRETS,
    &SERVICEACCOUNTS,
    &SERVICES,
    &LEASES,
];

/// The resource named `plural` in API group `group`.
pub fn lookup(group: &str, plural: &str) -> Option<&'static Resource> {
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.plural == plural)
}

/// The resource an object with this apiVersion and kind belongs to.
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static Resource> {
    ALL.iter()
        .copied()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}
