//! The typed library API: a pipeline built in code (or read from a file), fitted on
//! Arrow record batches in memory or on Parquet files, and a [`Model`] that predicts on
//! a record batch or a row-major slice. The pipeline file and the command line are a
//! thin layer over the same driver; this is the surface other languages bind to.
//!
//! Batches in memory are held for the run (the driver reads its input more than once:
//! the class scan, the pre-pass sample, the pass); for data larger than memory, give
//! Parquet paths, which are streamed.

mod feature_map;

pub use feature_map::FeatureMap;

use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;

use crate::error::{Error, Result};
use crate::model::Model;
use crate::pipeline::predict::score_rows;
use crate::pipeline::predict::{predict_rows, PredictOptions, Rows};
use crate::pipeline::run::train_prepared;
use crate::pipeline::spec::{DataSpec, LambdaValue, NullLabels, PipelineSpec, Task};
use crate::pipeline::stream::nonnegative_message;
use crate::pipeline::SolveOutcome;
use crate::pipeline::{
    accumulate_part, prepare, prepare_inputs, solve_loaded, CheckedPipeline, Reporter, RunOptions, RunReport,
    Statistics,
};
use crate::session::Session;
use crate::sketch::StageSpec;
use crate::source::{Classes, Dataset};
use crate::stats::Precision;

/// How λ is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lambda {
    /// Generalised cross-validation over the grid (the default).
    Gcv,
    /// Generalised cross-validation with one λ per output.
    GcvPerOutput,
    /// A fixed λ ≥ 0 (solved by one Cholesky factorisation when there is no PCA).
    Fixed(f64),
}

/// A pipeline: columns, stages, PCA, ridge and run settings, checked like a pipeline
/// file when it is fitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    spec: PipelineSpec,
}

impl Pipeline {
    fn new(task: Task, label: Option<String>, targets: Vec<String>) -> Pipeline {
        let data = DataSpec {
            train: Vec::new(),
            test: Vec::new(),
            features: Vec::new(),
            feature_list: None,
            label,
            targets,
            unlabeled: Vec::new(),
            validation: Vec::new(),
            null_labels: NullLabels::default(),
            classes: None,
        };
        Pipeline {
            spec: PipelineSpec {
                source: "pipeline built in code".into(),
                task,
                passes: 1,
                data,
                stages: Vec::new(),
                pca: Default::default(),
                ridge: Default::default(),
                solver: Default::default(),
                run: Default::default(),
                candidates: None,
                storage: Vec::new(),
            },
        }
    }

    /// A classifier of the column `label` (integers or strings).
    pub fn classification(label: impl Into<String>) -> Pipeline {
        Pipeline::new(Task::Classification, Some(label.into()), Vec::new())
    }

    /// A regressor of the numeric columns `targets`.
    pub fn regression<S: Into<String>>(targets: impl IntoIterator<Item = S>) -> Pipeline {
        Pipeline::new(Task::Regression, None, targets.into_iter().map(Into::into).collect())
    }

    /// A pipeline file with `--set`-style overrides (`key=value`).
    pub fn load(path: &Path, overrides: &[String]) -> Result<Pipeline> {
        Pipeline::load_with(&Session::new(), path, overrides)
    }

    /// [`Pipeline::load`] in `session` (a pipeline file in an object store is read with
    /// its storage options).
    pub fn load_with(session: &Session, path: &Path, overrides: &[String]) -> Result<Pipeline> {
        Ok(Pipeline { spec: PipelineSpec::load(session, path, overrides)? })
    }

    /// Pipeline text (a pipeline file's content; `name` stands for the file in messages).
    pub fn from_toml_str(text: &str, name: &str) -> Result<Pipeline> {
        Ok(Pipeline { spec: PipelineSpec::from_toml_str(text, name)? })
    }

    /// Fixes the class set instead of scanning it from the training rows: an incremental
    /// fit knows it before it has seen every batch. A label outside it is an error.
    pub fn classes(mut self, classes: Classes) -> Self {
        self.spec.data.classes = Some(classes);
        self
    }

