//! Ridge at one fixed λ by a tiled Cholesky factorisation (math.md §13.7, the cheapest
//! solve path): `C + λI = LLᵀ` on the tiled lower triangle the statistics already hold,
//! then two triangular solves for all `c` right-hand sides at once.
//!
//! The factorisation is the tiled one of `stats::tri_factor` (right-looking, one
//! sequential faer call per tile, bit-identical for any thread count). No dense `D × D`
//! matrix is formed; the factor overwrites the matrix it is given (the caller decides
//! whether that is the statistics themselves or a copy).

use faer::Mat;

use super::lease::Lease;
use crate::error::{Error, Result};
use crate::stats::{factor_tiles, solve_tiles, GramStats, TriGram};

/// The Gram a Cholesky factors: the statistics' own, taken from them once `lease` has
/// kept them, or (no lease) a copy.
pub(crate) fn consumed(stats: &mut GramStats, lease: Option<&mut dyn Lease>) -> Result<TriGram> {
    Ok(match lease {
        Some(lease) => {
            lease.consume(stats)?;
            std::mem::replace(&mut stats.gram, TriGram::zeros(0))
        }
        None => stats.gram.clone(),
    })
}

/// Factors `a` in place into its lower Cholesky factor (tile storage unchanged; the
/// strict upper part of each diagonal tile is left as it was and never read). Fails with
/// the index of the first pivot that is not positive.
pub fn factor_in_place(a: &mut TriGram, min_pivot: f64, threads: usize) -> std::result::Result<(), usize> {
    let dim = a.dim();
    factor_tiles(a.tiles_mut().into_iter().map(|(_, _, t)| t).collect(), dim, min_pivot, threads)
}

/// Solves `LLᵀ X = B` in place for the factor `l` and a column-major `D × c` right side.
pub fn solve_in_place(l: &TriGram, b: &mut Mat<f64>) {
    let tiles: Vec<&[f64]> = l.tiles().into_iter().map(|(_, _, t)| t).collect();
    solve_tiles(&tiles, l.dim(), b.as_mut());
}

/// Ridge weights at one λ > 0 for every output: the centred `C + λI` (intercept
/// unpenalised) factored in `work`, which the call consumes (pass the statistics' own
/// Gram to factor in place, or a copy to keep them). Returns `W` (row-major `D × c`) and
/// `b`, folded as `f(z) = Wᵀz + b`.
pub fn ridge_fixed(stats: &GramStats, mut work: TriGram, lambda: f64, threads: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = stats.weight;
    if n > 0.0 {
        // C = G − s sᵀ / W.
        work.add_sym_rank2(&stats.s, &stats.s, -0.5 / n);
    }
    work.add_diagonal(lambda);
    factor_in_place(&mut work, 0.5 * lambda, threads).map_err(|pivot| not_positive_definite(lambda, pivot))?;
    let mut rhs = centred_rhs(stats);
    solve_in_place(&work, &mut rhs);
    Ok(folded(stats, &rhs))
}

/// The refusal of a factorisation that met pivot `pivot` at or below its floor.
pub(crate) fn not_positive_definite(lambda: f64, pivot: usize) -> Error {
    Error::NotPositiveDefinite {
        lambda,
        pivot,
        hint: "raise ridge.lambda (or use lambda = \"gcv\"); features that are constant or exact copies of each other make C singular"
            .into(),
    }
}

/// `B = C_zy = T − s uᵀ / n`, `D × c`.
pub(crate) fn centred_rhs(stats: &GramStats) -> Mat<f64> {
    let c = stats.c;
    let inv = stats.inv_weight();
    Mat::<f64>::from_fn(stats.dim(), c, |i, k| stats.t[i * c + k] - stats.s[i] * stats.u[k] * inv)
}

