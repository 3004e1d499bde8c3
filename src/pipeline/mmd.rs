//! Kernel mean embeddings and the two-sample test (math.md §1, §9): the sketched kernel
//! mean of a point set is `Zᵀ1/n`, so streaming two inputs once gives the kernel
//! distance `D̂² = ‖F(P) − F(Q)‖²`, the unbiased `MMD²_u` from `S = Σ G` and `Q = Σ ‖G‖²`,
//! and a permutation test on a bounded uniform subsample of the per-row sketches.

use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::pipeline::stream::{reservoir, stream, Reservoir};
use crate::rng::StageRng;
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::source::{Chunk, ColumnSpec, Dataset};

/// Streamed sums of one point set's sketches.
#[derive(Debug, Clone, PartialEq)]
pub struct SketchSums {
    /// Rows.
    pub n: u64,
    /// `S = Σ G(x)`.
    pub s: Vec<f64>,
    /// `Q = Σ ‖G(x)‖²`.
    pub q: f64,
}

impl SketchSums {
    /// Empty sums of dimension `m`.
    pub fn new(m: usize) -> Self {
        SketchSums { n: 0, s: vec![0.0; m], q: 0.0 }
    }

    /// Adds `rows` sketches (`rows × m`).
    pub fn add(&mut self, z: &[f32], rows: usize) {
        let m = self.s.len();
        for row in z[..rows * m].chunks_exact(m) {
            let mut sq = 0.0;
            for (a, &v) in self.s.iter_mut().zip(row) {
                let v = f64::from(v);
                *a += v;
                sq += v * v;
            }
            self.q += sq;
        }
        self.n += rows as u64;
    }

    /// The sketched kernel mean `F = S/n`.
    pub fn mean(&self) -> Vec<f64> {
        self.s.iter().map(|v| v / self.n.max(1) as f64).collect()
    }
}

/// The V-statistic `‖S_P/n_P − S_Q/n_Q‖²` (the sketched squared kernel distance).
pub fn mmd2_v(p: &SketchSums, q: &SketchSums) -> f64 {
    p.mean().iter().zip(q.mean()).map(|(a, b)| (a - b).powi(2)).sum()
}

/// The unbiased `MMD²_u = (‖S_P‖² − Q_P)/(n_P(n_P−1)) + (‖S_Q‖² − Q_Q)/(n_Q(n_Q−1)) − 2⟨S_P, S_Q⟩/(n_P n_Q)`.
pub fn mmd2_unbiased(p: &SketchSums, q: &SketchSums) -> f64 {
    let (np, nq) = (p.n as f64, q.n as f64);
    let sp2: f64 = p.s.iter().map(|v| v * v).sum();
    let sq2: f64 = q.s.iter().map(|v| v * v).sum();
    let spq: f64 = p.s.iter().zip(&q.s).map(|(a, b)| a * b).sum();
    (sp2 - p.q) / (np * (np - 1.0)) + (sq2 - q.q) / (nq * (nq - 1.0)) - 2.0 * spq / (np * nq)
}

/// Which statistic a permutation test uses (the same for `T_obs` and every `T_b`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statistic {
    /// `‖F(P) − F(Q)‖²`.
    V,
    /// `MMD²_u`.
    Unbiased,
}

fn stat_of(rows: &[f32], m: usize, idx: &[usize], n_p: usize, which: Statistic) -> f64 {
    let (mut p, mut q) = (SketchSums::new(m), SketchSums::new(m));
    for (k, &i) in idx.iter().enumerate() {
        let r = &rows[i * m..(i + 1) * m];
        if k < n_p {
            p.add(r, 1);
        } else {
            q.add(r, 1);
        }
    }
    match which {
        Statistic::V => mmd2_v(&p, &q),
        Statistic::Unbiased => mmd2_unbiased(&p, &q),
    }
}

/// Permutation test on pooled per-row sketches (`[P rows; Q rows]`, `m` wide): each
/// permutation puts `pooled[perm[..n_p]]` in P. Returns `(T_obs, T_b, p)` with
/// `p = (1 + #{T_b ≥ T_obs})/(B + 1)`.
pub fn permutation_test(
    pooled: &[f32],
    m: usize,
    n_p: usize,
    perms: &[Vec<usize>],
    which: Statistic,
) -> (f64, Vec<f64>, f64) {
    let n = pooled.len() / m;
    let id: Vec<usize> = (0..n).collect();
    let t_obs = stat_of(pooled, m, &id, n_p, which);
    let tb: Vec<f64> = perms.iter().map(|p| stat_of(pooled, m, p, n_p, which)).collect();
    let ge = tb.iter().filter(|&&t| t >= t_obs).count();
    (t_obs, tb, (1 + ge) as f64 / (perms.len() + 1) as f64)
}

/// `B` seeded uniform permutations of `0..n` (Fisher–Yates).
pub fn permutations(n: usize, b: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut r = StageRng::new(seed, u64::MAX - 2);
    (0..b)
        .map(|_| {
            let mut p: Vec<usize> = (0..n).collect();
            for k in (1..n).rev() {
                let j = r.below(k as u32 + 1) as usize;
                p.swap(k, j);
            }
            p
        })
        .collect()
}

