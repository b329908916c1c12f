//! A small Kubernetes API client for the tests: ureq over rustls, as the product uses.
#![allow(dead_code)]

use fake_apiserver::{Config, FakeApiServer};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::Duration;
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "fake-apiserver-{name}-{}-{}",
        std::process::id(),
        fake_apiserver::util::random_hex(4)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A server in a scratch directory that goes away with it.
pub struct TestServer(Option<FakeApiServer>, PathBuf);

impl std::ops::Deref for TestServer {
    type Target = FakeApiServer;
    fn deref(&self) -> &FakeApiServer {
        self.0.as_ref().unwrap()
    }
}

impl std::ops::DerefMut for TestServer {
    fn deref_mut(&mut self) -> &mut FakeApiServer {
        self.0.as_mut().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.0.take();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

pub fn start(name: &str, f: impl FnOnce(Config) -> Config) -> TestServer {
    let dir = temp_dir(name);
    let s = FakeApiServer::start(f(Config::new(&dir).node("n1").node("n2"))).unwrap();
    TestServer(Some(s), dir)
}

pub fn agent(ca_pem: &str, client: Option<ClientCert>) -> ureq::Agent {
    let ca = Certificate::from_pem(ca_pem.as_bytes()).unwrap();
    let tls = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&[ca]))
        .client_cert(client)
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .new_agent()
}

pub fn client_cert(dir: &std::path::Path, node: &str) -> ClientCert {
    let crt = std::fs::read(dir.join(format!("node-{node}.crt"))).unwrap();
    let key = std::fs::read(dir.join(format!("node-{node}.key"))).unwrap();
    ClientCert::new_with_certs(
        &[Certificate::from_pem(&crt).unwrap()],
        PrivateKey::from_pem(&key).unwrap(),
    )
}

/// Percent-encodes a query value.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub struct Client {
    pub agent: ureq::Agent,
    pub base: String,
    pub token: Option<String>,
}

impl Client {
    pub fn admin(s: &FakeApiServer) -> Client {
        Client {
            agent: agent(s.ca_pem(), None),
            base: s.url(),
            token: Some(s.admin_token()),
        }
    }

    pub fn node(s: &FakeApiServer, node: &str) -> Client {
        Client {
            agent: agent(s.ca_pem(), None),
            base: s.url(),
            token: Some(s.node_token(node).unwrap()),
        }
    }

    pub fn with_token(s: &FakeApiServer, token: Option<&str>) -> Client {
        Client {
            agent: agent(s.ca_pem(), None),
            base: s.url(),
            token: token.map(str::to_string),
        }
    }

    fn auth<B>(&self, r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => r.header("Authorization", &format!("Bearer {t}")),
            None => r,
        }
    }

    fn finish(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
        let mut resp = r.expect("transport error");
        let code = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (code, v)
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        Self::finish(
            self.auth(self.agent.get(format!("{}{path}", self.base)))
                .call(),
        )
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.auth(self.agent.post(format!("{}{path}", self.base)));
        Self::finish(
            r.header("Content-Type", "application/json")
                .send(body.to_string()),
        )
    }

    pub fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.auth(self.agent.put(format!("{}{path}", self.base)));
        Self::finish(
            r.header("Content-Type", "application/json")
                .send(body.to_string()),
        )
    }

    pub fn patch(&self, path: &str, content_type: &str, body: &Value) -> (u16, Value) {
        let r = self.auth(self.agent.patch(format!("{}{path}", self.base)));
        Self::finish(
            r.header("Content-Type", content_type)
                .send(body.to_string()),
        )
    }

    pub fn merge(&self, path: &str, body: &Value) -> (u16, Value) {
        self.patch(path, "application/merge-patch+json", body)
    }

    pub fn delete(&self, path: &str, options: Option<&Value>) -> (u16, Value) {
        let r = self.auth(self.agent.delete(format!("{}{path}", self.base)));
        match options {
            Some(o) => Self::finish(
                r.force_send_body()
                    .header("Content-Type", "application/json")
                    .send(o.to_string()),
            ),
            None => Self::finish(r.call()),
        }
    }

    /// Opens a watch; events are read with `Watch::next`.
    pub fn watch(&self, path_and_query: &str) -> Watch {
        let resp = self
            .auth(self.agent.get(format!("{}{path_and_query}", self.base)))
            .call()
            .expect("watch request");
        assert_eq!(resp.status().as_u16(), 200, "watch {path_and_query}");
        Watch {
            lines: BufReader::new(resp.into_body().into_reader()),
        }
    }
}

pub struct Watch {
    lines: BufReader<ureq::BodyReader<'static>>,
}

impl Watch {
    /// The next event, or None when the server ended the stream.
    pub fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.lines.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("a watch event is one JSON line")),
        }
    }

    /// The next event that is not a bookmark.
    pub fn next_change(&mut self) -> Option<Value> {
        loop {
            let e = self.next()?;
            if e["type"] != "BOOKMARK" {
                return Some(e);
            }
        }
    }
}

pub fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

pub fn pod(name: &str, node: Option<&str>) -> Value {
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "initContainers": [{"name": "init", "image": "host", "command": ["/bin/true"]}],
            "containers": [{"name": "main", "image": "host", "command": ["/bin/sleep", "infinity"]}]
        }
    });
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

pub const PODS: &str = "/api/v1/namespaces/default/pods";
