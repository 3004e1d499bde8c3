fn main() -> std::process::ExitCode {
    sketchfit::cli::main()
}
