//! What every solve and selection sees ([`SolveCtx`]: the checked pipeline, the maps, the
//! labels, the training rows for k-fold's stream, the threads and the report) and what it
//! settles ([`Solution`]: the numbers of the model and the header fields the solve
//! decides). The model is assembled from a solution once, in `assemble`.

use crate::model::{CandidateTable, Projection, ProjectionInfo, SparseTable, ValidationTable};
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::keep::Keeper;
use crate::pipeline::prepare::{FittedMap, Labels};
use crate::pipeline::report::Reporter;
use crate::solve::GcvCurve;
use crate::solve::Refinement;
use crate::source::Dataset;

/// What a solve works with.
pub(crate) struct SolveCtx<'a> {
    /// The run's session (validation files are read through it).
    pub session: &'a crate::session::Session,
    /// The pipeline (for a candidate, its own).
    pub checked: &'a CheckedPipeline,
    /// Every map of the run (one, or one per candidate).
    pub maps: &'a [FittedMap],
    /// Which of them this solve's statistics came from.
    pub candidate: usize,
    /// Classes, code and features.
    pub labels: &'a Labels,
    /// The training rows, when a solve streams them again (k-fold scoring).
    pub training: Option<&'a Dataset>,
    /// The row groups of `training` the statistics hold, where they are not all of them
    /// (parts solved with `--allow-partial`): k-fold scoring streams only these.
    pub training_units: Option<&'a [crate::source::Unit]>,
    /// Worker threads.
    pub threads: usize,
    /// The precision of the Gram products the plan chose (held-out and fold statistics
    /// made during the solve take it too).
    pub gram: crate::stats::Precision,
    /// The report.
    pub report: &'a mut Reporter,
    /// Keeps the run's pass state (its checkpoint) just before a solve consumes or
    /// spills any of it (none: nothing keeps it).
    pub keeper: Option<&'a Keeper<'a>>,
}

impl<'a> SolveCtx<'a> {
    /// The map this solve's statistics came from.
    pub fn map(&self) -> &'a FittedMap {
        &self.maps[self.candidate.min(self.maps.len().saturating_sub(1))]
    }
}

/// The header fields a solve settles.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settled {
    /// Components kept.
    pub components: usize,
    /// Components asked for.
    pub components_requested: usize,
    /// λ per output.
    pub lambdas: Vec<f64>,
    /// The GCV curve.
    pub gcv: Option<GcvCurve>,
    /// Labeled rows solved on.
    pub rows: u64,
    /// Unlabeled rows in the PCA.
    pub unlabeled_rows: u64,
    /// Held-out scores of the λ grid.
    pub validation: Option<ValidationTable>,
    /// The solve path or learner.
    pub solver: String,
    /// The ridge solve on Gram statistics that gave the weights (none: the dual's, a
    /// sparse learner's).
    pub solve: Option<crate::solve::RidgeSolve>,
    /// How the mixed-precision refinement ended (`cholesky_f32`).
    pub refinement: Option<Refinement>,
    /// The sparse learner's path.
    pub sparse: Option<SparseTable>,
    /// The candidates' scores.
    pub candidates: Option<CandidateTable>,
}

/// The numbers of a model, and what the solve settled.
#[derive(Debug, Clone)]
pub(crate) struct Solution {
    /// `W`, row-major `D × c`.
    pub weights: Vec<f64>,
    /// `b`.
    pub bias: Vec<f64>,
    /// Feature means the model records.
    pub mean: Vec<f64>,
    /// The spectrum the model records.
    pub eigenvalues: Vec<f64>,
    /// PCA bases (for `transform`).
    pub projections: Vec<(ProjectionInfo, Projection)>,
    /// Header fields.
    pub settled: Settled,
    /// The map it was solved for (the chosen candidate).
    pub candidate: usize,
    /// Its held-out score at the chosen λ (what candidates are chosen by).
    pub score: Option<f64>,
}
