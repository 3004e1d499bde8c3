//! sketchfit trains kernel models on data far larger than memory.
//!
//! Rows stream out of Parquet files ([`source`]) in chunks, pass through random-feature
//! maps ([`sketch`]) and fold into f64 sufficient statistics ([`stats`]). RF-PCA and
//! closed-form ridge regression ([`solve`]) work on those statistics alone, so memory
//! never grows with the number of rows. [`pipeline`] reads a pipeline file and drives
//! the passes; [`model`] holds what prediction needs and saves it as safetensors.
//! The math of every stage is in `design/math.md`.
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod chol;
pub mod container;
pub mod error;
pub mod rng;
pub mod sketch;
pub mod solve;
pub mod source;
pub mod stats;
pub mod subspace;
pub mod tridiag;

pub use error::{Error, Result};
pub mod atomic;
pub mod model;
pub mod pipeline;
