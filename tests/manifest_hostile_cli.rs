//! A corpus of bad inputs, each with the error it must get from `podunit check`, run as
//! a process on a file of its own. The inputs are made here rather than stored: some are large,
//! some are not valid UTF-8.

use std::path::PathBuf;
use std::process::Command;

/// A directory of its own for one input, removed when dropped: the tests run in parallel and
/// leave nothing in the temporary directory.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("podunit-hostile-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `podunit check FILE`: (exit code, everything it printed).
fn check(name: &str, content: &[u8]) -> (i32, String) {
    let dir = Scratch::new();
    let f = dir.0.join(name);
    std::fs::write(&f, content).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_podunit"))
        .arg("check")
        .arg(&f)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (
        o.status.code().unwrap_or(-1),
        text.replace(&format!("{}/", dir.0.display()), ""),
    )
}

fn pod(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

const C: &str = "  containers:\n  - name: c\n    image: host\n    command: [/bin/true]\n";

#[track_caller]
fn refused(name: &str, content: impl AsRef<[u8]>, expected: &[&str]) {
    let (code, text) = check(name, content.as_ref());
    assert_eq!(code, 1, "{name} must be refused:\n{text}");
    for e in expected {
        assert!(text.contains(e), "{name}: expected {e:?} in:\n{text}");
    }
}

#[test]
fn malformed_and_oversized_files() {
    refused(
        "malformed.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x\n",
        &["malformed.yaml: not valid YAML or JSON"],
    );
    let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
    for (prev, cur) in "abcdefgh".chars().zip("bcdefghi".chars()) {
        bomb.push_str(&format!(
            "{cur}: &{cur} [{}]\n",
            vec![format!("*{prev}"); 10].join(",")
        ));
    }
    refused(
        "bomb.yaml",
        &bomb,
        &["bomb.yaml: not valid YAML or JSON: alias replay limit exceeded"],
    );
    let deep = format!("a: {}{}\n", "[".repeat(500), "]".repeat(500));
    refused(
        "deep.yaml",
        &deep,
        &["deep.yaml: not valid YAML or JSON: recursion limit exceeded"],
    );
    let big = format!("{}# {}\n", pod("big", C), "x".repeat(1024 * 1024));
    refused(
        "big.yaml",
        &big,
        &["big.yaml: file is larger than 1048576 bytes"],
    );
    refused(
        "dup.yaml",
        "apiVersion: v1\nkind: Pod\nkind: Pod\n",
        &["dup.yaml: not valid YAML or JSON", "duplicate"],
    );
    let mut utf8 = pod("bad", C).into_bytes();
    utf8.extend_from_slice(b"# \xff\xfe\n");
    refused("utf8.yaml", &utf8, &["utf8.yaml: file is not valid UTF-8"]);
    refused(
        "nul.yaml",
        format!("{}\0", pod("nul", C)),
        &["nul.yaml: file contains a NUL byte"],
    );
    refused(
        "scalar.yaml",
        "just a string\n",
        &["scalar.yaml: document is not a mapping"],
    );
}

#[test]
fn wrong_types_and_unknown_fields() {
    refused(
        "types.yaml",
        pod(
            "types",
            "  containers:\n  - name: c\n    image: host\n    command: /bin/true\n",
        ),
        &[
            "types.yaml: default/types: spec.containers[0].command: Invalid value: \"/bin/true\": must be a list",
        ],
    );
    refused(
        "grace.yaml",
        pod(
            "grace",
            &format!("  terminationGracePeriodSeconds: soon\n{C}"),
        ),
        &[
            "grace.yaml: default/grace: spec.terminationGracePeriodSeconds: Invalid value: \"soon\": must be an integer",
        ],
    );
    refused(
        "typo.yaml",
        pod(
            "typo",
            "  containers:\n  - name: c\n    image: host\n    comand: [/bin/true]\n",
        ),
        &["typo.yaml: default/typo: spec.containers[0].comand: unknown field"],
    );
}

#[test]
fn names_that_are_not_dns_1123() {
    for (file, name) in [
        ("dotdot.yaml", "\"../etc\""),
        ("slash.yaml", "a/b"),
        ("underscore.yaml", "a_b"),
        ("upper.yaml", "Web"),
        ("newline.yaml", "\"a\\nb\""),
    ] {
        refused(
            file,
            pod(name, C),
            &[
                &format!("{file}: "),
                "metadata.name: ",
                "is not a DNS-1123 subdomain",
            ],
        );
    }
    refused(
        "long.yaml",
        pod(&"a".repeat(254), C),
        &["metadata.name: ", "is not a DNS-1123 subdomain"],
    );
    refused(
        "ns.yaml",
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: a, namespace: \"../x\"}}\nspec:\n{C}"
        ),
        &["metadata.namespace: \"../x\" is not a DNS-1123 label"],
    );
    refused(
        "ctr.yaml",
        pod(
            "ctr",
            "  containers:\n  - {name: \"c/../x\", image: host, command: [/bin/true]}\n",
        ),
        &["spec.containers[0].name: \"c/../x\" is not a DNS-1123 label"],
    );
}

