//! The typed, validated [`PipelineSpec`]: what a pipeline asks for, the checks across
//! its sections, and what the driver derives from it (`spec_toml.rs` reads it from the
//! pipeline file).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use crate::model::Task;
use crate::sketch::StageSpec;
use crate::solve::{Components, LambdaChoice, SolvePath};
use crate::source::{ColumnSpec, FeatureColumns};

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
    /// Solve path: `"auto"` (default), `"eigen"`, `"cholesky"` or `"tridiagonal"`.
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

/// How validation scores a λ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Share of rows classified right (classification only).
    Accuracy,
    /// Root mean squared error of the scores.
    Rmse,
    /// Mean logistic loss `log(1 + exp(−t·f))` of the ±1 scores (classification only).
    #[serde(rename = "log_loss")]
    LogLoss,
}

impl Metric {
    /// The name a model header and messages use.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Accuracy => "accuracy",
            Metric::Rmse => "rmse",
            Metric::LogLoss => "log_loss",
        }
    }
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
    /// The statistics are safe on disk when the solve starts (a checkpoint is kept, or
    /// they were read from part files), so a fixed-λ solve may factor them in place
    /// rather than a copy. Set by the driver, never by the file.
    #[serde(skip)]
    pub stats_on_disk: bool,
    /// The run's product is its statistics (`accumulate`, shards, incremental fits), so
    /// it never keeps rows for the dual solve instead. Set by the driver.
    #[serde(skip)]
    pub keep_statistics: bool,
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
            stats_on_disk: false,
            keep_statistics: false,
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
}

impl PipelineSpec {
    /// Checks every setting a pipeline file's would be checked for, except that training
    /// files are given (a pipeline built in code may fit on batches in memory).
    pub fn check(&self) -> Result<()> {
        let f = self.source.as_str();
        if self.stages.is_empty() {
            return Err(Error::config(f, "stages", "no sketch stages; add at least one [[stages]] table"));
        }
        for (i, st) in self.stages.iter().enumerate() {
            st.validate(f, &format!("stages.{i}"))?;
        }
        if !self.data.features.is_empty() && self.data.feature_list.is_some() {
            return Err(Error::config(f, "data.feature_list", "give either features or feature_list, not both"));
        }
        match self.task {
            Task::Classification => {
                if self.data.label.is_none() {
                    return Err(Error::config(f, "data.label", "classification needs a label column"));
                }
                if !self.data.targets.is_empty() {
                    return Err(Error::config(f, "data.targets", "targets are for task = \"regression\""));
                }
            }
            Task::Regression => {
                if self.data.targets.is_empty() {
                    return Err(Error::config(f, "data.targets", "regression needs at least one target column"));
                }
                if self.data.label.is_some() {
                    return Err(Error::config(f, "data.label", "label is for task = \"classification\""));
                }
            }
        }
        match (self.pca.components, self.pca.variance) {
            (Some(_), Some(_)) => {
                return Err(Error::config(f, "pca", "give either components or variance, not both"));
            }
            (Some(0), _) => return Err(Error::config(f, "pca.components", "must be ≥ 1 (omit [pca] for no PCA)")),
            (_, Some(v)) if !(v > 0.0 && v <= 1.0) => {
                return Err(Error::config(f, "pca.variance", format!("must be in (0, 1], got {v}")));
            }
            _ => {}
        }
        if self.pca.method == PcaMethod::Subspace && self.pca.variance.is_some() {
            return Err(Error::config(
                f,
                "pca.method",
                "\"subspace\" finds a fixed number of components; a variance share needs the whole spectrum (\"dense\")",
            ));
        }
        if let Some(t) = self.pca.tolerance {
            if !(t > 0.0 && t < 1.0) {
                return Err(Error::config(f, "pca.tolerance", format!("must be in (0, 1), got {t}")));
            }
        }
        self.lambda()?;
        if !self.pca.per_stage.is_empty() {
            if self.passes != 2 {
                return Err(Error::config(f, "pca.per_stage", "per-stage PCA sizes need passes = 2"));
            }
            if self.pca.per_stage.len() != self.stages.len() {
                return Err(Error::config(
                    f,
                    "pca.per_stage",
                    format!("has {} entries for {} stages", self.pca.per_stage.len(), self.stages.len()),
                ));
            }
            if self.pca.per_stage.contains(&0) {
                return Err(Error::config(f, "pca.per_stage", "every entry must be ≥ 1"));
            }
        }
        if self.passes == 2 && self.components() == Components::All && self.pca.per_stage.is_empty() {
            return Err(Error::config(
                f,
                "pca",
                "two-pass mode needs a PCA size: pca.components, pca.variance or pca.per_stage",
            ));
        }
        if self.task == Task::Regression && (self.ridge.codes != Codes::OneVsAll || self.ridge.code_file.is_some()) {
            return Err(Error::config(f, "ridge.codes", "output codes are for classification"));
        }
        if self.ridge.code_file.is_some() && self.ridge.codes != Codes::Ecoc {
            return Err(Error::config(f, "ridge.code_file", "a code file needs codes = \"ecoc\""));
        }
        if self.ridge.codes == Codes::Ecoc && self.ridge.code_length == 0 {
            return Err(Error::config(f, "ridge.code_length", "must be ≥ 1"));
        }
        if matches!(self.ridge.metric, Some(Metric::Accuracy | Metric::LogLoss)) && self.task == Task::Regression {
            return Err(Error::config(f, "ridge.metric", "accuracy and log_loss are for classification; use \"rmse\""));
        }
        if self.data.null_labels == NullLabels::Unlabeled && self.task != Task::Classification {
            return Err(Error::config(f, "data.null_labels", "null labels as unlabeled rows is for classification"));
        }
        self.check_solver()?;
        self.check_cv()?;
        self.check_candidates()?;
        if self.run.chunk_rows == 0 || self.run.chunk_rows > 1 << 22 {
            return Err(Error::config(f, "run.chunk_rows", "must be from 1 to 4194304"));
        }
        if self.run.threads > 1024 {
            return Err(Error::config(f, "run.threads", "must be from 0 (all cores) to 1024"));
        }
        Ok(())
    }

