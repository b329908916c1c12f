//! The test API server keeps the conventions of the real one: metadata, Status errors, the status
//! subresource, graceful deletion, admission, authentication and the Node authorizer.

mod common;
use common::*;
use serde_json::json;

#[test]
fn refuses_requests_without_valid_credentials() {
    let s = start("auth", |c| c);
    for token in [None, Some("wrong")] {
        let (code, body) = Client::with_token(&s, token).get(PODS);
        assert_eq!(code, 401);
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["reason"], "Unauthorized");
        assert_eq!(body["code"], 401);
    }
    // Health and version are public, as on a real server.
    assert_eq!(Client::with_token(&s, None).get("/healthz").0, 200);
    assert_eq!(Client::with_token(&s, None).get("/version").1["major"], "1");
    assert_eq!(Client::admin(&s).get(PODS).0, 200);
    // Every request is on record, with who made it and how it ended.
    let log = s.requests();
    assert_eq!(log.len(), 5);
    assert_eq!(
        (log[0].path.as_str(), log[0].user.as_str(), log[0].code),
        (PODS, "", 401)
    );
    assert_eq!(
        (log[4].user.as_str(), log[4].code),
        ("kubernetes-admin", 200)
    );
    s.clear_requests();
    drop(Client::node(&s, "n1").watch(&format!(
        "/api/v1/pods?watch=1&fieldSelector={}",
        enc("spec.nodeName=n1")
    )));
    let log = s.requests();
    assert_eq!(log.len(), 1);
    assert!(log[0].is_watch());
    assert_eq!(log[0].query, "watch=1&fieldSelector=spec.nodeName=n1");
    assert_eq!(log[0].user, "system:node:n1");
}

#[test]
fn serves_only_clients_that_trust_its_ca() {
    let s = start("tls", |c| c);
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let wrong = agent(&other.cert.pem(), None);
    assert!(wrong.get(format!("{}/healthz", s.url())).call().is_err());
    // A node's client certificate authenticates it as system:node:<name>.
    let c = Client {
        agent: agent(s.ca_pem(), Some(client_cert(s.dir(), "n1"))),
        base: s.url(),
        token: None,
    };
    let (code, body) = c.get("/api/v1/nodes/n2");
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("User \"system:node:n1\"")
    );
    assert_eq!(c.get("/api/v1/nodes/n1").0, 404);
    let kc = std::fs::read_to_string(s.node_cert_kubeconfig("n1")).unwrap();
    assert!(kc.contains(&s.url()) && kc.contains("client-certificate:") && kc.contains("ca.crt"));
    let kc = std::fs::read_to_string(s.node_kubeconfig("n1")).unwrap();
    assert!(kc.contains(&format!("token: {}", s.node_token("n1").unwrap())));
    // The inline kubeconfig carries everything itself.
    let kc = std::fs::read_to_string(s.node_inline_kubeconfig("n1")).unwrap();
    let field = |k: &str| -> Vec<u8> {
        use base64::Engine;
        let line = kc.lines().find_map(|l| l.trim().strip_prefix(k)).unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(line.trim())
            .unwrap()
    };
    let (ca, crt, key) = (
        field("certificate-authority-data:"),
        field("client-certificate-data:"),
        field("client-key-data:"),
    );
    let cert = ureq::tls::ClientCert::new_with_certs(
        &[ureq::tls::Certificate::from_pem(&crt).unwrap()],
        ureq::tls::PrivateKey::from_pem(&key).unwrap(),
    );
    let c = Client {
        agent: agent(std::str::from_utf8(&ca).unwrap(), Some(cert)),
        base: s.url(),
        token: None,
    };
    assert_eq!(c.get("/api/v1/nodes/n2").0, 403);
    assert_eq!(c.get("/api/v1/nodes/n1").0, 404);
}

