//! Streaming use of a saved model: `predict` writes a Parquet file of predictions
//! (and kept columns), `evaluate` scores labeled data. Both read the same columns the
//! model was trained on and check the input dimension first.

use crate::session::Session;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use serde::Serialize;

use crate::atomic::AtomicFile;
use crate::error::{Error, Location, Result};
use crate::model::Model;
use crate::pipeline::spec::Task;
use crate::pipeline::stream::{check_nonnegative, progress, stream_ordered};
use crate::scoring::Scorer;
use crate::source::{Chunk, Classes, ColumnSpec, Dataset, FeatureColumns};

/// Where prediction reads rows from: Parquet files or record batches in memory.
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    /// Parquet paths or globs.
    Files(&'a [PathBuf]),
    /// Batches in memory (each one a unit, named `batch N` in messages).
    Batches(&'a [RecordBatch]),
}

fn open_for(
    session: &Session,
    model: &Model,
    inputs: &[PathBuf],
    with_truth: bool,
    keep: &[String],
) -> Result<Dataset> {
    open_rows(session, model, Rows::Files(inputs), with_truth, keep)
}

fn open_rows(session: &Session, model: &Model, rows: Rows<'_>, with_truth: bool, keep: &[String]) -> Result<Dataset> {
    let f = &model.header.features;
    let features = if f.list {
        FeatureColumns::List(f.columns[0].clone())
    } else {
        FeatureColumns::Columns(f.columns.iter().map(|c| glob::Pattern::escape(c)).collect())
    };
    let spec = ColumnSpec {
        features,
        label: if with_truth { model.header.label.clone() } else { None },
        targets: if with_truth { model.header.targets.clone() } else { Vec::new() },
        keep: keep.to_vec(),
        null_labels_unlabeled: false,
    };
    let ds = match rows {
        Rows::Files(paths) => Dataset::open(session, paths, spec)?,
        Rows::Batches(b) => Dataset::from_batches("record batches", b.to_vec(), spec)?,
    };
    if ds.dim() != f.dim {
        return Err(Error::data(
            ds.files[0].location().column(f.columns[0].clone()),
            format!("the input has {} features but the model was trained on {}", ds.dim(), f.dim),
        ));
    }
    Ok(ds)
}

/// Rows per chunk when the library scores rows in memory: enough for every worker to
/// have a chunk of a large batch, few enough that a chunk's input stays small.
const SCORE_CHUNK_ROWS: usize = 4096;

/// Metrics of a model on labeled data.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Evaluation {
    /// Classification metrics.
    Classification {
        /// Rows scored.
        rows: u64,
        /// Share of rows predicted right.
        accuracy: f64,
        /// Class labels.
        classes: Vec<String>,
        /// `confusion[true][predicted]`.
        confusion: Vec<Vec<u64>>,
        /// Per-class precision (NaN-free: 0 when nothing was predicted as the class).
        precision: Vec<f64>,
        /// Per-class recall.
        recall: Vec<f64>,
    },
    /// Regression metrics.
    Regression {
        /// Rows scored.
        rows: u64,
        /// Target names.
        targets: Vec<String>,
        /// Root mean squared error per target.
        rmse: Vec<f64>,
        /// Coefficient of determination per target.
        r2: Vec<f64>,
    },
}

impl Evaluation {
    /// A human-readable report.
    pub fn to_text(&self) -> String {
        match self {
            Evaluation::Classification { rows, accuracy, classes, confusion, precision, recall } => {
                let mut s = format!("rows: {rows}\naccuracy: {:.4}\n\nclass  precision  recall  support\n", accuracy);
                for (k, name) in classes.iter().enumerate() {
                    let support: u64 = confusion[k].iter().sum();
                    s += &format!("{name:>5}  {:>9.4}  {:>6.4}  {support:>7}\n", precision[k], recall[k]);
                }
                s += "\nconfusion (rows: true class, columns: predicted)\n";
                for (k, row) in confusion.iter().enumerate() {
                    s += &format!("{:>5} {}\n", classes[k], row.iter().map(|v| format!("{v:>6}")).collect::<String>());
                }
                s
            }
            Evaluation::Regression { rows, targets, rmse, r2 } => {
                let mut s = format!("rows: {rows}\n");
                for (k, t) in targets.iter().enumerate() {
                    s += &format!("{t}: rmse {:.6} r2 {:.6}\n", rmse[k], r2[k]);
                }
                s
            }
        }
    }
}

