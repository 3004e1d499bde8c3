//! The pipeline file as written ([`PipelineSpec`], serde): what a pipeline asks for,
//! section by section, with every default. `spec_toml` reads it from the file; `check`
//! turns it into the typed, checked pipeline the run uses.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::metrics::Metric;
pub use crate::model::Task;
use crate::sketch::StageSpec;
use crate::solve::SolvePath;

/// `[data]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSpec {
    /// Training files (paths or globs; relative paths are relative to the pipeline file).
    pub train: Vec<PathBuf>,
    /// Test files, scored at the end of training.
    #[serde(default)]
    pub test: Vec<PathBuf>,
    /// Feature columns by name or glob (default: every numeric column but the label and targets).
    #[serde(default)]
    pub features: Vec<String>,
    /// One list column holding the features, instead of `features`.
    #[serde(default)]
    pub feature_list: Option<String>,
    /// Label column (classification).
    #[serde(default)]
    pub label: Option<String>,
    /// Target columns (regression).
    #[serde(default)]
    pub targets: Vec<String>,
    /// Files of unlabeled rows (no label column needed): they enter the PCA only.
    #[serde(default)]
    pub unlabeled: Vec<PathBuf>,
    /// Files scored for every λ of the grid after training; the best λ is kept.
    #[serde(default)]
    pub validation: Vec<PathBuf>,
    /// `"error"` (default) or `"unlabeled"`: rows whose label is null join the PCA only.
    #[serde(default)]
    pub null_labels: NullLabels,
    /// The class set, when given rather than scanned (the library's incremental fits
    /// fix it up front, so a later batch's label outside it is an error).
    #[serde(skip)]
    pub classes: Option<crate::source::Classes>,
}

/// What a null label means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NullLabels {
    /// A null label is a data error.
    #[default]
    Error,
    /// A row with a null label is an unlabeled row.
    Unlabeled,
}

/// `[pca]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcaSpec {
    /// Keep the top `E` components.
    #[serde(default)]
    pub components: Option<usize>,
    /// Keep the fewest components that explain this share of the variance, in (0, 1].
    #[serde(default)]
    pub variance: Option<f64>,
    /// Two-pass mode: the components of each stage's own PCA, one entry per stage
    /// (default: `components` or `variance` for every stage).
    #[serde(default)]
    pub per_stage: Vec<usize>,
    /// How the components are found: `"auto"` (default: block Krylov on the tiled Gram
    /// when `components ≤ D/8` and `D ≥ 2048`, or `≤ D/4` when the dense matrices would not fit in
    /// memory; the dense decomposition otherwise), `"dense"` or `"subspace"` (block
    /// Krylov on the tiled Gram, the name kept from its first method).
    #[serde(default)]
    pub method: PcaMethod,
    /// Block Krylov's residual tolerance `‖Cu − θu‖ / θ_max` (default 1e-6).
    #[serde(default)]
    pub tolerance: Option<f64>,
}

/// `pca.method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PcaMethod {
    /// Block Krylov up to `E = D/8` from `D = 2048` (or `D/4` when dense does not fit),
    /// else dense.
    #[default]
    Auto,
    /// The dense eigendecomposition.
    Dense,
    /// Block Krylov on the tiled Gram.
    Subspace,
}

/// λ as written: a number or `"gcv"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LambdaValue {
    /// A fixed λ.
    Number(f64),
    /// `"gcv"`.
    Word(String),
}

/// `[ridge]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RidgeSpec {
    /// A number ≥ 0, or `"gcv"` (default).
    #[serde(default = "default_lambda")]
    pub lambda: LambdaValue,
    /// One λ per output (GCV or validation).
    #[serde(default)]
    pub per_output: bool,
    /// Validation metric: `"accuracy"` (classification default) or `"rmse"`.
    #[serde(default)]
    pub metric: Option<Metric>,
    /// Solve path: `"auto"` (default), `"eigen"`, `"cholesky"`, `"cholesky_f32"`,
    /// `"tridiagonal"` or `"dual"`.
    #[serde(default)]
    pub solver: SolvePath,
    /// With `data.validation`: after λ is chosen on the validation rows, solve again at
    /// that λ on the training and validation rows together (their statistics are taken
    /// in the scoring stream, so no further pass). Default true.
    #[serde(default = "yes")]
    pub refit: bool,
    /// Classification outputs: `"one_vs_all"` (default) or `"ecoc"` (error-correcting
    /// output codes, math.md §13.9).
    #[serde(default)]
    pub codes: Codes,
    /// ECOC: the code length `L` (default 200, at most 2^(c−1) − 1 for c classes).
    #[serde(default = "default_code_length")]
    pub code_length: usize,
    /// ECOC: a code file instead of a drawn code (one row of ±1 per class, in class order).
    #[serde(default)]
    pub code_file: Option<PathBuf>,
    /// k-fold cross-validation: λ from the grid by the held-out metric pooled over `K`
    /// folds (2 ≤ K ≤ 10), then a refit on all rows.
    #[serde(default)]
    pub cv: Option<usize>,
}

/// `ridge.codes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Codes {
    /// One output per class.
    #[default]
    OneVsAll,
    /// Error-correcting output codes.
    Ecoc,
}

fn default_code_length() -> usize {
    200
}

fn yes() -> bool {
    true
}

fn default_lambda() -> LambdaValue {
    LambdaValue::Word("gcv".into())
}

impl Default for RidgeSpec {
    fn default() -> Self {
        RidgeSpec {
            lambda: default_lambda(),
            per_output: false,
            metric: None,
            solver: SolvePath::Auto,
            refit: true,
            codes: Codes::OneVsAll,
            code_length: default_code_length(),
            code_file: None,
            cv: None,
        }
    }
}

