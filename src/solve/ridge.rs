//! Which solve path runs (math.md §13.7) and the ridge problem each path leaves behind,
//! ready to give weights for any λ: an explicit eigenbasis, the tridiagonal form, the
//! dual kernel, or weights already solved at a fixed λ.

use serde::{Deserialize, Serialize};

use super::cholesky::{consumed, Keep};
use super::mixed::Refinement;
use super::rotated::{bias_for, GcvCurve, LambdaChoice, RotatedProblem};
use crate::error::{Error, Result};
use crate::stats::{Centered, GramStats, TriGram, TILE};

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
    /// The same at the f32 rate: an f32 factor refined against the f64 statistics
    /// (math.md §13.11), the f64 factor where refinement does not converge.
    #[serde(rename = "cholesky_f32")]
    CholeskyF32,
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
            SolvePath::CholeskyF32 => "cholesky_f32",
            SolvePath::Tridiagonal => "tridiagonal",
            SolvePath::Dual => "dual",
        }
    }

    /// A factorisation of `C + λI` at one fixed λ > 0 (either precision): the same rules
    /// hold for both, and both may consume the statistics' own Gram.
    pub fn is_cholesky(self) -> bool {
        matches!(self, SolvePath::Cholesky | SolvePath::CholeskyF32)
    }

    /// Bytes the path allocates beyond the statistics for `D` features and `c` outputs.
    /// The dual's depend on the rows: `RowStats::solve_bytes`.
    pub fn bytes(self, dim: usize, c: usize) -> u64 {
        match self {
            SolvePath::Cholesky => 8 * (TriGram::len_for(dim) + 2 * dim * c) as u64,
            // The f32 factor is dropped before a fallback copies the Gram in f64: the larger.
            SolvePath::CholeskyF32 => 8 * TriGram::len_for(dim) as u64 + mixed_vectors(dim, c),
            SolvePath::Tridiagonal => crate::solve::tridiag::bytes_for(dim, c),
            SolvePath::Eigen | SolvePath::Auto => 3 * 8 * (dim * dim) as u64,
            SolvePath::Dual => 0,
        }
    }

    /// Bytes a factorisation in place on the statistics still allocates: nothing for the
    /// f64 Cholesky; the f32 factor and the refinement's vectors for `cholesky_f32` (whose
    /// fallback factors the statistics themselves).
    pub fn in_place_bytes(self, dim: usize, c: usize) -> u64 {
        match self {
            SolvePath::CholeskyF32 => 4 * TriGram::len_for(dim) as u64 + mixed_vectors(dim, c),
            _ => 0,
        }
    }
}

impl SolvePath {
    /// Bytes the mixed-precision solve allocates with its f32 factor in the Gram's own
    /// memory (`cholesky_f32`, spilled): the refinement's vectors, one tile row of the
    /// factor mapped before the f64 row it replaces is freed, and the stream's buffers
    /// (the tiles in flight and a read block); a fallback reads the Gram back into the
    /// memory the factor leaves.
    pub fn spilled_bytes(dim: usize, c: usize) -> u64 {
        let in_flight = crate::stats::TILES_IN_FLIGHT + 3;
        mixed_vectors(dim, c) + (4 * TILE * dim + 8 * TILE * TILE * in_flight) as u64 + (2 << 20)
    }
}

/// The refinement's `D × c` matrices: `B`, `W`, the residual and its f32 copy, the
/// product `A W` and its partial sums.
fn mixed_vectors(dim: usize, c: usize) -> u64 {
    (5 * 8 * dim * c) as u64 + super::symmetric::work_bytes(dim, c)
}

/// A ridge problem ready to give weights for any λ, by whichever path built it.
#[derive(Debug)]
pub enum Ridge {
    /// In an explicit eigenbasis (dense path).
    Eigen(RotatedProblem),
    /// In tridiagonal form; `problem` carries `σ_j` and `R̃` (no basis) for the grid and GCV.
    Tridiagonal {
        /// The factorisation.
        form: Box<super::tridiag::Tridiagonal>,
        /// Eigenvalues and rotated right-hand sides.
        problem: RotatedProblem,
    },
    /// On the kernel matrix of the kept rows (GCV; a fixed λ is `Solved`).
    Dual(Box<super::dual::DualRidge>),
    /// Already solved at the fixed λ (Cholesky).
    Solved {
        /// `W`, row-major `D × c`.
        weights: Vec<f64>,
        /// `b`.
        bias: Vec<f64>,
        /// How the mixed-precision refinement ended (`cholesky_f32` only).
        refinement: Option<Refinement>,
    },
}

