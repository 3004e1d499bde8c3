//! Ridge when λ is still to be chosen, without eigenvectors (math.md §13.7): the
//! centred covariance is reduced to tridiagonal form `C = Q T Qᵀ` (Householder
//! reflectors kept in place of the matrix), the `c` right-hand sides are rotated by `Qᵀ`,
//! and an implicit QL iteration on `T` yields the eigenvalues `σ_j` while applying its
//! rotations to those `c` vectors only, which gives `R̃ = Vᵀ Qᵀ C_zy` — all GCV needs.
//! Weights at any λ (one per output, or a whole grid for validation) are then one
//! tridiagonal solve per column and one application of `Q`: `W = Q (T + λI)⁻¹ Qᵀ C_zy`.
//!
//! The reduction is two-stage (dense → band by GEMM-rich block updates, band →
//! tridiagonal by bulge chasing; `band.rs`), so it runs at the matrix product's rate
//! rather than the memory's.
//!
//! Cost: `4D³/3 + 6D²b` for the reduction, `O(D² c)` for the rest; memory one dense
//! `D × D` and `D × 6b` beside it.

use faer::{Mat, Par};

use super::band::{default_band, work_bytes, TwoStage};
use super::rotated::RotatedProblem;
use crate::error::{Error, Result};
use crate::stats::{tile_range, GramStats};

/// The tridiagonal form of a centred covariance with its rotated right-hand sides.
#[derive(Debug)]
pub struct Tridiagonal {
    /// `C = Q T Qᵀ`: `T` and the reflectors of `Q` (two-stage, see `band.rs`).
    form: TwoStage,
    /// `Qᵀ C_zy`, column-major `D × c`.
    rotated_rhs: Mat<f64>,
    /// Eigenvalues of `C`, descending, negatives clamped to 0.
    pub sigma: Vec<f64>,
    /// `R̃ = Vᵀ Qᵀ C_zy` in the order of `sigma`, row-major `D × c`.
    pub rt: Vec<f64>,
    threads: usize,
}

/// Bytes the tridiagonal path allocates beyond the statistics for `D`, `c`.
pub fn bytes_for(dim: usize, c: usize) -> u64 {
    // The 41 weight sets of a validation grid are laid out twice while `Q` applies.
    8 * (dim * dim + 4 * dim * c.max(1) + 2 * 41 * dim * c) as u64 + work_bytes(dim, default_band(dim))
}

impl Tridiagonal {
    /// Reduces the centred covariance of `stats` (`G − ssᵀ/n`) and rotates `C_zy`.
    pub fn new(stats: &GramStats, threads: usize) -> Result<Tridiagonal> {
        Self::with_band(stats, threads, default_band(stats.dim()))
    }

    /// [`Tridiagonal::new`] with the two-stage reduction's band half-width.
    fn with_band(stats: &GramStats, threads: usize, band: usize) -> Result<Tridiagonal> {
        let (dim, c) = (stats.dim(), stats.c);
        let inv = stats.inv_weight();
        let mut a = Mat::<f64>::zeros(dim, dim);
        for (i, j, block) in stats.gram.tiles() {
            let (ri, rj) = (tile_range(dim, i), tile_range(dim, j));
            let hj = rj.len();
            for (x, r) in ri.clone().enumerate() {
                for (y, col) in rj.clone().enumerate() {
                    if col <= r {
                        a[(r, col)] = block[x * hj + y] - stats.s[r] * stats.s[col] * inv;
                    }
                }
            }
        }
        let mut rhs = Mat::<f64>::from_fn(dim, c, |i, k| stats.t[i * c + k] - stats.s[i] * stats.u[k] * inv);
        let threads = threads.max(1);
        let par = if threads > 1 { Par::rayon(threads) } else { Par::Seq };
        let form = TwoStage::reduce(a, band, rhs.as_mut(), par);
        if form.diag.iter().chain(&form.offdiag).any(|v| !v.is_finite()) {
            return Err(Error::NonFinite { what: "covariance".into() });
        }
        let mut values = form.diag.clone();
        let mut sub = form.offdiag.clone();
        let mut b: Vec<f64> = (0..dim).flat_map(|i| (0..c).map(move |k| (i, k))).map(|(i, k)| rhs[(i, k)]).collect();
        implicit_ql(&mut values, &mut sub, &mut b, c)
            .map_err(|at| Error::NoConvergence { method: "the tridiagonal eigenvalue iteration", at: Some(at) })?;
        let mut order: Vec<usize> = (0..dim).collect();
        order.sort_by(|&x, &y| values[y].total_cmp(&values[x]));
        let sigma = order.iter().map(|&j| values[j].max(0.0)).collect();
        let rt = order.iter().flat_map(|&j| b[j * c..(j + 1) * c].to_vec()).collect();
        Ok(Tridiagonal { form, rotated_rhs: rhs, sigma, rt, threads })
    }

