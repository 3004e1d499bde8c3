//! The dual ridge solve for fewer rows than features (math.md §13.7, `n ≤ D/2`): the
//! mapped rows themselves are kept instead of the Gram, and ridge runs on the `n × n`
//! centred kernel matrix `K_c = Z_c Z_cᵀ`: `α = (K_c + λI)⁻¹ Y_c`, folded to
//! `W = Z_cᵀ α`, `b = ȳ − Wᵀz̄`. The same model as the primal solve on `C = Z_cᵀ Z_c`
//! (push-through identity), at `n²D + n³/3` flops and `nD` f32 of memory where the
//! primal costs `nD² + D³/3` and `D²/2` f64. GCV uses the eigenvalues of `K_c`, which
//! are the non-zero eigenvalues of `C`, and `R̃_j = √σ_j u_jᵀ Y_c`, which are the
//! primal's rotated right-hand sides: the curve is the primal's.
//!
//! This module owns the kept rows ([`RowStats`]) and their solve; which runs take it is
//! decided by the planner (`pipeline/plan.rs`).

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef, Par};

use super::rotated::{bias_for, LambdaChoice, RotatedProblem};
use super::tridiag::Tridiagonal;
use crate::error::{Error, Location, Result};
use crate::stats::{Centered, GramStats, TriGram};

/// Features at a time when the rows are centred and transposed into f64.
const FEATURE_BLOCK: usize = 256;

/// The labeled rows of a run, as mapped: features (f32, as the map gives them) and
/// targets.
#[derive(Debug, Clone, PartialEq)]
pub struct RowStats {
    dim: usize,
    c: usize,
    /// Row-major `n × D`.
    z: Vec<f32>,
    /// Row-major `n × c`.
    y: Vec<f64>,
}

impl RowStats {
    /// No rows yet, for `D` features and `c` targets, with room for `rows` (the rows
    /// are counted before the pass: growing by doubling would hold up to three times
    /// their memory while the vector moves).
    pub fn new(dim: usize, c: usize, rows: usize) -> RowStats {
        RowStats { dim, c, z: Vec::with_capacity(rows * dim), y: Vec::with_capacity(rows * c) }
    }

    /// Features `D`.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Targets `c`.
    pub fn outputs(&self) -> usize {
        self.c
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.z.len() / self.dim.max(1)
    }

    /// Bytes the kept rows of `n` rows take (the figure stated before a run).
    pub fn bytes_for(rows: u64, dim: usize, c: usize) -> u64 {
        rows * (4 * dim as u64 + 8 * c as u64)
    }

    /// Bytes the solve allocates beyond the rows: the kernel triangle, and with GCV the
    /// dense `n × n` of the tridiagonal reduction.
    pub fn solve_bytes(rows: u64, c: usize, gcv: bool) -> u64 {
        let n = rows as usize;
        let dense = if gcv { super::tridiag::bytes_for(n, c) } else { 0 };
        8 * (TriGram::len_for(n) + FEATURE_BLOCK * n) as u64 + dense
    }

    /// Appends `rows` rows. A non-finite feature is an error, never kept.
    pub fn add(&mut self, z: &[f32], y: &[f64], rows: usize) -> Result<()> {
        let z = &z[..rows * self.dim];
        if let Some(at) = z.iter().position(|v| !v.is_finite()) {
            let value = f64::from(z[at]);
            return Err(Error::BadFeature { row: at / self.dim, feature: at % self.dim, value, too_large: false });
        }
        self.z.extend_from_slice(z);
        self.y.extend_from_slice(&y[..rows * self.c]);
        Ok(())
    }

    fn means(&self) -> (Vec<f64>, Vec<f64>) {
        let (n, dim, c) = (self.rows(), self.dim, self.c);
        let inv = 1.0 / n.max(1) as f64;
        let mut mean = vec![0.0; dim];
        for row in self.z.chunks_exact(dim) {
            mean.iter_mut().zip(row).for_each(|(m, &v)| *m += f64::from(v));
        }
        mean.iter_mut().for_each(|m| *m *= inv);
        let mut ymean = vec![0.0; c];
        for row in self.y.chunks_exact(c.max(1)) {
            ymean.iter_mut().zip(row).for_each(|(m, &v)| *m += v);
        }
        ymean.iter_mut().for_each(|m| *m *= inv);
        (mean, ymean)
    }

