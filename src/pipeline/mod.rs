//! Pipeline files and the drivers that run them. One direction of data: a spec
//! ([`spec`]) is planned (`plan`: inputs, classes, output code, pre-pass sample, fitted
//! stages, shift, memory; `paths`: the solve path and its bytes), streamed (`stream`)
//! through the pass loop (`pass`, over the `state`, with `checkpoint`s), solved
//! (`solve_step`, with per-stage PCA in `projection` and λ by `validation`), and
//! assembled into a model. [`run`] is the entry point for one process; `shards` holds
//! `accumulate` and `solve` across processes. [`predict`], [`kernel_error`] and
//! [`mmd`] are the other commands' drivers.

mod candidate_spec;
pub mod candidates;
mod checkpoint;
mod header;
mod incremental;
pub mod kernel_error;
pub mod kfold;
pub mod mmd;
mod pass;
mod paths;
mod plan;
pub mod predict;
mod projection;
mod ridge_step;
pub mod run;
mod shards;
mod solve_step;
mod sparse;
pub mod spec;
mod spec_toml;
mod state;
pub mod stream;
mod validation;
