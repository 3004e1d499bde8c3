#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used)]
fn main() -> std::process::ExitCode {
    sketchfit::cli::main()
}
