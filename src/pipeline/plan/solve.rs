//! The solve side of the plan: which ridge solve runs on the statistics (the path
//! `ridge.solver` names or the cheapest that answers, and for a Cholesky its factor — f64
//! or f32-refined, on a copy or in place), and the [`Refit`] at the λ a selection chooses.
//! Each is a closed value: what it says is what runs.

use serde::Serialize;

use super::{Planner, RidgeSolve, COPY_WHEN_ON_DISK_MAX};
use crate::error::{Error, Result};
use crate::pipeline::check::{Learner, Selection};
use crate::solve::{DirectSolve, Factor, LambdaChoice, PositiveLambda, SolvePath};
use crate::stats::GramStats;

/// The solve at the λ a selection chose, on every row it trained on (held-out selection
/// with refit, or k-fold).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "path", content = "factor", rename_all = "snake_case")]
pub enum Refit {
    /// One Cholesky at the chosen λ, shared by every output (the grid's λ are all > 0).
    Cholesky(Factor),
    /// The tridiagonal form again, the chosen λ read off it.
    Tridiagonal,
    /// The eigendecomposition again, the chosen λ read off it.
    Eigen,
}

impl Refit {
    /// The solve at `lambdas`, one per output.
    pub fn at(self, lambdas: &[f64]) -> Result<RidgeSolve> {
        Ok(match self {
            Refit::Cholesky(factor) => {
                let shared = lambdas.windows(2).all(|w| w[0] == w[1]);
                let lambda =
                    lambdas.first().copied().filter(|_| shared).and_then(PositiveLambda::new).ok_or_else(|| {
                        Error::bug("a Cholesky refit is planned only for one λ > 0 shared by every output")
                    })?;
                RidgeSolve::Direct(DirectSolve::Cholesky { lambda, factor })
            }
            Refit::Tridiagonal => RidgeSolve::Direct(DirectSolve::Tridiagonal),
            Refit::Eigen => RidgeSolve::Eigen,
        })
    }

    /// The refit may consume the statistics it is given.
    pub fn consumes(self) -> bool {
        matches!(self, Refit::Cholesky(f) if f.consumes())
    }

    /// The path named in the model.
    pub fn path(self) -> SolvePath {
        match self {
            Refit::Cholesky(f) => f.path(),
            Refit::Tridiagonal => SolvePath::Tridiagonal,
            Refit::Eigen => SolvePath::Eigen,
        }
    }
}

impl Planner<'_> {
    /// The path `ridge.solver` names, or the cheapest that answers (math.md §13.7):
    /// Cholesky for a fixed λ > 0, tridiagonal for a λ still to choose, eigen with a PCA,
    /// unlabeled rows or λ = 0. `direct`: ridge on all features of the labeled rows.
    pub(super) fn ridge_solve(&self, direct: bool, dim: usize, sets: u64) -> Result<RidgeSolve> {
        let lambda = self.checked.selection.lambda();
        let positive = match lambda {
            LambdaChoice::Fixed(l) => PositiveLambda::new(l),
            LambdaChoice::Gcv { .. } => None,
        };
        let zero = matches!(lambda, LambdaChoice::Fixed(l) if l == 0.0);
        let asked = match &self.checked.learner {
            Learner::Ridge { solver } => *solver,
            Learner::Sparse(_) => SolvePath::Eigen,
        };
        let cholesky = |factor| {
            Ok(RidgeSolve::Direct(DirectSolve::Cholesky {
                lambda: positive.ok_or_else(|| Error::bug("check refuses a named Cholesky without a fixed λ > 0"))?,
                factor,
            }))
        };
        match asked {
            SolvePath::Auto | SolvePath::Dual if !direct || zero => Ok(RidgeSolve::Eigen),
            // ("dual" reaches here only where the dual takes no run: check refuses it.)
            SolvePath::Auto | SolvePath::Dual if positive.is_some() => cholesky(self.auto_factor(dim, sets)),
            SolvePath::Auto | SolvePath::Dual | SolvePath::Tridiagonal => {
                Ok(RidgeSolve::Direct(DirectSolve::Tridiagonal))
            }
            SolvePath::Eigen => Ok(RidgeSolve::Eigen),
            SolvePath::CholeskyF32 => {
                cholesky(self.mixed_where_it_fits(self.cholesky(asked, dim, sets), dim, sets, false))
            }
            SolvePath::Cholesky => cholesky(self.cholesky(asked, dim, sets)),
        }
    }

    /// The one factor `auto` takes for a fixed λ > 0: mixed-precision where it pays and
    /// fits, else the f64 Cholesky.
    pub(super) fn auto_factor(&self, dim: usize, sets: u64) -> Factor {
        let path = if self.f32_factor_pays(dim) { SolvePath::CholeskyF32 } else { SolvePath::Cholesky };
        self.mixed_where_it_fits(self.cholesky(path, dim, sets), dim, sets, true)
    }

    /// `auto` factors in f32 and refines (math.md §13.11) where the run already accepted
    /// an f32 Gram and the factorisation is a cost worth halving: from D = 8192 the f32
    /// factor and its refinement take about half the f64 factor's time to the same
    /// weights, while below it both take about a second (`SECTIONS=solve scripts/bench.sh`).
    pub(super) fn f32_factor_pays(&self, dim: usize) -> bool {
        self.checked.spec().run.gram == crate::stats::Precision::F32 && dim >= 8192
    }

    /// A Cholesky (`path`: either precision) of the statistics of `D` features, `sets`
    /// sets of them held: in place when a copy would not fit beside them, or when they are
    /// on disk and a copy is large.
    pub(super) fn cholesky(&self, path: SolvePath, dim: usize, sets: u64) -> Factor {
        let c = self.facts.outputs;
        let copy = path.bytes(dim, c);
        // Statistics read from parts are in memory already: what the machine has left
        // is what the copy must fit in.
        let stats = if self.opts.from_parts { 0 } else { sets * GramStats::bytes_for(dim, c) };
        let fits = self.limit.is_none_or(|l| stats + copy <= l);
        let in_place = !fits || (self.opts.stats_on_disk && copy > COPY_WHEN_ON_DISK_MAX);
        Factor::of(path, in_place)
    }

    /// The refit after a held-out choice: at a shared λ on all features the factor `auto`
    /// takes for a fixed λ (one Cholesky, mixed-precision where the Gram is f32 and large
    /// and its factor fits), else the first solve's path, which gives any λ.
    pub(super) fn refit(&self, first: RidgeSolve, dim: usize) -> Option<Refit> {
        let Selection::HeldOut { refit: true, per_output } = self.checked.selection else { return None };
        let auto = matches!(self.checked.learner, Learner::Ridge { solver: SolvePath::Auto | SolvePath::Dual });
        Some(match first {
            RidgeSolve::Direct(DirectSolve::Tridiagonal) if auto && !per_output => {
                Refit::Cholesky(self.auto_factor(dim, 2))
            }
            RidgeSolve::Direct(DirectSolve::Tridiagonal) => Refit::Tridiagonal,
            RidgeSolve::Direct(DirectSolve::Cholesky { factor, .. }) => Refit::Cholesky(factor),
            RidgeSolve::Eigen => Refit::Eigen,
        })
    }
}
