//! Pipeline files and the drivers that run them, in one direction:
//!
//! - the file ([`spec`], read by `spec_toml`) is checked into a [`check::CheckedPipeline`]
//!   of typed values;
//! - `prepare` opens the inputs, scans the classes, fits the maps on the pre-pass sample;
//! - the planner ([`plan`]) decides the run once — primal with its solve path, dual,
//!   k-fold, candidates, two passes, sparse — and its memory;
//! - `pass` streams every unit into the plan's accumulation (`accumulate`, one
//!   interface for every mode), with `checkpoint`s; `shards` and `incremental` do the
//!   same across processes and batches, through `parts`;
//! - the accumulation solves itself (`ridge`, `sparse`, `projection`), λ settled by one
//!   selection interface (`select`), and `assemble` builds the model once;
//! - [`report`] carries what the run reports beside the model.
//!
//! [`predict`], [`kernel_error`] and [`mmd`] are the other commands' drivers; [`stream`]
//! holds the streaming helpers they share.

mod accumulate;
mod assemble;
mod candidate_spec;
mod candidates;
pub mod check;
mod checkpoint;
mod fit_maps;
mod incremental;
mod keep;
pub mod kernel_error;
mod keys;
pub mod mmd;
mod parts;
mod pass;
pub mod plan;
pub mod predict;
mod prepare;
mod projection;
pub mod report;
mod ridge;
pub mod run;
mod select;
mod shards;
mod solve_ctx;
mod sparse;
pub mod spec;
mod spec_toml;
pub mod stream;

pub use check::CheckedPipeline;
pub use checkpoint::check_run_outputs;
pub use fit_maps::fit_maps;
pub use parts::{parse_shard, FileKind, PartWeights, PartsSolve, Shard, Statistics};
pub use plan::{Plan, RunOptions};
pub(crate) use prepare::fit_stages;
pub use prepare::{prepare, prepare_inputs, FittedMap, Prepared, WorkUnit};
pub use report::{Reporter, RunReport};
pub(crate) use shards::{accumulate_part, solve_loaded};
pub use shards::{accumulate_shard, solve_parts, SolveOutcome};
