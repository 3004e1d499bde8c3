//! Adding mapped rows to the sums: each block of rows shifted, transposed feature by
//! feature (the layout the tile GEMMs pack fastest and `s` and `T` sum along) and
//! multiplied into the Gram, in f64 or in f32 products.

use faer::{Accum, MatMut, MatRef, Par};

use super::{GramStats, Precision};
use crate::error::{Error, Result};

/// Rows widened to f64 at a time: bounds the f64 copy of a chunk to `ROW_BLOCK × D`.
pub(super) const ROW_BLOCK: usize = 1024;

/// Rows per f32 product block. Its f32 copy takes the bytes of the f64 path's block, and
/// each tile's product is added into the f64 sums half as often; the rounding bound of a
/// block, `(k + 2)·2⁻²⁴·Σ|z_i z_j|`, is stated (and tested) for this `k`.
pub(super) const ROW_BLOCK_F32: usize = 2048;

/// Rows per f64 product when an f32 block could overflow (values beyond about 1e17):
/// a small copy, since the case is rare.
pub(super) const FALLBACK_ROWS: usize = 256;

/// Features per `T` product in the f32 path (and the unit threads split features by),
/// aligned to absolute feature indices so every product has the same shape whatever the
/// thread count.
pub(super) const GROUP: usize = 64;

/// The block buffers a pass reuses from chunk to chunk: the shifted, transposed copy of a
/// block of rows (f64, or f32 for the f32 products) and the f32 path's widening buffers.
/// Allocated afresh for every chunk, a large block comes back from the kernel as new
/// pages each time, and clearing and mapping them is a visible share of the pass at large
/// D (`SECTIONS=pass scripts/bench.sh` under `perf`).
#[derive(Debug, Default)]
pub struct Blocks {
    f64s: Vec<f64>,
    f32s: Vec<f32>,
    wides: Vec<Vec<f64>>,
    bigs: Vec<f32>,
    /// Wall time of the Gram's tile products made through these buffers (for the pass's
    /// time split).
    gemm_nanos: u64,
}

impl Blocks {
    /// Seconds spent in the Gram's tile products through these buffers.
    pub fn gemm_seconds(&self) -> f64 {
        self.gemm_nanos as f64 * 1e-9
    }
}

/// `buf[..len]`, grown (never shrunk) to hold it.
fn at_least<T: Copy + Default>(buf: &mut Vec<T>, len: usize) -> &mut [T] {
    if buf.len() < len {
        buf.resize(len, T::default());
    }
    &mut buf[..len]
}

impl GramStats {
    pub(super) fn add_rows<T: Copy + Into<f64> + Sync>(
        &mut self,
        z: &[T],
        y: &[f64],
        rows: usize,
        (threads, precision): (usize, Precision),
        blocks: &mut Blocks,
    ) -> Result<()> {
        let (dim, c) = (self.dim(), self.c);
        assert!(z.len() >= rows * dim && y.len() >= rows * c);
        // Non-finite features, and squares of larger values, which overflow the f64 sums
        // within a few rows, are the input's scale. The scan runs on the pass's one fold
        // thread before the products: without an early exit it vectorises, and only a
        // chunk that has such a value is searched for the first one.
        let bad = |v: f64| v.is_nan() | (v.abs() > 1e100);
        let any_bad = z[..rows * dim].chunks(4096).any(|part| part.iter().fold(false, |b, &v| b | bad(v.into())));
        if let Some(pos) = any_bad.then(|| z[..rows * dim].iter().position(|&v| bad(v.into()))).flatten() {
            let value = z[pos].into();
            return Err(Error::BadFeature { row: pos / dim, feature: pos % dim, value, too_large: value.is_finite() });
        }
        match precision {
            Precision::F64 => self.add_blocks_f64(z, y, rows, threads.max(1), blocks),
            Precision::F32 => self.add_blocks_f32(z, y, rows, threads.max(1), blocks),
        }
        for yr in y.chunks_exact(c.max(1)).take(if c > 0 { rows } else { 0 }) {
            for (k, &yk) in yr.iter().enumerate() {
                self.u[k] += yk;
                self.v[k] += yk * yk;
            }
        }
        self.n += rows as u64;
        self.weight += rows as f64;
        Ok(())
    }

