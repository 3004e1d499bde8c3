//! Solvers on statistics alone (math.md §13): they read no data, open no file and know no
//! pipeline type. Layered one way: `symmetric` → `panels` → `band` → `tridiag`; `symmetric` → `krylov` → `eigen` → `rotated` →
//! `tridiag` / `lease` → `cholesky` → `mixed` → `dual` → `ridge`; `cd` (coordinate descent for the LASSO
//! family) stands alone.
//!
//! | file | owns |
//! |---|---|
//! | `cholesky` | the tiled Cholesky of `C + λI`, in place, and its triangular solves (f32 or f64) |
//! | `lease` | what a solve that consumes or spills the statistics asks of their owner |
//! | `mixed` | ridge at a fixed λ by an f32 factor refined against the f64 statistics |
//! | `symmetric` | `A V` over a stored lower triangle in one pass (the reduction's and block Krylov's products) |
//! | `panels` | stage one of the reduction: dense → band by Householder panels, deferred updates |
//! | `band` | the two-stage reduction to band and on to tridiagonal form (stage two: the chase) |
//! | `tridiag` | ridge at every λ of the grid from the tridiagonal form (GCV, validation) |
//! | `krylov` | the top `E` eigenpairs by block Krylov |
//! | `eigen` | RF-PCA: dense or Krylov, and how many components to keep |
//! | `rotated` | the problem in an eigenbasis: λ grid, GCV curve, coefficients, fold |
//! | `dual` | ridge on the `n × n` kernel of kept rows |
//! | `ridge` | which path runs, and the problem each path leaves |
//! | `cd` | coordinate descent for the LASSO, elastic net and group LASSO |

pub(crate) mod band;
pub mod cd;
pub mod cholesky;
pub mod dual;
pub mod eigen;
pub mod krylov;
pub mod lease;
pub mod mixed;
mod panels;
pub mod ridge;
pub mod rotated;
mod symmetric;
pub mod tridiag;

pub use eigen::{eigh_desc, Components, Pca};
pub use lease::{GramSource, Lease, Unkept};
pub use mixed::Refinement;
pub use ridge::{Direct, DirectSolve, Factor, PositiveLambda, Ridge, RidgeSolve, SolvePath};
pub use rotated::{bias_for, lambda_grid, GcvCurve, LambdaChoice, RidgeFit, RotatedProblem};
