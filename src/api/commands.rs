//! What each command of the `sketchfit` binary runs, as the library offers it: the
//! command line is built on these and on the rest of [`crate::api`], so a program can run
//! exactly what a command runs (`train`, `accumulate`, `solve`, `fit-maps`, `predict`,
//! `evaluate`, `transform`, `kernel-error`, `mmd`, `embed`) with the same options,
//! report and refusals.

pub use crate::pipeline::kernel_error::kernel_error;
pub use crate::pipeline::mmd::{embed_groups, mmd, MmdOptions, Sketching};
pub use crate::pipeline::predict::{evaluate, predict, transform, Evaluation, PredictOptions};
pub use crate::pipeline::run::train;
pub use crate::pipeline::spec::PipelineSpec;
pub use crate::pipeline::stream::lambda_text;
pub use crate::pipeline::{
    accumulate_shard, check_run_outputs, fit_maps, parse_shard, solve_parts, PartWeights, PartsSolve, Reporter,
    RunOptions, RunReport, Shard, SolveOutcome,
};
