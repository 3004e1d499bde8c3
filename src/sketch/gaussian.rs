//! Gaussian kernel-distance sketches (Chen & Phillips 2017; math.md §9): linear
//! sketches of the explicit (truncated) expansion of `exp(−‖x−y‖²)` after the exact
//! preprocessing `x ↦ √γ (x − c)`, so errors on kernel distances between point sets
//! are relative. GaussianSketch combines per-coordinate expansions with one
//! recursive tensor sketch over the `d` coordinates (low `d`); GaussianSketchHD
//! sketches each degree of the series in `⟨x, y⟩` with its own tree (high `d`).

use super::recursive::RecursiveTensorSketch;
use super::{FeatureMap, GaussianSketchHdSpec, GaussianSketchSpec, MAX_TRUNCATION};

/// `φ_0(a) … φ_{s−1}(a)` with `φ_i(a) = e^{−a²} √(2^i/i!) a^i` by the recurrence
/// `φ_i = φ_{i−1} · a · √(2/i)` (no factorials, no overflow).
pub fn phi(a: f64, out: &mut [f64]) {
    let mut v = (-a * a).exp();
    for (i, o) in out.iter_mut().enumerate() {
        if i > 0 {
            v *= a * (2.0 / i as f64).sqrt();
        }
        *o = v;
    }
}

/// `Pr[Poisson(λ) ≥ s]`.
pub fn poisson_tail(lambda: f64, s: usize) -> f64 {
    if s == 0 {
        return 1.0;
    }
    let mut p = (-lambda).exp();
    let mut cdf = p;
    for i in 1..s {
        p *= lambda / i as f64;
        cdf += p;
    }
    (1.0 - cdf).max(0.0)
}

/// `Pr[Poisson(λ) = j]`.
pub fn poisson_pmf(lambda: f64, j: usize) -> f64 {
    (1..=j).fold((-lambda).exp(), |p, i| p * lambda / i as f64)
}

/// The smallest `s ≤ cap` with `count · Pr[Poi(λ) ≥ s] ≤ tol` (or `cap`).
pub fn truncation(lambda: f64, count: f64, tol: f64, cap: usize) -> usize {
    (1..=cap).find(|&s| count * poisson_tail(lambda, s) <= tol).unwrap_or(cap)
}

/// The shared preprocessing `x ↦ √γ (x − c)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocess {
    /// Centre `c`.
    pub center: Vec<f64>,
    /// `√γ`, `γ = 1/(2σ²)`.
    pub scale: f64,
}

impl Preprocess {
    fn apply(&self, x: &[f32], out: &mut [f64]) {
        for ((o, &v), &c) in out.iter_mut().zip(x).zip(&self.center) {
            *o = self.scale * (f64::from(v) - c);
        }
    }
}

/// GaussianSketch: `G(x) = T(φ^{(s)}(x_0), …, φ^{(s)}(x_{d−1}))`.
#[derive(Debug)]
pub struct GaussianSketch {
    /// Preprocessing.
    pub pre: Preprocess,
    /// Terms per coordinate `s`.
    pub s: usize,
    /// The tree: `n = s`, `k = d`.
    pub tree: RecursiveTensorSketch,
}

impl FeatureMap for GaussianSketch {
    fn input_dim(&self) -> usize {
        self.pre.center.len()
    }
    fn output_dim(&self) -> usize {
        self.tree.m
    }
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, s, m) = (self.input_dim(), self.s, self.tree.m);
        let mut xp = vec![0f64; d];
        let mut ph = vec![0f64; s];
        let mut u = vec![0f32; d * s];
        let mut sc = self.tree.scratch();
        for r in 0..rows {
            self.pre.apply(&x[r * d..(r + 1) * d], &mut xp);
            for (j, &a) in xp.iter().enumerate() {
                phi(a, &mut ph);
                for (o, &v) in u[j * s..(j + 1) * s].iter_mut().zip(&ph) {
                    *o = v as f32;
                }
            }
            let uu: &[f32] = &u;
            self.tree.sketch(|j| &uu[j * s..(j + 1) * s], &mut sc, &mut out[r * m..(r + 1) * m]);
        }
    }
}

