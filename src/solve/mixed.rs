//! Ridge at one fixed λ by a mixed-precision factorisation (math.md §13.11): an f32 copy
//! of `A = C + λI` is factored (the tiled Cholesky at the f32 rate, half the memory of
//! an f64 factor), and the solution refined against the f64 statistics,
//! `W_{k+1} = W_k + L̃⁻ᵀL̃⁻¹(B − A W_k)`, until the residual `‖B − AW‖_F / ‖B‖_F` is
//! within the tolerance. `A W` is formed from the statistics' own Gram,
//! `G W − s (sᵀW)/n + λW`, so no f64 copy of `A` is made. Where the refinement does not
//! converge — `κ(A)·2⁻²⁴` near 1 or above, an ill-conditioned λ — it stops falling, the
//! f32 factor is dropped, and the f64 factorisation takes over (of a copy, or of the
//! statistics' own Gram where the plan factors in place).
//!
//! Where the f32 factor does not fit beside the f64 statistics (D = 65,536 in 24 GiB: 8 GiB
//! beside 16), the Gram is spilled (the owner's [`Lease`] keeps it where it can be read
//! back: the run's checkpoint, or a verified file beside it) and its memory handed to the
//! f32 factor a tile row at a time; each refinement step streams the f64 Gram back for
//! `G W`, and a fallback reads it back to factor in f64.

use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::{Accum, Mat, MatRef, Par};
use serde::{Deserialize, Serialize};

use super::cholesky::{centred_rhs, consumed, folded, ridge_fixed};
use super::lease::{GramSource, Lease};
use super::symmetric::symmetric_times;
use crate::error::Result;
use crate::stats::{factor_tiles, parallel, solve_tiles, split_tiles, tile_len, tile_range, GramStats, TriGram, TILE};

/// The residual at which refinement stops: `‖B − AW‖_F ≤ 10⁻¹² ‖B‖_F`, where the
/// weights agree with the f64 factorisation's to about `κ(A)·10⁻¹²`.
pub const TOLERANCE: f64 = 1e-12;

/// Refinement steps at most.
const MAX_STEPS: usize = 30;

/// How the mixed-precision solve ended.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Refinement {
    /// Refinement steps taken (each one product with the f64 matrix and two f32 solves).
    pub steps: usize,
    /// The last `‖B − AW‖_F / ‖B‖_F` the refinement reached (absent where the f32 factor
    /// itself failed or the residual was not finite).
    pub residual: Option<f64>,
    /// The refinement stopped falling (or the f32 factor failed) and the f64
    /// factorisation solved instead.
    pub fell_back: bool,
}

/// Where the mixed-precision solve works (the mixed variants of `ridge::Factor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MixedMemory {
    /// The f32 factor beside the statistics; a fallback factors a copy.
    Copy,
    /// The f32 factor beside the statistics; a fallback factors their own Gram.
    InPlace,
    /// The f32 factor in the Gram's own memory, the Gram spilled through the lease.
    Spilled,
}

/// Ridge weights at one λ > 0 for every output by the f32 factor refined against the
/// statistics: [`MixedMemory::Copy`] factors a copy should it
/// fall back; [`MixedMemory::InPlace`] falls back on the statistics' own Gram (consumed
/// through `lease`; a refinement that converges consumes nothing);
/// [`MixedMemory::Spilled`] puts the f32 factor in the Gram's memory, the Gram streamed
/// back by each refinement step from where `lease` spilled it. Returns `W` (row-major
/// `D × c`), `b` and how the refinement ended.
pub fn ridge_refined(
    stats: &mut GramStats,
    memory: MixedMemory,
    lease: &mut dyn Lease,
    lambda: f64,
    threads: usize,
) -> Result<(Vec<f64>, Vec<f64>, Refinement)> {
    if memory == MixedMemory::Spilled {
        return spilled(stats, lease, lambda, threads);
    }
    let b = centred_rhs(stats);
    let l32 = rounded(stats, lambda, threads);
    let times = |w: &Mat<f64>| Ok(symmetric_times(&stats.gram, w.as_ref(), threads));
    let stalled = match refine(l32, stats, &b, lambda, threads, &times)? {
        Ok((w, refinement)) => {
            let (weights, bias) = folded(stats, &w);
            return Ok((weights, bias, refinement));
        }
        Err(stalled) => stalled,
    };
    let work = consumed(stats, (memory == MixedMemory::InPlace).then_some(lease))?;
    let (weights, bias) = ridge_fixed(stats, work, lambda, threads)?;
    Ok((weights, bias, stalled))
}

