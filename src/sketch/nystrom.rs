//! Nyström features (Williams & Seeger 2001; math.md has no section on them, its maps
//! being oblivious, so the math is stated here and tested in `tests/suite/nystrom.rs`):
//! `z(x) = L⁻¹ k_M(x)`, where
//! `k_M(x) = (k(x, l_1), …, k(x, l_M))` over `M` landmark rows drawn uniformly from the
//! pre-pass sample and `LLᵀ = K_MM + εI` is the Cholesky factor of their kernel matrix.
//! Then `z(x)ᵀz(y) = k_M(x)ᵀ(K_MM + εI)⁻¹k_M(y)`: the kernel projected on the landmarks'
//! span, exact on the landmarks themselves (up to ε). Unlike the oblivious maps it is
//! data-dependent, so it is fitted on the sample and its landmarks and factor are stored
//! in the model; it reaches a given accuracy with far fewer features than the random
//! maps on data whose kernel spectrum decays fast (MNIST: docs/src/accuracy.md).
//!
//! The factor is computed once, in f64 (`K_MM` is ill-conditioned: its spectrum decays
//! as the kernel's), with `ε` a stated fraction of `K_MM`'s mean diagonal, raised
//! tenfold until every pivot is at least `ε/2` (each is at least ε in exact arithmetic).
//! `K_MM` and both factors are lower triangles in the statistics' tile layout, factored
//! by the statistics' tiled Cholesky: half the memory of a dense matrix, and the tile
//! kernel's rate at any M. Mapping a block of rows is one f32 product with the
//! landmarks, the kernel's scalar function, and one f32 forward substitution by tiles:
//! both at the BLAS rate, `2Md + M²` flops per row.

use std::sync::Arc;

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use serde::{Deserialize, Serialize};

use super::family::{Family, Sample};
use super::keys::{defaults, dim, fail, family_spec, poly, positive_opt, weight, Checked};
use super::params::{PResult, ParamArray, Params};
use super::{ChunkMap, DotKernel, Kernel, Sketch};
use crate::rng::StageRng;
use crate::stats::{factor_tiles, forward_tiles, parallel, split_tiles, split_tiles_ref, tile_range, TriGram, TILE};

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
        // The landmarks (M × d f32) and the factor's tiles (about M²/2 f32).
        4 * (self.dim * d + TriGram::len_for(self.dim)) as u64
    }
    /// The landmarks in f32 and f64, the f64 kernel's tiles and the f32 copy of its
    /// factor made before they are freed.
    fn build_peak_bytes(&self, d: usize) -> u64 {
        let (m, d) = (self.dim as u64, d as u64);
        12 * m * d + 12 * TriGram::len_for(self.dim) as u64
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
        let packed = p.f32_ref("factor", &[m * (m + 1) / 2])?;
        let epsilon = p.f32("epsilon", &[1])?[0];
        if landmarks.iter().chain(packed).any(|v| !v.is_finite()) || !(epsilon.is_finite() && epsilon > 0.0) {
            return Err("Nyström parameters must be finite, and its epsilon positive".into());
        }
        if let Some(i) = (0..m).find(|&i| packed[i * (i + 1) / 2 + i] <= 0.0) {
            return Err(format!("array 'factor' has a non-positive diagonal at {i}"));
        }
        let factor = tiles_of_packed(packed, m);
        Ok(Box::new(Nystrom::new(kernel, d, Arc::new(landmarks), factor, f64::from(epsilon))))
    }
}

/// Where `(r, c)` of each tile `(I, J)` lives in a model's packed rows (row `r` holds
/// `L_r0 … L_rr`): calls `f(tile, packed index, tile index)` for every lower entry.
fn each_packed(tiles: usize, m: usize, mut f: impl FnMut(usize, usize, usize)) {
    let nt = m.div_ceil(TILE);
    let mut t = 0;
    for i in 0..nt {
        for j in 0..=i {
            let (ri, rj) = (tile_range(m, i), tile_range(m, j));
            for (x, r) in ri.enumerate() {
                for (y, col) in rj.clone().enumerate().take_while(|&(_, col)| col <= r) {
                    f(t, r * (r + 1) / 2 + col, x * rj.len() + y);
                }
            }
            t += 1;
        }
    }
    debug_assert_eq!(t, tiles);
}

/// The factor's tiles from a model's packed rows.
fn tiles_of_packed(packed: &[f32], m: usize) -> Vec<f32> {
    let mut data = vec![0f32; TriGram::len_for(m)];
    let mut tiles: Vec<&mut [f32]> = split_tiles(&mut data, m).into_iter().map(|(_, _, t)| t).collect();
    each_packed(tiles.len(), m, |t, p, k| tiles[t][k] = packed[p]);
    data
}

