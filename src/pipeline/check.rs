//! The pipeline file as the run reads it: [`PipelineSpec::check`] turns the file's spec
//! into a [`CheckedPipeline`] of typed values (the λ choice, the selection method, the
//! components, the metric, the learner, the output code, the candidates), refusing every
//! combination the file alone rules out and naming its key. What also depends on the data
//! or the run (dual or primal, in place or not, memory) is decided by the planner
//! (`plan`), once, on top of this.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::pipeline::spec::{Codes, LambdaValue, Metric, NullLabels, PcaMethod, PipelineSpec, SolverKind, Task};
use crate::sketch::StageSpec;
use crate::solve::{Components, LambdaChoice, SolvePath};
use crate::source::{ColumnSpec, FeatureColumns};

/// How λ is settled.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// A fixed λ ≥ 0.
    Fixed(f64),
    /// Generalised cross-validation over the grid.
    Gcv {
        /// One λ per output.
        per_output: bool,
    },
    /// Every λ of the grid scored on `data.validation`.
    HeldOut {
        /// One λ per output (by RMSE).
        per_output: bool,
        /// Solve again at the chosen λ on the training and validation rows together.
        refit: bool,
    },
    /// `ridge.cv = K` folds of the training rows, then a refit on all of them.
    KFold {
        /// Folds.
        k: usize,
    },
}

impl Selection {
    /// What the report calls it.
    pub fn name(self) -> &'static str {
        match self {
            Selection::Fixed(_) => "fixed",
            Selection::Gcv { .. } => "gcv",
            Selection::HeldOut { .. } => "validation",
            Selection::KFold { .. } => "k-fold",
        }
    }

    /// The λ choice of the solve that precedes any scoring (fixed, or a grid).
    pub fn lambda(self) -> LambdaChoice {
        match self {
            Selection::Fixed(l) => LambdaChoice::Fixed(l),
            Selection::Gcv { per_output } | Selection::HeldOut { per_output, .. } => LambdaChoice::Gcv { per_output },
            Selection::KFold { .. } => LambdaChoice::Gcv { per_output: false },
        }
    }
}

/// The output code of a classifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeChoice {
    /// One output per class.
    OneVsAll,
    /// A code of `length` columns drawn from the seed.
    Drawn {
        /// `L`.
        length: usize,
    },
    /// A code file (one row of ±1 per class).
    File(PathBuf),
}

/// The `[solver]` learners' settings (math.md §13.10).
#[derive(Debug, Clone, PartialEq)]
pub struct SparseSettings {
    /// Which penalty.
    pub kind: SolverKind,
    /// A fixed `λ₁`, or `None` for the path scored on `data.validation`.
    pub lambda: Option<f64>,
    /// `λ₂`.
    pub l2: f64,
    /// Points on the path.
    pub path: usize,
    /// The path's last point as a share of `λ_max`.
    pub ratio: f64,
    /// Relative duality gap that ends a fit.
    pub tolerance: f64,
    /// Sweeps per fit at most.
    pub max_sweeps: usize,
    /// Refit on train ∪ validation at the chosen `λ₁`.
    pub refit: bool,
}

/// The learner fitted on the statistics.
#[derive(Debug, Clone, PartialEq)]
pub enum Learner {
    /// Ridge, by the solve path asked for (`auto` decided by the planner).
    Ridge {
        /// `ridge.solver`.
        solver: SolvePath,
    },
    /// The lasso family by coordinate descent.
    Sparse(SparseSettings),
}

/// How the PCA components are found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PcaSettings {
    /// `pca.method`.
    pub method: PcaMethod,
    /// Block Krylov's residual tolerance.
    pub tolerance: f64,
}

/// `stages.N.candidates`, checked: the key, its values, and the pipeline each stands for.
#[derive(Debug, Clone)]
pub struct CandidateSet {
    /// The key as the pipeline names it (`stages.N.key`).
    pub key: String,
    /// The values, in the order given.
    pub values: Vec<serde_json::Value>,
    /// One checked pipeline per value (no candidates of its own).
    pub pipelines: Vec<CheckedPipeline>,
}