/// [`ridge_refined`] with the f32 factor in the Gram's memory: the Gram spilled by the
/// lease, then rounded into the factor's storage a tile row at a time from the last,
/// each row's f64 memory freed as it goes.
fn spilled(
    stats: &mut GramStats,
    lease: &mut dyn Lease,
    lambda: f64,
    threads: usize,
) -> Result<(Vec<f64>, Vec<f64>, Refinement)> {
    let source = lease.spill(stats)?;
    let b = centred_rhs(stats);
    let gram = std::mem::replace(&mut stats.gram, TriGram::zeros(0));
    let dim = gram.dim();
    let l32 = rounded_taking(gram, stats, lambda, threads);
    let times = |w: &Mat<f64>| streamed_times(&*source, dim, w);
    let stalled = match refine(l32, stats, &b, lambda, threads, &times)? {
        Ok((w, refinement)) => {
            let (weights, bias) = folded(stats, &w);
            return Ok((weights, bias, refinement));
        }
        Err(stalled) => stalled,
    };
    // The f32 factor is gone: the f64 Gram comes back and is factored.
    let work = source.gram()?;
    let (weights, bias) = ridge_fixed(stats, work, lambda, threads)?;
    Ok((weights, bias, stalled))
}

/// One tile of `A = G − s sᵀ/n + λI` rounded to f32: the centring in f64 before rounding,
/// as the f64 path does it.
fn round_tile(stats: &GramStats, (ti, tj): (usize, usize), tile: &[f64], out: &mut [f32], lambda: f64) {
    let dim = stats.dim();
    let inv = stats.inv_weight();
    let cols = tile_len(dim, tj);
    for (x, (row, grow)) in out.chunks_mut(cols).zip(tile.chunks(cols)).enumerate() {
        let i = ti * TILE + x;
        let si = stats.s[i] * inv;
        for (y, (v, &gv)) in row.iter_mut().zip(grow).enumerate() {
            let j = tj * TILE + y;
            let centred = gv - si * stats.s[j] + if i == j { lambda } else { 0.0 };
            *v = centred as f32;
        }
    }
}

/// `A` rounded to f32 in the Gram's tile layout, tiles split over threads.
fn rounded(stats: &GramStats, lambda: f64, threads: usize) -> Vec<f32> {
    let g = &stats.gram;
    let mut a = vec![0f32; g.raw().len()];
    let items: Vec<_> = split_tiles(&mut a, g.dim()).into_iter().zip(g.tiles()).collect();
    parallel(items, threads, |((ti, tj, out), (_, _, tile))| round_tile(stats, (ti, tj), tile, out, lambda));
    a
}

/// [`rounded`] of `gram` (not `stats.gram`, which the caller has taken), which it
/// consumes: tile rows from the last, each row's f64 values freed once rounded, so the
/// two never hold more than the Gram and one tile row of f32. (The f32 storage is
/// zeroed memory the kernel maps only when a row is written.)
fn rounded_taking(gram: TriGram, stats: &GramStats, lambda: f64, threads: usize) -> Vec<f32> {
    let dim = gram.dim();
    let mut raw = gram.into_raw();
    let mut a = vec![0f32; raw.len()];
    for ti in (0..dim.div_ceil(TILE)).rev() {
        // Every tile row above row I is TILE tall and its tiles TILE wide.
        let start = TILE * TILE * (ti * (ti + 1) / 2);
        let h = tile_len(dim, ti);
        let (mut outs, mut tiles) = (&mut a[start..], &raw[start..]);
        let mut items = Vec::with_capacity(ti + 1);
        for tj in 0..=ti {
            let len = h * tile_len(dim, tj);
            let (out, rest_out) = std::mem::take(&mut outs).split_at_mut(len);
            let (tile, rest) = tiles.split_at(len);
            items.push(((ti, tj), tile, out));
            (outs, tiles) = (rest_out, rest);
        }
        parallel(items, threads, |(at, tile, out)| round_tile(stats, at, tile, out, lambda));
        raw.truncate(start);
        raw.shrink_to_fit();
    }
    a
}

