//! RF-PCA (math.md §13.1): the dense eigendecomposition of a centred covariance, or its
//! top `E` pairs by block Krylov, and how many components to keep.

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
    pub(crate) all_vectors: Vec<f64>,
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
        .map_err(|_| Error::NoConvergence { method: "the dense eigendecomposition", at: None })?;
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
        let top = super::krylov::top_eigen(stats, e, tol, 500, seed, threads)?;
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