/// Scores a model on labeled files.
pub fn evaluate(
    session: &Session,
    model: &Model,
    inputs: &[PathBuf],
    chunk_rows: usize,
    threads: usize,
    show: bool,
) -> Result<Evaluation> {
    let ds = open_for(session, model, inputs, true, &[])?;
    let bar = progress(ds.total_rows(), "evaluate", show);
    let h = &model.header;
    let c = h.outputs;
    let ncls = h.classes.as_ref().map_or(0, Classes::len);
    let mut confusion = vec![vec![0u64; ncls]; ncls];
    let (mut sse, mut sum, mut sumsq) = (vec![0.0; c], vec![0.0; c], vec![0.0; c]);
    let mut rows = 0u64;
    let head = model.head();
    let work = |ch: &Chunk, s: &mut Scorer| -> Result<(Vec<f64>, Vec<usize>)> {
        check_nonnegative(model.pipeline.needs_nonnegative(), ch, &h.features)?;
        let scores = s.scores(&model.pipeline, &head, &ch.x, ch.rows);
        let truth = match (&h.task, &h.classes) {
            (Task::Classification, Some(classes)) => {
                let loc = ch.location.clone().column(h.label.clone().unwrap_or_default());
                let labels =
                    ch.labels.as_ref().ok_or_else(|| Error::bug("classification model read no label column"))?;
                classes.encode(labels, &loc)?.iter().map(|&t| t as usize).collect()
            }
            _ => Vec::new(),
        };
        Ok((scores, truth))
    };
    stream_ordered(&ds, &ds.units(), chunk_rows.max(1), threads, &work, &mut |ch: &Chunk, (scores, truth)| {
        if h.classes.is_some() {
            for (&t, p) in truth.iter().zip(model.classify(&scores)) {
                confusion[t][p] += 1;
            }
        } else {
            for r in 0..ch.rows {
                for k in 0..c {
                    let y = ch.targets[r * c + k];
                    sse[k] += (scores[r * c + k] - y).powi(2);
                    sum[k] += y;
                    sumsq[k] += y * y;
                }
            }
        }
        rows += ch.rows as u64;
        bar.inc(ch.rows as u64);
        Ok(())
    })?;
    bar.finish_and_clear();
    let n = rows as f64;
    Ok(match &h.classes {
        Some(classes) => {
            let right: u64 = (0..ncls).map(|k| confusion[k][k]).sum();
            let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
            Evaluation::Classification {
                rows,
                accuracy: ratio(right, rows),
                classes: (0..ncls).map(|k| classes.name(k)).collect(),
                precision: (0..ncls)
                    .map(|k| ratio(confusion[k][k], (0..ncls).map(|t| confusion[t][k]).sum()))
                    .collect(),
                recall: (0..ncls).map(|k| ratio(confusion[k][k], confusion[k].iter().sum())).collect(),
                confusion,
            }
        }
        None => Evaluation::Regression {
            rows,
            targets: h.targets.clone(),
            rmse: sse.iter().map(|s| (s / n).sqrt()).collect(),
            r2: (0..c)
                .map(|k| {
                    let tss = sumsq[k] - sum[k] * sum[k] / n;
                    if tss > 0.0 {
                        1.0 - sse[k] / tss
                    } else {
                        0.0
                    }
                })
                .collect(),
        },
    })
}

/// The output fields of the kept columns, as the first input file has them.
fn kept_fields(ds: &Dataset, keep: &[String]) -> Result<Vec<Field>> {
    keep.iter()
        .map(|k| {
            ds.files[0]
                .schema()
                .fields()
                .iter()
                .find(|f| f.name() == k)
                .map(|f| f.as_ref().clone())
                .ok_or_else(|| Error::data(ds.files[0].location().column(k.clone()), "kept column not found"))
        })
        .collect()
}

/// Options of [`predict`].
#[derive(Debug, Clone, Default)]
pub struct PredictOptions {
    /// The session: storage options, and the inputs no output may replace.
    pub session: Session,
    /// Columns copied through.
    pub keep: Vec<String>,
    /// Write the scores `f_k(x)` too.
    pub scores: bool,
    /// Rows per chunk.
    pub chunk_rows: usize,
    /// Threads.
    pub threads: usize,
    /// Show a progress bar.
    pub progress: bool,
}

/// Bytes of a `transform` chunk's output features. The batch that owns them is freed
/// after it is written, and an allocation of 32 MiB or more (glibc's largest mmap
/// threshold) is mapped afresh each time and faulted in page by page: at 8,192 rows of
/// 1,024 features that was most of `transform`'s system time (`SECTIONS=score
/// scripts/bench.sh`). Below it, freed chunks are reused.
const OUTPUT_CHUNK_BYTES: usize = 16 << 20;

