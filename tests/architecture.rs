//! The layers docs/architecture.md states are the layers the code has: a folder of `src/` imports
//! only folders in rows below its own, so no two folders import each other, and inside a folder
//! the files import each other without a cycle (`mod.rs`, the folder's face, aside). A new
//! upward import fails here with the file and the path, before it settles in.
//!
//! What counts as an import: every `crate::<folder>` path in code (comments and doc links are
//! not dependencies), `use crate::{a, b}` groups, and `super::`/`crate::<folder>::` paths between
//! files of one folder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The rows of the "Layers" table, top first: each row's folders.
fn layers() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/architecture.md")).unwrap();
    let section = doc
        .split("\n## Layers")
        .nth(1)
        .expect("docs/architecture.md has a \"## Layers\" section");
    let section = section.split("\n## ").next().unwrap();
    let rows: Vec<Vec<String>> = section
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---") && !l.starts_with("| ---"))
        .skip(1) // the header
        .map(|l| {
            let cell = l.split('|').nth(2).unwrap_or_default();
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(|f| f.trim_end_matches('/').trim_end_matches(".rs").to_string())
                .collect()
        })
        .collect();
    assert!(
        rows.len() > 5 && rows.iter().all(|r| !r.is_empty()),
        "the Layers table names folders in `code` in its second column: {rows:?}"
    );
    rows
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments (line comments, doc comments, block comments).
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let (mut i, mut in_str, mut depth) = (0, false, 0);
    while i < b.len() {
        if depth > 0 {
            if b[i..].starts_with(b"*/") {
                depth -= 1;
                i += 2;
            } else if b[i..].starts_with(b"/*") {
                depth += 1;
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        if in_str {
            if b[i] == b'\\' {
                i += 2;
                continue;
            }
            if b[i] == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if b[i..].starts_with(b"/*") {
            depth = 1;
            i += 2;
            continue;
        }
        // A character literal of a quote is not the start of a string.
        if b[i..].starts_with(b"'\"'") {
            i += 3;
            continue;
        }
        // A raw string (`r"..."`, `r#"..."#`) ends only at its own quote and hashes.
        if b[i] == b'r' && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) == Some(&b'"') {
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let body = i + 2 + hashes;
                let end = b[body..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |p| body + p + close.len());
                out.push_str("\"\"");
                i = end;
                continue;
            }
        }
        if b[i] == b'"' {
            // String contents are dropped: a path spelled in a message is not an import.
            in_str = true;
            out.push('"');
            i += 1;
            continue;
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// `code` without its `#[cfg(test)] mod` blocks: a unit test that checks two parts of a folder
/// against each other imports both, and tests are not part of the structure they check.
fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_mod = trimmed.starts_with("mod ") || trimmed.starts_with("pub(crate) mod ");
        match (is_mod, trimmed.find('{')) {
            (true, Some(open)) => {
                let body = &trimmed[open..];
                let mut depth = 0;
                let mut end = body.len();
                for (i, c) in body.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &body[end..];
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first segments of `use crate::{a::x, b, c::{..}}`'s group, from just after the `{`.
fn group_heads(s: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                heads.push(s[start..i].trim().to_string());
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.push(s[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    heads
        .into_iter()
        .map(|h| ident_at(&h).to_string())
        .filter(|h| !h.is_empty())
        .collect()
}

/// Every `prefix::a::b` path of `code` as its segments after `prefix` (a group expands to each
/// of its first segments).
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let Some(tail) = rest.strip_prefix("::") else {
            continue;
        };
        if let Some(group) = tail.strip_prefix('{') {
            out.extend(group_heads(group).into_iter().map(|h| vec![h]));
            continue;
        }
        let mut segs = Vec::new();
        let mut t = tail;
        loop {
            let id = ident_at(t);
            if id.is_empty() {
                break;
            }
            segs.push(id.to_string());
            t = &t[id.len()..];
            match t.strip_prefix("::") {
                Some(n) if !n.starts_with('{') => t = n,
                Some(n) => {
                    let heads = group_heads(&n[1..]);
                    for h in heads {
                        let mut s = segs.clone();
                        s.push(h);
                        out.push(s);
                    }
                    segs.clear();
                    break;
                }
                None => break,
            }
        }
        if !segs.is_empty() {
            out.push(segs);
        }
    }
    out
}

struct Source {
    /// `src/`-relative, with `/`.
    rel: String,
    /// The folder (or file module) it belongs to: `status`, `logs`, `bin`.
    folder: String,
    /// Its module path inside the crate: `["status", "pod"]`.
    module: Vec<String>,
    code: String,
}

fn sources() -> Vec<Source> {
    let src = Path::new(ROOT).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            if rel == "lib.rs" {
                return None;
            }
            let mut module: Vec<String> = rel
                .trim_end_matches(".rs")
                .split('/')
                .map(String::from)
                .collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            Some(Source {
                folder: module[0].clone(),
                module,
                code: without_tests(&code(&std::fs::read_to_string(&p).unwrap())),
                rel,
            })
        })
        .collect()
}

#[test]
fn no_folder_imports_one_above_or_beside_it() {
    let rows = layers();
    let rank: BTreeMap<&str, usize> = rows
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.iter().map(move |f| (f.as_str(), i)))
        .collect();
    let sources = sources();
    let folders: BTreeSet<&str> = sources.iter().map(|s| s.folder.as_str()).collect();
    let mut wrong = Vec::new();
    for f in &folders {
        if !rank.contains_key(f) {
            wrong.push(format!(
                "src/{f} is in no row of docs/architecture.md's Layers table"
            ));
        }
    }
    for f in rank.keys() {
        if !folders.contains(f) {
            wrong.push(format!(
                "docs/architecture.md's Layers table names {f}, which src/ does not have"
            ));
        }
    }
    for s in &sources {
        let Some(&mine) = rank.get(s.folder.as_str()) else {
            continue;
        };
        let targets: BTreeSet<String> = imported_folders(&s.code).into_iter().collect();
        for t in targets {
            if t == s.folder {
                continue;
            }
            match rank.get(t.as_str()) {
                Some(&theirs) if theirs > mine => {}
                Some(&theirs) => wrong.push(format!(
                    "src/{} imports crate::{t}, which is {} {} in the layers",
                    s.rel,
                    if theirs == mine { "beside" } else { "above" },
                    s.folder
                )),
                None => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The file of `folder` a module path inside it names: `["pod", "x"]` -> `status/pod.rs`.
fn file_of<'a>(by_module: &BTreeMap<Vec<String>, &'a str>, path: &[String]) -> Option<&'a str> {
    (1..=path.len())
        .rev()
        .find_map(|n| by_module.get(&path[..n]).copied())
}

#[test]
fn no_cycle_between_the_files_of_a_folder() {
    let sources = sources();
    let by_module: BTreeMap<Vec<String>, &str> = sources
        .iter()
        .map(|s| (s.module.clone(), s.rel.as_str()))
        .collect();
    let face = |rel: &str| rel.ends_with("mod.rs") || !rel.contains('/');
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for s in sources.iter().filter(|s| !face(&s.rel)) {
        let dir = &s.module[..s.module.len() - 1];
        let mut named: Vec<Vec<String>> = paths_after(&s.code, "crate");
        for p in paths_after(&s.code, "super") {
            let mut full = dir.to_vec();
            full.extend(p);
            named.push(full);
        }
        for p in paths_after(&s.code, "self") {
            let mut full = s.module.clone();
            full.extend(p);
            named.push(full);
        }
        for p in named {
            if let Some(t) = file_of(&by_module, &p)
                && t != s.rel
                && !face(t)
                && Path::new(t).parent() == Path::new(&s.rel).parent()
            {
                edges.entry(s.rel.as_str()).or_default().insert(t);
            }
        }
    }
    // A depth-first search for a back edge, reporting the cycle it closes.
    fn visit<'a>(
        n: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        state: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
        cycles: &mut Vec<String>,
    ) {
        state.insert(n, 1);
        stack.push(n);
        for &m in edges.get(n).into_iter().flatten() {
            match state.get(m) {
                Some(1) => {
                    let from = stack.iter().position(|x| *x == m).unwrap();
                    let mut c: Vec<&str> = stack[from..].to_vec();
                    c.push(m);
                    cycles.push(c.join(" -> "));
                }
                Some(_) => {}
                None => visit(m, edges, state, stack, cycles),
            }
        }
        stack.pop();
        state.insert(n, 2);
    }
    let mut state = BTreeMap::new();
    let mut cycles = Vec::new();
    for &n in edges.keys() {
        if !state.contains_key(n) {
            visit(n, &edges, &mut state, &mut Vec::new(), &mut cycles);
        }
    }
    assert!(
        cycles.is_empty(),
        "files that import each other (break the cycle with a small module both import):\n{}",
        cycles.join("\n")
    );
}

/// The first segment of every `crate::` path of `code`.
fn imported_folders(code: &str) -> Vec<String> {
    paths_after(code, "crate")
        .into_iter()
        .map(|p| p[0].clone())
        .collect()
}

#[test]
fn the_reader_sees_through_comments_strings_and_groups() {
    let c = code(
        "use crate::{a::x, b};\n// crate::c\nlet s = \"crate::d\"; /* crate::e */ crate::f::g();\nlet r = r#\"crate::h \" crate::i\"#; crate::j::k();",
    );
    assert_eq!(imported_folders(&c), ["a", "b", "f", "j"]);
    assert_eq!(
        paths_after("use super::{x::{A, B}, y};", "super"),
        [vec!["x".to_string()], vec!["y".to_string()]]
    );
    assert_eq!(
        paths_after("use crate::status::{api, model::Observed};", "crate"),
        [
            vec!["status".to_string(), "api".to_string()],
            vec!["status".to_string(), "model".to_string()]
        ]
    );
    assert!(paths_after("notcrate::x", "crate").is_empty());
    let c = without_tests(
        "use crate::a;\n#[cfg(test)]\nmod tests {\n    fn f() { crate::b::c(); }\n}\nuse crate::d;",
    );
    assert_eq!(imported_folders(&c), ["a", "d"]);
}
