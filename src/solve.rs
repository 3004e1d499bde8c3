//! Solvers on statistics alone (math.md §13): RF-PCA, ridge with an unpenalised
//! intercept for all outputs at once, the λ grid scored by generalised
//! cross-validation, and folding into `f(x) = Wᵀz(x) + b`.

use faer::{Mat, Side};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::stats::Centered;

/// How many principal components to keep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Components {
    /// No PCA: ridge on all `D` features (`Ū = I`).
    All,
    /// The top `E`.
    Fixed(usize),
    /// The smallest `E` whose eigenvalues reach this share of the total.
    Share(f64),
}

/// The 41-point λ grid `σ̄·10^{-8+i/4}`, `i = 0..40`, for the mean eigenvalue `σ̄` of
/// the centred scatter (GCV, validation and k-fold all score this grid).
pub fn lambda_grid(sigma_bar: f64) -> Vec<f64> {
    (0..=40).map(|i| sigma_bar * 10f64.powf(-8.0 + i as f64 / 4.0)).collect()
}

/// How λ is chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LambdaChoice {
    /// One fixed λ ≥ 0 for every output.
    Fixed(f64),
    /// The GCV argmin over the grid `σ̄·10^{-8+i/4}`, `i = 0..40`; shared over outputs
    /// or one per output.
    Gcv {
        /// One λ per output instead of a shared one.
        per_output: bool,
    },
}

impl LambdaChoice {
    /// λ per output for `c` outputs: the fixed value, or the GCV argmin (shared or per
    /// output) of `curve`. `None` when GCV is asked and there is no curve.
    pub fn pick(&self, curve: Option<&GcvCurve>, c: usize) -> Option<Vec<f64>> {
        match (self, curve) {
            (LambdaChoice::Fixed(l), _) => Some(vec![*l; c]),
            (LambdaChoice::Gcv { per_output: true }, Some(g)) => {
                Some(g.chosen_per_output.iter().map(|&i| g.grid[i]).collect())
            }
            (LambdaChoice::Gcv { .. }, Some(g)) => Some(vec![g.grid[g.chosen_shared]; c]),
            (LambdaChoice::Gcv { .. }, None) => None,
        }
    }
}

/// The RF-PCA of a covariance.
#[derive(Debug, Clone)]
pub struct Pca {
    /// All `D` eigenvalues, descending, negatives clamped to 0.
    pub eigenvalues: Vec<f64>,
    /// Numerical rank threshold `τ = D ε max(λ_max, max G_ii)`.
    pub tau: f64,
    /// Components kept, `E_eff ≤ E`.
    pub e_eff: usize,
    /// Components asked for.
    pub e_requested: usize,
    /// `Ū`, row-major `D × E_eff`, each column sign-fixed (largest-magnitude entry positive).
    pub basis: Vec<f64>,
    /// Eigenvectors of all `D` eigenvalues (row-major `D × D`), kept for the no-PCA solve.
    all_vectors: Vec<f64>,
    /// Warnings (rank below E, non-unique subspace).
    pub warnings: Vec<String>,
    /// Per kept pair, `‖Cu − θu‖ / θ_max` when the pairs came from block Krylov
    /// (empty for the dense decomposition, exact to rounding).
    pub residuals: Vec<f64>,
    /// `tr C` (the total variance), whichever path ran.
    pub trace: f64,
    /// Block products run (0 for the dense decomposition).
    pub iterations: usize,
}

/// Eigendecomposition of a symmetric row-major `n × n` matrix: eigenvalues descending
/// and eigenvectors as columns of a row-major matrix, each column sign-fixed.
pub fn eigh_desc(a: &[f64], n: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    if n == 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let m = Mat::<f64>::from_fn(n, n, |i, j| 0.5 * (a[i * n + j] + a[j * n + i]));
    let evd = m
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| Error::Numerical(format!("eigendecomposition did not converge: {e:?}")))?;
    let (u, s) = (evd.U(), evd.S());
    let mut values = Vec::with_capacity(n);
    let mut vectors = vec![0.0; n * n];
    for (out_col, col) in (0..n).rev().enumerate() {
        values.push(s[col]);
        let mut best = 0usize;
        for i in 0..n {
            if u[(i, col)].abs() > u[(best, col)].abs() {
                best = i;
            }
        }
        let sign = if u[(best, col)] < 0.0 { -1.0 } else { 1.0 };
        for i in 0..n {
            vectors[i * n + out_col] = sign * u[(i, col)];
        }
    }
    Ok((values, vectors))
}

