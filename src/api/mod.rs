//! The typed library API: a pipeline built in code (or read from a file), fitted on
//! Arrow record batches in memory or on Parquet files, and a [`Model`](crate::Model) that predicts on
//! a record batch or a row-major slice. The pipeline file and the command line are a
//! thin layer over the same driver; this is the surface other languages bind to.
//!
//! Batches in memory are held for the run (the driver reads its input more than once:
//! the class scan, the pre-pass sample, the pass); for data larger than memory, give
//! Parquet paths, which are streamed.
//!
//! ```
//! use sketchfit::sketch::TensorSketchSpec;
//! use sketchfit::{Lambda, Pipeline};
//!
//! let pipeline = Pipeline::classification("label")
//!     .features(["px*"])
//!     .stage(TensorSketchSpec { degree: 3, dim: 1024, ..Default::default() })
//!     .pca(256)
//!     .lambda(Lambda::Gcv)
//!     .seed(7);
//! let model = pipeline.fit_files(["data/digits_train.parquet"])?;
//! // One row of the digits' 64 features: one score per class.
//! assert_eq!(model.decision_function(&[0.5f32; 64])?.len(), 10);
//! # Ok::<(), sketchfit::Error>(())
//! ```

pub mod commands;
mod feature_map;
mod fit;
mod model;
mod parts;

