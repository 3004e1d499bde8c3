//! The χ² family for histograms (Li, Lebanon & Sminchisescu 2012/2013; math.md §10):
//! the direct series with parameters `k_1..k_N` (geometric convergence), their greedy
//! fit from a log-spaced histogram of the data, and the Chebyshev approximation
//! (`exp_chi2.rs` builds exp-χ² on the direct series). All series arithmetic is f64;
//! outputs are f32.

use super::family::{Family, Sample};
use super::keys::{chi2_terms, defaults, fail, family_spec, no_fitting, weight, Checked};
use super::params::{PResult, ParamArray, Params};
use super::{ChunkMap, Kernel, Sketch};
use crate::rng::StageRng;

/// The direct χ² series map `R^d → R^{dN}`, feature `i N + (n − 1)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Chi2Series {
    /// Input dimension.
    pub d: usize,
    /// `k_1..k_N` in series order.
    pub k: Vec<f64>,
}

/// `c_1(x)..c_N(x)` for one value (zero for `x = 0`).
pub fn series_terms(x: f64, k: &[f64], out: &mut [f64]) {
    if x <= 0.0 {
        out.fill(0.0);
        return;
    }
    let mut prod = 1.0;
    for (o, &kn) in out.iter_mut().zip(k) {
        *o = 2.0 * kn.sqrt() * x / (x + kn) * prod;
        prod *= (x - kn) / (x + kn);
    }
}

/// The exact N-term error `E_N(x, y) = 2xy/(x+y) Π r_n(x) r_n(y)`.
pub fn series_error(x: f64, y: f64, k: &[f64]) -> f64 {
    if x + y <= 0.0 {
        return 0.0;
    }
    k.iter().fold(2.0 * x * y / (x + y), |acc, &kn| acc * (x - kn) / (x + kn) * (y - kn) / (y + kn))
}

/// `k_0(a, b) = 2ab/(a+b)` (0 when both are 0).
pub fn k0(a: f64, b: f64) -> f64 {
    if a + b <= 0.0 {
        0.0
    } else {
        2.0 * a * b / (a + b)
    }
}

impl ChunkMap for Chi2Series {
    fn input_dim(&self) -> usize {
        self.d
    }
    fn output_dim(&self) -> usize {
        self.d * self.k.len()
    }
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, n) = (self.d, self.k.len());
        let mut t = vec![0f64; n];
        for r in 0..rows {
            for i in 0..d {
                series_terms(f64::from(x[r * d + i]), &self.k, &mut t);
                let o = &mut out[(r * d + i) * n..(r * d + i + 1) * n];
                for (a, &b) in o.iter_mut().zip(&t) {
                    *a = b as f32;
                }
            }
        }
    }
}

/// What the greedy fit chose (math.md §10.2).
#[derive(Debug, Clone, PartialEq)]
pub struct KFit {
    /// `k_1..k_N`.
    pub k: Vec<f64>,
    /// Chosen bins.
    pub b_star: Vec<usize>,
    /// Lower end (the 10⁻³ quantile of the positive values).
    pub lo: f64,
    /// Upper end (their maximum).
    pub hi: f64,
    /// Values per bin.
    pub counts: Vec<u64>,
    /// Positive values seen.
    pub n_positive: usize,
}

