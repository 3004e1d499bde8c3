//! The top `E` eigenpairs of a centred covariance straight from the tiled Gram
//! (math.md §13.7, PCA with `E ≪ D`): block subspace iteration with Rayleigh–Ritz on
//! `b = E + p` vectors, where each step is one symmetric tiled product `C X` over the
//! stored lower triangle. No dense `D × D` matrix is formed; memory is a few `D × b`
//! blocks. Each Ritz pair's residual `‖Cu − θu‖ / θ_max` is measured exactly (from the
//! product already computed) and the iteration stops when every kept pair is below
//! the tolerance.

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef, Par, Side};

use crate::error::{Error, Result};
use crate::rng::StageRng;
use crate::stats::{tile_len, tile_range, GramStats, TILE};

/// The top eigenpairs found.
#[derive(Debug, Clone)]
pub struct TopEigen {
    /// `θ_1 ≥ … ≥ θ_E`.
    pub values: Vec<f64>,
    /// The eigenvectors as columns, row-major `D × E`, each sign-fixed (largest-magnitude
    /// entry positive).
    pub vectors: Vec<f64>,
    /// `‖Cu_k − θ_k u_k‖ / θ_1` per pair.
    pub residuals: Vec<f64>,
    /// Iterations run.
    pub iterations: usize,
    /// `tr C`, the total variance.
    pub trace: f64,
}

/// `Y = C X` for the centred covariance `C = G − s sᵀ / n` held by `stats`.
struct Operator<'a> {
    stats: &'a GramStats,
    /// Diagonal tiles made symmetric (only their lower halves are stored valid).
    diag: Vec<Mat<f64>>,
    threads: usize,
}

impl<'a> Operator<'a> {
    fn new(stats: &'a GramStats, threads: usize) -> Self {
        let dim = stats.dim();
        let diag = stats
            .gram
            .tiles()
            .into_iter()
            .filter(|(i, j, _)| i == j)
            .map(|(i, _, t)| {
                let h = tile_len(dim, i);
                Mat::from_fn(h, h, |r, c| if c <= r { t[r * h + c] } else { t[c * h + r] })
            })
            .collect();
        Operator { stats, diag, threads: threads.max(1) }
    }

    fn apply(&self, x: MatRef<'_, f64>) -> Mat<f64> {
        let dim = self.stats.dim();
        let b = x.ncols();
        let nt = dim.div_ceil(TILE);
        let tiles = self.stats.gram.tiles();
        let pos = |i: usize, j: usize| i * (i + 1) / 2 + j;
        let tile =
            |i: usize, j: usize| MatRef::from_row_major_slice(tiles[pos(i, j)].2, tile_len(dim, i), tile_len(dim, j));
        // Each output block is one thread's: the sums are the same for any thread count.
        let block = |i: usize| -> Mat<f64> {
            let mut y = Mat::<f64>::zeros(tile_len(dim, i), b);
            for j in 0..nt {
                let xj = x.subrows(tile_range(dim, j).start, tile_len(dim, j));
                if j < i {
                    matmul(y.as_mut(), Accum::Add, tile(i, j), xj, 1.0, Par::Seq);
                } else if j == i {
                    matmul(y.as_mut(), Accum::Add, self.diag[i].as_ref(), xj, 1.0, Par::Seq);
                } else {
                    matmul(y.as_mut(), Accum::Add, tile(j, i).transpose(), xj, 1.0, Par::Seq);
                }
            }
            y
        };
        let blocks: Vec<Mat<f64>> = if self.threads == 1 {
            (0..nt).map(block).collect()
        } else {
            let mut out: Vec<Option<Mat<f64>>> = (0..nt).map(|_| None).collect();
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..self.threads)
                    .map(|t| {
                        let block = &block;
                        scope.spawn(move || (t..nt).step_by(self.threads).map(|i| (i, block(i))).collect::<Vec<_>>())
                    })
                    .collect();
                for h in handles {
                    // A worker only panics on a broken invariant; surface it.
                    for (i, m) in h.join().unwrap_or_default() {
                        out[i] = Some(m);
                    }
                }
            });
            out.into_iter().map(|m| m.unwrap_or_else(|| Mat::zeros(0, b))).collect()
        };
        let mut y = Mat::<f64>::zeros(dim, b);
        for (i, m) in blocks.iter().enumerate() {
            y.as_mut().subrows_mut(tile_range(dim, i).start, m.nrows()).copy_from(m);
        }
        // − s (sᵀ X) / n.
        let n = self.stats.n as f64;
        if n > 0.0 {
            let s = &self.stats.s;
            for k in 0..b {
                let dot: f64 = (0..dim).map(|r| s[r] * x[(r, k)]).sum::<f64>() / n;
                for r in 0..dim {
                    y[(r, k)] -= s[r] * dot;
                }
            }
        }
        y
    }
}

