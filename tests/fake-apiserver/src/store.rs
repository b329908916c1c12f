//! The object store: one global, monotonically increasing resourceVersion (like etcd's revision), a
//! bounded history of changes for resuming watches, and the queues of the open watches.

use crate::resources::{self, Resource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// (qualified resource, namespace or "", name)
pub type Key = (String, String, String);

pub fn key(res: &Resource, ns: &str, name: &str) -> Key {
    let ns = if res.namespaced { ns } else { "" };
    (res.qualified(), ns.to_string(), name.to_string())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

struct Recorded {
    rv: u64,
    res: &'static Resource,
    change: Change,
    object: Arc<Value>,
    old: Option<Arc<Value>>,
}

/// What a watch is for: one resource, optionally one namespace, and selectors.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    pub res: &'static Resource,
    pub namespace: Option<String>,
    pub fields: FieldSelector,
    pub labels: LabelSelector,
}

impl WatchSpec {
    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns.as_str())
        {
            return false;
        }
        self.fields.matches(obj) && self.labels.matches(obj)
    }

    /// The event a watcher sees for a change, as the API server's cacher computes it: an object
    /// that starts matching the selectors is ADDED, one that stops matching is DELETED (the old
    /// state at the new resourceVersion).
    fn event_for(&self, r: &Recorded) -> Option<(&'static str, Arc<Value>)> {
        if !std::ptr::eq(r.res, self.res) {
            return None;
        }
        let now = self.matches(&r.object);
        let before = r.old.as_ref().is_some_and(|o| self.matches(o));
        match r.change {
            Change::Added if now => Some(("ADDED", r.object.clone())),
            Change::Modified if now && before => Some(("MODIFIED", r.object.clone())),
            Change::Modified if now => Some(("ADDED", r.object.clone())),
            Change::Modified if before => {
                let mut old = (**r.old.as_ref()?).clone();
                set_rv(&mut old, r.rv);
                Some(("DELETED", Arc::new(old)))
            }
            Change::Deleted if now => Some(("DELETED", r.object.clone())),
            _ => None,
        }
    }
}

struct Watcher {
    spec: WatchSpec,
    queue: VecDeque<(&'static str, Arc<Value>)>,
}

pub struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Arc<Value>>,
    history: VecDeque<Recorded>,
    history_window: usize,
    /// Changes up to and including this resourceVersion are no longer in `history`.
    compacted: u64,
    watchers: HashMap<u64, Watcher>,
    next_watcher: u64,
    state_file: Option<PathBuf>,
}

pub struct Store {
    inner: Mutex<Inner>,
    cond: Condvar,
}

pub fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
    }
}