impl Pca {
    /// PCA of the centred covariance `stats.cov`.
    pub fn fit(stats: &Centered, components: Components) -> Result<Pca> {
        let dim = stats.mean.len();
        let (mut values, vectors) = eigh_desc(&stats.cov, dim)?;
        values.iter_mut().for_each(|v| *v = v.max(0.0));
        let lmax = values.first().copied().unwrap_or(0.0);
        let tau = dim as f64 * f64::EPSILON * lmax.max(stats.max_g_diag);
        let rank = values.iter().filter(|&&v| v > tau).count();
        let e_requested = match components {
            Components::All => dim,
            Components::Fixed(e) => e.min(dim),
            Components::Share(rho) => {
                let total: f64 = values.iter().sum();
                let mut acc = 0.0;
                let mut e = dim;
                for (j, v) in values.iter().enumerate() {
                    acc += v;
                    if acc >= rho * total {
                        e = j + 1;
                        break;
                    }
                }
                e
            }
        };
        let mut warnings = Vec::new();
        let e_eff = match components {
            Components::All => dim,
            _ => e_requested.min(rank),
        };
        if !matches!(components, Components::All) {
            if e_eff < e_requested {
                warnings.push(format!(
                    "the covariance has numerical rank {rank}: keeping {e_eff} components, not {e_requested}"
                ));
            }
            if e_eff > 0 && e_eff < dim && values[e_eff - 1] - values[e_eff] <= 1e-10 * lmax {
                warnings.push(format!(
                    "eigenvalues {} and {} are equal to 1e-10: the {e_eff}-dimensional subspace is not unique",
                    e_eff - 1,
                    e_eff
                ));
            }
        }
        let basis = (0..dim).flat_map(|i| vectors[i * dim..i * dim + e_eff].to_vec()).collect();
        let trace = values.iter().sum();
        Ok(Pca {
            eigenvalues: values,
            tau,
            e_eff,
            e_requested,
            basis,
            all_vectors: vectors,
            warnings,
            residuals: Vec::new(),
            trace,
            iterations: 0,
        })
    }

    /// The top `e` components by block Krylov on the tiled Gram (no dense
    /// `D × D`); `eigenvalues` then holds only those `e`. Pairs whose residual stays
    /// above `tol` after `max_iter` block products are reported in `warnings`.
    pub fn fit_top(stats: &crate::stats::GramStats, e: usize, tol: f64, seed: u64, threads: usize) -> Result<Pca> {
        let dim = stats.dim();
        let top = crate::subspace::top_eigen(stats, e, tol, 500, seed, threads)?;
        let values: Vec<f64> = top.values.iter().map(|v| v.max(0.0)).collect();
        let lmax = values.first().copied().unwrap_or(0.0);
        let max_g = stats.gram.diagonal().into_iter().fold(0.0, f64::max);
        let tau = dim as f64 * f64::EPSILON * lmax.max(max_g);
        let rank = values.iter().filter(|&&v| v > tau).count();
        let e_eff = rank.min(e);
        let mut warnings = Vec::new();
        if e_eff < e {
            warnings.push(format!("the covariance has numerical rank {rank}: keeping {e_eff} components, not {e}"));
        }
        let worst = top.residuals.iter().copied().fold(0.0, f64::max);
        if worst > tol {
            warnings.push(format!(
                "block Krylov stopped after {} block products with a residual of {worst:.2e} (tolerance {tol:.0e})",
                top.iterations
            ));
        }
        let basis = (0..dim).flat_map(|i| top.vectors[i * e..i * e + e_eff].to_vec()).collect();
        Ok(Pca {
            eigenvalues: values,
            tau,
            e_eff,
            e_requested: e,
            basis,
            all_vectors: Vec::new(),
            warnings,
            residuals: top.residuals[..e_eff].to_vec(),
            trace: top.trace,
            iterations: top.iterations,
        })
    }
}

/// The GCV curve over the λ grid (math.md §13.6).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GcvCurve {
    /// `σ̄`, the mean of the `σ_j`.
    #[serde(with = "crate::model::json_f64::one")]
    pub sigma_bar: f64,
    /// The 41 λ values.
    #[serde(with = "crate::model::json_f64::vec")]
    pub grid: Vec<f64>,
    /// `df(λ)`.
    #[serde(with = "crate::model::json_f64::vec")]
    pub df: Vec<f64>,
    /// `RSS_k(λ)`, `grid × c`.
    #[serde(with = "crate::model::json_f64::vec2")]
    pub rss: Vec<Vec<f64>>,
    /// Shared GCV score per λ.
    #[serde(with = "crate::model::json_f64::vec")]
    pub shared: Vec<f64>,
    /// Per-output GCV score, `grid × c`.
    #[serde(with = "crate::model::json_f64::vec2")]
    pub per_output: Vec<Vec<f64>>,
    /// Argmin of the shared score (ties: larger λ).
    pub chosen_shared: usize,
    /// Argmin per output.
    pub chosen_per_output: Vec<usize>,
}

