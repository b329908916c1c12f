//! The parsed-manifest cache: YAML manifests in the parsed form the fast JSON path reads, so a
//! `daemon-reload` with unchanged files skips the YAML parser (about two thirds of the
//! generator's work on a YAML pod).
//!
//! - **Content-addressed, verified byte for byte.** An entry is named by a 64-bit FNV-1a hash of
//!   the manifest's bytes and holds, under a header naming that hash, podunit's version, the
//!   entry format and both lengths, the manifest's own text and then its parsed form. The
//!   generator uses an entry only when the text in it is the file's, byte for byte: a changed
//!   file, a hash collision, another podunit or a torn write never matches, and the generator
//!   then parses the file itself, as it does when the cache is absent (at boot, before /var is
//!   mounted). (SHA-256 named the entries before: in software, on a CPU without SHA
//!   instructions, hashing a pod's manifest cost a fifth of what the generator does with it.)
//! - **Written by podunit-sync only** ([`refresh`]); the generator only reads it ([`Reader`]),
//!   into its output directory and nowhere else. The directory is 0700 and the entries 0600: a
//!   Secret in /etc/pods.d is cached with its values.
//! - **Trusted as the manifests are.** The generator uses an entry only when it, its directory
//!   and the directories above are owned by root and writable by nobody else, the rule
//!   /etc/pods.d is held to ([`super::discover::check_trusted`]): whoever could forge an entry
//!   could as well write a manifest. What an entry holds still goes through the same typed
//!   deserialization, validation and unit escaping as a file, and only documents with nothing to
//!   report are cached (a problem in a file is always found by parsing it again).
//! - **The same objects.** An entry holds the documents exactly as the YAML parser returned them
//!   (`serde_json::Value`, one compact JSON document a line, which serde_json reads back to the
//!   same values), and the fast path turns them into objects only when they are clean
//!   ([`super::fast`]): the result is what parsing the file gives.

use super::Object;
use super::discover;
use super::fast;
use crate::common::paths::Paths;
use std::collections::BTreeSet;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Host path of the cache (a cache: deleting it costs one slow reload, nothing else).
pub const DIR: &str = "/var/cache/podunit/manifests";

/// Bumped whenever what the parser returns for the same text could change within one version,
/// or the entry's layout changes.
const FORMAT: u32 = 2;

/// An entry larger than this is ignored (a manifest is at most 1 MiB; aliases can expand it).
const MAX_ENTRY_BYTES: u64 = 17 * discover::MAX_FILE_BYTES;

/// The generator's side: reads entries, never writes.
#[derive(Debug, Default)]
pub struct Reader {
    /// None: no cache, or one not to be trusted.
    dir: Option<PathBuf>,
}

impl Reader {
    /// No cache: every file is parsed.
    pub fn none() -> Reader {
        Reader::default()
    }

    /// The cache of `paths`, if it exists and only root can write it.
    pub fn open(paths: &Paths) -> Reader {
        let dir = paths.host(DIR);
        match discover::root_only_up_to(&paths.root, &dir) {
            Ok(()) => Reader { dir: Some(dir) },
            Err(_) => Reader::none(),
        }
    }

    /// The objects of the manifest `text`, if its entry is there, verified and clean.
    pub fn objects(&self, text: &str) -> Option<Vec<Object>> {
        let dir = self.dir.as_ref()?;
        let name = name(text);
        let entry = read_entry(&dir.join(&name))?;
        body(&entry, text, &name)?
            .lines()
            .map(fast::object)
            .collect()
    }
}

/// The objects an entry holds for manifest `text`, if it is this podunit's entry for that text.
pub fn entry_objects(entry: &str, text: &str) -> Option<Vec<Object>> {
    body(entry, text, &name(text))?
        .lines()
        .map(fast::object)
        .collect()
}

/// An entry's text, if it is a regular file only root can write, of a sane size.
fn read_entry(path: &Path) -> Option<String> {
    let f = std::fs::File::open(path).ok()?;
    let m = f.metadata().ok()?;
    if !m.is_file() || m.uid() != 0 || m.mode() & 0o022 != 0 || m.len() > MAX_ENTRY_BYTES {
        return None;
    }
    let mut s = String::with_capacity(m.len() as usize);
    f.take(MAX_ENTRY_BYTES).read_to_string(&mut s).ok()?;
    Some(s)
}

/// The documents of `entry` if it is the one this podunit writes for manifest `text` (whose
/// [`name`] is `name`): its header, then `text` itself, then the documents.
fn body<'a>(entry: &'a str, text: &str, name: &str) -> Option<&'a str> {
    let (head, rest) = entry.split_once('\n')?;
    let body = rest.strip_prefix(text)?;
    (head == header(name, text.len(), body.len())).then_some(body)
}

fn header(name: &str, text_len: usize, body_len: usize) -> String {
    format!(
        "podunit-parsed-manifest {FORMAT} podunit/{} fnv1a64:{name} text:{text_len} bytes:{body_len}",
        env!("CARGO_PKG_VERSION")
    )
}