/// The 10⁻³-quantile-to-max log histogram with `bins` bins and the greedy choice of `n`
/// parameters: each next `k` sits at the peak of `h_b · e_N(c_b)`.
pub fn fit_k(values: impl Iterator<Item = f64>, n: usize, bins: usize) -> KFit {
    let mut v: Vec<f64> = values.filter(|&x| x > 0.0).collect();
    if v.is_empty() {
        return KFit { k: vec![1.0; n], b_star: Vec::new(), lo: 0.0, hi: 0.0, counts: Vec::new(), n_positive: 0 };
    }
    v.sort_by(f64::total_cmp);
    let q = 1e-3 * (v.len() - 1) as f64;
    let (i, frac) = (q.floor() as usize, q - q.floor());
    let lo = if i + 1 < v.len() { v[i] + frac * (v[i + 1] - v[i]) } else { v[i] };
    let hi = v[v.len() - 1];
    if lo >= hi {
        return KFit { k: vec![lo; n], b_star: Vec::new(), lo, hi, counts: Vec::new(), n_positive: v.len() };
    }
    let ratio = (hi / lo).ln();
    let mut counts = vec![0u64; bins];
    for &x in &v {
        let x = x.clamp(lo, hi);
        let b = ((bins as f64) * (x / lo).ln() / ratio).floor() as usize;
        counts[b.min(bins - 1)] += 1;
    }
    let centres: Vec<f64> = (0..bins).map(|b| lo * (ratio * (b as f64 + 0.5) / bins as f64).exp()).collect();
    let h: Vec<f64> = counts.iter().map(|&c| c as f64 / v.len() as f64).collect();
    let mut err: Vec<f64> = centres.iter().map(|c| c.sqrt()).collect();
    let (mut k, mut b_star) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let mut best = 0;
        for b in 1..bins {
            if h[b] * err[b] > h[best] * err[best] {
                best = b;
            }
        }
        let kn = centres[best];
        for (e, &c) in err.iter_mut().zip(&centres) {
            *e *= (c - kn).abs() / (c + kn);
        }
        k.push(kn);
        b_star.push(best);
    }
    KFit { k, b_star, lo, hi, counts, n_positive: v.len() }
}

/// The Chebyshev map `ψ(x) = √x [d_0/2, d_1/√2, …, d_{Q−1}/√2]` per coordinate.
#[derive(Debug, Clone, PartialEq)]
pub struct Chi2Chebyshev {
    /// Input dimension.
    pub d: usize,
    /// Coefficients per coordinate `Q`.
    pub q: usize,
}

/// `d_0..d_{Q−1}` for one `x > 0` by the forward recurrence (math.md §10.3).
pub fn chebyshev_coefficients(x: f64, out: &mut [f64]) {
    let q = out.len();
    if q == 0 {
        return;
    }
    let l = x.ln();
    let two_l_pi = 2.0 * l / std::f64::consts::PI;
    out[0] = 4.0 * x.sqrt() / (x + 1.0);
    if q > 1 {
        out[1] = -(l / std::f64::consts::PI) * out[0];
    }
    for n in 2..q {
        let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
        out[n] = ((n - 2) as f64 * out[n - 2] + sign * two_l_pi * out[n - 1]) / n as f64;
    }
}

impl ChunkMap for Chi2Chebyshev {
    fn input_dim(&self) -> usize {
        self.d
    }
    fn output_dim(&self) -> usize {
        self.d * self.q
    }
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, q) = (self.d, self.q);
        let mut c = vec![0f64; q];
        let r2 = std::f64::consts::FRAC_1_SQRT_2;
        for r in 0..rows {
            for i in 0..d {
                let v = f64::from(x[r * d + i]);
                let o = &mut out[(r * d + i) * q..(r * d + i + 1) * q];
                if v <= 0.0 {
                    o.fill(0.0);
                    continue;
                }
                chebyshev_coefficients(v, &mut c);
                let s = v.sqrt();
                for (n, (a, &b)) in o.iter_mut().zip(&c).enumerate() {
                    *a = (s * b * if n == 0 { 0.5 } else { r2 }) as f32;
                }
            }
        }
    }
}

/// The χ² distance `Σ (x_i − y_i)²/(x_i + y_i)` (terms with `x_i + y_i = 0` are 0).
pub fn chi2_distance(x: &[f32], y: &[f32]) -> f64 {
    x.iter()
        .zip(y)
        .map(|(&a, &b)| {
            let (a, b) = (f64::from(a), f64::from(b));
            if a + b > 0.0 {
                (a - b).powi(2) / (a + b)
            } else {
                0.0
            }
        })
        .sum()
}

