//! Applying a trained model's linear parts to mapped features, block by block: the
//! scores `Wᵀz + b` (f64 from f32 features, SIMD-dispatched at run time) and the PCA
//! projections `(z − z̄)ᵀU`. A [`Scorer`] owns the scratch of one thread, so a chunk is
//! mapped and scored in small row blocks whose features stay in cache, and nothing is
//! allocated per block.
//!
//! Each row's result depends on that row alone — a fixed summation order per row, whatever
//! the block, the chunk or the thread it lands in — so scores are bit-for-bit the same
//! for every thread count and chunk size (on one machine: the SIMD width is the CPU's).

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use pulp::{Arch, Simd, WithSimd};

use crate::sketch::FeaturePipeline;

/// The rows of one block: about 1 MiB of f32 features, so the map's output is still in
/// cache when the scores read it — or more where a map reads large parameters once per
/// call (Nyström's factor, about 2M² bytes: read per block of a few rows, it would make
/// scoring memory-bound).
fn block_rows(pipeline: &FeaturePipeline) -> usize {
    ((1usize << 18) / pipeline.output_dim().max(1)).clamp(8, 1024).max(pipeline.min_block_rows())
}

/// The rows of one projection product: the product packs the basis (`D × E` f64, 32 MB
/// at 4096 × 1024) once per call, so at [`block_rows`]' 64 rows packing takes most of the
/// time (`SECTIONS=score scripts/bench.sh`); 512 rows amortise it, while the block's f64
/// features stay at most 16 MiB (64 rows at D ≥ 32,768).
fn projection_rows(pipeline: &FeaturePipeline) -> usize {
    ((2usize << 20) / pipeline.output_dim().max(1)).clamp(64, 512).max(pipeline.min_block_rows())
}

/// One [`Scorer`]'s buffers at most, for features of width `dim`: a block's f32 features
/// and their f64 copy, and with PCA (`components` > 0) the projection block's product.
pub fn scratch_bytes(pipeline: &FeaturePipeline, components: usize) -> u64 {
    let dim = pipeline.output_dim();
    let bytes = if components == 0 {
        block_rows(pipeline) * dim * 12
    } else {
        projection_rows(pipeline) * (dim * 12 + components * 8)
    };
    bytes as u64
}

/// A linear head over `dim` features: `outputs` scores per row.
#[derive(Debug, Clone)]
pub struct Head {
    dim: usize,
    outputs: usize,
    /// `W` transposed (`outputs × dim`), so each output's weights are contiguous.
    wt: Vec<f64>,
    bias: Vec<f64>,
}

impl Head {
    /// `weights` is `dim × outputs` row-major, `bias` has `outputs` values.
    pub fn new(weights: &[f64], bias: &[f64], dim: usize) -> Head {
        let outputs = bias.len();
        let mut wt = vec![0.0; dim * outputs];
        for i in 0..dim {
            for k in 0..outputs {
                wt[k * dim + i] = weights[i * outputs + k];
            }
        }
        Head { dim, outputs, wt, bias: bias.to_vec() }
    }

    /// Scores of `rows` rows of f32 features (`rows × dim`) appended to `out`, row-major.
    /// `wide` is scratch for the features widened to f64.
    pub fn apply(&self, z: &[f32], rows: usize, wide: &mut Vec<f64>, out: &mut Vec<f64>) {
        let (dim, c) = (self.dim, self.outputs);
        wide.clear();
        wide.extend(z[..rows * dim].iter().map(|&v| f64::from(v)));
        let at = out.len();
        out.resize(at + rows * c, 0.0);
        Arch::new().dispatch(Dots { z: wide, dim, wt: &self.wt, outputs: c, out: &mut out[at..] });
        for row in out[at..].chunks_exact_mut(c.max(1)) {
            row.iter_mut().zip(&self.bias).for_each(|(s, b)| *s += b);
        }
    }
}

/// `out[r·c + k] = Σ_i z[r·dim + i] · wt[k·dim + i]` for every row `r` of `z`, four rows
/// and two outputs at a time (twelve registers of accumulators and inputs), each sum in
/// lanes of the CPU's width reduced in one fixed order.
struct Dots<'a> {
    z: &'a [f64],
    dim: usize,
    wt: &'a [f64],
    outputs: usize,
    out: &'a mut [f64],
}

impl WithSimd for Dots<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Dots { z, dim, wt, outputs: c, out } = self;
        if dim == 0 || c == 0 {
            out.iter_mut().for_each(|v| *v = 0.0);
            return;
        }
        let rows = z.len() / dim;
        let mut r = 0;
        while r + 4 <= rows {
            block::<S, 4>(simd, &z[r * dim..(r + 4) * dim], dim, wt, c, &mut out[r * c..(r + 4) * c]);
            r += 4;
        }
        while r < rows {
            block::<S, 1>(simd, &z[r * dim..(r + 1) * dim], dim, wt, c, &mut out[r * c..(r + 1) * c]);
            r += 1;
        }
    }
}