/// The name of manifest `text`'s entry: its 64-bit FNV-1a hash in hex. Only a name: an entry is
/// used when the text it holds is `text` (see [`body`]), so a collision costs a parse, nothing else.
pub fn name(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The entry for manifest `text`: None unless every document is a clean Pod, ConfigMap or
/// Secret (what the generator would refuse or warn about is left to parsing the file).
pub fn entry(text: &str) -> Option<(String, String)> {
    let docs = super::documents::documents(text).ok()?;
    let mut body = String::new();
    for doc in docs.iter().filter(|d| !d.is_null()) {
        let line = serde_json::to_string(doc).ok()?;
        fast::object(&line)?;
        body.push_str(&line);
        body.push('\n');
    }
    if body.is_empty() {
        return None;
    }
    let name = name(text);
    let entry = format!("{}\n{text}{body}", header(&name, text.len(), body.len()));
    Some((name, entry))
}

/// What [`refresh`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Refreshed {
    pub written: usize,
    pub kept: usize,
    pub removed: usize,
}

/// podunit-sync's side: an entry for every trusted YAML manifest of `paths` that has none, and
/// none for files that are gone. JSON files need none (the fast path reads them as they are).
pub fn refresh(paths: &Paths) -> io::Result<Refreshed> {
    use crate::common::atomicfile;
    let dir = paths.host(DIR);
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let mut files = Vec::new();
    for (_, d) in paths.manifest_dirs() {
        for f in discover::list_dir(&d)? {
            if discover::check_trusted(&paths.root, &d, &f).is_ok() {
                files.push(f);
            }
        }
    }
    // Parsing is the work (once per changed file): on every core, as the generator does.
    let found = crate::common::parallel::map(&files, |f| {
        let text = super::read_limited(f).ok()?;
        if fast::json_texts(&text).is_some() {
            return None;
        }
        let hash = name(&text);
        if read_entry(&dir.join(&hash)).is_some_and(|e| body(&e, &text, &hash).is_some()) {
            return Some((hash, None));
        }
        entry(&text).map(|(hash, e)| (hash, Some(e)))
    });
    let mut done = Refreshed::default();
    let mut live = BTreeSet::new();
    for (hash, text) in found.into_iter().flatten() {
        if let Some(text) = text {
            // Not synced: an entry torn by a crash never matches its manifest (see the top of
            // this file) and is written again, so an fsync per entry would buy nothing.
            let opts = atomicfile::Options::new(0o600).without_sync();
            atomicfile::write(&dir.join(&hash), text.as_bytes(), opts)?;
            done.written += 1;
        } else if !live.contains(&hash) {
            done.kept += 1;
        }
        live.insert(hash);
    }
    for e in std::fs::read_dir(&dir)?.flatten() {
        if !live.contains(e.file_name().to_string_lossy().as_ref())
            && std::fs::remove_file(e.path()).is_ok()
        {
            done.removed += 1;
        }
    }
    Ok(done)
}

/// [`refresh`] for podunit-sync: what changed and what failed, as one log line (None: nothing).
pub fn refresh_message(paths: &Paths) -> Option<String> {
    match refresh(paths) {
        Ok(r) if r.written == 0 && r.removed == 0 => None,
        Ok(r) => Some(format!(
            "parsed-manifest cache: {} written, {} kept, {} removed",
            r.written, r.kept, r.removed
        )),
        Err(e) => Some(format!(
            "parsed-manifest cache {}: {e} (the generator parses every file)",
            paths.host(DIR).display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n    image: host\n    securityContext: {runAsUser: 0400}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata: {k: '1'}\n";

    #[test]
    fn an_entry_reads_back_as_the_file_parses() {
        let (_, text) = entry(POD).expect("clean");
        let body = body(&text, POD, &name(POD)).expect("own header");
        let cached: Vec<Object> = body.lines().map(|l| fast::object(l).unwrap()).collect();
        let (parsed, problems) = super::super::parse::parse(
            Path::new("t.yaml"),
            POD,
            super::super::parse::UnknownFields::Error,
        );
        assert!(problems.is_empty());
        assert_eq!(format!("{cached:?}"), format!("{parsed:?}"));
    }

    #[test]
    fn headers_bind_hash_version_and_length() {
        let (hash, text) = entry(POD).unwrap();
        assert_eq!(hash, name(POD));
        assert!(body(&text, POD, &name(POD)).is_some());
        assert!(body(&text, "other", &name("other")).is_none());
        // Another text under the same name (a collision): the text held is compared, not the name.
        let changed = POD.replacen("name: a", "name: b", 1);
        assert!(body(&text.replacen(POD, &changed, 1), POD, &name(POD)).is_none());
        let torn = &text[..text.len() - 2];
        assert!(body(torn, POD, &name(POD)).is_none());
        let other = text.replacen(env!("CARGO_PKG_VERSION"), "0.0.0-other", 1);
        assert!(body(&other, POD, &name(POD)).is_none());
    }

    #[test]
    fn only_clean_files_get_an_entry() {
        for bad in [
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: host, comand: [x]}]}\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, args: {x: 1}}]}\n",
            "apiVersion: v1\nkind: List\nitems: []\n",
            "apiVersion: v1\nkind: Pod\nkind: Pod\n",
            "- a\n",
            "",
        ] {
            assert!(entry(bad).is_none(), "{bad}");
        }
    }
}