/// `(W, b)` of the centred solution `w`: `W` row-major `D × c`, `b = ȳ − Wᵀ z̄` with `z̄`
/// the unshifted feature means.
pub(crate) fn folded(stats: &GramStats, w: &Mat<f64>) -> (Vec<f64>, Vec<f64>) {
    let (dim, c) = (stats.dim(), stats.c);
    let inv = stats.inv_weight();
    let weights: Vec<f64> = (0..dim).flat_map(|i| (0..c).map(move |k| (i, k))).map(|(i, k)| w[(i, k)]).collect();
    let bias = (0..c)
        .map(|k| {
            let ymean = stats.u[k] * inv;
            ymean - (0..dim).map(|i| weights[i * c + k] * (stats.shift[i] + stats.s[i] * inv)).sum::<f64>()
        })
        .collect();
    (weights, bias)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::solve::{Components, Pca, RotatedProblem};
    use crate::stats::TILE;

    /// Statistics of correlated rows with a spectral spread, shifted away from 0.
    pub(crate) fn stats(rows: usize, dim: usize, c: usize, seed: u64) -> GramStats {
        stats_with_noise(rows, dim, c, seed, 0.1)
    }

    /// The same with the features' independent noise (the spectrum's floor) at `noise`.
    pub(crate) fn stats_with_noise(rows: usize, dim: usize, c: usize, seed: u64, noise: f64) -> GramStats {
        let mut r = crate::rng::StageRng::new(seed, 1);
        let mix: Vec<f64> = (0..dim * 8).map(|_| r.uniform() - 0.5).collect();
        let mut z = Vec::with_capacity(rows * dim);
        let mut y = Vec::with_capacity(rows * c);
        for _ in 0..rows {
            let f: Vec<f64> = (0..8).map(|_| r.uniform() - 0.5).collect();
            for i in 0..dim {
                let low: f64 = (0..8).map(|k| mix[i * 8 + k] * f[k]).sum();
                z.push((3.0 + low + noise * (r.uniform() - 0.5)) as f32);
            }
            for k in 0..c {
                y.push(f[k % 8] + 0.05 * (r.uniform() - 0.5));
            }
        }
        let mut st = GramStats::new(vec![2.5; dim], c);
        st.add(&z, &y, rows, 2).unwrap();
        st
    }

    fn rel(a: &[f64], b: &[f64]) -> f64 {
        let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale
    }

    #[test]
    fn tiled_cholesky_ridge_equals_the_dense_eigen_path_for_any_thread_count() {
        // D = 2·TILE + 37: three tile rows, a partial last tile.
        let (dim, c) = (2 * TILE + 37, 3);
        let st = stats(900, dim, c, 4);
        let lambda = 0.05;
        let cl = st.centered();
        let pca = Pca::fit(&cl, Components::All).unwrap();
        let p = RotatedProblem::new(&pca, &cl, true, false).unwrap();
        let (want_w, want_b) = p.fold(&p.coefficients(&[lambda; 3]), &cl);
        let (w1, b1) = ridge_fixed(&st, st.gram.clone(), lambda, 1).unwrap();
        let (w3, b3) = ridge_fixed(&st, st.gram.clone(), lambda, 3).unwrap();
        assert!(rel(&w1, &want_w) < 1e-8, "weights differ by {}", rel(&w1, &want_w));
        assert!(rel(&b1, &want_b) < 1e-8, "bias differs by {}", rel(&b1, &want_b));
        assert_eq!((w1, b1), (w3, b3), "thread count changed the factor");
    }

    #[test]
    fn an_indefinite_matrix_is_refused_with_its_lambda_never_solved() {
        let mut g = TriGram::from_raw(2, vec![1.0, 2.0, 2.0, 1.0]).unwrap();
        assert_eq!(factor_in_place(&mut g, 0.0, 1), Err(1));
        // Statistics whose Gram is indefinite (a damaged or foreign file) at a small λ.
        let mut st = GramStats::new(vec![0.0; 2], 1);
        (st.n, st.weight) = (4, 4.0);
        st.gram = TriGram::from_raw(2, vec![1.0, 2.0, 2.0, 1.0]).unwrap();
        match ridge_fixed(&st, st.gram.clone(), 0.1, 1) {
            Err(Error::NotPositiveDefinite { lambda, pivot, .. }) => assert_eq!((lambda, pivot), (0.1, 1)),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_pivot_swamped_by_rounding_is_refused() {
        // [[1, 1], [1, 1 + 1e-20]] + λI with λ = 1e-30: the second pivot is λ + 1e-20 in
        // exact arithmetic but rounds to 0, below λ/2.
        let mut g = TriGram::from_raw(2, vec![1.0 + 1e-30, 1.0, 1.0, 1.0 + 1e-30]).unwrap();
        assert_eq!(factor_in_place(&mut g, 0.5e-30, 1), Err(1));
    }
}
