//! Round trips of `podunit::escape` through the real systemd: hostile strings are encoded, written
//! into unit files, and what systemd parsed must equal the input byte for byte.
//!
//! Two real parsers are used:
//! - `systemd --test --system --unit=all.target` (PID 1's binary in test mode, run unprivileged:
//!   as root it exits 1 without a word) with `SYSTEMD_UNIT_PATH=<dir>:` loads our units with the
//!   same code as at boot and dumps them. The dump format (systemd 252), which the comparisons
//!   below follow:
//!   - `\t\t\tCommand Line: ...`: argv as stored, *before* exec-time `$` expansion, each word
//!     shell-quoted by `quote_command_line()`: bare when it has no special character, else in `"`
//!     with `\\ \" \` \$` and C escapes (`\n`, `\t`, octal `\NNN` for other control characters).
//!     So `$$` shows as `"\$\$"`. Specifiers (`%%`) are already expanded.
//!   - `\t\tEnvironment: NAME=value` and `\t\tLogExtraFields: NAME=value`: after unquoting,
//!     unescaping and specifier expansion, printed raw (a newline in a value is a raw newline). The
//!     expected block of lines is compared as a whole; it is ambiguous only if a value itself
//!     contains "\n\t\tEnvironment: ", which could hide a split into two entries.
//!   - `\t\tDescription: `, `\t\tWorkingDirectory: `, `\t\tBindPaths: SRC:DST:rbind`: raw.
//!
//!   Any warning systemd prints about one of our files fails the test.
//! - libsystemd-shared (the library PID 1 itself links) for the two parsers that run only when a
//!   unit starts: `replace_env_argv()` (exec-time `${NAME}`/`$$` expansion of the stored argv)
//!   and `load_env_file()` (`EnvironmentFile=`).
//!
//! Every case is also checked against `podunit::escape::parse`, the pure reimplementation used for
//! fuzzing, so that one is proven against systemd too.
//!
//! Cases are generated with proptest but run in batches: one `systemd --test` per batch of
//! hundreds of units and lines, since a run costs about half a second.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use podunit::escape::{self, Arg, EscapeError, Piece, parse};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

const BATCHES: usize = 3;
const EXEC_UNITS: usize = 4;
const EXEC_PER_UNIT: usize = 100;
const ENV_UNITS: usize = 4;
const ENV_PER_UNIT: usize = 100;
const SMALL_UNITS: usize = 150;

// ---------------------------------------------------------------------------------------------
// Hostile strings

const NASTY: &[&str] = &[
    "\"",
    "\\",
    "\n",
    "\t",
    "\r",
    "\r\n",
    "%",
    "%n",
    "%%",
    "%i",
    "$",
    "$$",
    "${X}",
    "$X",
    "$(X)",
    "${",
    "}",
    ";",
    " ; ",
    "\\;",
    "-",
    "@",
    ":",
    "+",
    "!",
    "!!",
    "#",
    "'",
    "`",
    "=",
    " ",
    "  ",
    "*",
    "?",
    "[",
    "~",
    "&&",
    "|",
    ">",
    "<",
    "é",
    "日本語",
    "🦀",
    "\u{85}",
    "\u{2028}",
    "\u{2029}",
    "\u{feff}",
    "\u{fffd}",
    "\u{1}",
    "\u{1b}",
    "\u{7f}",
    "\u{9f}",
    "\\x41",
    "\\x00",
    "\\n",
    "\\\n",
    "\\u00e9",
    "\n\t\tEnvironment: ",
    "[Service]",
    "\nExecStart=/bin/sh",
    "ExecStart=",
];

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(NASTY).prop_map(str::to_string),
        2 => "[ -~]{1,8}",
        1 => any::<char>().prop_map(|c| c.to_string().replace('\0', "")),
    ]
}

/// Any string without NUL (which every encoder refuses), biased towards what breaks quoting.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        20 => prop::collection::vec(token(), 0..10).prop_map(|v| v.concat()),
        2 => any::<String>(),
        1 => ("[ -~]", 1000..5000usize).prop_map(|(c, n)| c.repeat(n)),
    ]
    .prop_map(|s| s.replace('\0', ""))
}

fn env_name() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_]{0,12}"
}

