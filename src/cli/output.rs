//! Standard output and error for the commands that print. A closed pipe (`podunit status | head
//! -1`, `podunit check 2>&1 | head -1`) ends the program quietly, as Unix tools do, with the
//! status a shell gives a tool that SIGPIPE stopped (141), so `set -o pipefail` sees what it sees
//! for `cat` or `grep`. `println!` would panic (and so abort). Any other write error on stdout is
//! said on stderr.

use std::io::{ErrorKind, Write};

/// 128 + SIGPIPE: what a shell reports for a process that a closed pipe stopped.
pub const EXIT_CLOSED_PIPE: i32 = 141;

/// Writes `text` to stdout, or exits: quietly when the reader is gone, else with a message (1).
pub fn write(text: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(text).and_then(|()| out.flush()) {
        exit_on(e);
    }
}

/// Writes raw bytes (unit files, completion scripts, journal text) the same way.
pub fn write_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        exit_on(e);
    }
}

/// Writes to stderr; a closed pipe ends the program quietly, other errors are ignored (there is
/// nowhere left to say them).
pub fn write_err(text: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    if err
        .write_fmt(text)
        .is_err_and(|e| e.kind() == ErrorKind::BrokenPipe)
    {
        std::process::exit(EXIT_CLOSED_PIPE);
    }
}

fn exit_on(e: std::io::Error) -> ! {
    if e.kind() == ErrorKind::BrokenPipe {
        std::process::exit(EXIT_CLOSED_PIPE);
    }
    eprintln!("podunit: cannot write to standard output: {e}");
    std::process::exit(1);
}

/// `print!` that ends quietly on a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::output::write(format_args!($($arg)*)) };
}

/// `println!` that ends quietly on a closed pipe.
macro_rules! outln {
    () => { $crate::cli::output::write_bytes(b"\n") };
    ($($arg:tt)*) => { $crate::cli::output::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that ends quietly on a closed pipe.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::cli::output::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Left-aligned columns separated by three spaces, as kubectl prints.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}   ", w = width[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
