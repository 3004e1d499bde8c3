//! Parquet → [`Chunk`] stream: file globs, column selection (many numeric columns or
//! one list column), casts to f32, label decoding, the null/NaN policy, and the
//! work units (file, row group) that shards and progress are counted in.
//!
//! A file's footer is read once ([`Dataset::open`]); every unit is then read with
//! only the columns it needs. A chunk never spans a row group, so every data error
//! names its file, row group, row and column.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int64Type};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;

use crate::error::{Error, Location, Result};
use crate::session::Session;

pub(crate) mod cast;
mod columns;
mod folds;
mod input;
mod labels;
mod remote;

use columns::{cast_to, check_no_nulls_at, column_indices, list_to_rows, resolve_features};
pub use columns::{ColumnSpec, FeatureColumns, ResolvedFeatures};
pub use folds::fold_of;
use input::{open_files, reader_options};
pub use labels::Classes;
use labels::{is_label_type, label_values};

/// One unit of work: a row group of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    /// Index into [`Dataset::files`].
    pub file: usize,
    /// Row group within the file.
    pub row_group: usize,
    /// Rows in it.
    pub rows: usize,
}

/// A block of rows, row-major.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// Rows.
    pub rows: usize,
    /// Features, `rows × d`.
    pub x: Vec<f32>,
    /// Regression targets, `rows × c` (empty without targets).
    pub targets: Vec<f64>,
    /// The label column, if asked for.
    pub labels: Option<ArrayRef>,
    /// Columns copied through, in [`ColumnSpec::keep`] order.
    pub keep: Vec<ArrayRef>,
    /// Where the rows come from (file and row group).
    pub location: Location,
    /// Index of the first row within its row group.
    pub first_row: usize,
}

/// An opened input: a Parquet file, or Arrow record batches held in memory (each batch
/// then plays the part of a row group).
#[derive(Debug, Clone)]
pub struct InputFile {
    /// Path (for batches in memory, the name they were given, shown in messages).
    pub path: PathBuf,
    backing: Backing,
}

#[derive(Debug, Clone)]
pub(super) enum Backing {
    Parquet(ArrowReaderMetadata),
    /// Parquet in an object store, read by range.
    Remote(ArrowReaderMetadata, Arc<crate::remote::Object>),
    Memory {
        schema: SchemaRef,
        batches: Arc<[RecordBatch]>,
    },
}

/// A set of Parquet files with one checked layout.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The files, in the order given (globs sorted).
    pub files: Vec<InputFile>,
    /// What is read.
    pub spec: ColumnSpec,
    /// Features resolved on the first file.
    pub features: ResolvedFeatures,
    /// Feature buffers of consumed chunks, reused by the next chunks: a fresh buffer per
    /// chunk is tens of MiB of page faults and zeroing (the system time of scoring).
    spare: std::sync::Arc<std::sync::Mutex<Vec<Vec<f32>>>>,
    /// Row groups of files in an object store being fetched ahead of their reading
    /// ([`Dataset::prefetch`]), at most [`PREFETCH_UNITS`].
    prefetched: std::sync::Arc<std::sync::Mutex<Vec<remote::Prefetch>>>,
    /// The session whose files these are (local files are reopened through it).
    session: Session,
}

/// Row groups of a remote file fetched ahead of the one being decoded.
pub const PREFETCH_UNITS: usize = 1;

