//! The `mmd` and `embed` drivers (math.md §1, §9): the sketched kernel mean of a point set
//! is `Zᵀ1/n`, so streaming two inputs once gives the kernel distance, `MMD²_u` and a
//! permutation test on a bounded uniform subsample of the per-row sketches
//! (`twosample` holds the statistics); streaming grouped rows gives one embedding per
//! group.

use crate::session::Session;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::pipeline::stream::{reservoir, stream, Reservoir};
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::source::{Chunk, ColumnSpec, Dataset};
use crate::twosample::{
    mmd2_unbiased, mmd2_v, permutation_test, permutations, relative_sd_estimate, relative_variance_bound, SketchSums,
    Statistic,
};

/// How rows are sketched: the columns, the stages (fitted on a sample first), the seed
/// and the streaming settings.
#[derive(Debug, Clone)]
pub struct Sketching {
    /// Columns to read.
    pub cols: ColumnSpec,
    /// The stages, to fit on the sample.
    pub stages: Vec<StageSpec>,
    /// The seed of every random parameter.
    pub seed: u64,
    /// Rows in the sample the stages are fitted on.
    pub sample_rows: usize,
    /// Rows per chunk.
    pub chunk_rows: usize,
    /// Threads.
    pub threads: usize,
}

/// Options of [`mmd`].
#[derive(Debug, Clone)]
pub struct MmdOptions {
    /// Permutations of the test.
    pub permutations: usize,
    /// Rows per set kept for the test (uniform subsample); all rows if fewer.
    pub cap: usize,
    /// Also the exact kernel distance (inputs of at most 20,000 rows in all).
    pub exact: bool,
    /// Threads.
    pub threads: usize,
}

/// The report of [`mmd`].
#[derive(Debug, Clone, Serialize)]
pub struct MmdReport {
    /// Rows of A and B.
    pub rows: (u64, u64),
    /// Sketch dimension.
    pub dim: usize,
    /// The stages used (fitted).
    pub stages: Vec<StageSpec>,
    /// `D̂(A, B)` from the sketched kernel means.
    pub kernel_distance: f64,
    /// `D̂²`.
    pub kernel_distance_sq: f64,
    /// `MMD²_u`.
    pub mmd2_unbiased: f64,
    /// Relative standard deviation bound of `D̂²` (`√c`, the worst block), for Gaussian sketches.
    pub relative_sd_bound: Option<f64>,
    /// Relative standard deviation of `D̂²` estimated from the blocks' own contributions
    /// (`√(Σ_j c_j D̂_j⁴) / D̂²`), for GaussianSketchHD.
    pub relative_sd_estimate: Option<f64>,
    /// Permutation p-value (V-statistic on the kept rows).
    pub p_value: f64,
    /// Rows per set the test used.
    pub test_rows: (usize, usize),
    /// Permutations.
    pub permutations: usize,
    /// The exact kernel distance `D_K²`, when asked.
    pub exact_distance_sq: Option<f64>,
}

/// Streams both inputs once through the stages and reports the kernel distance and the
/// two-sample test.
pub fn mmd(
    session: &Session,
    a: &[PathBuf],
    b: &[PathBuf],
    sketching: &Sketching,
    opts: &MmdOptions,
) -> Result<MmdReport> {
    let Sketching { cols, stages, seed, sample_rows, chunk_rows, .. } = sketching;
    let (seed, sample_rows, chunk_rows) = (*seed, *sample_rows, *chunk_rows);
    let da = Dataset::open(session, a, cols.clone())?;
    let db = Dataset::open(session, b, cols.clone())?;
    if da.features.columns != db.features.columns {
        return Err(Error::data(db.files[0].location(), "the two inputs have different feature columns"));
    }
    let d = da.dim();
    let half = (sample_rows / 2).max(1);
    let mut sample = reservoir(&da, half, seed, chunk_rows, &mut |_| Ok(()))?;
    sample.extend(reservoir(&db, half, seed.wrapping_add(1), chunk_rows, &mut |_| Ok(()))?);
    let fitted: Vec<StageSpec> =
        stages.iter().enumerate().map(|(i, s)| s.fit(&sample, d, seed, i)).collect::<Result<_>>()?;
    let pipeline = FeaturePipeline::build(&fitted, d, seed)?;
    let m = pipeline.output_dim();
    let keep_rows = |ds: &Dataset, salt: u64| -> Result<(SketchSums, Vec<f32>, Vec<f32>)> {
        let mut sums = SketchSums::new(m);
        let mut kept = Reservoir::new(opts.cap, m, seed, u64::MAX - 3 - salt);
        let mut raw: Vec<f32> = Vec::new();
        let mut z = Vec::new();
        stream(ds, &ds.units(), chunk_rows, &mut |ch: Chunk| {
            z.resize(ch.rows * m, 0.0);
            pipeline.map_chunk(&ch.x, ch.rows, &mut z, opts.threads);
            sums.add(&z, ch.rows);
            kept.offer(&z, ch.rows);
            if opts.exact {
                if raw.len() / d.max(1) + ch.rows > 20_000 {
                    return Err(Error::usage("--exact", "the exact kernel distance is limited to 20,000 rows in all"));
                }
                raw.extend_from_slice(&ch.x);
            }
            Ok(())
        })?;
        Ok((sums, kept.rows, raw))
    };
    let (sa, ka, ra) = keep_rows(&da, 0)?;
    let (sb, kb, rb) = keep_rows(&db, 1)?;
    if sa.n < 2 || sb.n < 2 {
        return Err(Error::data(crate::error::Location::default(), "each input needs at least 2 rows"));
    }
    let (na, nb) = (ka.len() / m, kb.len() / m);
    let mut pooled = ka;
    pooled.extend_from_slice(&kb);
    let perms = permutations(na + nb, opts.permutations, seed);
    let (_, _, p) = permutation_test(&pooled, m, na, &perms, Statistic::V);
    let v = mmd2_v(&sa, &sb);
    let estimate = relative_sd_estimate(&fitted, d, &sa.mean(), &sb.mean());
    let exact = if opts.exact {
        let k = fitted[0].kernel()?;
        let kappa = |x: &[f32], y: &[f32]| -> f64 {
            let (nx, ny) = (x.len() / d, y.len() / d);
            let mut t = 0.0;
            for i in 0..nx {
                for j in 0..ny {
                    t += k.eval(&x[i * d..(i + 1) * d], &y[j * d..(j + 1) * d]);
                }
            }
            t / (nx * ny) as f64
        };
        let norm = |x: &[f32]| {
            let mut v = x.to_vec();
            fitted[0].normalize().apply(&mut v, d);
            v
        };
        let (xa, xb) = (norm(&ra), norm(&rb));
        Some(kappa(&xa, &xa) + kappa(&xb, &xb) - 2.0 * kappa(&xa, &xb))
    } else {
        None
    };
    Ok(MmdReport {
        rows: (sa.n, sb.n),
        dim: m,
        relative_sd_estimate: estimate,
        relative_sd_bound: if fitted.len() == 1 { relative_variance_bound(&fitted[0], d).map(f64::sqrt) } else { None },
        stages: fitted,
        kernel_distance: v.max(0.0).sqrt(),
        kernel_distance_sq: v,
        mmd2_unbiased: mmd2_unbiased(&sa, &sb),
        p_value: p,
        test_rows: (na, nb),
        permutations: opts.permutations,
        exact_distance_sq: exact,
    })
}

