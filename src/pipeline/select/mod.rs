//! One selection interface. A family of fits ([`Fits`]: ridge at every λ of a grid, the
//! sparse learner's λ₁ path, the kernel candidates) is settled by a [`Select`]: a fixed
//! value or GCV from the spectrum (`spectrum`), scores on held-out files (`held_out`),
//! scores of every training row by its own fold's models (`kfold`), or the best of scored
//! candidates (`candidates`). Each returns a [`Choice`]; the solve that asked refits at it
//! where the choice says so, and the model is assembled from the result.

mod candidates;
mod held_out;
mod kfold;
mod spectrum;

use crate::metrics::{best_index, Metric, SetScores};
use crate::model::ValidationTable;
use crate::pipeline::check::Selection;
use crate::pipeline::projection::StagePca;
use crate::pipeline::solve_ctx::SolveCtx;
use crate::solve::GcvCurve;
use crate::stats::GramStats;
use crate::Result;

pub(crate) use candidates::Best;
pub(crate) use held_out::{chunk_truth, HeldOut};
pub(crate) use kfold::{grid_of, KFoldScores};
pub(crate) use spectrum::{Fixed, Gcv};

/// The solved space a family's weights live in: its per-stage projections (two passes)
/// and the labeled means the weights are centred on.
pub(crate) struct Space<'a> {
    /// Per-stage projections (two passes), or none (the features themselves).
    pub pcas: Option<&'a [StagePca]>,
    /// The labeled rows' mean in the solved space.
    pub mean: &'a [f64],
    /// The labeled rows' mean targets.
    pub ymean: &'a [f64],
    /// The shift of the training statistics (what a refit's held-out statistics take).
    pub shift: &'a [f64],
}

/// A family of fits indexed by a grid of values, in order.
pub(crate) trait Fits {
    /// The grid (λ ascending, or λ₁ descending along a path).
    fn grid(&self) -> Vec<f64>;
    /// Outputs `c`.
    fn outputs(&self) -> usize;
    /// `(W, b)` in the solved space for each set of per-output grid values.
    fn weights(&self, sets: &[Vec<f64>]) -> Vec<(Vec<f64>, Vec<f64>)>;
    /// The GCV curve, when the family has a spectrum.
    fn gcv(&self) -> Option<GcvCurve>;
    /// The space the weights live in.
    fn space(&self) -> Space<'_>;
}

/// What a selection settled.
#[derive(Debug, Clone, Default)]
pub(crate) struct Choice {
    /// The value per output.
    pub values: Vec<f64>,
    /// Its index in the grid (the shared value's).
    pub index: usize,
    /// The scores of the grid, when held-out rows scored it.
    pub table: Option<ValidationTable>,
    /// The held-out rows' statistics, when the solve is to be refitted with them.
    pub held_out: Option<GramStats>,
    /// The held-out score at the choice.
    pub score: Option<f64>,
}

/// One way of settling a family of fits.
pub(crate) trait Select {
    /// Scores the family as the method does and chooses.
    fn select(&mut self, fits: &dyn Fits, ctx: &mut SolveCtx<'_>) -> Result<Choice>;
}

/// The selection of ridge's λ a pipeline asks for (k-fold is the fold statistics' own).
pub(crate) fn for_ridge(selection: Selection, metric: Metric) -> Box<dyn Select> {
    match selection {
        Selection::Fixed(l) => Box::new(Fixed(l)),
        Selection::Gcv { per_output } => Box::new(Gcv { per_output }),
        Selection::KFold { .. } => Box::new(Gcv { per_output: false }),
        Selection::HeldOut { per_output, refit } => Box::new(HeldOut { metric, per_output, refit, ties_later: true }),
    }
}

/// The index the scores choose, by the metric's direction and tie rule, and the values
/// per output (`per_output`: each output's own best RMSE, ties to the later).
pub(crate) fn choose(scores: &SetScores, metric: Metric, ties_later: bool) -> (usize, Vec<f64>) {
    let score = scores.score(metric);
    (best_index(&score, metric.higher_is_better(), ties_later), score)
}

/// Each output's best grid index by its own RMSE (ties to the later: the larger λ).
pub(crate) fn per_output_best(rmse: &[Vec<f64>], c: usize) -> Vec<usize> {
    (0..c)
        .map(|j| {
            let col: Vec<f64> = rmse.iter().map(|r| r[j]).collect();
            best_index(&col, false, true)
        })
        .collect()
}
