//! OCI and Docker v2 manifests, indexes and image configs: the JSON a registry serves, parsed with
//! size bounds (registry content is hostile input).

use super::digest::Digest;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";

/// Every manifest type we accept, in the order of the `Accept` header.
pub const ACCEPT: &[&str] = &[OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST];

/// Manifests and indexes larger than this are refused (containerd: 8 MiB for manifests).
pub const MANIFEST_MAX: u64 = 4 << 20;
/// Image configs larger than this are refused.
pub const CONFIG_MAX: u64 = 8 << 20;
/// Layers in one image, at most (overlayfs stacks 500 lower dirs at most).
pub const LAYERS_MAX: usize = 128;

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// What a manifest request returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Manifest {
    /// OCI image index or Docker manifest list.
    Index(Vec<Descriptor>),
    /// One image: its config and layers (lowest first).
    Image {
        config: Descriptor,
        layers: Vec<Descriptor>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    schema_version: Option<u32>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
}

impl Manifest {
    /// Parses a manifest body. `content_type` is the response's (may be empty); the body's own
    /// `mediaType` wins when present, as containerd does.
    pub fn parse(body: &[u8], content_type: &str) -> Result<Manifest, String> {
        if body.len() as u64 > MANIFEST_MAX {
            return Err(format!("manifest is larger than {MANIFEST_MAX} bytes"));
        }
        let raw: Raw = serde_json::from_slice(body).map_err(|e| format!("manifest: {e}"))?;
        if raw.schema_version != Some(2) {
            return Err(format!(
                "manifest schemaVersion {:?} is not supported (only 2; Docker schema 1 is deprecated)",
                raw.schema_version
            ));
        }
        let ct = content_type.split(';').next().unwrap_or("").trim();
        let mt = raw.media_type.as_deref().unwrap_or(ct);
        let is_index = match mt {
            OCI_INDEX | DOCKER_LIST => true,
            OCI_MANIFEST | DOCKER_MANIFEST => false,
            // An OCI manifest may omit mediaType: tell by shape.
            "" | "application/json" => raw.manifests.is_some(),
            other => return Err(format!("manifest media type {other:?} is not supported")),
        };
        if is_index {
            let m = raw.manifests.ok_or("index has no manifests")?;
            if m.len() > 1024 {
                return Err("index lists more than 1024 manifests".into());
            }
            return Ok(Manifest::Index(m));
        }
        let config = raw.config.ok_or("manifest has no config")?;
        if !matches!(config.media_type.as_str(), OCI_CONFIG | DOCKER_CONFIG | "") {
            return Err(format!(
                "config media type {:?} is not an image config (an artifact, not an image?)",
                config.media_type
            ));
        }
        if config.size > CONFIG_MAX {
            return Err(format!("config is larger than {CONFIG_MAX} bytes"));
        }
        let layers = raw.layers.unwrap_or_default();
        if layers.len() > LAYERS_MAX {
            return Err(format!("image has more than {LAYERS_MAX} layers"));
        }
        for l in &layers {
            Compression::of(&l.media_type)?;
        }
        Ok(Manifest::Image { config, layers })
    }
}

/// How a layer blob is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn of(media_type: &str) -> Result<Compression, String> {
        Ok(match media_type {
            "application/vnd.oci.image.layer.v1.tar" => Compression::None,
            "application/vnd.oci.image.layer.v1.tar+gzip"
            | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Compression::Gzip,
            "application/vnd.oci.image.layer.v1.tar+zstd" => Compression::Zstd,
            m if m.contains("nondistributable") || m.contains("foreign") => {
                return Err(format!(
                    "layer media type {m:?}: foreign layers are not supported"
                ));
            }
            m => return Err(format!("layer media type {m:?} is not supported")),
        })
    }
}

/// The image config: what the image says about how to run it, and its layers' uncompressed digests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ImageConfig {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(default)]
    pub config: RunConfig,
    pub rootfs: RootFs,
}

/// The `config` object (OCI image-spec "Properties"). Names as in the JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
pub struct RunConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_map"
    )]
    pub exposed_ports: BTreeMap<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty", deserialize_with = "null_vec")]
    pub env: Vec<String>,
    /// `None` and `Some([])` differ: an empty Entrypoint was set explicitly.
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_map"
    )]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_map"
    )]
    pub volumes: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RootFs {
    #[serde(rename = "type")]
    pub kind: String,
    pub diff_ids: Vec<Digest>,
}

// Docker writes `null` for empty maps and lists.
fn null_map<'de, D, V>(d: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Deserialize<'de>,
{
    Ok(Option::<BTreeMap<String, V>>::deserialize(d)?.unwrap_or_default())
}

fn null_vec<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

impl ImageConfig {
    pub fn parse(body: &[u8]) -> Result<ImageConfig, String> {
        if body.len() as u64 > CONFIG_MAX {
            return Err(format!("image config is larger than {CONFIG_MAX} bytes"));
        }
        let c: ImageConfig =
            serde_json::from_slice(body).map_err(|e| format!("image config: {e}"))?;
        if c.rootfs.kind != "layers" {
            return Err(format!(
                "image config rootfs.type {:?} is not \"layers\"",
                c.rootfs.kind
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parses_index_and_manifest() {
        let idx = format!(
            r#"{{"schemaVersion":2,"mediaType":"{DOCKER_LIST}","manifests":[{{"mediaType":"{DOCKER_MANIFEST}","digest":"{D}","size":7,"platform":{{"architecture":"arm","os":"linux","variant":"v7"}}}}]}}"#
        );
        let Manifest::Index(m) = Manifest::parse(idx.as_bytes(), "").unwrap() else {
            panic!()
        };
        assert_eq!(
            m[0].platform.as_ref().unwrap().variant.as_deref(),
            Some("v7")
        );
        let man = format!(
            r#"{{"schemaVersion":2,"config":{{"mediaType":"{OCI_CONFIG}","digest":"{D}","size":2}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+zstd","digest":"{D}","size":3}}]}}"#
        );
        assert!(matches!(
            Manifest::parse(man.as_bytes(), OCI_MANIFEST).unwrap(),
            Manifest::Image { ref layers, .. } if layers.len() == 1
        ));
        assert!(Manifest::parse(br#"{"schemaVersion":1,"fsLayers":[]}"#, "").is_err());
        let bad_layer = man.replace("tar+zstd", "tar+lz4");
        assert!(Manifest::parse(bad_layer.as_bytes(), "").is_err());
        assert!(Manifest::parse(&vec![b' '; (MANIFEST_MAX + 1) as usize], "").is_err());
    }

    #[test]
    fn parses_docker_config_with_nulls() {
        let c = format!(
            r#"{{"architecture":"amd64","os":"linux","config":{{"User":"nobody","Env":null,"Cmd":["sh"],"ExposedPorts":{{"80/tcp":{{}}}},"Labels":null,"WorkingDir":"/srv"}},"rootfs":{{"type":"layers","diff_ids":["{D}"]}}}}"#
        );
        let c = ImageConfig::parse(c.as_bytes()).unwrap();
        assert_eq!(c.config.user.as_deref(), Some("nobody"));
        assert_eq!(c.config.cmd, Some(vec!["sh".to_string()]));
        assert_eq!(c.config.entrypoint, None);
        assert!(c.config.exposed_ports.contains_key("80/tcp"));
        assert_eq!(c.rootfs.diff_ids.len(), 1);
    }
}
