//! The `sketchfit` command: a thin layer over the library (see `cli`).
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