/// Absolute, normalized paths with hostile characters inside components.
fn abs_path() -> impl Strategy<Value = String> {
    let component = prop_oneof![
        3 => "[a-z0-9._-]{1,8}",
        2 => prop::collection::vec(token(), 1..4).prop_map(|v| v.concat().replace('/', "_")),
    ]
    .prop_filter("not . or ..", |c| !c.is_empty() && c != "." && c != "..");
    prop::collection::vec(component, 0..5).prop_map(|cs| format!("/{}", cs.join("/")))
}

fn executable() -> impl Strategy<Value = String> {
    prop_oneof![
        // What systemd accepts as an executable, with the characters that are still special.
        4 => prop::collection::vec("[a-zA-Z0-9 ._%:@+!=~;#*éß日-]{1,10}", 1..4)
            .prop_map(|cs| format!("/{}", cs.join("/")))
            .prop_filter("not . or ..", |p| !p.split('/').any(|c| c == "." || c == "..")),
        1 => "[a-z%][a-z0-9_.%-]{0,10}",
        1 => abs_path(),
        1 => hostile(),
    ]
}

fn arg() -> impl Strategy<Value = Arg> {
    let piece = prop_oneof![
        4 => hostile().prop_map(Piece::Text),
        1 => prop::sample::select(&["A", "B_1", "_c", "LONG_NAME_9"][..])
            .prop_map(|n| Piece::Var(n.to_string())),
    ];
    prop::collection::vec(piece, 0..4).prop_map(Arg)
}

fn argv() -> impl Strategy<Value = Vec<Arg>> {
    (executable(), prop::collection::vec(arg(), 0..6)).prop_map(|(exe, mut args)| {
        args.insert(0, Arg::text(exe));
        args
    })
}

fn sample<S: Strategy>(runner: &mut TestRunner, s: &S, n: usize) -> Vec<S::Value> {
    (0..n)
        .map(|_| s.new_tree(runner).expect("strategy").current())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Running systemd

fn systemd_binary() -> PathBuf {
    ["/usr/lib/systemd/systemd", "/lib/systemd/systemd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("systemd is not installed (need /usr/lib/systemd/systemd)")
}

fn running_as_root() -> bool {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .is_some_and(|euid| euid == "0")
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "podunit-escape-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        fs::create_dir_all(&dir).unwrap();
        // systemd runs as nobody: the units must be readable by everyone.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        TempDir(dir)
    }

    fn write(&self, name: &str, content: &str) {
        let p = self.0.join(name);
        fs::write(&p, content).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for inspection", self.0.display());
            return;
        }
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Runs `systemd --test` on `unit` from `dir`; returns the dump and the messages.
fn systemd_test_raw(dir: &Path, unit: &str) -> (String, String) {
    let systemd = systemd_binary();
    let mut cmd = if running_as_root() {
        // systemd refuses test mode as root; drop to nobody.
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&systemd);
        c
    } else {
        Command::new(&systemd)
    };
    cmd.args(["--test", "--system", &format!("--unit={unit}")])
        .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.display()))
        .env("SYSTEMD_LOG_COLOR", "0");
    let out = cmd.output().expect("running systemd --test");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "systemd --test failed: {}\n{stderr}",
        out.status
    );
    (
        String::from_utf8(out.stdout).expect("dump is UTF-8"),
        stderr,
    )
}

/// [`systemd_test_raw`], failing on any warning that names one of our files.
fn systemd_test(dir: &Path, unit: &str) -> String {
    let (dump, stderr) = systemd_test_raw(dir, unit);
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(&*dir.to_string_lossy()))
        .collect();
    assert!(
        ours.is_empty(),
        "systemd warned about our units:\n{}",
        ours.join("\n")
    );
    dump
}

/// The dump of one unit, up to the next unit; the unit must have loaded.
fn unit_section<'a>(dump: &'a str, unit: &str) -> &'a str {
    let section = any_unit_section(dump, unit);
    assert!(
        section.contains("\t\tUnit Load State: loaded\n"),
        "{unit} did not load:\n{section}"
    );
    section
}

