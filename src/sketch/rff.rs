//! Random Fourier features (Rahimi & Recht 2007; math.md §7) for the Gaussian kernel
//! `exp(−‖x−y‖²/(2σ²))` and the Laplacian kernel `exp(−‖x−y‖₁/σ)`. The projection of a
//! chunk is one f32 GEMM; `cos_sin` (default) is exactly shift-invariant with
//! `‖z(x)‖ = 1`, `cos` is the paper's map with random phases.

use serde::{Deserialize, Serialize};

use super::family::{Family, Sample};
use super::keys::{defaults, fail, family_spec, positive_opt, weight, Checked};
use super::params::{PResult, ParamArray, Params};
use super::MAX_DIM;
use super::{ChunkMap, Kernel, Sketch};
use crate::rng::StageRng;

/// The shift-invariant kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShiftKernel {
    /// `exp(−‖Δ‖²/(2σ²))`: `w ~ N(0, σ⁻² I)`.
    #[default]
    Gaussian,
    /// `exp(−‖Δ‖₁/σ)`: `w_i ~ Cauchy(0, 1/σ)`.
    Laplacian,
}

/// The output layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RffVariant {
    /// `F = D/2` frequencies, `z = F^{-1/2}[cos(Wx); sin(Wx)]`.
    #[default]
    CosSin,
    /// `D` frequencies with phases, `z = √(2/D) cos(Wx + b)`.
    Cos,
}

/// A random Fourier feature map.
#[derive(Debug, Clone, PartialEq)]
pub struct Rff {
    /// Input dimension.
    pub d: usize,
    /// `Wᵀ`, row-major `d × F` (column `f` is frequency `f`).
    pub wt: Vec<f32>,
    /// Phases `b` (the `cos` variant).
    pub phase: Vec<f32>,
    /// Layout.
    pub variant: RffVariant,
}

impl Rff {
    /// Number of frequencies `F` for output dimension `dim`.
    pub fn frequencies(variant: RffVariant, dim: usize) -> usize {
        match variant {
            RffVariant::CosSin => dim / 2,
            RffVariant::Cos => dim,
        }
    }

    /// Draws `W` frequency by frequency (each row's `d` entries in order), then the phases.
    pub fn draw(kernel: ShiftKernel, sigma: f64, variant: RffVariant, d: usize, dim: usize, rng: &mut StageRng) -> Rff {
        let f = Self::frequencies(variant, dim);
        let mut wt = vec![0f32; d * f];
        for fi in 0..f {
            for j in 0..d {
                let w = match kernel {
                    ShiftKernel::Gaussian => rng.normal() / sigma,
                    ShiftKernel::Laplacian => (std::f64::consts::PI * (rng.uniform() - 0.5)).tan() / sigma,
                };
                wt[j * f + fi] = w as f32;
            }
        }
        let phase = match variant {
            RffVariant::Cos => (0..f).map(|_| (std::f64::consts::TAU * rng.uniform()) as f32).collect(),
            RffVariant::CosSin => Vec::new(),
        };
        Rff { d, wt, phase, variant }
    }

    fn freqs(&self) -> usize {
        self.wt.len() / self.d.max(1)
    }
}

impl ChunkMap for Rff {
    fn input_dim(&self) -> usize {
        self.d
    }
    fn output_dim(&self) -> usize {
        match self.variant {
            RffVariant::CosSin => 2 * self.freqs(),
            RffVariant::Cos => self.freqs(),
        }
    }
    #[allow(clippy::expect_used)] // Invariant: the views' lengths are the block's rows × d and the drawn d × f frequencies.
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, f, dz) = (self.d, self.freqs(), self.output_dim());
        // Project a block of rows at a time so the scratch stays small.
        const BLOCK: usize = 512;
        let mut p = vec![0f32; BLOCK.min(rows) * f];
        let b = ndarray::ArrayView2::from_shape((d, f), &self.wt[..]).expect("shape");
        for start in (0..rows).step_by(BLOCK) {
            let n = BLOCK.min(rows - start);
            let a = ndarray::ArrayView2::from_shape((n, d), &x[start * d..(start + n) * d]).expect("shape");
            let mut c = ndarray::ArrayViewMut2::from_shape((n, f), &mut p[..n * f]).expect("shape");
            ndarray::linalg::general_mat_mul(1.0, &a, &b, 0.0, &mut c);
            for r in 0..n {
                let pr = &p[r * f..(r + 1) * f];
                let o = &mut out[(start + r) * dz..(start + r + 1) * dz];
                match self.variant {
                    RffVariant::CosSin => {
                        let s = 1.0 / (f as f64).sqrt();
                        for (k, &v) in pr.iter().enumerate() {
                            let (sin, cos) = f64::from(v).sin_cos();
                            o[k] = (cos * s) as f32;
                            o[f + k] = (sin * s) as f32;
                        }
                    }
                    RffVariant::Cos => {
                        let s = (2.0 / f as f64).sqrt();
                        for (k, (&v, &ph)) in pr.iter().zip(&self.phase).enumerate() {
                            o[k] = ((f64::from(v) + f64::from(ph)).cos() * s) as f32;
                        }
                    }
                }
            }
        }
    }
}

