//! Volumes: where each lives on the host (a [`VolumePlan`] for `pod-prepare`) and how a container
//! binds it (`BindPaths=` / `BindReadOnlyPaths=`).

use super::{Fault, NodeFacts};
use crate::common::paths::Paths;
use crate::common::quantity;
use crate::common::text::concat;
use crate::translate::plan::{FileSource, KeyFile, VolumeKind, VolumePlan};
use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod, Volume, VolumeMount};

/// Kubernetes' default mode for configMap, downwardAPI and projected files (0644).
const DEFAULT_MODE: u32 = 0o644;
/// podunit's default for secret files: readable by their owner only (DESIGN.md §6).
const SECRET_DEFAULT_MODE: u32 = 0o400;

/// The volume sources podunit can provide.
pub const SUPPORTED: &[&str] = &[
    "emptyDir",
    "hostPath",
    "configMap",
    "secret",
    "downwardAPI",
    "projected",
    "persistentVolumeClaim",
];

/// The volume sources `v` sets, by their API names, in the API's (alphabetical) order.
///
/// Every field is named, so a k8s-openapi that adds a source does not compile until it is listed
/// here: a source podunit does not know can never pass as no source at all.
fn source_keys(v: &Volume) -> Vec<&'static str> {
    let Volume {
        name: _,
        aws_elastic_block_store,
        azure_disk,
        azure_file,
        cephfs,
        cinder,
        config_map,
        csi,
        downward_api,
        empty_dir,
        ephemeral,
        fc,
        flex_volume,
        flocker,
        gce_persistent_disk,
        git_repo,
        glusterfs,
        host_path,
        image,
        iscsi,
        nfs,
        persistent_volume_claim,
        photon_persistent_disk,
        portworx_volume,
        projected,
        quobyte,
        rbd,
        scale_io,
        secret,
        storageos,
        vsphere_volume,
    } = v;
    [
        ("awsElasticBlockStore", aws_elastic_block_store.is_some()),
        ("azureDisk", azure_disk.is_some()),
        ("azureFile", azure_file.is_some()),
        ("cephfs", cephfs.is_some()),
        ("cinder", cinder.is_some()),
        ("configMap", config_map.is_some()),
        ("csi", csi.is_some()),
        ("downwardAPI", downward_api.is_some()),
        ("emptyDir", empty_dir.is_some()),
        ("ephemeral", ephemeral.is_some()),
        ("fc", fc.is_some()),
        ("flexVolume", flex_volume.is_some()),
        ("flocker", flocker.is_some()),
        ("gcePersistentDisk", gce_persistent_disk.is_some()),
        ("gitRepo", git_repo.is_some()),
        ("glusterfs", glusterfs.is_some()),
        ("hostPath", host_path.is_some()),
        ("image", image.is_some()),
        ("iscsi", iscsi.is_some()),
        ("nfs", nfs.is_some()),
        ("persistentVolumeClaim", persistent_volume_claim.is_some()),
        ("photonPersistentDisk", photon_persistent_disk.is_some()),
        ("portworxVolume", portworx_volume.is_some()),
        ("projected", projected.is_some()),
        ("quobyte", quobyte.is_some()),
        ("rbd", rbd.is_some()),
        ("scaleIO", scale_io.is_some()),
        ("secret", secret.is_some()),
        ("storageos", storageos.is_some()),
        ("vsphereVolume", vsphere_volume.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, set)| set.then_some(key))
    .collect()
}

/// The one source a volume uses, or the field that makes it unusable here.
pub fn kind_of(v: &Volume) -> Result<String, (String, String)> {
    let keys = source_keys(v);
    if let Some(k) = keys.iter().find(|k| !SUPPORTED.contains(k)) {
        return Err((
            k.to_string(),
            format!(
                "{k} volumes are not supported here (no storage drivers; supported: {})",
                SUPPORTED.join(", ")
            ),
        ));
    }
    match keys.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err((
            "name".into(),
            format!(
                "a volume source is required (one of {})",
                SUPPORTED.join(", ")
            ),
        )),
        _ => Err((
            "name".into(),
            format!(
                "exactly one volume source is allowed, found {}",
                keys.join(", ")
            ),
        )),
    }
}

