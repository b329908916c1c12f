//! Reading one file of a stored image as its merged root shows it, without mounting anything: the
//! generator looks up an image's `User` in the image's own `/etc/passwd` this way.
//!
//! The layers are podunit's own directories, but what is inside them came from an image: no
//! symlink is followed (a file that is a symlink, or lies under one, counts as absent, so an image
//! cannot make the generator read a host file), and no more than `max` bytes are read.

use super::ResolvedImage;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

/// What one layer says about a path.
enum InLayer {
    /// Not there: a lower layer decides.
    Absent,
    /// Deleted here (a whiteout), or not a plain file: the image has no such file.
    Hidden,
    File(std::path::PathBuf),
}

/// The content of `path` (absolute, as inside the image) in `image`, if it is a regular file of
/// at most `max` bytes reached without symlinks.
pub fn read_file(image: &ResolvedImage, path: &str, max: u64) -> Option<Vec<u8>> {
    let parts: Vec<&std::ffi::OsStr> = Path::new(path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(Some(n)),
            Component::RootDir => None,
            _ => Some(None),
        })
        .collect::<Option<_>>()?;
    if parts.is_empty() {
        return None;
    }
    for layer in image.layers.iter().rev() {
        match in_layer(layer, &parts) {
            InLayer::Absent => continue,
            InLayer::Hidden => return None,
            InLayer::File(p) => {
                let f = std::fs::File::open(&p).ok()?;
                let mut out = Vec::new();
                f.take(max + 1).read_to_end(&mut out).ok()?;
                return (out.len() as u64 <= max).then_some(out);
            }
        }
    }
    None
}

fn in_layer(layer: &Path, parts: &[&std::ffi::OsStr]) -> InLayer {
    let mut at = layer.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let Ok(m) = std::fs::symlink_metadata(&at) else {
            return InLayer::Absent;
        };
        let ft = m.file_type();
        // An overlay whiteout: a 0/0 character device.
        if ft.is_char_device() && m.rdev() == 0 {
            return InLayer::Hidden;
        }
        let last = i + 1 == parts.len();
        match (last, ft.is_file(), ft.is_dir()) {
            (true, true, _) => return InLayer::File(at),
            (false, _, true) => {}
            _ => return InLayer::Hidden,
        }
    }
    InLayer::Hidden
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Reference;
    use crate::image::manifest::ImageConfig;

    fn image(layers: Vec<std::path::PathBuf>) -> ResolvedImage {
        let d = crate::image::Digest::of(b"");
        ResolvedImage {
            reference: Reference::parse("busybox").unwrap(),
            digest: d.clone(),
            manifest: d.clone(),
            config_digest: d,
            config: ImageConfig::default(),
            layers,
        }
    }

    #[test]
    fn top_layer_wins_and_symlinks_are_not_followed() {
        let tmp = std::env::temp_dir().join(format!("podunit-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let (low, high) = (tmp.join("low"), tmp.join("high"));
        for d in [&low, &high] {
            std::fs::create_dir_all(d.join("etc")).unwrap();
        }
        std::fs::write(low.join("etc/passwd"), "low\n").unwrap();
        std::fs::write(low.join("etc/group"), "low\n").unwrap();
        std::fs::write(tmp.join("host-secret"), "secret\n").unwrap();
        let img = image(vec![low.clone(), high.clone()]);
        assert_eq!(read_file(&img, "/etc/passwd", 100).unwrap(), b"low\n");
        std::fs::write(high.join("etc/passwd"), "high\n").unwrap();
        assert_eq!(read_file(&img, "/etc/passwd", 100).unwrap(), b"high\n");
        // Bounded.
        assert_eq!(read_file(&img, "/etc/passwd", 2), None);
        // A symlink in the top layer hides the lower file and is never followed.
        std::os::unix::fs::symlink(tmp.join("host-secret"), high.join("etc/group")).unwrap();
        assert_eq!(read_file(&img, "/etc/group", 100), None);
        std::os::unix::fs::symlink(&tmp, high.join("up")).unwrap();
        assert_eq!(read_file(&img, "/up/host-secret", 100), None);
        assert_eq!(read_file(&img, "/../host-secret", 100), None);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
