//! Command lines: whatever argv `escape::exec_line` accepts must parse back, through the reference
//! parser (checked against systemd 252 in tests/escape_roundtrip.rs), to exactly that argv, with no
//! prefix, no extra word and no extra command; and exec-time expansion must give the resolved argv.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use podunit::escape::{self, Arg, Piece, parse};

const VARS: [&str; 4] = ["A", "B_1", "_c", "LONG_NAME_9"];

#[derive(Arbitrary, Debug)]
enum FuzzPiece {
    Text(String),
    Var(u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Put a valid executable first, so that the arguments get fuzzed past the executable checks.
    valid_executable: bool,
    argv: Vec<Vec<FuzzPiece>>,
    /// Values for the first variables of VARS; the others stay unset.
    env: Vec<String>,
}

fuzz_target!(|input: Input| {
    let exe = input.valid_executable.then(|| Arg::text("/usr/bin/app"));
    let argv: Vec<Arg> = exe
        .into_iter()
        .chain(input.argv.into_iter().map(|pieces| {
            Arg(pieces
                .into_iter()
                .map(|p| match p {
                    FuzzPiece::Text(t) => Piece::Text(t),
                    FuzzPiece::Var(i) => Piece::Var(VARS[i as usize % VARS.len()].to_string()),
                })
                .collect())
        }))
        .collect();
    let Ok(line) = escape::exec_line(&argv) else {
        return;
    };
    assert!(
        !line.contains(|c: char| c.is_control()),
        "raw control character in {line:?}"
    );

    let stored: Vec<String> = argv
        .iter()
        .map(|a| {
            a.0.iter()
                .map(|p| match p {
                    Piece::Text(t) => t.replace('$', "$$"),
                    Piece::Var(n) => format!("${{{n}}}"),
                })
                .collect()
        })
        .collect();
    let parsed = parse::exec_line(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert_eq!(parsed.prefixes, "", "{line:?}");
    assert_eq!(parsed.argv, stored, "{line:?}");

    let env: Vec<(String, String)> = VARS
        .iter()
        .zip(input.env)
        .filter(|(_, v)| !v.contains('\0'))
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let lookup = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let resolved: Vec<String> = argv.iter().map(|a| a.resolve(lookup)).collect();
    assert_eq!(
        parse::expand_argv(&parsed.argv, &env).unwrap(),
        resolved,
        "{line:?}"
    );
});
