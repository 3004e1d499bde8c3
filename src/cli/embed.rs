use sketchfit::Session;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;

use super::mmd::SketchArgs;
use sketchfit::api::commands::embed_groups;
use sketchfit::atomic::AtomicFile;
use sketchfit::error::{Error, Location, Result};
use sketchfit::twosample::Lsh;

/// `sketchfit embed --input FILES --group-by COL --output OUT.parquet`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Parquet files (paths or globs).
    #[arg(short, long, required = true, num_args = 1..)]
    input: Vec<PathBuf>,
    /// The column whose values define the groups.
    #[arg(long)]
    group_by: String,
    /// Output Parquet file: group, rows, embedding (and bucket).
    #[arg(short, long)]
    output: PathBuf,
    #[command(flatten)]
    sketch: SketchArgs,
    /// Also a Euclidean LSH bucket per group from this many concatenated hashes.
    #[arg(long)]
    lsh: Option<usize>,
    /// LSH bucket width (default: the median distance between embeddings).
    #[arg(long)]
    lsh_width: Option<f64>,
    /// Groups need at least this many rows.
    #[arg(long, default_value_t = 2)]
    min_rows: u64,
    /// List the nearest groups of this group (by kernel distance) on stdout.
    #[arg(long)]
    query: Option<String>,
    /// How many neighbours `--query` lists.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    let s = a.sketch.setup(session, super::threads(a.threads))?;
    if a.lsh == Some(0) || a.lsh.is_some_and(|k| k > 64) {
        return Err(Error::usage("--lsh", "the number of hashes must be from 1 to 64"));
    }
    if let Some(w) = a.lsh_width {
        if a.lsh.is_none() {
            return Err(Error::usage("--lsh-width", "is the width of the --lsh buckets: give --lsh too"));
        }
        if !(w.is_finite() && w > 0.0) {
            return Err(Error::usage(
                "--lsh-width",
                format!("must be a positive number, got {w} (leave it out for the median distance between embeddings)"),
            ));
        }
    }
    let (mut groups, _) = embed_groups(session, &a.input, &a.group_by, &s, a.min_rows)?;
    let m = groups.first().map_or(0, |g| g.embedding.len());
    let dist = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| (p - q).powi(2)).sum::<f64>().sqrt();
    if let Some(k) = a.lsh {
        let w = a.lsh_width.unwrap_or_else(|| {
            let mut d: Vec<f64> = Vec::new();
            for i in 0..groups.len().min(200) {
                for j in i + 1..groups.len().min(200) {
                    d.push(dist(&groups[i].embedding, &groups[j].embedding));
                }
            }
            d.sort_by(f64::total_cmp);
            d.get(d.len() / 2).copied().filter(|v| *v > 0.0).unwrap_or(1.0)
        });
        let lsh = Lsh::draw(k, m, w, s.seed);
        for g in &mut groups {
            g.bucket = Some(lsh.bucket(&g.embedding));
        }
    }
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let mut fields = vec![
        Field::new("group", DataType::Utf8, false),
        Field::new("rows", DataType::UInt64, false),
        Field::new("embedding", DataType::FixedSizeList(item.clone(), m as i32), false),
    ];
    if a.lsh.is_some() {
        fields.push(Field::new("bucket", DataType::UInt64, false));
    }
    let schema = Arc::new(Schema::new(fields));
    let values = Float32Array::from_iter_values(groups.iter().flat_map(|g| g.embedding.iter().map(|&v| v as f32)));
    let list = FixedSizeListArray::try_new(item, m as i32, Arc::new(values), None)
        .map_err(|e| Error::bug_from("the embedding column assembles", e))?;
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(groups.iter().map(|g| g.group.as_str()))),
        Arc::new(UInt64Array::from_iter_values(groups.iter().map(|g| g.rows))),
        Arc::new(list),
    ];
    if a.lsh.is_some() {
        cols.push(Arc::new(UInt64Array::from_iter_values(groups.iter().map(|g| g.bucket.unwrap_or(0)))));
    }
    let batch =
        RecordBatch::try_new(schema.clone(), cols).map_err(|e| Error::bug_from("the output rows assemble", e))?;
    let mut out = AtomicFile::create(session, &a.output)?;
    let perr = |source| Error::Parquet { location: Location::file(&a.output), source };
    let props = parquet::file::properties::WriterProperties::builder()
        .set_key_value_metadata(Some(vec![sketchfit::atomic::parquet_mark()]))
        .build();
    let mut w = ArrowWriter::try_new(out.take_file(), schema, Some(props)).map_err(perr)?;
    w.write(&batch).map_err(perr)?;
    w.close().map_err(perr)?;
    let mut text = String::new();
    if let Some(q) = &a.query {
        let Some(gq) = groups.iter().find(|g| &g.group == q) else {
            return Err(Error::data(
                Location::default().column(a.group_by.clone()),
                format!("no group '{q}' to query"),
            ));
        };
        let mut near: Vec<(f64, &str)> = groups
            .iter()
            .filter(|g| &g.group != q)
            .map(|g| (dist(&g.embedding, &gq.embedding), g.group.as_str()))
            .collect();
        near.sort_by(|x, y| x.0.total_cmp(&y.0));
        text += &format!("nearest groups to '{q}' (kernel distance):\n");
        for (d, g) in near.iter().take(a.top) {
            text += &format!("  {g}\t{d:.6e}\n");
        }
    }
    out.commit()?;
    text += &format!("{} group embeddings (dimension {m}) written to {}\n", groups.len(), a.output.display());
    super::print_out(&text)
}
