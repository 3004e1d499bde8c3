//! [`FeatureMap`]: a pipeline's stages alone, fitted on record batches and applied to
//! rows — what a sketch transformer is — serialised to JSON with the arrays a fit left.

use arrow_array::RecordBatch;

use super::{all_cores, Pipeline};
use crate::error::{Error, Result};
use crate::pipeline::fit_stages;
use crate::pipeline::stream::{check_nonnegative, stream};
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::source::{Chunk, ColumnSpec, Dataset, FeatureColumns, ResolvedFeatures};

/// A feature map alone, fitted on record batches: the stages of a pipeline (its
/// `[data]` feature columns, seed and pre-pass sample size), mapping rows to the
/// concatenated random features `z(x)`. What a sketch transformer is.
#[derive(Debug)]
pub struct FeatureMap {
    stages: Vec<StageSpec>,
    features: ResolvedFeatures,
    seed: u64,
    pipeline: FeaturePipeline,
}

/// A stage's stored f32 arrays: `(name, shape, values)`.
type StoredArrays = Vec<(String, Vec<usize>, Vec<f32>)>;

/// What rebuilds a fitted [`FeatureMap`]: the maps are redrawn from the seed, except
/// the stages whose fit left arrays (Nyström's landmarks and factor), which are stored.
#[derive(serde::Serialize, serde::Deserialize)]
struct FittedMap {
    stages: Vec<StageSpec>,
    features: ResolvedFeatures,
    seed: u64,
    /// Per stage, its f32 arrays `(name, shape, values)` where its fit left arrays.
    #[serde(default)]
    arrays: Vec<Option<StoredArrays>>,
}

impl FeatureMap {
    /// Fits the stages' data-dependent parameters on the pre-pass sample of `batches`
    /// and draws the maps from the pipeline's seed.
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// use sketchfit::api::FeatureMap;
    /// use sketchfit::sketch::RffSpec;
    /// let pipeline = sketchfit::Pipeline::classification("label")
    ///     .features(["px*"])
    ///     .stage(RffSpec { dim: 128, ..Default::default() }); // σ by the median heuristic
    /// let map = FeatureMap::fit(&pipeline, read("data/digits_train.parquet"))?;
    /// let (z, rows) = map.transform(read("data/digits_test.parquet"))?;
    /// assert_eq!(z.len(), rows * map.dim());
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn fit(pipeline: &Pipeline, batches: impl IntoIterator<Item = RecordBatch>) -> Result<FeatureMap> {
        let spec = &pipeline.spec;
        if spec.stages.is_empty() {
            return Err(Error::config(&spec.source, "stages", "a feature map needs at least one stage"));
        }
        let columns = ColumnSpec {
            features: match &spec.data.feature_list {
                Some(l) => FeatureColumns::List(l.clone()),
                None => FeatureColumns::Columns(spec.data.features.clone()),
            },
            label: None,
            targets: Vec::new(),
            keep: Vec::new(),
            null_labels_unlabeled: false,
        };
        let data = Dataset::from_batches("record batches", batches.into_iter().collect(), columns)?;
        let stages = fit_stages(spec, &data)?;
        let d = data.dim();
        Ok(FeatureMap {
            pipeline: FeaturePipeline::build(&stages, d, spec.run.seed)?,
            features: data.features.clone(),
            seed: spec.run.seed,
            stages,
        })
    }