fn any_unit_section<'a>(dump: &'a str, unit: &str) -> &'a str {
    let head = format!("\t-> Unit {unit}:\n");
    let start = dump
        .find(&head)
        .unwrap_or_else(|| panic!("{unit} missing from the dump"))
        + head.len();
    let rest = &dump[start..];
    let end = rest.find("\n\t-> Unit ").map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

/// Decodes one `Command Line:` of the dump (see the module comment).
fn decode_command_line(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    let mut words = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b' ' {
            i += 1;
            continue;
        }
        let mut w: Vec<u8> = Vec::new();
        if b[i] == b'"' {
            i += 1;
            loop {
                match b.get(i).copied().expect("unterminated quote in dump") {
                    b'"' => {
                        i += 1;
                        break;
                    }
                    b'\\' => {
                        let e = b[i + 1];
                        i += 2;
                        let c = match e {
                            b'a' => 7,
                            b'b' => 8,
                            b'f' => 12,
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'v' => 11,
                            b'0'..=b'7' => {
                                let v = u8::from_str_radix(&s[i - 1..i + 2], 8).unwrap();
                                i += 2;
                                v
                            }
                            b'\\' | b'"' | b'\'' | b'`' | b'$' => e,
                            _ => panic!("unknown escape \\{} in dump: {s}", e as char),
                        };
                        w.push(c);
                    }
                    c => {
                        w.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < b.len() && b[i] != b' ' {
                w.push(b[i]);
                i += 1;
            }
        }
        words.push(String::from_utf8(w).expect("UTF-8 word"));
    }
    words
}

fn lines_with_prefix<'a>(section: &'a str, prefix: &str) -> Vec<&'a str> {
    section
        .split('\n')
        .filter_map(|l| l.strip_prefix(prefix))
        .collect()
}

/// Checks that the lines `prefix + entry` appear in the section exactly as one block.
fn assert_block(section: &str, prefix: &str, entries: &[String], what: &str) {
    let expected: String = entries.iter().map(|e| format!("{prefix}{e}\n")).collect();
    let start = section
        .find(&format!("\n{prefix}"))
        .map(|s| s + 1)
        .unwrap_or_else(|| panic!("no {what} in the dump"));
    let got = &section[start..];
    assert!(
        got.starts_with(&expected),
        "{what} differs.\nexpected: {:?}\ngot:      {:?}",
        expected,
        &got[..got.len().min(expected.len() + 200)]
    );
    assert!(
        !got[expected.len()..].starts_with(prefix),
        "systemd has more {what} entries than written"
    );
}

// ---------------------------------------------------------------------------------------------
// libsystemd-shared

unsafe extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
    fn fopen(path: *const c_char, mode: *const c_char) -> *mut c_void;
    fn fclose(f: *mut c_void) -> c_int;
}

type ReplaceEnvArgv252 =
    unsafe extern "C" fn(*const *const c_char, *const *const c_char) -> *mut *mut c_char;
type NameIsValid = unsafe extern "C" fn(*const c_char) -> bool;
type JournalFieldValid = unsafe extern "C" fn(*const c_char, usize, bool) -> bool;
type UnicharIsValid = unsafe extern "C" fn(u32) -> bool;
type LoadEnvFile = unsafe extern "C" fn(*mut c_void, *const c_char, *mut *mut *mut c_char) -> c_int;

struct Shared {
    replace_env_argv: ReplaceEnvArgv252,
    load_env_file: LoadEnvFile,
    env_name_is_valid: NameIsValid,
    journal_field_valid: JournalFieldValid,
    unichar_is_valid: UnicharIsValid,
}

/// libsystemd-shared-252.so, wherever the distribution put it.
fn shared_library() -> PathBuf {
    let mut dirs = vec![
        PathBuf::from("/usr/lib/systemd"),
        PathBuf::from("/usr/lib64/systemd"),
    ];
    if let Ok(entries) = fs::read_dir("/usr/lib") {
        dirs.extend(entries.flatten().map(|e| e.path().join("systemd")));
    }
    for dir in dirs {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("libsystemd-shared-") && name.ends_with(".so") {
                // The signatures below are systemd 252's (replace_env_argv changed in 254).
                assert_eq!(
                    name, "libsystemd-shared-252.so",
                    "only systemd 252 is supported here"
                );
                return e.path();
            }
        }
    }
    panic!("libsystemd-shared-*.so not found (is systemd installed?)");
}

