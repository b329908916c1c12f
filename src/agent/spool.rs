//! The spool: where podunit-sync leaves the pods the cluster assigned to this node, for the generator.
//!
//! Format: one file per pod, `<namespace>_<name>.yaml` (Kubernetes names never contain `_`), a
//! multi-document YAML stream whose documents are single-line JSON objects (JSON is YAML): first the
//! Pod, then every ConfigMap and Secret it references, each with its `apiVersion`/`kind`. Only what the
//! generator needs is kept: `status`, `managedFields` and `resourceVersion` are dropped, so a status
//! update or a no-op write in the API does not change the file and cause no reload.
//!
//! Every file is written atomically (temp file in the same directory, fsync, rename, fsync of the
//! directory), so a crash at any point leaves the old file or the new one, never a partial one. Temp
//! files are dotfiles, which the manifest loader ignores. Files are 0600 (they may hold Secrets) and the
//! directory is 0700.

use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec, Secret};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;

/// The spool file name of a pod.
pub fn file_name(namespace: &str, name: &str) -> String {
    format!("{namespace}_{name}.yaml")
}

/// The (namespace, name) a spool file name stands for.
pub fn parse_file_name(file: &str) -> Option<(String, String)> {
    let stem = file.strip_suffix(".yaml")?;
    let (ns, name) = stem.split_once('_')?;
    (!ns.is_empty() && !name.is_empty()).then(|| (ns.to_string(), name.to_string()))
}

/// The ConfigMaps and Secrets a pod uses, each with whether the pod can do without it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refs {
    /// (name, optional)
    pub config_maps: BTreeSet<(String, bool)>,
    pub secrets: BTreeSet<(String, bool)>,
}

/// Every ConfigMap and Secret the pod references: volumes (also projected), env, envFrom.
pub fn refs(spec: &PodSpec) -> Refs {
    let mut r = Refs::default();
    let mut cm = |n: &str, o: Option<bool>| {
        r.config_maps.insert((n.to_string(), o.unwrap_or(false)));
    };
    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            cm(&c.name, c.optional);
        }
        for s in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &s.config_map {
                cm(&c.name, c.optional);
            }
        }
    }
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for c in all.clone() {
        for e in c.env.iter().flatten() {
            if let Some(k) = e
                .value_from
                .as_ref()
                .and_then(|v| v.config_map_key_ref.as_ref())
            {
                cm(&k.name, k.optional);
            }
        }
        for e in c.env_from.iter().flatten() {
            if let Some(k) = &e.config_map_ref {
                cm(&k.name, k.optional);
            }
        }
    }
    let mut sec = |n: &str, o: Option<bool>| {
        r.secrets.insert((n.to_string(), o.unwrap_or(false)));
    };
    for v in spec.volumes.iter().flatten() {
        if let Some(s) = &v.secret {
            sec(s.secret_name.as_deref().unwrap_or(""), s.optional);
        }
        for s in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(x) = &s.secret {
                sec(&x.name, x.optional);
            }
        }
    }
    for c in all {
        for e in c.env.iter().flatten() {
            if let Some(k) = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            {
                sec(&k.name, k.optional);
            }
        }
        for e in c.env_from.iter().flatten() {
            if let Some(k) = &e.secret_ref {
                sec(&k.name, k.optional);
            }
        }
    }
    r.config_maps.retain(|(n, _)| !n.is_empty());
    r.secrets.retain(|(n, _)| !n.is_empty());
    r
}

/// One JSON line with `apiVersion` and `kind` set and the API-server bookkeeping removed.
fn doc<T: Serialize>(api_version: &str, kind: &str, o: &T) -> String {
    let mut v = serde_json::to_value(o).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.into());
        m.remove("status");
        if let Some(meta) = m.get_mut("metadata").and_then(|x| x.as_object_mut()) {
            for k in ["managedFields", "resourceVersion", "generation", "selfLink"] {
                meta.remove(k);
            }
        }
    }
    serde_json::to_string(&v).unwrap_or_default()
}

