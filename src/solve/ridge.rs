//! Which solve path runs (math.md §13.7) and the ridge problem each path leaves behind,
//! ready to give weights for any λ: an explicit eigenbasis, the tridiagonal form, the
//! dual kernel, or weights already solved at a fixed λ.

use serde::{Deserialize, Serialize};

use super::cholesky::consumed;
use super::lease::Lease;
use super::mixed::{MixedMemory, Refinement};
use super::rotated::{bias_for, GcvCurve, RotatedProblem};
use crate::error::Result;
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

/// How a fixed-λ Cholesky factors and where it works. Every value is a solve that runs:
/// which precision, and whether the statistics' own Gram is consumed (through the
/// [`Lease`]) or a copy factored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Factor {
    /// f64, on a copy of the Gram.
    Copy,
    /// f64, on the statistics' own Gram.
    InPlace,
    /// An f32 factor beside the statistics, refined against them (math.md §13.11); a
    /// fallback factors a copy in f64.
    Mixed,
    /// The same, but a fallback factors the statistics' own Gram.
    MixedInPlace,
    /// The f32 factor in the Gram's own memory, the Gram streamed back from where the
    /// lease spilled it for each refinement step (and read back by a fallback).
    MixedSpilled,
}

impl Factor {
    /// The path named in the model and the report.
    pub fn path(self) -> SolvePath {
        match self {
            Factor::Copy | Factor::InPlace => SolvePath::Cholesky,
            _ => SolvePath::CholeskyF32,
        }
    }

    /// The factor of `path` (either Cholesky), in place or on a copy.
    pub fn of(path: SolvePath, in_place: bool) -> Factor {
        match (path, in_place) {
            (SolvePath::CholeskyF32, false) => Factor::Mixed,
            (SolvePath::CholeskyF32, true) => Factor::MixedInPlace,
            (_, false) => Factor::Copy,
            (_, true) => Factor::InPlace,
        }
    }

    /// The solve may consume the statistics' own Gram.
    pub fn consumes(self) -> bool {
        !matches!(self, Factor::Copy | Factor::Mixed)
    }

    /// The f32 factor takes the Gram's memory, the Gram spilled meanwhile.
    pub fn spills(self) -> bool {
        self == Factor::MixedSpilled
    }

    /// Bytes the factor allocates beyond the statistics for `D` features and `c` outputs.
    pub fn bytes(self, dim: usize, c: usize) -> u64 {
        match self {
            Factor::Copy | Factor::Mixed => self.path().bytes(dim, c),
            Factor::InPlace | Factor::MixedInPlace => self.path().in_place_bytes(dim, c),
            Factor::MixedSpilled => SolvePath::spilled_bytes(dim, c),
        }
    }
}

/// A ridge parameter λ > 0 and finite: what a Cholesky of `C + λI` needs.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(into = "f64")]
pub struct PositiveLambda(f64);

impl<'de> Deserialize<'de> for PositiveLambda {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<PositiveLambda, D::Error> {
        let v = f64::deserialize(d)?;
        PositiveLambda::new(v).ok_or_else(|| serde::de::Error::custom(format!("λ = {v} is not a finite value above 0")))
    }
}

impl PositiveLambda {
    /// `λ` where it is finite and positive.
    pub fn new(lambda: f64) -> Option<PositiveLambda> {
        (lambda.is_finite() && lambda > 0.0).then_some(PositiveLambda(lambda))
    }

    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl From<PositiveLambda> for f64 {
    fn from(l: PositiveLambda) -> f64 {
        l.0
    }
}

/// A solve of ridge on all features of the statistics, straight from their Gram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DirectSolve {
    /// One tiled Cholesky of `C + λI`.
    Cholesky {
        /// λ.
        lambda: PositiveLambda,
        /// Its precision and memory.
        factor: Factor,
    },
    /// The tridiagonal form, which gives every λ of the grid.
    Tridiagonal,
}

impl DirectSolve {
    /// The path named in the model and the report.
    pub fn path(self) -> SolvePath {
        match self {
            DirectSolve::Cholesky { factor, .. } => factor.path(),
            DirectSolve::Tridiagonal => SolvePath::Tridiagonal,
        }
    }

    /// The solve may consume the statistics' own Gram.
    pub fn consumes(self) -> bool {
        matches!(self, DirectSolve::Cholesky { factor, .. } if factor.consumes())
    }
}

