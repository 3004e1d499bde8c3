//! Ridge at one fixed λ by a mixed-precision factorisation (math.md §13.11): an f32 copy
//! of `A = C + λI` is factored (the tiled Cholesky at the f32 rate, half the memory of
//! an f64 factor), and the solution refined against the f64 statistics,
//! `W_{k+1} = W_k + L̃⁻ᵀL̃⁻¹(B − A W_k)`, until the residual `‖B − AW‖_F / ‖B‖_F` is
//! within the tolerance. `A W` is formed from the statistics' own Gram,
//! `G W − s (sᵀW)/n + λW`, so no f64 copy of `A` is made. Where the refinement does not
//! converge — `κ(A)·2⁻²⁴` near 1 or above, an ill-conditioned λ — it stops falling, the
//! f32 factor is dropped, and the f64 factorisation takes over (of a copy, or of the
//! statistics' own Gram where the plan factors in place).

use faer::Mat;
use serde::{Deserialize, Serialize};

use super::cholesky::{centred_rhs, consumed, folded, ridge_fixed, Keep};
use super::symmetric::symmetric_times;
use crate::error::Result;
use crate::stats::{factor_tiles, parallel, solve_tiles, split_tiles, tile_len, GramStats, TILE};

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

/// Ridge weights at one λ > 0 for every output by the f32 factor refined against the
/// statistics. `in_place`: a fallback factors the statistics' own Gram (consumed, once
/// `in_place` has kept them) rather than a copy; a refinement that converges consumes
/// nothing. Returns `W` (row-major `D × c`), `b` and how the refinement ended.
pub fn ridge_refined(
    stats: &mut GramStats,
    in_place: Option<Keep<'_>>,
    lambda: f64,
    threads: usize,
) -> Result<(Vec<f64>, Vec<f64>, Refinement)> {
    let b = centred_rhs(stats);
    let stalled = match refine(stats, &b, lambda, threads) {
        Ok((w, refinement)) => {
            let (weights, bias) = folded(stats, &w);
            return Ok((weights, bias, refinement));
        }
        Err(stalled) => stalled,
    };
    let work = consumed(stats, in_place)?;
    let (weights, bias) = ridge_fixed(stats, work, lambda, threads)?;
    Ok((weights, bias, stalled))
}

/// `A = G − s sᵀ/n + λI` rounded to f32, in the Gram's tile layout, tiles split over
/// threads: the centring is done in f64 before rounding, as the f64 path does it.
fn rounded(stats: &GramStats, lambda: f64, threads: usize) -> Vec<f32> {
    let g = &stats.gram;
    let dim = g.dim();
    let inv = if stats.n > 0 { 1.0 / stats.n as f64 } else { 0.0 };
    let mut a = vec![0f32; g.raw().len()];
    let items: Vec<_> = split_tiles(&mut a, dim).into_iter().zip(g.tiles()).collect();
    parallel(items, threads, |((ti, tj, out), (_, _, tile))| {
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
    });
    a
}

/// The refined solution of `A W = B` from an f32 factor of `A`, or where the f32 factor
/// fails or the refinement stops falling (two steps without halving the residual) how
/// far it got, `fell_back` set: the caller then factors in f64.
fn refine(stats: &GramStats, b: &Mat<f64>, lambda: f64, threads: usize) -> Result<(Mat<f64>, Refinement), Refinement> {
    let dim = stats.dim();
    let stalled = |steps, residual| Refinement { steps, residual, fell_back: true };
    let mut l32 = rounded(stats, lambda, threads);
    let tiles = split_tiles(&mut l32, dim).into_iter().map(|(_, _, t)| t).collect();
    factor_tiles(tiles, dim, 0.5 * lambda, threads).map_err(|_| stalled(0, None))?;
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
        let r = residual(stats, b, &w, lambda, threads);
        let ratio = r.norm_l2() / norm_b;
        if !ratio.is_finite() {
            return Err(stalled(step, None));
        }
        if ratio <= TOLERANCE {
            return Ok((w, Refinement { steps: step, residual: Some(ratio), fell_back: false }));
        }
        // Converging at rate ρ ≈ κ·2⁻²⁴ the residual halves at least every two steps;
        // it stalls or grows where ρ is near 1.
        if (history.len() >= 2 && ratio > 0.5 * history[history.len() - 2]) || step == MAX_STEPS {
            return Err(stalled(step, Some(ratio)));
        }
        history.push(ratio);
        w += solve32(&r);
    }
    Err(stalled(MAX_STEPS, history.last().copied()))
}

/// `B − A W` with `A W = G W − s (sᵀW)/n + λW`, in f64.
fn residual(stats: &GramStats, b: &Mat<f64>, w: &Mat<f64>, lambda: f64, threads: usize) -> Mat<f64> {
    let (dim, c) = (stats.dim(), w.ncols());
    // The sums of the product do not depend on the thread count (`symmetric`).
    let mut r = b - symmetric_times(&stats.gram, w.as_ref(), threads);
    let inv = if stats.n > 0 { 1.0 / stats.n as f64 } else { 0.0 };
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
        let (w1, b1, r1) = ridge_refined(&mut st.clone(), None, lambda, 1).unwrap();
        // In place, a refinement that converges consumes nothing, so keeps nothing.
        let mut asked = 0;
        let mut in_place = st.clone();
        let (w3, b3, r3) = ridge_refined(
            &mut in_place,
            Some(&mut |_| {
                asked += 1;
                Ok(())
            }),
            lambda,
            3,
        )
        .unwrap();
        assert_eq!((asked, &in_place.gram), (0, &st.gram), "a converged refinement kept or consumed the statistics");
        assert!(!r1.fell_back && r1.steps >= 1 && r1.residual.is_some_and(|r| r <= TOLERANCE), "{r1:?}");
        assert!(rel(&w1, &want_w) < 1e-9, "weights differ by {:e}", rel(&w1, &want_w));
        assert!(rel(&b1, &want_b) < 1e-9, "bias differs by {:e}", rel(&b1, &want_b));
        assert_eq!((w1, b1, r1), (w3, b3, r3), "thread count changed the solve");
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
        let (w, b, r) = ridge_refined(&mut kept, None, lambda, 2).unwrap();
        assert!(r.fell_back, "{r:?}");
        assert_eq!(kept.gram, st.gram, "not in place: the statistics are kept");
        let (want_w, want_b) = ridge_fixed(&st, st.gram.clone(), lambda, 2).unwrap();
        assert_eq!((&w, &b), (&want_w, &want_b), "the fallback is the f64 factorisation itself");
        // In place, the fallback hands the statistics over whole, once, before it consumes
        // them; a refused keep (a checkpoint that cannot be written) stops the solve.
        let mut seen = Vec::new();
        let mut consumed = st.clone();
        let got = ridge_refined(
            &mut consumed,
            Some(&mut |s: &GramStats| {
                seen.push(s.clone());
                Ok(())
            }),
            lambda,
            2,
        )
        .unwrap();
        assert_eq!(seen, vec![st.clone()], "the statistics kept before the in-place factor");
        assert_eq!((got.0, got.1), (want_w, want_b));
        assert_eq!(consumed.gram.dim(), 0, "the in-place fallback consumed the Gram");
        let mut refused = st.clone();
        let no = &mut |_: &GramStats| Err(crate::error::Error::bug("disk full"));
        assert!(ridge_refined(&mut refused, Some(no), lambda, 2).is_err());
        assert_eq!(refused.gram, st.gram, "a keep that failed left the statistics whole");
    }
}
