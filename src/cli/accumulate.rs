use std::path::PathBuf;

use sketchfit::api::commands::RunOptions;
use sketchfit::api::commands::{accumulate_shard, parse_shard};
use sketchfit::error::Result;
use sketchfit::Session;

/// `sketchfit accumulate PIPELINE --shard i/N -o PART`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pipeline file.
    pipeline: PathBuf,
    /// This shard, `i/N` (0 ≤ i < N): every N-th row group from the i-th.
    #[arg(long, default_value = "0/1")]
    shard: String,
    /// Where to write the shard's statistics.
    #[arg(short, long)]
    output: PathBuf,
    /// Override a pipeline key (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// No progress on stderr.
    #[arg(short, long)]
    quiet: bool,
    /// Continue from this shard's checkpoint (OUTPUT.ckpt).
    #[arg(long)]
    resume: bool,
    /// Fitted maps (from `fit-maps`) to use instead of the pre-pass: the part then merges
    /// with every part of these maps, whatever data it read.
    #[arg(long, value_name = "MAPS")]
    maps: Option<PathBuf>,
    /// The inputs (paths or globs), instead of the pipeline's data.train.
    #[arg(short, long = "input", value_name = "FILE", num_args = 1..)]
    input: Vec<PathBuf>,
    /// Two-pass pipelines: run pass two, projecting with this merged pass-one file
    /// (from `solve` on the pass-one parts). Without it a two-pass shard runs pass one.
    #[arg(long)]
    pass1: Option<PathBuf>,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    let mut set = a.set.clone();
    if let Some(t) = a.threads {
        set.push(format!("run.threads={t}"));
    }
    let mut spec = super::load_pipeline(session, &a.pipeline, &set)?;
    if !a.input.is_empty() {
        spec.data.train = a.input.clone();
    }
    let checked = spec.check()?;
    let shard = parse_shard(&a.shard)?;
    let checkpoint = (spec.run.checkpoint_every > 0).then(|| super::checkpoint_for(&a.output));
    let opts = RunOptions {
        session: session.clone(),
        progress: !a.quiet,
        checkpoint: checkpoint.clone(),
        resume: a.resume,
        output: Some(a.output.clone()),
        maps: a.maps.clone(),
        ..RunOptions::default()
    };
    super::register_inputs(session, &spec);
    for p in a.pass1.iter().chain(&a.maps) {
        sketchfit::atomic::register_input(session, p);
    }
    sketchfit::api::commands::check_run_outputs(&opts, "--output")?;
    if let Some(c) = &checkpoint {
        sketchfit::atomic::register_own(session, c);
    }
    let mut reporter = super::reporter(session, a.quiet);
    accumulate_shard(&checked, shard, &a.output, &opts, a.pass1.as_deref(), &mut reporter)?;
    if let Some(c) = &checkpoint {
        // Only a checkpoint this run wrote or resumed from: the output check refused any other.
        let _ = sketchfit::atomic::remove_own(session, c);
    }
    match &a.maps {
        Some(_) => super::print_out(&format!("statistics written to {}\n", a.output.display())),
        None => super::print_out(&format!("shard {shard} statistics written to {}\n", a.output.display())),
    }
}