/// Bytes of encoded rows a writer holds before it flushes a row group: the writer buffers a
/// whole row group, and its default of 2^20 rows of 1,024 PCA features is gigabytes,
/// where the output should cost what a chunk costs.
const ROW_GROUP_BYTES: usize = 64 << 20;

/// Writer properties whose row groups hold about [`ROW_GROUP_BYTES`]: by rows of
/// `row_bytes` each (at least 1,024 rows, at most the writer's default), and by the
/// writer's own estimate of the encoded size (for string columns, whose width varies).
pub(crate) fn bounded_writer(row_bytes: usize) -> WriterProperties {
    let rows = (ROW_GROUP_BYTES / row_bytes.max(1)).clamp(1024, 1 << 20);
    WriterProperties::builder()
        .set_max_row_group_row_count(Some(rows))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .set_key_value_metadata(Some(vec![crate::atomic::parquet_mark()]))
        .build()
}

/// The memory line a scoring command says before it reads (with its progress bar): what
/// the stream holds at most whatever the rows — the chunks in flight (a token per chunk
/// bounds them at the workers + 2, and one more is being decoded), each worker's scratch,
/// the writer's row group and any object-store fetches — beside the model. `out_row` is
/// one row's bytes as scored, before encoding.
fn memory_line(ds: &Dataset, opts: &PredictOptions, out_row: usize, scratch: u64) -> String {
    use crate::pipeline::plan::mib;
    let threads = opts.threads.max(1);
    let rows = opts.chunk_rows.max(1).min(usize::try_from(ds.total_rows()).unwrap_or(usize::MAX)).max(1);
    let chunk = (rows * (4 * ds.dim() + out_row + 8 * opts.keep.len())) as u64;
    let alive = threads as u64 + 3;
    let mut line = format!(
        "memory: chunks {} ({alive} of {rows} rows at most), scoring scratch {} ({threads} thread(s)), output row group ≤ {}",
        mib(alive * chunk),
        mib(threads as u64 * scratch),
        mib(ROW_GROUP_BYTES as u64)
    );
    let fetch = ds.remote_bytes();
    if fetch > 0 {
        line += &format!(
            ", object-store fetches {} (the row group decoded, the next, and one buffer kept for reuse)",
            mib(fetch)
        );
    }
    line + "; besides the model"
}

/// Writes predictions for `inputs` to the Parquet file `output`, atomically.
pub fn predict(model: &Model, inputs: &[PathBuf], output: &Path, opts: &PredictOptions) -> Result<u64> {
    let ds = open_for(&opts.session, model, inputs, false, &opts.keep)?;
    let schema = prediction_schema(model, &ds, opts)?;
    if opts.progress {
        let out_row = 8 * (1 + model.header.outputs + score_names(model, opts).len());
        let scratch = crate::scoring::scratch_bytes(&model.pipeline, 0);
        eprintln!("{}", memory_line(&ds, opts, out_row, scratch));
    }
    let mut out = AtomicFile::create(&opts.session, output)?;
    // Kept columns are counted at 8 bytes: a string column's rows may be longer.
    let props = bounded_writer(8 * schema.fields().len());
    let mut writer = ArrowWriter::try_new(out.take_file(), schema.clone(), Some(props))
        .map_err(|source| Error::Parquet { location: Location::file(output), source })?;
    let bar = progress(ds.total_rows(), "predict", opts.progress);
    let mut rows = 0u64;
    predict_stream(model, &ds, &schema, opts, &mut |batch| {
        writer.write(&batch).map_err(|source| Error::Parquet { location: Location::file(output), source })?;
        rows += batch.num_rows() as u64;
        bar.inc(batch.num_rows() as u64);
        Ok(())
    })?;
    bar.finish_and_clear();
    writer.close().map_err(|source| Error::Parquet { location: Location::file(output), source })?;
    out.commit()?;
    Ok(rows)
}

/// Predictions for rows in memory or in files, returned as record batches of the
/// columns `predict` writes (kept columns, `prediction…`, and `score_…` when asked).
pub fn predict_rows(model: &Model, rows: Rows<'_>, opts: &PredictOptions) -> Result<Vec<RecordBatch>> {
    let ds = open_rows(&opts.session, model, rows, false, &opts.keep)?;
    let schema = prediction_schema(model, &ds, opts)?;
    let mut out = Vec::new();
    predict_stream(model, &ds, &schema, opts, &mut |batch| {
        out.push(batch);
        Ok(())
    })?;
    Ok(out)
}

