//! A test double of a misbehaving registry or token realm, for what the real registry cannot be
//! made to do on demand: send headers and then stall, dribble a byte at a time, redirect a blob
//! to another host, or stand for a token realm that records who sends it credentials. Plain
//! HTTP on loopback (the tests list it as insecure); every request is recorded; a connection
//! is served on a thread of its own and closed after one response.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request as received: the target and the headers, names lower-cased.
#[derive(Debug, Clone)]
pub struct Request {
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the double answers.
pub enum Reply {
    /// A whole response.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Headers announcing `len` bytes, the first `sent` bytes of `body`, then nothing until the
    /// client gives up (or the double is dropped).
    Stall { body: Vec<u8>, sent: usize },
    /// The whole body, `chunk` bytes every `every`.
    Dribble {
        body: Vec<u8>,
        chunk: usize,
        every: Duration,
    },
}

impl Reply {
    pub fn ok(body: Vec<u8>, content_type: &str) -> Reply {
        Reply::Full {
            status: 200,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
        }
    }

    pub fn status(status: u16, headers: &[(&str, &str)]) -> Reply {
        Reply::Full {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        }
    }
}

type Route = dyn Fn(&Request) -> Reply + Send + Sync;

pub struct Hostile {
    /// `127.0.0.1:port`.
    pub host: String,
    pub requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
}

impl Hostile {
    pub fn start(route: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let route: Arc<Route> = Arc::new(route);
        let (reqs, st) = (requests.clone(), stop.clone());
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (route, reqs, st) = (route.clone(), reqs.clone(), st.clone());
                        std::thread::spawn(move || serve(conn, &*route, &reqs, &st));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Hostile {
            host,
            requests,
            stop,
        }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(conn: TcpStream, route: &Route, reqs: &Mutex<Vec<Request>>, stop: &AtomicBool) {
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    let target = line.split(' ').nth(1).unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let req = Request { target, headers };
    reqs.lock().unwrap().push(req.clone());
    let mut w = conn;
    let head = |status: u16, headers: &[(String, String)], len: usize| {
        let mut s =
            format!("HTTP/1.1 {status} X\r\nContent-Length: {len}\r\nConnection: close\r\n");
        for (k, v) in headers {
            s.push_str(&format!("{k}: {v}\r\n"));
        }
        s.push_str("\r\n");
        s.into_bytes()
    };
    let _ = match route(&req) {
        Reply::Full {
            status,
            headers,
            body,
        } => w
            .write_all(&head(status, &headers, body.len()))
            .and_then(|()| w.write_all(&body)),
        Reply::Stall { body, sent } => {
            let r = w
                .write_all(&head(200, &[], body.len()))
                .and_then(|()| w.write_all(&body[..sent]))
                .and_then(|()| w.flush());
            let until = Instant::now() + Duration::from_secs(120);
            while r.is_ok() && !stop.load(Ordering::Relaxed) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
                // The client hung up: a read returns 0.
                let mut b = [0u8; 1];
                let _ = w.set_read_timeout(Some(Duration::from_millis(1)));
                if matches!((&w).read(&mut b), Ok(0)) {
                    break;
                }
            }
            r
        }
        Reply::Dribble { body, chunk, every } => {
            let mut r = w.write_all(&head(200, &[], body.len()));
            for c in body.chunks(chunk) {
                if r.is_err() || stop.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(every);
                r = w.write_all(c).and_then(|()| w.flush());
            }
            r
        }
    };
}

/// Routes that serve `img` as `repo` (manifest by tag or digest, blobs by digest), with
/// `blob` deciding how each layer blob is sent.
pub fn image_routes(
    repo: &str,
    tag: &str,
    img: &super::oci::Image,
    blob: impl Fn(&[u8]) -> Reply + Send + Sync + 'static,
) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    let manifest_paths = [
        format!("/v2/{repo}/manifests/{tag}"),
        format!("/v2/{repo}/manifests/{}", img.digest()),
    ];
    let (manifest, mt) = (img.manifest.clone(), img.media_type.clone());
    let blobs: Vec<(String, Vec<u8>, bool)> = img
        .blobs
        .iter()
        .map(|b| {
            let d = super::oci::digest(b);
            let is_config = d == img.config_digest;
            (format!("/v2/{repo}/blobs/{d}"), b.clone(), is_config)
        })
        .collect();
    move |req: &Request| {
        if manifest_paths.contains(&req.target) {
            return Reply::ok(manifest.clone(), &mt);
        }
        match blobs.iter().find(|(p, _, _)| *p == req.target) {
            Some((_, b, true)) => Reply::ok(b.clone(), "application/octet-stream"),
            Some((_, b, false)) => blob(b),
            None => Reply::status(404, &[]),
        }
    }
}
