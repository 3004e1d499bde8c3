//! Parquet → [`Chunk`] stream: file globs, column selection (many numeric columns or
//! one list column), casts to f32, label decoding, the null/NaN policy, and the
//! work units (file, row group) that shards and progress are counted in.
//!
//! A file's footer is read once ([`Dataset::open`]); every unit is then read with
//! only the columns it needs. A chunk never spans a row group, so every data error
//! names its file, row group, row and column.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Location, Result};

/// How the feature vector is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureColumns {
    /// Many numeric columns, named or matched by globs (`px*`), in that order.
    Columns(Vec<String>),
    /// One `List` / `LargeList` / `FixedSizeList` column of numbers.
    List(String),
}

/// What to read from each file.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnSpec {
    /// Features.
    pub features: FeatureColumns,
    /// Class label column (classification).
    pub label: Option<String>,
    /// Target columns (regression).
    pub targets: Vec<String>,
    /// Columns copied through to an output.
    pub keep: Vec<String>,
    /// Rows whose label is null are unlabeled rows instead of an error.
    pub null_labels_unlabeled: bool,
}

/// Features as resolved on the first file: the exact column names, and `d`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedFeatures {
    /// Feature column names (one entry for a list column).
    pub columns: Vec<String>,
    /// True for a list column.
    pub list: bool,
    /// Input dimension `d`.
    pub dim: usize,
}

/// The sorted class set of a classification task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "values", rename_all = "snake_case")]
pub enum Classes {
    /// Integer labels.
    Int(Vec<i64>),
    /// String labels.
    Str(Vec<String>),
}

impl Classes {
    /// Number of classes.
    pub fn len(&self) -> usize {
        match self {
            Classes::Int(v) => v.len(),
            Classes::Str(v) => v.len(),
        }
    }
    /// True with no classes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The label of class `k`, as text.
    pub fn name(&self, k: usize) -> String {
        match self {
            Classes::Int(v) => v[k].to_string(),
            Classes::Str(v) => v[k].clone(),
        }
    }

    /// Class index of every row of a label array; a label outside the set is an error.
    pub fn encode(&self, labels: &ArrayRef, loc: &Location) -> Result<Vec<u32>> {
        check_no_nulls(labels.as_ref(), loc)?;
        self.encode_valid(labels, loc)
    }

    /// Class index of every row, `None` where the label is null.
    pub fn encode_opt(&self, labels: &ArrayRef, loc: &Location) -> Result<Vec<Option<u32>>> {
        let codes = self.encode_valid(labels, loc)?;
        Ok(codes.into_iter().enumerate().map(|(r, k)| (!labels.is_null(r)).then_some(k)).collect())
    }

    fn encode_valid(&self, labels: &ArrayRef, loc: &Location) -> Result<Vec<u32>> {
        match self {
            Classes::Int(set) => {
                let a = cast_to(labels, &DataType::Int64, loc)?;
                a.as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .enumerate()
                    .map(|(r, v)| {
                        if a.is_null(r) {
                            return Ok(0);
                        }
                        set.binary_search(v).map(|k| k as u32).map_err(|_| unknown_label(&v.to_string(), self, loc, r))
                    })
                    .collect()
            }
            Classes::Str(set) => {
                let a = cast_to(labels, &DataType::Utf8, loc)?;
                a.as_string::<i32>()
                    .iter()
                    .enumerate()
                    .map(|(r, v)| {
                        let Some(v) = v else { return Ok(0) };
                        set.binary_search_by(|s| s.as_str().cmp(v))
                            .map(|k| k as u32)
                            .map_err(|_| unknown_label(v, self, loc, r))
                    })
                    .collect()
            }
        }
    }
}

