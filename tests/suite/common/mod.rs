//! Shared helpers: a temporary directory per test, Parquet writers and a runner for
//! the binary.

mod data;
mod pipelines;
mod runs;

pub use data::*;
pub use pipelines::*;
pub use runs::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("sketchfit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
    /// Every file in the directory (to check that nothing was left behind).
    pub fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn write_parquet(path: &Path, cols: Vec<(&str, ArrayRef)>, row_group_rows: usize) {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), a.null_count() > 0 || a.is_nullable()))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), cols.into_iter().map(|(_, a)| a).collect()).unwrap();
    let props = WriterProperties::builder().set_max_row_group_row_count(Some(row_group_rows)).build();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

pub fn sketchfit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sketchfit")).args(args).output().unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// The largest entry difference relative to the largest entry of `b`.
pub fn rel(a: &[f64], b: &[f64]) -> f64 {
    let s = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / s
}

/// A golden-vector file of `tests/golden/`.
pub fn load(name: &str) -> Vec<serde_json::Value> {
    let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A JSON array of numbers.
pub fn vec1(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// A matrix as (rows, cols, row-major values).
pub fn mat(v: &serde_json::Value) -> (usize, usize, Vec<f64>) {
    let rows = v.as_array().unwrap();
    let cols = rows.first().map_or(0, |r| r.as_array().unwrap().len());
    (rows.len(), cols, rows.iter().flat_map(vec1).collect())
}

/// The level of every statistical assertion (math.md §14): a correct implementation fails
/// one with probability below this, on any seed list.
pub const ALPHA: f64 = 1e-6;

/// The two-sided normal critical value `z` with `P(|N(0,1)| > z) = alpha` (Acklam's
/// rational approximation of the normal quantile, relative error below 1.2e-9).
pub fn z_crit(alpha: f64) -> f64 {
    let p = 1.0 - alpha / 2.0;
    let q = (-2.0 * (1.0 - p).ln()).sqrt();
    let c = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    let d = [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996, 3.754408661907416];
    -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
        / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0)
}

/// Mean, unbiased variance and kurtosis `E(x−μ)⁴/σ⁴` of draws.
pub fn moments(v: &[f64]) -> (f64, f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    let m4 = v.iter().map(|x| (x - m).powi(4)).sum::<f64>() / n;
    (m, var, m4 / (var * var))
}

/// The band the ratio of a sample variance to the true one falls in with probability
/// `1 − ALPHA`: `1 ± z_α √((κ − 1)/S)` (the sample variance's relative standard error for
/// draws of kurtosis κ). The sample kurtosis underestimates heavy tails, so it is taken
/// 25 % higher.
pub fn variance_band(draws: &[f64]) -> (f64, f64) {
    let (_, _, kurtosis) = moments(draws);
    let half = z_crit(ALPHA) * ((1.25 * kurtosis - 1.0) / draws.len() as f64).sqrt();
    (1.0 - half, 1.0 + half)
}

/// The tolerance of a sample mean of `n` draws of variance `var` at `ALPHA`.
pub fn mean_tolerance(var: f64, n: usize) -> f64 {
    z_crit(ALPHA) * (var / n as f64).sqrt()
}

/// The cases of a golden file whose names start with `prefix`, asserting there are `n`
/// of them: a test never passes by running none.
pub fn cases(file: &str, prefix: &str, n: usize) -> Vec<serde_json::Value> {
    let all: Vec<serde_json::Value> =
        load(file).into_iter().filter(|c| c["name"].as_str().is_some_and(|s| s.starts_with(prefix))).collect();
    assert_eq!(all.len(), n, "{file}: {} cases named {prefix}*, {n} expected", all.len());
    all
}

/// What a run wrote with `--report PATH`.
pub fn report(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}
