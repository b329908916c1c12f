//! `podunit volume ls|rm`: the node's PersistentVolumeClaims, bound or provisioned, and the
//! directories of claims whose documents are gone (Released), which only `rm` deletes.

use crate::common::paths::Paths;
use crate::common::storage_classes::claim_dir;
use crate::manifest::Catalog;
use crate::workload::claims::{Bindings, StorageClasses};
use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum Cmd {
    /// List the claims of the manifests and the released claims' directories.
    Ls {
        /// `json`: one object per claim.
        #[arg(short, long)]
        output: Option<String>,
    },
    /// Delete the directory of a released claim (`namespace/name`, or `name` in `default`).
    Rm {
        #[arg(required = true)]
        claims: Vec<String>,
    },
}

/// One claim, as `ls` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub namespace: String,
    pub name: String,
    /// `Bound`, `Pending` (no volume for it: `reason` says why) or `Released` (its document is
    /// gone, its directory kept).
    pub status: String,
    pub class: String,
    pub capacity: String,
    pub access_modes: Vec<String>,
    /// The PersistentVolume it is bound to; none for a provisioned directory.
    pub volume: Option<String>,
    pub path: String,
    /// The pods of the manifests that mount it.
    pub pods: Vec<String>,
    /// Whether its size is enforced (never yet: podunit sets no quotas).
    pub enforced: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

