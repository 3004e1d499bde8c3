//! Gaussian kernel-distance sketches (Chen & Phillips 2017; math.md §9): linear
//! sketches of the explicit (truncated) expansion of `exp(−‖x−y‖²)` after the exact
//! preprocessing `x ↦ √γ (x − c)`, so errors on kernel distances between point sets
//! are relative. GaussianSketch combines per-coordinate expansions with one
//! recursive tensor sketch over the `d` coordinates (low `d`); GaussianSketchHD
//! sketches each degree of the series in `⟨x, y⟩` with its own tree (high `d`).

use super::family::{Family, Sample};
use super::keys::{defaults, dim, even_dim, fail, family_spec, gaussian, weight, Checked};
use super::params::{PResult, ParamArray, Params};
use super::recursive::RecursiveTensorSketch;
use super::recursive::{tree_from, tree_params};
use super::{ChunkMap, Kernel, Sketch, MAX_TRUNCATION};
use crate::rng::StageRng;

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

impl ChunkMap for GaussianSketch {
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

impl ChunkMap for GaussianSketchHd {
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

/// Centre (the sample mean unless given) and σ (the median pair distance unless given).
fn fit_common(sample: &Sample, center: &[f64], sigma: Option<f64>) -> (Vec<f64>, f64) {
    let (n, d) = (sample.n, sample.d);
    let center = if center.len() == d {
        center.to_vec()
    } else {
        (0..d).map(|j| (0..n).map(|i| f64::from(sample.x[i * d + j])).sum::<f64>() / n.max(1) as f64).collect()
    };
    let sigma = sigma.unwrap_or_else(|| sample.median_distance(false));
    (center, sigma)
}

fn preprocess(center: &[f64], sigma: f64) -> Preprocess {
    Preprocess { center: center.to_vec(), scale: (1.0 / (2.0 * sigma * sigma)).sqrt() }
}

family_spec! {
    /// `kind = "gaussian_sketch"`: `exp(−‖x−y‖²/(2σ²))` by per-coordinate expansions and one
    /// recursive tensor sketch over the coordinates (for low `d`, math.md §9).
    pub struct GaussianSketchSpec {
        /// Bandwidth σ; default: the median pairwise distance of the pre-pass sample.
        #[serde(default)]
        pub sigma: Option<f64>,
        /// Terms per coordinate `s`; default: the smallest making the truncation bound ≤ 1e-6.
        #[serde(default)]
        pub truncation: Option<usize>,
        /// Output dimension `m` (even).
        #[serde(default = "defaults::dim")]
        pub dim: usize,
        /// Centre `c` of the preprocessing; default: the pre-pass sample mean.
        #[serde(default)]
        pub center: Vec<f64>,
    }
}

/// A Gaussian sketch with σ, truncation and centre settled.
#[derive(Debug, Clone, PartialEq)]
pub struct GaussianFitted {
    /// The spec, every fitted key set.
    pub spec: GaussianSketchSpec,
    /// σ.
    pub sigma: f64,
    /// Terms per coordinate.
    pub truncation: usize,
}

impl Family for GaussianSketchSpec {
    type Fitted = GaussianFitted;

