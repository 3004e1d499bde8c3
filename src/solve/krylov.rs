//! The top `E` eigenpairs of a centred covariance straight from the tiled Gram
//! (math.md §13.7, PCA with `E ≪ D`): block Krylov with Rayleigh–Ritz, where each step
//! is one symmetric tiled product `C X` over the stored lower triangle. No dense `D × D`
//! matrix is formed; memory is the basis and its product, two `D × (3E + E/16)` blocks
//! ([`bytes_for`]). Each Ritz
//! pair's residual `‖Cu − θu‖ / θ_max` is measured exactly (from products already
//! computed) and the iteration stops when every kept pair is below the tolerance.

use faer::linalg::matmul::matmul;
use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::{Accum, Mat, MatRef, Par, Side};

use super::symmetric::{self, symmetric_times};
use crate::error::{Error, Result};
use crate::rng::StageRng;
use crate::stats::GramStats;

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
    /// Block products run.
    pub iterations: usize,
    /// `tr C`, the total variance.
    pub trace: f64,
}

/// `Y = C X` for the centred covariance `C = G − s sᵀ / n` held by `stats`.
struct Operator<'a> {
    stats: &'a GramStats,
    threads: usize,
}

impl<'a> Operator<'a> {
    fn new(stats: &'a GramStats, threads: usize) -> Self {
        Operator { stats, threads: threads.max(1) }
    }

    /// Each tile is read once for both of its products: one product per tile row reads
    /// every tile twice, and the products are most of a large solve (`SECTIONS=solve
    /// scripts/bench.sh`).
    fn apply(&self, x: MatRef<'_, f64>) -> Mat<f64> {
        let dim = self.stats.dim();
        let mut y = symmetric_times(&self.stats.gram, x, self.threads);
        // − s (sᵀ X) / n.
        let n = self.stats.weight;
        if n > 0.0 {
            let s = &self.stats.s;
            for k in 0..x.ncols() {
                let dot: f64 = (0..dim).map(|r| s[r] * x[(r, k)]).sum::<f64>() / n;
                for r in 0..dim {
                    y[(r, k)] -= s[r] * dot;
                }
            }
        }
        y
    }
}

/// The block width for `e` pairs of a `dim`-side covariance.
fn block_width(dim: usize, e: usize) -> usize {
    (e / 16).max(32).min(dim)
}

/// The basis's capacity, about `3E`.
fn capacity(dim: usize, e: usize) -> usize {
    let b = block_width(dim, e);
    (3 * e + b).max(2 * b).min(dim)
}

/// Bytes [`top_eigen`] allocates at most for `e` pairs at side `dim`: the basis `V` and
/// `W = CV` (`D × cap` each) with a restart's `V S` and `W S` beside them, the product's
/// partial sums and a few `D × b` blocks, and the `cap × cap` matrices of Rayleigh–Ritz
/// (`H`, `WᵀW`, the small eigendecomposition and its copies).
pub fn bytes_for(dim: usize, e: usize) -> u64 {
    let e = e.min(dim);
    let (b, cap) = (block_width(dim, e), capacity(dim, e));
    let keep = (e + b).min(cap);
    8 * (2 * dim * cap + 2 * dim * keep + 5 * dim * b + 6 * cap * cap) as u64 + symmetric::work_bytes(dim, b)
}