/// A pipeline whose every setting is checked, as typed values.
#[derive(Debug, Clone)]
pub struct CheckedPipeline {
    spec: PipelineSpec,
    /// The task.
    pub task: Task,
    /// How λ (ridge) is settled.
    pub selection: Selection,
    /// The PCA size of a one-pass run (`All`: none).
    pub components: Components,
    /// Two passes: each stage's own PCA size (empty for one pass).
    pub per_stage: Vec<Components>,
    /// How components are found.
    pub pca: PcaSettings,
    /// The held-out metric (validation, k-fold, candidates, the sparse path).
    pub metric: Metric,
    /// Ridge or a sparse learner.
    pub learner: Learner,
    /// The output code (classification).
    pub code: Option<CodeChoice>,
    /// Some rows may be unlabeled (unlabeled files, or null labels read as unlabeled).
    pub semi: bool,
    /// Kernel candidates.
    pub candidates: Option<CandidateSet>,
}

/// The largest `run.sample_rows`: the sample is held in memory, and four times it (the
/// rows its row groups are drawn until) must count without overflow.
pub const MAX_SAMPLE_ROWS: usize = 1 << 31;

/// The largest `run.memory_limit_mib` (2⁴⁰ MiB, an exbibyte): its bytes and any sum of a
/// few such limits stay inside a `u64`.
pub const MAX_MEMORY_LIMIT_MIB: u64 = 1 << 40;

impl PipelineSpec {
    /// Checks every setting (training files aside: a pipeline built in code may fit on
    /// batches in memory) and returns the typed pipeline. The first wrong key is named.
    pub fn check(&self) -> Result<CheckedPipeline> {
        let f = self.source.as_str();
        self.check_data()?;
        let (components, per_stage, pca) = self.checked_pca()?;
        let selection = self.checked_selection(components)?;
        let metric = self.checked_metric()?;
        let code = self.checked_code()?;
        let semi = !self.data.unlabeled.is_empty() || self.data.null_labels == NullLabels::Unlabeled;
        let learner = self.checked_learner(components, semi)?;
        if self.run.chunk_rows == 0 || self.run.chunk_rows > 1 << 22 {
            return Err(Error::config(f, "run.chunk_rows", "must be from 1 to 4194304"));
        }
        if self.run.sample_rows > MAX_SAMPLE_ROWS {
            let m = format!("must be at most {MAX_SAMPLE_ROWS} (the pre-pass sample is held in memory)");
            return Err(Error::config(f, "run.sample_rows", m));
        }
        if self.run.memory_limit_mib > MAX_MEMORY_LIMIT_MIB {
            let m = format!("{} MiB is past what a byte count can hold; give 0 (the machine's available memory) or at most {MAX_MEMORY_LIMIT_MIB}", self.run.memory_limit_mib);
            return Err(Error::config(f, "run.memory_limit_mib", m));
        }
        if self.run.threads > 1024 {
            return Err(Error::config(f, "run.threads", "must be from 0 (all cores) to 1024"));
        }
        let mut checked = CheckedPipeline {
            spec: self.clone(),
            task: self.task,
            selection,
            components,
            per_stage,
            pca,
            metric,
            learner,
            code,
            semi,
            candidates: None,
        };
        checked.candidates = self.checked_candidates(&checked)?;
        Ok(checked)
    }

    fn check_data(&self) -> Result<()> {
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
        if self.data.null_labels == NullLabels::Unlabeled && self.task != Task::Classification {
            return Err(Error::config(f, "data.null_labels", "null labels as unlabeled rows is for classification"));
        }
        Ok(())
    }

    fn checked_pca(&self) -> Result<(Components, Vec<Components>, PcaSettings)> {
        let f = self.source.as_str();
        let components = match (self.pca.components, self.pca.variance) {
            (Some(_), Some(_)) => return Err(Error::config(f, "pca", "give either components or variance, not both")),
            (Some(0), _) => return Err(Error::config(f, "pca.components", "must be ≥ 1 (omit [pca] for no PCA)")),
            (_, Some(v)) if !(v > 0.0 && v <= 1.0) => {
                return Err(Error::config(f, "pca.variance", format!("must be in (0, 1], got {v}")));
            }
            (Some(e), _) => Components::Fixed(e),
            (_, Some(v)) => Components::Share(v),
            _ => Components::All,
        };
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
        // λ is read before the two-pass keys: a bad λ is named first, as it always was.
        self.lambda_choice()?;
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
        if self.passes == 2 && components == Components::All && self.pca.per_stage.is_empty() {
            return Err(Error::config(
                f,
                "pca",
                "two-pass mode needs a PCA size: pca.components, pca.variance or pca.per_stage",
            ));
        }
        let per_stage = if self.passes == 2 {
            (0..self.stages.len())
                .map(|i| self.pca.per_stage.get(i).map_or(components, |&e| Components::Fixed(e)))
                .collect()
        } else {
            Vec::new()
        };
        let pca = PcaSettings { method: self.pca.method, tolerance: self.pca.tolerance.unwrap_or(1e-6) };
        Ok((components, per_stage, pca))
    }