    /// Feature columns by name or glob (default: every numeric column but the label and
    /// targets).
    pub fn features<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.spec.data.features = names.into_iter().map(Into::into).collect();
        self
    }

    /// One list column holding each row's features, instead of [`Pipeline::features`].
    pub fn feature_list(mut self, column: impl Into<String>) -> Self {
        self.spec.data.feature_list = Some(column.into());
        self
    }

    /// Appends a sketch stage (stages are concatenated).
    pub fn stage(mut self, stage: impl Into<StageSpec>) -> Self {
        self.spec.stages.push(stage.into());
        self
    }

    /// Keeps the top `components` PCA components.
    pub fn pca(mut self, components: usize) -> Self {
        self.spec.pca.components = Some(components);
        self
    }

    /// How λ is chosen.
    pub fn lambda(mut self, lambda: Lambda) -> Self {
        let (value, per_output) = match lambda {
            Lambda::Gcv => (LambdaValue::Word("gcv".into()), false),
            Lambda::GcvPerOutput => (LambdaValue::Word("gcv".into()), true),
            Lambda::Fixed(l) => (LambdaValue::Number(l), false),
        };
        self.spec.ridge.lambda = value;
        self.spec.ridge.per_output = per_output;
        self
    }

    /// The seed of every random parameter (same data, pipeline and seed: same model).
    pub fn seed(mut self, seed: u64) -> Self {
        self.spec.run.seed = seed;
        self
    }

    /// Worker threads (0: all cores).
    pub fn threads(mut self, threads: usize) -> Self {
        self.spec.run.threads = threads;
        self
    }

    /// Precision of the Gram products.
    pub fn gram(mut self, precision: Precision) -> Self {
        self.spec.run.gram = precision;
        self
    }

    /// Files of held-out rows: λ is chosen on them (by accuracy or RMSE).
    pub fn validation<P: Into<PathBuf>>(mut self, files: impl IntoIterator<Item = P>) -> Self {
        self.spec.data.validation = files.into_iter().map(Into::into).collect();
        self
    }

    /// The full specification, as a pipeline file would give it.
    pub fn spec(&self) -> &PipelineSpec {
        &self.spec
    }

    /// Every other setting (two passes, per-stage PCA, solver, memory limit, …).
    pub fn spec_mut(&mut self) -> &mut PipelineSpec {
        &mut self.spec
    }

    /// Checks every setting, naming the key of the first that is wrong, and returns the
    /// checked pipeline.
    pub fn check(&self) -> Result<CheckedPipeline> {
        self.spec.check()
    }

    /// Fits on record batches in memory. Each batch is a unit of work (like a Parquet
    /// row group) and all must share one schema; errors name the batch, row and column.
    pub fn fit(&self, batches: impl IntoIterator<Item = RecordBatch>) -> Result<Model> {
        self.fit_reported(batches).map(|(m, _)| m)
    }

    /// [`Pipeline::fit`], with what the run reported beside the model (its plan, memory,
    /// passes, solve and λ).
    pub fn fit_reported(&self, batches: impl IntoIterator<Item = RecordBatch>) -> Result<(Model, RunReport)> {
        let checked = self.check()?;
        let data = Dataset::from_batches("record batches", batches.into_iter().collect(), checked.columns())?;
        let mut report = Reporter::silent();
        let prep = prepare_inputs(&checked, data, None, &mut report)?;
        let model = train_prepared(&checked, &RunOptions::default(), prep, &mut report)?;
        Ok((model, report.take()))
    }

    /// The statistics of shard `i` of `n` of record batches in memory (every n-th batch,
    /// from batch i): merge shards with [`Pipeline::solve`], or save them as the
    /// command's part files. One-pass pipelines (a sharded two-pass run goes through
    /// the command line's `--pass1` files).
    pub fn accumulate(
        &self,
        batches: impl IntoIterator<Item = RecordBatch>,
        shard: (usize, usize),
    ) -> Result<Statistics> {
        let checked = self.one_pass_only()?;
        let data = Dataset::from_batches("record batches", batches.into_iter().collect(), checked.columns())?;
        let mut report = Reporter::silent();
        let prep = prepare_inputs(&checked, data, None, &mut report)?;
        let opts = RunOptions { keep_statistics: true, ..RunOptions::default() };
        accumulate_part(&checked, prep, (shard, None), &opts, &mut report)
    }

    /// An in-memory fit that keeps what continues it: with at most `D/2` rows (and a
    /// question the dual path answers) the model, trained by the dual solve, whose
    /// continuation is the rows themselves; otherwise the statistics of all the rows,
    /// which [`Pipeline::solve`] turns into the model [`Pipeline::fit`] would give.
    pub fn fit_or_accumulate(&self, batches: impl IntoIterator<Item = RecordBatch>) -> Result<InMemoryFit> {
        let checked = self.one_pass_only()?;
        let data = Dataset::from_batches("record batches", batches.into_iter().collect(), checked.columns())?;
        let mut report = Reporter::silent();
        let prep = prepare_inputs(&checked, data, None, &mut report)?;
        let (plan, memory) = crate::pipeline::Plan::decide(&checked, &prep.facts(), &RunOptions::default())?;
        memory.check()?;
        if plan.keeps_rows() {
            let model = train_prepared(&checked, &RunOptions::default(), prep, &mut report)?;
            return Ok(InMemoryFit::Model(Box::new(model)));
        }
        let opts = RunOptions { keep_statistics: true, ..RunOptions::default() };
        let stats = accumulate_part(&checked, prep, ((0, 1), None), &opts, &mut report)?;
        Ok(InMemoryFit::Statistics(Box::new(stats)))
    }

    /// [`Pipeline::accumulate`] over Parquet files: every n-th row group. Storage
    /// options come from the environment and the pipeline's `[storage]` table;
    /// [`Pipeline::accumulate_files_with`] takes a session.
    pub fn accumulate_files<P: Into<PathBuf>>(
        &self,
        files: impl IntoIterator<Item = P>,
        shard: (usize, usize),
    ) -> Result<Statistics> {
        self.accumulate_files_with(&Session::new(), files, shard)
    }

    /// [`Pipeline::accumulate_files`] in `session`.
    pub fn accumulate_files_with<P: Into<PathBuf>>(
        &self,
        session: &Session,
        files: impl IntoIterator<Item = P>,
        shard: (usize, usize),
    ) -> Result<Statistics> {
        self.one_pass_only()?;
        let mut spec = self.spec.clone();
        spec.data.train = files.into_iter().map(Into::into).collect();
        let checked = spec.check()?;
        let mut report = Reporter::silent();
        let prep = prepare(session, &checked, &mut report)?;
        let opts = RunOptions { session: session.clone(), keep_statistics: true, ..RunOptions::default() };
        accumulate_part(&checked, prep, (shard, None), &opts, &mut report)
    }

    /// Merges the shards' statistics (each once, all from this pipeline and data, none
    /// missing) and solves them into a model: the model one process would fit.
    pub fn solve(&self, parts: Vec<Statistics>) -> Result<Model> {
        let checked = self.one_pass_only()?;
        let opts = RunOptions { from_parts: true, ..RunOptions::default() };
        match solve_loaded(&checked, parts, (false, None, None), &opts, &mut Reporter::silent())? {
            SolveOutcome::Model(m) => Ok(*m),
            SolveOutcome::Pass1Merged => Err(Error::bug("a one-pass solve merged pass one")),
        }
    }

    /// Adds record batches to statistics this pipeline accumulated, mapped with their
    /// fitted parameters (see [`Statistics::add`]).
    pub fn add(&self, stats: &mut Statistics, batches: impl IntoIterator<Item = RecordBatch>) -> Result<()> {
        let checked = self.one_pass_only()?;
        stats.add(&checked, batches.into_iter().collect())
    }

    /// The checked pipeline, refused when it has two passes.
    fn one_pass_only(&self) -> Result<CheckedPipeline> {
        if self.spec.passes != 1 {
            return Err(Error::config(
                &self.spec.source,
                "passes",
                "the library's accumulate and solve are one-pass; shard a two-pass run with the command line's `accumulate --pass1`",
            ));
        }
        self.check()
    }

    /// The maps this pipeline's pre-pass fits on Parquet files (paths or globs), in
    /// `session`: save them with [`crate::maps::Maps::save_with`] and name the file in
    /// `run.maps` (or [`Pipeline::maps`]), and every run over any data maps its rows alike,
    /// so their statistics merge.
    pub fn fit_maps_with<P: Into<PathBuf>>(
        &self,
        session: &Session,
        files: impl IntoIterator<Item = P>,
    ) -> Result<crate::maps::Maps> {
        let mut spec = self.spec.clone();
        spec.data.train = files.into_iter().map(Into::into).collect();
        let checked = spec.check()?;
        crate::pipeline::fit_maps(session, &checked, &mut Reporter::silent())
    }

    /// Uses the fitted maps of a maps file (`run.maps`) instead of a pre-pass.
    pub fn maps(mut self, path: impl Into<PathBuf>) -> Self {
        self.spec.run.maps = Some(path.into());
        self
    }

    /// Fits on Parquet files (paths or globs), streamed in bounded memory. Storage
    /// options come from the environment and the pipeline's `[storage]` table;
    /// [`Pipeline::fit_files_with`] takes a session.
    pub fn fit_files<P: Into<PathBuf>>(&self, files: impl IntoIterator<Item = P>) -> Result<Model> {
        self.fit_files_with(&Session::new(), files)
    }

    /// [`Pipeline::fit_files`] in `session`: its storage options, and its inputs are the
    /// files no output of the session may replace.
    pub fn fit_files_with<P: Into<PathBuf>>(
        &self,
        session: &Session,
        files: impl IntoIterator<Item = P>,
    ) -> Result<Model> {
        let mut spec = self.spec.clone();
        spec.data.train = files.into_iter().map(Into::into).collect();
        let checked = spec.check()?;
        let mut report = Reporter::silent();
        let prep = prepare(session, &checked, &mut report)?;
        let opts = RunOptions { session: session.clone(), ..RunOptions::default() };
        train_prepared(&checked, &opts, prep, &mut report)
    }
}