/// `R` rows against every output, two outputs at a time. A row's sums are formed the
/// same way for `R = 1` and `R = 4`: lane-wise multiply-adds over the vector part, one
/// reduction, then the tail in index order.
#[inline(always)]
fn block<S: Simd, const R: usize>(simd: S, z: &[f64], dim: usize, wt: &[f64], c: usize, out: &mut [f64]) {
    let zs: [(&[S::f64s], &[f64]); R] = std::array::from_fn(|r| S::as_simd_f64s(&z[r * dim..(r + 1) * dim]));
    let mut k = 0;
    while k < c {
        let pair = (c - k).min(2);
        let ws: [(&[S::f64s], &[f64]); 2] =
            std::array::from_fn(|j| S::as_simd_f64s(&wt[(k + j.min(pair - 1)) * dim..(k + j.min(pair - 1) + 1) * dim]));
        let zero = simd.splat_f64s(0.0);
        let mut acc = [[zero; 2]; R];
        for i in 0..ws[0].0.len() {
            let (w0, w1) = (ws[0].0[i], ws[1].0[i]);
            for r in 0..R {
                let x = zs[r].0[i];
                acc[r][0] = simd.mul_add_f64s(x, w0, acc[r][0]);
                acc[r][1] = simd.mul_add_f64s(x, w1, acc[r][1]);
            }
        }
        for r in 0..R {
            for j in 0..pair {
                let mut s = simd.reduce_sum_f64s(acc[r][j]);
                for (x, w) in zs[r].1.iter().zip(ws[j].1) {
                    s += x * w;
                }
                out[r * c + k + j] = s;
            }
        }
        k += pair;
    }
}

/// One PCA block: features `start..start + mean.len()` centred and projected on `basis`
/// (`len × components`, row-major).
#[derive(Debug, Clone, Copy)]
pub struct Projector<'a> {
    /// First feature of the block.
    pub start: usize,
    /// `z̄` of the block.
    pub mean: &'a [f64],
    /// `U`, `len × components` row-major.
    pub basis: &'a [f64],
    /// Components `E`.
    pub components: usize,
}

/// What a [`Scorer`] computes per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The head's scores.
    Scores,
    /// The PCA features of every projection, concatenated.
    Pca,
}

/// One thread's scratch for mapping and scoring chunks.
#[derive(Debug, Default)]
pub struct Scorer {
    z: Vec<f32>,
    wide: Vec<f64>,
    proj: Vec<f64>,
}

impl Scorer {
    /// Maps `rows` input rows `x` through `pipeline` and returns the head's scores
    /// (`rows × outputs`), one block at a time on this thread.
    pub fn scores(&mut self, pipeline: &FeaturePipeline, head: &Head, x: &[f32], rows: usize) -> Vec<f64> {
        let mut out = Vec::with_capacity(rows * head.outputs);
        let step = block_rows(pipeline);
        self.each_block(pipeline, x, rows, step, |_, z, n, wide| head.apply(z, n, wide, &mut out));
        out
    }

    /// Maps `rows` input rows and returns their PCA features (`rows × ΣE`).
    pub fn project(
        &mut self,
        pipeline: &FeaturePipeline,
        projectors: &[Projector<'_>],
        x: &[f32],
        rows: usize,
    ) -> Vec<f64> {
        self.project_as(pipeline, projectors, x, rows, |v| v)
    }

    /// [`Scorer::project`] with each feature rounded by `cast` as it is stored: an f32
    /// output (what `transform` writes) then needs no f64 copy of the chunk's features,
    /// whose fresh pages were most of `transform`'s system time.
    pub fn project_as<T: Copy + Default>(
        &mut self,
        pipeline: &FeaturePipeline,
        projectors: &[Projector<'_>],
        x: &[f32],
        rows: usize,
        cast: impl Fn(f64) -> T,
    ) -> Vec<T> {
        let total: usize = projectors.iter().map(|p| p.components).sum();
        let dim = pipeline.output_dim();
        let mut out = vec![T::default(); rows * total];
        let mut proj = std::mem::take(&mut self.proj);
        self.each_block(pipeline, x, rows, projection_rows(pipeline), |start, z, n, wide| {
            let mut col = 0;
            for p in projectors {
                let (len, e) = (p.mean.len(), p.components);
                wide.clear();
                for r in 0..n {
                    let zr = &z[r * dim + p.start..r * dim + p.start + len];
                    wide.extend(zr.iter().zip(p.mean).map(|(&v, m)| f64::from(v) - m));
                }
                proj.clear();
                proj.resize(n * e, 0.0);
                let a = MatRef::from_row_major_slice(wide, n, len);
                let b = MatRef::from_row_major_slice(p.basis, len, e);
                matmul(MatMut::from_row_major_slice_mut(&mut proj, n, e), Accum::Replace, a, b, 1.0, Par::Seq);
                for r in 0..n {
                    let dst = &mut out[(start + r) * total + col..(start + r) * total + col + e];
                    dst.iter_mut().zip(&proj[r * e..(r + 1) * e]).for_each(|(o, &v)| *o = cast(v));
                }
                col += e;
            }
        });
        self.proj = proj;
        out
    }

    /// Maps `rows` rows `step` at a time into the features buffer and calls `f(first row,
    /// features, rows, f64 scratch)` on each block.
    fn each_block(
        &mut self,
        pipeline: &FeaturePipeline,
        x: &[f32],
        rows: usize,
        step: usize,
        mut f: impl FnMut(usize, &[f32], usize, &mut Vec<f64>),
    ) {
        let (d, dim) = (pipeline.input_dim(), pipeline.output_dim());
        let mut start = 0;
        while start < rows {
            let n = step.min(rows - start);
            self.z.resize(n * dim, 0.0);
            pipeline.map_chunk(&x[start * d..(start + n) * d], n, &mut self.z, 1);
            f(start, &self.z[..n * dim], n, &mut self.wide);
            start += n;
        }
    }
}
