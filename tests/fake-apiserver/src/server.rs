//! The listener: TLS connections, one thread each, keep-alive, and watch streams. Stopping closes
//! every connection; the store stays with the `Api`, so a restart serves the same objects.

use crate::api::{Api, Reply, WatchPlan};
use crate::http::{self, Request};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

pub struct Listener {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<HashMap<u64, TcpStream>>>,
    accept: Option<JoinHandle<()>>,
    api: Arc<Api>,
}

impl Listener {
    pub fn start(
        api: Arc<Api>,
        tls: Arc<ServerConfig>,
        addr: SocketAddr,
    ) -> std::io::Result<Listener> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<HashMap<u64, TcpStream>>> = Arc::default();
        let accept = {
            let (stop, conns, api) = (stop.clone(), conns.clone(), api.clone());
            std::thread::Builder::new()
                .name("fake-apiserver-accept".into())
                .spawn(move || accept_loop(listener, api, tls, stop, conns))?
        };
        Ok(Listener {
            addr,
            stop,
            conns,
            accept: Some(accept),
            api,
        })
    }

    /// Stops accepting, drops every open connection (watches end abruptly, as when a server dies).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for (_, c) in self.conns.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            let _ = c.shutdown(Shutdown::Both);
        }
        self.api.store.wake_all();
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(
    listener: TcpListener,
    api: Arc<Api>,
    tls: Arc<ServerConfig>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<HashMap<u64, TcpStream>>>,
) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let id = NEXT.fetch_add(1, Ordering::SeqCst);
        if let Ok(c) = stream.try_clone() {
            conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, c);
        }
        let (api, tls, stop, conns) = (api.clone(), tls.clone(), stop.clone(), conns.clone());
        let _ = std::thread::Builder::new()
            .name("fake-apiserver-conn".into())
            .spawn(move || {
                serve(stream, &api, tls, &stop);
                conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            });
    }
}

fn serve(tcp: TcpStream, api: &Api, tls: Arc<ServerConfig>, stop: &AtomicBool) {
    let _ = tcp.set_nodelay(true);
    let Ok(conn) = ServerConnection::new(tls) else {
        return;
    };
    let mut reader = BufReader::new(StreamOwned::new(conn, tcp));
    loop {
        let req = match http::read_request(&mut reader) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let body = crate::status::ApiError::bad_request(e.to_string()).to_status();
                let _ = http::write_response(
                    reader.get_mut(),
                    400,
                    "application/json",
                    body.to_string().as_bytes(),
                    false,
                );
                return;
            }
            Err(_) => return,
        };
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let peer = reader
            .get_ref()
            .conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec());
        let keep = req.keep_alive();
        let out = reader.get_mut();
        let ok = match api.handle(&req, peer.as_deref()) {
            Reply::Json(code, v) => http::write_response(
                out,
                code,
                "application/json",
                v.to_string().as_bytes(),
                keep,
            )
            .is_ok(),
            Reply::Text(code, s) => {
                http::write_response(out, code, "text/plain; charset=utf-8", s.as_bytes(), keep)
                    .is_ok()
            }
            Reply::Watch(plan) => stream_watch(out, api, plan, &req, stop).is_ok(),
        };
        if !ok || !keep {
            let _ = out.flush();
            let _ = out.sock.shutdown(Shutdown::Both);
            return;
        }
    }
}

fn event_line(kind: &str, object: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    line
}

fn bookmark(plan: &WatchPlan, rv: u64, initial_end: bool) -> Vec<u8> {
    let mut meta = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let obj = json!({"kind": plan.spec.res.kind, "apiVersion": plan.spec.res.api_version(), "metadata": meta});
    event_line("BOOKMARK", &obj)
}

/// A watch: chunked JSON lines, one event each, until timeoutSeconds, the client going away, or
/// the server stopping. Bookmarks, when asked for, come every bookmark interval of quiet.
fn stream_watch<W: Write>(
    out: &mut W,
    api: &Api,
    plan: WatchPlan,
    _req: &Request,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    http::start_chunked(out, "application/json")?;
    let id = match api.store.watch(plan.spec.clone(), plan.from) {
        Ok(id) => id,
        Err(e) => {
            http::write_chunk(out, &event_line("ERROR", &e.to_status()))?;
            return http::end_chunked(out);
        }
    };
    let result = (|| {
        let end = Instant::now() + plan.timeout;
        let mut initial_end_pending = plan.initial_events_end;
        loop {
            let next_bookmark = Instant::now() + api.bookmark_interval;
            let deadline = if initial_end_pending {
                Instant::now()
            } else {
                next_bookmark.min(end)
            };
            let batch = api.store.next_batch(id, deadline, stop);
            if batch.stopped {
                return Err(std::io::Error::other("server stopping"));
            }
            for (kind, obj) in &batch.events {
                http::write_chunk(out, &event_line(kind, obj))?;
            }
            if initial_end_pending {
                // The initial state was queued in full when the watch opened.
                http::write_chunk(out, &bookmark(&plan, batch.rv, true))?;
                initial_end_pending = false;
                continue;
            }
            if Instant::now() >= end {
                return http::end_chunked(out);
            }
            if batch.events.is_empty() && plan.bookmarks {
                http::write_chunk(out, &bookmark(&plan, batch.rv, false))?;
            }
        }
    })();
    api.store.unwatch(id);
    result
}

pub fn default_addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}