/// The top `e` eigenpairs of the centred covariance of `stats` to residual `tol`
/// (relative to `θ_1`), in at most `max_iter` block products. Deterministic in `seed`.
///
/// Block Krylov with Rayleigh–Ritz: the basis grows by one orthonormalised block
/// `C X_last` at a time (a Chebyshev-like polynomial filter, where subspace iteration
/// only powers, and needs several times the steps), up to about `3E`; then it restarts from the best Ritz vectors and the
/// residual directions of the worst pairs. Blocks are E/16 columns (at least 32): a
/// narrower block raises the filter's degree per column multiplied, and the basis work
/// (`D·k` per column) and the products are both paid per column; narrower than E/16,
/// the extra Rayleigh–Ritz steps cost more than the block saves (block widths compared
/// by `SECTIONS=solve scripts/bench.sh`). `H = VᵀCV` and `WᵀW` (with `W = CV`) grow
/// by one block per step, so each Rayleigh–Ritz costs a small eigenproblem; residuals
/// come from `sᵀWᵀWs − θ²` and are measured exactly from `U` and `CU` before they are
/// trusted.
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
    let threads = threads.max(1);
    let par = if threads > 1 { Par::rayon(threads) } else { Par::Seq };
    let (b, cap) = (block_width(dim, e), capacity(dim, e));
    let op = Operator::new(stats, threads);
    let n = stats.weight;
    let diag = stats.gram.diagonal();
    let trace = diag.iter().zip(&stats.s).map(|(g, s)| g - if n > 0.0 { s * s / n } else { 0.0 }).sum();
    let mut rng = StageRng::new(seed, 0x5ca1e);
    let mut basis = Basis::new(dim, cap, par);
    let mut next = Mat::<f64>::from_fn(dim, b, |_, _| rng.normal());
    // `next` is the newest product `C X_last`: its coefficients on `V` are `H`'s last
    // columns already (`Vᵀ C X_last`), so the first projection needs one product less.
    let mut continued = false;
    let mut products = 0;
    // Rayleigh–Ritz first when the basis holds twice the wanted pairs (the easy cases
    // stop there); after that, where the convergence seen so far says the worst pair
    // reaches the tolerance, or when the basis is full. Each costs a k × k eigenproblem.
    let mut next_rr = (2 * e).max(e + b).min(cap);
    let mut last_rr: Option<(f64, usize)> = None;
    let max_iter = max_iter.max(1);
    loop {
        let x = basis.orthonormal_block(next.as_ref(), continued, &mut rng);
        let y = op.apply(x.as_ref());
        products += 1;
        basis.push(x.as_ref(), y.as_ref());
        let k = basis.len;
        if k < next_rr && k + b <= cap && k < dim && products < max_iter {
            next = y;
            continued = true;
            continue;
        }
        let ritz = basis.ritz(e)?;
        let floor = 1e-7;
        let last = products >= max_iter || (k == dim && k == cap);
        if ritz.estimated_worst <= (10.0 * tol).max(floor) || last {
            let exact = basis.exact(&ritz, e);
            if exact.worst <= tol || last {
                return Ok(finish(exact, products, trace, dim, e));
            }
        }
        // Continue from the newest product, or restart from the best Ritz vectors plus
        // the residual directions of the pairs furthest from converged.
        continued = k + b <= cap.min(dim);
        next = if continued { y } else { basis.restart(&ritz, (e + b).min(k), b) };
        let worst = ritz.estimated_worst.max(f64::MIN_POSITIVE);
        let blocks = match last_rr {
            Some((before, at)) if worst < before && products > at => {
                // The worst residual has fallen by ρ per block: the blocks it still needs.
                let rate = (worst / before).powf(1.0 / (products - at) as f64);
                ((tol / worst).ln() / rate.ln()).ceil().max(1.0) as usize
            }
            _ => usize::MAX,
        };
        next_rr = basis.len.saturating_add(blocks.saturating_mul(b)).min(cap);
        last_rr = Some((worst, products));
    }
}

/// An orthonormal basis `V` (`D × k`), `W = C V`, and the small matrices `H = VᵀW` and
/// `WᵀW` grown with it.
struct Basis {
    v: Mat<f64>,
    w: Mat<f64>,
    h: Mat<f64>,
    ww: Mat<f64>,
    len: usize,
    par: Par,
}

/// Rayleigh–Ritz in the current basis: `θ` descending with their coefficient vectors.
struct Ritz {
    theta: Vec<f64>,
    /// `k × k`, columns in the order of `theta`.
    coeffs: Mat<f64>,
    /// `‖Cu_i − θ_i u_i‖ / θ_1` from `sᵀWᵀWs − θ²` for the top pairs (rounding-limited to
    /// about 1e-8).
    estimates: Vec<f64>,
    estimated_worst: f64,
}