    /// The fitted parameters as JSON (stages, feature columns, seed): small, since
    /// the maps are redrawn from the seed by [`FeatureMap::from_json`].
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// # use sketchfit::api::FeatureMap;
    /// # use sketchfit::sketch::RffSpec;
    /// # let pipeline = sketchfit::Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(RffSpec { dim: 128, ..Default::default() });
    /// # let map = FeatureMap::fit(&pipeline, read("data/digits_train.parquet"))?;
    /// let again = FeatureMap::from_json(&map.to_json()?)?;
    /// let test = read("data/digits_test.parquet");
    /// assert_eq!(again.transform(test.clone())?, map.transform(test)?);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn to_json(&self) -> Result<String> {
        let arrays = self
            .pipeline
            .stages()
            .iter()
            .map(|st| {
                st.spec.array_fitted().then(|| {
                    st.params()
                        .into_iter()
                        .filter_map(|p| match p.data {
                            crate::sketch::ParamData::F32(v) => Some((p.name, p.shape, v)),
                            _ => None,
                        })
                        .collect()
                })
            })
            .collect();
        let f = FittedMap { stages: self.stages.clone(), features: self.features.clone(), seed: self.seed, arrays };
        serde_json::to_string(&f).map_err(|e| Error::bug_from("a feature map serialises", e))
    }

    /// The fitted stages, feature columns and seed as JSON, without the fitted arrays
    /// [`FeatureMap::to_json`] carries: what a caller reads the fitted keys from.
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// # use sketchfit::api::FeatureMap;
    /// # use sketchfit::sketch::RffSpec;
    /// # let pipeline = sketchfit::Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(RffSpec { dim: 128, ..Default::default() });
    /// # let map = FeatureMap::fit(&pipeline, read("data/digits_train.parquet"))?;
    /// assert!(map.spec_json()?.contains("\"rff\""));
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn spec_json(&self) -> Result<String> {
        let f = FittedMap {
            stages: self.stages.clone(),
            features: self.features.clone(),
            seed: self.seed,
            arrays: Vec::new(),
        };
        serde_json::to_string(&f).map_err(|e| Error::bug_from("a feature map serialises", e))
    }

    /// Rebuilds a map from [`FeatureMap::to_json`], checking every stage again.
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// # use sketchfit::api::FeatureMap;
    /// # use sketchfit::sketch::RffSpec;
    /// # let pipeline = sketchfit::Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(RffSpec { dim: 128, ..Default::default() });
    /// # let map = FeatureMap::fit(&pipeline, read("data/digits_train.parquet"))?;
    /// let text = map.to_json()?;
    /// assert_eq!(FeatureMap::from_json(&text)?.dim(), 128);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn from_json(text: &str) -> Result<FeatureMap> {
        let f: FittedMap = serde_json::from_str(text)
            .map_err(|e| Error::config("feature map", "-", format!("not a fitted feature map: {e}")))?;
        let d = f.features.dim;
        let mut stages = Vec::with_capacity(f.stages.len());
        for (i, s) in f.stages.iter().enumerate() {
            let at = || format!("stages.{i}");
            s.check_width(d, i)?;
            let stored = f.arrays.get(i).cloned().flatten();
            let stage = match (s.array_fitted(), stored) {
                // The stored arrays are checked by the family's restore, as a model's are.
                (true, Some(arrays)) => {
                    let params: Vec<crate::sketch::ParamArray> = arrays
                        .into_iter()
                        .map(|(name, shape, v)| crate::sketch::ParamArray {
                            name,
                            shape,
                            data: crate::sketch::ParamData::F32(v),
                        })
                        .collect();
                    crate::sketch::Stage::from_params(s, d, &params)
                        .map_err(|e| Error::config("feature map", at(), e.to_string()))?
                }
                (true, None) => {
                    return Err(Error::config("feature map", at(), "the stage's fitted arrays are missing"))
                }
                (false, _) if s.needs_fit() => {
                    return Err(Error::config("feature map", at(), "the stage is not fitted"))
                }
                (false, _) => crate::sketch::Stage::build(s, d, f.seed, i)?,
            };
            stages.push(stage);
        }
        let pipeline = FeaturePipeline::from_stages(stages, d);
        Ok(FeatureMap { stages: f.stages, features: f.features, seed: f.seed, pipeline })
    }

    /// The fitted stages.
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// # use sketchfit::api::FeatureMap;
    /// # use sketchfit::sketch::RffSpec;
    /// # let pipeline = sketchfit::Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(RffSpec { dim: 128, ..Default::default() });
    /// # let map = FeatureMap::fit(&pipeline, read("data/digits_train.parquet"))?;
    /// assert_eq!(map.stages().len(), 1);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn stages(&self) -> &[StageSpec] {
        &self.stages
    }

    /// The output width `D`.
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// # use sketchfit::api::FeatureMap;
    /// # use sketchfit::sketch::RffSpec;
    /// # let pipeline = sketchfit::Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(RffSpec { dim: 128, ..Default::default() });
    /// # let map = FeatureMap::fit(&pipeline, read("data/digits_train.parquet"))?;
    /// assert_eq!(map.dim(), 128);
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn dim(&self) -> usize {
        self.pipeline.output_dim()
    }

    /// `z(x)` of every row of record batches with the columns it was fitted on
    /// (row-major `rows × D`), and the rows.
    ///
    /// ```
    /// # let read = |p: &str| -> Vec<arrow_array::RecordBatch> {
    /// #     let f = std::fs::File::open(p).unwrap();
    /// #     let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    /// #     r.build().unwrap().map(|b| b.unwrap()).collect()
    /// # };
    /// # use sketchfit::api::FeatureMap;
    /// # use sketchfit::sketch::RffSpec;
    /// # let pipeline = sketchfit::Pipeline::classification("label")
    /// #     .features(["px*"])
    /// #     .stage(RffSpec { dim: 128, ..Default::default() });
    /// # let map = FeatureMap::fit(&pipeline, read("data/digits_train.parquet"))?;
    /// let (z, rows) = map.transform(read("data/digits_test.parquet"))?;
    /// assert_eq!((rows, z.len()), (450, 450 * 128));
    /// # Ok::<(), sketchfit::Error>(())
    /// ```
    pub fn transform(&self, batches: impl IntoIterator<Item = RecordBatch>) -> Result<(Vec<f32>, usize)> {
        let f = &self.features;
        let columns = ColumnSpec {
            features: if f.list {
                FeatureColumns::List(f.columns[0].clone())
            } else {
                FeatureColumns::Columns(f.columns.iter().map(|c| glob::Pattern::escape(c)).collect())
            },
            label: None,
            targets: Vec::new(),
            keep: Vec::new(),
            null_labels_unlabeled: false,
        };
        let data = Dataset::from_batches("record batches", batches.into_iter().collect(), columns)?;
        if data.dim() != f.dim {
            return Err(Error::data(
                data.files[0].location(),
                format!("the input has {} features but the map was fitted on {}", data.dim(), f.dim),
            ));
        }
        let dim = self.dim();
        let mut out = vec![0f32; usize::try_from(data.total_rows()).unwrap_or(usize::MAX).saturating_mul(dim)];
        let mut at = 0;
        let needs = self.pipeline.needs_nonnegative();
        stream(&data, &data.units(), 8192, &mut |ch: Chunk| {
            check_nonnegative(needs, &ch, f)?;
            let end = at + ch.rows * dim;
            let block = out.get_mut(at..end).ok_or_else(|| Error::bug("more rows than the batches hold"))?;
            self.pipeline.map_chunk(&ch.x, ch.rows, block, all_cores());
            at = end;
            Ok(())
        })?;
        Ok((out, at / dim.max(1)))
    }
}
