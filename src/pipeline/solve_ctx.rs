//! What every solve and selection sees ([`SolveCtx`]: the checked pipeline, the maps, the
//! labels, the training rows for k-fold's stream, the threads and the report) and what it
//! settles ([`Solution`]: the numbers of the model and the header fields the solve
//! decides). The model is assembled from a solution once, in `assemble`.

use crate::model::{CandidateTable, Projection, ProjectionInfo, SparseTable, ValidationTable};
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::prepare::{FittedMap, Labels};
use crate::pipeline::report::Reporter;
use crate::solve::GcvCurve;
use crate::solve::Refinement;
use crate::source::Dataset;
use crate::stats::GramStats;

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
    /// The report.
    pub report: &'a mut Reporter,
    /// Keeps the run's pass state (its checkpoint) just before a factorisation in place
    /// consumes any of it.
    pub keeper: Option<&'a dyn KeepState>,
}

/// What keeps a run's pass state when a solve is about to consume part of it: an
/// accumulation hands over its whole state, named as [`state`] names it, with the block
/// the factorisation takes still whole. A solve that consumes nothing never calls it.
///
/// [`state`]: crate::pipeline::accumulate::Accumulation::state
pub(crate) trait KeepState: Sync {
    /// Keeps `blocks`; an error stops the solve with them whole. Answers the local file
    /// that now holds them under their names, if one does.
    fn keep(&self, blocks: &[(String, &GramStats)]) -> crate::error::Result<Option<std::path::PathBuf>>;

    /// A local file beside the kept state where a solve may spill a Gram it needs back
    /// while its memory holds something else (none: the state is not on local disk).
    fn spill_path(&self) -> Option<std::path::PathBuf> {
        None
    }
}

/// Keeps the state `blocks` by `keeper` (none: nothing keeps it) before a solve consumes
/// `consumed`, and answers where that block can be read back: the kept file and the name
/// of the block that is `consumed` itself (not a sum made from the blocks).
pub(crate) fn keep_state(
    keeper: Option<&dyn KeepState>,
    blocks: &[(String, &GramStats)],
    consumed: &GramStats,
) -> crate::error::Result<Option<crate::solve::KeptAt>> {
    let Some(path) = keeper.map(|k| k.keep(blocks)).transpose()?.flatten() else {
        return Ok(None);
    };
    let block = blocks.iter().find(|(_, s)| std::ptr::eq(*s, consumed));
    Ok(block.map(|(name, _)| crate::solve::KeptAt { path, block: name.clone() }))
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