    fn check(&self, d: Option<usize>) -> Checked {
        weight(self.weight)?;
        gaussian(self.sigma, self.truncation, &self.center, d)?;
        even_dim(self.dim)
    }
    fn fitted(&self) -> Option<GaussianFitted> {
        match (self.sigma, self.truncation) {
            (Some(sigma), Some(truncation)) if !self.center.is_empty() => {
                Some(GaussianFitted { spec: self.clone(), sigma, truncation })
            }
            _ => None,
        }
    }
    /// The centre and σ, then the truncation from the preprocessed range (math.md §8):
    /// `L = 1.1 max |x_j|`, `s` from `d · Pr[Poi(2L²) ≥ s] ≤ 1e-6`.
    fn fit(&self, sample: &Sample) -> GaussianFitted {
        let (n, d) = (sample.n, sample.d);
        let (center, sigma) = fit_common(sample, &self.center, self.sigma);
        let scale = (1.0 / (2.0 * sigma * sigma)).sqrt();
        let l = 1.1 * (0..n * d).map(|i| (scale * (f64::from(sample.x[i]) - center[i % d])).abs()).fold(0.0, f64::max);
        let truncation = self.truncation.unwrap_or_else(|| truncation(2.0 * l * l, d as f64, 1e-6, MAX_TRUNCATION));
        let spec = GaussianSketchSpec { sigma: Some(sigma), truncation: Some(truncation), center, ..self.clone() };
        GaussianFitted { spec, sigma, truncation }
    }
    fn settled(f: &GaussianFitted) -> Self {
        f.spec.clone()
    }
    fn dim(&self) -> Option<usize> {
        Some(self.dim)
    }
    fn with_dim(&self, dim: usize) -> Self {
        GaussianSketchSpec { dim: dim + dim % 2, ..self.clone() }
    }
    fn kernel(f: &GaussianFitted) -> Kernel {
        Kernel::Gaussian { sigma: f.sigma }
    }
    fn build(f: &GaussianFitted, d: usize, rng: &mut StageRng) -> Box<dyn Sketch> {
        let t = f.truncation;
        Box::new(GaussianSketch {
            pre: preprocess(&f.spec.center, f.sigma),
            s: t,
            tree: RecursiveTensorSketch::draw(t, d, f.spec.dim, rng),
        })
    }
    fn restore(f: &GaussianFitted, d: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
        if f.spec.center.len() != d {
            return Err(format!("the Gaussian sketch's centre has {} entries for d = {d}", f.spec.center.len()));
        }
        let t = f.truncation;
        Ok(Box::new(GaussianSketch {
            pre: preprocess(&f.spec.center, f.sigma),
            s: t,
            tree: tree_from(p, "", t, d, f.spec.dim)?,
        }))
    }
}

family_spec! {
    /// `kind = "gaussian_sketch_hd"`: `exp(−‖x−y‖²/(2σ²))` by one recursive tensor sketch per
    /// degree of the series in `⟨x, y⟩` (for high `d`, math.md §9).
    pub struct GaussianSketchHdSpec {
        /// Bandwidth σ; default: the median pairwise distance of the pre-pass sample.
        #[serde(default)]
        pub sigma: Option<f64>,
        /// Degrees `s`; default: the smallest making the truncation bound ≤ 1e-6.
        #[serde(default)]
        pub truncation: Option<usize>,
        /// Total output dimension `Σ m_j`, split over the degrees.
        #[serde(default = "defaults::dim")]
        pub dim: usize,
        /// Centre `c`; default: the pre-pass sample mean.
        #[serde(default)]
        pub center: Vec<f64>,
        /// Block sizes `m_1 … m_{s−1}`; default: from the radius of the sample (math.md §9).
        #[serde(default)]
        pub blocks: Vec<usize>,
        /// Degree 1 exact (set by the fit when its share reaches `d`).
        #[serde(default)]
        pub identity_block: bool,
    }
}

/// A Gaussian HD sketch with σ, centre and block sizes settled.
#[derive(Debug, Clone, PartialEq)]
pub struct GaussianHdFitted {
    /// The spec, every fitted key set.
    pub spec: GaussianSketchHdSpec,
    /// σ.
    pub sigma: f64,
}

impl GaussianHdFitted {
    fn blocks(&self, mut tree: impl FnMut(usize, usize) -> PResult<RecursiveTensorSketch>) -> PResult<Vec<HdBlock>> {
        let s = &self.spec;
        s.blocks
            .iter()
            .enumerate()
            .map(
                |(j, &m)| {
                    if j == 0 && s.identity_block {
                        Ok(HdBlock::Identity)
                    } else {
                        tree(j, m).map(HdBlock::Tree)
                    }
                },
            )
            .collect()
    }
}

impl Family for GaussianSketchHdSpec {
    type Fitted = GaussianHdFitted;