#[test]
fn objects_get_server_metadata_and_status_errors() {
    let s = start("meta", |c| c);
    let a = Client::admin(&s);
    let (code, p) = a.post(PODS, &pod("web", Some("n1")));
    assert_eq!(code, 201, "{p}");
    let m = &p["metadata"];
    assert_eq!(m["namespace"], "default");
    assert_eq!(m["uid"].as_str().unwrap().len(), 36);
    assert!(m["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(m["generation"], 1);
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(p["status"]["qosClass"], "BestEffort");
    let first = rv(&p);
    let (code, q) = a.post(PODS, &pod("db", None));
    assert_eq!(code, 201);
    assert!(rv(&q) > first, "resourceVersion grows");

    let (code, e) = a.post(PODS, &pod("web", None));
    assert_eq!((code, e["reason"].as_str()), (409, Some("AlreadyExists")));
    assert_eq!(e["message"], "pods \"web\" already exists");
    let (code, e) = a.get(&format!("{PODS}/nope"));
    assert_eq!((code, e["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(e["details"], json!({"name": "nope", "kind": "pods"}));
    let (code, e) = a.post("/api/v1/namespaces/missing/pods", &pod("x", None));
    assert_eq!(
        (code, e["message"].as_str()),
        (404, Some("namespaces \"missing\" not found"))
    );
    let (code, e) = a.post(
        PODS,
        &json!({"metadata": {"name": "bad"}, "spec": {"containers": []}}),
    );
    assert_eq!((code, e["reason"].as_str()), (422, Some("Invalid")), "{e}");
    let (code, e) = a.post(
        PODS,
        &json!({"metadata": {"name": "bad"}, "spec": {"containers": "x"}}),
    );
    assert_eq!(
        (code, e["reason"].as_str()),
        (400, Some("BadRequest")),
        "{e}"
    );
    let mut other = pod("elsewhere", None);
    other["metadata"]["namespace"] = json!("kube-system");
    assert_eq!(a.post(PODS, &other).0, 400);
    let (code, g) = a.post(PODS, &json!({"metadata": {"generateName": "gen-"}, "spec": {"containers": [{"name": "c", "image": "host"}]}}));
    assert_eq!(code, 201);
    assert!(g["metadata"]["name"].as_str().unwrap().starts_with("gen-"));

    let (code, list) = a.get(PODS);
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "PodList");
    assert_eq!(
        list["metadata"]["resourceVersion"],
        s.resource_version().to_string()
    );
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
    assert!(
        list["items"][0].get("kind").is_none(),
        "list items carry no kind, as in the real API"
    );
    // The bodies decode as the real types.
    let _: k8s_openapi::List<k8s_openapi::api::core::v1::Pod> =
        serde_json::from_value(list).unwrap();
}

#[test]
fn field_and_label_selectors() {
    let s = start("select", |c| c);
    let a = Client::admin(&s);
    for (name, node) in [
        ("a", Some("n1")),
        ("b", Some("n2")),
        ("c", Some("n1")),
        ("d", None),
    ] {
        assert_eq!(a.post(PODS, &pod(name, node)).0, 201);
    }
    let names = |q: &str| -> Vec<String> {
        let (code, l) = a.get(&format!("/api/v1/pods?{q}"));
        assert_eq!(code, 200, "{l}");
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(&format!("fieldSelector={}", enc("spec.nodeName=n1"))),
        ["a", "c"]
    );
    assert_eq!(
        names(&format!("fieldSelector={}", enc("spec.nodeName="))),
        ["d"]
    );
    assert_eq!(
        names(&format!("fieldSelector={}", enc("metadata.name=b"))),
        ["b"]
    );
    assert_eq!(
        names(&format!("labelSelector={}", enc("app in (a,d)"))),
        ["a", "d"]
    );
    assert_eq!(
        names(&format!(
            "labelSelector={}&fieldSelector={}",
            enc("app!=a"),
            enc("spec.nodeName=n1")
        )),
        ["c"]
    );
    let (code, e) = a.get(&format!("{PODS}?fieldSelector={}", enc("spec.bogus=1")));
    assert_eq!(
        (code, e["message"].as_str()),
        (400, Some("field label not supported: spec.bogus"))
    );
}

#[test]
fn service_account_admission_adds_kube_api_access() {
    let s = start("admission", |c| c);
    let a = Client::admin(&s);
    let (_, p) = a.post(PODS, &pod("web", Some("n1")));
    assert_eq!(p["spec"]["serviceAccountName"], "default");
    let vols = p["spec"]["volumes"].as_array().unwrap();
    let v = vols
        .iter()
        .find(|v| v["name"].as_str().unwrap().starts_with("kube-api-access-"))
        .unwrap();
    let name = v["name"].as_str().unwrap();
    assert_eq!(name.len(), "kube-api-access-".len() + 5);
    assert_eq!(
        v["projected"]["sources"],
        json!([
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ])
    );
    for kind in ["initContainers", "containers"] {
        assert_eq!(
            p["spec"][kind][0]["volumeMounts"],
            json!([{"name": name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
        );
    }
    let mut off = pod("off", None);
    off["spec"]["automountServiceAccountToken"] = json!(false);
    let (_, p) = a.post(PODS, &off);
    assert!(p["spec"]["volumes"].is_null(), "{p}");
    let mut sa = pod("sa", None);
    sa["spec"]["serviceAccountName"] = json!("robot");
    let (code, e) = a.post(PODS, &sa);
    assert_eq!(code, 403);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("serviceaccount \"robot\" not found")
    );
    // Every namespace has the default account and the root CA bundle.
    let (code, _) = a.post("/api/v1/namespaces", &json!({"metadata": {"name": "team"}}));
    assert_eq!(code, 201);
    let (code, cm) = a.get("/api/v1/namespaces/team/configmaps/kube-root-ca.crt");
    assert_eq!(code, 200);
    assert_eq!(cm["data"]["ca.crt"], s.ca_pem());
    assert_eq!(
        a.get("/api/v1/namespaces/team/serviceaccounts/default").0,
        200
    );
}

#[test]
fn status_subresource_is_separate_from_the_main_resource() {
    let s = start("status", |c| c);
    let a = Client::admin(&s);
    let (_, p) = a.post(PODS, &pod("web", Some("n1")));
    let path = format!("{PODS}/web/status");
    let (code, q) = a.merge(&path, &json!({"status": {"phase": "Running"}, "spec": {"nodeName": "n2"}, "metadata": {"labels": {"x": "y"}}}));
    assert_eq!(code, 200, "{q}");
    assert_eq!(q["status"]["phase"], "Running");
    assert_eq!(q["spec"], p["spec"], "a status write leaves the spec alone");
    assert!(q["metadata"]["labels"].get("x").is_none());
    assert_eq!(q["metadata"]["generation"], 1);
    assert!(rv(&q) > rv(&p));
    // The kubelet's strategic merge patch: conditions merge by type.
    let (code, q) = a.patch(
        &path,
        "application/strategic-merge-patch+json",
        &json!({"status": {
        "$setElementOrder/conditions": [{"type": "Ready"}],
        "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    assert_eq!(code, 200, "{q}");
    let (_, q) = a.patch(
        &path,
        "application/strategic-merge-patch+json",
        &json!({"status": {
        "conditions": [{"type": "Initialized", "status": "True"}]}}),
    );
    assert_eq!(q["status"]["conditions"].as_array().unwrap().len(), 2);
    assert_eq!(q["status"]["phase"], "Running");
    // A uid in a status patch is a precondition, as in the kubelet's patches.
    let (code, e) = a.merge(
        &path,
        &json!({"metadata": {"uid": "other"}, "status": {"phase": "Failed"}}),
    );
    assert_eq!((code, e["reason"].as_str()), (409, Some("Conflict")));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("Precondition failed: UID in precondition: other")
    );
    let (code, _) = a.merge(
        &path,
        &json!({"metadata": {"uid": p["metadata"]["uid"]}, "status": {"phase": "Running"}}),
    );
    assert_eq!(code, 200);
    // An unchanged write stores nothing.
    let (_, same) = a.merge(&path, &json!({"status": {"phase": "Running"}}));
    assert_eq!(rv(&same), rv(&q));
    // The main resource ignores status.
    let (_, m) = a.merge(
        &format!("{PODS}/web"),
        &json!({"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "y"}}}),
    );
    assert_eq!(m["status"]["phase"], "Running");
    assert_eq!(m["metadata"]["labels"]["x"], "y");
    // Pod specs are immutable but for images.
    let (code, e) = a.merge(&format!("{PODS}/web"), &json!({"spec": {"nodeName": "n2"}}));
    assert_eq!((code, e["reason"].as_str()), (422, Some("Invalid")));
    // PUT with a stale resourceVersion conflicts; with the current one it works.
    let mut stale = q.clone();
    stale["status"]["phase"] = json!("Succeeded");
    let (code, e) = a.put(&path, &stale);
    assert_eq!((code, e["reason"].as_str()), (409, Some("Conflict")));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("the object has been modified")
    );
    let (_, cur) = a.get(&format!("{PODS}/web"));
    let mut fresh = cur.clone();
    fresh["status"]["phase"] = json!("Succeeded");
    let (code, done) = a.put(&path, &fresh);
    assert_eq!(
        (code, done["status"]["phase"].as_str()),
        (200, Some("Succeeded"))
    );
    assert_eq!(
        a.patch(&path, "application/apply-patch+yaml", &json!({})).0,
        415
    );
}

#[test]
fn deletion_is_two_phase_for_pods_on_a_node() {
    let s = start("delete", |c| c);
    let a = Client::admin(&s);
    let mut p = pod("web", Some("n1"));
    p["spec"]["terminationGracePeriodSeconds"] = json!(45);
    let (_, p) = a.post(PODS, &p);
    let path = format!("{PODS}/web");
    let (code, d) = a.delete(&path, None);
    assert_eq!(code, 200);
    assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 45);
    assert!(d["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(a.get(&path).0, 200, "the pod stays until its node confirms");
    // A shorter grace period from the body shortens it.
    let (_, d2) = a.delete(&path, Some(&json!({"gracePeriodSeconds": 10})));
    assert_eq!(d2["metadata"]["deletionGracePeriodSeconds"], 10);
    // The kubelet's final delete, with a UID precondition.
    let (code, e) = a.delete(
        &path,
        Some(&json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "not-the-uid"}})),
    );
    assert_eq!((code, e["reason"].as_str()), (409, Some("Conflict")));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("Precondition failed: UID in precondition: not-the-uid")
    );
    let (code, _) = a.delete(
        &path,
        Some(&json!({"gracePeriodSeconds": 0, "preconditions": {"uid": p["metadata"]["uid"]}})),
    );
    assert_eq!(code, 200);
    assert_eq!(a.get(&path).0, 404);
    // Unbound pods, and query-parameter grace 0, go at once.
    a.post(PODS, &pod("loose", None));
    assert_eq!(a.delete(&format!("{PODS}/loose"), None).0, 200);
    assert_eq!(a.get(&format!("{PODS}/loose")).0, 404);
    a.post(PODS, &pod("now", Some("n1")));
    assert_eq!(
        a.delete(&format!("{PODS}/now?gracePeriodSeconds=0"), None)
            .0,
        200
    );
    assert_eq!(a.get(&format!("{PODS}/now")).0, 404);
    // Other kinds answer with a Success Status.
    a.post(
        "/api/v1/namespaces/default/configmaps",
        &json!({"metadata": {"name": "c"}, "data": {"k": "v"}}),
    );
    let (code, st) = a.delete("/api/v1/namespaces/default/configmaps/c", None);
    assert_eq!((code, st["status"].as_str()), (200, Some("Success")));
}

#[test]
fn node_users_get_what_the_node_authorizer_allows() {
    let s = start("node", |c| c);
    let a = Client::admin(&s);
    let n1 = Client::node(&s, "n1");
    a.post(
        "/api/v1/namespaces/default/configmaps",
        &json!({"metadata": {"name": "used"}, "data": {"k": "v"}}),
    );
    a.post(
        "/api/v1/namespaces/default/configmaps",
        &json!({"metadata": {"name": "unused"}, "data": {"k": "v"}}),
    );
    let mut mine = pod("mine", Some("n1"));
    mine["spec"]["volumes"] = json!([{"name": "c", "configMap": {"name": "used"}}]);
    a.post(PODS, &mine);
    a.post(PODS, &pod("theirs", Some("n2")));

    let forbidden = |(code, e): (u16, serde_json::Value)| {
        assert_eq!(code, 403, "{e}");
        assert_eq!(e["reason"], "Forbidden");
    };
    forbidden(n1.get("/api/v1/pods"));
    forbidden(n1.get(&format!(
        "/api/v1/pods?fieldSelector={}",
        enc("spec.nodeName=n2")
    )));
    let (code, l) = n1.get(&format!(
        "/api/v1/pods?fieldSelector={}",
        enc("spec.nodeName=n1")
    ));
    assert_eq!(code, 200);
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
    assert_eq!(n1.get(&format!("{PODS}/mine")).0, 200);
    forbidden(n1.get(&format!("{PODS}/theirs")));
    assert_eq!(
        n1.merge(
            &format!("{PODS}/mine/status"),
            &json!({"status": {"phase": "Running"}})
        )
        .0,
        200
    );
    forbidden(n1.merge(
        &format!("{PODS}/theirs/status"),
        &json!({"status": {"phase": "Running"}}),
    ));
    forbidden(n1.merge(
        &format!("{PODS}/mine"),
        &json!({"metadata": {"labels": {"a": "b"}}}),
    ));
    forbidden(n1.delete(&format!("{PODS}/theirs"), None));
    // A pod that is gone is 404 to delete and status writes (the kubelet treats that as done),
    // but reading it is forbidden: the authorizer knows no relationship to it.
    assert_eq!(
        n1.delete(
            &format!("{PODS}/gone"),
            Some(&json!({"gracePeriodSeconds": 0}))
        )
        .0,
        404
    );
    assert_eq!(
        n1.merge(&format!("{PODS}/gone/status"), &json!({"status": {}}))
            .0,
        404
    );
    forbidden(n1.get(&format!("{PODS}/gone")));

    // Objects its pods use, and nothing else.
    assert_eq!(n1.get("/api/v1/namespaces/default/configmaps/used").0, 200);
    assert_eq!(
        n1.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
            .0,
        200
    );
    forbidden(n1.get("/api/v1/namespaces/default/configmaps/unused"));
    forbidden(n1.get("/api/v1/namespaces/default/configmaps"));
    assert_eq!(
        n1.get(&format!(
            "/api/v1/namespaces/default/configmaps?fieldSelector={}",
            enc("metadata.name=used")
        ))
        .0,
        200
    );
    forbidden(n1.get("/api/v1/namespaces/default/secrets/anything"));

    // Mirror pods for itself only, without API objects.
    let mut mirror = json!({"metadata": {"name": "static-n1", "annotations": {"kubernetes.io/config.mirror": "abc"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "host"}]}});
    forbidden(n1.post(PODS, &pod("plain", Some("n1"))));
    let (code, m) = n1.post(PODS, &mirror);
    assert_eq!(code, 201, "{m}");
    assert!(
        m["spec"]["volumes"].is_null(),
        "mirror pods get no service-account token"
    );
    mirror["metadata"]["name"] = json!("static-n2");
    mirror["spec"]["nodeName"] = json!("n2");
    forbidden(n1.post(PODS, &mirror));
    mirror["spec"]["nodeName"] = json!("n1");
    mirror["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "x"}}]);
    forbidden(n1.post(PODS, &mirror));

    // Its own Node and Lease.
    let (code, node) = n1.post("/api/v1/nodes", &json!({"metadata": {"name": "n1"}}));
    assert_eq!(code, 201);
    // A mirror pod may name its node as controlling owner, with the node's uid.
    let mut owned = json!({"metadata": {"name": "owned-n1", "annotations": {"kubernetes.io/config.mirror": "abc"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": node["metadata"]["uid"], "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "host"}]}});
    assert_eq!(n1.post(PODS, &owned).0, 201);
    owned["metadata"]["name"] = json!("owned-wrong");
    owned["metadata"]["ownerReferences"][0]["uid"] = json!("not-the-node");
    forbidden(n1.post(PODS, &owned));
    forbidden(n1.post("/api/v1/nodes", &json!({"metadata": {"name": "n2"}})));
    assert_eq!(
        n1.merge(
            "/api/v1/nodes/n1/status",
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        )
        .0,
        200
    );
    let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    assert_eq!(
        n1.post(
            lease,
            &json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}})
        )
        .0,
        201
    );
    forbidden(n1.post(lease, &json!({"metadata": {"name": "n2"}})));
    forbidden(n1.get(&format!("{lease}/n2")));
    // Events anywhere.
    let ev = json!({"metadata": {"name": "mine.1"}, "involvedObject": {"kind": "Pod", "namespace": "default", "name": "mine"}, "reason": "Started", "message": "m", "type": "Normal"});
    assert_eq!(n1.post("/api/v1/namespaces/default/events", &ev).0, 201);
    forbidden(n1.get("/api/v1/namespaces/default/events"));
    let (code, evs) = a.get("/api/v1/namespaces/default/events");
    assert_eq!(
        (code, evs["items"][0]["reason"].as_str()),
        (200, Some("Started"))
    );
}

#[test]
fn leases_use_optimistic_concurrency() {
    let s = start("lease", |c| c);
    let n1 = Client::node(&s, "n1");
    let path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let (code, l) = n1.post(
        path,
        &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}}),
    );
    assert_eq!(code, 201, "{l}");
    assert_eq!(l["apiVersion"], "coordination.k8s.io/v1");
    let mut renewed = l.clone();
    renewed["spec"]["renewTime"] = json!("2025-01-01T00:00:00.000000Z");
    let (code, r) = n1.put(&format!("{path}/n1"), &renewed);
    assert_eq!(code, 200, "{r}");
    assert!(rv(&r) > rv(&l));
    let (code, e) = n1.put(&format!("{path}/n1"), &renewed);
    assert_eq!((code, e["reason"].as_str()), (409, Some("Conflict")));
    assert_eq!(
        e["message"],
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"n1\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(e["details"]["group"], "coordination.k8s.io");
}

#[test]
fn token_requests_are_bound_to_pods() {
    let s = start("token", |c| c);
    let a = Client::admin(&s);
    let n1 = Client::node(&s, "n1");
    let (_, p) = a.post(PODS, &pod("web", Some("n1")));
    a.post(PODS, &pod("other", Some("n2")));
    let path = "/api/v1/namespaces/default/serviceaccounts/default/token";
    let req = |name: &str, uid: &serde_json::Value, exp: i64| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": ["https://kubernetes.default.svc.cluster.local", "vault"], "expirationSeconds": exp,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}}})
    };
    let (code, tr) = n1.post(path, &req("web", &p["metadata"]["uid"], 3607));
    assert_eq!(code, 201, "{tr}");
    let token = tr["status"]["token"].as_str().unwrap();
    assert!(
        tr["status"]["expirationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    // The JWT's claims name the pod and the audiences.
    use base64::Engine;
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], p["metadata"]["uid"]);
    assert_eq!(claims["aud"][1], "vault");
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3607
    );
    assert_eq!(claims["sub"], "system:serviceaccount:default:default");

    assert_eq!(n1.post(path, &req("other", &json!(""), 3607)).0, 403);
    assert_eq!(n1.post(path, &req("web", &json!("wrong"), 3607)).0, 403);
    assert_eq!(a.post(path, &req("web", &json!("wrong"), 3607)).0, 409);
    assert_eq!(a.post(path, &req("web", &p["metadata"]["uid"], 599)).0, 422);

    // The token authenticates as the account (which may do nothing here) while its pod lives.
    let sa = Client::with_token(&s, Some(token));
    let (code, e) = sa.get(PODS);
    assert_eq!(code, 403);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("system:serviceaccount:default:default")
    );
    a.delete(&format!("{PODS}/web?gracePeriodSeconds=0"), None);
    assert_eq!(sa.get(PODS).0, 401);
}