/// The top `e` eigenpairs of the centred covariance of `stats` to residual `tol`
/// (relative to `θ_1`), in at most `max_iter` iterations. Deterministic in `seed`.
pub fn top_eigen(
    stats: &GramStats,
    e: usize,
    tol: f64,
    max_iter: usize,
    seed: u64,
    threads: usize,
) -> Result<TopEigen> {
    let dim = stats.dim();
    let e = e.min(dim);
    let b = (e + (e / 4).max(16)).min(dim);
    let op = Operator::new(stats, threads);
    let n = stats.n as f64;
    let diag = stats.gram.diagonal();
    let trace = diag.iter().zip(&stats.s).map(|(g, s)| g - if n > 0.0 { s * s / n } else { 0.0 }).sum();
    let mut rng = StageRng::new(seed, 0x5ca1e);
    let start = Mat::<f64>::from_fn(dim, b, |_, _| rng.normal());
    let mut x = start.qr().compute_thin_Q();
    let mut out = None;
    let max_iter = max_iter.max(1);
    for it in 1..=max_iter {
        let y = op.apply(x.as_ref());
        // Rayleigh–Ritz (a b × b eigenproblem and two D × b × E products) costs about as
        // much as the product itself: do it every third step, and always at the last.
        if it % 3 != 0 && it != max_iter {
            x = y.qr().compute_thin_Q();
            continue;
        }
        // Rayleigh–Ritz in span(X): H = Xᵀ C X.
        let mut h = Mat::<f64>::zeros(b, b);
        matmul(h.as_mut(), Accum::Replace, x.transpose(), y.as_ref(), 1.0, Par::Seq);
        let h = Mat::from_fn(b, b, |i, j| 0.5 * (h[(i, j)] + h[(j, i)]));
        let evd = h
            .self_adjoint_eigen(Side::Lower)
            .map_err(|err| Error::Numerical(format!("Rayleigh–Ritz eigendecomposition failed: {err:?}")))?;
        // faer returns ascending eigenvalues: the top e are the last columns.
        let order: Vec<usize> = (0..b).rev().take(e).collect();
        let v = Mat::<f64>::from_fn(b, e, |r, k| evd.U()[(r, order[k])]);
        let theta: Vec<f64> = order.iter().map(|&k| evd.S()[k]).collect();
        let mut u = Mat::<f64>::zeros(dim, e);
        matmul(u.as_mut(), Accum::Replace, x.as_ref(), v.as_ref(), 1.0, Par::Seq);
        let mut cu = Mat::<f64>::zeros(dim, e);
        matmul(cu.as_mut(), Accum::Replace, y.as_ref(), v.as_ref(), 1.0, Par::Seq);
        let top = theta.first().copied().unwrap_or(0.0).abs().max(f64::MIN_POSITIVE);
        let residuals: Vec<f64> = (0..e)
            .map(|k| (0..dim).map(|r| (cu[(r, k)] - theta[k] * u[(r, k)]).powi(2)).sum::<f64>().sqrt() / top)
            .collect();
        let worst = residuals.iter().copied().fold(0.0, f64::max);
        out = Some((theta, u, residuals, it));
        if worst <= tol || it == max_iter {
            break;
        }
        x = y.qr().compute_thin_Q();
    }
    let (values, u, residuals, iterations) =
        out.ok_or_else(|| Error::Internal("subspace iteration ran no step".into()))?;
    let mut vectors = vec![0.0; dim * e];
    for k in 0..e {
        let best = (0..dim).fold(0, |m, r| if u[(r, k)].abs() > u[(m, k)].abs() { r } else { m });
        let sign = if u[(best, k)] < 0.0 { -1.0 } else { 1.0 };
        for r in 0..dim {
            vectors[r * e + k] = sign * u[(r, k)];
        }
    }
    Ok(TopEigen { values, vectors, residuals, iterations, trace })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::eigh_desc;

    #[test]
    fn top_pairs_equal_the_dense_decomposition_on_a_matrix_with_a_gap() {
        // D = TILE + 77 (two tile rows); the data span 8 strong directions plus noise.
        let (dim, e) = (TILE + 77, 8);
        let st = crate::chol::tests::stats(1200, dim, 1, 11);
        let cov = st.centered().cov;
        let (values, vectors) = eigh_desc(&cov, dim).unwrap();
        for threads in [1, 2] {
            let top = top_eigen(&st, e, 1e-10, 300, 3, threads).unwrap();
            for (k, (got, want)) in top.values.iter().zip(&values).enumerate() {
                assert!((got - want).abs() <= 1e-8 * want, "θ_{k}: {got} vs {want}");
                assert!(top.residuals[k] <= 1e-10);
            }
            // Largest principal angle: σ_min(Uᵀ V) = cos θ_max.
            let u = MatRef::from_row_major_slice(&top.vectors, dim, e);
            let v = Mat::<f64>::from_fn(dim, e, |r, k| vectors[r * dim + k]);
            let mut m = Mat::<f64>::zeros(e, e);
            matmul(m.as_mut(), Accum::Replace, u.transpose(), v.as_ref(), 1.0, Par::Seq);
            let s = m.singular_values().unwrap();
            let cos_min = s.iter().copied().fold(f64::INFINITY, f64::min);
            let angle = cos_min.min(1.0).acos();
            assert!(angle < 1e-6, "subspace angle {angle}");
            let trace: f64 = (0..dim).map(|i| cov[i * dim + i]).sum();
            assert!((top.trace - trace).abs() <= 1e-10 * trace);
        }
    }
}
