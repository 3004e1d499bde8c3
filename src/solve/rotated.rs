//! The ridge problem in a rotated basis (math.md §13.2–13.6): `σ_j` and `R̃ = Bᵀ C_zy`,
//! the λ grid and how λ is chosen on it, the GCV curve, the coefficients at any λ and
//! their fold back to feature space `f(x) = Wᵀz(x) + b`. Every path that reaches an
//! eigenbasis (dense, tridiagonal, dual) ends here.

use serde::{Deserialize, Serialize};

use super::eigen::{eigh_desc, Pca};
use crate::error::Result;
use crate::stats::Centered;

/// The 41-point λ grid `σ̄·10^{-8+i/4}`, `i = 0..40`, for the mean eigenvalue `σ̄` of
/// the centred scatter (GCV, validation and k-fold all score this grid).
pub fn lambda_grid(sigma_bar: f64) -> Vec<f64> {
    // A zero spectrum (every feature constant) has no scale; any λ > 0 gives its weights,
    // all zero, and keeps every λ of the grid one a Cholesky can factor at.
    let scale = if sigma_bar > 0.0 && sigma_bar.is_finite() { sigma_bar } else { 1.0 };
    (0..=40).map(|i| scale * 10f64.powf(-8.0 + i as f64 / 4.0)).collect()
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

/// The GCV curve over the λ grid (math.md §13.6).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GcvCurve {
    /// `σ̄`, the mean of the `σ_j`.
    #[serde(with = "crate::container::json_f64::one")]
    pub sigma_bar: f64,
    /// The 41 λ values.
    #[serde(with = "crate::container::json_f64::vec")]
    pub grid: Vec<f64>,
    /// `df(λ)`.
    #[serde(with = "crate::container::json_f64::vec")]
    pub df: Vec<f64>,
    /// `RSS_k(λ)`, `grid × c`.
    #[serde(with = "crate::container::json_f64::vec2")]
    pub rss: Vec<Vec<f64>>,
    /// Shared GCV score per λ.
    #[serde(with = "crate::container::json_f64::vec")]
    pub shared: Vec<f64>,
    /// Per-output GCV score, `grid × c`.
    #[serde(with = "crate::container::json_f64::vec2")]
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

    /// GCV scores over the grid (stable form) for labeled rows of total weight `n` (their
    /// count when unweighted) with `c_yy`.
    pub fn gcv(&self, n: f64, cyy: &[f64]) -> GcvCurve {
        let (sigma_bar, grid) = self.grid();
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
        let gcv = matches!(lambda, LambdaChoice::Gcv { .. }).then(|| self.gcv(labeled.weight, &labeled.cyy));
        let lambdas = lambda.pick(gcv.as_ref(), c).unwrap_or_default();
        let w = self.coefficients(&lambdas);
        let (weights, bias) = self.fold(&w, labeled);
        RidgeFit { weights, bias, lambdas, gcv }
    }
}

/// `b = ȳ − Wᵀ z̄` for row-major `W` (`D × c`).
pub fn bias_for(weights: &[f64], c: usize, labeled: &Centered) -> Vec<f64> {
    (0..c)
        .map(|k| labeled.ymean[k] - labeled.mean.iter().enumerate().map(|(i, m)| weights[i * c + k] * m).sum::<f64>())
        .collect()
}
