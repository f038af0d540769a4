//! The `tilegate` binary: the command line with tilegate's own recipes.

fn main() -> std::process::ExitCode {
    tilegate_cli::main()
}
