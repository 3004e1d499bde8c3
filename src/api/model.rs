//! Prediction from a model in memory: on a record batch (the `predict` command's
//! columns) or on row-major features (decision values, classes, PCA features).

use arrow_array::RecordBatch;

use super::all_cores;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::pipeline::predict::{predict_rows, score_rows, PredictOptions, Rows};
use crate::pipeline::stream::nonnegative_message;
use crate::session::Session;

impl Model {
    /// The prediction columns for a record batch: `prediction` (the class label, or the
    /// value for one target; `prediction_<target>` for several), plus `score_<class>`
    /// columns when `scores` is set. The batch needs the model's feature columns.
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # let model = sketchfit::Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .fit_files(["data/digits_train.parquet"])?;
    /// let test = read("data/digits_test.parquet");
    /// let out = model.predict_batch(&test[0], true)?;
    /// // `prediction`, then one `score_<class>` column per class.
    /// assert_eq!(out.num_columns(), 1 + 10);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
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
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # let model = sketchfit::Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .fit_files(["data/digits_train.parquet"])?;
    /// let (scores, rows) = model.score_batches(&read("data/digits_test.parquet"), false)?;
    /// assert_eq!(scores.len(), rows * 10);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn score_batches(&self, batches: &[RecordBatch], pca: bool) -> Result<(Vec<f64>, usize)> {
        score_rows(&Session::new(), self, Rows::Batches(batches), pca, all_cores())
    }

    /// The decision values of row-major features `x` (`rows × d`, columns in the
    /// model's feature order), row-major: per class for a classifier (one column for
    /// binary one-vs-all, else one per class, ECOC included: [`Model::class_scores`]),
    /// per target for a regression.
    ///
    /// ```
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # let model = sketchfit::Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .fit_files(["data/digits_train.parquet"])?;
    /// // Two rows of the model's 64 features, row-major.
    /// let x = vec![0.5f32; 2 * 64];
    /// assert_eq!(model.decision_function(&x)?.len(), 2 * 10);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn decision_function(&self, x: &[f32]) -> Result<Vec<f64>> {
        let rows = self.rows_of(x)?;
        let mut z = Vec::new();
        Ok(self.class_scores(&self.scores(x, rows, &mut z, all_cores())))
    }

    /// The PCA features (`rows × ΣE`, row-major) of row-major features `x`, checked as
    /// [`Model::decision_function`] checks them.
    ///
    /// ```
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// let model = sketchfit::Pipeline::classification("label")
    ///     .features(["px*"])
    ///     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    ///     .pca(32)
    ///     .fit_files(["data/digits_train.parquet"])?;
    /// assert_eq!(model.pca_features(&vec![0.5f32; 64])?.len(), 32);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
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
    ///
    /// ```
    /// # use sketchfit::sketch::TensorSketchSpec;
    /// # let model = sketchfit::Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(TensorSketchSpec { degree: 3, dim: 256, ..Default::default() })
    /// #     .fit_files(["data/digits_train.parquet"])?;
    /// let classes = model.predict_classes(&vec![0.5f32; 3 * 64])?;
    /// assert_eq!(classes.len(), 3);
    /// let labels = model.header.classes.as_ref().unwrap();
    /// println!("first row: class {}", labels.name(classes[0]));
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
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