/// `G W` for the Gram kept in `source` (side `dim`), streamed a tile at a time: each tile
/// below the diagonal serves `G_IJ W_J` and `G_IJᵀ W_I`. One thread: the read, not the
/// `c`-column products, sets the pace.
fn streamed_times(source: &dyn GramSource, dim: usize, w: &Mat<f64>) -> Result<Mat<f64>> {
    let mut out = Mat::<f64>::zeros(dim, w.ncols());
    source.tiles(&mut |ti, tj, tile| {
        let (ri, rj) = (tile_range(dim, ti), tile_range(dim, tj));
        let t = MatRef::from_row_major_slice(tile, ri.len(), rj.len());
        if ti == tj {
            let rect = BlockStructure::Rectangular;
            let wi = w.subrows(ri.start, ri.len());
            let mut oi = out.subrows_mut(ri.start, ri.len());
            triangular::matmul(
                oi.as_mut(),
                rect,
                Accum::Add,
                t,
                BlockStructure::TriangularLower,
                wi,
                rect,
                1.0,
                Par::Seq,
            );
            let upper = BlockStructure::StrictTriangularUpper;
            triangular::matmul(oi, rect, Accum::Add, t.transpose(), upper, wi, rect, 1.0, Par::Seq);
        } else {
            let (wi, wj) = (w.subrows(ri.start, ri.len()), w.subrows(rj.start, rj.len()));
            matmul(out.subrows_mut(ri.start, ri.len()), Accum::Add, t, wj, 1.0, Par::Seq);
            matmul(out.subrows_mut(rj.start, rj.len()), Accum::Add, t.transpose(), wi, 1.0, Par::Seq);
        }
    })?;
    Ok(out)
}

/// The refined solution of `A W = B` from the f32 `A` in `l32` (factored here), with
/// `times(W) = G W`; or, where the f32 factor fails or the refinement stops falling (two
/// steps without halving the residual), how far it got, `fell_back` set: the caller then
/// factors in f64 (the f32 factor is dropped by then). An error of `times` (a spill file
/// that no longer reads back) stops the solve.
fn refine(
    mut l32: Vec<f32>,
    stats: &GramStats,
    b: &Mat<f64>,
    lambda: f64,
    threads: usize,
    times: &dyn Fn(&Mat<f64>) -> Result<Mat<f64>>,
) -> Result<std::result::Result<(Mat<f64>, Refinement), Refinement>> {
    let dim = stats.dim();
    let stalled = |steps, residual| Err(Refinement { steps, residual, fell_back: true });
    let tiles = split_tiles(&mut l32, dim).into_iter().map(|(_, _, t)| t).collect();
    if factor_tiles(tiles, dim, 0.5 * lambda, threads).is_err() {
        return Ok(stalled(0, None));
    }
    let factor: Vec<&[f32]> = split_tiles(&mut l32, dim).into_iter().map(|(_, _, t)| &*t).collect();
    let solve32 = |r: &Mat<f64>| -> Mat<f64> {
        let mut x = Mat::<f32>::from_fn(r.nrows(), r.ncols(), |i, k| r[(i, k)] as f32);
        solve_tiles(&factor, dim, x.as_mut());
        Mat::<f64>::from_fn(x.nrows(), x.ncols(), |i, k| f64::from(x[(i, k)]))
    };
    let norm_b = b.norm_l2().max(f64::MIN_POSITIVE);
    let mut w = solve32(b);
    let mut history: Vec<f64> = Vec::new();
    for step in 0..=MAX_STEPS {
        let r = residual(stats, b, &w, lambda, times(&w)?);
        let ratio = r.norm_l2() / norm_b;
        if !ratio.is_finite() {
            return Ok(stalled(step, None));
        }
        if ratio <= TOLERANCE {
            return Ok(Ok((w, Refinement { steps: step, residual: Some(ratio), fell_back: false })));
        }
        // Converging at rate ρ ≈ κ·2⁻²⁴ the residual halves at least every two steps;
        // it stalls or grows where ρ is near 1.
        if (history.len() >= 2 && ratio > 0.5 * history[history.len() - 2]) || step == MAX_STEPS {
            return Ok(stalled(step, Some(ratio)));
        }
        history.push(ratio);
        w += solve32(&r);
    }
    Ok(stalled(MAX_STEPS, history.last().copied()))
}