    fn add_blocks_f64<T: Copy + Into<f64> + Sync>(
        &mut self,
        z: &[T],
        y: &[f64],
        rows: usize,
        threads: usize,
        blocks: &mut Blocks,
    ) {
        let (dim, c) = (self.dim(), self.c);
        let zc = at_least(&mut blocks.f64s, ROW_BLOCK.min(rows) * dim);
        let cols = dim.div_ceil(threads).max(1);
        for start in (0..rows).step_by(ROW_BLOCK) {
            let nb = ROW_BLOCK.min(rows - start);
            let src = &z[start * dim..(start + nb) * dim];
            let yb = &y[start * c..(start + nb) * c];
            let shift = &self.shift;
            // Columns split over threads: each thread shifts and transposes its features,
            // then sums them into `s` and `T` over the rows in row order, so the sums are
            // the same for any thread count.
            std::thread::scope(|scope| {
                let t_parts: Vec<&mut [f64]> = if c > 0 { self.t.chunks_mut(cols * c).collect() } else { Vec::new() };
                let mut t_parts = t_parts.into_iter();
                for ((k, sp), zcp) in self.s.chunks_mut(cols).enumerate().zip(zc[..nb * dim].chunks_mut(cols * nb)) {
                    let tp = t_parts.next();
                    scope.spawn(move || {
                        let w = sp.len();
                        transpose_shifted(src, dim, k * cols, w, nb, shift, zcp, |v| v);
                        sum_features(zcp, nb, sp);
                        if let Some(tp) = tp {
                            add_t(&zcp[..nb * w], nb, yb, c, tp);
                        }
                    });
                }
            });
            let t = std::time::Instant::now();
            self.gram.syrk_cols(&zc[..nb * dim], nb, threads);
            blocks.gemm_nanos += t.elapsed().as_nanos() as u64;
        }
    }

    /// The f32 path: each block is shifted and rounded to f32 straight from the input
    /// (no f64 copy of the block); `s` and `T` sum the rounded values in f64, a group of
    /// features at a time, so they agree with the Gram the f32 products make.
    fn add_blocks_f32<T: Copy + Into<f64> + Sync>(
        &mut self,
        z: &[T],
        y: &[f64],
        rows: usize,
        threads: usize,
        blocks: &mut Blocks,
    ) {
        let (dim, c) = (self.dim(), self.c);
        let z32 = at_least(&mut blocks.f32s, ROW_BLOCK_F32.min(rows) * dim);
        let cols = dim.div_ceil(threads).div_ceil(GROUP).max(1) * GROUP;
        // One widening buffer and one largest |value| per feature range, kept across
        // blocks: the largest value is taken as the range is widened, not by a scan of
        // the whole block afterwards.
        let ranges = dim.div_ceil(cols).max(1);
        if blocks.wides.len() < ranges {
            blocks.wides.resize(ranges, Vec::new());
        }
        let wides = &mut blocks.wides[..ranges];
        let bigs = at_least(&mut blocks.bigs, ranges);
        for start in (0..rows).step_by(ROW_BLOCK_F32) {
            let nb = ROW_BLOCK_F32.min(rows - start);
            let src = &z[start * dim..(start + nb) * dim];
            let yb = &y[start * c..(start + nb) * c];
            let shift = &self.shift;
            std::thread::scope(|scope| {
                let t_parts: Vec<&mut [f64]> = if c > 0 { self.t.chunks_mut(cols * c).collect() } else { Vec::new() };
                let mut t_parts = t_parts.into_iter();
                let ranges = self.s.chunks_mut(cols).zip(z32[..nb * dim].chunks_mut(cols * nb)).zip(wides.iter_mut());
                for (k, (((sp, d32), wide), big)) in ranges.zip(bigs.iter_mut()).enumerate() {
                    let mut tp = t_parts.next();
                    scope.spawn(move || {
                        let w = sp.len();
                        transpose_shifted(src, dim, k * cols, w, nb, shift, d32, |v| v as f32);
                        let wide = at_least(wide, GROUP.min(w) * nb);
                        // The largest |value| by its bits: the values are finite (checked
                        // above), where the order of the bits is that of the magnitudes,
                        // and an integer maximum vectorises where `f32::max` does not.
                        let mut m = 0u32;
                        for g0 in (0..w).step_by(GROUP) {
                            let gw = GROUP.min(w - g0);
                            let wide = &mut wide[..gw * nb];
                            for (a, &b) in wide.iter_mut().zip(&d32[g0 * nb..(g0 + gw) * nb]) {
                                *a = f64::from(b);
                                m = m.max(b.to_bits() & 0x7fff_ffff);
                            }
                            sum_features(wide, nb, &mut sp[g0..g0 + gw]);
                            if let Some(tp) = tp.as_mut() {
                                add_t(wide, nb, yb, c, &mut tp[g0 * c..(g0 + gw) * c]);
                            }
                        }
                        *big = f32::from_bits(m);
                    });
                }
            });
            let t = std::time::Instant::now();
            // A block whose products could overflow f32 is multiplied in f64.
            let big = bigs.iter().fold(0.0f32, |m, &v| m.max(v));
            if f64::from(big).powi(2) * nb as f64 >= f64::from(f32::MAX) / 4.0 {
                let mut zc = vec![0.0f64; FALLBACK_ROWS.min(nb) * dim];
                for r0 in (0..nb).step_by(FALLBACK_ROWS) {
                    let kb = FALLBACK_ROWS.min(nb - r0);
                    for (j, col) in zc[..kb * dim].chunks_mut(kb).enumerate() {
                        col.iter_mut().zip(&z32[j * nb + r0..j * nb + r0 + kb]).for_each(|(a, &b)| *a = f64::from(b));
                    }
                    self.gram.syrk_cols(&zc[..kb * dim], kb, threads);
                }
            } else {
                self.gram.syrk_f32_cols(&z32[..nb * dim], nb, threads);
            }
            blocks.gemm_nanos += t.elapsed().as_nanos() as u64;
        }
    }
}