/// `solver.kind`: the learner fitted on the statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SolverKind {
    /// Ridge regression (`[ridge]`).
    #[default]
    Ridge,
    /// `½‖y − Zw‖² + λ₁‖w‖₁`.
    Lasso,
    /// The lasso plus `(λ₂/2)‖w‖²`.
    ElasticNet,
    /// `Σ_g √|g| ‖w_g‖` over the stages (kernels), plus `(λ₂/2)‖w‖²`.
    GroupLasso,
}

impl SolverKind {
    /// The name in pipeline files.
    pub fn name(self) -> &'static str {
        match self {
            SolverKind::Ridge => "ridge",
            SolverKind::Lasso => "lasso",
            SolverKind::ElasticNet => "elastic_net",
            SolverKind::GroupLasso => "group_lasso",
        }
    }
}

/// `[solver]`: the sparse and grouped penalties of math.md §13.10, fitted by coordinate
/// descent on the centred statistics (ridge keeps its own section).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolverSpec {
    /// `"ridge"` (default), `"lasso"`, `"elastic_net"` or `"group_lasso"`.
    #[serde(default)]
    pub kind: SolverKind,
    /// A fixed `λ₁ > 0`; default: the path scored on `data.validation`.
    #[serde(default)]
    pub lambda: Option<f64>,
    /// `λ₂ ≥ 0` of the elastic net and the group lasso.
    #[serde(default)]
    pub l2: f64,
    /// Values on the path from `λ_max` down (30–100 usual).
    #[serde(default = "default_path")]
    pub path: usize,
    /// The path's last value as a share of `λ_max`.
    #[serde(default = "default_ratio")]
    pub ratio: f64,
    /// Stop a fit when its duality gap is at most this share of `c_yy`.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    /// Sweeps over the coordinates at most per fit (the gap reached is reported).
    #[serde(default = "default_sweeps")]
    pub max_sweeps: usize,
}

fn default_tolerance() -> f64 {
    1e-4
}

fn default_sweeps() -> usize {
    1000
}

fn default_path() -> usize {
    50
}

fn default_ratio() -> f64 {
    1e-2
}

impl Default for SolverSpec {
    fn default() -> Self {
        SolverSpec {
            kind: SolverKind::Ridge,
            lambda: None,
            l2: 0.0,
            path: default_path(),
            ratio: default_ratio(),
            tolerance: default_tolerance(),
            max_sweeps: default_sweeps(),
        }
    }
}

/// How the accumulator shift `μ` is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShiftMode {
    /// Mean features of the pre-pass sample.
    #[default]
    Sample,
    /// `μ = 0`.
    Zero,
}

/// `[run]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// Rows per chunk.
    #[serde(default = "default_chunk_rows")]
    pub chunk_rows: usize,
    /// Worker threads; 0 = all cores.
    #[serde(default)]
    pub threads: usize,
    /// Seed of every random parameter.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Rows in the pre-pass sample.
    #[serde(default = "default_sample_rows")]
    pub sample_rows: usize,
    /// Accumulator shift.
    #[serde(default)]
    pub shift: ShiftMode,
    /// Memory limit in MiB for the statistics and buffers; 0 = the machine's available memory.
    #[serde(default)]
    pub memory_limit_mib: u64,
    /// Write a checkpoint after this many chunks (at the next row-group boundary); 0 = never.
    #[serde(default = "default_checkpoint_every")]
    pub checkpoint_every: usize,
    /// Checkpoint file (default: the model path with `.ckpt` appended).
    #[serde(default)]
    pub checkpoint: Option<PathBuf>,
    /// Precision of the Gram products: `"f64"` (default) or `"f32"`.
    #[serde(default)]
    pub gram: crate::stats::Precision,
    /// A maps file (`fit-maps`) whose fitted maps the run uses instead of its pre-pass
    /// (relative to the pipeline file; `--maps` overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maps: Option<PathBuf>,
}

fn default_checkpoint_every() -> usize {
    256
}

fn default_chunk_rows() -> usize {
    8192
}
fn default_seed() -> u64 {
    1
}
fn default_sample_rows() -> usize {
    10_000
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            chunk_rows: default_chunk_rows(),
            threads: 0,
            seed: default_seed(),
            sample_rows: default_sample_rows(),
            shift: ShiftMode::Sample,
            memory_limit_mib: 0,
            checkpoint_every: default_checkpoint_every(),
            checkpoint: None,
            gram: crate::stats::Precision::F64,
            maps: None,
        }
    }
}

/// A validated pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineSpec {
    /// Where it was read from (for messages).
    pub source: String,
    /// Task.
    pub task: Task,
    /// 1 (one pass, one PCA over all stages) or 2 (a PCA per stage, then ridge).
    pub passes: u32,
    /// Inputs and columns.
    pub data: DataSpec,
    /// Sketch stages, concatenated.
    pub stages: Vec<StageSpec>,
    /// PCA.
    pub pca: PcaSpec,
    /// Ridge.
    pub ridge: RidgeSpec,
    /// The learner (ridge by default).
    #[serde(default)]
    pub solver: SolverSpec,
    /// Run settings.
    pub run: RunSpec,
    /// Kernel parameters tried in one pass (`stages.N.candidates`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<crate::pipeline::candidate_spec::CandidateSpec>,
    /// The `[storage]` options (credentials among them): never serialised, so never in
    /// a model, a part or a fingerprint.
    #[serde(skip)]
    pub storage: Vec<(String, String)>,
}