family_spec! {
    /// `kind = "chi2"`: the direct additive-χ² series with `terms` parameters per coordinate.
    pub struct Chi2Spec {
        /// `N`, terms per coordinate (output `d·N`).
        #[serde(default = "defaults::terms")]
        pub terms: usize,
        /// `k_1..k_N`; empty: fitted greedily on the pre-pass sample.
        #[serde(default)]
        pub k: Vec<f64>,
        /// Histogram bins of the fit.
        #[serde(default = "defaults::bins")]
        pub bins: usize,
    }
}

/// A χ² stage with its `k`'s settled (`terms` of them).
#[derive(Debug, Clone, PartialEq)]
pub struct Chi2Fitted {
    /// The spec, `k` set.
    pub spec: Chi2Spec,
}

/// The fitted `k`'s of a sample's values (math.md §10.2).
pub(crate) fn sample_k(sample: &Sample, terms: usize, bins: usize) -> Vec<f64> {
    fit_k(sample.x.iter().map(|&v| f64::from(v)), terms, bins).k
}

impl Family for Chi2Spec {
    type Fitted = Chi2Fitted;
    const NONNEGATIVE: bool = true;

    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)?;
        chi2_terms(self.terms, &self.k, self.bins, 64)
    }
    fn fitted(&self) -> Option<Chi2Fitted> {
        (self.k.len() == self.terms).then(|| Chi2Fitted { spec: self.clone() })
    }
    fn fit(&self, sample: &Sample) -> Chi2Fitted {
        Chi2Fitted { spec: Chi2Spec { k: sample_k(sample, self.terms, self.bins), ..self.clone() } }
    }
    fn settled(f: &Chi2Fitted) -> Self {
        f.spec.clone()
    }
    fn dim(&self) -> Option<usize> {
        Some(self.terms)
    }
    fn with_dim(&self, dim: usize) -> Self {
        Chi2Spec { terms: dim.clamp(1, 64), ..self.clone() }
    }
    fn kernel(_: &Chi2Fitted) -> Kernel {
        Kernel::Chi2
    }
    fn build(f: &Chi2Fitted, d: usize, _rng: &mut StageRng) -> Box<dyn Sketch> {
        Box::new(Chi2Series { d, k: f.spec.k.clone() })
    }
    fn restore(f: &Chi2Fitted, d: usize, _params: &Params) -> PResult<Box<dyn Sketch>> {
        Ok(Box::new(Chi2Series { d, k: f.spec.k.clone() }))
    }
}

family_spec! {
    /// `kind = "chi2_chebyshev"`: the Chebyshev approximation of the additive χ² kernel.
    pub struct Chi2ChebyshevSpec {
        /// `Q`, coefficients per coordinate (output `d·Q`).
        #[serde(default = "defaults::cheb_terms")]
        pub terms: usize,
    }
}

impl Family for Chi2ChebyshevSpec {
    no_fitting!();
    const NONNEGATIVE: bool = true;

    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)?;
        if self.terms == 0 || self.terms > 400 {
            return fail("terms", format!("must be from 1 to 400, got {}", self.terms));
        }
        Ok(())
    }
    fn dim(&self) -> Option<usize> {
        Some(self.terms)
    }
    fn with_dim(&self, dim: usize) -> Self {
        Chi2ChebyshevSpec { terms: dim.clamp(1, 400), ..self.clone() }
    }
    fn kernel(_: &Self) -> Kernel {
        Kernel::Chi2
    }
    fn build(s: &Self, d: usize, _rng: &mut StageRng) -> Box<dyn Sketch> {
        Box::new(Chi2Chebyshev { d, q: s.terms })
    }
    fn restore(s: &Self, d: usize, _params: &Params) -> PResult<Box<dyn Sketch>> {
        Ok(Box::new(Chi2Chebyshev { d, q: s.terms }))
    }
}

impl Sketch for Chi2Series {
    fn params(&self) -> Vec<ParamArray> {
        Vec::new()
    }
}

impl Sketch for Chi2Chebyshev {
    fn params(&self) -> Vec<ParamArray> {
        Vec::new()
    }
}
