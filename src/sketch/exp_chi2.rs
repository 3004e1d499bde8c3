//! exp-χ² (Vempati et al. 2010; math.md §10.4): `exp(−β X²(x, y))` by the direct χ²
//! series followed by Gaussian random Fourier features with `w ~ N(0, 2β I)`.

use super::chi2::{chi2_distance, sample_k, Chi2Series};
use super::family::{Family, Sample};
use super::keys::{chi2_terms, defaults, family_spec, positive_opt, weight, Checked};
use super::params::{PResult, ParamArray, Params};
use super::rff::rff_dim;
use super::rff::{Rff, RffVariant, ShiftKernel};
use super::{ChunkMap, Kernel, Sketch};
use crate::rng::StageRng;

/// exp-χ²: the direct series followed by Gaussian random Fourier features with
/// `w ~ N(0, 2β I)`, unbiased for `exp(−β‖c(x) − c(y)‖²) → exp(−β X²)`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpChi2 {
    /// The direct map.
    pub series: Chi2Series,
    /// The random Fourier features over `dN` inputs.
    pub rff: Rff,
}

impl ChunkMap for ExpChi2 {
    fn input_dim(&self) -> usize {
        self.series.d
    }
    fn output_dim(&self) -> usize {
        self.rff.output_dim()
    }
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        const BLOCK: usize = 512;
        let (d, dc, dz) = (self.series.d, self.series.output_dim(), self.rff.output_dim());
        let mut c = vec![0f32; BLOCK.min(rows) * dc];
        for start in (0..rows).step_by(BLOCK) {
            let n = BLOCK.min(rows - start);
            self.series.map(&x[start * d..(start + n) * d], n, &mut c[..n * dc]);
            self.rff.map(&c[..n * dc], n, &mut out[start * dz..(start + n) * dz]);
        }
    }
}

family_spec! {
    /// `kind = "exp_chi2"`: `exp(−β X²)` by the direct χ² series then Gaussian RFF.
    pub struct ExpChi2Spec {
        /// `N`, χ² terms per coordinate.
        #[serde(default = "defaults::terms")]
        pub terms: usize,
        /// `k_1..k_N`; empty: fitted.
        #[serde(default)]
        pub k: Vec<f64>,
        /// Histogram bins of the fit.
        #[serde(default = "defaults::bins")]
        pub bins: usize,
        /// `β > 0`; default `1/mean(X²)` over pre-pass sample pairs.
        #[serde(default)]
        pub beta: Option<f64>,
        /// RFF layout.
        #[serde(default)]
        pub variant: RffVariant,
        /// Output dimension `D`.
        #[serde(default = "defaults::dim")]
        pub dim: usize,
    }
}

/// An exp-χ² stage with its `k`'s and β settled.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpChi2Fitted {
    /// The spec, `k` and `beta` set.
    pub spec: ExpChi2Spec,
    /// β.
    pub beta: f64,
}

impl Family for ExpChi2Spec {
    type Fitted = ExpChi2Fitted;
    const NONNEGATIVE: bool = true;

    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)?;
        chi2_terms(self.terms, &self.k, self.bins, 64)?;
        positive_opt("beta", self.beta)?;
        rff_dim(self.variant, self.dim)
    }
    fn fitted(&self) -> Option<ExpChi2Fitted> {
        match self.beta {
            Some(beta) if self.k.len() == self.terms => Some(ExpChi2Fitted { spec: self.clone(), beta }),
            _ => None,
        }
    }
    /// The `k`'s unless given, and β = `1/mean X²` over the sample's pairs unless given
    /// (measured against the median heuristic: no better on the digits or histograms).
    fn fit(&self, sample: &Sample) -> ExpChi2Fitted {
        let k = if self.k.is_empty() { sample_k(sample, self.terms, self.bins) } else { self.k.clone() };
        let beta = self.beta.unwrap_or_else(|| {
            let mean = sample.pair_mean(chi2_distance);
            if mean > 0.0 {
                1.0 / mean
            } else {
                1.0
            }
        });
        ExpChi2Fitted { spec: ExpChi2Spec { k, beta: Some(beta), ..self.clone() }, beta }
    }
    fn settled(f: &ExpChi2Fitted) -> Self {
        f.spec.clone()
    }
    fn dense_param_bytes(&self, d: usize) -> u64 {
        // Random Fourier features over the series' features, about 2·terms + 1 per input.
        4 * ((2 * self.terms + 1) as u64 * d as u64 + 1) * self.dim as u64
    }
    fn dim(&self) -> Option<usize> {
        Some(self.dim)
    }
    fn with_dim(&self, dim: usize) -> Self {
        ExpChi2Spec { dim: dim + dim % 2, ..self.clone() }
    }
    fn kernel(f: &ExpChi2Fitted) -> Kernel {
        Kernel::ExpChi2 { beta: f.beta }
    }
    fn build(f: &ExpChi2Fitted, d: usize, rng: &mut StageRng) -> Box<dyn Sketch> {
        let s = &f.spec;
        let sigma = 1.0 / (2.0 * f.beta).sqrt();
        Box::new(ExpChi2 {
            series: Chi2Series { d, k: s.k.clone() },
            rff: Rff::draw(ShiftKernel::Gaussian, sigma, s.variant, d * s.terms, s.dim, rng),
        })
    }
    /// From the arrays `rff_…`.
    fn restore(f: &ExpChi2Fitted, d: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
        let s = &f.spec;
        Ok(Box::new(ExpChi2 {
            series: Chi2Series { d, k: s.k.clone() },
            rff: Rff::restore(&Params(&p.sub("rff_")), s.variant, d * s.terms, s.dim)?,
        }))
    }
}

impl Sketch for ExpChi2 {
    fn params(&self) -> Vec<ParamArray> {
        self.rff.params().into_iter().map(|p| p.prefixed("rff_")).collect()
    }
}
