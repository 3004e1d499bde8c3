//! The column conversions the reader needs, and only those: numeric columns to f32
//! (features) or f64 (targets), integer labels to i64, labels and group keys to text, each
//! through a dictionary if the column is one. Arrow's general cast kernel does this too,
//! but it covers every type pair and built for longer than the whole Parquet reader on a
//! first compile; these few loops are all the pipeline asks of it.
//!
//! A value that cannot be converted (a `u64` above `i64::MAX`) is an error, never a null
//! that would be trained on silently. Nulls stay null; the callers refuse them where
//! they are not allowed. A float that overflows f32 becomes infinite, which the feature
//! check then names with its row.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, PrimitiveArray, StringArray};
use arrow_schema::DataType;

/// Why a column could not be converted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CastError {
    /// The column's type has no conversion to the target.
    Unsupported,
    /// Row `row`'s value does not fit the target type.
    Overflow { row: usize, value: String },
}

impl std::fmt::Display for CastError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CastError::Unsupported => write!(f, "no conversion for this type"),
            CastError::Overflow { value, .. } => write!(f, "{value} does not fit"),
        }
    }
}

type Cast = std::result::Result<ArrayRef, CastError>;

/// `a` as `to`: `Float32`, `Float64`, `Int64` or `Utf8`.
pub(crate) fn cast(a: &ArrayRef, to: &DataType) -> Cast {
    if a.data_type() == to {
        return Ok(a.clone());
    }
    if let DataType::Dictionary(_, _) = a.data_type() {
        return undictionary(a, to);
    }
    match to {
        DataType::Float32 => numeric::<Float32Type>(a, |v| v as f32),
        DataType::Float64 => numeric::<Float64Type>(a, |v| v),
        DataType::Int64 => integers(a),
        DataType::Utf8 => text(a),
        _ => Err(CastError::Unsupported),
    }
}

/// Any integer or float column through `f64` (exact for every integer below 2^53 and
/// every f32; above that, rounded as `as` rounds), then `narrow`ed to `O`.
fn numeric<O: ArrowPrimitiveType>(a: &ArrayRef, narrow: impl Fn(f64) -> O::Native) -> Cast {
    fn via<T: ArrowPrimitiveType, O: ArrowPrimitiveType>(
        a: &ArrayRef,
        wide: impl Fn(T::Native) -> f64,
        narrow: impl Fn(f64) -> O::Native,
    ) -> Cast {
        Ok(Arc::new(a.as_primitive::<T>().unary::<_, O>(|v| narrow(wide(v)))))
    }
    match a.data_type() {
        DataType::Int8 => via::<Int8Type, O>(a, f64::from, narrow),
        DataType::Int16 => via::<Int16Type, O>(a, f64::from, narrow),
        DataType::Int32 => via::<Int32Type, O>(a, f64::from, narrow),
        DataType::Int64 => via::<Int64Type, O>(a, |v| v as f64, narrow),
        DataType::UInt8 => via::<UInt8Type, O>(a, f64::from, narrow),
        DataType::UInt16 => via::<UInt16Type, O>(a, f64::from, narrow),
        DataType::UInt32 => via::<UInt32Type, O>(a, f64::from, narrow),
        DataType::UInt64 => via::<UInt64Type, O>(a, |v| v as f64, narrow),
        DataType::Float16 => via::<Float16Type, O>(a, |v| f64::from(v.to_f32()), narrow),
        DataType::Float32 => via::<Float32Type, O>(a, f64::from, narrow),
        DataType::Float64 => via::<Float64Type, O>(a, |v| v, narrow),
        _ => Err(CastError::Unsupported),
    }
}

/// Any integer column as i64; a `u64` above `i64::MAX` is an overflow.
fn integers(a: &ArrayRef) -> Cast {
    fn widen<T: ArrowPrimitiveType>(a: &ArrayRef, f: impl Fn(T::Native) -> i64) -> Cast {
        Ok(Arc::new(a.as_primitive::<T>().unary::<_, Int64Type>(f)))
    }
    match a.data_type() {
        DataType::Int8 => widen::<Int8Type>(a, i64::from),
        DataType::Int16 => widen::<Int16Type>(a, i64::from),
        DataType::Int32 => widen::<Int32Type>(a, i64::from),
        DataType::UInt8 => widen::<UInt8Type>(a, i64::from),
        DataType::UInt16 => widen::<UInt16Type>(a, i64::from),
        DataType::UInt32 => widen::<UInt32Type>(a, i64::from),
        DataType::UInt64 => {
            let u = a.as_primitive::<UInt64Type>();
            if let Some(row) = (0..u.len()).find(|&r| u.is_valid(r) && i64::try_from(u.value(r)).is_err()) {
                return Err(CastError::Overflow { row, value: u.value(row).to_string() });
            }
            widen::<UInt64Type>(a, |v| v as i64)
        }
        _ => Err(CastError::Unsupported),
    }
}

/// Text and integer columns as UTF-8 text (integers in decimal).
fn text(a: &ArrayRef) -> Cast {
    fn digits<T: ArrowPrimitiveType>(a: &ArrayRef) -> Cast
    where
        T::Native: ToString,
    {
        Ok(Arc::new(a.as_primitive::<T>().iter().map(|v| v.map(|v| v.to_string())).collect::<StringArray>()))
    }
    match a.data_type() {
        DataType::LargeUtf8 => Ok(Arc::new(a.as_string::<i64>().iter().collect::<StringArray>())),
        DataType::Utf8View => Ok(Arc::new(a.as_string_view().iter().collect::<StringArray>())),
        DataType::Int8 => digits::<Int8Type>(a),
        DataType::Int16 => digits::<Int16Type>(a),
        DataType::Int32 => digits::<Int32Type>(a),
        DataType::Int64 => digits::<Int64Type>(a),
        DataType::UInt8 => digits::<UInt8Type>(a),
        DataType::UInt16 => digits::<UInt16Type>(a),
        DataType::UInt32 => digits::<UInt32Type>(a),
        DataType::UInt64 => digits::<UInt64Type>(a),
        _ => Err(CastError::Unsupported),
    }
}