/// The spool file content for a pod and the objects it uses (sorted by name: stable bytes).
pub fn render(pod: &Pod, config_maps: &[ConfigMap], secrets: &[Secret]) -> String {
    let mut cms: Vec<&ConfigMap> = config_maps.iter().collect();
    cms.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut secs: Vec<&Secret> = secrets.iter().collect();
    secs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut out = String::from("# Written by podunit-sync from the API server; do not edit.\n");
    out.push_str(&doc("v1", "Pod", pod));
    out.push('\n');
    for c in cms {
        out.push_str("---\n");
        out.push_str(&doc("v1", "ConfigMap", c));
        out.push('\n');
    }
    for s in secs {
        out.push_str("---\n");
        out.push_str(&doc("v1", "Secret", s));
        out.push('\n');
    }
    out
}

/// The spool directory.
#[derive(Debug, Clone)]
pub struct Spool {
    pub dir: PathBuf,
}

impl Spool {
    pub fn new(dir: PathBuf) -> Self {
        Spool { dir }
    }

    /// Creates the directory (0700) and removes temp files a crash left behind.
    pub fn init(&self) -> std::io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))?;
        for e in fs::read_dir(&self.dir)? {
            let e = e?;
            let n = e.file_name().to_string_lossy().into_owned();
            if crate::common::atomicfile::is_temp(&n) {
                let _ = fs::remove_file(e.path());
            }
        }
        Ok(())
    }

    /// Writes `content` as `name` unless it is already there; returns whether the file changed.
    pub fn put(&self, name: &str, content: &[u8]) -> std::io::Result<bool> {
        let path = self.dir.join(name);
        if fs::read(&path).is_ok_and(|old| old == content) {
            return Ok(false);
        }
        use crate::common::atomicfile;
        atomicfile::write(&path, content, atomicfile::Options::new(0o600))?;
        Ok(true)
    }

    /// Removes `name`; returns whether it existed.
    pub fn remove(&self, name: &str) -> std::io::Result<bool> {
        match fs::remove_file(self.dir.join(name)) {
            Ok(()) => {
                crate::common::atomicfile::sync_dir(&self.dir)?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The pod files present (names only).
    pub fn list(&self) -> std::io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.dir)? {
            let n = e?.file_name().to_string_lossy().into_owned();
            if parse_file_name(&n).is_some() && !n.starts_with('.') {
                out.push(n);
            }
        }
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn pod(yaml: &str) -> Pod {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn names() {
        assert_eq!(file_name("ns", "web"), "ns_web.yaml");
        assert_eq!(
            parse_file_name("ns_web.yaml"),
            Some(("ns".into(), "web".into()))
        );
        assert_eq!(parse_file_name("x.yaml"), None);
        assert_eq!(parse_file_name("ns_web.json"), None);
    }

    #[test]
    fn references_are_found_everywhere() {
        let p = pod(r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  volumes:
  - {name: a, configMap: {name: cm-vol}}
  - {name: b, secret: {secretName: sec-vol, optional: true}}
  - name: kube-api-access-x
    projected:
      sources:
      - serviceAccountToken: {path: token}
      - configMap: {name: kube-root-ca.crt}
      - secret: {name: sec-proj}
  initContainers:
  - name: i
    image: host
    envFrom: [{secretRef: {name: sec-envfrom}}]
  containers:
  - name: c
    image: host
    env:
    - {name: A, valueFrom: {configMapKeyRef: {name: cm-env, key: k}}}
    - {name: B, valueFrom: {secretKeyRef: {name: sec-env, key: k, optional: true}}}
    envFrom: [{configMapRef: {name: cm-envfrom}}]
"#);
        let r = refs(p.spec.as_ref().unwrap());
        let cms: Vec<_> = r
            .config_maps
            .iter()
            .map(|(n, o)| (n.as_str(), *o))
            .collect();
        assert_eq!(
            cms,
            vec![
                ("cm-env", false),
                ("cm-envfrom", false),
                ("cm-vol", false),
                ("kube-root-ca.crt", false)
            ]
        );
        let secs: Vec<_> = r.secrets.iter().map(|(n, o)| (n.as_str(), *o)).collect();
        assert_eq!(
            secs,
            vec![
                ("sec-env", true),
                ("sec-envfrom", false),
                ("sec-proj", false),
                ("sec-vol", true)
            ]
        );
    }

    #[test]
    fn render_is_stable_and_drops_bookkeeping() {
        let mut p = pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u, resourceVersion: '5', managedFields: [{manager: x}]}\nspec: {containers: [{name: c, image: host}]}\nstatus: {phase: Running}\n",
        );
        let cm: ConfigMap =
            serde_saphyr::from_str("metadata: {name: b, resourceVersion: '3'}\ndata: {k: v}\n")
                .unwrap();
        let cm2: ConfigMap = serde_saphyr::from_str("metadata: {name: a}\n").unwrap();
        let sec: Secret = serde_saphyr::from_str("metadata: {name: s}\ndata: {k: dg==}\n").unwrap();
        let out = render(&p, &[cm.clone(), cm2.clone()], std::slice::from_ref(&sec));
        assert!(
            !out.contains("resourceVersion")
                && !out.contains("managedFields")
                && !out.contains("Running"),
            "{out}"
        );
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&out).unwrap();
        assert_eq!(docs.len(), 4);
        assert_eq!(docs[0]["kind"], "Pod");
        assert_eq!(docs[1]["metadata"]["name"], "a");
        assert_eq!(docs[2]["data"]["k"], "v");
        assert_eq!(docs[3]["kind"], "Secret");
        // A status-only change in the API gives the same bytes: no write, no reload.
        p.metadata.resource_version = Some("6".into());
        p.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(out, render(&p, &[cm2, cm], &[sec]));
    }

    #[test]
    fn the_manifest_loader_reads_a_spool_file() {
        let p = pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: u-1}\nspec: {containers: [{name: c, image: host, command: [/bin/true]}]}\n",
        );
        let cm: ConfigMap =
            serde_saphyr::from_str("metadata: {name: cfg, namespace: ns}\ndata: {k: v}\n").unwrap();
        let sec: Secret =
            serde_saphyr::from_str("metadata: {name: s, namespace: ns}\ndata: {k: dg==}\n")
                .unwrap();
        let text = render(&p, &[cm], &[sec]);
        let mut c = crate::manifest::Catalog::default();
        c.add_text(
            std::path::Path::new("/var/lib/podunit/spool/ns_p.yaml"),
            &text,
            crate::common::paths::Source::Spool,
        );
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert_eq!(c.pods.len(), 1);
        assert_eq!(c.pods[0].uid(), "u-1");
        assert!(
            c.config_maps
                .contains_key(&("ns".to_string(), "cfg".to_string()))
        );
        assert!(c.secrets.contains_key(&("ns".to_string(), "s".to_string())));
    }

    #[test]
    fn atomic_put_modes_and_cleanup() {
        let dir = std::env::temp_dir().join(format!("podunit-spool-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let s = Spool::new(dir.join("spool"));
        s.init().unwrap();
        fs::write(s.dir.join(".tmp-1-ns_x.yaml"), "partial").unwrap();
        s.init().unwrap();
        assert!(
            !s.dir.join(".tmp-1-ns_x.yaml").exists(),
            "leftover temp files are removed"
        );
        assert_eq!(fs::metadata(&s.dir).unwrap().mode() & 0o777, 0o700);
        assert!(s.put("ns_p.yaml", b"one").unwrap());
        assert!(
            !s.put("ns_p.yaml", b"one").unwrap(),
            "same content: no write"
        );
        assert!(s.put("ns_p.yaml", b"two").unwrap());
        assert_eq!(fs::read(s.dir.join("ns_p.yaml")).unwrap(), b"two");
        assert_eq!(
            fs::metadata(s.dir.join("ns_p.yaml")).unwrap().mode() & 0o777,
            0o600
        );
        assert_eq!(s.list().unwrap(), vec!["ns_p.yaml"]);
        assert!(s.remove("ns_p.yaml").unwrap());
        assert!(!s.remove("ns_p.yaml").unwrap());
        fs::remove_dir_all(&dir).unwrap();
    }
}