/// The relative-variance constant `c` of `D̂²` for a Gaussian sketch stage (math.md §9):
/// `Var D̂² ≤ c D⁴`. `None` for other maps.
pub fn relative_variance_bound(spec: &StageSpec, d: usize) -> Option<f64> {
    let term = |m: usize, k: usize| {
        let (m, k) = (m as f64, k as i32);
        (1.0 + 2.0 / m).powi(k) * (1.0 + 11.0 / m).powi(k - 1) - 1.0
    };
    match spec {
        StageSpec::GaussianSketch(s) => Some(term(s.dim, d.next_power_of_two())),
        StageSpec::GaussianSketchHd(s) => Some(
            s.blocks
                .iter()
                .enumerate()
                .filter(|(j, _)| !(*j == 0 && s.identity_block))
                .map(|(j, &m)| term(m, (j + 1).next_power_of_two()))
                .fold(0.0, f64::max),
        ),
        _ => None,
    }
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
#[expect(clippy::too_many_arguments, reason = "the CLI's settings, passed through once")]
pub fn mmd(
    a: &[PathBuf],
    b: &[PathBuf],
    cols: ColumnSpec,
    stages: &[StageSpec],
    seed: u64,
    sample_rows: usize,
    chunk_rows: usize,
    opts: &MmdOptions,
) -> Result<MmdReport> {
    let da = Dataset::open(a, cols.clone())?;
    let db = Dataset::open(b, cols)?;
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
                    return Err(Error::config(
                        "command line",
                        "--exact",
                        "the exact kernel distance is limited to 20,000 rows in all",
                    ));
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
    let estimate = match fitted.first() {
        Some(StageSpec::GaussianSketchHd(h)) if fitted.len() == 1 => {
            let (fa, fb) = (sa.mean(), sb.mean());
            let mut col = 1;
            let mut var = 0.0;
            for (j, &mj) in h.blocks.iter().enumerate() {
                let exact = j == 0 && h.identity_block;
                let w = if exact { d } else { mj };
                let dj: f64 = (col..col + w).map(|i| (fa[i] - fb[i]).powi(2)).sum();
                if !exact {
                    let (m, k) = (mj as f64, (j + 1).next_power_of_two() as i32);
                    var += ((1.0 + 2.0 / m).powi(k) * (1.0 + 11.0 / m).powi(k - 1) - 1.0) * dj * dj;
                }
                col += w;
            }
            (v > 0.0).then(|| var.sqrt() / v)
        }
        _ => None,
    };
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

/// Euclidean p-stable LSH (Datar et al. 2004; math.md §9): `k` concatenated hashes
/// `⌊(⟨a, v⟩ + b)/w⌋`, `a ~ N(0, I)`, `b ~ U[0, w)`, combined into one bucket id.
#[derive(Debug, Clone)]
pub struct Lsh {
    /// Projections, `k × m`.
    pub a: Vec<f64>,
    /// Offsets.
    pub b: Vec<f64>,
    /// Width.
    pub w: f64,
}

impl Lsh {
    /// Draws `k` hashes over `m` dimensions with width `w`.
    pub fn draw(k: usize, m: usize, w: f64, seed: u64) -> Lsh {
        let mut r = StageRng::new(seed, u64::MAX - 7);
        let a = (0..k * m).map(|_| r.normal()).collect();
        let b = (0..k).map(|_| r.uniform() * w).collect();
        Lsh { a, b, w }
    }

    /// The `k` hash values of `v`.
    pub fn hashes(&self, v: &[f64]) -> Vec<i64> {
        let m = v.len();
        self.b
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                ((self.a[i * m..(i + 1) * m].iter().zip(v).map(|(a, x)| a * x).sum::<f64>() + b) / self.w).floor()
                    as i64
            })
            .collect()
    }

    /// One bucket id for the concatenated hashes (FNV-1a of their bytes).
    pub fn bucket(&self, v: &[f64]) -> u64 {
        let bytes: Vec<u8> = self.hashes(v).iter().flat_map(|h| h.to_le_bytes()).collect();
        u64::from_str_radix(&crate::stats::checksum([bytes.as_slice()]), 16).unwrap_or(0)
    }
}

/// The collision probability of one hash at distance `c` for width `w` (math.md §9).
pub fn lsh_collision_probability(c: f64, w: f64) -> f64 {
    if c <= 0.0 {
        return 1.0;
    }
    let t = w / c;
    let phi_neg = 0.5 * erfc(t / std::f64::consts::SQRT_2);
    1.0 - 2.0 * phi_neg - 2.0 / ((2.0 * std::f64::consts::PI).sqrt() * t) * (1.0 - (-t * t / 2.0).exp())
}

/// The complementary error function (Numerical Recipes' erfcc, |error| < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Per-group kernel-mean embeddings of `inputs`, grouped by `group_by` (any column,
/// compared as text), in order of first appearance. Groups with fewer than `min_rows`
/// rows are an error naming the group.
#[expect(clippy::too_many_arguments, reason = "the CLI's settings, passed through once")]
pub fn embed_groups(
    inputs: &[PathBuf],
    mut cols: ColumnSpec,
    group_by: &str,
    stages: &[StageSpec],
    seed: u64,
    sample_rows: usize,
    chunk_rows: usize,
    min_rows: u64,
    threads: usize,
) -> Result<(Vec<GroupEmbedding>, Vec<StageSpec>)> {
    cols.keep = vec![group_by.to_string()];
    let ds = Dataset::open(inputs, cols)?;
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
        let key = arrow_cast::cast(&ch.keep[0], &arrow_schema::DataType::Utf8).map_err(|e| {
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