/// One group's kernel-mean embedding.
#[derive(Debug, Clone, Serialize)]
pub struct GroupEmbedding {
    /// The group's value, as text.
    pub group: String,
    /// Rows in the group.
    pub rows: u64,
    /// `F(P) = Σ G(x) / n`.
    pub embedding: Vec<f64>,
    /// The LSH bucket (when asked).
    pub bucket: Option<u64>,
}

/// Per-group kernel-mean embeddings of `inputs`, grouped by `group_by` (any column,
/// compared as text), in order of first appearance. Groups with fewer than `min_rows`
/// rows are an error naming the group.
pub fn embed_groups(
    session: &Session,
    inputs: &[PathBuf],
    group_by: &str,
    sketching: &Sketching,
    min_rows: u64,
) -> Result<(Vec<GroupEmbedding>, Vec<StageSpec>)> {
    let Sketching { stages, seed, sample_rows, chunk_rows, threads, .. } = sketching;
    let (seed, sample_rows, chunk_rows, threads) = (*seed, *sample_rows, *chunk_rows, *threads);
    let mut cols = sketching.cols.clone();
    cols.keep = vec![group_by.to_string()];
    let ds = Dataset::open(session, inputs, cols)?;
    let d = ds.dim();
    let sample = reservoir(&ds, sample_rows.max(1), seed, chunk_rows, &mut |_| Ok(()))?;
    let fitted: Vec<StageSpec> =
        stages.iter().enumerate().map(|(i, s)| s.fit(&sample, d, seed, i)).collect::<Result<_>>()?;
    let pipeline = FeaturePipeline::build(&fitted, d, seed)?;
    let m = pipeline.output_dim();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut groups: Vec<(String, SketchSums)> = Vec::new();
    let mut z = Vec::new();
    stream(&ds, &ds.units(), chunk_rows, &mut |ch: Chunk| {
        z.resize(ch.rows * m, 0.0);
        pipeline.map_chunk(&ch.x, ch.rows, &mut z, threads);
        let key = crate::source::cast::cast(&ch.keep[0], &arrow_schema::DataType::Utf8).map_err(|e| {
            Error::data(ch.location.clone().column(group_by), format!("cannot read the group column as text: {e}"))
        })?;
        let key = arrow_array::cast::AsArray::as_string::<i32>(&key);
        for r in 0..ch.rows {
            if arrow_array::Array::is_null(key, r) {
                return Err(Error::data(
                    ch.location.clone().column(group_by).row(ch.first_row + r),
                    "null group value; fill or drop such rows",
                ));
            }
            let k = key.value(r);
            let gi = match index.get(k) {
                Some(&i) => i,
                None => {
                    index.insert(k.to_string(), groups.len());
                    groups.push((k.to_string(), SketchSums::new(m)));
                    groups.len() - 1
                }
            };
            groups[gi].1.add(&z[r * m..(r + 1) * m], 1);
        }
        Ok(())
    })?;
    for (g, s) in &groups {
        if s.n < min_rows {
            return Err(Error::data(
                crate::error::Location::default().column(group_by),
                format!("group '{g}' has {} row(s), fewer than --min-rows {min_rows}", s.n),
            ));
        }
    }
    Ok((
        groups
            .into_iter()
            .map(|(group, s)| GroupEmbedding { group, rows: s.n, embedding: s.mean(), bucket: None })
            .collect(),
        fitted,
    ))
}
