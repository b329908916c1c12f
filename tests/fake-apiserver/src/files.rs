//! Writing the files tests read: certificates, keys, kubeconfigs, the state file.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `data` to `path`, readable and writable by the owner only (keys, tokens, secrets).
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)
}

/// Writes a file anyone may read (certificates, the URL).
pub fn write_public(path: &Path, data: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, data)
}
