//! OCI images made by the tests: layers from files (or raw tar bytes), config, manifest, index.

use sha2::Digest as _;
use std::io::Write;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

pub fn digest(b: &[u8]) -> String {
    let h = sha2::Sha256::digest(b);
    let mut s = String::from("sha256:");
    for x in h {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Comp {
    None,
    Gzip,
    Zstd,
}

/// One layer: the tar, how it is compressed, and an optional lie about its size.
pub struct Layer {
    pub tar: Vec<u8>,
    pub comp: Comp,
    pub declared_size: Option<u64>,
}

/// A tar of entries built with the tar crate.
pub struct TarBuilder(tar::Builder<Vec<u8>>);

impl Default for TarBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl TarBuilder {
    pub fn new() -> Self {
        TarBuilder(tar::Builder::new(Vec::new()))
    }

    fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h.set_mtime(1_700_000_000);
        h
    }

    pub fn dir(&mut self, path: &str) -> &mut Self {
        let mut h = Self::header(tar::EntryType::Directory, 0, 0o755);
        self.0.append_data(&mut h, path, &[][..]).unwrap();
        self
    }

    pub fn file(&mut self, path: &str, data: &[u8], mode: u32) -> &mut Self {
        let mut h = Self::header(tar::EntryType::Regular, data.len() as u64, mode);
        self.0.append_data(&mut h, path, data).unwrap();
        self
    }

    /// A device node (`b'3'` character, `b'4'` block) as a hostile image would ship it.
    pub fn device(&mut self, path: &str, kind: u8, major: u32, minor: u32, mode: u32) -> &mut Self {
        let mut h = Self::header(tar::EntryType::new(kind), 0, mode);
        h.set_device_major(major).unwrap();
        h.set_device_minor(minor).unwrap();
        self.0.append_data(&mut h, path, &[][..]).unwrap();
        self
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        let mut h = Self::header(tar::EntryType::Symlink, 0, 0o777);
        self.0.append_link(&mut h, path, target).unwrap();
        self
    }

    pub fn finish(&mut self) -> Vec<u8> {
        let b = std::mem::replace(&mut self.0, tar::Builder::new(Vec::new()));
        b.into_inner().unwrap()
    }
}

pub fn compress(tar: &[u8], c: Comp) -> Vec<u8> {
    match c {
        Comp::None => tar.to_vec(),
        Comp::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(tar).unwrap();
            e.finish().unwrap()
        }
        Comp::Zstd => {
            ruzstd::encoding::compress_to_vec(tar, ruzstd::encoding::CompressionLevel::Fastest)
        }
    }
}

fn media(c: Comp) -> &'static str {
    match c {
        Comp::None => "application/vnd.oci.image.layer.v1.tar",
        Comp::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
        Comp::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
    }
}

/// Everything to push for one tag.
pub struct Image {
    /// Layers and configs.
    pub blobs: Vec<Vec<u8>>,
    /// Platform manifests of an index (pushed by digest first).
    pub children: Vec<(String, Vec<u8>)>,
    pub media_type: String,
    pub manifest: Vec<u8>,
    pub layer_digests: Vec<String>,
    pub config_digest: String,
}

impl Image {
    pub fn digest(&self) -> String {
        digest(&self.manifest)
    }
}

/// A single-platform OCI image. `config` is the image config's `config` object.
pub fn image(arch: &str, layers: &[Layer], config: serde_json::Value) -> Image {
    let mut blobs = Vec::new();
    let mut descs = Vec::new();
    let mut diff_ids = Vec::new();
    let mut layer_digests = Vec::new();
    for l in layers {
        let blob = compress(&l.tar, l.comp);
        diff_ids.push(digest(&l.tar));
        layer_digests.push(digest(&blob));
        descs.push(serde_json::json!({
            "mediaType": media(l.comp),
            "digest": digest(&blob),
            "size": l.declared_size.unwrap_or(blob.len() as u64),
        }));
        blobs.push(blob);
    }
    let cfg = serde_json::to_vec(&serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap();
    let config_digest = digest(&cfg);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": cfg.len()},
        "layers": descs,
    }))
    .unwrap();
    blobs.push(cfg);
    Image {
        blobs,
        children: Vec::new(),
        media_type: OCI_MANIFEST.into(),
        manifest,
        layer_digests,
        config_digest,
    }
}

/// An OCI index of single-platform images, as (platform architecture, variant, image).
pub fn index(entries: Vec<(&str, Option<&str>, Image)>) -> Image {
    let mut blobs = Vec::new();
    let mut children = Vec::new();
    let mut descs = Vec::new();
    for (arch, variant, img) in entries {
        let mut platform = serde_json::json!({"architecture": arch, "os": "linux"});
        if let Some(v) = variant {
            platform["variant"] = v.into();
        }
        descs.push(serde_json::json!({"mediaType": img.media_type, "digest": img.digest(), "size": img.manifest.len(), "platform": platform}));
        blobs.extend(img.blobs);
        children.push((img.media_type, img.manifest));
    }
    let manifest = serde_json::to_vec(
        &serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": descs}),
    )
    .unwrap();
    Image {
        blobs,
        children,
        media_type: OCI_INDEX.into(),
        manifest,
        layer_digests: Vec::new(),
        config_digest: String::new(),
    }
}

/// busybox from Debian's busybox-static: /bin/busybox, the usual applet links, /etc/passwd.
pub fn busybox_layer() -> Vec<u8> {
    let bin = std::fs::read("/bin/busybox").expect("/bin/busybox (Debian package busybox-static)");
    let mut t = TarBuilder::new();
    t.dir("bin/").file("bin/busybox", &bin, 0o755);
    for a in [
        "sh", "echo", "cat", "ls", "sleep", "env", "id", "wget", "nc",
    ] {
        t.symlink(&format!("bin/{a}"), "busybox");
    }
    t.dir("etc/")
        .file(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n",
            0o644,
        )
        .file("etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)
        .dir("tmp/");
    t.finish()
}

/// `busybox_layer` as a one-layer image for this host, `Cmd ["sh"]` as the real one.
pub fn busybox_image(arch: &str) -> Image {
    image(
        arch,
        &[Layer {
            tar: busybox_layer(),
            comp: Comp::Gzip,
            declared_size: None,
        }],
        serde_json::json!({"Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["sh"]}),
    )
}