/// A ridge problem in a rotated basis: `σ_j`, `R̃ = Bᵀ C_zy` and the basis `B` itself.
#[derive(Debug, Clone)]
pub struct RotatedProblem {
    /// Columns of the basis in feature space, row-major `D × k`.
    pub basis: Vec<f64>,
    /// `k`.
    pub k: usize,
    /// `σ_j`.
    pub sigma: Vec<f64>,
    /// `R̃`, row-major `k × c`.
    pub rt: Vec<f64>,
    /// Outputs `c`.
    pub c: usize,
    /// Rank threshold.
    pub tau: f64,
}

/// The fitted ridge, folded to feature space.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RidgeFit {
    /// `W`, row-major `D × c`.
    pub weights: Vec<f64>,
    /// `b`.
    pub bias: Vec<f64>,
    /// λ of each output.
    pub lambdas: Vec<f64>,
    /// The GCV curve, when λ was chosen by GCV (or asked for).
    pub gcv: Option<GcvCurve>,
}

/// `C = Aᵀ B` for row-major `A: n × p`, `B: n × q`.
#[allow(clippy::expect_used)] // Invariant: callers pass slices of exactly n × p and n × q.
fn at_b(a: &[f64], b: &[f64], n: usize, p: usize, q: usize) -> Vec<f64> {
    let a = ndarray::ArrayView2::from_shape((n, p), a).expect("shape");
    let b = ndarray::ArrayView2::from_shape((n, q), b).expect("shape");
    a.t().dot(&b).iter().copied().collect()
}

/// `C = A B` for row-major `A: n × p`, `B: p × q`.
#[allow(clippy::expect_used)] // Invariant: callers pass slices of exactly n × p and p × q.
fn a_b(a: &[f64], b: &[f64], n: usize, p: usize, q: usize) -> Vec<f64> {
    let a = ndarray::ArrayView2::from_shape((n, p), a).expect("shape");
    let b = ndarray::ArrayView2::from_shape((p, q), b).expect("shape");
    a.dot(&b).iter().copied().collect()
}

impl RotatedProblem {
    /// Builds the ridge problem on the PCA features of `labeled` (math.md §13.2).
    /// `same_rows` says the PCA was fitted on these very statistics (`A = L`), so
    /// `S = Λ_E` is diagonal and no second eigendecomposition is needed.
    pub fn new(pca: &Pca, labeled: &Centered, same_rows: bool, use_pca: bool) -> Result<Self> {
        let dim = labeled.mean.len();
        let c = labeled.cyy.len();
        let (ubar, e) = if use_pca { (&pca.basis, pca.e_eff) } else { (&pca.all_vectors, dim) };
        let r = at_b(ubar, &labeled.czy, dim, e, c);
        if same_rows {
            return Ok(RotatedProblem {
                basis: ubar.clone(),
                k: e,
                sigma: pca.eigenvalues[..e].to_vec(),
                rt: r,
                c,
                tau: pca.tau,
            });
        }
        // S = Ūᵀ C_L Ū, then rotate by its eigenvectors V: basis ŪV, R̃ = Vᵀ R.
        let cu = a_b(&labeled.cov, ubar, dim, dim, e);
        let s = at_b(ubar, &cu, dim, e, e);
        let (mut sigma, v) = eigh_desc(&s, e)?;
        sigma.iter_mut().for_each(|x| *x = x.max(0.0));
        Ok(RotatedProblem { basis: a_b(ubar, &v, dim, e, e), k: e, sigma, rt: at_b(&v, &r, e, e, c), c, tau: pca.tau })
    }

    /// The λ grid `σ̄·10^{-8+i/4}`.
    pub fn grid(&self) -> (f64, Vec<f64>) {
        let sigma_bar = if self.k == 0 { 0.0 } else { self.sigma.iter().sum::<f64>() / self.k as f64 };
        (sigma_bar, lambda_grid(sigma_bar))
    }

