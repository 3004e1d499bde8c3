use std::path::PathBuf;

use sketchfit::api::commands::RunOptions;
use sketchfit::api::commands::{evaluate, Evaluation};
use sketchfit::error::Result;
use sketchfit::Session;

/// `sketchfit train PIPELINE -o MODEL`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pipeline file (TOML).
    pipeline: PathBuf,
    /// Where to write the model.
    #[arg(short, long)]
    output: PathBuf,
    /// Override a pipeline key, e.g. --set stages.0.dim=1024 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Worker threads (default: all cores; overrides run.threads).
    #[arg(long)]
    threads: Option<usize>,
    /// No progress bar or progress lines on stderr.
    #[arg(short, long)]
    quiet: bool,
    /// Continue from the checkpoint (run.checkpoint, default MODEL.ckpt) of an interrupted run.
    #[arg(long)]
    resume: bool,
    /// Fitted maps (from `fit-maps`) to use instead of the pre-pass.
    #[arg(long, value_name = "MAPS")]
    maps: Option<PathBuf>,
    /// Also write what the run reported (plan, memory, passes, solve, λ, warnings) as JSON.
    #[arg(long, value_name = "REPORT.json")]
    report: Option<PathBuf>,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    let mut set = a.set.clone();
    if let Some(t) = a.threads {
        set.push(format!("run.threads={t}"));
    }
    let spec = super::load_pipeline(session, &a.pipeline, &set)?;
    let checked = spec.check()?;
    let quiet = a.quiet;
    let checkpoint = (spec.run.checkpoint_every > 0)
        .then(|| spec.run.checkpoint.clone().unwrap_or_else(|| super::checkpoint_for(&a.output)));
    let opts = RunOptions {
        session: session.clone(),
        progress: !quiet,
        stats_on_disk: checkpoint.is_some(),
        checkpoint: checkpoint.clone(),
        resume: a.resume,
        output: Some(a.output.clone()),
        report: a.report.clone(),
        maps: a.maps.clone(),
        ..RunOptions::default()
    };
    // Every input (test files are read after training) is registered and every output
    // checked against them and each other now, before the pre-pass reads a row.
    super::register_inputs(session, &spec);
    if let Some(m) = &a.maps {
        sketchfit::atomic::register_input(session, m);
    }
    sketchfit::api::commands::check_run_outputs(&opts, "--output")?;
    if let Some(c) = &checkpoint {
        // Rewritten as the pass goes: the one output this run may replace.
        sketchfit::atomic::register_own(session, c);
    }
    let threads = opts.threads_for(&checked);
    let mut reporter = super::reporter(session, quiet);
    let model = sketchfit::api::commands::train(&checked, &opts, &mut reporter)?;
    let h = &model.header;
    let mut out = format!(
        "trained on {} rows: D = {}, components = {}, outputs = {}, lambda = {}\n",
        h.rows,
        h.dim,
        h.components,
        h.outputs,
        sketchfit::api::commands::lambda_text(&h.lambdas)
    );
    if !spec.data.test.is_empty() {
        match evaluate(session, &model, &spec.data.test, spec.run.chunk_rows, threads, !quiet)? {
            Evaluation::Classification { rows, accuracy, .. } => {
                out += &format!("test accuracy: {:.4} ({rows} rows)\n", accuracy);
            }
            Evaluation::Regression { rows, targets, rmse, r2 } => {
                for (k, t) in targets.iter().enumerate() {
                    out += &format!("test {t}: rmse {:.6}, r2 {:.6} ({rows} rows)\n", rmse[k], r2[k]);
                }
            }
        }
    }
    model.save_with(session, &a.output)?;
    super::write_report(session, a.report.as_deref(), &reporter.report)?;
    if let Some(c) = &checkpoint {
        // The run is complete: its checkpoint has served. The output check refused a
        // checkpoint path that held anything this run did not write or resume from.
        let _ = sketchfit::atomic::remove_own(session, c);
    }
    out += &format!("model written to {}\n", a.output.display());
    if !quiet {
        if let Some(kb) = peak_rss_kib() {
            eprintln!("peak memory (RSS): {:.1} MiB", kb as f64 / 1024.0);
        }
    }
    super::print_out(&out)
}

/// Peak resident set size of this process, from /proc (Linux only).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}
