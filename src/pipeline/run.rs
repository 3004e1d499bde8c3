//! The training drivers. One pass (Algorithm 4 of the χ² paper, math.md §13.2–13.3):
//! a single scan accumulates the labeled statistics and, when there are unlabeled rows,
//! theirs, then PCA (on all rows) and ridge (on the labeled ones) solve from them. Two
//! passes (Algorithm 5, math.md §13.5): pass one accumulates each stage's own
//! covariance and fits its PCA; pass two projects every stage, concatenates, and
//! accumulates the statistics of the concatenation for ridge.
//!
//! Before either, [`prepare`] opens and checks every input, scans the class set,
//! draws the pre-pass sample, fits the data-dependent stage parameters and the shift,
//! and states the memory the run needs. Work is counted in units (row groups); a run
//! can checkpoint its statistics at unit boundaries and resume, and a shard
//! accumulates every N-th unit so that `solve` can merge the shards.

use crate::error::Result;
use crate::model::Model;
use crate::pipeline::spec::PipelineSpec;
use crate::solve::SolvePath;

pub(crate) use super::plan::fit_stages;
pub use super::plan::RunOptions;
pub use super::plan::{prepare, prepare_inputs, Alternative, Prepared, WorkUnit};
pub(crate) use super::shards::{accumulate_part, solve_loaded};
pub use super::shards::{accumulate_shard, parse_shard, solve_parts, SolveOutcome, Statistics};
pub use super::state::State;
use crate::pipeline::checkpoint::Checkpointer;
use crate::pipeline::pass::accumulate;
use crate::pipeline::paths::solve_in_place;
use crate::pipeline::paths::solve_path;
use crate::pipeline::solve_step::finish;

/// Trains in one process: prepare, every pass over every unit (with checkpoints and
/// resume as asked), solve.
pub fn train(spec: &PipelineSpec, opts: &RunOptions, say: &mut dyn FnMut(&str)) -> Result<Model> {
    let prep = prepare(spec, say)?;
    train_prepared(spec, opts, prep, say)
}

/// [`train`] from a [`Prepared`] run (see [`prepare_inputs`] for batches in memory).
pub fn train_prepared(
    spec: &PipelineSpec,
    opts: &RunOptions,
    prep: Prepared,
    say: &mut dyn FnMut(&str),
) -> Result<Model> {
    // The inputs are open (and registered) now: refuse a bad output before the pass.
    for out in opts.output.iter().chain(&opts.checkpoint) {
        crate::atomic::check_output(out)?;
    }
    let units: Vec<usize> = (0..prep.work.len()).collect();
    let (mut state, pcas) = accumulate(spec, &prep, &units, opts, say)?;
    if let Some(path) = &opts.checkpoint {
        // An in-place factorisation consumes the Gram: keep the pass on disk first, so a
        // failed or refused solve costs no pass (`--resume` solves again from it).
        let last = match &state {
            State::One { labeled, unlabeled: None } => Some(labeled),
            State::Two { pass2: Some(p2), .. } => Some(p2),
            _ => None,
        };
        if last.is_some_and(|st| {
            solve_path(spec, false, false).ok() == Some(SolvePath::Cholesky) && solve_in_place(spec, st)
        }) {
            let c = Checkpointer { path, every: 0, since: 0, fingerprint: &prep.fingerprint };
            c.write(&state, &units)?;
            say(&format!("statistics written to {} before the in-place solve", path.display()));
        }
    }
    let Prepared { pipeline, stages, classes, code, labeled, alternatives, .. } = prep;
    let features = labeled.features.clone();
    let others: Vec<Vec<crate::sketch::StageSpec>> = alternatives.into_iter().map(|a| a.stages).collect();
    finish(spec, pipeline, stages, classes, code, features, &mut state, pcas, Some(&labeled), &others, say)
}
