use std::path::PathBuf;

use sketchfit::api::commands::kernel_error;
use sketchfit::error::{Error, Result};
use sketchfit::Session;

/// `sketchfit kernel-error PIPELINE [--input FILES]`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pipeline file whose stages are compared.
    pipeline: PathBuf,
    /// Files to sample from (default: the pipeline's training files).
    #[arg(short, long, num_args = 1..)]
    input: Vec<PathBuf>,
    /// Rows in the uniform sample.
    #[arg(long, default_value_t = 1000)]
    sample: usize,
    /// Seeds per stage.
    #[arg(long, default_value_t = 5)]
    seeds: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Also draw the error against the output dimension to this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Override a pipeline key (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    let spec = super::load_pipeline(session, &a.pipeline, &a.set)?;
    if a.sample > 20_000 {
        return Err(Error::usage("--sample", "at most 20000 rows (the exact kernel is sample² entries)"));
    }
    let report = kernel_error(session, &spec.check()?, &a.input, a.sample, a.seeds, a.plot.is_some())?;
    if let Some(p) = &a.plot {
        sketchfit::atomic::write_bytes(session, p, report.to_svg().as_bytes())?;
    }
    let text = if a.json {
        serde_json::to_string_pretty(&report).map_err(|e| Error::bug_from("the report serialises", e))? + "\n"
    } else {
        report.to_text()
    };
    super::print_out(&text)
}
