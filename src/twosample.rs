//! Two-sample statistics of sketched kernel means (math.md §9): the streamed sums of a
//! point set's sketches, the V-statistic `‖F(P) − F(Q)‖²` and the unbiased `MMD²_u`, the
//! permutation test on pooled per-row sketches, the variance bounds and estimate of the
//! Gaussian sketches, and Euclidean p-stable LSH over embeddings. Math only: the drivers
//! that stream files through a map are `pipeline::mmd`.

use crate::rng::StageRng;
use crate::sketch::StageSpec;

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

/// The relative standard deviation of `D̂²` estimated from a GaussianSketchHD's blocks'
/// own contributions, `√(Σ_j c_j D̂_j⁴) / D̂²` (math.md §9), for the kernel means `fa`, `fb`
/// of inputs of width `d`. `None` for other maps or a zero distance.
pub fn relative_sd_estimate(stages: &[StageSpec], d: usize, fa: &[f64], fb: &[f64]) -> Option<f64> {
    let [StageSpec::GaussianSketchHd(h)] = stages else { return None };
    let v: f64 = fa.iter().zip(fb).map(|(a, b)| (a - b).powi(2)).sum();
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