    /// `ridge.lambda` (with `ridge.per_output`) as a choice.
    fn lambda_choice(&self) -> Result<LambdaChoice> {
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

    fn checked_selection(&self, components: Components) -> Result<Selection> {
        let lambda = self.lambda_choice()?;
        let Some(k) = self.ridge.cv else {
            return Ok(match lambda {
                LambdaChoice::Fixed(l) => Selection::Fixed(l),
                LambdaChoice::Gcv { per_output } if !self.data.validation.is_empty() => {
                    Selection::HeldOut { per_output, refit: self.ridge.refit }
                }
                LambdaChoice::Gcv { per_output } => Selection::Gcv { per_output },
            });
        };
        let refuse = |why: &str| Err(Error::config(&self.source, "ridge.cv", why.to_string()));
        if !(2..=10).contains(&k) {
            return refuse(&format!("must be from 2 to 10 folds, got {k}"));
        }
        if self.passes != 1 || components != Components::All {
            return refuse("k-fold selection is for ridge on all D features: drop [pca] and passes = 2 (each fold would need its own PCA)");
        }
        if !self.data.validation.is_empty() {
            return refuse("choose λ either on data.validation or by k-fold, not both");
        }
        if !self.data.unlabeled.is_empty() || self.data.null_labels == NullLabels::Unlabeled {
            return refuse("k-fold selection needs every row labeled (no unlabeled rows)");
        }
        if !matches!(lambda, LambdaChoice::Gcv { .. }) {
            return refuse("k-fold chooses λ from the grid: leave ridge.lambda = \"gcv\"");
        }
        if self.ridge.per_output {
            return refuse("k-fold chooses one shared λ: set ridge.per_output = false");
        }
        if self.solver.kind != SolverKind::Ridge {
            return refuse("k-fold selection is for ridge; the [solver] learners choose λ₁ on data.validation");
        }
        Ok(Selection::KFold { k })
    }

    fn checked_metric(&self) -> Result<Metric> {
        if matches!(self.ridge.metric, Some(Metric::Accuracy | Metric::LogLoss)) && self.task == Task::Regression {
            return Err(Error::config(
                &self.source,
                "ridge.metric",
                "accuracy and log_loss are for classification; use \"rmse\"",
            ));
        }
        Ok(self.ridge.metric.unwrap_or(match self.task {
            Task::Classification => Metric::Accuracy,
            Task::Regression => Metric::Rmse,
        }))
    }

    fn checked_code(&self) -> Result<Option<CodeChoice>> {
        let f = self.source.as_str();
        if self.task == Task::Regression && (self.ridge.codes != Codes::OneVsAll || self.ridge.code_file.is_some()) {
            return Err(Error::config(f, "ridge.codes", "output codes are for classification"));
        }
        if self.ridge.code_file.is_some() && self.ridge.codes != Codes::Ecoc {
            return Err(Error::config(f, "ridge.code_file", "a code file needs codes = \"ecoc\""));
        }
        if self.ridge.codes == Codes::Ecoc && self.ridge.code_length == 0 {
            return Err(Error::config(f, "ridge.code_length", "must be ≥ 1"));
        }
        Ok(match (self.task, self.ridge.codes, &self.ridge.code_file) {
            (Task::Regression, ..) => None,
            (_, Codes::OneVsAll, _) => Some(CodeChoice::OneVsAll),
            (_, Codes::Ecoc, Some(path)) => Some(CodeChoice::File(path.clone())),
            (_, Codes::Ecoc, None) => Some(CodeChoice::Drawn { length: self.ridge.code_length }),
        })
    }

    fn checked_learner(&self, components: Components, semi: bool) -> Result<Learner> {
        let f = self.source.as_str();
        let sv = &self.solver;
        if sv.kind == SolverKind::Ridge {
            if *sv != crate::pipeline::spec::SolverSpec::default() {
                return Err(Error::config(
                    f,
                    "solver.kind",
                    "the [solver] keys are for lasso, elastic_net and group_lasso",
                ));
            }
            let solver = self.ridge.solver;
            self.check_ridge_solver(solver, components != Components::All || self.passes == 2, semi)?;
            return Ok(Learner::Ridge { solver });
        }
        if let Some(l) = sv.lambda {
            if !(l.is_finite() && l > 0.0) {
                return Err(Error::config(f, "solver.lambda", format!("must be a number > 0, got {l}")));
            }
        } else if self.data.validation.is_empty() {
            return Err(Error::config(
                f,
                "solver.lambda",
                "give a λ₁ > 0, or data.validation files to choose it along the path",
            ));
        }
        if !(sv.l2.is_finite() && sv.l2 >= 0.0) {
            return Err(Error::config(f, "solver.l2", format!("must be a number ≥ 0, got {}", sv.l2)));
        }
        if sv.kind == SolverKind::Lasso && sv.l2 != 0.0 {
            return Err(Error::config(f, "solver.l2", "is for elastic_net and group_lasso; the lasso has none"));
        }
        if !(2..=1000).contains(&sv.path) {
            return Err(Error::config(f, "solver.path", format!("must be from 2 to 1000 values, got {}", sv.path)));
        }
        if !(sv.ratio > 0.0 && sv.ratio < 1.0) {
            return Err(Error::config(f, "solver.ratio", format!("must be in (0, 1), got {}", sv.ratio)));
        }
        if !(sv.tolerance > 0.0 && sv.tolerance < 1.0) {
            return Err(Error::config(f, "solver.tolerance", format!("must be in (0, 1), got {}", sv.tolerance)));
        }
        if sv.max_sweeps == 0 {
            return Err(Error::config(f, "solver.max_sweeps", "must be ≥ 1"));
        }
        if self.passes != 1 {
            return Err(Error::config(f, "solver.kind", "the sparse learners run on one pass (passes = 1)"));
        }
        if sv.kind == SolverKind::GroupLasso && components != Components::All {
            return Err(Error::config(
                f,
                "solver.kind",
                "group_lasso's groups are the stages' features: it needs the raw basis (no [pca])",
            ));
        }
        if !self.data.unlabeled.is_empty() && components == Components::All {
            return Err(Error::config(f, "data.unlabeled", "unlabeled rows enter a PCA; the raw basis has none"));
        }
        Ok(Learner::Sparse(SparseSettings {
            kind: sv.kind,
            lambda: sv.lambda,
            l2: sv.l2,
            path: sv.path,
            ratio: sv.ratio,
            tolerance: sv.tolerance,
            max_sweeps: sv.max_sweeps,
            refit: self.ridge.refit,
        }))
    }

    /// The rules of `ridge.solver` the file alone decides; whether the dual can take the
    /// run (its rows against `D/2`) the planner decides with the data.
    fn check_ridge_solver(&self, solver: SolvePath, pca_or_two_pass: bool, semi: bool) -> Result<()> {
        let lambda = self.lambda_choice()?;
        let fixed_positive = matches!(lambda, LambdaChoice::Fixed(l) if l > 0.0);
        let zero = matches!(lambda, LambdaChoice::Fixed(l) if l == 0.0);
        // Two passes solve ridge on the labeled rows' projected features, which have no
        // PCA of their own.
        let direct = self.passes == 2 || (!semi && self.pca.components.is_none() && self.pca.variance.is_none());
        let refuse = |why: &str| Err(Error::config(&self.source, "ridge.solver", why.to_string()));
        match solver {
            path if path.is_cholesky() && !direct => refuse(&format!(
                "\"{}\" solves ridge on all features; PCA and unlabeled rows need \"eigen\"",
                path.name()
            )),
            path if path.is_cholesky() && !fixed_positive => {
                refuse(&format!("\"{}\" needs a fixed ridge.lambda > 0", path.name()))
            }
            SolvePath::Tridiagonal if !direct => {
                refuse("\"tridiagonal\" solves ridge on all features; PCA and unlabeled rows need \"eigen\"")
            }
            SolvePath::Tridiagonal if zero => refuse("λ = 0 is the pseudo-inverse, which needs \"eigen\""),
            SolvePath::Dual if !(self.dual_question(lambda) && !pca_or_two_pass && !semi) => refuse(DUAL_NEEDS),
            _ => Ok(()),
        }
    }

    /// Whether the run asks what the dual answers, from the file alone: ridge at a fixed
    /// λ > 0 or by GCV, one pass, no validation files, k-fold or candidates.
    fn dual_question(&self, lambda: LambdaChoice) -> bool {
        let question =
            matches!(lambda, LambdaChoice::Fixed(l) if l > 0.0) || matches!(lambda, LambdaChoice::Gcv { .. });
        question
            && self.solver.kind == SolverKind::Ridge
            && self.passes == 1
            && self.data.validation.is_empty()
            && self.ridge.cv.is_none()
            && self.candidates.is_none()
    }

    fn checked_candidates(&self, base: &CheckedPipeline) -> Result<Option<CandidateSet>> {
        let Some(c) = &self.candidates else { return Ok(None) };
        let at = format!("stages.{}.candidates", c.stage);
        let refuse = |why: &str| Err(Error::config(&self.source, &at, why.to_string()));
        if self.data.validation.is_empty() && self.ridge.cv.is_none() {
            return refuse("candidates are scored on held-out rows: give data.validation or ridge.cv");
        }
        if self.passes != 1 {
            return refuse("candidates need passes = 1");
        }
        // Each candidate is scored at its own best λ of the grid; a fixed λ scores none.
        if matches!(base.selection, Selection::Fixed(_)) {
            return Err(Error::config(
                &self.source,
                "ridge.lambda",
                format!(
                    "{at} are scored at each one's best λ on held-out rows: leave ridge.lambda = \"gcv\" (the default)"
                ),
            ));
        }
        if self.solver.kind != SolverKind::Ridge {
            return refuse("candidates are for ridge");
        }
        if !self.data.unlabeled.is_empty() {
            return refuse("candidates need every row labeled (no unlabeled files)");
        }
        let pipelines = c.pipelines(self)?.iter().map(PipelineSpec::check).collect::<Result<Vec<_>>>()?;
        Ok(Some(CandidateSet { key: format!("stages.{}.{}", c.stage, c.key), values: c.values.clone(), pipelines }))
    }
}

/// What `ridge.solver = "dual"` needs (and `auto` checks before it keeps the rows).
pub(crate) const DUAL_NEEDS: &str = "\"dual\" keeps the rows instead of statistics: it needs one pass, at most D/2 labeled rows, ridge on all features (no PCA, no unlabeled rows) with a fixed λ > 0 or λ by GCV, no validation files, k-fold or candidates, and a run whose product is a model (not accumulate's part files)";

impl CheckedPipeline {
    /// The pipeline as the file gave it (what a model header records).
    pub fn spec(&self) -> &PipelineSpec {
        &self.spec
    }

