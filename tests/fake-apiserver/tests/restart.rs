//! Stopping and restarting: in-process (store kept in memory) and as a process with a state file.

mod common;
use common::*;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn restart_keeps_the_store_and_breaks_open_watches() {
    let mut s = start("restart", |c| c);
    let a = Client::admin(&s);
    a.post(PODS, &pod("web", Some("n1")));
    let url = s.url();
    let from = s.resource_version();
    let mut w = a.watch(&format!("/api/v1/pods?watch=1&resourceVersion={from}"));
    s.stop();
    assert!(w.next().is_none(), "a stopped server drops its watches");
    assert!(
        a.agent.get(format!("{url}/healthz")).call().is_err(),
        "nothing listens"
    );
    s.restart().unwrap();
    assert_eq!(s.url(), url, "same address after a restart");
    let a = Client::admin(&s);
    assert_eq!(a.get(&format!("{PODS}/web")).0, 200);
    a.post(PODS, &pod("after", Some("n1")));
    // The history survived too: the watch resumes without a relist.
    let mut w = a.watch(&format!("/api/v1/pods?watch=1&resourceVersion={from}"));
    assert_eq!(
        w.next_change().unwrap()["object"]["metadata"]["name"],
        "after"
    );
}

#[test]
fn state_file_carries_objects_across_servers() {
    let dir = temp_dir("state");
    let state = dir.join("state.json");
    let config = || {
        fake_apiserver::Config::new(&dir)
            .node("n1")
            .state_file(&state)
    };
    let s = fake_apiserver::FakeApiServer::start(config()).unwrap();
    let (url, token) = (s.url(), s.admin_token());
    let a = Client::admin(&s);
    a.post(PODS, &pod("web", Some("n1")));
    a.post(
        "/api/v1/namespaces/default/secrets",
        &json!({"metadata": {"name": "s"}, "data": {"k": "dg=="}}),
    );
    let last = s.resource_version();
    drop(s);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&state).unwrap().permissions());
    assert_eq!(mode & 0o077, 0, "the state holds secrets");
    let s = fake_apiserver::FakeApiServer::start(config()).unwrap();
    assert_eq!(
        (s.url(), s.admin_token()),
        (url, token),
        "same port and credentials"
    );
    let a = Client::admin(&s);
    let (_, p) = a.get(&format!("{PODS}/web"));
    assert_eq!(rv(&p), last - 1);
    assert_eq!(s.resource_version(), last, "resourceVersions carry on");
    // A fresh server has no history: old versions are gone, as after a real restart.
    let e = a
        .watch(&format!(
            "/api/v1/pods?watch=1&resourceVersion={}",
            last - 1
        ))
        .next()
        .unwrap();
    assert_eq!(e["object"]["code"], 410);
    let (_, created) = a.post(PODS, &pod("new", None));
    assert!(rv(&created) > last);
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn binary_serves_until_killed_and_comes_back_with_its_state() {
    let dir = temp_dir("bin");
    let run = || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fake-apiserver"))
            .args([
                "--dir",
                dir.to_str().unwrap(),
                "--node",
                "n1",
                "--state-file",
            ])
            .arg(dir.join("state.json"))
            .arg("--access-log")
            .arg(dir.join("access.log"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (child, line.trim().to_string())
    };
    let (mut child, url) = run();
    assert!(url.starts_with("https://127.0.0.1:"));
    assert_eq!(
        std::fs::read_to_string(dir.join("url")).unwrap().trim(),
        url
    );
    let ca = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    let admin = std::fs::read_to_string(dir.join("admin.token")).unwrap();
    let node_token = std::fs::read_to_string(dir.join("node-n1.token")).unwrap();
    let client = |token: &str| Client {
        agent: agent(&ca, None),
        base: url.clone(),
        token: Some(token.to_string()),
    };
    assert_eq!(client(&admin).post(PODS, &pod("web", Some("n1"))).0, 201);
    child.kill().unwrap();
    child.wait().unwrap();
    let (mut child, url2) = run();
    assert_eq!(url2, url);
    let (code, l) = client(&node_token).get(&format!(
        "/api/v1/pods?fieldSelector={}",
        enc("spec.nodeName=n1")
    ));
    assert_eq!(
        (code, l["items"][0]["metadata"]["name"].as_str()),
        (200, Some("web"))
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let log = std::fs::read_to_string(dir.join("access.log")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert_eq!(
        (lines[0]["method"].as_str(), lines[0]["code"].as_u64()),
        (Some("POST"), Some(201))
    );
    assert_eq!(lines[1]["user"], "system:node:n1");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn faults_answer_every_request_until_cleared() {
    let s = start("fault", |c| c);
    let a = Client::admin(&s);
    s.set_fault(Some(fake_apiserver::Fault::Unavailable));
    let (code, e) = a.get(PODS);
    assert_eq!(
        (code, e["reason"].as_str()),
        (503, Some("ServiceUnavailable"))
    );
    s.set_fault(Some(fake_apiserver::Fault::TooManyRequests));
    let resp = a
        .agent
        .get(format!("{}{PODS}", s.url()))
        .header("Authorization", &format!("Bearer {}", s.admin_token()))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers().get("retry-after").unwrap(), "1");
    s.set_fault(None);
    assert_eq!(a.get(PODS).0, 200);
    let codes: Vec<u16> = s.requests().iter().map(|r| r.code).collect();
    assert_eq!(codes, [503, 429, 200]);
}