/// One degree block of GaussianSketchHD.
#[derive(Debug)]
pub enum HdBlock {
    /// Degree 1 kept exactly: `√2 e^{−‖x‖²} x`.
    Identity,
    /// Degree `j ≥ 1` through its own tree (`n = d`, `k = j`).
    Tree(RecursiveTensorSketch),
}

/// GaussianSketchHD: `[e^{−‖x‖²}; √(2^j/j!) e^{−‖x‖²} T_j(x, …, x)]_{j = 1..s−1}`.
#[derive(Debug)]
pub struct GaussianSketchHd {
    /// Preprocessing.
    pub pre: Preprocess,
    /// Blocks for degrees `1..s−1` (degree 0 is the exact scalar).
    pub blocks: Vec<HdBlock>,
}

impl GaussianSketchHd {
    fn block_dim(&self, b: &HdBlock) -> usize {
        match b {
            HdBlock::Identity => self.pre.center.len(),
            HdBlock::Tree(t) => t.m,
        }
    }
}

impl FeatureMap for GaussianSketchHd {
    fn input_dim(&self) -> usize {
        self.pre.center.len()
    }
    fn output_dim(&self) -> usize {
        1 + self.blocks.iter().map(|b| self.block_dim(b)).sum::<usize>()
    }
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, dz) = (self.input_dim(), self.output_dim());
        let mut xp = vec![0f64; d];
        let mut xf = vec![0f32; d];
        let mut scratch: Vec<_> = self
            .blocks
            .iter()
            .map(|b| match b {
                HdBlock::Tree(t) => Some(t.scratch()),
                HdBlock::Identity => None,
            })
            .collect();
        for r in 0..rows {
            self.pre.apply(&x[r * d..(r + 1) * d], &mut xp);
            let e = (-xp.iter().map(|v| v * v).sum::<f64>()).exp();
            for (f, &v) in xf.iter_mut().zip(&xp) {
                *f = v as f32;
            }
            let o = &mut out[r * dz..(r + 1) * dz];
            o[0] = e as f32;
            let mut col = 1;
            let mut coef = 1.0f64;
            for (j, (b, sc)) in self.blocks.iter().zip(scratch.iter_mut()).enumerate() {
                let deg = j + 1;
                coef *= (2.0 / deg as f64).sqrt();
                let w = self.block_dim(b);
                let dst = &mut o[col..col + w];
                match (b, sc) {
                    (HdBlock::Identity, _) => {
                        for (t, &v) in dst.iter_mut().zip(&xp) {
                            *t = (coef * e * v) as f32;
                        }
                    }
                    (HdBlock::Tree(t), Some(sc)) => {
                        let xr: &[f32] = &xf;
                        t.sketch(|_| xr, sc, dst);
                        let f = (coef * e) as f32;
                        dst.iter_mut().for_each(|v| *v *= f);
                    }
                    (HdBlock::Tree(_), None) => unreachable!("every tree block has scratch"),
                }
                col += w;
            }
        }
    }
}

/// HD block sizes for a total `m` (math.md §9): `m_j ∝ √(8K_j − 6) π_j`, `π_j =
/// Pr[Poi(2R²) = j]`, each rounded up to an even number ≥ 16; block 1 becomes the exact
/// identity when its share reaches `d`. Returns `(sizes for j = 1..s−1, identity1)`.
pub fn hd_block_sizes(m: usize, s: usize, r: f64, d: usize) -> (Vec<usize>, bool) {
    let lambda = 2.0 * r * r;
    let weights: Vec<f64> = (1..s)
        .map(|j| {
            let k = j.next_power_of_two() as f64;
            (8.0 * k - 6.0).sqrt() * poisson_pmf(lambda, j)
        })
        .collect();
    let total: f64 = weights.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    let budget = m.saturating_sub(1) as f64;
    let mut sizes: Vec<usize> = weights
        .iter()
        .map(|w| {
            let v = (budget * w / total).ceil() as usize;
            v.max(16).div_ceil(2) * 2
        })
        .collect();
    let identity = sizes.first().is_some_and(|&m1| m1 >= d);
    if identity {
        sizes[0] = d;
    }
    (sizes, identity)
}

