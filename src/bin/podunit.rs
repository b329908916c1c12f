//! `podunit`: check, render and inspect pods.
fn main() -> std::process::ExitCode {
    podunit::cli::main()
}