    /// GCV scores over the grid (stable form) for `n` labeled rows with `c_yy`.
    pub fn gcv(&self, n: u64, cyy: &[f64]) -> GcvCurve {
        let (sigma_bar, grid) = self.grid();
        let n = n as f64;
        let c = self.c;
        let keep: Vec<bool> = self.sigma.iter().map(|&s| s > self.tau).collect();
        let lsq: Vec<f64> = (0..c)
            .map(|k| {
                let fit: f64 =
                    (0..self.k).filter(|&j| keep[j]).map(|j| self.rt[j * c + k].powi(2) / self.sigma[j]).sum();
                (cyy[k] - fit).max(0.0)
            })
            .collect();
        let mut df = Vec::new();
        let mut rss = Vec::new();
        let mut shared = Vec::new();
        let mut per_output = Vec::new();
        for &lam in &grid {
            // Eigenvalues at or below the rank threshold are zero in the RSS above, so in
            // tr H too: left in, their rounding noise moved df at the grid's smallest λ.
            let dfl = 1.0
                + self
                    .sigma
                    .iter()
                    .zip(&keep)
                    .map(|(&s, &kept)| if kept && s + lam > 0.0 { s / (s + lam) } else { 0.0 })
                    .sum::<f64>();
            let r: Vec<f64> = (0..c)
                .map(|k| {
                    lsq[k]
                        + (0..self.k)
                            .filter(|&j| keep[j])
                            .map(|j| {
                                let s = self.sigma[j];
                                self.rt[j * c + k].powi(2) * lam * lam / (s * (s + lam).powi(2))
                            })
                            .sum::<f64>()
                })
                .collect();
            let denom = (1.0 - dfl / n).powi(2);
            let score = |x: f64| {
                if dfl >= n {
                    f64::INFINITY
                } else {
                    x / n / denom
                }
            };
            shared.push(score(r.iter().sum()));
            per_output.push(r.iter().map(|&x| score(x)).collect::<Vec<_>>());
            df.push(dfl);
            rss.push(r);
        }
        let argmin = |f: &dyn Fn(usize) -> f64| {
            let mut best = 0;
            for i in 1..grid.len() {
                if f(i) <= f(best) {
                    best = i;
                }
            }
            best
        };
        let chosen_shared = argmin(&|i| shared[i]);
        let chosen_per_output = (0..c).map(|k| argmin(&|i| per_output[i][k])).collect();
        GcvCurve { sigma_bar, grid, df, rss, shared, per_output, chosen_shared, chosen_per_output }
    }

    /// Coefficients in the rotated basis for per-output λ (`k × c`); λ = 0 uses the
    /// pseudo-inverse on `σ_j > τ`.
    pub fn coefficients(&self, lambdas: &[f64]) -> Vec<f64> {
        let c = self.c;
        let mut w = vec![0.0; self.k * c];
        for j in 0..self.k {
            for k in 0..c {
                let (s, lam) = (self.sigma[j], lambdas[k]);
                w[j * c + k] = if lam == 0.0 {
                    if s > self.tau {
                        self.rt[j * c + k] / s
                    } else {
                        0.0
                    }
                } else {
                    self.rt[j * c + k] / (s + lam)
                };
            }
        }
        w
    }

    /// Folds rotated coefficients into `W = B w` and `b = ȳ − Wᵀ z̄_L`.
    pub fn fold(&self, w: &[f64], labeled: &Centered) -> (Vec<f64>, Vec<f64>) {
        let dim = labeled.mean.len();
        let weights = a_b(&self.basis, w, dim, self.k, self.c);
        let bias = (0..self.c)
            .map(|k| labeled.ymean[k] - (0..dim).map(|i| weights[i * self.c + k] * labeled.mean[i]).sum::<f64>())
            .collect();
        (weights, bias)
    }

    /// Ridge with λ chosen as asked.
    pub fn solve(&self, labeled: &Centered, lambda: &LambdaChoice) -> RidgeFit {
        let c = self.c;
        let gcv = matches!(lambda, LambdaChoice::Gcv { .. }).then(|| self.gcv(labeled.n, &labeled.cyy));
        let lambdas = lambda.pick(gcv.as_ref(), c).unwrap_or_default();
        let w = self.coefficients(&lambdas);
        let (weights, bias) = self.fold(&w, labeled);
        RidgeFit { weights, bias, lambdas, gcv }
    }
}

