#![forbid(unsafe_code)]
fn main() -> std::process::ExitCode {
    sketchfit::cli::main()
}