/// What a direct solve of the statistics leaves: the problem, the spectrum when the path
/// computed one, and the numerical rank when it fell short of `D`.
#[derive(Debug)]
pub struct Direct {
    /// The problem.
    pub ridge: Ridge,
    /// `σ_j`, descending (empty for a Cholesky).
    pub eigenvalues: Vec<f64>,
    /// The numerical rank, when below `D`.
    pub rank: Option<usize>,
}

impl Ridge {
    /// Ridge on all features of `stats` by a direct path (math.md §13.7): one tiled
    /// Cholesky at a fixed λ > 0 — of the statistics' own Gram when `in_place` is given,
    /// which consumes it (after `in_place` has kept the statistics, see [`Keep`]; the
    /// mixed-precision one puts its f32 factor in the Gram's memory when `spill` names
    /// where the f64 Gram goes meanwhile) — or
    /// the tridiagonal form, which gives every λ of the grid. The one place a new path on
    /// the Gram statistics is dispatched.
    pub fn direct(
        stats: &mut GramStats,
        path: SolvePath,
        lambda: LambdaChoice,
        in_place: Option<Keep<'_>>,
        spill: Option<&std::path::Path>,
        threads: usize,
    ) -> Result<Direct> {
        match (path, lambda) {
            (SolvePath::Cholesky, LambdaChoice::Fixed(lambda)) if lambda > 0.0 => {
                let work = consumed(stats, in_place)?;
                let (weights, bias) = super::cholesky::ridge_fixed(stats, work, lambda, threads)?;
                Ok(Direct {
                    ridge: Ridge::Solved { weights, bias, refinement: None },
                    eigenvalues: Vec::new(),
                    rank: None,
                })
            }
            (SolvePath::CholeskyF32, LambdaChoice::Fixed(lambda)) if lambda > 0.0 => {
                let (weights, bias, refinement) = super::mixed::ridge_refined(stats, in_place, spill, lambda, threads)?;
                let ridge = Ridge::Solved { weights, bias, refinement: Some(refinement) };
                Ok(Direct { ridge, eigenvalues: Vec::new(), rank: None })
            }
            (SolvePath::Tridiagonal, _) => {
                let form = super::tridiag::Tridiagonal::new(stats, threads)?;
                let max_g = stats.gram.diagonal().into_iter().fold(0.0, f64::max);
                let lmax = form.sigma.first().copied().unwrap_or(0.0);
                let tau = stats.dim() as f64 * f64::EPSILON * lmax.max(max_g);
                let problem = form.problem(tau);
                let eigenvalues = problem.sigma.clone();
                let rank = eigenvalues.iter().filter(|&&v| v > tau).count();
                let rank = (rank < eigenvalues.len()).then_some(rank);
                Ok(Direct { ridge: Ridge::Tridiagonal { form: Box::new(form), problem }, eigenvalues, rank })
            }
            (SolvePath::Cholesky | SolvePath::CholeskyF32, _) => {
                Err(Error::bug("the Cholesky path is planned only for a fixed λ > 0"))
            }
            _ => Err(Error::bug("only Cholesky and tridiagonal solve on all features directly")),
        }
    }

    /// Outputs `c`.
    pub fn outputs(&self) -> usize {
        match self {
            Ridge::Eigen(p) | Ridge::Tridiagonal { problem: p, .. } => p.c,
            Ridge::Dual(d) => d.problem.c,
            Ridge::Solved { bias, .. } => bias.len(),
        }
    }

    /// How the mixed-precision refinement ended, when that path solved.
    pub fn refinement(&self) -> Option<Refinement> {
        match self {
            Ridge::Solved { refinement, .. } => *refinement,
            _ => None,
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
            Ridge::Eigen(p) | Ridge::Tridiagonal { problem: p, .. } => Some(p.gcv(labeled.weight, &labeled.cyy)),
            Ridge::Dual(d) => Some(d.problem.gcv(labeled.weight, &labeled.cyy)),
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
            Ridge::Solved { weights, bias, .. } => sets.iter().map(|_| (weights.clone(), bias.clone())).collect(),
        }
    }
}