    /// The problem in the eigenbasis without its basis: enough for the λ grid and GCV.
    pub fn problem(&self, tau: f64) -> RotatedProblem {
        RotatedProblem {
            basis: Vec::new(),
            k: self.sigma.len(),
            sigma: self.sigma.clone(),
            rt: self.rt.clone(),
            c: self.rotated_rhs.ncols(),
            tau,
        }
    }

    /// `W` (row-major `D × c`) for one λ > 0 per output.
    pub fn weights(&self, lambdas: &[f64]) -> Vec<f64> {
        self.weights_many(&[lambdas.to_vec()]).remove(0)
    }

    /// `W` for several λ vectors at once (one `Q` application for all of them).
    pub fn weights_many(&self, sets: &[Vec<f64>]) -> Vec<Vec<f64>> {
        let (diag, offdiag) = (&self.form.diag, &self.form.offdiag);
        let dim = diag.len();
        let c = self.rotated_rhs.ncols();
        let cols = sets.len() * c;
        let mut x = Mat::<f64>::zeros(dim, cols);
        for (s, lambdas) in sets.iter().enumerate() {
            for (k, &lambda) in lambdas.iter().enumerate().take(c) {
                let col = s * c + k;
                let mut r: Vec<f64> = (0..dim).map(|i| self.rotated_rhs[(i, k)]).collect();
                tridiagonal_solve(diag, offdiag, lambda, &mut r);
                for (i, v) in r.into_iter().enumerate() {
                    x[(i, col)] = v;
                }
            }
        }
        self.form.apply_q(x.as_mut(), self.threads);
        (0..sets.len())
            .map(|s| (0..dim).flat_map(|i| (0..c).map(move |k| (i, k))).map(|(i, k)| x[(i, s * c + k)]).collect())
            .collect()
    }
}

/// Solves `(T + λI) x = r` in place for a symmetric tridiagonal `T` by `LDLᵀ` (no
/// pivoting is needed: `T + λI` is positive definite for λ > 0 and `T ⪰ 0`). A pivot
/// that vanishes (λ = 0 on a singular `T`) leaves that component at 0, the
/// minimum-norm choice.
fn tridiagonal_solve(d: &[f64], e: &[f64], lambda: f64, r: &mut [f64]) {
    let n = d.len();
    if n == 0 {
        return;
    }
    let mut piv = vec![0.0; n];
    let mut l = vec![0.0; n];
    piv[0] = d[0] + lambda;
    for i in 1..n {
        l[i - 1] = if piv[i - 1] != 0.0 { e[i - 1] / piv[i - 1] } else { 0.0 };
        piv[i] = d[i] + lambda - l[i - 1] * e[i - 1];
    }
    for i in 1..n {
        r[i] -= l[i - 1] * r[i - 1];
    }
    for i in 0..n {
        r[i] = if piv[i] != 0.0 { r[i] / piv[i] } else { 0.0 };
    }
    for i in (0..n - 1).rev() {
        r[i] -= l[i] * r[i + 1];
    }
}

