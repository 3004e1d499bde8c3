use std::path::PathBuf;

use sketchfit::api::commands::{predict, PredictOptions};
use sketchfit::error::Result;
use sketchfit::model::Model;
use sketchfit::Session;

/// `sketchfit predict MODEL --input FILES --output OUT.parquet`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model file.
    model: PathBuf,
    /// Parquet files to predict (paths or globs).
    #[arg(short, long, required = true, num_args = 1..)]
    input: Vec<PathBuf>,
    /// Output Parquet file.
    #[arg(short, long)]
    output: PathBuf,
    /// Copy this input column to the output (repeatable).
    #[arg(long)]
    keep: Vec<String>,
    /// Also write the per-class (or per-target) scores f_k(x).
    #[arg(long)]
    scores: bool,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Rows per chunk.
    #[arg(long, default_value_t = 8192)]
    chunk_rows: usize,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    let model = Model::load_with(session, &a.model)?;
    let opts = PredictOptions {
        session: session.clone(),
        keep: a.keep,
        scores: a.scores,
        chunk_rows: a.chunk_rows.max(1),
        threads: super::threads(a.threads),
        progress: true,
    };
    let rows = predict(&model, &a.input, &a.output, &opts)?;
    super::print_out(&format!("{rows} predictions written to {}\n", a.output.display()))
}
