//! Watch semantics: list then watch without a gap, resume from a resourceVersion, bookmarks,
//! 410 Gone for versions older than the history, selector transitions, timeouts.

mod common;
use common::*;
use serde_json::json;
use std::time::Duration;

fn node_watch(rv: u64, extra: &str) -> String {
    format!(
        "/api/v1/pods?watch=1&resourceVersion={rv}&fieldSelector={}{extra}",
        enc("spec.nodeName=n1")
    )
}

#[test]
fn list_then_watch_sees_every_change_in_order() {
    let s = start("watch", |c| c);
    let a = Client::admin(&s);
    a.post(PODS, &pod("before", Some("n1")));
    let (_, list) = a.get(&format!(
        "/api/v1/pods?fieldSelector={}",
        enc("spec.nodeName=n1")
    ));
    let from: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut w = Client::node(&s, "n1").watch(&node_watch(from, ""));
    a.post(PODS, &pod("web", Some("n1")));
    a.post(PODS, &pod("elsewhere", Some("n2")));
    a.merge(
        &format!("{PODS}/web/status"),
        &json!({"status": {"phase": "Running"}}),
    );
    a.delete(&format!("{PODS}/web"), None);
    a.delete(&format!("{PODS}/web?gracePeriodSeconds=0"), None);
    let mut last = from;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let e = w.next_change().unwrap();
        assert_eq!(e["object"]["metadata"]["name"], "web", "{e}");
        assert_eq!(e["object"]["kind"], "Pod");
        let r = rv(&e["object"]);
        assert!(r > last, "resourceVersions increase");
        last = r;
        seen.push(e["type"].as_str().unwrap().to_string());
    }
    assert_eq!(seen, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
    // The events decode as the real WatchEvent type.
    let _: k8s_openapi::apimachinery::pkg::apis::meta::v1::WatchEvent<
        k8s_openapi::api::core::v1::Pod,
    > = serde_json::from_value(json!({"type": "ADDED", "object": list["items"][0].clone()}))
        .unwrap();
}

