//! Labels: the sorted class set of a classification task, label types (dictionaries
//! read as their values) and the decoding of label arrays to class indices.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use serde::{Deserialize, Serialize};

use super::columns::{cast_to, check_no_nulls};
use crate::error::{Error, Location, Result};

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

pub(super) fn unknown_label(v: &str, classes: &Classes, loc: &Location, row: usize) -> Error {
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

/// The type a label's values have: a dictionary-encoded column (pandas categoricals,
/// Arrow dictionaries) is read as its values, so it is labelled like the plain column.
pub(super) fn label_values(t: &DataType) -> &DataType {
    match t {
        DataType::Dictionary(_, values) => values,
        t => t,
    }
}

pub(super) fn is_label_type(t: &DataType) -> bool {
    let v = label_values(t);
    v.is_integer() || matches!(v, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}
