//! Kinds only a control plane acts on. A chart's rendered output or a documentation example puts
//! a Service, a ServiceAccount or an RBAC rule beside its workload; on a standalone node nothing
//! would act on them, so they are skipped with a warning that says why, and never cost the file's
//! other documents. Any other kind podunit does not run stays an error: a typo in `kind` must not
//! pass as "skipped".

/// Why a document of `api_version`/`kind` is skipped, or None when it is not such a kind. The
/// version is not looked at: `v1beta1` of an API group is skipped as its `v1` is.
pub fn skipped(api_version: &str, kind: &str) -> Option<&'static str> {
    let group = match api_version.rsplit_once('/') {
        Some((group, _)) => group,
        None => "", // the core group: `v1`
    };
    let why = match (group, kind) {
        ("", "Service") | ("", "Endpoints") | ("discovery.k8s.io", "EndpointSlice") => {
            "Services are served by kube-proxy and cluster DNS, which a standalone node does not run"
        }
        ("networking.k8s.io", "Ingress" | "IngressClass") => {
            "Ingresses are served by an ingress controller, which a standalone node does not run"
        }
        ("networking.k8s.io", "NetworkPolicy") => {
            "NetworkPolicies are enforced by the cluster's network plugin; a standalone node has none"
        }
        ("", "ServiceAccount") => {
            "pods on a standalone node get no API credentials, so there is no account to run as"
        }
        (
            "rbac.authorization.k8s.io",
            "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding",
        ) => "RBAC rules are enforced by an API server; a standalone node has none",
        ("policy", "PodDisruptionBudget") => {
            "disruption budgets limit evictions through the API server; a standalone node has none"
        }
        ("autoscaling", "HorizontalPodAutoscaler")
        | ("autoscaling.k8s.io", "VerticalPodAutoscaler") => {
            "autoscalers act through the API server and its metrics; a standalone node has neither"
        }
        ("", "Namespace" | "ResourceQuota" | "LimitRange")
        | ("scheduling.k8s.io", "PriorityClass")
        | ("apiextensions.k8s.io", "CustomResourceDefinition")
        | (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
        )
        | ("apiregistration.k8s.io", "APIService") => {
            "it configures an API server, and a standalone node has none"
        }
        _ => return None,
    };
    Some(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_plane_kinds_by_group_whatever_the_version() {
        assert!(skipped("v1", "Service").is_some());
        assert!(skipped("v1", "ServiceAccount").is_some());
        assert!(skipped("networking.k8s.io/v1", "Ingress").is_some());
        assert!(skipped("networking.k8s.io/v1beta1", "Ingress").is_some());
        assert!(skipped("rbac.authorization.k8s.io/v1", "ClusterRoleBinding").is_some());
        assert!(skipped("policy/v1", "PodDisruptionBudget").is_some());
        assert!(skipped("autoscaling/v2", "HorizontalPodAutoscaler").is_some());
    }

    #[test]
    fn not_a_pass_for_typos_or_other_groups() {
        for (api, kind) in [
            ("v1", "Servcie"),
            ("v1", "service"),
            ("apps/v1", "Service"),
            ("example.com/v1", "Ingress"),
            ("v1", "Pod"),
            ("apps/v1", "Deployment"),
            ("", "Service"),
        ] {
            // `("", "Service")`: no apiVersion at all is an error of its own, said before this.
            if api.is_empty() {
                continue;
            }
            assert_eq!(skipped(api, kind), None, "{api}/{kind}");
        }
    }
}