    /// Where it was read from, for messages.
    pub fn source(&self) -> &str {
        &self.spec.source
    }

    /// `run.seed`.
    pub fn seed(&self) -> u64 {
        self.spec.run.seed
    }

    /// Passes over the data.
    pub fn passes(&self) -> u32 {
        self.spec.passes
    }

    /// The stages as given (before fitting).
    pub fn stages(&self) -> &[StageSpec] {
        &self.spec.stages
    }

    /// Whether the run asks what the dual answers (the planner adds the rows and `D`).
    pub(crate) fn dual_question(&self) -> bool {
        matches!(self.learner, Learner::Ridge { solver: SolvePath::Auto | SolvePath::Dual })
            && !self.semi
            && self.components == Components::All
            && self.spec.dual_question(self.selection.lambda())
    }

    /// Columns to read for training.
    pub fn columns(&self) -> ColumnSpec {
        let d = &self.spec.data;
        ColumnSpec {
            features: match &d.feature_list {
                Some(l) => FeatureColumns::List(l.clone()),
                None => FeatureColumns::Columns(d.features.clone()),
            },
            label: d.label.clone(),
            targets: d.targets.clone(),
            keep: Vec::new(),
            null_labels_unlabeled: d.null_labels == NullLabels::Unlabeled,
        }
    }

    /// Columns to read from the other labeled inputs (test, validation): no null labels.
    pub fn labeled_columns(&self) -> ColumnSpec {
        ColumnSpec { null_labels_unlabeled: false, ..self.columns() }
    }

    /// Columns to read from unlabeled files: the features only.
    pub fn feature_only_columns(&self) -> ColumnSpec {
        ColumnSpec { label: None, targets: Vec::new(), null_labels_unlabeled: false, ..self.columns() }
    }

    /// The sparse learner's settings, when the learner is one.
    pub fn sparse(&self) -> Option<&SparseSettings> {
        match &self.learner {
            Learner::Sparse(s) => Some(s),
            Learner::Ridge { .. } => None,
        }
    }
}
