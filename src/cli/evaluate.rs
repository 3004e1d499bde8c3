use std::path::PathBuf;

use sketchfit::api::commands::evaluate;
use sketchfit::error::{Error, Result};
use sketchfit::model::Model;
use sketchfit::Session;

/// `sketchfit evaluate MODEL --input FILES`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model file.
    model: PathBuf,
    /// Labeled Parquet files (paths or globs).
    #[arg(short, long, required = true, num_args = 1..)]
    input: Vec<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Rows per chunk.
    #[arg(long, default_value_t = 8192)]
    chunk_rows: usize,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    let model = Model::load_with(session, &a.model)?;
    let ev = evaluate(session, &model, &a.input, a.chunk_rows.max(1), super::threads(a.threads), true)?;
    let text = if a.json {
        serde_json::to_string_pretty(&ev).map_err(|e| Error::bug_from("the report serialises", e))? + "\n"
    } else {
        ev.to_text()
    };
    super::print_out(&text)
}