/// A model's packed rows from the factor's tiles.
fn packed_of_tiles(data: &[f32], m: usize) -> Vec<f32> {
    let mut packed = vec![0f32; m * (m + 1) / 2];
    let tiles: Vec<&[f32]> = split_tiles_ref(data, m).into_iter().map(|(_, _, t)| t).collect();
    each_packed(tiles.len(), m, |t, p, k| packed[p] = tiles[t][k]);
    packed
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
    /// `L`, lower triangular `M × M`, as tiles (the layout of `TriGram`).
    factor: Vec<f32>,
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
    fn new(kernel: ExactKernel, d: usize, landmarks: Arc<Vec<f32>>, factor: Vec<f32>, epsilon: f64) -> Self {
        let m = landmarks.len() / d.max(1);
        let norms = landmarks.chunks_exact(d.max(1)).map(sq_norm).collect();
        Nystrom { kernel, d, m, landmarks, norms, factor, epsilon, seconds: 0.0 }
    }

    /// Factors `K_MM + εI` in f64 for `m` landmark rows: `ε` starts at `jitter` times the
    /// mean diagonal (at least f32's smallest normal value) and grows tenfold until every
    /// pivot is at least `ε/2`.
    fn factor(kernel: ExactKernel, d: usize, landmarks: Arc<Vec<f32>>, m: usize, jitter: f64) -> Self {
        let t0 = std::time::Instant::now();
        let norms: Vec<f64> = landmarks.chunks_exact(d.max(1)).map(sq_norm).collect();
        let lm: Vec<f64> = landmarks[..m * d].iter().map(|&v| f64::from(v)).collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let rows = |r: std::ops::Range<usize>| MatRef::from_row_major_slice(&lm[r.start * d..r.end * d], r.len(), d);
        // One tile of K_MM per call (a product of two blocks of landmarks, then the
        // kernel's function), so the matrix is the same for any thread count.
        let kmm = |a: &mut TriGram| {
            parallel(a.tiles_mut(), threads, |(i, j, t): (usize, usize, &mut [f64])| {
                let (ri, rj) = (tile_range(m, i), tile_range(m, j));
                let hj = rj.len();
                let c = MatMut::from_row_major_slice_mut(t, ri.len(), hj);
                matmul(c, Accum::Replace, rows(ri.clone()), rows(rj.clone()).transpose(), 1.0, Par::Seq);
                for (x, r) in ri.enumerate() {
                    for (y, col) in rj.clone().enumerate() {
                        t[x * hj + y] = kernel.of_dot(t[x * hj + y], norms[r], norms[col]);
                    }
                }
            });
        };
        let mut a = TriGram::zeros(m);
        kmm(&mut a);
        let diagonal: f64 = (0..m).map(|r| kernel.of_dot(norms[r], norms[r], norms[r])).sum();
        let mean = diagonal / m.max(1) as f64;
        // ε is stored in the model as f32: never below f32's smallest normal value, so a
        // tiny jitter or a zero diagonal (all-zero rows under a kernel with no offset)
        // still gives a positive ε and a factor whose pivots f32 holds.
        let mut eps = (jitter * mean.abs()).max(f64::from(f32::MIN_POSITIVE));
        loop {
            a.add_diagonal(eps);
            let tiles = a.tiles_mut().into_iter().map(|(_, _, t)| t).collect();
            if factor_tiles(tiles, m, 0.5 * eps, threads).is_ok() || eps >= mean {
                break;
            }
            // The failed attempt overwrote `a`: rebuild it (a product, cheap beside the
            // factor) and try a larger ε.
            kmm(&mut a);
            eps *= 10.0;
        }
        drop(lm);
        // The f32 copy made while the f64 tiles live: the build's peak is 12 bytes per
        // stored value (about 6M² bytes: 10 GB at M = 40,960).
        let factor: Vec<f32> = a.raw().iter().map(|&v| v as f32).collect();
        drop(a);
        Nystrom { kernel, d, m, landmarks, norms, factor, epsilon: eps, seconds: t0.elapsed().as_secs_f64() }
    }

    /// The factor's tiles in storage order.
    fn tiles(&self) -> Vec<&[f32]> {
        split_tiles_ref(&self.factor, self.m).into_iter().map(|(_, _, t)| t).collect()
    }
}

impl ChunkMap for Nystrom {
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
        forward_tiles(&self.tiles(), m, k);
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
        // Tile row by tile row; the diagonal tile comes last in each.
        for (i, j, t) in split_tiles_ref(&self.factor, m) {
            let (ri, rj) = (tile_range(m, i), tile_range(m, j));
            let hj = rj.len();
            for (x, r) in ri.enumerate() {
                let row = &t[x * hj..(x + 1) * hj];
                let width = if i == j { x } else { hj };
                let s: f64 = row[..width].iter().zip(&sum[rj.start..]).map(|(&l, &v)| f64::from(l) * v).sum();
                sum[r] -= s;
                if i == j {
                    sum[r] /= f64::from(row[x]);
                }
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
        let packed = packed_of_tiles(&self.factor, m);
        vec![
            ParamArray::f32("landmarks", vec![m, self.d], self.landmarks.to_vec()),
            ParamArray::f32("factor", vec![m * (m + 1) / 2], packed),
            ParamArray::f32("epsilon", vec![1], vec![self.epsilon as f32]),
        ]
    }

    fn fitted_note(&self) -> Option<String> {
        let sigma = match self.kernel {
            ExactKernel::Gaussian { sigma } => format!(", σ = {sigma:.4}"),
            ExactKernel::Poly { .. } => String::new(),
        };
        Some(format!(
            "{} landmarks{sigma}; K_MM + εI factored in f64 in {:.1} s, ε = {:.3e}",
            self.m, self.seconds, self.epsilon
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_models_packed_rows_and_the_factors_tiles_hold_the_same_lower_triangle() {
        // Three tile rows, the last one partial.
        let m = 2 * TILE + 37;
        let packed: Vec<f32> = (0..m * (m + 1) / 2).map(|k| k as f32).collect();
        let tiles = tiles_of_packed(&packed, m);
        for (r, c) in [(0, 0), (TILE, 3), (m - 1, m - 1), (m - 1, TILE + 5), (2 * TILE + 1, 2 * TILE)] {
            let (i, j) = (r / TILE, c / TILE);
            let (_, _, t) = split_tiles_ref(&tiles, m).into_iter().find(|&(a, b, _)| (a, b) == (i, j)).unwrap();
            let width = tile_range(m, j).len();
            assert_eq!(t[(r - i * TILE) * width + c - j * TILE], packed[r * (r + 1) / 2 + c], "({r}, {c})");
        }
        assert_eq!(packed_of_tiles(&tiles, m), packed);
    }
}
