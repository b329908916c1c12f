//! Single values: whatever an `escape` function accepts must parse back, through the reference
//! parser (checked against systemd 252 in tests/escape_roundtrip.rs), to exactly the input.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use podunit::escape::{self, parse};

#[derive(Arbitrary, Debug)]
enum Input {
    Environment(String, String),
    LogExtraField(String, String),
    Plain(String),
    Path(String),
    BindPath(String, String),
    EnvFile(Vec<(String, String)>),
}

fn no_raw_control(v: &str) {
    assert!(
        !v.contains(|c: char| c.is_control()),
        "raw control character in {v:?}"
    );
}

fuzz_target!(|input: Input| match input {
    Input::Environment(name, value) => {
        if let Ok(word) = escape::environment_assignment(&name, &value) {
            no_raw_control(&word);
            assert_eq!(parse::environment(&word).unwrap(), vec![(name, value)]);
        }
    }
    Input::LogExtraField(name, value) => {
        if let Ok(word) = escape::log_extra_field(&name, &value) {
            no_raw_control(&word);
            assert_eq!(parse::log_extra_fields(&word).unwrap(), vec![(name, value)]);
        }
    }
    Input::Plain(s) => {
        if let Ok(v) = escape::plain(&s) {
            no_raw_control(&v);
            assert_eq!(parse::plain(&v).unwrap(), s);
        }
    }
    Input::Path(p) => {
        if let Ok(v) = escape::path(&p) {
            no_raw_control(&v);
            assert_eq!(parse::plain(&v).unwrap(), p);
        }
    }
    Input::BindPath(src, dst) => {
        if let Ok(entry) = escape::bind_path(&src, &dst) {
            no_raw_control(&entry);
            let parsed = parse::bind_paths(&entry).unwrap();
            assert_eq!(parsed.len(), 1);
            assert_eq!(
                (parsed[0].source.as_str(), parsed[0].destination.as_str()),
                (&*src, &*dst)
            );
            assert!(parsed[0].recursive && !parsed[0].ignore_enoent);
        }
    }
    Input::EnvFile(pairs) => {
        let mut text = String::new();
        let mut expected = Vec::new();
        for (name, value) in pairs {
            if let Ok(line) = escape::env_file_line(&name, &value) {
                text.push_str(&line);
                // A later assignment of the same name replaces the earlier one in place.
                match expected
                    .iter_mut()
                    .find(|(n, _): &&mut (String, String)| *n == name)
                {
                    Some(e) => e.1 = value,
                    None => expected.push((name, value)),
                }
            }
        }
        assert_eq!(parse::env_file(&text).unwrap(), expected);
    }
});