    /// The PCA choice.
    pub fn components(&self) -> Components {
        match (self.pca.components, self.pca.variance) {
            (Some(e), _) => Components::Fixed(e),
            (_, Some(v)) => Components::Share(v),
            _ => Components::All,
        }
    }

    /// The λ choice.
    pub fn lambda(&self) -> Result<LambdaChoice> {
        let f = self.source.as_str();
        match &self.ridge.lambda {
            LambdaValue::Number(l) if l.is_finite() && *l >= 0.0 => {
                if self.ridge.per_output {
                    return Err(Error::config(f, "ridge.per_output", "per-output λ needs lambda = \"gcv\""));
                }
                Ok(LambdaChoice::Fixed(*l))
            }
            LambdaValue::Number(l) => Err(Error::config(f, "ridge.lambda", format!("must be ≥ 0 or \"gcv\", got {l}"))),
            LambdaValue::Word(w) if w == "gcv" => Ok(LambdaChoice::Gcv { per_output: self.ridge.per_output }),
            LambdaValue::Word(w) => {
                Err(Error::config(f, "ridge.lambda", format!("must be a number ≥ 0 or \"gcv\", got \"{w}\"")))
            }
        }
    }

    /// Columns to read for training.
    pub fn columns(&self) -> ColumnSpec {
        ColumnSpec {
            features: self.feature_columns(),
            label: self.data.label.clone(),
            targets: self.data.targets.clone(),
            keep: Vec::new(),
            null_labels_unlabeled: self.data.null_labels == NullLabels::Unlabeled,
        }
    }

    /// Columns to read from unlabeled files: the features only.
    pub fn feature_only_columns(&self) -> ColumnSpec {
        ColumnSpec { label: None, targets: Vec::new(), null_labels_unlabeled: false, ..self.columns() }
    }

    /// Components of stage `i`'s own PCA (two-pass).
    pub fn stage_components(&self, i: usize) -> Components {
        match self.pca.per_stage.get(i) {
            Some(&e) => Components::Fixed(e),
            None => self.components(),
        }
    }

    /// The validation metric in force.
    pub fn metric(&self) -> Metric {
        self.ridge.metric.unwrap_or(match self.task {
            Task::Classification => Metric::Accuracy,
            Task::Regression => Metric::Rmse,
        })
    }

    /// A fingerprint of everything that decides the statistics (data columns, fitted
    /// stages, seed, passes, shift): shards and checkpoints must agree on it.
    ///
    /// A code file enters by its rows (`code`, as the plan read it), not its path: an
    /// edit between two shards or between a kill and `--resume` changes the targets the
    /// statistics hold, so it must change the fingerprint.
    pub fn fingerprint(
        &self,
        fitted: &[StageSpec],
        shift_mode: ShiftMode,
        files: &[String],
        code: Option<&crate::codes::OutputCode>,
    ) -> String {
        let mut v = serde_json::json!({
            "files": files,
            "task": self.task, "passes": self.passes, "features": self.data.features,
            "feature_list": self.data.feature_list, "label": self.data.label, "targets": self.data.targets,
            "null_labels": self.data.null_labels, "stages": fitted, "seed": self.run.seed,
            "sample_rows": self.run.sample_rows, "shift": shift_mode,
            "codes": self.ridge.codes, "code_length": self.ridge.code_length, "code_file": self.ridge.code_file,
            "pca": if self.passes == 2 { serde_json::to_value(&self.pca).unwrap_or_default() } else { serde_json::Value::Null },
        });
        // Fold statistics are another layout; without k-fold the fingerprint is as before.
        if let (Some(k), Some(o)) = (self.ridge.cv, v.as_object_mut()) {
            o.insert("cv".into(), k.into());
        }
        if let (Some(c), Some(o)) = (&self.candidates, v.as_object_mut()) {
            o.insert("candidates".into(), serde_json::to_value(c).unwrap_or_default());
        }
        // Drawn codes follow from the seed, length and classes already in the keys.
        if let (Some(_), Some(o)) = (&self.ridge.code_file, v.as_object_mut()) {
            o.insert(
                "code".into(),
                serde_json::to_value(code.and_then(crate::codes::OutputCode::rows)).unwrap_or_default(),
            );
        }
        crate::stats::checksum([v.to_string().as_bytes()])
    }

    fn feature_columns(&self) -> FeatureColumns {
        match &self.data.feature_list {
            Some(l) => FeatureColumns::List(l.clone()),
            None => FeatureColumns::Columns(self.data.features.clone()),
        }
    }

    /// Threads to use.
    pub fn threads(&self) -> usize {
        if self.run.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            self.run.threads
        }
    }
}
