//! Service account tokens for projected volumes: what to request (TokenRequest bound to the pod,
//! with the source's audience and expiry) and when to refresh (at 80 % of the token's lifetime, or
//! after 24 h, as the kubelet's token manager does).

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// One `serviceAccountToken` source of a projected volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSource {
    pub volume: String,
    pub path: String,
    pub audience: Option<String>,
    pub expiration_seconds: i64,
}

/// The token sources the node must serve for `pod`. With `automountServiceAccountToken: false` the
/// admission-added `kube-api-access-*` volumes are not served (explicit ones still are).
pub fn sources(pod: &Pod) -> Vec<TokenSource> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let no_automount = spec.automount_service_account_token == Some(false);
    let mut out = Vec::new();
    for v in spec.volumes.iter().flatten() {
        if no_automount && v.name.starts_with("kube-api-access-") {
            continue;
        }
        for s in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(t) = &s.service_account_token {
                out.push(TokenSource {
                    volume: v.name.clone(),
                    path: t.path.clone(),
                    audience: t.audience.clone().filter(|a| !a.is_empty()),
                    expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                });
            }
        }
    }
    out
}

/// The service account the pod runs as.
pub fn service_account(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// The TokenRequest for `src`, bound to the pod (the token dies with it).
pub fn request(pod: &Pod, src: &TokenSource) -> TokenRequest {
    TokenRequest {
        metadata: Default::default(),
        spec: TokenRequestSpec {
            // None: the API server's own audiences, as the kubelet leaves it when the source has none.
            audiences: src.audience.iter().cloned().collect(),
            expiration_seconds: Some(src.expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        status: None,
    }
}

/// When a token issued at `issued` and expiring at `expires` must be replaced.
pub fn refresh_at(issued: Timestamp, expires: Timestamp) -> Timestamp {
    let life = expires.as_second() - issued.as_second();
    let at = issued.as_second() + (life.max(0) * 8 / 10).min(24 * 3600);
    Timestamp::from_second(at).unwrap_or(issued)
}

/// When the token `jwt`, written before podunit-sync last started, must be replaced: from its own
/// `iat` and `exp` claims (the API server's tokens are JWTs). `None` when it has no such claims,
/// and it is then requested again. Without this every restart of podunit-sync requested a new
/// token for every pod and rewrote every pod's volume.
pub fn refresh_at_of(jwt: &str) -> Option<Timestamp> {
    use base64::Engine;
    #[derive(serde::Deserialize)]
    struct Claims {
        iat: i64,
        exp: i64,
    }
    let payload = jwt.trim().split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let c: Claims = serde_json::from_slice(&bytes).ok()?;
    Some(refresh_at(
        Timestamp::from_second(c.iat).ok()?,
        Timestamp::from_second(c.exp).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(y: &str) -> Pod {
        serde_saphyr::from_str(y).unwrap()
    }

    const P: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u-1}\nspec:\n  serviceAccountName: robot\n  containers: [{name: c, image: host}]\n  volumes:\n  - name: kube-api-access-abcde\n    projected: {sources: [{serviceAccountToken: {path: token, expirationSeconds: 3607}}, {configMap: {name: kube-root-ca.crt}}]}\n  - name: vault\n    projected: {sources: [{serviceAccountToken: {path: vt, audience: vault, expirationSeconds: 600}}]}\n";

    #[test]
    fn finds_sources_and_builds_bound_requests() {
        let p = pod(P);
        let s = sources(&p);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].path, "token");
        assert_eq!(s[0].audience, None);
        assert_eq!(s[1].audience.as_deref(), Some("vault"));
        let r = request(&p, &s[1]);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["spec"]["audiences"], serde_json::json!(["vault"]));
        assert_eq!(v["spec"]["expirationSeconds"], 600);
        assert_eq!(v["spec"]["boundObjectRef"]["kind"], "Pod");
        assert_eq!(v["spec"]["boundObjectRef"]["uid"], "u-1");
        assert_eq!(
            serde_json::to_value(request(&p, &s[0])).unwrap()["spec"]["audiences"],
            serde_json::json!([])
        );
        assert_eq!(service_account(&p), "robot");
    }

    #[test]
    fn automount_false_skips_the_admission_volume_only() {
        let p = pod(&P.replace(
            "serviceAccountName: robot",
            "automountServiceAccountToken: false",
        ));
        let s = sources(&p);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].volume, "vault");
        assert_eq!(service_account(&p), "default");
    }

    #[test]
    fn a_written_token_says_when_to_refresh_it() {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwt = |claims: &str| format!("{}.{}.c2ln", b64(r#"{"alg":"RS256"}"#), b64(claims));
        let t = |s| Timestamp::from_second(s).unwrap();
        assert_eq!(
            refresh_at_of(&jwt(r#"{"aud":["x"],"iat":1000,"exp":4600,"sub":"s"}"#)),
            Some(t(1000 + 2880))
        );
        assert_eq!(
            refresh_at_of(&format!("{}\n", jwt(r#"{"iat":0,"exp":100}"#))),
            Some(t(80))
        );
        for bad in [
            jwt(r#"{"exp":4600}"#),
            "opaque-token".to_string(),
            "a.%%%.c".to_string(),
            jwt("not json"),
        ] {
            assert_eq!(refresh_at_of(&bad), None, "{bad}");
        }
    }

    #[test]
    fn refresh_at_80_percent_capped_at_a_day() {
        let t = |s| Timestamp::from_second(s).unwrap();
        assert_eq!(refresh_at(t(1000), t(4600)), t(1000 + 2880));
        assert_eq!(refresh_at(t(0), t(10 * 24 * 3600)), t(24 * 3600));
        assert_eq!(refresh_at(t(1000), t(900)), t(1000));
    }
}