/// How ridge is solved on Gram statistics, as the planner decides it and the model
/// records it. Every value is a solve that runs: a Cholesky carries its λ > 0 and where
/// it works.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(from = "Stored", into = "Stored")]
pub enum RidgeSolve {
    /// On all features, straight from the Gram (Cholesky or tridiagonal).
    Direct(DirectSolve),
    /// The dense eigendecomposition (PCA, unlabeled rows, λ = 0's pseudo-inverse).
    Eigen,
}

impl RidgeSolve {
    /// The path named in the model and the memory line.
    pub fn path(self) -> SolvePath {
        match self {
            RidgeSolve::Direct(d) => d.path(),
            RidgeSolve::Eigen => SolvePath::Eigen,
        }
    }

    /// The Cholesky's factor (none for another path).
    pub fn factor(self) -> Option<Factor> {
        match self {
            RidgeSolve::Direct(DirectSolve::Cholesky { factor, .. }) => Some(factor),
            _ => None,
        }
    }

    /// The solve factors the statistics it is given, consuming them.
    pub fn consumes(self) -> bool {
        self.factor().is_some_and(Factor::consumes)
    }

    /// The solve's f32 factor takes the Gram's memory, the Gram spilled meanwhile.
    pub fn spills(self) -> bool {
        self.factor().is_some_and(Factor::spills)
    }
}

/// A [`RidgeSolve`] as the report and the model header store it: the path, and a
/// Cholesky's λ and factor.
#[derive(Clone, Copy, Serialize, Deserialize)]
#[serde(tag = "path", rename_all = "snake_case")]
enum Stored {
    Cholesky { lambda: PositiveLambda, factor: Factor },
    Tridiagonal,
    Eigen,
}

impl From<RidgeSolve> for Stored {
    fn from(s: RidgeSolve) -> Stored {
        match s {
            RidgeSolve::Direct(DirectSolve::Cholesky { lambda, factor }) => Stored::Cholesky { lambda, factor },
            RidgeSolve::Direct(DirectSolve::Tridiagonal) => Stored::Tridiagonal,
            RidgeSolve::Eigen => Stored::Eigen,
        }
    }
}

impl From<Stored> for RidgeSolve {
    fn from(s: Stored) -> RidgeSolve {
        match s {
            Stored::Cholesky { lambda, factor } => RidgeSolve::Direct(DirectSolve::Cholesky { lambda, factor }),
            Stored::Tridiagonal => RidgeSolve::Direct(DirectSolve::Tridiagonal),
            Stored::Eigen => RidgeSolve::Eigen,
        }
    }
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
    /// Ridge on all features of `stats` by `solve` (math.md §13.7): one tiled Cholesky at
    /// its λ — of the statistics' own Gram where its factor consumes them, after `lease`
    /// has kept them; for the f32 factor in the Gram's memory, the Gram streamed back from
    /// where `lease` spilled it — or the tridiagonal form, which gives every λ of the grid.
    /// The one place a new path on the Gram statistics is dispatched.
    pub fn direct(stats: &mut GramStats, solve: DirectSolve, lease: &mut dyn Lease, threads: usize) -> Result<Direct> {
        match solve {
            DirectSolve::Cholesky { lambda, factor: factor @ (Factor::Copy | Factor::InPlace) } => {
                let work = consumed(stats, factor.consumes().then_some(lease))?;
                let (weights, bias) = super::cholesky::ridge_fixed(stats, work, lambda.get(), threads)?;
                Ok(Direct {
                    ridge: Ridge::Solved { weights, bias, refinement: None },
                    eigenvalues: Vec::new(),
                    rank: None,
                })
            }
            DirectSolve::Cholesky { lambda, factor } => {
                let memory = match factor {
                    Factor::MixedSpilled => MixedMemory::Spilled,
                    Factor::MixedInPlace => MixedMemory::InPlace,
                    _ => MixedMemory::Copy,
                };
                let (weights, bias, refinement) =
                    super::mixed::ridge_refined(stats, memory, lease, lambda.get(), threads)?;
                let ridge = Ridge::Solved { weights, bias, refinement: Some(refinement) };
                Ok(Direct { ridge, eigenvalues: Vec::new(), rank: None })
            }
            DirectSolve::Tridiagonal => {
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