/// One batch of a watch: events to send, or the sign that the server is going away.
pub struct Batch {
    pub events: Vec<(&'static str, Arc<Value>)>,
    /// The store's resourceVersion when the queue was found empty: what a bookmark may claim.
    pub rv: u64,
    pub stopped: bool,
}

impl Store {
    /// A store that keeps `history_window` changes for watch resumption and, with `state_file`,
    /// writes itself there after every change and starts from it when it exists.
    pub fn open(history_window: usize, state_file: Option<PathBuf>) -> Result<Store, String> {
        let mut inner = Inner {
            rv: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_window,
            compacted: 0,
            watchers: HashMap::new(),
            next_watcher: 0,
            state_file: state_file.clone(),
        };
        if let Some(path) = state_file.filter(|p| p.exists()) {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            let state: Value = serde_json::from_str(&text)
                .map_err(|e| format!("parsing {}: {e}", path.display()))?;
            inner.rv = state["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            for obj in state["objects"].as_array().cloned().unwrap_or_default() {
                let av = obj["apiVersion"].as_str().unwrap_or_default();
                let kind = obj["kind"].as_str().unwrap_or_default();
                let res = resources::by_kind(av, kind)
                    .ok_or_else(|| format!("unknown object {av}/{kind} in state file"))?;
                let k = key(res, meta_str(&obj, "namespace"), meta_str(&obj, "name"));
                inner.objects.insert(k, Arc::new(obj));
            }
            // Like an API server whose watch cache starts afresh: older versions are gone.
            inner.compacted = inner.rv;
        }
        Ok(Store {
            inner: Mutex::new(inner),
            cond: Condvar::new(),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` with the store locked, then wakes the watches.
    pub fn write<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let out = f(&mut self.lock());
        self.cond.notify_all();
        out
    }

    pub fn wake_all(&self) {
        self.cond.notify_all();
    }

    /// Opens a watch from `from` (None: from the current state, which is sent as ADDED events).
    pub fn watch(&self, spec: WatchSpec, from: Option<u64>) -> Result<u64, ApiError> {
        let mut inner = self.lock();
        let mut queue = VecDeque::new();
        match from {
            None => {
                for obj in inner.objects.values() {
                    if obj_is(obj, spec.res) && spec.matches(obj) {
                        queue.push_back(("ADDED", obj.clone()));
                    }
                }
            }
            Some(n) => {
                if n < inner.compacted {
                    return Err(ApiError::expired(n, inner.compacted + 1));
                }
                for r in inner.history.iter().filter(|r| r.rv > n) {
                    if let Some(e) = spec.event_for(r) {
                        queue.push_back(e);
                    }
                }
            }
        }
        inner.next_watcher += 1;
        let id = inner.next_watcher;
        inner.watchers.insert(id, Watcher { spec, queue });
        Ok(id)
    }

    /// Waits until watch `id` has events, `deadline` passes, or `stop` is set.
    pub fn next_batch(&self, id: u64, deadline: Instant, stop: &AtomicBool) -> Batch {
        let mut inner = self.lock();
        loop {
            if stop.load(Ordering::SeqCst) {
                return Batch {
                    events: Vec::new(),
                    rv: inner.rv,
                    stopped: true,
                };
            }
            let rv = inner.rv;
            let Some(w) = inner.watchers.get_mut(&id) else {
                return Batch {
                    events: Vec::new(),
                    rv,
                    stopped: true,
                };
            };
            if !w.queue.is_empty() {
                return Batch {
                    events: w.queue.drain(..).collect(),
                    rv,
                    stopped: false,
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Batch {
                    events: Vec::new(),
                    rv,
                    stopped: false,
                };
            }
            inner = self
                .cond
                .wait_timeout(inner, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    pub fn unwatch(&self, id: u64) {
        self.lock().watchers.remove(&id);
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn obj_is(obj: &Value, res: &Resource) -> bool {
    obj["kind"].as_str() == Some(res.kind) && obj["apiVersion"].as_str() == Some(&res.api_version())
}

impl Inner {
    pub fn rv(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, res: &Resource, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects.get(&key(res, ns, name)).cloned()
    }

    /// Objects of `spec.res` that match, in key order.
    pub fn list(&self, spec: &WatchSpec) -> Vec<Arc<Value>> {
        self.objects
            .values()
            .filter(|o| obj_is(o, spec.res) && spec.matches(o))
            .cloned()
            .collect()
    }

    /// Every object of a resource, for the authorizer's graph walks.
    pub fn all(&self, res: &Resource) -> impl Iterator<Item = &Arc<Value>> {
        let q = res.qualified();
        self.objects.values().filter(move |o| {
            resources::by_kind(
                o["apiVersion"].as_str().unwrap_or_default(),
                o["kind"].as_str().unwrap_or_default(),
            )
            .is_some_and(|r| r.qualified() == q)
        })
    }

    /// Records a change: a new resourceVersion for `object`, the history and the watches told,
    /// and the state file rewritten. Returns the object as stored.
    pub fn commit(
        &mut self,
        res: &'static Resource,
        change: Change,
        mut object: Value,
        old: Option<Arc<Value>>,
    ) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        set_rv(&mut object, rv);
        let k = key(
            res,
            meta_str(&object, "namespace"),
            meta_str(&object, "name"),
        );
        let object = Arc::new(object);
        if change == Change::Deleted {
            self.objects.remove(&k);
        } else {
            self.objects.insert(k, object.clone());
        }
        let rec = Recorded {
            rv,
            res,
            change,
            object: object.clone(),
            old,
        };
        for w in self.watchers.values_mut() {
            if let Some(e) = w.spec.event_for(&rec) {
                w.queue.push_back(e);
            }
        }
        self.history.push_back(rec);
        while self.history.len() > self.history_window {
            if let Some(r) = self.history.pop_front() {
                self.compacted = r.rv;
            }
        }
        if self.history_window == 0 {
            self.compacted = rv;
        }
        self.persist();
        object
    }

    /// Forgets the history, as a compaction does: watches from any older resourceVersion get 410.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    fn persist(&self) {
        let Some(path) = &self.state_file else {
            return;
        };
        // Written by hand rather than through one big Value: no copy of every object per change.
        let mut out = format!("{{\"resourceVersion\":\"{}\",\"objects\":[", self.rv).into_bytes();
        for (i, o) in self.objects.values().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if serde_json::to_writer(&mut out, &**o).is_err() {
                return;
            }
        }
        out.extend_from_slice(b"]}");
        // Secrets are in it: readable by the owner only.
        let result = crate::files::write_private(path, &out);
        if let Err(e) = result {
            eprintln!("fake-apiserver: writing {}: {e}", path.display());
        }
    }
}