/// `B − A W` with `A W = G W − s (sᵀW)/n + λW`, in f64, from `gw = G W`.
fn residual(stats: &GramStats, b: &Mat<f64>, w: &Mat<f64>, lambda: f64, gw: Mat<f64>) -> Mat<f64> {
    let (dim, c) = (stats.dim(), w.ncols());
    // The sums of the product do not depend on the thread count (`symmetric`).
    let mut r = b - gw;
    let inv = stats.inv_weight();
    let stw: Vec<f64> = (0..c).map(|k| (0..dim).map(|i| stats.s[i] * w[(i, k)]).sum::<f64>() * inv).collect();
    for k in 0..c {
        for i in 0..dim {
            r[(i, k)] += stats.s[i] * stw[k] - lambda * w[(i, k)];
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::cholesky::ridge_fixed;
    use crate::solve::cholesky::tests::{stats, stats_with_noise};
    use crate::solve::lease::tests::Recording;
    use crate::solve::Unkept;

    fn rel(a: &[f64], b: &[f64]) -> f64 {
        let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale
    }

    #[test]
    fn refined_weights_equal_the_f64_cholesky_to_the_tolerance_for_any_thread_count() {
        // Two tile rows and a partial one; λ well above the rounding of f32.
        let (dim, c) = (2 * TILE + 37, 3);
        let st = stats(900, dim, c, 4);
        let lambda = 0.5;
        let (want_w, want_b) = ridge_fixed(&st, st.gram.clone(), lambda, 2).unwrap();
        let (w1, b1, r1) = ridge_refined(&mut st.clone(), MixedMemory::Copy, &mut Unkept, lambda, 1).unwrap();
        // In place, a refinement that converges consumes nothing, so keeps nothing.
        let mut lease = Recording::default();
        let mut in_place = st.clone();
        let (w3, b3, r3) = ridge_refined(&mut in_place, MixedMemory::InPlace, &mut lease, lambda, 3).unwrap();
        assert!(lease.consumed.is_empty() && lease.spilled.is_empty(), "a converged refinement kept the statistics");
        assert_eq!(in_place.gram, st.gram, "a converged refinement consumed the statistics");
        assert!(!r1.fell_back && r1.steps >= 1 && r1.residual.is_some_and(|r| r <= TOLERANCE), "{r1:?}");
        assert!(rel(&w1, &want_w) < 1e-9, "weights differ by {:e}", rel(&w1, &want_w));
        assert!(rel(&b1, &want_b) < 1e-9, "bias differs by {:e}", rel(&b1, &want_b));
        assert_eq!((w1, b1, r1), (w3, b3, r3), "thread count changed the solve");
    }

    #[test]
    fn the_gram_rounded_a_tile_row_at_a_time_as_it_is_freed_is_the_copy_rounded() {
        let (dim, c) = (3 * TILE + 11, 2);
        let st = stats(300, dim, c, 6);
        assert_eq!(rounded_taking(st.gram.clone(), &st, 0.25, 3), rounded(&st, 0.25, 2));
    }

    #[test]
    fn the_factor_in_the_grams_memory_refines_against_the_spilled_gram_to_the_f64_weights() {
        let (dim, c) = (2 * TILE + 37, 3);
        let st = stats(900, dim, c, 4);
        let lambda = 0.5;
        let (want_w, want_b) = ridge_fixed(&st, st.gram.clone(), lambda, 2).unwrap();
        let (_, _, beside) = ridge_refined(&mut st.clone(), MixedMemory::Copy, &mut Unkept, lambda, 2).unwrap();
        let mut runs = Vec::new();
        for threads in [1, 3] {
            let mut lease = Recording::default();
            let mut spilled = st.clone();
            let got = ridge_refined(&mut spilled, MixedMemory::Spilled, &mut lease, lambda, threads).unwrap();
            assert_eq!(lease.spilled, vec![st.clone()], "the statistics are spilled whole before the Gram is taken");
            assert!(lease.consumed.is_empty());
            assert_eq!(spilled.gram.dim(), 0, "the factor took the Gram's memory");
            runs.push(got);
        }
        let (w, b, r) = &runs[0];
        assert!(!r.fell_back && r.residual.is_some_and(|x| x <= TOLERANCE), "{r:?}");
        assert_eq!(r.steps, beside.steps, "the streamed product refines as the in-memory one does");
        assert!(rel(w, &want_w) < 1e-9, "weights differ by {:e}", rel(w, &want_w));
        assert!(rel(b, &want_b) < 1e-9, "bias differs by {:e}", rel(b, &want_b));
        assert_eq!(runs[0], runs[1], "thread count changed the solve");
        // A spill refused (nowhere to write it): the solve stops before it takes the Gram.
        let mut whole = st.clone();
        let mut refusing = Recording { refuse: true, ..Recording::default() };
        assert!(ridge_refined(&mut whole, MixedMemory::Spilled, &mut refusing, lambda, 2).is_err());
        assert_eq!(whole.gram, st.gram, "a spill that failed left the statistics whole");
        assert!(ridge_refined(&mut whole, MixedMemory::Spilled, &mut Unkept, lambda, 2).is_err());
        assert_eq!(whole.gram, st.gram, "statistics nothing keeps are never spilled");
    }

    #[test]
    fn an_ill_conditioned_lambda_falls_back_to_the_f64_factor_and_says_so() {
        // Rank-8 features (the noise is below f32's rounding of them) and λ far below the
        // spectrum's top: κ·2⁻²⁴ ≫ 1, so the f32 factor cannot refine; f64 still factors.
        let (dim, c) = (TILE + 5, 2);
        let st = stats_with_noise(600, dim, c, 7, 1e-5);
        let top = st.gram.diagonal().into_iter().sum::<f64>();
        let lambda = 1e-9 * top;
        let mut kept = st.clone();
        let (w, b, r) = ridge_refined(&mut kept, MixedMemory::Copy, &mut Unkept, lambda, 2).unwrap();
        assert!(r.fell_back, "{r:?}");
        assert_eq!(kept.gram, st.gram, "not in place: the statistics are kept");
        let (want_w, want_b) = ridge_fixed(&st, st.gram.clone(), lambda, 2).unwrap();
        assert_eq!((&w, &b), (&want_w, &want_b), "the fallback is the f64 factorisation itself");
        // In place, the fallback hands the statistics over whole, once, before it consumes
        // them; a refused keep (a checkpoint that cannot be written) stops the solve.
        let mut lease = Recording::default();
        let mut consumed = st.clone();
        let got = ridge_refined(&mut consumed, MixedMemory::InPlace, &mut lease, lambda, 2).unwrap();
        assert_eq!(lease.consumed, vec![st.clone()], "the statistics kept before the in-place factor");
        assert_eq!((&got.0, &got.1), (&want_w, &want_b));
        assert_eq!(consumed.gram.dim(), 0, "the in-place fallback consumed the Gram");
        let mut refused = st.clone();
        let mut refusing = Recording { refuse: true, ..Recording::default() };
        assert!(ridge_refined(&mut refused, MixedMemory::InPlace, &mut refusing, lambda, 2).is_err());
        assert_eq!(refused.gram, st.gram, "a keep that failed left the statistics whole");
        // With the factor in the Gram's memory, the fallback reads the spilled Gram back
        // and factors it: the f64 model exactly.
        let mut lease = Recording::default();
        let mut spilled = st.clone();
        let (w, b, r) = ridge_refined(&mut spilled, MixedMemory::Spilled, &mut lease, lambda, 2).unwrap();
        assert!(r.fell_back, "{r:?}");
        assert_eq!((&w, &b), (&want_w, &want_b), "the fallback factors the Gram read back");
    }
}
