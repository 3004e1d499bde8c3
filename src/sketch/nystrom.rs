//! Nyström features (Williams & Seeger 2001; math.md has no section on them, its maps
//! being oblivious, so the math is stated here and tested in `tests/suite/nystrom.rs`):
//! `z(x) = L⁻¹ k_M(x)`, where
//! `k_M(x) = (k(x, l_1), …, k(x, l_M))` over `M` landmark rows drawn uniformly from the
//! pre-pass sample and `LLᵀ = K_MM + εI` is the Cholesky factor of their kernel matrix.
//! Then `z(x)ᵀz(y) = k_M(x)ᵀ(K_MM + εI)⁻¹k_M(y)`: the kernel projected on the landmarks'
//! span, exact on the landmarks themselves (up to ε). Unlike the oblivious maps it is
//! data-dependent, so it is fitted on the sample and its landmarks and factor are stored
//! in the model; it reaches a given accuracy with far fewer features than the random
//! maps on data whose kernel spectrum decays fast (MNIST: README "Accuracy on MNIST").
//!
//! The factor is computed once, in f64 (`K_MM` is ill-conditioned: its spectrum decays
//! as the kernel's), with `ε` a stated fraction of `K_MM`'s mean diagonal, raised
//! tenfold until the factor exists. Mapping a block of rows is one f32 product with the
//! landmarks, the kernel's scalar function, and one f32 triangular solve: both at the
//! BLAS rate, `2Md + M²` flops per row.

use std::sync::Arc;

use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch};
use faer::linalg::matmul::matmul;
use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::reborrow::ReborrowMut;
use faer::{Accum, Mat, MatMut, MatRef, Par};
use serde::{Deserialize, Serialize};

use super::family::{Family, Sample};
use super::keys::{defaults, dim, fail, family_spec, poly, positive_opt, weight, Checked};
use super::params::{PResult, ParamArray, Params};
use super::{DotKernel, FeatureMap, Kernel, Sketch};
use crate::rng::StageRng;

/// The kernel a Nyström stage evaluates exactly on its landmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NystromKernel {
    /// `(γ⟨x,y⟩ + c)^p`.
    #[default]
    Polynomial,
    /// `exp(−‖x−y‖²/(2σ²))`.
    Gaussian,
}

/// The landmark rows a fit drew (`M × d`, normalised as the stage normalises). They live
/// beside the spec in memory only: a model stores them as the array `landmarks`.
#[derive(Clone, PartialEq)]
pub struct Landmarks(pub Arc<Vec<f32>>);

impl std::fmt::Debug for Landmarks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Landmarks({} values)", self.0.len())
    }
}

fn default_jitter() -> f64 {
    1e-6
}

family_spec! {
    /// `kind = "nystrom"`: the polynomial or Gaussian kernel by `dim` landmark rows of
    /// the data.
    pub struct NystromSpec {
        /// `polynomial` or `gaussian`.
        #[serde(default)]
        pub kernel: NystromKernel,
        /// Polynomial: degree `p ≥ 1`.
        #[serde(default = "defaults::degree")]
        pub degree: u32,
        /// Polynomial: scale `γ > 0`.
        #[serde(default = "defaults::gamma")]
        pub gamma: f64,
        /// Polynomial: offset `c ≥ 0`.
        #[serde(default)]
        pub offset: f64,
        /// Gaussian: bandwidth σ; default the median pairwise distance of the sample.
        #[serde(default)]
        pub sigma: Option<f64>,
        /// The number of landmarks `M`, which is the output dimension.
        #[serde(default = "defaults::dim")]
        pub dim: usize,
        /// `ε` as a fraction of `K_MM`'s mean diagonal (raised tenfold until the
        /// factor exists).
        #[serde(default = "default_jitter")]
        pub jitter: f64,
        /// The drawn landmarks (set by the fit, never read from a file).
        #[serde(skip)]
        pub landmarks: Option<Landmarks>,
    }
}

impl NystromSpec {
    fn exact(&self) -> Option<ExactKernel> {
        match self.kernel {
            NystromKernel::Polynomial => {
                Some(ExactKernel::Poly { degree: self.degree, gamma: self.gamma, offset: self.offset })
            }
            NystromKernel::Gaussian => self.sigma.map(|sigma| ExactKernel::Gaussian { sigma }),
        }
    }
}

/// The kernel as the map evaluates it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ExactKernel {
    Poly { degree: u32, gamma: f64, offset: f64 },
    Gaussian { sigma: f64 },
}

