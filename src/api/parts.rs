//! Statistics as parts: accumulated by shard or over a maps file, added to, and merged
//! into a model (weighted, for parts of several days); and the maps file that lets parts
//! of any data merge.

use std::path::PathBuf;

use arrow_array::RecordBatch;

use super::Pipeline;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::pipeline::{
    accumulate_part, prepare, prepare_inputs, solve_loaded, PartWeights, PartsSolve, Reporter, RunOptions, Shard,
    SolveOutcome, Statistics,
};
use crate::session::Session;
use crate::source::Dataset;

impl Pipeline {
    /// The statistics of shard `i` of `n` of record batches in memory (every n-th batch,
    /// from batch i): merge shards with [`Pipeline::solve`], or save them as the
    /// command's part files. One-pass pipelines (a sharded two-pass run goes through
    /// the command line's `--pass1` files).
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
    /// let batches = read("data/digits_train.parquet");
    /// // Two shards, as two workers would accumulate them, merged by the solve.
    /// let a = pipeline.accumulate(batches.clone(), (0, 2))?;
    /// let b = pipeline.accumulate(batches, (1, 2))?;
    /// let model = pipeline.solve(vec![a, b])?;
    /// assert_eq!(model.header.rows, 1347);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn accumulate(
        &self,
        batches: impl IntoIterator<Item = RecordBatch>,
        shard: impl Into<Shard>,
    ) -> Result<Statistics> {
        let shard = shard.into().check("shard")?;
        let checked = self.one_pass_only()?;
        let data = Dataset::from_batches("record batches", batches.into_iter().collect(), checked.columns())?;
        let mut report = Reporter::silent();
        let prep = prepare_inputs(&checked, data, None, &mut report)?;
        let opts = RunOptions { keep_statistics: true, ..RunOptions::default() };
        accumulate_part(&checked, prep, shard, None, &opts, &mut report)
    }

    /// [`Pipeline::accumulate`] over Parquet files: every n-th row group. Storage
    /// options come from the environment and the pipeline's `[storage]` table;
    /// [`Pipeline::accumulate_files_with`] takes a session.
    ///
    /// ```
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # use sketchfit::Pipeline;
    /// # let pipeline = Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .seed(7);
    /// let parts = (0..3)
    ///     .map(|i| pipeline.accumulate_files(["data/digits_train.parquet"], (i, 3)))
    ///     .collect::<sketchfit::Result<Vec<_>>>()?;
    /// let model = pipeline.solve(parts)?;
    /// assert_eq!(model.header.rows, 1347);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn accumulate_files<P: Into<PathBuf>>(
        &self,
        files: impl IntoIterator<Item = P>,
        shard: impl Into<Shard>,
    ) -> Result<Statistics> {
        self.accumulate_files_with(&Session::new(), files, shard)
    }

    /// [`Pipeline::accumulate_files`] in `session`.
    ///
    /// ```
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # use sketchfit::Pipeline;
    /// # let pipeline = Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .seed(7);
    /// let session = sketchfit::Session::new();
    /// let part = pipeline.accumulate_files_with(&session, ["data/digits_train.parquet"], (0, 1))?;
    /// assert_eq!(part.rows(), 1347);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn accumulate_files_with<P: Into<PathBuf>>(
        &self,
        session: &Session,
        files: impl IntoIterator<Item = P>,
        shard: impl Into<Shard>,
    ) -> Result<Statistics> {
        let shard = shard.into().check("shard")?;
        self.one_pass_only()?;
        let mut spec = self.spec.clone();
        spec.data.train = files.into_iter().map(Into::into).collect();
        let checked = spec.check()?;
        let mut report = Reporter::silent();
        let prep = prepare(session, &checked, &mut report)?;
        let opts = RunOptions { session: session.clone(), keep_statistics: true, ..RunOptions::default() };
        accumulate_part(&checked, prep, shard, None, &opts, &mut report)
    }

    /// Adds record batches to statistics this pipeline accumulated, mapped with their
    /// fitted parameters (see [`Statistics::add`]).
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
    /// let mut stats = pipeline.accumulate_files(["data/digits_train.parquet"], (0, 1))?;
    /// // Rows that arrive later, mapped with the same fitted parameters.
    /// pipeline.add(&mut stats, read("data/digits_test.parquet"))?;
    /// assert_eq!(stats.rows(), 1347 + 450);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn add(&self, stats: &mut Statistics, batches: impl IntoIterator<Item = RecordBatch>) -> Result<()> {
        let checked = self.one_pass_only()?;
        stats.add(&checked, batches.into_iter().collect())
    }

    /// The maps this pipeline's pre-pass fits on Parquet files (paths or globs), in
    /// `session`: save them with [`crate::maps::Maps::save_with`] and name the file in
    /// `run.maps` (or [`Pipeline::maps`]), and every run over any data maps its rows alike,
    /// so their statistics merge.
    ///
    /// ```
    /// # use sketchfit::sketch::NystromSpec;
    /// # use sketchfit::Pipeline;
    /// # let pipeline = Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(NystromSpec { dim: 128, ..Default::default() })
    /// #     .seed(7);
    /// let session = sketchfit::Session::new();
    /// let maps = pipeline.fit_maps_with(&session, ["data/digits_train.parquet"])?;
    /// println!("maps digest {}", maps.digest());
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
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

    /// Merges the shards' statistics (each once, all from this pipeline and data, none
    /// missing) and solves them into a model: the model one process would fit.
    ///
    /// ```
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # use sketchfit::Pipeline;
    /// # let pipeline = Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .seed(7);
    /// let parts = vec![
    ///     pipeline.accumulate_files(["data/digits_train.parquet"], (0, 2))?,
    ///     pipeline.accumulate_files(["data/digits_train.parquet"], (1, 2))?,
    /// ];
    /// let model = pipeline.solve(parts)?;
    /// assert_eq!(model.header.rows, 1347);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn solve(&self, parts: Vec<Statistics>) -> Result<Model> {
        self.solve_parts(parts, None)
    }

    /// [`Pipeline::solve`] of parts over a maps file, each part's sums scaled by its
    /// weight (the parts in order, oldest first), so that older data counts less: the
    /// weighted ridge model over their rows.
    ///
    /// ```
    /// # use sketchfit::sketch::NystromSpec;
    /// # use sketchfit::Pipeline;
    /// # let pipeline = Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(NystromSpec { dim: 128, ..Default::default() })
    /// #     .seed(7);
    /// use sketchfit::{PartWeights, Session};
    /// let maps = std::env::temp_dir().join(format!("doc-weighted-{}.maps", std::process::id()));
    /// let session = Session::new();
    /// pipeline.fit_maps_with(&session, ["data/digits_train.parquet"])?.save_with(&session, &maps)?;
    /// let pipeline = pipeline.maps(&maps);
    /// // Two days over one maps file, the older one weighing half.
    /// let days = ["data/digits_test_0to4.parquet", "data/digits_test_5to9.parquet"];
    /// let parts = days.iter().map(|d| pipeline.accumulate_files([*d], (0, 1))).collect::<sketchfit::Result<Vec<_>>>()?;
    /// let model = pipeline.solve_weighted(parts, PartWeights::HalfLife(1.0))?;
    /// assert_eq!(model.header.rows, 450);
    /// # std::fs::remove_file(&maps).ok();
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn solve_weighted(&self, parts: Vec<Statistics>, weights: PartWeights) -> Result<Model> {
        self.solve_parts(parts, Some(weights))
    }

    fn solve_parts(&self, parts: Vec<Statistics>, weights: Option<PartWeights>) -> Result<Model> {
        let checked = self.one_pass_only()?;
        let opts = RunOptions { from_parts: true, weights, ..RunOptions::default() };
        match solve_loaded(&checked, parts, PartsSolve::default(), None, &opts, &mut Reporter::silent())? {
            SolveOutcome::Model(m) => Ok(*m),
            SolveOutcome::Pass1Merged => Err(Error::bug("a one-pass solve merged pass one")),
        }
    }
}
