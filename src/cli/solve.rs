use std::path::PathBuf;

use sketchfit::api::commands::{evaluate, Evaluation};
use sketchfit::api::commands::{solve_parts, PartWeights, PartsSolve, SolveOutcome};
use sketchfit::error::Result;
use sketchfit::Session;

/// `sketchfit solve PIPELINE PART… -o MODEL`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pipeline file the shards ran.
    pipeline: PathBuf,
    /// The shards' statistics files.
    #[arg(required = true)]
    parts: Vec<PathBuf>,
    /// Where to write the model.
    #[arg(short, long)]
    output: PathBuf,
    /// Solve even if some shards are missing.
    #[arg(long)]
    allow_partial: bool,
    /// Override a pipeline key (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// No progress on stderr.
    #[arg(short, long)]
    quiet: bool,
    /// Two-pass pipelines: the merged pass-one file the pass-two parts projected with.
    #[arg(long)]
    pass1: Option<PathBuf>,
    /// The maps file the parts were accumulated with; it holds what the parts do not,
    /// such as Nyström's landmarks.
    #[arg(long, value_name = "MAPS")]
    maps: Option<PathBuf>,
    /// Solve only the last N parts given (a window: with a sorted glob of daily parts,
    /// the last N days).
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// Weigh parts over a maps file by age: the last part weighs 1, one HALF_LIFE parts
    /// older ½, and so on (2^(−age/HALF_LIFE)), so the model forgets old days smoothly.
    #[arg(long, value_name = "HALF_LIFE", conflicts_with = "weights")]
    decay: Option<f64>,
    /// Weigh parts over a maps file by these weights, one per part in the parts' order
    /// (after --last), each above 0.
    #[arg(long, value_name = "W,W,…", value_delimiter = ',')]
    weights: Option<Vec<f64>>,
    /// Also write the merged statistics of parts over a maps file to this file, one part
    /// that later solves take with the new days' parts.
    #[arg(long, value_name = "PART")]
    statistics: Option<PathBuf>,
    /// Also write what the solve reported (plan, memory, solve, λ, warnings) as JSON.
    #[arg(long, value_name = "REPORT.json")]
    report: Option<PathBuf>,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    let spec = super::load_pipeline(session, &a.pipeline, &a.set)?;
    let checked = spec.check()?;
    let quiet = a.quiet;
    // Globs (local, or of objects in a store) expand sorted, so a window is the last N.
    let all = sketchfit::source::expand_paths(session, &a.parts)?;
    let parts = match a.last {
        Some(0) => return Err(sketchfit::Error::usage("--last", "a window of 0 parts solves nothing; give N ≥ 1")),
        Some(n) => &all[all.len().saturating_sub(n)..],
        None => &all[..],
    };
    for p in parts.iter().chain(&a.pass1).chain(&a.maps) {
        sketchfit::atomic::register_input(session, p);
    }
    let mut outputs: Vec<(&str, &std::path::Path)> = vec![("--output", &a.output)];
    outputs.extend(a.report.as_deref().map(|r| ("--report", r)));
    outputs.extend(a.statistics.as_deref().map(|s| ("--statistics", s)));
    sketchfit::atomic::check_outputs(session, &outputs, None)?;
    let mut reporter = super::reporter(session, quiet);
    let opts = sketchfit::api::commands::RunOptions {
        session: session.clone(),
        maps: a.maps.clone(),
        statistics: a.statistics.clone(),
        weights: match (a.decay, a.weights) {
            (Some(h), _) => Some(PartWeights::HalfLife(h)),
            (None, Some(w)) => Some(PartWeights::Each(w)),
            (None, None) => None,
        },
        ..sketchfit::api::commands::RunOptions::default()
    };
    // The parts are the statistics on disk: a large fixed-λ solve may consume them.
    let outcome = solve_parts(
        &checked,
        parts,
        PartsSolve { allow_partial: a.allow_partial, pass1: a.pass1.as_deref() },
        &a.output,
        &opts,
        &mut reporter,
    )?;
    super::write_report(session, a.report.as_deref(), &reporter.report)?;
    let model = match outcome {
        SolveOutcome::Model(m) => *m,
        SolveOutcome::Pass1Merged => {
            return super::print_out(&format!(
                "pass one merged into {}; now run every shard's pass two with --pass1 {} and solve those parts with --pass1\n",
                a.output.display(),
                a.output.display()
            ));
        }
    };
    let h = &model.header;
    let mut out = format!(
        "solved {} rows from {} part(s): D = {}, components = {}, lambda = {}\n",
        h.rows,
        parts.len(),
        h.dim,
        h.components,
        sketchfit::api::commands::lambda_text(&h.lambdas)
    );
    if !spec.data.test.is_empty() {
        if let Evaluation::Classification { rows, accuracy, .. } = evaluate(
            session,
            &model,
            &spec.data.test,
            spec.run.chunk_rows,
            sketchfit::api::commands::RunOptions::default().threads_for(&checked),
            !quiet,
        )? {
            out += &format!("test accuracy: {accuracy:.4} ({rows} rows)\n");
        }
    }
    model.save_with(session, &a.output)?;
    out += &format!("model written to {}\n", a.output.display());
    super::print_out(&out)
}