family_spec! {
    /// `kind = "rff"`: random Fourier features for a shift-invariant kernel.
    pub struct RffSpec {
        /// Gaussian or Laplacian.
        #[serde(default)]
        pub kernel: ShiftKernel,
        /// `cos_sin` or `cos`.
        #[serde(default)]
        pub variant: RffVariant,
        /// Output dimension `D` (even for `cos_sin`).
        #[serde(default = "defaults::dim")]
        pub dim: usize,
        /// Bandwidth σ; default: the median pairwise distance (L2, or L1 for the Laplacian)
        /// of the pre-pass sample.
        #[serde(default)]
        pub sigma: Option<f64>,
        /// Gaussian only: `γ = 1/(2σ²)`, instead of `sigma`.
        #[serde(default)]
        pub gamma: Option<f64>,
    }
}

impl RffSpec {
    /// σ as given or fitted (`None` until fitted).
    pub fn bandwidth(&self) -> Option<f64> {
        self.sigma.or(self.gamma.map(|g| (1.0 / (2.0 * g)).sqrt()))
    }
}

/// An RFF stage with its bandwidth settled.
#[derive(Debug, Clone, PartialEq)]
pub struct RffFitted {
    /// The spec, `sigma` or `gamma` set.
    pub spec: RffSpec,
    /// σ.
    pub sigma: f64,
}

impl Family for RffSpec {
    type Fitted = RffFitted;

    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)?;
        rff_dim(self.variant, self.dim)?;
        if self.sigma.is_some() && self.gamma.is_some() {
            return fail("gamma", "give either sigma or gamma, not both");
        }
        if self.gamma.is_some() && self.kernel == ShiftKernel::Laplacian {
            return fail("gamma", "the Laplacian kernel takes sigma");
        }
        positive_opt("sigma", self.sigma)?;
        positive_opt("gamma", self.gamma)
    }
    fn fitted(&self) -> Option<RffFitted> {
        self.bandwidth().map(|sigma| RffFitted { spec: self.clone(), sigma })
    }
    /// σ: the median distance over the sample's pairs.
    fn fit(&self, sample: &Sample) -> RffFitted {
        let sigma = sample.median_distance(self.kernel == ShiftKernel::Laplacian);
        RffFitted { spec: RffSpec { sigma: Some(sigma), ..self.clone() }, sigma }
    }
    fn settled(f: &RffFitted) -> Self {
        f.spec.clone()
    }
    fn dense_param_bytes(&self, d: usize) -> u64 {
        // `wt`: d × D f32, and D phases.
        4 * (d as u64 + 1) * self.dim as u64
    }
    fn dim(&self) -> Option<usize> {
        Some(self.dim)
    }
    fn with_dim(&self, dim: usize) -> Self {
        RffSpec { dim: dim + dim % 2, ..self.clone() }
    }
    fn kernel(f: &RffFitted) -> Kernel {
        match f.spec.kernel {
            ShiftKernel::Gaussian => Kernel::Gaussian { sigma: f.sigma },
            ShiftKernel::Laplacian => Kernel::Laplacian { sigma: f.sigma },
        }
    }
    fn build(f: &RffFitted, d: usize, rng: &mut StageRng) -> Box<dyn Sketch> {
        Box::new(Rff::draw(f.spec.kernel, f.sigma, f.spec.variant, d, f.spec.dim, rng))
    }
    fn restore(f: &RffFitted, d: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
        Ok(Box::new(Rff::restore(p, f.spec.variant, d, f.spec.dim)?))
    }
}

impl Rff {
    /// Rebuilds a map from the arrays `wt` and (the `cos` layout) `phase`.
    pub(crate) fn restore(p: &Params, variant: RffVariant, d: usize, dim: usize) -> PResult<Rff> {
        let f = Rff::frequencies(variant, dim);
        let wt = p.f32("wt", &[d, f])?;
        let phase = match variant {
            RffVariant::Cos => p.f32("phase", &[f])?,
            RffVariant::CosSin => Vec::new(),
        };
        if wt.iter().chain(&phase).any(|v| !v.is_finite()) {
            return Err("RFF parameters must be finite".into());
        }
        Ok(Rff { d, wt, phase, variant })
    }
}

impl Sketch for Rff {
    fn params(&self) -> Vec<ParamArray> {
        let f = self.wt.len() / self.d.max(1);
        let mut v = vec![ParamArray::f32("wt", vec![self.d, f], self.wt.clone())];
        if !self.phase.is_empty() {
            v.push(ParamArray::f32("phase", vec![f], self.phase.clone()));
        }
        v
    }
}

/// The output dimension of an RFF layout.
pub(crate) fn rff_dim(variant: RffVariant, v: usize) -> Checked {
    if !(1..=MAX_DIM).contains(&v) {
        return fail("dim", format!("must be from 2 to {MAX_DIM}, got {v}"));
    }
    if variant == RffVariant::CosSin && (v < 2 || v % 2 == 1) {
        return fail("dim", format!("must be even and ≥ 2 for variant = \"cos_sin\", got {v}"));
    }
    Ok(())
}
