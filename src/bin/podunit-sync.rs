//! `podunit-sync`: reconciles running pods with the generated units; in cluster mode, this node's kubelet.
fn main() -> std::process::ExitCode {
    podunit::cli::sync::main()
}