/// A dictionary column as the plain column `to`: its values converted once, then
/// gathered by key (a null key is a null row).
fn undictionary(a: &ArrayRef, to: &DataType) -> Cast {
    let dict = a.as_any_dictionary();
    let values = cast(dict.values(), to)?;
    let keys = dict.normalized_keys();
    let valid = |r: usize| dict.keys().is_valid(r);
    // A valid key past the values is a damaged dictionary: arrow's reader refuses those,
    // but a batch handed in from memory is checked here.
    if let Some(r) = (0..keys.len()).find(|&r| valid(r) && keys[r] >= values.len()) {
        return Err(CastError::Overflow { row: r, value: format!("dictionary key {}", keys[r]) });
    }
    Ok(match to {
        DataType::Utf8 => {
            let v = values.as_string::<i32>();
            Arc::new((0..keys.len()).map(|r| valid(r).then(|| v.value(keys[r]))).collect::<StringArray>())
        }
        DataType::Int64 => gather::<Int64Type>(&values, &keys, valid),
        DataType::Float32 => gather::<Float32Type>(&values, &keys, valid),
        DataType::Float64 => gather::<Float64Type>(&values, &keys, valid),
        _ => return Err(CastError::Unsupported),
    })
}

fn gather<T: ArrowPrimitiveType>(values: &ArrayRef, keys: &[usize], valid: impl Fn(usize) -> bool) -> ArrayRef {
    let v = values.as_primitive::<T>();
    Arc::new((0..keys.len()).map(|r| valid(r).then(|| v.value(keys[r]))).collect::<PrimitiveArray<T>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{
        DictionaryArray, Float16Array, Int32Array, Int64Array, Int8Array, LargeStringArray, UInt64Array, UInt8Array,
    };

    fn arc(a: impl Array + 'static) -> ArrayRef {
        Arc::new(a)
    }

    #[test]
    fn numbers_widen_and_narrow_as_rust_converts_them() {
        let a = arc(Int8Array::from(vec![Some(-128), None, Some(127)]));
        let f = cast(&a, &DataType::Float32).unwrap();
        let f = f.as_primitive::<Float32Type>();
        assert_eq!((f.value(0), f.is_null(1), f.value(2)), (-128.0, true, 127.0));
        let big = arc(arrow_array::Float64Array::from(vec![1e300, 0.1]));
        let n = cast(&big, &DataType::Float32).unwrap();
        assert_eq!(n.as_primitive::<Float32Type>().values().as_ref(), &[f32::INFINITY, 0.1f32]);
        let h = arc(Float16Array::from(vec![half_of(1.5)]));
        assert_eq!(cast(&h, &DataType::Float64).unwrap().as_primitive::<Float64Type>().value(0), 1.5);
        let u = arc(UInt8Array::from(vec![255u8]));
        assert_eq!(cast(&u, &DataType::Int64).unwrap().as_primitive::<Int64Type>().value(0), 255);
    }

    fn half_of(v: f32) -> <Float16Type as ArrowPrimitiveType>::Native {
        <Float16Type as ArrowPrimitiveType>::Native::from_f32(v)
    }

    #[test]
    fn a_u64_past_i64_is_refused_with_its_row_never_nulled() {
        let a = arc(UInt64Array::from(vec![Some(1), None, Some(u64::MAX)]));
        assert_eq!(cast(&a, &DataType::Int64), Err(CastError::Overflow { row: 2, value: u64::MAX.to_string() }));
        assert_eq!(cast(&arc(Int32Array::from(vec![1])), &DataType::Date32).unwrap_err(), CastError::Unsupported);
        let s = arc(StringArray::from(vec!["1"]));
        assert_eq!(cast(&s, &DataType::Float32).unwrap_err(), CastError::Unsupported);
    }

    #[test]
    fn labels_read_through_dictionaries_and_as_text() {
        let d: DictionaryArray<Int32Type> = vec![Some("b"), None, Some("a"), Some("b")].into_iter().collect();
        let t = cast(&arc(d), &DataType::Utf8).unwrap();
        let t = t.as_string::<i32>();
        assert_eq!(t.iter().collect::<Vec<_>>(), [Some("b"), None, Some("a"), Some("b")]);
        let keys = Int32Array::from(vec![1, 0, 1]);
        let d = DictionaryArray::new(keys, arc(Int64Array::from(vec![7, 9])));
        let i = cast(&arc(d), &DataType::Int64).unwrap();
        assert_eq!(i.as_primitive::<Int64Type>().values().as_ref(), &[9, 7, 9]);
        let n = cast(&arc(Int64Array::from(vec![Some(-3), None])), &DataType::Utf8).unwrap();
        assert_eq!(n.as_string::<i32>().iter().collect::<Vec<_>>(), [Some("-3"), None]);
        let l = cast(&arc(LargeStringArray::from(vec!["x"])), &DataType::Utf8).unwrap();
        assert_eq!(l.as_string::<i32>().value(0), "x");
    }
}
