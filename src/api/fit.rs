//! Fitting a pipeline in one call: on record batches in memory or on Parquet files
//! (streamed), with the run's report or with what continues an in-memory fit.

use std::path::PathBuf;

use arrow_array::RecordBatch;

use super::Pipeline;
use crate::error::Result;
use crate::model::Model;
use crate::pipeline::run::train_prepared;
use crate::pipeline::{accumulate_part, prepare, prepare_inputs, Reporter, RunOptions, RunReport, Shard, Statistics};
use crate::session::Session;
use crate::source::Dataset;

impl Pipeline {
    /// Fits on record batches in memory. Each batch is a unit of work (like a Parquet
    /// row group) and all must share one schema; errors name the batch, row and column.
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// use sketchfit::sketch::TensorSketchSpec;
    /// use sketchfit::Pipeline;
    /// let pipeline = Pipeline::classification("label")
    ///     .features(["px*"])
    ///     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    ///     .seed(7);
    /// let model = pipeline.fit(read("data/digits_train.parquet"))?;
    /// let test = read("data/digits_test.parquet");
    /// let predicted = model.predict_batch(&test[0], false)?;
    /// assert_eq!(predicted.num_rows(), test[0].num_rows());
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn fit(&self, batches: impl IntoIterator<Item = RecordBatch>) -> Result<Model> {
        self.fit_reported(batches).map(|(m, _)| m)
    }

    /// [`Pipeline::fit`], with what the run reported beside the model (its plan, memory,
    /// passes, solve and λ).
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # use sketchfit::Pipeline;
    /// # let pipeline = Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .seed(7);
    /// let (model, report) = pipeline.fit_reported(read("data/digits_train.parquet"))?;
    /// println!("{} rows, D = {}", model.header.rows, model.header.dim);
    /// assert!(report.solve.is_some());
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn fit_reported(&self, batches: impl IntoIterator<Item = RecordBatch>) -> Result<(Model, RunReport)> {
        let checked = self.check()?;
        let data = Dataset::from_batches("record batches", batches.into_iter().collect(), checked.columns())?;
        let mut report = Reporter::silent();
        let prep = prepare_inputs(&checked, data, None, &mut report)?;
        let model = train_prepared(&checked, &RunOptions::default(), prep, &mut report)?;
        Ok((model, report.take()))
    }

    /// Fits on Parquet files (paths or globs), streamed in bounded memory. Storage
    /// options come from the environment and the pipeline's `[storage]` table;
    /// [`Pipeline::fit_files_with`] takes a session.
    ///
    /// ```
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # use sketchfit::Pipeline;
    /// # let pipeline = Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .seed(7);
    /// let model = pipeline.fit_files(["data/digits_train.parquet"])?;
    /// model.save(&std::env::temp_dir().join(format!("doc-{}.sfm", std::process::id())))?;
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn fit_files<P: Into<PathBuf>>(&self, files: impl IntoIterator<Item = P>) -> Result<Model> {
        self.fit_files_with(&Session::new(), files)
    }

    /// [`Pipeline::fit_files`] in `session`: its storage options, and its inputs are the
    /// files no output of the session may replace.
    ///
    /// ```
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # use sketchfit::Pipeline;
    /// # let pipeline = Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .seed(7);
    /// // A session holds the storage options (for s3:// and the other stores) and the
    /// // files this call reads, which no output of the session may replace.
    /// let session = sketchfit::Session::new();
    /// let model = pipeline.fit_files_with(&session, ["data/digits_train.parquet"])?;
    /// assert_eq!(model.header.rows, 1347);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
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

    /// An in-memory fit that keeps what continues it: with at most `D/2` rows (and a
    /// question the dual path answers) the model, trained by the dual solve, whose
    /// continuation is the rows themselves; otherwise the statistics of all the rows,
    /// which [`Pipeline::solve`] turns into the model [`Pipeline::fit`] would give.
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # use sketchfit::Pipeline;
    /// # let pipeline = Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .seed(7);
    /// use sketchfit::api::InMemoryFit;
    /// let model = match pipeline.fit_or_accumulate(read("data/digits_train.parquet"))? {
    ///     InMemoryFit::Model(model) => *model,
    ///     InMemoryFit::Statistics(stats) => pipeline.solve(vec![*stats])?,
    /// };
    /// assert_eq!(model.header.rows, 1347);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
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
        let stats = accumulate_part(&checked, prep, Shard::ALL, None, &opts, &mut report)?;
        Ok(InMemoryFit::Statistics(Box::new(stats)))
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
