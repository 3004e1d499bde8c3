//! Tensor sketch (Pham & Pagh 2013; math.md §3) for the polynomial kernel
//! `(γ⟨x,y⟩ + c)^p`: `TS(x') = C_0x' * … * C_{p-1}x'` (cyclic convolution through
//! real FFTs), with `x' = [√γ x; √c]`.
//!
//! Hash and sign tables are drawn once and stored in the model; FFT plans are built
//! once per map. Mapping a chunk allocates its FFT buffers once for the chunk. Even `D`
//! convolves through `spectrum` (a half-length complex FFT with vectorised
//! split and merge); odd `D` through realfft.

use std::sync::Arc;

use realfft::num_complex::Complex32;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};

use super::count::CountSketch;
use super::family::Family;
use super::keys::{defaults, dim, family_spec, no_fitting, poly, weight, Checked};
use super::params::{count_sketch_params, PResult, ParamArray, Params};
use super::spectrum::Convolver;
use super::{ChunkMap, DotKernel, Kernel, Sketch};
use crate::rng::StageRng;

/// The kernel parameters of a tensor sketch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolyKernel {
    /// Degree `p ≥ 1`.
    pub degree: u32,
    /// Scale `γ > 0`.
    pub gamma: f64,
    /// Offset `c ≥ 0`; `c > 0` appends the coordinate `√c`.
    pub offset: f64,
}

impl PolyKernel {
    /// The exact kernel `(γ⟨x,y⟩ + c)^p`.
    pub fn eval(&self, x: &[f32], y: &[f32]) -> f64 {
        let dot: f64 = x.iter().zip(y).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
        (self.gamma * dot + self.offset).powi(self.degree as i32)
    }
}

/// A tensor sketch `R^d → R^D`.
pub struct TensorSketch {
    kernel: PolyKernel,
    d: usize,
    dim: usize,
    /// One count sketch per degree, each over `d' = d + [c > 0]` coordinates.
    sketches: Vec<CountSketch>,
    engine: Engine,
}

/// How the count sketches are convolved.
enum Engine {
    /// Even `D`: spectra from one complex FFT of length `D/2` each.
    Half(Convolver),
    /// Odd `D`: realfft's real transforms.
    Real { forward: Arc<dyn RealToComplex<f32>>, inverse: Arc<dyn ComplexToReal<f32>> },
}

impl std::fmt::Debug for TensorSketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorSketch")
            .field("kernel", &self.kernel)
            .field("d", &self.d)
            .field("dim", &self.dim)
            .finish_non_exhaustive()
    }
}

impl TensorSketch {
    /// Draws the `p` count sketches.
    pub fn draw(kernel: PolyKernel, d: usize, dim: usize, rng: &mut StageRng) -> Self {
        let d_prime = d + usize::from(kernel.offset > 0.0);
        let sketches = (0..kernel.degree).map(|_| CountSketch::draw(d_prime, dim, rng)).collect();
        Self::from_sketches(kernel, d, dim, sketches)
    }

    /// Rebuilds a map from stored tables (a loaded model).
    pub fn from_sketches(kernel: PolyKernel, d: usize, dim: usize, sketches: Vec<CountSketch>) -> Self {
        let engine = Convolver::new(dim).map(Engine::Half).unwrap_or_else(|| {
            let mut planner = RealFftPlanner::<f32>::new();
            Engine::Real { forward: planner.plan_fft_forward(dim), inverse: planner.plan_fft_inverse(dim) }
        });
        TensorSketch { kernel, d, dim, sketches, engine }
    }

    /// The kernel this map approximates.
    pub fn kernel(&self) -> PolyKernel {
        self.kernel
    }

    /// The count sketches `C_0..C_{p-1}`.
    pub fn sketches(&self) -> &[CountSketch] {
        &self.sketches
    }

    /// `out ← C_j x'` with `x' = [√γ x; √c]`.
    fn count_sketch(&self, j: usize, x: &[f32], out: &mut [f32]) {
        out.fill(0.0);
        self.add_count_sketch(j, x, out);
    }

    /// `out += C_j x'`.
    fn add_count_sketch(&self, j: usize, x: &[f32], out: &mut [f32]) {
        let cs = &self.sketches[j];
        cs.accumulate(x, self.kernel.gamma.sqrt() as f32, out);
        if self.kernel.offset > 0.0 {
            let i = self.d;
            out[cs.hash[i] as usize] += f32::from(cs.sign[i]) * self.kernel.offset.sqrt() as f32;
        }
    }
}

