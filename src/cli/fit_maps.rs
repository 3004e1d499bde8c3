use std::path::PathBuf;

use sketchfit::api::commands::RunOptions;
use sketchfit::error::Result;
use sketchfit::Session;

/// `sketchfit fit-maps PIPELINE -o MAPS`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pipeline file (TOML).
    pipeline: PathBuf,
    /// Where to write the fitted maps.
    #[arg(short, long)]
    output: PathBuf,
    /// Override a pipeline key, e.g. --set data.train='["day-1/*.parquet"]' (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// No progress lines on stderr.
    #[arg(short, long)]
    quiet: bool,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    let spec = super::load_pipeline(session, &a.pipeline, &a.set)?;
    let checked = spec.check()?;
    super::register_inputs(session, &spec);
    let opts = RunOptions { session: session.clone(), output: Some(a.output.clone()), ..RunOptions::default() };
    sketchfit::api::commands::check_run_outputs(&opts, "--output")?;
    let mut reporter = super::reporter(session, a.quiet);
    let maps = sketchfit::api::commands::fit_maps(session, &checked, &mut reporter)?;
    maps.save_with(session, &a.output)?;
    let back = sketchfit::maps::Maps::load_with(&Session::new(), &a.output)?;
    super::print_out(&format!(
        "maps of {} stage(s), D = {}, written to {} (digest {})\n",
        back.header.stages.len(),
        back.pipeline.output_dim(),
        a.output.display(),
        back.digest()
    ))
}