/// Owner and group of a volume's files: the user of the containers that mount it when they agree,
/// root otherwise; fsGroup when the pod sets one.
pub struct Ownership {
    pub uid: u32,
    pub gid: u32,
}

/// The plan of one volume.
pub fn plan(
    pod: &Pod,
    node: &NodeFacts,
    claims: &crate::manifest::Claims,
    v: &Volume,
    owner: &Ownership,
    path: &str,
) -> Result<VolumePlan, Fault> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let state = concat(&[Paths::STATE, "/", uid, "/volumes/", &v.name]);
    let runtime = concat(&[Paths::RUNTIME, "/", uid, "/volumes/", &v.name]);
    let files = |sources: Vec<FileSource>, mode: u32| VolumeKind::Files {
        sources,
        uid: owner.uid,
        gid: owner.gid,
        mode,
    };
    let (host, kind) = if let Some(e) = &v.empty_dir {
        let memory = e.medium.as_deref() == Some("Memory");
        let size_limit = match &e.size_limit {
            Some(q) => Some(quantity::bytes(&q.0).map_err(|err| {
                Fault::new(format!("{path}.emptyDir.sizeLimit"), err.to_string())
            })?),
            None => None,
        };
        (
            if memory { runtime } else { state },
            VolumeKind::EmptyDir { memory, size_limit },
        )
    } else if let Some(h) = &v.host_path {
        (
            h.path.clone(),
            VolumeKind::HostPath {
                host_type: h.type_.clone().unwrap_or_default(),
            },
        )
    } else if let Some(c) = &v.persistent_volume_claim {
        let at = || format!("{path}.persistentVolumeClaim.claimName");
        match claims.get(&c.claim_name) {
            None => {
                return Err(Fault::new(
                    at(),
                    format!(
                        "persistentvolumeclaim {:?} not found (no PersistentVolumeClaim of this \
                         name in the pod's namespace in the manifest directories)",
                        c.claim_name
                    ),
                ));
            }
            Some(Err(why)) => {
                return Err(Fault::new(
                    at(),
                    format!("persistentvolumeclaim {:?} {why}", c.claim_name),
                ));
            }
            Some(Ok(b)) => (
                b.path.clone(),
                VolumeKind::Claim {
                    claim: c.claim_name.clone(),
                    host_type: b.host_type.clone(),
                    read_only: c.read_only == Some(true),
                },
            ),
        }
    } else if let Some(c) = &v.config_map {
        let src = object(false, &c.name, &c.items, c.optional);
        (
            runtime,
            files(vec![src], mode(c.default_mode, DEFAULT_MODE)),
        )
    } else if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let src = object(true, &name, &s.items, s.optional);
        (
            runtime,
            files(vec![src], mode(s.default_mode, SECRET_DEFAULT_MODE)),
        )
    } else if let Some(d) = &v.downward_api {
        let mut sources = Vec::new();
        for (i, item) in d.items.as_deref().unwrap_or_default().iter().enumerate() {
            sources.push(downward_item(
                pod,
                node,
                item,
                &crate::common::text::item(&[path, ".downwardAPI.items"], i),
            )?);
        }
        (runtime, files(sources, mode(d.default_mode, DEFAULT_MODE)))
    } else if let Some(p) = &v.projected {
        let sources = projected_sources(pod, node, p, path)?;
        (runtime, files(sources, mode(p.default_mode, DEFAULT_MODE)))
    } else {
        return Err(Fault::new(path.to_string(), "volume source not supported"));
    };
    Ok(VolumePlan {
        name: v.name.clone(),
        path: host,
        kind,
    })
}