#[test]
fn a_control_character_in_a_name_never_reaches_a_message_raw() {
    let (code, text) = check(
        "forge.yaml",
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: \"x\\npodunit: all good\\u001b[2J\", namespace: \"n\\r\"}\nspec:\n  containers: [{name: c, image: host, command: [/bin/true]}]\n",
    );
    assert_eq!(code, 1, "{text}");
    for line in text.lines() {
        assert!(
            line.starts_with("forge.yaml: ")
                || line.starts_with("note: forge.yaml is not in a manifest directory")
                || line.contains("pod(s) ok"),
            "a line the manifest forged: {line:?} in:\n{text}"
        );
        assert!(!line.contains(char::is_control), "{line:?}");
    }
    assert!(
        text.contains("forge.yaml: n\\r/x\\npodunit: all good\\x1b[2J: metadata.name: "),
        "{text}"
    );
}

#[test]
fn a_uid_that_would_name_another_directory() {
    // (An empty uid is replaced by one derived from the file, as for every static pod.)
    for uid in ["../../..", ".", "a/b", "x y"] {
        refused(
            "uid.yaml",
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: a, uid: {uid:?}}}\nspec:\n{C}"),
            &["uid.yaml: default/a: metadata.uid: ", "is not a UID"],
        );
    }
}

#[test]
fn volumes_and_paths_that_would_escape() {
    let spec = "  containers:\n  - name: c\n    image: host\n    command: [/bin/true]\n    volumeMounts:\n    - {name: v, mountPath: relative/path}\n    - {name: v, mountPath: /a/../etc}\n    - {name: v, mountPath: /x, subPath: ../../etc}\n    - {name: v, mountPath: /y, subPath: /etc}\n    - {name: \"..\", mountPath: /z}\n  volumes:\n  - {name: v, emptyDir: {}}\n  - {name: \"..\", emptyDir: {}}\n  - {name: h, hostPath: {path: /srv/../etc}}\n  - {name: r, hostPath: {path: relative}}\n  - {name: s, secret: {secretName: s, items: [{key: k, path: ../../escape}]}}\n";
    refused(
        "paths.yaml",
        pod("paths", spec),
        &[
            "spec.containers[0].volumeMounts[0].mountPath: \"relative/path\" must be an absolute path",
            "spec.containers[0].volumeMounts[1].mountPath: \"/a/../etc\" must not contain '..'",
            "spec.containers[0].volumeMounts[2].subPath: \"../../etc\" must be a relative path without '..'",
            "spec.containers[0].volumeMounts[3].subPath: \"/etc\" must be a relative path without '..'",
            "spec.volumes[1].name: \"..\" is not a DNS-1123 label",
            "spec.volumes[2].hostPath.path: must be an absolute path without '..'",
            "spec.volumes[3].hostPath.path: must be an absolute path without '..'",
            "spec.volumes[4].secret.items[0].path: \"../../escape\" must be a relative path without '..'",
        ],
    );
}

#[test]
fn environment_names_and_quantities() {
    let spec = "  containers:\n  - name: c\n    image: host\n    command: [/bin/true]\n    env:\n    - {name: \"A=B\", value: x}\n    - {name: \"A\\nB\", value: x}\n    - {name: \"\", value: x}\n    resources:\n      limits: {cpu: \"1e999\", memory: \"-5Mi\"}\n      requests: {memory: 12XB}\n";
    refused(
        "env.yaml",
        pod("env", spec),
        &[
            "spec.containers[0].env[0].name: \"A=B\" is not a valid environment variable name",
            "spec.containers[0].env[1].name: \"A\\nB\" is not a valid environment variable name",
            "spec.containers[0].env[2].name: \"\" is not a valid environment variable name",
            "spec.containers[0].resources.limits[\"cpu\"]: \"1e999\" is not a valid quantity",
            "spec.containers[0].resources.limits[\"memory\"]: \"-5Mi\" is not a valid quantity",
            "spec.containers[0].resources.requests[\"memory\"]: \"12XB\" is not a valid quantity",
        ],
    );
}

/// `n` minimal pods as one v1/List in flow style (about 115 bytes a pod).
fn many_pods(n: usize) -> String {
    let items: Vec<String> = (0..n)
        .map(|i| format!("{{apiVersion: v1,kind: Pod,metadata: {{name: p{i}}},spec: {{containers: [{{name: c,image: host,command: [/bin/true]}}]}}}}"))
        .collect();
    format!(
        "{{apiVersion: v1, kind: List, items: [{}]}}\n",
        items.join(",")
    )
}

#[test]
fn ten_thousand_pods_in_one_file() {
    // 10 000 pods do not fit in the 1 MiB a manifest file may have: refused whole, unparsed.
    let text = many_pods(10_000);
    assert!(text.len() > 1024 * 1024);
    refused(
        "many.yaml",
        &text,
        &[
            "many.yaml: file is larger than 1048576 bytes",
            "0 pod(s) ok, 1 error(s)",
        ],
    );
    // What fits is read in full: every pod counts.
    let text = many_pods(8_500);
    assert!(text.len() < 1024 * 1024, "{}", text.len());
    let (code, out) = check("nine.yaml", text.as_bytes());
    assert_eq!(code, 0, "{}", &out[..out.len().min(2000)]);
    assert!(out.contains("8500 pod(s) ok, 0 error(s)"), "{out}");
}