impl ExactKernel {
    /// `k` from the inner product `v = ⟨x, l⟩` and the squared norms.
    fn of_dot(self, v: f64, xx: f64, ll: f64) -> f64 {
        match self {
            ExactKernel::Poly { degree, gamma, offset } => (gamma * v + offset).powi(degree as i32),
            ExactKernel::Gaussian { sigma } => (-(xx + ll - 2.0 * v).max(0.0) / (2.0 * sigma * sigma)).exp(),
        }
    }
}

impl Family for NystromSpec {
    type Fitted = Self;
    const ARRAY_FITTED: bool = true;

    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)?;
        dim("dim", self.dim, 1)?;
        match self.kernel {
            NystromKernel::Polynomial => {
                poly(self.degree, self.gamma, self.offset)?;
                if self.sigma.is_some() {
                    return fail(
                        "sigma",
                        "is for kernel = \"gaussian\"; the polynomial kernel takes degree, gamma and offset",
                    );
                }
            }
            NystromKernel::Gaussian => positive_opt("sigma", self.sigma)?,
        }
        if !(self.jitter.is_finite() && self.jitter > 0.0 && self.jitter < 1.0) {
            return fail("jitter", format!("must be in (0, 1), got {}", self.jitter));
        }
        Ok(())
    }
    fn fitted(&self) -> Option<Self> {
        (self.landmarks.is_some() && self.exact().is_some()).then(|| self.clone())
    }
    fn stored(&self) -> Option<Self> {
        self.exact().is_some().then(|| self.clone())
    }
    fn sample_rows(&self) -> usize {
        self.dim
    }
    /// The landmarks: `M` distinct rows of the sample, uniformly; σ by the median
    /// heuristic where not given.
    fn fit(&self, sample: &Sample) -> Self {
        let sigma = match self.kernel {
            NystromKernel::Gaussian => Some(self.sigma.unwrap_or_else(|| sample.median_distance(false))),
            NystromKernel::Polynomial => None,
        };
        let mut rows = Vec::with_capacity(self.dim * sample.d);
        for i in sample.draw_rows(self.dim) {
            rows.extend_from_slice(sample.row(i));
        }
        NystromSpec { sigma, landmarks: Some(Landmarks(Arc::new(rows))), ..self.clone() }
    }
    fn settled(fitted: &Self) -> Self {
        fitted.clone()
    }
    fn dense_param_bytes(&self, d: usize) -> u64 {
        // The landmarks (M × d f32) and the factor (M × M f32).
        4 * self.dim as u64 * (d as u64 + self.dim as u64)
    }
    /// The landmarks in f32 and f64, the f64 kernel of 8 rows more than M (its padded
    /// stride) and the packed f32 copy made before it is freed.
    fn build_peak_bytes(&self, d: usize) -> u64 {
        let (m, d) = (self.dim as u64, d as u64);
        12 * m * d + 8 * (m + 8) * m + 2 * m * (m + 1)
    }
    fn dim(&self) -> Option<usize> {
        Some(self.dim)
    }
    fn with_dim(&self, dim: usize) -> Self {
        NystromSpec { dim, landmarks: None, ..self.clone() }
    }
    fn kernel(s: &Self) -> Kernel {
        match s.exact() {
            Some(ExactKernel::Gaussian { sigma }) => Kernel::Gaussian { sigma },
            _ => Kernel::Dot(DotKernel::Polynomial { degree: s.degree, gamma: s.gamma, offset: s.offset }),
        }
    }
    fn build(s: &Self, d: usize, _rng: &mut StageRng) -> Box<dyn Sketch> {
        // `fitted` holds only with landmarks and a settled kernel.
        let rows = s.landmarks.as_ref().map(|l| l.0.clone()).unwrap_or_default();
        let kernel = s.exact().unwrap_or(ExactKernel::Poly { degree: 1, gamma: 1.0, offset: 0.0 });
        let m = rows.len() / d.max(1);
        Box::new(Nystrom::factor(kernel, d, rows, m, s.jitter))
    }
    fn restore(s: &Self, d: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
        let kernel = s.exact().ok_or("the Gaussian Nyström stage has no fitted sigma")?;
        let m = s.dim;
        let landmarks = p.f32("landmarks", &[m, d])?;
        let packed = p.f32("factor", &[m * (m + 1) / 2])?;
        let epsilon = p.f32("epsilon", &[1])?[0];
        if landmarks.iter().chain(&packed).any(|v| !v.is_finite()) || !(epsilon.is_finite() && epsilon > 0.0) {
            return Err("Nyström parameters must be finite, and its epsilon positive".into());
        }
        if let Some(i) = (0..m).find(|&i| packed[i * (i + 1) / 2 + i] <= 0.0) {
            return Err(format!("array 'factor' has a non-positive diagonal at {i}"));
        }
        Ok(Box::new(Nystrom::new(kernel, d, Arc::new(landmarks), unpack(&packed, m), f64::from(epsilon))))
    }
}