/// The files of a projected volume, source by source.
fn projected_sources(
    pod: &Pod,
    node: &NodeFacts,
    p: &k8s_openapi::api::core::v1::ProjectedVolumeSource,
    path: &str,
) -> Result<Vec<FileSource>, Fault> {
    let mut sources = Vec::new();
    for (i, s) in p.sources.as_deref().unwrap_or_default().iter().enumerate() {
        let sp = format!("{path}.projected.sources[{i}]");
        if let Some(c) = &s.config_map {
            sources.push(object(false, &c.name, &c.items, c.optional));
        } else if let Some(sec) = &s.secret {
            sources.push(object(true, &sec.name, &sec.items, sec.optional));
        } else if let Some(d) = &s.downward_api {
            for (j, item) in d.items.as_deref().unwrap_or_default().iter().enumerate() {
                sources.push(downward_item(
                    pod,
                    node,
                    item,
                    &format!("{sp}.downwardAPI.items[{j}]"),
                )?);
            }
        } else if let Some(t) = &s.service_account_token {
            sources.push(FileSource::ServiceAccountToken {
                path: t.path.clone(),
                audience: t.audience.clone().filter(|a| !a.is_empty()),
                expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                mode: None,
            });
        } else {
            return Err(Fault::new(
                sp,
                "projected source not supported (configMap, secret, downwardAPI, serviceAccountToken are)",
            ));
        }
    }
    Ok(sources)
}

fn mode(m: Option<i32>, default: u32) -> u32 {
    m.map(|m| (m as u32) & 0o777).unwrap_or(default)
}

fn object(
    secret: bool,
    name: &str,
    items: &Option<Vec<KeyToPath>>,
    optional: Option<bool>,
) -> FileSource {
    FileSource::Object {
        secret,
        name: name.to_string(),
        items: items.as_ref().map(|items| {
            items
                .iter()
                .map(|i| KeyFile {
                    key: i.key.clone(),
                    path: i.path.clone(),
                    mode: i.mode.map(|m| m as u32 & 0o777),
                })
                .collect()
        }),
        optional: optional.unwrap_or(false),
        mode: None,
    }
}

fn downward_item(
    pod: &Pod,
    node: &NodeFacts,
    item: &k8s_openapi::api::core::v1::DownwardAPIVolumeFile,
    path: &str,
) -> Result<FileSource, Fault> {
    let content = if let Some(f) = &item.field_ref {
        match f.field_path.as_str() {
            "metadata.labels" | "metadata.annotations" => {
                super::env::field_value(pod, node, &f.field_path)
            }
            p if super::env::field_ref_supported(p) == Some(true) => {
                super::env::field_value(pod, node, p)
            }
            _ => None,
        }
        .ok_or_else(|| {
            Fault::new(
                format!("{path}.fieldRef.fieldPath"),
                format!("{:?} is not supported in a volume", f.field_path),
            )
        })?
    } else if let Some(r) = &item.resource_field_ref {
        let ctr = pod
            .spec
            .as_ref()
            .and_then(|s| {
                s.containers
                    .iter()
                    .find(|c| Some(c.name.as_str()) == r.container_name.as_deref())
            })
            .ok_or_else(|| {
                Fault::new(
                    format!("{path}.resourceFieldRef.containerName"),
                    "no such container",
                )
            })?;
        super::env::resource_value(
            ctr,
            node,
            &r.resource,
            r.divisor.as_ref().map(|d| d.0.as_str()),
        )
        .map_err(|m| Fault::new(format!("{path}.resourceFieldRef"), m))?
    } else {
        return Err(Fault::new(
            path.to_string(),
            "fieldRef or resourceFieldRef is required",
        ));
    };
    Ok(FileSource::Literal {
        path: item.path.clone(),
        content,
        mode: item.mode.map(|m| m as u32 & 0o777),
    })
}

/// The (volume directory, subPath) of each of the container's mounts that has a subPath.
pub fn sub_paths(ctr: &Container, plans: &[VolumePlan]) -> Vec<(String, String)> {
    ctr.volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            let sp = m.sub_path.as_deref().filter(|s| !s.is_empty())?;
            let plan = plans.iter().find(|p| p.name == m.name)?;
            Some((plan.path.clone(), sp.trim_matches('/').to_string()))
        })
        .collect()
}