pub use feature_map::FeatureMap;
pub use fit::InMemoryFit;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::pipeline::spec::{DataSpec, LambdaValue, NullLabels, PipelineSpec, Task};
use crate::pipeline::CheckedPipeline;
use crate::session::Session;
use crate::sketch::StageSpec;
use crate::source::Classes;
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
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::classification("label").features(["px*"]);
    /// assert!(pipeline.spec().data.label.as_deref() == Some("label"));
    /// ```
    pub fn classification(label: impl Into<String>) -> Pipeline {
        Pipeline::new(Task::Classification, Some(label.into()), Vec::new())
    }

    /// A regressor of the numeric columns `targets`.
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::regression(["price", "demand"]).features(["x*"]);
    /// assert_eq!(pipeline.spec().data.targets.len(), 2);
    /// ```
    pub fn regression<S: Into<String>>(targets: impl IntoIterator<Item = S>) -> Pipeline {
        Pipeline::new(Task::Regression, None, targets.into_iter().map(Into::into).collect())
    }

    /// A pipeline file with `--set`-style overrides (`key=value`).
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::load("pipelines/digits.toml".as_ref(), &["stages.0.dim=1024".into()])?;
    /// assert_eq!(pipeline.spec().stages[0].dim(), Some(1024));
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn load(path: &Path, overrides: &[String]) -> Result<Pipeline> {
        Pipeline::load_with(&Session::new(), path, overrides)
    }

    /// [`Pipeline::load`] in `session` (a pipeline file in an object store is read with
    /// its storage options).
    ///
    /// ```
    /// use sketchfit::{Pipeline, Session};
    /// let session = Session::new();
    /// let pipeline = Pipeline::load_with(&session, "pipelines/digits.toml".as_ref(), &[])?;
    /// pipeline.check()?;
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn load_with(session: &Session, path: &Path, overrides: &[String]) -> Result<Pipeline> {
        Ok(Pipeline { spec: PipelineSpec::load(session, path, overrides)? })
    }

    /// Pipeline text (a pipeline file's content; `name` stands for the file in messages).
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// let text = r#"
    /// task = "classification"
    /// [data]
    /// train = []
    /// label = "label"
    /// [[stages]]
    /// kind = "rff"
    /// dim = 256
    /// "#;
    /// let pipeline = Pipeline::from_toml_str(text, "inline")?;
    /// assert_eq!(pipeline.spec().stages.len(), 1);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn from_toml_str(text: &str, name: &str) -> Result<Pipeline> {
        Ok(Pipeline { spec: PipelineSpec::from_toml_str(text, name)? })
    }

    /// Fixes the class set instead of scanning it from the training rows: an incremental
    /// fit knows it before it has seen every batch. A label outside it is an error.
    ///
    /// ```
    /// use sketchfit::source::Classes;
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::classification("label").classes(Classes::Int((0..10).collect()));
    /// assert!(pipeline.spec().data.classes.is_some());
    /// ```
    pub fn classes(mut self, classes: Classes) -> Self {
        self.spec.data.classes = Some(classes);
        self
    }

    /// Feature columns by name or glob (default: every numeric column but the label and
    /// targets).
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::classification("label").features(["px*", "extra"]);
    /// assert_eq!(pipeline.spec().data.features, ["px*", "extra"]);
    /// ```
    pub fn features<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.spec.data.features = names.into_iter().map(Into::into).collect();
        self
    }

    /// One list column holding each row's features, instead of [`Pipeline::features`].
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::classification("label").feature_list("embedding");
    /// assert_eq!(pipeline.spec().data.feature_list.as_deref(), Some("embedding"));
    /// ```
    pub fn feature_list(mut self, column: impl Into<String>) -> Self {
        self.spec.data.feature_list = Some(column.into());
        self
    }

    /// Appends a sketch stage (stages are concatenated).
    ///
    /// ```
    /// use sketchfit::sketch::{RffSpec, TensorSketchSpec};
    /// use sketchfit::Pipeline;
    /// // Two maps side by side: D = 512 + 256 features.
    /// let pipeline = Pipeline::classification("label")
    ///     .stage(TensorSketchSpec { degree: 3, dim: 512, ..Default::default() })
    ///     .stage(RffSpec { dim: 256, sigma: Some(1.0), ..Default::default() });
    /// assert_eq!(pipeline.spec().stages.len(), 2);
    /// ```
    pub fn stage(mut self, stage: impl Into<StageSpec>) -> Self {
        self.spec.stages.push(stage.into());
        self
    }

    /// Keeps the top `components` PCA components.
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::classification("label").pca(128);
    /// assert_eq!(pipeline.spec().pca.components, Some(128));
    /// ```
    pub fn pca(mut self, components: usize) -> Self {
        self.spec.pca.components = Some(components);
        self
    }

    /// How λ is chosen.
    ///
    /// ```
    /// use sketchfit::{Lambda, Pipeline};
    /// let gcv = Pipeline::classification("label").lambda(Lambda::Gcv);
    /// let fixed = Pipeline::classification("label").lambda(Lambda::Fixed(1e-3));
    /// assert_ne!(gcv, fixed);
    /// ```
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
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// assert_eq!(Pipeline::classification("label").seed(42).spec().run.seed, 42);
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.spec.run.seed = seed;
        self
    }

    /// Worker threads (0: all cores).
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// assert_eq!(Pipeline::classification("label").threads(2).spec().run.threads, 2);
    /// ```
    pub fn threads(mut self, threads: usize) -> Self {
        self.spec.run.threads = threads;
        self
    }

    /// Precision of the Gram products.
    ///
    /// ```
    /// use sketchfit::stats::Precision;
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::classification("label").gram(Precision::F32);
    /// assert_eq!(pipeline.spec().run.gram, Precision::F32);
    /// ```
    pub fn gram(mut self, precision: Precision) -> Self {
        self.spec.run.gram = precision;
        self
    }

    /// Files of held-out rows: λ is chosen on them (by accuracy or RMSE).
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::classification("label").validation(["data/digits_test.parquet"]);
    /// assert_eq!(pipeline.spec().data.validation.len(), 1);
    /// ```
    pub fn validation<P: Into<PathBuf>>(mut self, files: impl IntoIterator<Item = P>) -> Self {
        self.spec.data.validation = files.into_iter().map(Into::into).collect();
        self
    }

    /// Uses the fitted maps of a maps file (`run.maps`) instead of a pre-pass.
    ///
    /// ```
    /// # use sketchfit::sketch::NystromSpec;
    /// # use sketchfit::Pipeline;
    /// # let pipeline = Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(NystromSpec { dim: 128, ..Default::default() })
    /// #     .seed(7);
    /// let maps = std::env::temp_dir().join(format!("doc-maps-{}.maps", std::process::id()));
    /// pipeline.fit_maps_with(&sketchfit::Session::new(), ["data/digits_train.parquet"])?.save_with(&sketchfit::Session::new(), &maps)?;
    /// // Every run over any data now maps its rows with these landmarks.
    /// let model = pipeline.clone().maps(&maps).fit_files(["data/digits_test.parquet"])?;
    /// assert_eq!(model.header.dim, 128);
    /// # std::fs::remove_file(&maps).ok();
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn maps(mut self, path: impl Into<PathBuf>) -> Self {
        self.spec.run.maps = Some(path.into());
        self
    }

    /// The full specification, as a pipeline file would give it.
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::load("pipelines/digits.toml".as_ref(), &[])?;
    /// println!("{} stage(s), seed {}", pipeline.spec().stages.len(), pipeline.spec().run.seed);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn spec(&self) -> &PipelineSpec {
        &self.spec
    }

    /// Every other setting (two passes, per-stage PCA, solver, memory limit, …).
    ///
    /// ```
    /// use sketchfit::Pipeline;
    /// let mut pipeline = Pipeline::load("pipelines/digits.toml".as_ref(), &[])?;
    /// pipeline.spec_mut().run.memory_limit_mib = 4096;
    /// pipeline.check()?;
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn spec_mut(&mut self) -> &mut PipelineSpec {
        &mut self.spec
    }

    /// Checks every setting, naming the key of the first that is wrong, and returns the
    /// checked pipeline.
    ///
    /// ```
    /// use sketchfit::sketch::RffSpec;
    /// use sketchfit::{Lambda, Pipeline};
    /// let bad = Pipeline::classification("label").stage(RffSpec::default()).lambda(Lambda::Fixed(-1.0));
    /// let err = bad.check().unwrap_err();
    /// assert!(err.to_string().contains("ridge.lambda"), "{err}");
    /// ```
    pub fn check(&self) -> Result<CheckedPipeline> {
        self.spec.check()
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
}

pub(crate) fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