/// The lower factor from its packed rows (row `i` holds `L_i0 … L_ii`).
fn unpack(packed: &[f32], m: usize) -> Mat<f32> {
    Mat::<f32>::from_fn(m, m, |i, j| if j <= i { packed[i * (i + 1) / 2 + j] } else { 0.0 })
}

/// A fitted Nyström map `R^d → R^M`.
pub struct Nystrom {
    kernel: ExactKernel,
    d: usize,
    m: usize,
    /// `M × d`, row-major.
    landmarks: Arc<Vec<f32>>,
    /// Their squared norms (the Gaussian kernel).
    norms: Vec<f64>,
    /// `L`, lower triangular, `M × M`.
    factor: Mat<f32>,
    /// The `ε` added to `K_MM`'s diagonal, and the seconds the factor took (0 when
    /// restored).
    epsilon: f64,
    seconds: f64,
}

impl std::fmt::Debug for Nystrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nystrom").field("kernel", &self.kernel).field("d", &self.d).field("m", &self.m).finish()
    }
}

fn sq_norm(x: &[f32]) -> f64 {
    x.iter().map(|&v| f64::from(v) * f64::from(v)).sum()
}

impl Nystrom {
    fn new(kernel: ExactKernel, d: usize, landmarks: Arc<Vec<f32>>, factor: Mat<f32>, epsilon: f64) -> Self {
        let m = factor.nrows();
        let norms = landmarks.chunks_exact(d.max(1)).map(sq_norm).collect();
        Nystrom { kernel, d, m, landmarks, norms, factor, epsilon, seconds: 0.0 }
    }

    /// Factors `K_MM + εI` in f64 for `m` landmark rows: `ε` starts at `jitter` times the
    /// mean diagonal and grows tenfold until the factor exists.
    fn factor(kernel: ExactKernel, d: usize, landmarks: Arc<Vec<f32>>, m: usize, jitter: f64) -> Self {
        let t0 = std::time::Instant::now();
        let norms: Vec<f64> = landmarks.chunks_exact(d.max(1)).map(sq_norm).collect();
        let lm = Mat::<f64>::from_fn(m, d, |i, j| f64::from(landmarks[i * d + j]));
        let par = Par::rayon(0);
        let kmm = |mut out: MatMut<'_, f64>| {
            matmul(out.rb_mut(), Accum::Replace, lm.as_ref(), lm.transpose(), 1.0, par);
            for j in 0..m {
                for i in j..m {
                    out[(i, j)] = kernel.of_dot(out[(i, j)], norms[i], norms[j]);
                }
            }
        };
        // The columns are 8 values longer than M: at M a multiple of 512 a stride of M
        // f64 maps the factor's panels onto the same cache sets, and faer's Cholesky ran
        // at 43 GFLOP/s instead of 70 (M = 8,192, two cores).
        let mut store = Mat::<f64>::zeros(m + 8, m);
        let mut a = store.as_mut().subrows_mut(0, m);
        kmm(a.rb_mut());
        let mean = (0..m).map(|i| a[(i, i)]).sum::<f64>() / m.max(1) as f64;
        let mut eps = jitter * mean.abs().max(f64::MIN_POSITIVE);
        let mut scratch = faer::dyn_stack::MemBuffer::new(cholesky_in_place_scratch::<f64>(m, par, Default::default()));
        loop {
            for i in 0..m {
                a[(i, i)] += eps;
            }
            let stack = faer::dyn_stack::MemStack::new(&mut scratch);
            if cholesky_in_place(a.rb_mut(), Default::default(), par, stack, Default::default()).is_ok() || eps >= mean
            {
                break;
            }
            // The failed attempt overwrote `a`: rebuild it (a product, cheap beside the
            // factor) and try a larger ε.
            kmm(a.rb_mut());
            eps *= 10.0;
        }
        // To f32 through the packed triangle, the f64 matrix freed first: the build's peak
        // is then 8M² + 2M² bytes, not 8M² + 4M² (16.8 GB, not 20 GB, at M = 40,960).
        let mut packed = Vec::with_capacity(m * (m + 1) / 2);
        for i in 0..m {
            packed.extend((0..=i).map(|j| a[(i, j)] as f32));
        }
        drop(store);
        let factor = unpack(&packed, m);
        drop(packed);
        Nystrom { kernel, d, m, landmarks, norms, factor, epsilon: eps, seconds: t0.elapsed().as_secs_f64() }
    }

    /// The lower factor `L`.
    pub fn factor_matrix(&self) -> MatRef<'_, f32> {
        self.factor.as_ref()
    }
}