/// A container's view of one volume mount.
pub struct Bind {
    pub source: String,
    pub destination: String,
    pub read_only: bool,
    /// A subPath mount: its source is made (and checked) when the container starts.
    pub sub_path: bool,
}

/// A container's volume mounts with their index in `volumeMounts` (for field paths): what
/// validation checks and translation binds, in the same order.
pub fn mounts(ctr: &Container) -> impl Iterator<Item = (usize, &VolumeMount)> {
    // A slice walk, as both callers had it: flattening the Option cost the generator 16 bytes.
    ctr.volume_mounts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
}

/// The bind entries of a container.
pub fn binds(ctr: &Container, plans: &[VolumePlan]) -> Vec<Bind> {
    let mut out = Vec::new();
    for (_, m) in mounts(ctr) {
        // Validation refused a mount of a volume the pod does not have; one without a plan is
        // a volume whose own error is already said (a claim not bound, say).
        let Some(plan) = plans.iter().find(|p| p.name == m.name) else {
            continue;
        };
        let mut source = plan.path.clone();
        let sub = m.sub_path.as_deref().filter(|s| !s.is_empty());
        if let Some(sp) = sub {
            source = concat(&[source.trim_end_matches('/'), "/", sp.trim_matches('/')]);
        }
        // The kubelet always mounts configMap, secret, downwardAPI and projected volumes read-only.
        let always_ro = matches!(
            plan.kind,
            VolumeKind::Files { .. }
                | VolumeKind::Claim {
                    read_only: true,
                    ..
                }
        );
        let mount = m.mount_path.trim_end_matches('/');
        out.push(Bind {
            source,
            destination: if mount.is_empty() {
                "/".into()
            } else {
                mount.to_string()
            },
            read_only: always_ro || m.read_only == Some(true),
            sub_path: sub.is_some(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names listed are the API's: each source, set alone, serializes under the name listed,
    /// and all of them set serialize as the whole list, in its order.
    #[test]
    fn source_names_are_the_serialized_ones() {
        let all: Volume = serde_json::from_value(serde_json::json!({
            "name": "v", "awsElasticBlockStore": {"volumeID": "x"}, "azureDisk": {"diskName": "d",
            "diskURI": "u"}, "azureFile": {"secretName": "s", "shareName": "s"}, "cephfs":
            {"monitors": []}, "cinder": {"volumeID": "x"}, "configMap": {}, "csi": {"driver": "d"},
            "downwardAPI": {}, "emptyDir": {}, "ephemeral": {}, "fc": {}, "flexVolume": {"driver":
            "d"}, "flocker": {}, "gcePersistentDisk": {"pdName": "p"}, "gitRepo": {"repository":
            "r"}, "glusterfs": {"endpoints": "e", "path": "p"}, "hostPath": {"path": "/"},
            "image": {}, "iscsi": {"iqn": "i", "lun": 0, "targetPortal": "t"}, "nfs": {"path": "/",
            "server": "s"}, "persistentVolumeClaim": {"claimName": "c"}, "photonPersistentDisk":
            {"pdID": "p"}, "portworxVolume": {"volumeID": "x"}, "projected": {}, "quobyte":
            {"registry": "r", "volume": "v"}, "rbd": {"image": "i", "monitors": []}, "scaleIO":
            {"gateway": "g", "secretRef": {}, "system": "s"}, "secret": {}, "storageos": {},
            "vsphereVolume": {"volumePath": "/"}
        }))
        .unwrap();
        let serialized = serde_json::to_value(&all).unwrap();
        let names: Vec<&str> = serialized
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|k| *k != "name")
            .collect();
        assert_eq!(source_keys(&all), names);
        assert_eq!(names.len(), 30);
        let only = |json| source_keys(&serde_json::from_value(json).unwrap());
        assert_eq!(
            only(serde_json::json!({"name": "v", "emptyDir": {}})),
            ["emptyDir"]
        );
        assert!(only(serde_json::json!({"name": "v"})).is_empty());
    }
}