/// Which solve path runs (math.md §13.7); `auto` picks the cheapest that answers the
/// pipeline's question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SolvePath {
    /// Cholesky for a fixed λ > 0 without PCA, tridiagonal for λ still to choose without
    /// PCA, the dense eigendecomposition otherwise.
    #[default]
    Auto,
    /// Full dense eigendecomposition (PCA, unlabeled rows, λ = 0's pseudo-inverse).
    Eigen,
    /// One tiled Cholesky of `C + λI` at a fixed λ > 0.
    Cholesky,
    /// Tridiagonal reduction with rotated right-hand sides (GCV, validation).
    Tridiagonal,
    /// The rows kept instead of the Gram and ridge solved on the `n × n` kernel matrix
    /// (at most `D/2` rows, λ fixed > 0 or by GCV, no PCA; `dual.rs`).
    Dual,
}

impl SolvePath {
    /// The name stored in the model and printed.
    pub fn name(self) -> &'static str {
        match self {
            SolvePath::Auto => "auto",
            SolvePath::Eigen => "eigen",
            SolvePath::Cholesky => "cholesky",
            SolvePath::Tridiagonal => "tridiagonal",
            SolvePath::Dual => "dual",
        }
    }
}

/// A ridge problem ready to give weights for any λ, by whichever path built it.
#[derive(Debug)]
pub enum Ridge {
    /// In an explicit eigenbasis (dense path).
    Eigen(RotatedProblem),
    /// In tridiagonal form; `problem` carries `σ_j` and `R̃` (no basis) for the grid and GCV.
    Tridiagonal {
        /// The factorisation.
        form: Box<crate::tridiag::Tridiagonal>,
        /// Eigenvalues and rotated right-hand sides.
        problem: RotatedProblem,
    },
    /// On the kernel matrix of the kept rows (GCV; a fixed λ is `Solved`).
    Dual(Box<crate::dual::DualRidge>),
    /// Already solved at the fixed λ (Cholesky).
    Solved {
        /// `W`, row-major `D × c`.
        weights: Vec<f64>,
        /// `b`.
        bias: Vec<f64>,
    },
}

impl Ridge {
    /// Outputs `c`.
    pub fn outputs(&self) -> usize {
        match self {
            Ridge::Eigen(p) | Ridge::Tridiagonal { problem: p, .. } => p.c,
            Ridge::Dual(d) => d.problem.c,
            Ridge::Solved { bias, .. } => bias.len(),
        }
    }

    /// The spectrum when the path computed one (`σ_j`, descending).
    pub fn eigenvalues(&self) -> Option<&[f64]> {
        match self {
            Ridge::Tridiagonal { problem, .. } => Some(&problem.sigma),
            Ridge::Dual(d) => Some(&d.problem.sigma),
            _ => None,
        }
    }

    /// The λ grid `σ̄·10^{-8+i/4}` (empty when λ was fixed).
    pub fn grid(&self) -> Vec<f64> {
        match self {
            Ridge::Eigen(p) | Ridge::Tridiagonal { problem: p, .. } => p.grid().1,
            Ridge::Dual(d) => d.problem.grid().1,
            Ridge::Solved { .. } => Vec::new(),
        }
    }

    /// The GCV curve (none when λ was fixed).
    pub fn gcv(&self, labeled: &Centered) -> Option<GcvCurve> {
        match self {
            Ridge::Eigen(p) | Ridge::Tridiagonal { problem: p, .. } => Some(p.gcv(labeled.n, &labeled.cyy)),
            Ridge::Dual(d) => Some(d.problem.gcv(labeled.n, &labeled.cyy)),
            Ridge::Solved { .. } => None,
        }
    }

    /// `(W, b)` in the solved feature space for each set of per-output λ.
    pub fn weights(&self, sets: &[Vec<f64>], labeled: &Centered) -> Vec<(Vec<f64>, Vec<f64>)> {
        match self {
            Ridge::Eigen(p) => sets.iter().map(|l| p.fold(&p.coefficients(l), labeled)).collect(),
            Ridge::Tridiagonal { form, problem } => form
                .weights_many(sets)
                .into_iter()
                .map(|w| {
                    let b = bias_for(&w, problem.c, labeled);
                    (w, b)
                })
                .collect(),
            Ridge::Dual(d) => d.weights(sets, labeled),
            Ridge::Solved { weights, bias } => sets.iter().map(|_| (weights.clone(), bias.clone())).collect(),
        }
    }
}

/// `b = ȳ − Wᵀ z̄` for row-major `W` (`D × c`).
pub fn bias_for(weights: &[f64], c: usize, labeled: &Centered) -> Vec<f64> {
    (0..c)
        .map(|k| labeled.ymean[k] - labeled.mean.iter().enumerate().map(|(i, m)| weights[i * c + k] * m).sum::<f64>())
        .collect()
}
