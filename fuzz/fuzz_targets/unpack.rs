//! Layer tarballs: any bytes, applied as a layer, never panic or hang, and never create, change or
//! remove anything outside the layer's directory: after each run the sandbox holds exactly the
//! layer and an untouched sibling, and no file appeared beside the sandbox. Run as root (layers
//! make device nodes and set owners), as the store does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podunit::image::unpack::Unpacker;
use podunit::image::unpack::bounds::{Bounded, Unbounded};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

static RUN: AtomicU64 = AtomicU64::new(0);

fn sandbox() -> PathBuf {
    std::env::temp_dir().join(format!("podunit-fuzz-unpack-{}", std::process::id()))
}

fuzz_target!(|data: &[u8]| {
    let base = sandbox().join(RUN.fetch_add(1, Ordering::Relaxed).to_string());
    let layer = base.join("layer");
    let sibling = base.join("sibling");
    std::fs::create_dir_all(&layer).unwrap();
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(sibling.join("canary"), b"untouched").unwrap();
    if let Ok(mut u) = Unpacker::new(&layer) {
        // Through the bounds a pull applies (header sizes, data after the end marker).
        let mut tar = Bounded::new(data, Unbounded);
        if let Err(e) = u.apply(&mut tar) {
            // Every refusal can be shown, and is short whatever the input.
            assert!(e.to_string().len() < 4096, "a message of {} bytes", e.to_string().len());
        }
        let _ = std::io::copy(&mut tar, &mut std::io::sink());
    }
    let mut names: Vec<_> = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["layer", "sibling"], "an entry was written beside the layer");
    let sib: Vec<_> = std::fs::read_dir(&sibling).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(sib, ["canary"], "an entry was written into the sibling");
    assert_eq!(std::fs::read(sibling.join("canary")).unwrap(), b"untouched");
    let top: Vec<_> = std::fs::read_dir(sandbox()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(top.len(), 1, "an entry was written beside the sandbox");
    std::fs::remove_dir_all(&base).unwrap();
});