pub fn run(a: Args) -> ExitCode {
    let paths = Paths::from_env();
    let (node, _, _) = crate::generate::node_setup(&paths);
    let catalog = Catalog::load(&paths);
    let bindings = catalog.bind_claims(&node.storage_classes, &node.node_name, &node.labels);
    let res = match a.command {
        Cmd::Ls { output } => {
            let found = provisioned_dirs(&paths, &node.storage_classes);
            let rows = rows(&catalog, &bindings, &node.storage_classes, &found);
            ls(&rows, output.as_deref())
        }
        Cmd::Rm { claims } => {
            // Each claim on its own: one refused does not keep the others.
            let mut failed = 0;
            for c in &claims {
                if let Err(e) = rm(&paths, &catalog, &bindings, &node.storage_classes, c) {
                    errln!("podunit volume: {e}");
                    failed += 1;
                }
            }
            match failed {
                0 => Ok(()),
                n => Err(format!("{n} of {} not deleted", claims.len())),
            }
        }
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("podunit volume: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The claims' directories found under the classes' directories: (class, namespace, name).
fn provisioned_dirs(paths: &Paths, classes: &StorageClasses) -> BTreeSet<(String, String, String)> {
    let mut found = BTreeSet::new();
    let names = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    };
    for (class, dir) in &classes.classes {
        let base = paths.host(dir);
        for ns in names(&base) {
            for claim in names(&base.join(&ns)) {
                found.insert((class.clone(), ns.clone(), claim));
            }
        }
    }
    found
}

/// Every claim of the manifests, then every provisioned directory without one (Released).
pub fn rows(
    catalog: &Catalog,
    bindings: &Bindings,
    classes: &StorageClasses,
    found: &BTreeSet<(String, String, String)>,
) -> Vec<Row> {
    let mut users: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for e in &catalog.pods {
        let volumes = e.pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
        for c in volumes.filter_map(|v| v.persistent_volume_claim.as_ref()) {
            users
                .entry((e.namespace().to_string(), c.claim_name.clone()))
                .or_default()
                .push(e.name().to_string());
        }
    }
    let mut out = Vec::new();
    for (key, (claim, _)) in &catalog.claims {
        let spec = claim.spec.clone().unwrap_or_default();
        let pods = users.get(key).cloned().unwrap_or_default();
        let row = match bindings.get(key) {
            Some(Ok(b)) => Row {
                namespace: key.0.clone(),
                name: key.1.clone(),
                status: "Bound".into(),
                class: b.class.clone(),
                capacity: b.capacity.clone(),
                access_modes: b.access_modes.clone(),
                volume: b.volume.clone(),
                path: b.path.clone(),
                pods,
                enforced: false,
                reason: None,
            },
            other => Row {
                namespace: key.0.clone(),
                name: key.1.clone(),
                status: "Pending".into(),
                class: crate::workload::claims::claim_class(claim, classes),
                capacity: String::new(),
                access_modes: spec.access_modes.clone().unwrap_or_default(),
                volume: None,
                path: String::new(),
                pods,
                enforced: false,
                reason: other.and_then(|r| r.clone().err()),
            },
        };
        out.push(row);
    }
    for (class, ns, name) in found {
        let key = (ns.clone(), name.clone());
        // A claim of the manifests provisioned in this class's directory is listed above.
        let listed = bindings.get(&key).is_some_and(|b| {
            b.as_ref()
                .is_ok_and(|b| b.volume.is_none() && b.class == *class)
        });
        if listed {
            continue;
        }
        out.push(Row {
            namespace: ns.clone(),
            name: name.clone(),
            status: "Released".into(),
            class: class.clone(),
            capacity: String::new(),
            access_modes: Vec::new(),
            volume: None,
            path: claim_dir(&classes.classes[class], ns, name),
            pods: Vec::new(),
            enforced: false,
            reason: None,
        });
    }
    out
}

fn ls(rows: &[Row], output: Option<&str>) -> Result<(), String> {
    match output {
        Some("json") => {
            let text = serde_json::to_string_pretty(rows).map_err(|e| e.to_string())?;
            outln!("{text}");
            return Ok(());
        }
        Some(o) => return Err(format!("unknown output format {o:?} (json)")),
        None => {}
    }
    let mut table = vec![
        [
            "NAMESPACE",
            "NAME",
            "STATUS",
            "VOLUME",
            "CAPACITY",
            "ACCESS MODES",
            "STORAGECLASS",
            "PATH",
            "USED BY",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for r in rows {
        table.push(vec![
            r.namespace.clone(),
            r.name.clone(),
            r.status.clone(),
            r.volume.clone().unwrap_or_else(|| "<provisioned>".into()),
            r.capacity.clone(),
            short_modes(&r.access_modes),
            r.class.clone(),
            r.path.clone(),
            if r.pods.is_empty() {
                "<none>".into()
            } else {
                r.pods.join(",")
            },
        ]);
    }
    out!("{}", crate::cli::output::table(&table));
    for r in rows.iter().filter(|r| r.reason.is_some()) {
        outln!(
            "{}/{}: {}",
            r.namespace,
            r.name,
            r.reason.as_deref().unwrap_or_default()
        );
    }
    Ok(())
}

/// kubectl's short access modes (`RWO,ROX`).
fn short_modes(modes: &[String]) -> String {
    modes
        .iter()
        .map(|m| match m.as_str() {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Deletes a released claim's directory. A claim whose document is still in the manifests is
/// refused (its pods may be using it), and so is anything that is not a directory podunit made.
fn rm(
    paths: &Paths,
    catalog: &Catalog,
    bindings: &Bindings,
    classes: &StorageClasses,
    which: &str,
) -> Result<(), String> {
    let (ns, name) = which.split_once('/').unwrap_or(("default", which));
    let names_ok = crate::manifest::names::is_dns1123_label(ns)
        && crate::manifest::names::is_dns1123_subdomain(name);
    if !names_ok {
        return Err(format!("{which}: not a claim's namespace/name"));
    }
    let key = (ns.to_string(), name.to_string());
    if let Some((_, file)) = catalog.claims.get(&key) {
        let via = match bindings.get(&key) {
            Some(Ok(b)) if b.volume.is_some() => format!(
                " (its data is PersistentVolume {:?}'s, at {}: delete that by hand)",
                b.volume.as_deref().unwrap_or_default(),
                b.path
            ),
            _ => String::new(),
        };
        return Err(format!(
            "{ns}/{name} is still claimed by {}: remove its document and reload first{via}",
            file.display()
        ));
    }
    let mut removed = false;
    for dir in classes.classes.values() {
        let shown = claim_dir(dir, ns, name);
        let path = paths.host(&shown);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {
                // remove_dir_all never follows a symlink it meets inside.
                std::fs::remove_dir_all(&path).map_err(|e| format!("{shown}: {e}"))?;
                outln!("deleted {ns}/{name} ({shown})");
                removed = true;
            }
            Ok(_) => return Err(format!("{shown} is not a directory: left as it is")),
            Err(_) => {}
        }
    }
    if removed {
        Ok(())
    } else {
        Err(format!("no released claim {ns}/{name}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::paths::Source;
    use std::path::Path;

    #[test]
    fn bound_pending_and_released_claims() {
        let mut c = Catalog::default();
        c.add_text(
            Path::new("/etc/pods.d/data.yaml"),
            "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: manual}
spec: {storageClassName: manual, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]
  containers: [{name: c, image: host, command: [sleep, '1']}]
",
            Source::Etc,
        );
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let classes = StorageClasses::default();
        let b = c.bind_claims(&classes, "node", &Default::default());
        let found = BTreeSet::from([
            (
                "local-path".to_string(),
                "default".to_string(),
                "data".to_string(),
            ),
            (
                "local-path".to_string(),
                "default".to_string(),
                "old".to_string(),
            ),
        ]);
        let rows = rows(&c, &b, &classes, &found);
        let got: Vec<(&str, &str, &str)> = rows
            .iter()
            .map(|r| (r.name.as_str(), r.status.as_str(), r.path.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("data", "Bound", "/var/lib/podunit/volumes/default/data"),
                ("manual", "Pending", ""),
                ("old", "Released", "/var/lib/podunit/volumes/default/old"),
            ]
        );
        assert_eq!(rows[0].pods, ["app"]);
        assert!(rows[1].reason.as_deref().unwrap().contains("\"manual\""));
    }
}
