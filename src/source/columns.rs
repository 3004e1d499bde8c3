//! Which columns hold the features and how they become f32 rows: column globs or one
//! list column resolved on the first file, null checks, casts, and list unpacking.

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use serde::{Deserialize, Serialize};

use super::{describe_columns, is_glob, is_numeric, Backing, InputFile};
use crate::error::{Error, Location, Result};
use crate::session::Session;

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

pub(super) fn resolve_features(session: &Session, first: &InputFile, spec: &ColumnSpec) -> Result<ResolvedFeatures> {
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
                None => first_list_len(session, first, name)?,
            };
            if dim == 0 {
                return Err(Error::data(loc, "the feature lists are empty"));
            }
            Ok(ResolvedFeatures { columns: vec![name.clone()], list: true, dim })
        }
    }
}

/// Indices of the schema's columns named in `names`, in schema order.
pub(super) fn column_indices(schema: &Schema, names: &[&str]) -> Vec<usize> {
    schema.fields().iter().enumerate().filter(|(_, f)| names.contains(&f.name().as_str())).map(|(i, _)| i).collect()
}

pub(super) fn first_list_len(session: &Session, file: &InputFile, name: &str) -> Result<usize> {
    let loc = file.location().row_group(0).column(name);
    let idx = file.schema().fields().iter().position(|f| f.name() == name).unwrap_or(0);
    let batch = match &file.backing {
        Backing::Memory { batches, .. } => batches
            .first()
            .ok_or_else(|| Error::data(loc.clone(), "no rows to take the list length from"))?
            .project(&[idx])
            .map_err(|e| Error::data(loc.clone(), format!("cannot select the column: {e}")))?,
        Backing::Remote(meta, object) => {
            let fetched = super::remote::Prefetch::start(object, meta, 0, 0, &[idx])?.wait()?;
            super::remote::reader(fetched, meta, (0, vec![idx]), 1, Some(1), &loc)?
                .next()
                .ok_or_else(|| Error::data(loc.clone(), "no rows to take the list length from"))?
                .map_err(|e| Error::Parquet { location: loc.clone(), source: e.into() })?
        }
        Backing::Parquet(meta) => {
            let handle = crate::atomic::open_input(session, &file.path)?;
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

pub(super) fn check_no_nulls(a: &dyn Array, loc: &Location) -> Result<()> {
    check_no_nulls_at(a, loc, 0)
}

pub(super) fn check_no_nulls_at(a: &dyn Array, loc: &Location, first_row: usize) -> Result<()> {
    if a.null_count() > 0 {
        let r = (0..a.len()).find(|&i| a.is_null(i)).unwrap_or(0);
        return Err(Error::data(
            loc.clone().row(first_row + r),
            format!("{} null value(s) in this chunk; drop or fill nulls before training", a.null_count()),
        ));
    }
    Ok(())
}

pub(super) fn cast_to(a: &ArrayRef, t: &DataType, loc: &Location) -> Result<ArrayRef> {
    if a.data_type() == t {
        return Ok(a.clone());
    }
    super::cast::cast(a, t).map_err(|e| {
        Error::data(
            loc.clone(),
            format!("cannot convert {} to {t} without losing values ({e}); fix the column's type", a.data_type()),
        )
    })
}

pub(super) fn list_to_rows(a: &ArrayRef, d: usize, x: &mut [f32], loc: &Location, first_row: usize) -> Result<()> {
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
    let cast = cast_to(&values, &DataType::Float32, loc)?;
    let v = cast.as_primitive::<Float32Type>().values();
    x[..v.len()].copy_from_slice(v);
    if let Some(pos) = v.iter().position(|v| !v.is_finite()) {
        return Err(Error::data(
            loc.clone().row(first_row + pos / d),
            non_finite_message(&values, pos, &format!("element {}", pos % d)),
        ));
    }
    Ok(())
}

/// Why entry `i` of `original` became a non-finite f32: NaN or ±∞ in the file, or a
/// finite float64 beyond the f32 range the features are read in.
pub(super) fn non_finite_message(original: &ArrayRef, i: usize, what: &str) -> String {
    if let Some(f) = original.as_primitive_opt::<arrow_array::types::Float64Type>() {
        let v = f.value(i);
        if v.is_finite() {
            return format!(
                "{what} {v:e} exceeds the float32 range (|x| ≤ {:e}) features are read in; rescale the column",
                f32::MAX
            );
        }
        return format!("{what} is {v}, not finite; drop or impute such rows before training");
    }
    let shown = original.as_primitive_opt::<Float32Type>().map_or_else(String::new, |f| format!(" is {},", f.value(i)));
    format!("{what}{shown} not finite; drop or impute such rows before training")
}