fn shared() -> Shared {
    let path = CString::new(shared_library().to_string_lossy().as_bytes()).unwrap();
    // SAFETY: dlopen/dlsym are called with valid C strings; the symbols are cast to the
    // signatures they have in systemd 252 (src/basic/env-util.h, src/basic/env-file.h).
    unsafe {
        let h = dlopen(path.as_ptr(), 2 /* RTLD_NOW */);
        assert!(!h.is_null(), "dlopen: {:?}", CStr::from_ptr(dlerror()));
        let sym = |name: &CStr| {
            let p = dlsym(h, name.as_ptr());
            assert!(!p.is_null(), "dlsym {name:?}");
            p
        };
        Shared {
            replace_env_argv: std::mem::transmute::<*mut c_void, ReplaceEnvArgv252>(sym(
                c"replace_env_argv",
            )),
            load_env_file: std::mem::transmute::<*mut c_void, LoadEnvFile>(sym(c"load_env_file")),
            env_name_is_valid: std::mem::transmute::<*mut c_void, NameIsValid>(sym(
                c"env_name_is_valid",
            )),
            journal_field_valid: std::mem::transmute::<*mut c_void, JournalFieldValid>(sym(
                c"journal_field_valid",
            )),
            unichar_is_valid: std::mem::transmute::<*mut c_void, UnicharIsValid>(sym(
                c"unichar_is_valid",
            )),
        }
    }
}

fn cstrings(v: &[String]) -> (Vec<CString>, Vec<*const c_char>) {
    let owned: Vec<CString> = v
        .iter()
        .map(|s| CString::new(s.as_bytes()).unwrap())
        .collect();
    let mut ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    (owned, ptrs)
}

/// Reads a NULL-terminated strv (leaked: test process).
unsafe fn read_strv(p: *mut *mut c_char) -> Vec<String> {
    assert!(!p.is_null(), "NULL strv");
    let mut out = Vec::new();
    let mut i = 0;
    // SAFETY: p is a NULL-terminated array of C strings from systemd.
    unsafe {
        while !(*p.add(i)).is_null() {
            out.push(String::from_utf8(CStr::from_ptr(*p.add(i)).to_bytes().to_vec()).unwrap());
            i += 1;
        }
    }
    out
}

impl Shared {
    fn replace_env_argv(&self, argv: &[String], env: &[(String, String)]) -> Vec<String> {
        let env: Vec<String> = env.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let (_a, argv) = cstrings(argv);
        let (_e, env) = cstrings(&env);
        // SAFETY: both arrays are NULL-terminated and outlive the call.
        unsafe { read_strv((self.replace_env_argv)(argv.as_ptr(), env.as_ptr())) }
    }