/// Fits a Gaussian sketch on the pre-pass sample (normalised rows `xn`, `n × d`, and
/// random row pairs): the center (the mean unless given), σ (the median pair distance
/// unless given) and the truncation from the preprocessed range (math.md §8).
pub(crate) fn fit_sketch(s: &mut GaussianSketchSpec, xn: &[f32], n: usize, d: usize, pairs: &[(usize, usize)]) {
    let (center, sigma) = fit_common(xn, n, d, pairs, &s.center, s.sigma);
    let scale = (1.0 / (2.0 * sigma * sigma)).sqrt();
    // L = 1.1 max |x_j| after preprocessing; s from d · Pr[Poi(2L²) ≥ s] ≤ 1e-6.
    let l = 1.1 * (0..n * d).map(|i| (scale * (f64::from(xn[i]) - center[i % d])).abs()).fold(0.0, f64::max);
    s.truncation = s.truncation.or(Some(truncation(2.0 * l * l, d as f64, 1e-6, MAX_TRUNCATION)));
    s.center = center;
    s.sigma = Some(sigma);
}

/// Fits a Gaussian HD sketch like [`fit_sketch`], with the truncation from the rows'
/// radius and the block sizes of math.md §9.
pub(crate) fn fit_sketch_hd(s: &mut GaussianSketchHdSpec, xn: &[f32], n: usize, d: usize, pairs: &[(usize, usize)]) {
    let (center, sigma) = fit_common(xn, n, d, pairs, &s.center, s.sigma);
    let scale = (1.0 / (2.0 * sigma * sigma)).sqrt();
    let r = 1.1
        * (0..n)
            .map(|i| (0..d).map(|j| (scale * (f64::from(xn[i * d + j]) - center[j])).powi(2)).sum::<f64>().sqrt())
            .fold(0.0, f64::max);
    // At least the degree-1 block: with a truncation of 1 (rows that barely spread) the
    // map would hold no block at all.
    let t = s.truncation.unwrap_or_else(|| truncation(2.0 * r * r, 1.0, 1e-6, MAX_TRUNCATION)).max(2);
    s.truncation = Some(t);
    if s.blocks.is_empty() {
        let (sizes, identity) = hd_block_sizes(s.dim, t, r, d);
        s.blocks = sizes;
        s.identity_block = identity;
    }
    s.center = center;
    s.sigma = Some(sigma);
}

/// Centre (sample mean unless given) and σ (median pairwise distance unless given).
fn fit_common(
    xn: &[f32],
    n: usize,
    d: usize,
    pairs: &[(usize, usize)],
    center: &[f64],
    sigma: Option<f64>,
) -> (Vec<f64>, f64) {
    let center = if center.len() == d {
        center.to_vec()
    } else {
        (0..d).map(|j| (0..n).map(|i| f64::from(xn[i * d + j])).sum::<f64>() / n.max(1) as f64).collect()
    };
    let sigma = sigma.unwrap_or_else(|| {
        let mut dist: Vec<f64> = pairs
            .iter()
            .map(|&(a, b)| {
                (0..d).map(|j| (f64::from(xn[a * d + j]) - f64::from(xn[b * d + j])).powi(2)).sum::<f64>().sqrt()
            })
            .filter(|&v| v > 0.0)
            .collect();
        dist.sort_by(f64::total_cmp);
        dist.get(dist.len() / 2).copied().unwrap_or(1.0)
    });
    (center, sigma)
}
