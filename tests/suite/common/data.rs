//! Data the tests write or hold in memory: small labelled sets with known structure.

use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, Float64Array, Int64Array, RecordBatch};
use sketchfit::rng::StageRng;

use super::write_parquet;

/// Three classes of rings in 4 dimensions, `n` rows.
pub fn rings(n: usize, seed: u64) -> Vec<(&'static str, ArrayRef)> {
    let mut r = StageRng::new(seed, 5);
    let mut cols: Vec<Vec<f32>> = vec![Vec::new(); 4];
    let mut label = Vec::new();
    for i in 0..n {
        let k = i % 3;
        let v: Vec<f64> = (0..4).map(|_| r.normal()).collect();
        let norm = v.iter().map(|a| a * a).sum::<f64>().sqrt();
        for (j, c) in cols.iter_mut().enumerate() {
            c.push((v[j] / norm * (1.0 + k as f64) + 0.1 * r.normal()) as f32);
        }
        label.push(k as i64);
    }
    let mut out: Vec<(&'static str, ArrayRef)> = ["a", "b", "c", "d"]
        .into_iter()
        .zip(cols)
        .map(|(n, c)| (n, Arc::new(Float32Array::from(c)) as ArrayRef))
        .collect();
    out.push(("label", Arc::new(Int64Array::from(label))));
    out
}

/// The columns as record batches of `rows_per_batch` rows.
pub fn batches(cols: &[(&'static str, ArrayRef)], rows_per_batch: usize) -> Vec<RecordBatch> {
    let whole = RecordBatch::try_from_iter(cols.iter().cloned()).unwrap();
    (0..whole.num_rows())
        .step_by(rows_per_batch)
        .map(|s| whole.slice(s, rows_per_batch.min(whole.num_rows() - s)))
        .collect()
}

/// Two float features and a 3-class label, `n` rows.
pub fn good_columns(n: usize) -> Vec<(&'static str, ArrayRef)> {
    let a: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    let b: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
    let label: Vec<i64> = (0..n).map(|i| (i % 3) as i64).collect();
    vec![
        ("a", Arc::new(Float64Array::from(a)) as ArrayRef),
        ("b", Arc::new(Float64Array::from(b)) as ArrayRef),
        ("label", Arc::new(Int64Array::from(label)) as ArrayRef),
    ]
}

/// Rows `x0 … x3` with a 3-class label; `drop` leaves one feature column out.
pub fn four_columns(path: &std::path::Path, n: usize, drop: Option<&str>, shift: usize) {
    let mut cols: Vec<(&str, ArrayRef)> = Vec::new();
    for (j, name) in ["x0", "x1", "x2", "x3"].into_iter().enumerate() {
        if drop == Some(name) {
            continue;
        }
        let v: Vec<f64> = (0..n).map(|i| ((i + shift) as f64 * (0.13 + 0.07 * j as f64)).sin()).collect();
        cols.push((name, Arc::new(Float64Array::from(v)) as ArrayRef));
    }
    let label: Vec<i64> = (0..n).map(|i| ((i + shift) % 3) as i64).collect();
    cols.push(("label", Arc::new(Int64Array::from(label))));
    write_parquet(path, cols, 50);
}

/// `n` rows of 6 features, a 3-class label and a real target, in row groups of `rg`.
pub fn write_data(path: &std::path::Path, n: usize, rg: usize, seed: u64) {
    let mut r = StageRng::new(seed, 0);
    let xs: Vec<Vec<f64>> = (0..6).map(|_| (0..n).map(|_| r.uniform() * 2.0 - 1.0).collect()).collect();
    let label: Vec<i64> = (0..n)
        .map(|i| {
            if xs[0][i] * xs[1][i] > 0.1 {
                2
            } else if xs[2][i] > 0.3 {
                1
            } else {
                0
            }
        })
        .collect();
    let y: Vec<f64> = (0..n).map(|i| xs[0][i] * xs[3][i] + xs[4][i] - 0.5 * xs[5][i].powi(2)).collect();
    let names = ["x0", "x1", "x2", "x3", "x4", "x5"];
    let mut cols: Vec<(&str, ArrayRef)> = Vec::new();
    for (k, x) in xs.into_iter().enumerate() {
        // f32-exact values, as the maps see them.
        cols.push((names[k], Arc::new(Float64Array::from_iter_values(x.iter().map(|v| f64::from(*v as f32))))));
    }
    cols.push(("label", Arc::new(Int64Array::from(label))));
    cols.push(("y", Arc::new(Float64Array::from(y))));
    write_parquet(path, cols, rg);
}