#[test]
fn responses_decode_as_the_real_types() {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{
        ConfigMap, Event, Namespace, Node, Pod, Secret, ServiceAccount,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
    use serde::de::DeserializeOwned;
    fn decode<T: DeserializeOwned>((code, v): (u16, serde_json::Value)) -> T {
        assert!(code < 500, "{code} {v}");
        serde_json::from_value(v).unwrap()
    }
    let s = start("types", |c| c);
    let a = Client::admin(&s);
    let p: Pod = decode(a.post(PODS, &pod("web", Some("n1"))));
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    let _: Node = decode(a.post(
        "/api/v1/nodes",
        &json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "2"}}}),
    ));
    let _: Namespace = decode(a.get("/api/v1/namespaces/default"));
    let _: ServiceAccount = decode(a.get("/api/v1/namespaces/default/serviceaccounts/default"));
    let _: ConfigMap = decode(a.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt"));
    let _: Secret = decode(a.post(
        "/api/v1/namespaces/default/secrets",
        &json!({"metadata": {"name": "s"}, "stringData": {"a": "b"}}),
    ));
    let _: Lease = decode(a.post(
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        &json!({"metadata": {"name": "n1"}}),
    ));
    let _: Event = decode(a.post("/api/v1/namespaces/default/events", &json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"}})));
    let tr: TokenRequest = decode(a.post(
        "/api/v1/namespaces/default/serviceaccounts/default/token",
        &json!({"spec": {"audiences": []}}),
    ));
    assert!(!tr.status.unwrap().token.is_empty());
    let st: Status = decode(a.get(&format!("{PODS}/missing")));
    assert_eq!(
        (st.code, st.reason.as_deref()),
        (Some(404), Some("NotFound"))
    );
    let st: Status = decode(a.delete("/api/v1/namespaces/default/secrets/s", None));
    assert_eq!(st.status.as_deref(), Some("Success"));
}
