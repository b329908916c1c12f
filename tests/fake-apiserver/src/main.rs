//! `fake-apiserver`: the test double of the Kubernetes API server as a process, for end-to-end
//! tests and benchmarks that kill and restart it. See README.md.

use fake_apiserver::{Config, FakeApiServer};
use std::time::Duration;

const USAGE: &str =
    "usage: fake-apiserver --dir DIR [--port N] [--node NAME]... [--state-file FILE]
                      [--history-window N] [--bookmark-interval-ms MS] [--watch-timeout-s S]
                      [--access-log FILE] [--min-token-expiration-s S]

A test double of the Kubernetes API server (only what podunit uses). Listens on 127.0.0.1,
writes ca.crt, admin.kubeconfig, admin.token, node-NAME.kubeconfig (token),
node-NAME-cert.kubeconfig (client certificate), node-NAME-inline.kubeconfig (all inline)
and url to DIR, prints the URL, and serves
until killed. Restarted with the same DIR it keeps its port, CA and credentials; with the same
--state-file it keeps its objects.";

fn parse(args: &[String]) -> Result<Config, String> {
    let mut config = Config::new("");
    let mut dir = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--dir" => dir = Some(val()?),
            "--port" => config.port = val()?.parse().map_err(|e| format!("--port: {e}"))?,
            "--node" => config.nodes.push(val()?),
            "--state-file" => config.state_file = Some(val()?.into()),
            "--access-log" => config.access_log = Some(val()?.into()),
            "--history-window" => {
                config.history_window = val()?
                    .parse()
                    .map_err(|e| format!("--history-window: {e}"))?
            }
            "--bookmark-interval-ms" => {
                let ms = val()?
                    .parse()
                    .map_err(|e| format!("--bookmark-interval-ms: {e}"))?;
                config.bookmark_interval = Duration::from_millis(ms);
            }
            // Test-only: the real API server refuses TokenRequests shorter than 600 s.
            "--min-token-expiration-s" => {
                config.min_token_expiration_seconds = val()?
                    .parse()
                    .map_err(|e| format!("--min-token-expiration-s: {e}"))?
            }
            "--watch-timeout-s" => {
                let s = val()?
                    .parse()
                    .map_err(|e| format!("--watch-timeout-s: {e}"))?;
                config.watch_timeout = Duration::from_secs(s);
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    config.dir = dir.ok_or(format!("--dir is required\n{USAGE}"))?.into();
    Ok(config)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match parse(&args) {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    let server = match FakeApiServer::start(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fake-apiserver: {e}");
            std::process::exit(1);
        }
    };
    println!("{}", server.url());
    // Serve until killed; every change is already on disk when a state file is given.
    loop {
        std::thread::park();
    }
}