    /// Features `f0..f1` of every row, centred, as a row-major f64 `(f1 − f0) × n`.
    fn centred_block(&self, mean: &[f64], f0: usize, f1: usize) -> Vec<f64> {
        let n = self.rows();
        let mut out = vec![0.0; (f1 - f0) * n];
        for (r, row) in self.z.chunks_exact(self.dim).enumerate() {
            for (f, &v) in row[f0..f1].iter().enumerate() {
                out[f * n + r] = f64::from(v) - mean[f0 + f];
            }
        }
        out
    }

    /// Solves ridge in the dual. `max_g_diag` and the rank threshold are those of the
    /// primal (over features), so the GCV curve is the primal's.
    pub fn solve(&self, lambda: &LambdaChoice, threads: usize) -> Result<DualSolve> {
        let (n, dim, c) = (self.rows(), self.dim, self.c);
        if n < 2 {
            return Err(Error::data(Location::default(), format!("{n} labeled row(s); at least 2 are needed")));
        }
        if c == 0 {
            return Err(Error::bug("a dual solve without targets"));
        }
        let (mean, ymean) = self.means();
        let yc: Vec<f64> = self.y.chunks_exact(c).flat_map(|row| row.iter().zip(&ymean).map(|(v, m)| v - m)).collect();
        // K_c = Σ over feature blocks of B_fᵀ B_f (B_f: the block's centred features,
        // features × rows); C_zy and the diagonal of C on the way.
        let mut kernel = TriGram::zeros(n);
        let mut czy = vec![0.0; dim * c];
        let mut max_g_diag = 0.0f64;
        for f0 in (0..dim).step_by(FEATURE_BLOCK) {
            let f1 = (f0 + FEATURE_BLOCK).min(dim);
            let block = self.centred_block(&mean, f0, f1);
            let view = ndarray::ArrayView2::from_shape((f1 - f0, n), &block)
                .map_err(|e| Error::bug_from("a dual block has its shape", e))?;
            kernel.syrk(view, threads);
            for (f, col) in block.chunks_exact(n).enumerate() {
                max_g_diag = max_g_diag.max(col.iter().map(|v| v * v).sum());
                for k in 0..c {
                    czy[(f0 + f) * c + k] = col.iter().zip(yc.iter().skip(k).step_by(c)).map(|(a, b)| a * b).sum();
                }
            }
        }
        let cyy = (0..c).map(|k| yc.iter().skip(k).step_by(c).map(|v| v * v).sum()).collect();
        let labeled = Centered { n: n as u64, weight: n as f64, mean, cov: Vec::new(), czy, ymean, cyy, max_g_diag };
        // The kernel problem as statistics of n "features" with nothing to centre:
        // the Cholesky and tridiagonal paths solve (K_c + λI) α = Y_c as they are.
        let mut stats = GramStats {
            shift: vec![0.0; n],
            n: n as u64,
            weight: n as f64,
            s: vec![0.0; n],
            gram: kernel,
            c,
            t: yc,
            u: vec![0.0; c],
            v: vec![0.0; c],
        };
        match lambda {
            LambdaChoice::Fixed(l) if *l > 0.0 => {
                let work = std::mem::replace(&mut stats.gram, TriGram::zeros(0));
                let (alpha, _) = super::cholesky::ridge_fixed(&stats, work, *l, threads)?;
                let weights = self.fold(&labeled.mean, &alpha, threads);
                let bias = bias_for(&weights, c, &labeled);
                Ok(DualSolve { labeled, kernel: DualKernel::Solved { weights, bias } })
            }
            LambdaChoice::Fixed(_) => Err(Error::bug("the dual solve reached with λ = 0")),
            LambdaChoice::Gcv { .. } => {
                let form = Tridiagonal::new(&stats, threads)?;
                let lmax = form.sigma.first().copied().unwrap_or(0.0);
                let tau = dim as f64 * f64::EPSILON * lmax.max(max_g_diag);
                // The primal's spectrum: C's non-zero eigenvalues are K_c's, the other
                // D − n are zero; R̃_j = v_jᵀ C_zy = √σ_j u_jᵀ Y_c.
                let mut sigma = vec![0.0; dim];
                let mut rt = vec![0.0; dim * c];
                for (j, &s) in form.sigma.iter().enumerate().take(dim) {
                    sigma[j] = s;
                    for k in 0..c {
                        rt[j * c + k] = s.max(0.0).sqrt() * form.rt[j * c + k];
                    }
                }
                let problem = RotatedProblem { basis: Vec::new(), k: dim, sigma, rt, c, tau };
                Ok(DualSolve { labeled, kernel: DualKernel::Gcv { form: Box::new(form), problem } })
            }
        }
    }