/// Decision values of every row, row-major, and the row count: what the library's
/// bindings return as one array. A classifier's are per class
/// ([`Model::class_scores`]: one column for binary one-vs-all, else one per class, ECOC
/// included); with `pca`, the PCA features instead.
pub fn score_rows(
    session: &Session,
    model: &Model,
    rows: Rows<'_>,
    pca: bool,
    threads: usize,
) -> Result<(Vec<f64>, usize)> {
    if pca && model.header.projections.is_empty() {
        return Err(
            model.refuse("the model has no PCA projection (it was trained without [pca]); nothing to transform")
        );
    }
    let ds = open_rows(session, model, rows, false, &[])?;
    let mut out = Vec::new();
    let mut n = 0;
    let (head, projectors) = (model.head(), model.projectors());
    let work = |ch: &Chunk, s: &mut Scorer| -> Result<Vec<f64>> {
        check_nonnegative(model.pipeline.needs_nonnegative(), ch, &model.header.features)?;
        Ok(if pca {
            s.project(&model.pipeline, &projectors, &ch.x, ch.rows)
        } else {
            model.class_scores(&s.scores(&model.pipeline, &head, &ch.x, ch.rows))
        })
    };
    stream_ordered(&ds, &ds.units(), SCORE_CHUNK_ROWS, threads, &work, &mut |ch, v| {
        out.extend_from_slice(&v);
        n += ch.rows;
        Ok(())
    })?;
    Ok((out, n))
}

/// One column per class (binary one-vs-all: the second class's), whatever the code.
fn score_names(model: &Model, opts: &PredictOptions) -> Vec<String> {
    match (&model.header.classes, opts.scores) {
        (Some(cl), true) => match model.output_code().score_columns() {
            1 => vec![format!("score_{}", cl.name(1))],
            k => (0..k).map(|j| format!("score_{}", cl.name(j))).collect(),
        },
        _ => Vec::new(),
    }
}

fn prediction_schema(model: &Model, ds: &Dataset, opts: &PredictOptions) -> Result<Arc<Schema>> {
    let h = &model.header;
    let mut fields = kept_fields(ds, &opts.keep)?;
    let pred_names: Vec<String> = match h.task {
        Task::Classification => vec!["prediction".into()],
        Task::Regression if h.outputs == 1 => vec!["prediction".into()],
        Task::Regression => h.targets.iter().map(|t| format!("prediction_{t}")).collect(),
    };
    let score_names = score_names(model, opts);
    let pred_type = match &h.classes {
        Some(Classes::Int(_)) => DataType::Int64,
        Some(Classes::Str(_)) => DataType::Utf8,
        None => DataType::Float64,
    };
    for n in pred_names.iter().chain(&score_names) {
        if opts.keep.contains(n) {
            return Err(Error::usage("--keep", format!("kept column '{n}' clashes with an output column")));
        }
        fields.push(Field::new(n, if score_names.contains(n) { DataType::Float64 } else { pred_type.clone() }, false));
    }
    Ok(Arc::new(Schema::new(fields)))
}

fn predict_stream(
    model: &Model,
    ds: &Dataset,
    schema: &Arc<Schema>,
    opts: &PredictOptions,
    emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let c = model.header.outputs;
    let scored = score_names(model, opts).len();
    let head = model.head();
    let work = |ch: &Chunk, s: &mut Scorer| -> Result<RecordBatch> {
        check_nonnegative(model.pipeline.needs_nonnegative(), ch, &model.header.features)?;
        let scores = s.scores(&model.pipeline, &head, &ch.x, ch.rows);
        let mut cols: Vec<ArrayRef> = ch.keep.clone();
        match &model.header.classes {
            Some(classes) => {
                let idx = model.classify(&scores);
                cols.push(match classes {
                    Classes::Int(v) => Arc::new(Int64Array::from_iter_values(idx.iter().map(|&k| v[k]))),
                    Classes::Str(v) => Arc::new(StringArray::from_iter_values(idx.iter().map(|&k| v[k].as_str()))),
                });
                if scored > 0 {
                    let per_class = model.class_scores(&scores);
                    for k in 0..scored {
                        cols.push(Arc::new(Float64Array::from_iter_values(
                            (0..ch.rows).map(|r| per_class[r * scored + k]),
                        )));
                    }
                }
            }
            None => {
                for k in 0..c {
                    cols.push(Arc::new(Float64Array::from_iter_values((0..ch.rows).map(|r| scores[r * c + k]))));
                }
            }
        }
        RecordBatch::try_new(schema.clone(), cols)
            .map_err(|e| Error::data(ch.location.clone(), format!("cannot assemble output rows: {e}")))
    };
    stream_ordered(ds, &ds.units(), opts.chunk_rows.max(1), opts.threads, &work, &mut |_, batch| emit(batch))
}