/// Eigenvalues of the symmetric tridiagonal matrix (`d`, `e` with `e[i] = T[i+1, i]`) by
/// implicit QL with Wilkinson shifts, applying each plane rotation to the rows of the
/// row-major `n × c` block `b` so that it ends as `Vᵀ b`. Fails with the index of an
/// eigenvalue that does not converge in 60 sweeps.
fn implicit_ql(d: &mut [f64], e: &mut [f64], b: &mut [f64], c: usize) -> std::result::Result<(), usize> {
    let n = d.len();
    // Deflating a subdiagonal below ε‖T‖ is a backward-stable perturbation; without this
    // absolute floor the zero eigenvalues of a rank-deficient C never converge.
    let norm = (0..n).map(|i| d[i].abs() + 2.0 * e[i].abs()).fold(0.0, f64::max);
    let floor = f64::EPSILON * norm;
    for l in 0..n {
        let mut sweeps = 0;
        loop {
            let mut m = l;
            while m + 1 < n {
                let dd = d[m].abs() + d[m + 1].abs();
                if e[m].abs() <= f64::EPSILON * dd || e[m].abs() <= floor {
                    break;
                }
                m += 1;
            }
            if m == l {
                break;
            }
            sweeps += 1;
            if sweeps > 60 {
                return Err(l);
            }
            let mut g = (d[l + 1] - d[l]) / (2.0 * e[l]);
            let mut r = g.hypot(1.0);
            g = d[m] - d[l] + e[l] / (g + r.copysign(g));
            let (mut s, mut co, mut p) = (1.0f64, 1.0f64, 0.0f64);
            let mut i = m;
            let mut deflated = false;
            while i > l {
                i -= 1;
                let f = s * e[i];
                let bb = co * e[i];
                r = f.hypot(g);
                e[i + 1] = r;
                if r == 0.0 {
                    d[i + 1] -= p;
                    e[m] = 0.0;
                    deflated = true;
                    break;
                }
                s = f / r;
                co = g / r;
                g = d[i + 1] - p;
                r = (d[i] - g) * s + 2.0 * co * bb;
                p = s * r;
                d[i + 1] = g + p;
                g = co * r - bb;
                let (lo, hi) = b.split_at_mut((i + 1) * c);
                for (x, y) in lo[i * c..].iter_mut().zip(&mut hi[..c]) {
                    let (xv, yv) = (*x, *y);
                    *y = s * xv + co * yv;
                    *x = co * xv - s * yv;
                }
            }
            if deflated {
                continue;
            }
            d[l] -= p;
            e[l] = g;
            e[m] = 0.0;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implicit_ql_finds_the_spectrum_of_a_known_tridiagonal() {
        // The (2, −1) second-difference matrix: σ_j = 2 − 2cos(jπ/(n+1)).
        let n = 50;
        let mut d = vec![2.0; n];
        let mut e = vec![-1.0; n];
        e[n - 1] = 0.0;
        let mut b = vec![0.0; n];
        b[0] = 1.0;
        implicit_ql(&mut d, &mut e, &mut b, 1).unwrap();
        let mut got = d.clone();
        got.sort_by(f64::total_cmp);
        for (j, g) in got.iter().enumerate() {
            let want = 2.0 - 2.0 * (((j + 1) as f64) * std::f64::consts::PI / (n as f64 + 1.0)).cos();
            assert!((g - want).abs() < 1e-12, "{g} vs {want}");
        }
        // Vᵀ e₀ keeps the norm of e₀.
        assert!((b.iter().map(|v| v * v).sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn implicit_ql_converges_on_a_rank_deficient_matrix() {
        // T = v vᵀ restricted to a tridiagonal: a rank-one block and a zero block whose
        // couplings are at rounding level, as a rank-deficient covariance gives.
        let n = 40;
        let mut d: Vec<f64> = (0..n).map(|i| if i < 2 { 1.0 } else { 1e-17 * i as f64 }).collect();
        let mut e: Vec<f64> = (0..n).map(|i| if i == 0 { 1.0 } else { 3e-18 }).collect();
        e[n - 1] = 0.0;
        let mut b = vec![1.0; n];
        implicit_ql(&mut d, &mut e, &mut b, 1).unwrap();
        d.sort_by(f64::total_cmp);
        assert!((d[n - 1] - 2.0).abs() < 1e-14 && d[0].abs() < 1e-14);
    }

    #[test]
    fn tridiagonal_solve_inverts_t_plus_lambda() {
        let d = [3.0, 2.5, 4.0, 1.5];
        let e = [0.5, -1.0, 0.25, 0.0];
        let x = [1.0, -2.0, 0.5, 3.0];
        let lam = 0.3;
        let mut r: Vec<f64> = (0..4)
            .map(|i| {
                let mut v = (d[i] + lam) * x[i];
                if i > 0 {
                    v += e[i - 1] * x[i - 1];
                }
                if i + 1 < 4 {
                    v += e[i] * x[i + 1];
                }
                v
            })
            .collect();
        tridiagonal_solve(&d, &e, lam, &mut r);
        for (a, b) in r.iter().zip(&x) {
            assert!((a - b).abs() < 1e-13);
        }
    }
}

#[cfg(test)]
mod against_dense {
    use super::*;
    use crate::solve::cholesky::tests::stats;
    use crate::solve::{Components, Pca, RotatedProblem};

    fn rel(a: &[f64], b: &[f64]) -> f64 {
        let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale
    }

    #[test]
    fn gcv_curve_and_weights_equal_the_dense_eigen_path() {
        let (dim, c) = (300, 4);
        // Full rank, and fewer rows than features (rank 119: most reflectors vanish).
        for rows in [700, 120] {
            let st = stats(rows, dim, c, 8);
            check_against_dense(&st, c);
        }
    }

    fn check_against_dense(st: &GramStats, c: usize) {
        let dim = st.dim();
        let cl = st.centered();
        let pca = Pca::fit(&cl, Components::All).unwrap();
        let dense = RotatedProblem::new(&pca, &cl, true, false).unwrap();
        // Bands: several stage-one panels, the default, and none (stage two alone).
        for band in [7, 32, dim] {
            let form = Tridiagonal::with_band(st, 2, band).unwrap();
            assert!(rel(&form.sigma, &pca.eigenvalues) < 1e-10);
            let fast = form.problem(pca.tau);
            let (a, b) = (fast.gcv(cl.weight, &cl.cyy), dense.gcv(cl.weight, &cl.cyy));
            assert!(rel(&a.grid, &b.grid) < 1e-12);
            assert!(rel(&a.df, &b.df) < 1e-10);
            // Where df comes within one of n (rows ≈ rank, λ → 0) GCV is 0/0 and its
            // digits are rounding; elsewhere the curves agree.
            let n = cl.weight;
            let sound: Vec<usize> = (0..a.df.len()).filter(|&i| b.df[i] < n - 1.0).collect();
            let pick = |v: &[f64]| sound.iter().map(|&i| v[i]).collect::<Vec<f64>>();
            let (ca, cb) = (pick(&a.shared), pick(&b.shared));
            assert!(sound.len() >= 20 && rel(&ca, &cb) < 1e-8, "GCV curves differ by {}", rel(&ca, &cb));
            assert_eq!(a.chosen_shared, b.chosen_shared);
            assert_eq!(a.chosen_per_output, b.chosen_per_output);
            // Per-output λ, and the whole grid at once (the validation path).
            let lo = sound[0].max(10);
            let lambdas = [b.grid[lo], b.grid[lo.max(20)], b.grid[25], b.grid[30]];
            let (want, _) = dense.fold(&dense.coefficients(&lambdas), &cl);
            let got = form.weights(&lambdas);
            assert!(rel(&got, &want) < 1e-8, "weights differ by {}", rel(&got, &want));
            let sets: Vec<Vec<f64>> = b.grid.iter().map(|&l| vec![l; c]).collect();
            for (set, w) in sets.iter().zip(form.weights_many(&sets)).skip(sound[0].max(8)) {
                let (want, _) = dense.fold(&dense.coefficients(set), &cl);
                assert!(rel(&w, &want) < 1e-7, "λ = {}: {}", set[0], rel(&w, &want));
            }
        }
    }
}