/// What [`Pipeline::fit_or_accumulate`] gives.
#[derive(Debug)]
pub enum InMemoryFit {
    /// Trained in the dual (at most `D/2` rows): no statistics were formed.
    Model(Box<Model>),
    /// The statistics of every row, to solve.
    Statistics(Box<Statistics>),
}

pub(crate) fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Model {
    /// The prediction columns for a record batch: `prediction` (the class label, or the
    /// value for one target; `prediction_<target>` for several), plus `score_<class>`
    /// columns when `scores` is set. The batch needs the model's feature columns.
    pub fn predict_batch(&self, batch: &RecordBatch, scores: bool) -> Result<RecordBatch> {
        if batch.num_rows() == 0 {
            return Err(self.refuse("the batch has no rows"));
        }
        let opts = PredictOptions {
            session: Session::new(),
            keep: Vec::new(),
            scores,
            chunk_rows: batch.num_rows(),
            threads: all_cores(),
            progress: false,
        };
        let mut out = predict_rows(self, Rows::Batches(std::slice::from_ref(batch)), &opts)?;
        match out.len() {
            1 => Ok(out.remove(0)),
            _ => Err(Error::bug("one batch gives one prediction batch")),
        }
    }

    /// The decision values of the rows of record batches holding the model's feature
    /// columns, checked as `predict` checks a file: a classifier's per class
    /// ([`Model::class_scores`]), a regression's per target; with `pca`, the PCA
    /// features (`rows × ΣE`) instead. Returns the values (row-major) and the rows.
    pub fn score_batches(&self, batches: &[RecordBatch], pca: bool) -> Result<(Vec<f64>, usize)> {
        score_rows(&Session::new(), self, Rows::Batches(batches), pca, all_cores())
    }

    /// The decision values of row-major features `x` (`rows × d`, columns in the
    /// model's feature order), row-major: per class for a classifier (one column for
    /// binary one-vs-all, else one per class, ECOC included: [`Model::class_scores`]),
    /// per target for a regression.
    pub fn decision_function(&self, x: &[f32]) -> Result<Vec<f64>> {
        let rows = self.rows_of(x)?;
        let mut z = Vec::new();
        Ok(self.class_scores(&self.scores(x, rows, &mut z, all_cores())))
    }

    /// The PCA features (`rows × ΣE`, row-major) of row-major features `x`, checked as
    /// [`Model::decision_function`] checks them.
    pub fn pca_features(&self, x: &[f32]) -> Result<Vec<f64>> {
        if self.header.projections.is_empty() {
            return Err(
                self.refuse("the model has no PCA projection (it was trained without [pca]); nothing to transform")
            );
        }
        let rows = self.rows_of(x)?;
        let mut z = Vec::new();
        Ok(self.transform(x, rows, &mut z, all_cores()))
    }

    /// The predicted class index of every row of row-major features `x` (see
    /// [`crate::source::Classes::name`] for the labels).
    pub fn predict_classes(&self, x: &[f32]) -> Result<Vec<usize>> {
        if self.header.classes.is_none() {
            return Err(self.refuse("a regression model has no classes; use decision_function"));
        }
        Ok(self.output_code().classify_scores(&self.decision_function(x)?))
    }

    fn rows_of(&self, x: &[f32]) -> Result<usize> {
        let d = self.header.features.dim;
        if d == 0 || !x.len().is_multiple_of(d) {
            return Err(self.refuse(format!("{} values are not whole rows of the model's {d} features", x.len())));
        }
        if let Some(p) = x.iter().position(|v| !v.is_finite()) {
            return Err(self.refuse(format!("row {}, feature {}: value {} is not finite", p / d, p % d, x[p])));
        }
        if self.pipeline.needs_nonnegative() {
            if let Some(p) = x.iter().position(|&v| v < 0.0) {
                return Err(self.refuse(format!("row {}, feature {}: {}", p / d, p % d, nonnegative_message(x[p]))));
            }
        }
        Ok(x.len() / d)
    }
}