/// Writes the PCA features `p(x)` of `inputs` (a `FixedSizeList<f32, ΣE>` column `pca`,
/// after the kept columns) to `output`, atomically.
pub fn transform(model: &Model, inputs: &[PathBuf], output: &Path, opts: &PredictOptions) -> Result<u64> {
    let e: usize = model.header.projections.iter().map(|p| p.components).sum();
    if e == 0 {
        return Err(
            model.refuse("the model has no PCA projection (it was trained without [pca]); nothing to transform")
        );
    }
    let ds = open_for(&opts.session, model, inputs, false, &opts.keep)?;
    // A chunk's features at most OUTPUT_CHUNK_BYTES: the batch owns them until it is
    // written, so each chunk's buffer is a fresh allocation.
    let opts = &PredictOptions {
        chunk_rows: opts.chunk_rows.clamp(1, (OUTPUT_CHUNK_BYTES / (4 * e)).max(64)),
        ..opts.clone()
    };
    if opts.progress {
        let scratch = crate::scoring::scratch_bytes(&model.pipeline, e);
        eprintln!("{}", memory_line(&ds, opts, 4 * e, scratch));
    }
    let mut fields = kept_fields(&ds, &opts.keep)?;
    if opts.keep.iter().any(|k| k == "pca") {
        return Err(Error::usage("--keep", "kept column 'pca' clashes with the output column"));
    }
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    fields.push(Field::new("pca", DataType::FixedSizeList(item.clone(), e as i32), false));
    let schema = Arc::new(Schema::new(fields));
    let mut out = AtomicFile::create(&opts.session, output)?;
    let props = bounded_writer(4 * e + 8 * opts.keep.len());
    let mut writer = ArrowWriter::try_new(out.take_file(), schema.clone(), Some(props))
        .map_err(|source| Error::Parquet { location: Location::file(output), source })?;
    let bar = progress(ds.total_rows(), "transform", opts.progress);
    let mut rows = 0u64;
    let projectors = model.projectors();
    let work = |ch: &Chunk, s: &mut Scorer| -> Result<RecordBatch> {
        check_nonnegative(model.pipeline.needs_nonnegative(), ch, &model.header.features)?;
        let p = s.project_as(&model.pipeline, &projectors, &ch.x, ch.rows, |v| v as f32);
        let values = arrow_array::Float32Array::from(p);
        let list = arrow_array::FixedSizeListArray::try_new(item.clone(), e as i32, Arc::new(values), None)
            .map_err(|err| Error::data(ch.location.clone(), format!("cannot assemble PCA features: {err}")))?;
        let mut cols: Vec<ArrayRef> = ch.keep.clone();
        cols.push(Arc::new(list));
        RecordBatch::try_new(schema.clone(), cols)
            .map_err(|err| Error::data(ch.location.clone(), format!("cannot assemble output rows: {err}")))
    };
    stream_ordered(&ds, &ds.units(), opts.chunk_rows.max(1), opts.threads, &work, &mut |ch, batch| {
        writer.write(&batch).map_err(|source| Error::Parquet { location: Location::file(output), source })?;
        rows += ch.rows as u64;
        bar.inc(ch.rows as u64);
        Ok(())
    })?;
    bar.finish_and_clear();
    writer.close().map_err(|source| Error::Parquet { location: Location::file(output), source })?;
    out.commit()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    #[test]
    fn output_row_groups_hold_about_64_mib_whatever_the_row_width() {
        let rows = |bytes| super::bounded_writer(bytes).max_row_group_row_count().unwrap_or(usize::MAX);
        assert_eq!(super::bounded_writer(8).max_row_group_bytes(), Some(64 << 20));
        // 1024 PCA features: 16,384 rows a group, where the writer's default held 2^20.
        assert_eq!(rows(4 * 1024), 16384);
        assert_eq!(rows(8), 1 << 20);
        assert_eq!(rows(1 << 30), 1024);
    }
}
