//! The command line: one file per subcommand, each parsing its flags and calling the
//! library. Errors print to stderr; bad usage or bad input exits 2, other failures 1.

mod accumulate;
mod embed;
mod evaluate;
mod fit_maps;
mod inspect;
mod kernel_error;
mod mmd;
mod predict;
mod solve;
mod train;
mod transform;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use sketchfit::api::commands::PipelineSpec;
use sketchfit::error::Error;
use sketchfit::Session;

/// Kernel models on data larger than memory.
#[derive(Debug, Parser)]
#[command(name = "sketchfit", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// An object-store option, KEY=VALUE, repeatable, on any command (aws_endpoint,
    /// aws_region, allow_http, timeout, max_retries, …): over the pipeline's [storage]
    /// table and the environment's AWS_/GOOGLE_/AZURE_ variables.
    #[arg(long = "storage-option", global = true, value_name = "KEY=VALUE")]
    storage_option: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Train a model from a pipeline file.
    Train(train::Args),
    /// Fit a pipeline's maps on its training data (its pre-pass) and write them to a file
    /// that train and accumulate take with --maps.
    FitMaps(fit_maps::Args),
    /// Write predictions for Parquet files.
    Predict(predict::Args),
    /// Score a model on labeled Parquet files.
    Evaluate(evaluate::Args),
    /// Describe a model file.
    Inspect(inspect::Args),
    /// Compare each stage's features with its exact kernel on a sample of rows.
    KernelError(kernel_error::Args),
    /// Write the PCA features of Parquet files.
    Transform(transform::Args),
    /// Accumulate one shard's statistics (every N-th row group).
    Accumulate(accumulate::Args),
    /// Merge shards' statistics and solve them into a model.
    Solve(solve::Args),
    /// Kernel distance and two-sample test between two point sets.
    Mmd(mmd::Args),
    /// One kernel-mean embedding per group of rows.
    Embed(embed::Args),
}

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // One session per command: its storage options, and every file it reads or writes.
    let session = match sketchfit::remote::parse_pairs(&cli.storage_option, "--storage-option")
        .and_then(|pairs| Session::with_storage_options(&pairs))
    {
        Ok(s) => s,
        Err(e) => return fail(&Session::new(), &e),
    };
    match run(&session, cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&session, &e),
    }
}

/// Prints an error and its causes; bad usage or input is exit 2, anything else 1.
fn fail(session: &Session, e: &Error) -> ExitCode {
    // Credentials never reach the terminal, whatever error carried them.
    eprintln!("error: {}", session.redact(&e.to_string()));
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        eprintln!("  caused by: {}", session.redact(&s.to_string()));
        src = s.source();
    }
    ExitCode::from(if e.is_user_error() { 2 } else { 1 })
}

fn run(session: &Session, command: Command) -> Result<(), Error> {
    match command {
        Command::Train(a) => train::run(session, a),
        Command::FitMaps(a) => fit_maps::run(session, a),
        Command::Predict(a) => predict::run(session, a),
        Command::Evaluate(a) => evaluate::run(session, a),
        Command::Inspect(a) => inspect::run(session, a),
        Command::KernelError(a) => kernel_error::run(session, a),
        Command::Transform(a) => transform::run(session, a),
        Command::Accumulate(a) => accumulate::run(session, a),
        Command::Solve(a) => solve::run(session, a),
        Command::Mmd(a) => mmd::run(session, a),
        Command::Embed(a) => embed::run(session, a),
    }
}

/// Reads a pipeline file in the command's session and puts its `[storage]` table in force
/// there (under the command line's options), so the checks before the run see objects
/// as the run will.
fn load_pipeline(session: &Session, path: &std::path::Path, set: &[String]) -> Result<PipelineSpec, Error> {
    let spec = PipelineSpec::load(session, path, set)?;
    session.storage().set_options(sketchfit::remote::Layer::Pipeline, &spec.storage)?;
    Ok(spec)
}

/// The default checkpoint of an output: beside it for a local file; in the working
/// directory, named after the object, for an output in an object store (a checkpoint is
/// rewritten as the pass goes: a local file costs no requests; `run.checkpoint` may name
/// an object instead).
fn checkpoint_for(output: &std::path::Path) -> std::path::PathBuf {
    let mut p = if sketchfit::remote::is_remote(output) {
        output.file_name().map(std::ffi::OsString::from).unwrap_or_else(|| "sketchfit".into())
    } else {
        output.as_os_str().to_os_string()
    };
    p.push(".ckpt");
    p.into()
}

/// Registers every input a pipeline names (its data, the feature list, the code file), so
/// that an output onto any of them is refused before the run reads a row. A pattern that
/// does not expand is left for the run itself to report, with its own location.
fn register_inputs(session: &Session, spec: &PipelineSpec) {
    let d = &spec.data;
    for list in [&d.train, &d.test, &d.unlabeled, &d.validation] {
        for p in sketchfit::source::expand_paths(session, list).unwrap_or_default() {
            sketchfit::atomic::register_input(session, &p);
        }
    }
    let files = d.feature_list.iter().map(std::path::PathBuf::from).chain(spec.ridge.code_file.iter().map(Into::into));
    for f in files {
        sketchfit::atomic::register_input(session, &f);
    }
}

/// The reporter of a command: every line to stderr unless `quiet`, with the session's
/// credentials redacted.
fn reporter(session: &Session, quiet: bool) -> sketchfit::api::commands::Reporter {
    let session = session.clone();
    sketchfit::api::commands::Reporter::new(Box::new(move |line: &str| {
        if !quiet {
            eprintln!("{}", session.redact(line));
        }
    }))
}

/// Writes what a run reported as JSON where `--report` asks (atomically, read back).
fn write_report(
    session: &Session,
    path: Option<&std::path::Path>,
    report: &sketchfit::api::commands::RunReport,
) -> Result<(), Error> {
    let Some(path) = path else { return Ok(()) };
    let mut value = serde_json::to_value(report).map_err(|e| Error::bug_from("the run report serialises", e))?;
    if let Some(o) = value.as_object_mut() {
        // The mark that lets a later run replace this file (see `atomic::check_output`).
        o.insert(sketchfit::atomic::REPORT_MARK.into(), sketchfit::atomic::written_by().into());
    }
    let text = serde_json::to_string_pretty(&sketchfit::identity::redact_json(value))
        .map_err(|e| Error::bug_from("the run report serialises", e))?;
    sketchfit::atomic::write_bytes(session, path, text.as_bytes())
}

/// Threads from a flag (0 or absent: all cores).
fn threads(flag: Option<usize>) -> usize {
    match flag {
        Some(n) if n > 0 => n,
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// Prints to stdout, treating a closed pipe as success.
fn print_out(text: &str) -> Result<(), Error> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::io("stdout", e)),
        _ => Ok(()),
    }
}