/// The top pairs with their residuals measured from `U` and `CU`.
struct Exact {
    theta: Vec<f64>,
    u: Mat<f64>,
    residuals: Vec<f64>,
    worst: f64,
}

impl Basis {
    fn new(dim: usize, cap: usize, par: Par) -> Basis {
        Basis {
            v: Mat::zeros(dim, cap),
            w: Mat::zeros(dim, cap),
            h: Mat::zeros(cap, cap),
            ww: Mat::zeros(cap, cap),
            len: 0,
            par,
        }
    }

    /// `Z` made orthonormal and orthogonal to `V`: two passes of project-then-normalise
    /// (block Gram–Schmidt with Cholesky QR, all matrix products), checked, with
    /// Householder QR where the block is too ill-conditioned for Cholesky. A column
    /// that lies in `span V` is replaced by a random one, so the basis never repeats a
    /// direction. At most `D − k` columns.
    fn orthonormal_block(&self, z: MatRef<'_, f64>, continued: bool, rng: &mut StageRng) -> Mat<f64> {
        let dim = self.v.nrows();
        let cols = z.ncols().min(dim - self.len);
        let mut z = z.subcols(0, cols).to_owned();
        for attempt in 0..3 {
            let before: Vec<f64> = (0..cols).map(|j| z.col(j).norm_l2()).collect();
            if continued && attempt == 0 && cols == z.ncols() {
                let (k, m) = (self.len, cols);
                let coeffs = self.h.as_ref().submatrix(0, k - m, k, m);
                matmul(z.as_mut(), Accum::Add, self.v.as_ref().subcols(0, k), coeffs, -1.0, self.par);
            } else {
                self.project_out(z.as_mut());
            }
            let mut redo = false;
            for (j, &norm) in before.iter().enumerate() {
                if z.col(j).norm_l2() <= 1e-10 * norm.max(f64::MIN_POSITIVE) || norm == 0.0 {
                    z.col_mut(j).iter_mut().for_each(|x| *x = rng.normal());
                    redo = true;
                }
            }
            if !redo || attempt == 2 {
                break;
            }
        }
        let first = cholesky_qr(z.as_mut(), self.par);
        self.project_out(z.as_mut());
        if first && cholesky_qr(z.as_mut(), self.par) && orthonormal(z.as_ref(), self.par) {
            return z;
        }
        let mut q = z.qr().compute_thin_Q();
        self.project_out(q.as_mut());
        q.qr().compute_thin_Q()
    }

    /// `Z ← Z − V (Vᵀ Z)`.
    fn project_out(&self, mut z: faer::MatMut<'_, f64>) {
        if self.len == 0 {
            return;
        }
        let v = self.v.as_ref().subcols(0, self.len);
        let mut c = Mat::<f64>::zeros(self.len, z.ncols());
        matmul(c.as_mut(), Accum::Replace, v.transpose(), z.as_ref(), 1.0, self.par);
        matmul(z.as_mut(), Accum::Add, v, c.as_ref(), -1.0, self.par);
    }

    /// Appends the block `X` and its product `Y = C X`, growing `H` and `WᵀW`.
    fn push(&mut self, x: MatRef<'_, f64>, y: MatRef<'_, f64>) {
        let (k, m) = (self.len, x.ncols());
        self.v.as_mut().subcols_mut(k, m).copy_from(x);
        self.w.as_mut().subcols_mut(k, m).copy_from(y);
        let (v, w) = (self.v.as_ref().subcols(0, k + m), self.w.as_ref().subcols(0, k + m));
        let mut hx = Mat::<f64>::zeros(k + m, m);
        matmul(hx.as_mut(), Accum::Replace, v.transpose(), y, 1.0, self.par);
        let mut wy = Mat::<f64>::zeros(k + m, m);
        matmul(wy.as_mut(), Accum::Replace, w.transpose(), y, 1.0, self.par);
        for i in 0..k + m {
            for j in 0..m {
                self.h[(i, k + j)] = hx[(i, j)];
                self.h[(k + j, i)] = hx[(i, j)];
                self.ww[(i, k + j)] = wy[(i, j)];
                self.ww[(k + j, i)] = wy[(i, j)];
            }
        }
        self.len = k + m;
    }