impl ChunkMap for TensorSketch {
    fn input_dim(&self) -> usize {
        self.d
    }
    fn output_dim(&self) -> usize {
        self.dim
    }

    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, dim) = (self.d, self.dim);
        if self.sketches.len() == 1 {
            for r in 0..rows {
                self.count_sketch(0, &x[r * d..(r + 1) * d], &mut out[r * dim..(r + 1) * dim]);
            }
            return;
        }
        match &self.engine {
            Engine::Half(conv) => {
                let mut spectra = conv.spectra();
                for r in 0..rows {
                    let (xr, o) = (&x[r * d..(r + 1) * d], &mut out[r * dim..(r + 1) * dim]);
                    // The row's output is the count sketches' buffer until the inverse,
                    // cleared once and then only where a sketch wrote (d + 1 of D values);
                    // the inverse writes all D values over the last sketch.
                    o.fill(0.0);
                    let last = self.sketches.len() - 1;
                    for (j, cs) in self.sketches.iter().enumerate() {
                        self.add_count_sketch(j, xr, o);
                        conv.multiply(o, j == 0, &mut spectra);
                        if j < last {
                            cs.clear(o);
                        }
                    }
                    conv.inverse(&mut spectra, o);
                }
            }
            Engine::Real { forward, inverse } => self.map_real(forward.as_ref(), inverse.as_ref(), x, rows, out),
        }
    }
}

impl TensorSketch {
    /// Odd `D`: each count sketch's spectrum by realfft, multiplied, one inverse.
    #[allow(clippy::expect_used)] // Invariant: every buffer is sized from the planned FFT length D, so the transform cannot fail.
    fn map_real(
        &self,
        forward: &dyn RealToComplex<f32>,
        inverse: &dyn ComplexToReal<f32>,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
    ) {
        let (d, dim) = (self.d, self.dim);
        let bins = dim / 2 + 1;
        let mut buf = vec![0f32; dim];
        let mut acc = vec![Complex32::new(0.0, 0.0); bins];
        let mut spec = vec![Complex32::new(0.0, 0.0); bins];
        let mut scratch = vec![Complex32::new(0.0, 0.0); forward.get_scratch_len().max(inverse.get_scratch_len())];
        let inv_dim = 1.0 / dim as f32;
        for r in 0..rows {
            let xr = &x[r * d..(r + 1) * d];
            for j in 0..self.sketches.len() {
                self.count_sketch(j, xr, &mut buf);
                let target = if j == 0 { &mut acc } else { &mut spec };
                forward
                    .process_with_scratch(&mut buf, target, &mut scratch)
                    .expect("FFT buffer lengths match the plan");
                if j > 0 {
                    for (a, s) in acc.iter_mut().zip(&spec) {
                        *a *= *s;
                    }
                }
            }
            // A real signal's spectrum is real at DC; clear the rounding residue so the
            // inverse accepts it (odd D has no Nyquist bin).
            acc[0].im = 0.0;
            let o = &mut out[r * dim..(r + 1) * dim];
            inverse.process_with_scratch(&mut acc, o, &mut scratch).expect("FFT buffer lengths match the plan");
            for v in o.iter_mut() {
                *v *= inv_dim;
            }
        }
    }
}

family_spec! {
    /// `kind = "tensor_sketch"`: the polynomial kernel `(γ⟨x,y⟩ + c)^p`.
    pub struct TensorSketchSpec {
        /// Degree `p ≥ 1`.
        #[serde(default = "defaults::degree")]
        pub degree: u32,
        /// Scale `γ > 0`.
        #[serde(default = "defaults::gamma")]
        pub gamma: f64,
        /// Offset `c ≥ 0`.
        #[serde(default)]
        pub offset: f64,
        /// Output dimension `D ≥ 2`.
        #[serde(default = "defaults::dim")]
        pub dim: usize,
    }
}

impl TensorSketchSpec {
    fn poly(&self) -> PolyKernel {
        PolyKernel { degree: self.degree, gamma: self.gamma, offset: self.offset }
    }
}

impl Family for TensorSketchSpec {
    no_fitting!();

    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)?;
        poly(self.degree, self.gamma, self.offset)?;
        dim("dim", self.dim, 2)
    }
    fn dim(&self) -> Option<usize> {
        Some(self.dim)
    }
    fn with_dim(&self, dim: usize) -> Self {
        TensorSketchSpec { dim, ..self.clone() }
    }
    fn kernel(s: &Self) -> Kernel {
        Kernel::Dot(DotKernel::Polynomial { degree: s.degree, gamma: s.gamma, offset: s.offset })
    }
    fn build(s: &Self, d: usize, rng: &mut StageRng) -> Box<dyn Sketch> {
        Box::new(TensorSketch::draw(s.poly(), d, s.dim, rng))
    }
    fn restore(s: &Self, d: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
        Ok(Box::new(TensorSketch::restore(s.poly(), d, s.dim, p, "")?))
    }
}

impl TensorSketch {
    /// Rebuilds a tensor sketch from the arrays `{prefix}hash` and `{prefix}sign`.
    pub(crate) fn restore(kernel: PolyKernel, d: usize, dim: usize, p: &Params, prefix: &str) -> PResult<Self> {
        let dp = d + usize::from(kernel.offset > 0.0);
        let sketches =
            p.count_sketches(&format!("{prefix}hash"), &format!("{prefix}sign"), kernel.degree as usize, dp, dim)?;
        Ok(TensorSketch::from_sketches(kernel, d, dim, sketches))
    }
}

impl Sketch for TensorSketch {
    fn params(&self) -> Vec<ParamArray> {
        count_sketch_params("hash", "sign", self.sketches())
    }
}