    /// `W = Z_cᵀ α` (row-major `D × c`) for `α` row-major `n × c`.
    fn fold(&self, mean: &[f64], alpha: &[f64], threads: usize) -> Vec<f64> {
        let (n, dim, c) = (self.rows(), self.dim, self.c);
        let par = if threads > 1 { Par::rayon(threads) } else { Par::Seq };
        let a = MatRef::from_row_major_slice(alpha, n, c);
        let mut w = vec![0.0; dim * c];
        for f0 in (0..dim).step_by(FEATURE_BLOCK) {
            let f1 = (f0 + FEATURE_BLOCK).min(dim);
            let block = self.centred_block(mean, f0, f1);
            let b = MatRef::from_row_major_slice(&block, f1 - f0, n);
            let mut out = Mat::<f64>::zeros(f1 - f0, c);
            matmul(out.as_mut(), Accum::Replace, b, a, 1.0, par);
            for f in 0..f1 - f0 {
                for k in 0..c {
                    w[(f0 + f) * c + k] = out[(f, k)];
                }
            }
        }
        w
    }
}

/// A dual solve: the moments of the rows, and the weights or what gives them.
#[derive(Debug)]
pub struct DualSolve {
    /// `n`, `z̄`, `ȳ`, `C_zy`, `c_yy` of the rows (no dense covariance).
    pub labeled: Centered,
    /// The kernel problem.
    pub kernel: DualKernel,
}

/// The kernel problem, solved at a fixed λ or ready for any λ on the grid.
#[derive(Debug)]
pub enum DualKernel {
    /// Solved at the fixed λ by one Cholesky of `K_c + λI`.
    Solved {
        /// `W`, row-major `D × c`.
        weights: Vec<f64>,
        /// `b`.
        bias: Vec<f64>,
    },
    /// `K_c` in tridiagonal form with the primal's spectrum and rotated right-hand sides.
    Gcv {
        /// The reduction of `K_c` (its weights are `α`).
        form: Box<Tridiagonal>,
        /// `σ_j` and `R̃` as the primal has them (`D` of them, the last `D − n` zero).
        problem: RotatedProblem,
    },
}

/// A dual problem with the rows it folds through: what `Ridge::Dual` holds.
#[derive(Debug)]
pub struct DualRidge {
    /// The kept rows.
    pub rows: RowStats,
    /// The reduction of `K_c`.
    pub form: Box<Tridiagonal>,
    /// `σ_j`, `R̃` as the primal has them.
    pub problem: RotatedProblem,
    /// Threads for the fold.
    pub threads: usize,
}