    fn ritz(&self, e: usize) -> Result<Ritz> {
        let k = self.len;
        let h = Mat::from_fn(k, k, |i, j| 0.5 * (self.h[(i, j)] + self.h[(j, i)]));
        let evd = h
            .self_adjoint_eigen(Side::Lower)
            .map_err(|_| Error::NoConvergence { method: "the Rayleigh–Ritz eigendecomposition", at: None })?;
        // faer returns ascending eigenvalues.
        let order: Vec<usize> = (0..k).rev().collect();
        let theta: Vec<f64> = order.iter().map(|&j| evd.S()[j]).collect();
        let coeffs = Mat::<f64>::from_fn(k, k, |r, c| evd.U()[(r, order[c])]);
        let top = theta.first().copied().unwrap_or(0.0).abs().max(f64::MIN_POSITIVE);
        let ww = self.ww.as_ref().submatrix(0, 0, k, k);
        let mut wws = Mat::<f64>::zeros(k, e.min(k));
        matmul(wws.as_mut(), Accum::Replace, ww, coeffs.as_ref().subcols(0, e.min(k)), 1.0, Par::Seq);
        let estimates: Vec<f64> = (0..e.min(k))
            .map(|i| {
                let q: f64 = (0..k).map(|r| coeffs[(r, i)] * wws[(r, i)]).sum();
                (q - theta[i] * theta[i]).max(0.0).sqrt() / top
            })
            .collect();
        let estimated_worst = estimates.iter().copied().fold(0.0, f64::max);
        Ok(Ritz { theta, coeffs, estimates, estimated_worst })
    }

    fn exact(&self, ritz: &Ritz, e: usize) -> Exact {
        let (dim, k) = (self.v.nrows(), self.len);
        let e = e.min(k);
        let s = ritz.coeffs.as_ref().subcols(0, e);
        let mut u = Mat::<f64>::zeros(dim, e);
        matmul(u.as_mut(), Accum::Replace, self.v.as_ref().subcols(0, k), s, 1.0, self.par);
        let mut cu = Mat::<f64>::zeros(dim, e);
        matmul(cu.as_mut(), Accum::Replace, self.w.as_ref().subcols(0, k), s, 1.0, self.par);
        let top = ritz.theta.first().copied().unwrap_or(0.0).abs().max(f64::MIN_POSITIVE);
        let residuals: Vec<f64> = (0..e)
            .map(|j| (0..dim).map(|r| (cu[(r, j)] - ritz.theta[j] * u[(r, j)]).powi(2)).sum::<f64>().sqrt() / top)
            .collect();
        let worst = residuals.iter().copied().fold(0.0, f64::max);
        Exact { theta: ritz.theta[..e].to_vec(), u, residuals, worst }
    }

    /// Keeps the best `keep` Ritz vectors as the basis (`V S`, `W S`: no product) and
    /// returns the residual directions `CU − UΘ` of the `b` top pairs furthest from
    /// converged, to continue from.
    fn restart(&mut self, ritz: &Ritz, keep: usize, b: usize) -> Mat<f64> {
        let (dim, k) = (self.v.nrows(), self.len);
        let s = ritz.coeffs.as_ref().subcols(0, keep);
        let mut v = Mat::<f64>::zeros(dim, keep);
        matmul(v.as_mut(), Accum::Replace, self.v.as_ref().subcols(0, k), s, 1.0, self.par);
        let mut w = Mat::<f64>::zeros(dim, keep);
        matmul(w.as_mut(), Accum::Replace, self.w.as_ref().subcols(0, k), s, 1.0, self.par);
        let ww_old = self.ww.as_ref().submatrix(0, 0, k, k).to_owned();
        let ww = s.transpose() * &ww_old * s;
        let mut worst: Vec<usize> = (0..ritz.estimates.len()).collect();
        worst.sort_by(|&x, &y| ritz.estimates[y].total_cmp(&ritz.estimates[x]));
        let next = Mat::<f64>::from_fn(dim, b.min(worst.len()), |r, c| {
            let j = worst[c];
            w[(r, j)] - ritz.theta[j] * v[(r, j)]
        });
        self.v.as_mut().subcols_mut(0, keep).copy_from(&v);
        self.w.as_mut().subcols_mut(0, keep).copy_from(&w);
        for i in 0..keep {
            for j in 0..keep {
                self.h[(i, j)] = if i == j { ritz.theta[i] } else { 0.0 };
                self.ww[(i, j)] = ww[(i, j)];
            }
        }
        self.len = keep;
        next
    }
}