#[test]
fn watch_without_resource_version_starts_with_the_current_state() {
    let s = start("watch-state", |c| c);
    let a = Client::admin(&s);
    a.post(PODS, &pod("a", Some("n1")));
    a.post(PODS, &pod("b", Some("n1")));
    let mut w = a.watch(&format!(
        "/api/v1/pods?watch=true&fieldSelector={}",
        enc("spec.nodeName=n1")
    ));
    assert_eq!(w.next().unwrap()["type"], "ADDED");
    assert_eq!(w.next().unwrap()["object"]["metadata"]["name"], "b");
    // sendInitialEvents ends the state with an annotated bookmark.
    let mut w = a.watch(&format!("{PODS}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"));
    assert_eq!(w.next().unwrap()["type"], "ADDED");
    assert_eq!(w.next().unwrap()["type"], "ADDED");
    let b = w.next().unwrap();
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(
        b["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(rv(&b["object"]), s.resource_version());
}

#[test]
fn watches_resume_from_a_resource_version() {
    let s = start("resume", |c| c);
    let a = Client::admin(&s);
    let start_rv = s.resource_version();
    let mut w = a.watch(&node_watch(start_rv, ""));
    a.post(PODS, &pod("one", Some("n1")));
    let one = w.next_change().unwrap();
    drop(w);
    a.post(PODS, &pod("two", Some("n1")));
    a.post(PODS, &pod("three", Some("n1")));
    let mut w = a.watch(&node_watch(rv(&one["object"]), ""));
    assert_eq!(
        w.next_change().unwrap()["object"]["metadata"]["name"],
        "two"
    );
    assert_eq!(
        w.next_change().unwrap()["object"]["metadata"]["name"],
        "three"
    );
}

#[test]
fn too_old_resource_version_is_410_gone() {
    let s = start("gone", |c| c.history_window(2));
    let a = Client::admin(&s);
    let old = s.resource_version();
    for n in ["a", "b", "c"] {
        a.post(PODS, &pod(n, Some("n1")));
    }
    let mut w = a.watch(&node_watch(old, ""));
    let e = w.next().unwrap();
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["kind"], "Status");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    assert!(w.next().is_none(), "the stream ends after the error");
    // Within the window it resumes; after a compaction it does not.
    let recent = s.resource_version() - 1;
    let mut w = a.watch(&node_watch(recent, ""));
    assert_eq!(w.next_change().unwrap()["object"]["metadata"]["name"], "c");
    drop(w);
    s.compact();
    assert_eq!(
        a.watch(&node_watch(recent, "")).next().unwrap()["object"]["code"],
        410
    );
    // The resourceVersion of a fresh list is always watchable.
    let (_, l) = a.get(PODS);
    let fresh: u64 = l["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut w = a.watch(&node_watch(fresh, "&timeoutSeconds=1"));
    assert!(
        w.next().is_none(),
        "nothing happened, the watch times out cleanly"
    );
}

#[test]
fn bookmarks_carry_the_current_resource_version() {
    let s = start("bookmark", |c| {
        c.bookmark_interval(Duration::from_millis(100))
    });
    let a = Client::admin(&s);
    a.post(PODS, &pod("elsewhere", Some("n2")));
    let from = s.resource_version() - 1;
    let mut w = a.watch(&node_watch(from, "&allowWatchBookmarks=true"));
    let b = w.next().unwrap();
    assert_eq!(b["type"], "BOOKMARK", "{b}");
    assert_eq!(b["object"]["kind"], "Pod");
    assert_eq!(
        rv(&b["object"]),
        s.resource_version(),
        "a bookmark moves the client past unrelated changes"
    );
    // Without allowWatchBookmarks there are none.
    let mut w = a.watch(&node_watch(from, "&timeoutSeconds=1"));
    assert!(w.next().is_none());
}

#[test]
fn selector_transitions_are_added_and_deleted() {
    let s = start("transition", |c| c);
    let a = Client::admin(&s);
    a.post(PODS, &pod("web", Some("n1")));
    let from = s.resource_version();
    let mut w = a.watch(&format!(
        "{PODS}?watch=1&resourceVersion={from}&labelSelector={}",
        enc("tier=fe")
    ));
    a.merge(
        &format!("{PODS}/web"),
        &json!({"metadata": {"labels": {"tier": "fe"}}}),
    );
    a.merge(
        &format!("{PODS}/web"),
        &json!({"metadata": {"labels": {"tier": "be"}}}),
    );
    let added = w.next_change().unwrap();
    assert_eq!(added["type"], "ADDED");
    let gone = w.next_change().unwrap();
    assert_eq!(gone["type"], "DELETED");
    assert_eq!(
        gone["object"]["metadata"]["labels"]["tier"], "fe",
        "the last state that matched"
    );
    assert_eq!(rv(&gone["object"]), s.resource_version());
}

#[test]
fn every_resource_can_be_watched() {
    let s = start("watch-all", |c| c);
    let a = Client::admin(&s);
    let from = s.resource_version();
    let mut cms = a.watch(&format!(
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={from}&fieldSelector={}",
        enc("metadata.name=cfg")
    ));
    let mut secrets = a.watch(&format!(
        "/api/v1/namespaces/default/secrets?watch=1&resourceVersion={from}"
    ));
    a.post(
        "/api/v1/namespaces/default/configmaps",
        &json!({"metadata": {"name": "other"}}),
    );
    a.post(
        "/api/v1/namespaces/default/configmaps",
        &json!({"metadata": {"name": "cfg"}, "data": {"a": "1"}}),
    );
    a.merge(
        "/api/v1/namespaces/default/configmaps/cfg",
        &json!({"data": {"a": "2"}}),
    );
    a.post(
        "/api/v1/namespaces/default/secrets",
        &json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}),
    );
    assert_eq!(cms.next_change().unwrap()["type"], "ADDED");
    let m = cms.next_change().unwrap();
    assert_eq!(
        (m["type"].as_str(), m["object"]["data"]["a"].as_str()),
        (Some("MODIFIED"), Some("2"))
    );
    let e = secrets.next_change().unwrap();
    assert_eq!(
        e["object"]["data"]["k"], "dg==",
        "stringData is stored base64-encoded in data"
    );
    assert!(e["object"].get("stringData").is_none());
}
