use std::path::PathBuf;

use sketchfit::api::commands::{transform, PredictOptions};
use sketchfit::error::Result;
use sketchfit::model::Model;
use sketchfit::Session;

/// `sketchfit transform MODEL --input FILES --output OUT.parquet`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model file.
    model: PathBuf,
    /// Parquet files (paths or globs).
    #[arg(short, long, required = true, num_args = 1..)]
    input: Vec<PathBuf>,
    /// Output Parquet file: a FixedSizeList<f32> column `pca` and the kept columns.
    #[arg(short, long)]
    output: PathBuf,
    /// Copy this input column to the output (repeatable).
    #[arg(long)]
    keep: Vec<String>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Rows per chunk at most: lowered so a chunk holds at most 16 MiB of PCA features
    /// (4,096 rows at E = 1024); the memory line says the rows used.
    #[arg(long, default_value_t = 8192)]
    chunk_rows: usize,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    let model = Model::load_with(session, &a.model)?;
    let opts = PredictOptions {
        session: session.clone(),
        keep: a.keep,
        scores: false,
        chunk_rows: a.chunk_rows.max(1),
        threads: super::threads(a.threads),
        progress: true,
    };
    let rows = transform(&model, &a.input, &a.output, &opts)?;
    super::print_out(&format!("{rows} rows of PCA features written to {}\n", a.output.display()))
}