/// `Z ← Z R⁻¹` with `RᵀR = ZᵀZ` (columns scaled to unit norm first); false when the
/// Cholesky factor does not exist to working precision.
fn cholesky_qr(mut z: faer::MatMut<'_, f64>, par: Par) -> bool {
    for j in 0..z.ncols() {
        let norm = z.as_ref().col(j).norm_l2();
        if !(norm > 0.0 && norm.is_finite()) {
            return false;
        }
        z.as_mut().col_mut(j).iter_mut().for_each(|x| *x /= norm);
    }
    let b = z.ncols();
    let mut g = Mat::<f64>::zeros(b, b);
    matmul(g.as_mut(), Accum::Replace, z.as_ref().transpose(), z.as_ref(), 1.0, par);
    let Ok(llt) = g.llt(Side::Lower) else {
        return false;
    };
    solve_lower_triangular_in_place(llt.L(), z.transpose_mut(), par);
    true
}

/// `‖ZᵀZ − I‖_max ≤ 1e-12·b`.
fn orthonormal(z: MatRef<'_, f64>, par: Par) -> bool {
    let b = z.ncols();
    let mut g = Mat::<f64>::zeros(b, b);
    matmul(g.as_mut(), Accum::Replace, z.transpose(), z, 1.0, par);
    (0..b).all(|i| (0..b).all(|j| (g[(i, j)] - if i == j { 1.0 } else { 0.0 }).abs() <= 1e-12 * b as f64))
}

fn finish(exact: Exact, iterations: usize, trace: f64, dim: usize, e: usize) -> TopEigen {
    let Exact { theta, u, residuals, .. } = exact;
    let e = e.min(u.ncols());
    let mut vectors = vec![0.0; dim * e];
    for k in 0..e {
        let best = (0..dim).fold(0, |m, r| if u[(r, k)].abs() > u[(m, k)].abs() { r } else { m });
        let sign = if u[(best, k)] < 0.0 { -1.0 } else { 1.0 };
        for r in 0..dim {
            vectors[r * e + k] = sign * u[(r, k)];
        }
    }
    TopEigen { values: theta, vectors, residuals, iterations, trace }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::eigh_desc;
    use crate::stats::TILE;

    #[test]
    fn top_pairs_equal_the_dense_decomposition_on_a_matrix_with_a_gap() {
        // D = TILE + 77 (two tile rows); the data span 8 strong directions plus noise.
        let (dim, e) = (TILE + 77, 8);
        let st = crate::solve::cholesky::tests::stats(1200, dim, 1, 11);
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

    #[test]
    fn the_pairs_are_the_same_for_any_thread_count() {
        // Past two tile rows, so the product's column blocks go to several partial sums.
        let (dim, e) = (2 * TILE + 40, 6);
        let st = crate::solve::cholesky::tests::stats(900, dim, 1, 5);
        let one = top_eigen(&st, e, 1e-9, 300, 7, 1).unwrap();
        for threads in [2, 3] {
            let many = top_eigen(&st, e, 1e-9, 300, 7, threads).unwrap();
            assert_eq!((&many.values, &many.vectors), (&one.values, &one.vectors), "threads = {threads}");
        }
    }
}