impl DualRidge {
    /// `(W, b)` for each set of per-output λ > 0.
    pub fn weights(&self, sets: &[Vec<f64>], labeled: &Centered) -> Vec<(Vec<f64>, Vec<f64>)> {
        self.form
            .weights_many(sets)
            .into_iter()
            .map(|alpha| {
                let w = self.rows.fold(&labeled.mean, &alpha, self.threads);
                let b = bias_for(&w, self.problem.c, labeled);
                (w, b)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::{Components, Pca};

    /// `n` rows of `D` features shifted away from 0 with `c` targets.
    fn rows(n: usize, dim: usize, c: usize, seed: u64) -> (RowStats, GramStats) {
        let mut r = crate::rng::StageRng::new(seed, 4);
        let z: Vec<f32> = (0..n * dim).map(|_| (r.normal() * 0.5 + 3.0) as f32).collect();
        let y: Vec<f64> = (0..n * c).map(|_| r.normal()).collect();
        let mut kept = RowStats::new(dim, c, n);
        kept.add(&z, &y, n).unwrap();
        let mut st = GramStats::new(vec![3.0; dim], c);
        st.add(&z, &y, n, 1).unwrap();
        (kept, st)
    }

    fn rel(a: &[f64], b: &[f64]) -> f64 {
        let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum::<f64>().sqrt();
        num / b.iter().map(|y| y * y).sum::<f64>().sqrt()
    }

    #[test]
    fn a_fixed_lambda_gives_the_primal_weights() {
        for (n, dim, threads) in [(37, 300, 1), (90, 700, 2)] {
            let (kept, st) = rows(n, dim, 3, 5);
            let dual = kept.solve(&LambdaChoice::Fixed(0.3), threads).unwrap();
            let DualKernel::Solved { weights, bias } = dual.kernel else { panic!("not solved") };
            let (w, b) = crate::solve::cholesky::ridge_fixed(&st, st.gram.clone(), 0.3, 1).unwrap();
            assert!(rel(&weights, &w) < 1e-8, "weights {}", rel(&weights, &w));
            assert!(rel(&bias, &b) < 1e-8, "bias {}", rel(&bias, &b));
        }
    }

    #[test]
    fn gcv_curve_and_weights_equal_the_dense_primal() {
        let (n, dim, c) = (60, 400, 2);
        let (kept, st) = rows(n, dim, c, 7);
        let dual = kept.solve(&LambdaChoice::Gcv { per_output: true }, 2).unwrap();
        let DualKernel::Gcv { problem, .. } = &dual.kernel else { panic!("no GCV form") };
        let got = problem.gcv(dual.labeled.weight, &dual.labeled.cyy);
        let cl = st.centered();
        let pca = Pca::fit(&cl, Components::All).unwrap();
        let primal = RotatedProblem::new(&pca, &cl, true, false).unwrap();
        let want = primal.gcv(cl.weight, &cl.cyy);
        assert!(rel(&got.grid, &want.grid) < 1e-10);
        for i in 0..want.grid.len() {
            // At the grid's smallest λ, df ≈ n and GCV is 0/0 in both: compare the rest.
            if want.df[i] < n as f64 - 1.0 {
                assert!((got.df[i] - want.df[i]).abs() < 1e-8 * want.df[i], "df at {i}");
                assert!(rel(&got.per_output[i], &want.per_output[i]) < 1e-8, "GCV at {i}");
            }
        }
        assert_eq!(got.chosen_per_output, want.chosen_per_output);
        let lambdas: Vec<f64> = got.chosen_per_output.iter().map(|&i| got.grid[i]).collect();
        let DualKernel::Gcv { form, problem } = dual.kernel else { panic!("no GCV form") };
        let ridge = DualRidge { rows: kept, form, problem, threads: 2 };
        let (w, b) = ridge.weights(std::slice::from_ref(&lambdas), &dual.labeled).remove(0);
        let (w0, b0) = primal.fold(&primal.coefficients(&lambdas), &cl);
        assert!(rel(&w, &w0) < 1e-8, "weights {}", rel(&w, &w0));
        assert!(rel(&b, &b0) < 1e-8, "bias {}", rel(&b, &b0));
    }

    #[test]
    fn a_non_finite_feature_is_refused_with_its_row() {
        let mut kept = RowStats::new(3, 1, 0);
        let err = kept.add(&[1.0, 2.0, 3.0, 4.0, f32::NAN, 6.0], &[0.0, 1.0], 2).unwrap_err();
        assert!(err.to_string().contains("row 1"), "{err}");
        assert_eq!(kept.rows(), 0);
    }
}
