//! The integration tests, one binary (one link of the crate instead of ten). Each module
//! is one capability (the planner, the dual, resume, shards, the property test, each
//! sketch family's statistics, …); `common` holds the helpers they share. Golden vectors
//! live in `tests/golden/`.

mod common;

mod api;
mod bad_input;
mod batch;
mod candidates;
mod chi2_rff_stats;
mod docs;
mod dot_product_maps_stats;
mod down_projection;
mod dual;
mod end_to_end;
mod gaussian_mmd;
mod golden;
mod golden_maps;
mod incremental;
mod kfold;
mod learners_verified;
mod maps;
mod nothing_lost;
mod nystrom;
mod outputs;
mod planner;
mod property;
mod resume;
mod scoring;
mod session;
mod sparse_solvers;
mod streaming_vs_dense;
mod tensor_sketch_stats;