pub(super) fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Expands paths and globs (each glob sorted); a glob that matches nothing is an error.
/// A URL's glob lists its prefix in the object store; `file://` URLs are local paths.
pub fn expand_paths(session: &Session, patterns: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in patterns {
        crate::remote::check_scheme(p)?;
        if crate::remote::is_remote(p) {
            let s = p.to_string_lossy();
            if is_glob(&s) {
                out.extend(session.storage().glob(&s)?);
            } else {
                out.push(p.clone());
            }
            continue;
        }
        let p = &crate::remote::local(p);
        let s = p.to_string_lossy();
        if is_glob(&s) {
            let paths = glob::glob(&s).map_err(|e| Error::config("input", s.to_string(), format!("bad glob: {e}")))?;
            let mut matched: Vec<PathBuf> = paths.filter_map(std::result::Result::ok).filter(|p| p.is_file()).collect();
            if matched.is_empty() {
                return Err(Error::data(Location::file(p), "no file matches this pattern"));
            }
            matched.sort();
            out.extend(matched);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

pub(super) fn is_numeric(t: &DataType) -> bool {
    t.is_integer() || t.is_floating()
}

pub(super) fn describe_columns(schema: &Schema) -> String {
    let names: Vec<&str> = schema.fields().iter().take(12).map(|f| f.name().as_str()).collect();
    let more = if schema.fields().len() > 12 { ", …" } else { "" };
    format!("{}{more}", names.join(", "))
}

impl Dataset {
    /// The session the files were opened in (batches in memory: a fresh one).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The identities of the files, in order (see [`InputFile::identity`]).
    pub fn identity(&self) -> Vec<String> {
        self.files.iter().map(InputFile::identity).collect()
    }

    /// Opens every file, resolves the columns on the first and checks every other file
    /// against it. Reads footers only (and one row for a `List` column's length).
    /// Every file is registered in `session` as an input of its run.
    pub fn open(session: &Session, paths: &[PathBuf], spec: ColumnSpec) -> Result<Dataset> {
        let paths = expand_paths(session, paths)?;
        if paths.is_empty() {
            return Err(Error::config("input", "files", "no input files given"));
        }
        let files = open_files(session, &paths)?;
        Dataset::from_inputs(session, files, spec)
    }

    /// Arrow record batches held in memory, checked like files: `name` stands for the
    /// file in messages, and each batch for a row group. Every batch must have the
    /// first one's schema.
    pub fn from_batches(name: &str, batches: Vec<RecordBatch>, spec: ColumnSpec) -> Result<Dataset> {
        let loc = Location::memory(name);
        let schema = batches.first().map(RecordBatch::schema).ok_or_else(|| Error::data(loc.clone(), "no batches"))?;
        let batches: Vec<RecordBatch> = batches.into_iter().filter(|b| b.num_rows() > 0).collect();
        for (i, b) in batches.iter().enumerate() {
            if b.schema().fields() != schema.fields() {
                return Err(Error::data(
                    loc.clone().row_group(i),
                    "this batch's schema differs from the first batch's; give batches of one schema",
                ));
            }
        }
        let input =
            InputFile { path: PathBuf::from(name), backing: Backing::Memory { schema, batches: batches.into() } };
        Dataset::from_inputs(&Session::new(), vec![input], spec)
    }

    fn from_inputs(session: &Session, files: Vec<InputFile>, spec: ColumnSpec) -> Result<Dataset> {
        for f in &files {
            if f.rows() == 0 {
                return Err(Error::data(f.location(), "the file has no rows; remove it from the inputs"));
            }
        }
        let first = &files[0];
        let features = resolve_features(session, first, &spec)?;
        // Columns are read by name: a name that appears twice would read one column twice.
        let used = features.columns.iter().chain(&spec.label).chain(&spec.targets).chain(&spec.keep);
        for name in used {
            for f in &files {
                let n = f.schema().fields().iter().filter(|x| x.name() == name).count();
                if n > 1 {
                    return Err(Error::data(
                        f.location().column(name.clone()),
                        format!("the file has {n} columns of this name; rename them so that each is read once"),
                    ));
                }
            }
        }
        let mut checked: Vec<(String, &str)> = features.columns.iter().map(|c| (c.clone(), "feature")).collect();
        if let Some(l) = &spec.label {
            checked.push((l.clone(), "label"));
        }
        checked.extend(spec.targets.iter().map(|t| (t.clone(), "target")));
        checked.extend(spec.keep.iter().map(|t| (t.clone(), "kept")));
        for (name, role) in &checked {
            let field = first.field(name).ok_or_else(|| {
                Error::data(
                    first.location().column(name.clone()),
                    format!("{role} column not found; the file has columns {}", describe_columns(first.schema())),
                )
            })?;
            let t = field.data_type();
            let ok = match *role {
                "label" => is_label_type(t),
                "target" => is_numeric(t),
                _ => true,
            };
            if !ok {
                let want = if *role == "label" {
                    "integers or strings (for real-valued targets use task = \"regression\")"
                } else {
                    "numeric"
                };
                return Err(Error::data(
                    first.location().column(name.clone()),
                    format!("{role} column has type {t}; it must be {want}"),
                ));
            }
        }
        for f in &files[1..] {
            for (name, role) in &checked {
                let want = first.field(name).map(|x| x.data_type().clone());
                match (f.field(name), want) {
                    (None, _) => {
                        return Err(Error::data(
                            f.location().column(name.clone()),
                            format!(
                                "{role} column missing here but present in {}: the files' schemas differ",
                                first.path.display()
                            ),
                        ))
                    }
                    (Some(got), Some(want)) if got.data_type() != &want => {
                        return Err(Error::data(
                            f.location().column(name.clone()),
                            format!(
                                "{role} column has type {} here but {want} in {}: the files' schemas differ; cast them to one type",
                                got.data_type(),
                                first.path.display()
                            ),
                        ))
                    }
                    _ => {}
                }
            }
        }
        Ok(Dataset {
            files,
            spec,
            features,
            spare: Default::default(),
            prefetched: Default::default(),
            session: session.clone(),
        })
    }

    /// Every (file, row group) in order.
    pub fn units(&self) -> Vec<Unit> {
        self.files
            .iter()
            .enumerate()
            .flat_map(|(fi, f)| {
                f.row_groups().into_iter().enumerate().map(move |(rg, rows)| Unit { file: fi, row_group: rg, rows })
            })
            .collect()
    }

    /// Total rows (from the footers).
    pub fn total_rows(&self) -> u64 {
        self.files.iter().map(InputFile::rows).sum()
    }

    /// Input dimension.
    pub fn dim(&self) -> usize {
        self.features.dim
    }

    fn batches(
        &self,
        unit: Unit,
        names: &[&str],
        chunk_rows: usize,
    ) -> Result<Box<dyn Iterator<Item = Result<RecordBatch>> + '_>> {
        let file = &self.files[unit.file];
        let loc = file.location().row_group(unit.row_group);
        let meta = match &file.backing {
            Backing::Parquet(meta) => meta,
            Backing::Remote(meta, object) => {
                let indices = column_indices(file.schema(), names);
                let key = (unit.file, unit.row_group, indices.clone());
                let ahead = self
                    .prefetched
                    .lock()
                    .ok()
                    .and_then(|mut list| list.iter().position(|p| p.key == key).map(|i| list.remove(i)));
                let fetch = match ahead {
                    Some(p) => p,
                    None => remote::Prefetch::start(object, meta, unit.file, unit.row_group, &indices)?,
                };
                let reader = remote::reader(fetch.wait()?, meta, (unit.row_group, indices), chunk_rows, None, &loc)?;
                return Ok(Box::new(
                    reader.map(move |b| b.map_err(|e| Error::Parquet { location: loc.clone(), source: e.into() })),
                ));
            }
            Backing::Memory { batches, schema } => {
                let idx = column_indices(schema, names);
                let batch = batches
                    .get(unit.row_group)
                    .ok_or_else(|| Error::bug("a unit names a batch that is not held"))?
                    .project(&idx)
                    .map_err(|e| Error::data(loc.clone(), format!("cannot select the columns: {e}")))?;
                let step = chunk_rows.max(1);
                let n = batch.num_rows();
                return Ok(Box::new((0..n).step_by(step).map(move |at| Ok(batch.slice(at, step.min(n - at))))));
            }
        };
        let handle = crate::atomic::open_input(&self.session, &file.path)?;
        let mask = ProjectionMask::roots(meta.parquet_schema(), column_indices(file.schema(), names));
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(handle, meta.clone())
            .with_projection(mask)
            .with_row_groups(vec![unit.row_group])
            .with_batch_size(chunk_rows.max(1))
            .build()
            .map_err(|source| Error::Parquet { location: loc.clone(), source })?;
        Ok(Box::new(reader.map(move |b| b.map_err(|e| Error::Parquet { location: loc.clone(), source: e.into() }))))
    }

    /// Gives a consumed chunk's feature buffer back for the next chunks (at most a few
    /// are kept).
    pub fn recycle(&self, x: Vec<f32>) {
        if let Ok(mut spare) = self.spare.lock() {
            if spare.len() < 8 {
                spare.push(x);
            }
        }
    }

    /// The columns a unit is read with.
    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.features.columns.iter().map(String::as_str).collect();
        names.extend(self.spec.label.as_deref());
        names.extend(self.spec.targets.iter().map(String::as_str));
        names.extend(self.spec.keep.iter().map(String::as_str));
        names
    }

    /// Starts fetching `unit` when its file is in an object store, so that its bytes
    /// arrive while the unit before it is decoded ([`PREFETCH_UNITS`] ahead at most; a
    /// local file or a fault does nothing here, the read itself reports a fault).
    pub fn prefetch(&self, unit: Unit) {
        self.prefetch_columns(unit, &self.names(), PREFETCH_UNITS);
    }

    /// Starts fetching `unit`'s columns `names`, keeping at most `ahead` fetches.
    fn prefetch_columns(&self, unit: Unit, names: &[&str], ahead: usize) {
        let Some(file) = self.files.get(unit.file) else { return };
        let Backing::Remote(meta, object) = &file.backing else { return };
        let indices = column_indices(file.schema(), names);
        let Ok(mut list) = self.prefetched.lock() else { return };
        if list.iter().any(|p| p.key == (unit.file, unit.row_group, indices.clone())) {
            return;
        }
        if let Ok(p) = remote::Prefetch::start(object, meta, unit.file, unit.row_group, &indices) {
            list.push(p);
        }
        // The unit about to be read is still in the list (the reader takes it next):
        // `ahead` beyond it, or a prefetch would evict the fetch its reader waits for.
        while list.len() > ahead + 1 {
            list.remove(0);
        }
    }

    /// The fetched bytes a pass over remote files holds at most: the unit being decoded,
    /// the ones fetched ahead and the fetch buffer kept for reuse, each the largest row
    /// group's projected chunks (0 for local files).
    pub fn remote_bytes(&self) -> u64 {
        let names = self.names();
        let largest = self
            .files
            .iter()
            .filter_map(|f| match &f.backing {
                Backing::Remote(meta, _) => Some(remote::largest_unit(meta, &column_indices(f.schema(), &names))),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        largest * (PREFETCH_UNITS as u64 + 2)
    }

    /// Reads one unit in chunks of at most `chunk_rows` rows, calling `f` on each.
    pub fn read_unit(&self, unit: Unit, chunk_rows: usize, f: &mut dyn FnMut(Chunk) -> Result<()>) -> Result<()> {
        let names = self.names();
        let file = &self.files[unit.file];
        let mut first_row = 0;
        for batch in self.batches(unit, &names, chunk_rows)? {
            let batch = batch?;
            let loc = file.location().row_group(unit.row_group);
            let chunk = self.to_chunk(&batch, loc, first_row)?;
            first_row += chunk.rows;
            f(chunk)?;
        }
        Ok(())
    }

    fn to_chunk(&self, batch: &RecordBatch, location: Location, first_row: usize) -> Result<Chunk> {
        let rows = batch.num_rows();
        let d = self.features.dim;
        let col = |name: &str| -> Result<&ArrayRef> {
            batch
                .column_by_name(name)
                .ok_or_else(|| Error::data(location.clone().column(name), "column missing from the row group"))
        };
        // A recycled buffer is overwritten whole below; only a fresh one is zeroed.
        let mut x = self.spare.lock().ok().and_then(|mut s| s.pop()).unwrap_or_default();
        x.resize(rows * d, 0.0);
        if self.features.list {
            let name = &self.features.columns[0];
            list_to_rows(col(name)?, d, &mut x, &location.clone().column(name.clone()), first_row)?;
        } else {
            // Transpose in row blocks so the writes of one block stay in cache.
            let mut cols = Vec::with_capacity(d);
            for name in &self.features.columns {
                let loc = location.clone().column(name.clone());
                let a = col(name)?;
                check_no_nulls_at(a.as_ref(), &loc, first_row)?;
                cols.push(cast_to(a, &DataType::Float32, &loc)?);
            }
            let vals: Vec<&[f32]> = cols.iter().map(|c| c.as_primitive::<Float32Type>().values().as_ref()).collect();
            const BLOCK: usize = 128;
            for start in (0..rows).step_by(BLOCK) {
                let end = (start + BLOCK).min(rows);
                for (j, v) in vals.iter().enumerate() {
                    for r in start..end {
                        x[r * d + j] = v[r];
                    }
                }
            }
            if let Some(pos) = x.iter().position(|v| !v.is_finite()) {
                let (r, j) = (pos / d, pos % d);
                let name = &self.features.columns[j];
                return Err(Error::data(
                    location.clone().column(name.clone()).row(first_row + r),
                    columns::non_finite_message(col(name)?, r, "value"),
                ));
            }
        }
        let c = self.spec.targets.len();
        let mut targets = vec![0f64; rows * c];
        for (k, name) in self.spec.targets.iter().enumerate() {
            let loc = location.clone().column(name.clone());
            let a = col(name)?;
            check_no_nulls_at(a.as_ref(), &loc, first_row)?;
            let a = cast_to(a, &DataType::Float64, &loc)?;
            for (r, &v) in a.as_primitive::<Float64Type>().values().iter().enumerate() {
                if !v.is_finite() {
                    return Err(Error::data(loc.row(first_row + r), format!("target {v} is not finite")));
                }
                targets[r * c + k] = v;
            }
        }
        let labels = match &self.spec.label {
            Some(name) => {
                let a = col(name)?.clone();
                if !self.spec.null_labels_unlabeled {
                    check_no_nulls_at(a.as_ref(), &location.clone().column(name.clone()), first_row)?;
                }
                Some(a)
            }
            None => None,
        };
        let keep = self.spec.keep.iter().map(|n| col(n).cloned()).collect::<Result<Vec<_>>>()?;
        Ok(Chunk { rows, x, targets, labels, keep, location, first_row })
    }

    /// The sorted distinct labels, from a scan of the label column alone.
    pub fn scan_classes(&self) -> Result<Classes> {
        let name = self
            .spec
            .label
            .as_deref()
            .ok_or_else(|| Error::config("pipeline", "data.label", "classification needs a label column"))?;
        let is_int = self.files[0].field(name).is_some_and(|f| label_values(f.data_type()).is_integer());
        let mut ints = BTreeSet::new();
        let mut strs = BTreeSet::new();
        let units = self.units();
        // A label column's chunks are small: many are fetched at once, so a remote
        // scan pays the store's latency a few times, not once per row group.
        const LABELS_AHEAD: usize = 16;
        for (k, &unit) in units.iter().enumerate() {
            for next in units.iter().skip(k + 1).take(LABELS_AHEAD) {
                self.prefetch_columns(*next, &[name], LABELS_AHEAD);
            }
            let mut first_row = 0;
            for batch in self.batches(unit, &[name], 65_536)? {
                let batch = batch?;
                let loc = self.files[unit.file].location().row_group(unit.row_group).column(name);
                let a = batch
                    .column_by_name(name)
                    .ok_or_else(|| Error::data(loc.clone(), "column missing from the row group"))?;
                if !self.spec.null_labels_unlabeled {
                    check_no_nulls_at(a.as_ref(), &loc, first_row)?;
                }
                if is_int {
                    let v = cast_to(a, &DataType::Int64, &loc)?;
                    ints.extend(v.as_primitive::<Int64Type>().iter().flatten());
                } else {
                    let s = cast_to(a, &DataType::Utf8, &loc)?;
                    strs.extend(s.as_string::<i32>().iter().flatten().map(str::to_string));
                }
                first_row += batch.num_rows();
            }
        }
        Ok(if is_int { Classes::Int(ints.into_iter().collect()) } else { Classes::Str(strs.into_iter().collect()) })
    }
}