    fn load_env_file(&self, path: &Path) -> Vec<(String, String)> {
        let p = CString::new(path.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: f is a fresh FILE*, closed after the call; ret receives a strv.
        let strv = unsafe {
            let f = fopen(p.as_ptr(), c"re".as_ptr());
            assert!(!f.is_null(), "fopen");
            let mut ret: *mut *mut c_char = std::ptr::null_mut();
            let r = (self.load_env_file)(f, p.as_ptr(), &mut ret);
            fclose(f);
            assert_eq!(r, 0, "load_env_file failed");
            read_strv(ret)
        };
        strv.into_iter()
            .map(|a| {
                let (n, v) = a.split_once('=').unwrap();
                (n.to_string(), v.to_string())
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// The round trips

/// argv as systemd stores it: `$` doubled in text, `${NAME}` for references.
fn stored_argv(argv: &[Arg]) -> Vec<String> {
    argv.iter()
        .map(|a| {
            a.0.iter()
                .map(|p| match p {
                    Piece::Text(t) => t.replace('$', "$$"),
                    Piece::Var(n) => format!("${{{n}}}"),
                })
                .collect()
        })
        .collect()
}

fn has_noncharacter(s: &str) -> bool {
    s.chars()
        .any(|c| (0xFDD0..=0xFDEF).contains(&(c as u32)) || (c as u32 & 0xFFFE) == 0xFFFE)
}

/// Encodes, accepting only the refusal every encoder must make: noncharacters.
fn encode_or_noncharacter(
    r: Result<String, EscapeError>,
    input: &str,
    refused: &mut usize,
) -> Option<String> {
    match r {
        Ok(v) => Some(v),
        Err(EscapeError::NonCharacter(c)) if input.contains(c) => {
            *refused += 1;
            None
        }
        Err(e) => panic!("{e} for {input:?}"),
    }
}

fn is_executable_error(e: &EscapeError) -> bool {
    matches!(
        e,
        EscapeError::EmptyExecutable
            | EscapeError::ExecutablePrefix(_)
            | EscapeError::UnsafeExecutable(_)
            | EscapeError::InvalidExecutable
            | EscapeError::NonCharacter(_)
            | EscapeError::TooLong(_)
    )
}

struct Counts {
    exec: usize,
    exec_refused: usize,
    env: usize,
    env_refused: usize,
    small: usize,
    small_refused: usize,
}

fn one_batch(runner: &mut TestRunner, shared: &Shared, counts: &mut Counts) {
    let dir = TempDir::new("units");
    let mut wants = Vec::new();

    // Command lines.
    let mut exec_cases: BTreeMap<String, Vec<(Vec<Arg>, String)>> = BTreeMap::new();
    for u in 0..EXEC_UNITS {
        let unit = format!("x{u}.service");
        let mut body = String::from("[Service]\nType=oneshot\n");
        let mut cases = Vec::new();
        for argv in sample(runner, &argv(), EXEC_PER_UNIT) {
            match escape::exec_line(&argv) {
                Ok(line) => {
                    assert!(
                        !line.contains(|c: char| c.is_control()),
                        "raw control in {line:?}"
                    );
                    body.push_str(&format!("ExecStart={line}\n"));
                    cases.push((argv, line));
                }
                Err(e) => {
                    assert!(is_executable_error(&e), "{e} for {argv:?}");
                    counts.exec_refused += 1;
                }
            }
        }
        if cases.is_empty() {
            body.push_str("ExecStart=/bin/true\n");
        }
        dir.write(&unit, &body);
        wants.push(unit.clone());
        exec_cases.insert(unit, cases);
    }

    // Environment= assignments; names made unique so none replaces another.
    let mut env_cases: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for u in 0..ENV_UNITS {
        let unit = format!("e{u}.service");
        let mut body = String::from("[Service]\nType=oneshot\nExecStart=/bin/true\n");
        let mut cases = Vec::new();
        for (i, (name, value)) in sample(runner, &(env_name(), hostile()), ENV_PER_UNIT)
            .into_iter()
            .enumerate()
        {
            let name = format!("{name}_{i}");
            let r = escape::environment_assignment(&name, &value);
            let Some(word) = encode_or_noncharacter(r, &value, &mut counts.env_refused) else {
                continue;
            };
            assert!(
                !word.contains(|c: char| c.is_control()),
                "raw control in {word:?}"
            );
            assert_eq!(
                parse::environment(&word).unwrap(),
                vec![(name.clone(), value.clone())]
            );
            body.push_str(&format!("Environment={word}\n"));
            cases.push((name, value));
        }
        dir.write(&unit, &body);
        wants.push(unit.clone());
        env_cases.insert(unit, cases);
    }

    // Units with one of each single-value syntax, plus LogExtraFields= and BindPaths=.
    struct Small {
        description: Option<String>,
        workdir: Option<String>,
        fields: Vec<(String, String)>,
        binds: Vec<(String, String)>,
    }
    let small_strategy = (
        hostile(),
        prop_oneof![abs_path(), hostile()],
        prop::collection::vec(("[A-Z][A-Z0-9_]{0,10}", hostile()), 0..3),
        prop::collection::vec((abs_path(), abs_path()), 0..3),
    );
    let mut small_cases = BTreeMap::new();
    for (u, (desc, wd, fields, binds)) in sample(runner, &small_strategy, SMALL_UNITS)
        .into_iter()
        .enumerate()
    {
        let unit = format!("s{u}.service");
        let mut body = String::from("[Unit]\n");
        let mut case = Small {
            description: None,
            workdir: None,
            fields: Vec::new(),
            binds: Vec::new(),
        };
        // An empty Description= makes systemd show the unit name instead.
        match escape::plain(&desc) {
            Ok(v) if !desc.is_empty() => {
                assert_eq!(parse::plain(&v).unwrap(), desc);
                body.push_str(&format!("Description={v}\n"));
                case.description = Some(desc);
            }
            Ok(_) => {}
            Err(e) => {
                counts.small_refused += 1;
                let bad = desc
                    .chars()
                    .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}')
                    || desc.starts_with(' ')
                    || desc.ends_with(' ')
                    || desc.ends_with('\\')
                    || has_noncharacter(&desc);
                assert!(bad, "{e} for {desc:?}");
            }
        }
        body.push_str("[Service]\nType=oneshot\nExecStart=/bin/true\n");
        match escape::path(&wd) {
            Ok(v) => {
                assert_eq!(parse::plain(&v).unwrap(), wd);
                body.push_str(&format!("WorkingDirectory={v}\n"));
                case.workdir = Some(wd);
            }
            Err(_) => counts.small_refused += 1,
        }
        for (i, (name, value)) in fields.into_iter().enumerate() {
            let name = format!("{name}_{i}");
            let r = escape::log_extra_field(&name, &value);
            let Some(word) = encode_or_noncharacter(r, &value, &mut counts.small_refused) else {
                continue;
            };
            assert_eq!(
                parse::log_extra_fields(&word).unwrap(),
                vec![(name.clone(), value.clone())]
            );
            body.push_str(&format!("LogExtraFields={word}\n"));
            case.fields.push((name, value));
        }
        for (src, dst) in binds {
            match escape::bind_path(&src, &dst) {
                Ok(entry) => {
                    let parsed = parse::bind_paths(&entry).unwrap();
                    assert_eq!(parsed.len(), 1);
                    assert_eq!((&parsed[0].source, &parsed[0].destination), (&src, &dst));
                    body.push_str(&format!("BindPaths={entry}\n"));
                    case.binds.push((src, dst));
                }
                Err(e) => {
                    // Only these make a normalized absolute path unrepresentable.
                    assert!(
                        matches!(
                            e,
                            EscapeError::ControlChar(_) | EscapeError::NonCharacter(_)
                        ),
                        "{e} for {src:?} {dst:?}"
                    );
                    counts.small_refused += 1;
                }
            }
        }
        dir.write(&unit, &body);
        wants.push(unit.clone());
        small_cases.insert(unit, case);
    }

    dir.write(
        "all.target",
        &format!("[Unit]\nWants={}\n", wants.join(" ")),
    );
    let dump = systemd_test(&dir.0, "all.target");

    for (unit, cases) in &exec_cases {
        let section = unit_section(&dump, unit);
        let lines = lines_with_prefix(section, "\t\t\tCommand Line: ");
        for ((argv, line), dumped) in cases.iter().zip(&lines) {
            let stored = decode_command_line(dumped);
            assert_eq!(stored, stored_argv(argv), "{unit}: ExecStart={line}");
            let reference = parse::exec_line(line).unwrap();
            assert_eq!(reference.prefixes, "");
            assert_eq!(reference.argv, stored, "reference parser: ExecStart={line}");

            // Exec-time expansion with some of the referenced variables set.
            let env: Vec<(String, String)> = sample(runner, &hostile(), 2)
                .into_iter()
                .zip(["A", "_c"])
                .map(|(v, n)| (n.to_string(), v))
                .collect();
            let final_argv = shared.replace_env_argv(&stored, &env);
            let lookup = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
            let expected: Vec<String> = argv.iter().map(|a| a.resolve(lookup)).collect();
            assert_eq!(final_argv, expected, "exec-time argv of ExecStart={line}");
            assert_eq!(parse::expand_argv(&stored, &env).unwrap(), expected);
            counts.exec += 1;
        }
        assert_eq!(
            lines.len(),
            cases.len().max(1),
            "{unit}: number of commands"
        );
    }

    for (unit, cases) in &env_cases {
        let section = unit_section(&dump, unit);
        let entries: Vec<String> = cases.iter().map(|(n, v)| format!("{n}={v}")).collect();
        assert_block(section, "\t\tEnvironment: ", &entries, "Environment=");
        counts.env += cases.len();
    }

    for (unit, case) in &small_cases {
        let section = unit_section(&dump, unit);
        let desc = lines_with_prefix(section, "\t\tDescription: ");
        assert_eq!(
            desc,
            vec![case.description.as_deref().unwrap_or(unit)],
            "{unit}"
        );
        let wd = lines_with_prefix(section, "\t\tWorkingDirectory: ");
        assert_eq!(wd, vec![case.workdir.as_deref().unwrap_or("/")], "{unit}");
        if !case.fields.is_empty() {
            let entries: Vec<String> = case
                .fields
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            assert_block(section, "\t\tLogExtraFields: ", &entries, "LogExtraFields=");
        }
        let binds = lines_with_prefix(section, "\t\tBindPaths: ");
        let expected: Vec<String> = case
            .binds
            .iter()
            .map(|(s, d)| format!("{s}:{d}:rbind"))
            .collect();
        assert_eq!(binds, expected, "{unit}: BindPaths=");
        counts.small += 1;
    }
}

#[test]
fn escape_round_trips_through_systemd() {
    let shared = shared();
    let mut runner = TestRunner::default();
    let mut counts = Counts {
        exec: 0,
        exec_refused: 0,
        env: 0,
        env_refused: 0,
        small: 0,
        small_refused: 0,
    };
    for _ in 0..BATCHES {
        one_batch(&mut runner, &shared, &mut counts);
    }
    eprintln!(
        "round trips through systemd --test: {} command lines (+{} refused executables), {} \
         Environment= values (+{} refused), {} units with Description=/WorkingDirectory=/LogExtraFields=/\
         BindPaths= ({} values refused)",
        counts.exec,
        counts.exec_refused,
        counts.env,
        counts.env_refused,
        counts.small,
        counts.small_refused
    );
    // Guard against a generator that stopped producing valid cases.
    assert!(counts.exec > BATCHES * EXEC_UNITS * EXEC_PER_UNIT / 3);
}

#[test]
fn env_file_round_trips_through_load_env_file() {
    let shared = shared();
    let mut runner = TestRunner::default();
    let dir = TempDir::new("envfile");
    let mut total = 0;
    for batch in 0..3 {
        let pairs: Vec<(String, String)> = sample(&mut runner, &(env_name(), hostile()), 1000)
            .into_iter()
            .enumerate()
            .map(|(i, (n, v))| (format!("{n}_{i}"), v))
            .filter(|(_, v)| {
                let keep = !has_noncharacter(v);
                if !keep {
                    assert!(matches!(
                        escape::env_file_line("A", v),
                        Err(EscapeError::NonCharacter(_))
                    ));
                }
                keep
            })
            .collect();
        let text: String = pairs
            .iter()
            .map(|(n, v)| escape::env_file_line(n, v).unwrap())
            .collect();
        let file = dir.0.join(format!("env{batch}"));
        fs::write(&file, &text).unwrap();
        let got = shared.load_env_file(&file);
        for (i, (want, have)) in pairs.iter().zip(&got).enumerate() {
            assert_eq!(
                want,
                have,
                "entry {i}, line {:?}",
                escape::env_file_line(&want.0, &want.1)
            );
        }
        assert_eq!(got.len(), pairs.len());
        assert_eq!(parse::env_file(&text).unwrap(), pairs, "reference parser");
        total += pairs.len();
    }
    eprintln!("{total} env-file lines parsed back exactly by load_env_file()");
}

/// The reference parser agrees with load_env_file() on hand-written files too, not only on what
/// the encoder writes (quotes, comments, escapes, whitespace, continuation lines).
#[test]
fn reference_env_file_parser_matches_systemd() {
    let shared = shared();
    let dir = TempDir::new("envref");
    let texts = [
        "A=1\nB = 2 \n  C=' x '\nD=\"a\\\"b\\nc\"\n#E=1\n;F=1\nG=a\\\nb\nH=a\\ \\  \nI=\"x\"'y'z\n",
        "export J=1\nK=\nL=\"\"\nM='\\'\nN=\"\\\n\"\nO=a#b\n",
        "P=\"multi\nline\r\nvalue\"\nQ=tab\there\n",
        "R=1\nS=2\nR=3\n",
    ];
    for (i, text) in texts.iter().enumerate() {
        let file = dir.0.join(format!("ref{i}"));
        fs::write(&file, text).unwrap();
        assert_eq!(
            parse::env_file(text).unwrap(),
            shared.load_env_file(&file),
            "{text:?}"
        );
    }
}

/// The systemd behaviour behind the refusals in `escape` (see its module notes). If one of these
/// changes, the corresponding refusal may be relaxed.
#[test]
fn systemd_behaviour_behind_the_refusals() {
    let dir = TempDir::new("why");
    dir.write(
        "prefix.service",
        "[Service]\nType=oneshot\n\
         ExecStart=\"-/bin/echo\" \"a\"\n\
         ExecStart=\"@/bin/echo\" \"b\"\n\
         ExecStart=\"\\x2d/bin/echo\" \"c\"\n\
         ExecStart=\";\" \"/bin/echo\" \"d\"\n",
    );
    // A noncharacter makes systemd drop the line, and the unit fails to load.
    dir.write(
        "nonchar.service",
        "[Unit]\nDescription=a\u{fdd0}b\n[Service]\nExecStart=/bin/true\n",
    );
    // Specifiers are expanded after C-unescaping.
    dir.write(
        "specifier.service",
        "[Service]\nEnvironment=\"A=\\x25n\"\nExecStart=\"/bin/echo\" \"\\x25n\"\n",
    );
    dir.write(
        "all.target",
        "[Unit]\nWants=prefix.service nonchar.service specifier.service\n",
    );

    let (dump, stderr) = systemd_test_raw(&dir.0, "all.target");

    // Quoted or escaped, a leading - or @ is a prefix, and a first word ";" a separator.
    let prefix = unit_section(&dump, "prefix.service");
    assert_eq!(
        lines_with_prefix(prefix, "\t\t\tCommand Line: "),
        vec!["/bin/echo a", "b", "/bin/echo c", "/bin/echo d"]
    );
    assert!(stderr.contains("not UTF-8 clean"), "{stderr}");
    let nonchar = any_unit_section(&dump, "nonchar.service");
    assert!(!nonchar.contains("\t\tUnit Load State: loaded\n"));
    let spec = unit_section(&dump, "specifier.service");
    assert_eq!(
        lines_with_prefix(spec, "\t\tEnvironment: "),
        vec!["A=specifier.service"]
    );
    assert_eq!(
        lines_with_prefix(spec, "\t\t\tCommand Line: "),
        vec!["/bin/echo specifier.service"]
    );
}

/// The name and character rules of `escape` are systemd's own: compared with env_name_is_valid(),
/// journal_field_valid() and, for every Unicode scalar value, unichar_is_valid().
#[test]
fn name_and_character_rules_match_systemd() {
    let shared = shared();
    let mut runner = TestRunner::default();
    let names = prop_oneof![
        "[A-Za-z0-9_.=: -]{0,6}",
        "[A-Z_][A-Z0-9_]{0,70}",
        any::<String>().prop_map(|s| s.replace('\0', "")),
    ];
    for name in sample(&mut runner, &names, 5000) {
        let c = CString::new(name.as_bytes()).unwrap();
        // SAFETY: valid C string; the functions only read it.
        let (env_ok, field_ok) = unsafe {
            (
                (shared.env_name_is_valid)(c.as_ptr()),
                (shared.journal_field_valid)(c.as_ptr(), name.len(), false),
            )
        };
        assert_eq!(escape::is_env_name(&name), env_ok, "env name {name:?}");
        assert_eq!(
            escape::is_log_field_name(&name),
            field_ok,
            "field name {name:?}"
        );
    }
    for c in (1..=0x10FFFFu32).filter_map(char::from_u32) {
        // SAFETY: plain value call.
        let valid = unsafe { (shared.unichar_is_valid)(c as u32) };
        let accepted = escape::plain(&format!("a{c}b")) != Err(EscapeError::NonCharacter(c));
        assert_eq!(accepted, valid, "U+{:04X}", c as u32);
    }
}
