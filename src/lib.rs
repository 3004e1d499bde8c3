//! sketchfit trains kernel models on data far larger than memory.
//!
//! Rows stream out of Parquet files or Arrow batches ([`source`]) in chunks, pass through
//! random-feature maps ([`sketch`]) and fold into f64 sufficient statistics ([`stats`]).
//! RF-PCA and closed-form ridge regression ([`solve`]: Cholesky, tridiagonal, block Krylov, dual,
//! coordinate descent) work on those statistics alone, so memory never grows with the number
//! of rows. [`pipeline`] drives the passes; [`model`] holds what prediction needs and
//! saves it in the one checksummed [`container`]. The math of every stage is in
//! `docs/src/explanation/math.md`, which the comments cite as `math.md §N`.
//!
//! # A tour
//!
//! Build a pipeline in code, fit it on record batches in memory, predict:
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch};
//! use sketchfit::sketch::TensorSketchSpec;
//! use sketchfit::{Lambda, Pipeline};
//!
//! // Two classes on either side of the circle x² + y² = 0.5.
//! let (xs, ys): (Vec<f32>, Vec<f32>) = (0..400).map(|i| ((i % 20) as f32 / 20.0, (i / 20) as f32 / 20.0)).unzip();
//! let label: Vec<i64> = xs.iter().zip(&ys).map(|(x, y)| i64::from(x * x + y * y > 0.5)).collect();
//! let col = |v: Vec<f32>| Arc::new(Float32Array::from(v)) as ArrayRef;
//! let batch = RecordBatch::try_from_iter([("x", col(xs)), ("y", col(ys)), ("label", Arc::new(Int64Array::from(label)) as ArrayRef)])?;
//!
//! let pipeline = Pipeline::classification("label")
//!     .stage(TensorSketchSpec { degree: 2, dim: 256, ..Default::default() })
//!     .lambda(Lambda::Fixed(1e-3))
//!     .seed(7);
//! let model = pipeline.fit([batch.clone()])?;
//! let predicted = model.predict_batch(&batch, false)?;
//! assert_eq!(predicted.num_rows(), 400);
//! assert!(model.header.rows == 400 && model.predict_classes(&[0.9, 0.9])? == [1]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same pipeline fits Parquet files, streamed in bounded memory, with
//! [`Pipeline::fit_files`]; [`Pipeline::load`] reads a pipeline file. A model saves and
//! loads with [`Model::save`] and [`Model::load`]. What a run holds beyond its pipeline —
//! storage options, store clients, the files it read and may not replace — lives in a
//! [`Session`], never in process-wide state: the `_with` forms ([`Pipeline::fit_files_with`],
//! [`Model::save_with`], …) take one, so runs on several threads stay apart.
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod api;
pub mod codes;
pub mod container;
pub mod error;
pub mod identity;
pub mod maps;
pub mod metrics;
pub mod plot;
pub mod remote;
pub mod rng;
pub mod scoring;
pub mod session;
pub mod sketch;
pub mod solve;
pub mod source;
pub mod stats;
pub mod twosample;

pub use api::{Lambda, Pipeline};
pub use error::{Error, Result};
pub use model::Model;
pub use pipeline::{PartWeights, Shard, Statistics};
pub use session::Session;
pub mod atomic;
pub mod model;
pub mod pipeline;