impl FeatureMap for Nystrom {
    fn input_dim(&self) -> usize {
        self.d
    }
    fn output_dim(&self) -> usize {
        self.m
    }
    /// Each call reads the whole factor (`2M²` bytes): 256 rows make the solve
    /// compute-bound rather than a stream of the factor per handful of rows.
    fn min_block_rows(&self) -> usize {
        256
    }

    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let m = self.m;
        if rows == 0 || m == 0 {
            return;
        }
        // `out` (rows × M, row-major) is `M × rows` column-major: row r's features are
        // column r, so the product and the solve work on it in place.
        self.kernel_rows(x, rows, out);
        let k = MatMut::from_column_major_slice_mut(&mut out[..rows * m], m, rows);
        solve_lower_triangular_in_place(self.factor.as_ref(), k, Par::Seq);
    }

    /// `L⁻¹ k̄`: the mean kernel row (256 rows at a time, summed in f64), then one
    /// forward substitution in f64 — `2Md` flops a row instead of the features' `M²`.
    fn linear_mean(&self, x: &[f32], rows: usize) -> Option<Vec<f64>> {
        let m = self.m;
        let mut sum = vec![0.0f64; m];
        let mut k = vec![0f32; 256 * m];
        for block in x[..rows * self.d].chunks(256 * self.d.max(1)) {
            let n = block.len() / self.d.max(1);
            self.kernel_rows(block, n, &mut k);
            for col in k[..n * m].chunks_exact(m) {
                sum.iter_mut().zip(col).for_each(|(s, &v)| *s += f64::from(v));
            }
        }
        let scale = 1.0 / rows.max(1) as f64;
        sum.iter_mut().for_each(|v| *v *= scale);
        // Column by column: the factor is column-major.
        for j in 0..m {
            let col = self.factor.col(j);
            sum[j] /= f64::from(col[j]);
            let v = sum[j];
            for i in j + 1..m {
                sum[i] -= f64::from(col[i]) * v;
            }
        }
        Some(sum)
    }
}

impl Nystrom {
    /// `k_M(x)` of `rows` rows into `out` (`M × rows`, column-major).
    fn kernel_rows(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, m) = (self.d, self.m);
        let lm = MatRef::from_row_major_slice(&self.landmarks[..m * d], m, d);
        let xt = MatRef::from_row_major_slice(&x[..rows * d], rows, d).transpose();
        let out = &mut out[..rows * m];
        matmul(MatMut::from_column_major_slice_mut(out, m, rows), Accum::Replace, lm, xt, 1.0f32, Par::Seq);
        for (xr, col) in x.chunks_exact(d.max(1)).zip(out.chunks_exact_mut(m)) {
            let xx = sq_norm(xr);
            for (v, &ll) in col.iter_mut().zip(&self.norms) {
                *v = self.kernel.of_dot(f64::from(*v), xx, ll) as f32;
            }
        }
    }
}

impl Sketch for Nystrom {
    fn params(&self) -> Vec<ParamArray> {
        let m = self.m;
        let mut packed = Vec::with_capacity(m * (m + 1) / 2);
        for i in 0..m {
            packed.extend((0..=i).map(|j| self.factor[(i, j)]));
        }
        vec![
            ParamArray::f32("landmarks", vec![m, self.d], self.landmarks.to_vec()),
            ParamArray::f32("factor", vec![m * (m + 1) / 2], packed),
            ParamArray::f32("epsilon", vec![1], vec![self.epsilon as f32]),
        ]
    }

    fn fitted_note(&self) -> Option<String> {
        Some(format!(
            "{} landmarks; K_MM + εI factored in f64 in {:.1} s, ε = {:.3e}",
            self.m, self.seconds, self.epsilon
        ))
    }
}