/// Writes features `lo..lo + w` of the `nb` row-major rows in `src` (`dim` wide), less
/// their shift, feature by feature into `out` (`w × nb`).
#[allow(clippy::too_many_arguments)] // The block's geometry: a struct would only rename it.
fn transpose_shifted<T: Copy + Into<f64>, O>(
    src: &[T],
    dim: usize,
    lo: usize,
    w: usize,
    nb: usize,
    shift: &[f64],
    out: &mut [O],
    cast: impl Fn(f64) -> O,
) {
    // Rows in runs of 8: each feature reads one value from each row of the run, and the
    // run's rows stay in L1 for the next 15 features of their cache lines. Rows a power
    // of two apart (D = 2^k) fall in one L1 set (12 ways here), so runs of 64 missed on
    // most loads (3.5 % of a D = 16,384 pass's CPU; 2.2 % with 8).
    for r0 in (0..nb).step_by(8) {
        let r1 = (r0 + 8).min(nb);
        for jj in 0..w {
            let (j, m) = (lo + jj, shift[lo + jj]);
            let dst = &mut out[jj * nb + r0..jj * nb + r1];
            for (r, d) in (r0..r1).zip(dst.iter_mut()) {
                *d = cast(src[r * dim + j].into() - m);
            }
        }
    }
}

/// `s[j] += Σ_r cols[j·nb + r]`, each feature's block summed in eight interleaved
/// partial sums added in a fixed order: one running sum is a dependent add per value,
/// which left this loop waiting on the adder (as the chase's dot products did).
fn sum_features(cols: &[f64], nb: usize, s: &mut [f64]) {
    for (jj, sj) in s.iter_mut().enumerate() {
        let col = &cols[jj * nb..(jj + 1) * nb];
        let mut acc = [0.0f64; 8];
        let lanes = col.chunks_exact(8);
        let tail: f64 = lanes.remainder().iter().sum();
        for part in lanes {
            for k in 0..8 {
                acc[k] += part[k];
            }
        }
        *sj += ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7])) + tail;
    }
}

/// `T += Zᵀ Y` for features given column by column (`cols`: `w × nb`) and row-major
/// targets `yb` (`nb × c`) into row-major `t` (`w × c`): one GEMM.
fn add_t(cols: &[f64], nb: usize, yb: &[f64], c: usize, t: &mut [f64]) {
    let w = cols.len() / nb.max(1);
    let zm = MatRef::from_column_major_slice(cols, nb, w);
    let ym = MatRef::from_row_major_slice(yb, nb, c);
    let tm = MatMut::from_row_major_slice_mut(t, w, c);
    faer::linalg::matmul::matmul(tm, Accum::Add, zm.transpose(), ym, 1.0, Par::Seq);
}