    fn check(&self, d: Option<usize>) -> Checked {
        weight(self.weight)?;
        gaussian(self.sigma, self.truncation, &self.center, d)?;
        if self.truncation == Some(1) {
            return fail("truncation", "must be ≥ 2: the HD sketch needs at least the degree-1 block");
        }
        dim("dim", self.dim, 2)?;
        if let Some(j) = self.blocks.iter().position(|&b| b == 0) {
            return fail("blocks", format!("entry {j} is 0; every block size must be ≥ 1"));
        }
        if let Some(t) = self.truncation {
            if !self.blocks.is_empty() && self.blocks.len() + 1 != t {
                return fail("blocks", format!("needs {} sizes (degrees 1..s−1) for truncation = {t}", t - 1));
            }
        }
        match d {
            Some(d) if self.identity_block && self.blocks.first().is_some_and(|&m| m != d) => {
                fail("blocks", format!("entry 0 must be d = {d} with identity_block = true"))
            }
            _ => Ok(()),
        }
    }
    fn fitted(&self) -> Option<GaussianHdFitted> {
        match self.sigma {
            Some(sigma) if self.truncation.is_some() && !self.center.is_empty() && !self.blocks.is_empty() => {
                Some(GaussianHdFitted { spec: self.clone(), sigma })
            }
            _ => None,
        }
    }
    /// The centre and σ, the truncation from the rows' radius (at least the degree-1
    /// block: with a truncation of 1, rows that barely spread would leave no block at
    /// all) and the block sizes of math.md §9.
    fn fit(&self, sample: &Sample) -> GaussianHdFitted {
        let (n, d) = (sample.n, sample.d);
        let (center, sigma) = fit_common(sample, &self.center, self.sigma);
        let scale = (1.0 / (2.0 * sigma * sigma)).sqrt();
        let r = 1.1
            * (0..n)
                .map(|i| {
                    (0..d).map(|j| (scale * (f64::from(sample.x[i * d + j]) - center[j])).powi(2)).sum::<f64>().sqrt()
                })
                .fold(0.0, f64::max);
        let t = self.truncation.unwrap_or_else(|| truncation(2.0 * r * r, 1.0, 1e-6, MAX_TRUNCATION)).max(2);
        let (blocks, identity_block) = if self.blocks.is_empty() {
            hd_block_sizes(self.dim, t, r, d)
        } else {
            (self.blocks.clone(), self.identity_block)
        };
        let spec = GaussianSketchHdSpec {
            sigma: Some(sigma),
            truncation: Some(t),
            center,
            blocks,
            identity_block,
            ..self.clone()
        };
        GaussianHdFitted { spec, sigma }
    }
    fn settled(f: &GaussianHdFitted) -> Self {
        f.spec.clone()
    }
    fn dim(&self) -> Option<usize> {
        Some(self.dim)
    }
    /// Block sizes are refitted for the new total.
    fn with_dim(&self, dim: usize) -> Self {
        GaussianSketchHdSpec { dim: dim.max(2), blocks: Vec::new(), identity_block: false, ..self.clone() }
    }
    fn kernel(f: &GaussianHdFitted) -> Kernel {
        Kernel::Gaussian { sigma: f.sigma }
    }
    #[allow(clippy::expect_used)] // Invariant: drawing a tree cannot fail.
    fn build(f: &GaussianHdFitted, d: usize, rng: &mut StageRng) -> Box<dyn Sketch> {
        let blocks = f.blocks(|j, m| Ok(RecursiveTensorSketch::draw(d, j + 1, m, rng))).expect("drawing cannot fail");
        Box::new(GaussianSketchHd { pre: preprocess(&f.spec.center, f.sigma), blocks })
    }
    /// From the arrays `b{j}_…` of each tree block.
    fn restore(f: &GaussianHdFitted, d: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
        if f.spec.center.len() != d {
            return Err(format!("the Gaussian sketch's centre has {} entries for d = {d}", f.spec.center.len()));
        }
        let blocks = f.blocks(|j, m| tree_from(p, &format!("b{}_", j + 1), d, j + 1, m))?;
        Ok(Box::new(GaussianSketchHd { pre: preprocess(&f.spec.center, f.sigma), blocks }))
    }
}

impl Sketch for GaussianSketch {
    fn params(&self) -> Vec<ParamArray> {
        tree_params("", &self.tree)
    }
}

impl Sketch for GaussianSketchHd {
    fn params(&self) -> Vec<ParamArray> {
        self.blocks
            .iter()
            .enumerate()
            .flat_map(|(j, b)| match b {
                HdBlock::Tree(t) => tree_params(&format!("b{}_", j + 1), t),
                HdBlock::Identity => Vec::new(),
            })
            .collect()
    }
}