fn unknown_label(v: &str, classes: &Classes, loc: &Location, row: usize) -> Error {
    let shown: Vec<String> = (0..classes.len().min(20)).map(|k| classes.name(k)).collect();
    Error::data(
        loc.clone().row(row),
        format!(
            "label '{v}' is not one of the {} classes the model was trained on ({}{})",
            classes.len(),
            shown.join(", "),
            if classes.len() > 20 { ", …" } else { "" }
        ),
    )
}

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
enum Backing {
    Parquet(ArrowReaderMetadata),
    Memory { schema: SchemaRef, batches: Arc<[RecordBatch]> },
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
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Expands paths and globs (each glob sorted); a glob that matches nothing is an error.
pub fn expand_paths(patterns: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in patterns {
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

/// The type a label's values have: a dictionary-encoded column (pandas categoricals,
/// Arrow dictionaries) is read as its values, so it is labelled like the plain column.
fn label_values(t: &DataType) -> &DataType {
    match t {
        DataType::Dictionary(_, values) => values,
        t => t,
    }
}

fn is_label_type(t: &DataType) -> bool {
    let v = label_values(t);
    v.is_integer() || matches!(v, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn is_numeric(t: &DataType) -> bool {
    t.is_integer() || t.is_floating()
}

fn describe_columns(schema: &Schema) -> String {
    let names: Vec<&str> = schema.fields().iter().take(12).map(|f| f.name().as_str()).collect();
    let more = if schema.fields().len() > 12 { ", …" } else { "" };
    format!("{}{more}", names.join(", "))
}

fn open_file(path: &Path) -> Result<InputFile> {
    let file = crate::atomic::open_input(path)?;
    let meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
        .map_err(|source| Error::Parquet { location: Location::file(path), source })?;
    Ok(InputFile { path: path.to_path_buf(), backing: Backing::Parquet(meta) })
}

impl InputFile {
    /// The Arrow schema.
    pub fn schema(&self) -> &Schema {
        match &self.backing {
            Backing::Parquet(meta) => meta.schema(),
            Backing::Memory { schema, .. } => schema,
        }
    }
    /// Rows in the file (from the footer).
    pub fn rows(&self) -> u64 {
        match &self.backing {
            Backing::Parquet(meta) => meta.metadata().file_metadata().num_rows().max(0) as u64,
            Backing::Memory { batches, .. } => batches.iter().map(|b| b.num_rows() as u64).sum(),
        }
    }
    /// Row counts per row group (per batch in memory).
    pub fn row_groups(&self) -> Vec<usize> {
        match &self.backing {
            Backing::Parquet(meta) => {
                meta.metadata().row_groups().iter().map(|rg| rg.num_rows().max(0) as usize).collect()
            }
            Backing::Memory { batches, .. } => batches.iter().map(RecordBatch::num_rows).collect(),
        }
    }
    /// Where its rows are, for messages.
    pub fn location(&self) -> Location {
        match self.backing {
            Backing::Parquet(_) => Location::file(&self.path),
            Backing::Memory { .. } => Location::memory(&self.path),
        }
    }
    fn field(&self, name: &str) -> Option<&Field> {
        self.schema().fields().iter().find(|f| f.name() == name).map(|f| f.as_ref())
    }
}

impl InputFile {
    /// What identifies this file's content for a resume or a shard: its path, size, and
    /// footer (row count and each row group's rows, bytes and first column offset).
    pub fn identity(&self) -> String {
        let meta = match &self.backing {
            Backing::Parquet(meta) => meta,
            // Batches in memory cannot be resumed from or sharded; their row layout is
            // what they are.
            Backing::Memory { batches, .. } => {
                let rows: Vec<String> = batches.iter().map(|b| b.num_rows().to_string()).collect();
                return format!("{}|memory|{}", self.path.display(), rows.join(","));
            }
        };
        let size = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        let md = meta.metadata();
        let mut footer = format!("{}:{}", md.file_metadata().num_rows(), md.num_row_groups());
        for rg in md.row_groups() {
            let first = rg.columns().first().map_or(0, |c| c.data_page_offset());
            footer += &format!(";{},{},{first}", rg.num_rows(), rg.total_byte_size());
        }
        format!("{}|{size}|{}", self.path.display(), crate::stats::checksum([footer.as_bytes()]))
    }
}

impl Dataset {
    /// The identities of the files, in order (see [`InputFile::identity`]).
    pub fn identity(&self) -> Vec<String> {
        self.files.iter().map(InputFile::identity).collect()
    }

    /// Opens every file, resolves the columns on the first and checks every other file
    /// against it. Reads footers only (and one row for a `List` column's length).
    pub fn open(paths: &[PathBuf], spec: ColumnSpec) -> Result<Dataset> {
        let paths = expand_paths(paths)?;
        if paths.is_empty() {
            return Err(Error::config("input", "files", "no input files given"));
        }
        let files = paths.iter().map(|p| open_file(p)).collect::<Result<Vec<_>>>()?;
        Dataset::from_inputs(files, spec)
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
        Dataset::from_inputs(vec![input], spec)
    }

    fn from_inputs(files: Vec<InputFile>, spec: ColumnSpec) -> Result<Dataset> {
        for f in &files {
            if f.rows() == 0 {
                return Err(Error::data(f.location(), "the file has no rows; remove it from the inputs"));
            }
        }
        let first = &files[0];
        let features = resolve_features(first, &spec)?;
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
        Ok(Dataset { files, spec, features })
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
            Backing::Memory { batches, schema } => {
                let idx = column_indices(schema, names);
                let batch = batches
                    .get(unit.row_group)
                    .ok_or_else(|| Error::Internal(format!("{loc}: no such batch")))?
                    .project(&idx)
                    .map_err(|e| Error::data(loc.clone(), format!("cannot select the columns: {e}")))?;
                let step = chunk_rows.max(1);
                let n = batch.num_rows();
                return Ok(Box::new((0..n).step_by(step).map(move |at| Ok(batch.slice(at, step.min(n - at))))));
            }
        };
        let handle = crate::atomic::open_input(&file.path)?;
        let mask = ProjectionMask::roots(meta.parquet_schema(), column_indices(file.schema(), names));
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(handle, meta.clone())
            .with_projection(mask)
            .with_row_groups(vec![unit.row_group])
            .with_batch_size(chunk_rows.max(1))
            .build()
            .map_err(|source| Error::Parquet { location: loc.clone(), source })?;
        Ok(Box::new(reader.map(move |b| b.map_err(|e| Error::Parquet { location: loc.clone(), source: e.into() }))))
    }

    /// Reads one unit in chunks of at most `chunk_rows` rows, calling `f` on each.
    pub fn read_unit(&self, unit: Unit, chunk_rows: usize, f: &mut dyn FnMut(Chunk) -> Result<()>) -> Result<()> {
        let mut names: Vec<&str> = self.features.columns.iter().map(String::as_str).collect();
        names.extend(self.spec.label.as_deref());
        names.extend(self.spec.targets.iter().map(String::as_str));
        names.extend(self.spec.keep.iter().map(String::as_str));
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
        let mut x = vec![0f32; rows * d];
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
                return Err(Error::data(
                    location.clone().column(self.features.columns[j].clone()).row(first_row + r),
                    format!("value {} is not finite; drop or impute such rows before training", x[pos]),
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
        for unit in self.units() {
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

fn resolve_features(first: &InputFile, spec: &ColumnSpec) -> Result<ResolvedFeatures> {
    let schema = first.schema();
    match &spec.features {
        FeatureColumns::Columns(patterns) => {
            // A glob never picks up the label, target or kept columns.
            let reserved: Vec<&String> = spec.label.iter().chain(&spec.targets).chain(&spec.keep).collect();
            let mut columns: Vec<String> = Vec::new();
            if patterns.is_empty() {
                columns = schema
                    .fields()
                    .iter()
                    .filter(|f| is_numeric(f.data_type()) && !reserved.contains(&f.name()))
                    .map(|f| f.name().clone())
                    .collect();
                if columns.is_empty() {
                    return Err(Error::data(first.location(), "no numeric feature columns"));
                }
            }
            for p in patterns {
                // A name with glob characters is a column's own name when one is called so.
                if is_glob(p) && first.field(p).is_none() {
                    let pat = glob::Pattern::new(p).map_err(|e| {
                        Error::config("pipeline", "data.features", format!("bad column pattern '{p}': {e}"))
                    })?;
                    let matched: Vec<String> = schema
                        .fields()
                        .iter()
                        .filter(|f| pat.matches(f.name()) && !reserved.contains(&f.name()))
                        .map(|f| f.name().clone())
                        .filter(|n| !columns.contains(n))
                        .collect();
                    if matched.is_empty() {
                        return Err(Error::data(
                            first.location().column(p.clone()),
                            format!(
                                "no column matches this pattern; the file has columns {}",
                                describe_columns(schema)
                            ),
                        ));
                    }
                    columns.extend(matched);
                } else if !columns.contains(p) {
                    columns.push(p.clone());
                }
            }
            for name in &columns {
                let loc = first.location().column(name.clone());
                let f = first.field(name).ok_or_else(|| {
                    Error::data(
                        loc.clone(),
                        format!("feature column not found; the file has columns {}", describe_columns(schema)),
                    )
                })?;
                if !is_numeric(f.data_type()) {
                    return Err(Error::data(
                        loc,
                        format!(
                            "feature column has type {}; feature columns must be integers or floats",
                            f.data_type()
                        ),
                    ));
                }
            }
            let dim = columns.len();
            Ok(ResolvedFeatures { columns, list: false, dim })
        }
        FeatureColumns::List(name) => {
            let loc = first.location().column(name.clone());
            let f = first.field(name).ok_or_else(|| {
                Error::data(
                    loc.clone(),
                    format!("feature column not found; the file has columns {}", describe_columns(schema)),
                )
            })?;
            let (inner, fixed) = match f.data_type() {
                DataType::List(i) | DataType::LargeList(i) => (i.data_type().clone(), None),
                DataType::FixedSizeList(i, n) => (i.data_type().clone(), Some(*n as usize)),
                t => {
                    return Err(Error::data(
                        loc,
                        format!("feature column has type {t}; a single feature column must be a List, LargeList or FixedSizeList of numbers"),
                    ))
                }
            };
            if !is_numeric(&inner) {
                return Err(Error::data(
                    loc,
                    format!("list values have type {inner}; they must be integers or floats"),
                ));
            }
            let dim = match fixed {
                Some(n) => n,
                None => first_list_len(first, name)?,
            };
            if dim == 0 {
                return Err(Error::data(loc, "the feature lists are empty"));
            }
            Ok(ResolvedFeatures { columns: vec![name.clone()], list: true, dim })
        }
    }
}

/// Indices of the schema's columns named in `names`, in schema order.
fn column_indices(schema: &Schema, names: &[&str]) -> Vec<usize> {
    schema.fields().iter().enumerate().filter(|(_, f)| names.contains(&f.name().as_str())).map(|(i, _)| i).collect()
}

fn first_list_len(file: &InputFile, name: &str) -> Result<usize> {
    let loc = file.location().row_group(0).column(name);
    let idx = file.schema().fields().iter().position(|f| f.name() == name).unwrap_or(0);
    let batch = match &file.backing {
        Backing::Memory { batches, .. } => batches
            .first()
            .ok_or_else(|| Error::data(loc.clone(), "no rows to take the list length from"))?
            .project(&[idx])
            .map_err(|e| Error::data(loc.clone(), format!("cannot select the column: {e}")))?,
        Backing::Parquet(meta) => {
            let handle = crate::atomic::open_input(&file.path)?;
            let mut reader = ParquetRecordBatchReaderBuilder::new_with_metadata(handle, meta.clone())
                .with_projection(ProjectionMask::roots(meta.parquet_schema(), [idx]))
                .with_batch_size(1)
                .with_limit(1)
                .build()
                .map_err(|source| Error::Parquet { location: loc.clone(), source })?;
            reader
                .next()
                .ok_or_else(|| Error::data(loc.clone(), "no rows to take the list length from"))?
                .map_err(|e| Error::Parquet { location: loc.clone(), source: e.into() })?
        }
    };
    let a = batch.column(0);
    Ok(match a.data_type() {
        DataType::List(_) => a.as_list::<i32>().value_length(0) as usize,
        DataType::LargeList(_) => a.as_list::<i64>().value_length(0) as usize,
        _ => 0,
    })
}

fn check_no_nulls(a: &dyn Array, loc: &Location) -> Result<()> {
    check_no_nulls_at(a, loc, 0)
}

fn check_no_nulls_at(a: &dyn Array, loc: &Location, first_row: usize) -> Result<()> {
    if a.null_count() > 0 {
        let r = (0..a.len()).find(|&i| a.is_null(i)).unwrap_or(0);
        return Err(Error::data(
            loc.clone().row(first_row + r),
            format!("{} null value(s) in this chunk; drop or fill nulls before training", a.null_count()),
        ));
    }
    Ok(())
}

fn cast_to(a: &ArrayRef, t: &DataType, loc: &Location) -> Result<ArrayRef> {
    if a.data_type() == t {
        return Ok(a.clone());
    }
    // Not arrow's "safe" cast, which turns a value it cannot convert (a u64 above i64::MAX,
    // a string that is not a number) into a null that would then be trained on silently.
    let options = arrow_cast::CastOptions { safe: false, ..Default::default() };
    arrow_cast::cast_with_options(a, t, &options).map_err(|e| {
        Error::data(
            loc.clone(),
            format!("cannot convert {} to {t} without losing values ({e}); fix the column's type", a.data_type()),
        )
    })
}

fn list_to_rows(a: &ArrayRef, d: usize, x: &mut [f32], loc: &Location, first_row: usize) -> Result<()> {
    check_no_nulls_at(a.as_ref(), loc, first_row)?;
    let (offsets, values): (Vec<usize>, ArrayRef) = match a.data_type() {
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            (l.value_offsets().iter().map(|&o| o as usize).collect(), l.values().clone())
        }
        DataType::LargeList(_) => {
            let l = a.as_list::<i64>();
            (l.value_offsets().iter().map(|&o| o as usize).collect(), l.values().clone())
        }
        DataType::FixedSizeList(_, n) => {
            let l = a.as_fixed_size_list();
            let n = *n as usize;
            if n != d {
                return Err(Error::data(loc.clone(), format!("lists have {n} values here but {d} in the first file")));
            }
            let off = l.offset();
            ((0..=l.len()).map(|r| (off + r) * n).collect(), l.values().clone())
        }
        t => return Err(Error::data(loc.clone(), format!("expected a list column, found {t}"))),
    };
    for r in 0..offsets.len() - 1 {
        let len = offsets[r + 1] - offsets[r];
        if len != d {
            return Err(Error::data(
                loc.clone().row(first_row + r),
                format!("ragged list column: this row has {len} values, the first row has {d}; every row needs the same length"),
            ));
        }
    }
    let (start, end) = (offsets[0], offsets[offsets.len() - 1]);
    let values = values.slice(start, end - start);
    if values.null_count() > 0 {
        let i = (0..values.len()).find(|&i| values.is_null(i)).unwrap_or(0);
        return Err(Error::data(
            loc.clone().row(first_row + i / d),
            format!("null inside the list (element {}); drop or fill nulls before training", i % d),
        ));
    }
    let values = cast_to(&values, &DataType::Float32, loc)?;
    let v = values.as_primitive::<Float32Type>().values();
    x[..v.len()].copy_from_slice(v);
    if let Some(pos) = v.iter().position(|v| !v.is_finite()) {
        return Err(Error::data(
            loc.clone().row(first_row + pos / d),
            format!("element {} is {}, not finite; drop or impute such rows before training", pos % d, v[pos]),
        ));
    }
    Ok(())
}
