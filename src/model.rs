//! Everything needed to predict, saved to one safetensors file: the materialised
//! random parameters of every stage, the folded weights `W = Ū·w` and bias, the
//! feature mean and eigenvalue spectrum (for `inspect`), and a JSON header
//! (`__metadata__["sketchfit"]`) with the spec, classes, columns and format version.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::codes::OutputCode;
use crate::container::{ContainerError, Dtype};
use crate::error::{Error, Result};
use crate::scoring::{Head, Projector, Scorer};
use crate::session::Session;
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::solve::GcvCurve;
use crate::source::{Classes, ResolvedFeatures};

/// Model file format version; bumped on any incompatible change (3: the seal is XXH64,
/// not FNV-1a).
pub const FORMAT_VERSION: u32 = 3;
/// Version 1 checksummed the arrays only, versions 1 and 2 by FNV-1a; both are still read.
const OLDEST_READ: u32 = 1;
pub(crate) const FORMAT_NAME: &str = "sketchfit-model";

/// Classification or regression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// One-vs-all ±1 targets from a label column.
    #[default]
    Classification,
    /// One or more real target columns.
    Regression,
}

/// Each candidate's score, as the model keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateTable {
    /// `stages.N.key`.
    pub key: String,
    /// The values tried.
    pub values: Vec<serde_json::Value>,
    /// The held-out metric of each candidate at its best λ.
    pub score: Vec<f64>,
    /// That λ.
    pub lambda: Vec<f64>,
    /// The index of the chosen candidate.
    pub chosen: usize,
}

/// The JSON header of a model file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelHeader {
    /// Always `sketchfit-model`.
    pub format: String,
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// The crate version that wrote it.
    pub written_by: String,
    /// Task.
    pub task: Task,
    /// Classes (classification).
    pub classes: Option<Classes>,
    /// Label column (classification).
    pub label: Option<String>,
    /// Target columns (regression).
    pub targets: Vec<String>,
    /// Feature columns and `d`.
    pub features: ResolvedFeatures,
    /// The stages, in order.
    pub stages: Vec<StageSpec>,
    /// The pipeline seed.
    pub seed: u64,
    /// Total feature dimension `D`.
    pub dim: usize,
    /// Outputs `c`.
    pub outputs: usize,
    /// PCA components used (`D` without PCA).
    pub components: usize,
    /// PCA components asked for.
    pub components_requested: usize,
    /// λ per output.
    #[serde(with = "crate::container::json_f64::vec")]
    pub lambdas: Vec<f64>,
    /// GCV curve.
    pub gcv: Option<GcvCurve>,
    /// Training rows.
    pub rows: u64,
    /// The whole pipeline spec, for the record.
    pub pipeline: serde_json::Value,
    /// FNV-1a 64 of every array's bytes in name order, hex.
    #[serde(default)]
    pub checksum: String,
    /// 1 or 2.
    #[serde(default = "one")]
    pub passes: u32,
    /// Unlabeled rows that entered the PCA.
    #[serde(default)]
    pub unlabeled_rows: u64,
    /// The λ-by-validation table, when λ was chosen that way.
    #[serde(default)]
    pub validation: Option<ValidationTable>,
    /// The PCA projections: feature ranges and components (what `transform` outputs).
    #[serde(default)]
    pub projections: Vec<ProjectionInfo>,
    /// The ridge solve path that ran (`eigen`, `cholesky`, `cholesky_f32`, `tridiagonal`,
    /// `dual`), or the sparse learner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solver: Option<String>,
    /// The ridge solve on Gram statistics that gave the weights, as planned: the path,
    /// and a Cholesky's λ and factor (absent for the dual, a sparse learner, and files
    /// written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solve: Option<crate::solve::RidgeSolve>,
    /// How the mixed-precision solve's refinement ended (`cholesky_f32` only): steps,
    /// final residual, and whether the f64 factorisation took over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refinement: Option<crate::solve::Refinement>,
    /// The error-correcting output code's rows, one per class (absent: one-vs-all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Vec<Vec<i8>>>,
    /// The sparse learner's path (`[solver] kind`; absent for ridge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse: Option<SparseTable>,
    /// Every kernel candidate's held-out score (`stages.N.candidates`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<CandidateTable>,
}

fn one() -> u32 {
    1
}

/// Scores of every λ on the validation rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ValidationTable {
    /// `"accuracy"` or `"rmse"`.
    pub metric: String,
    /// Rows scored.
    pub rows: u64,
    /// The λ grid.
    #[serde(with = "crate::container::json_f64::vec")]
    pub grid: Vec<f64>,
    /// Shared score per λ (accuracy, or the mean RMSE over outputs).
    #[serde(with = "crate::container::json_f64::vec")]
    pub score: Vec<f64>,
    /// RMSE of each output's scores per λ (`grid × c`).
    #[serde(with = "crate::container::json_f64::vec2")]
    pub rmse_per_output: Vec<Vec<f64>>,
    /// The chosen λ per output.
    #[serde(with = "crate::container::json_f64::vec")]
    pub chosen: Vec<f64>,
    /// Rows of the final solve when the model was refitted at the chosen λ on the
    /// training and validation rows together (`ridge.refit`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refit_rows: Option<u64>,
    /// `K` when λ was chosen by k-fold cross-validation (`ridge.cv`) rather than on
    /// validation files; the scores are then pooled over the K held-out folds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folds: Option<usize>,
}

/// The path of a sparse learner (`[solver] kind`): λ₁ values from `λ_max` down, with
/// each point's duality gap, nonzero coefficients, active groups and validation score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SparseTable {
    /// `lasso`, `elastic_net` or `group_lasso`.
    pub kind: String,
    /// `raw` (the features) or `pca` (the principal components).
    pub basis: String,
    /// `λ₂`.
    pub l2: f64,
    /// λ₁ per point (one point when λ₁ was fixed).
    #[serde(with = "crate::container::json_f64::vec")]
    pub path: Vec<f64>,
    /// The largest duality gap over outputs, relative to `c_yy`, per point.
    #[serde(with = "crate::container::json_f64::vec")]
    pub gap: Vec<f64>,
    /// Basis coefficients nonzero in some output, per point.
    pub nonzeros: Vec<usize>,
    /// The groups (the stages) in the raw basis.
    pub groups: Vec<String>,
    /// The active groups per point.
    pub active: Vec<Vec<usize>>,
    /// `accuracy` or `rmse` when λ₁ was chosen on validation files.
    pub metric: Option<String>,
    /// The validation score per point.
    #[serde(with = "crate::container::json_f64::vec")]
    pub score: Vec<f64>,
    /// Validation rows scored.
    pub validation_rows: u64,
    /// The chosen point.
    pub chosen: usize,
    /// Rows of the refit on train ∪ validation, when one ran.
    pub refit_rows: Option<u64>,
}

/// One PCA projection `p = Ūᵀ(z[start..end] − z̄)`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProjectionInfo {
    /// First feature.
    pub start: usize,
    /// One past the last feature.
    pub end: usize,
    /// Components `E`.
    pub components: usize,
    /// Block Krylov's worst residual `‖Cu − θu‖ / θ_max` over the kept pairs
    /// (absent for the dense decomposition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residual: Option<f64>,
    /// `tr C`, the block's total variance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variance_total: Option<f64>,
}

/// A projection's arrays.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    /// `z̄` over the block (length `end − start`).
    pub mean: Vec<f64>,
    /// `Ū`, row-major `(end − start) × E`.
    pub basis: Vec<f64>,
    /// The block covariance's eigenvalues, descending.
    pub eigenvalues: Vec<f64>,
}

/// A trained model.
#[derive(Debug)]
pub struct Model {
    /// Header.
    pub header: ModelHeader,
    /// The feature map.
    pub pipeline: FeaturePipeline,
    /// `W`, row-major `D × c`.
    pub weights: Vec<f64>,
    /// `b`.
    pub bias: Vec<f64>,
    /// `z̄` over the training rows.
    pub mean: Vec<f64>,
    /// Eigenvalues of the feature covariance, descending (of the first block in two-pass mode).
    pub eigenvalues: Vec<f64>,
    /// One entry per [`ModelHeader::projections`].
    pub projections: Vec<Projection>,
    /// The file it was loaded from, so every later error about it names that file.
    pub origin: Option<PathBuf>,
}

fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl Model {
    /// Scores `f(x) = Wᵀz(x) + b` for a chunk (`rows × c`, f64), its rows split over
    /// `threads` threads. `z` is kept for callers' scratch and left as it was; the
    /// features are mapped and scored a cache-sized block at a time.
    pub fn scores(&self, x: &[f32], rows: usize, z: &mut Vec<f32>, threads: usize) -> Vec<f64> {
        let _ = z;
        let head = self.head();
        self.split_rows(x, rows, threads, |s, xb, n| s.scores(&self.pipeline, &head, xb, n))
    }

    /// PCA features `p(x)` for a chunk (`rows × ΣE`), the blocks concatenated.
    pub fn transform(&self, x: &[f32], rows: usize, z: &mut Vec<f32>, threads: usize) -> Vec<f64> {
        let _ = z;
        let projectors = self.projectors();
        self.split_rows(x, rows, threads, |s, xb, n| s.project(&self.pipeline, &projectors, xb, n))
    }

    /// The linear head `Wᵀz + b` in the layout the score kernel reads.
    pub fn head(&self) -> Head {
        Head::new(&self.weights, &self.bias, self.header.dim)
    }

    /// The PCA blocks, borrowed from the model.
    pub fn projectors(&self) -> Vec<Projector<'_>> {
        self.header
            .projections
            .iter()
            .zip(&self.projections)
            .map(|(info, p)| Projector {
                start: info.start,
                mean: &p.mean,
                basis: &p.basis,
                components: info.components,
            })
            .collect()
    }

    /// `f` over contiguous parts of the rows, one per thread, results concatenated in
    /// row order (each row's values do not depend on the split).
    fn split_rows(
        &self,
        x: &[f32],
        rows: usize,
        threads: usize,
        f: impl Fn(&mut Scorer, &[f32], usize) -> Vec<f64> + Sync,
    ) -> Vec<f64> {
        let d = self.header.features.dim;
        let threads = threads.clamp(1, rows.max(1));
        if threads == 1 || rows < 64 || d == 0 {
            return f(&mut Scorer::default(), &x[..rows * d], rows);
        }
        let per = rows.div_ceil(threads);
        let parts: Vec<Vec<f64>> = std::thread::scope(|scope| {
            let handles: Vec<_> = x[..rows * d]
                .chunks(per * d)
                .map(|xb| {
                    let f = &f;
                    scope.spawn(move || f(&mut Scorer::default(), xb, xb.len() / d))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
        });
        parts.concat()
    }

    /// Predicted class index per row from scores (one-vs-all argmax, ties to the lower
    /// index; binary: the second class iff `f > 0`).
    pub fn classify(&self, scores: &[f64]) -> Vec<usize> {
        self.output_code().decode(scores)
    }

    /// Per-class scores of output scores (`rows × outputs` → `rows × k`, `k` = 1 for a
    /// binary one-vs-all model, else the class count): see
    /// [`OutputCode::class_scores`]. Regression scores are returned as they are.
    pub fn class_scores(&self, scores: &[f64]) -> Vec<f64> {
        match self.header.classes {
            Some(_) => self.output_code().class_scores(scores),
            None => scores.to_vec(),
        }
    }

    /// How the model's classes map to its outputs (one-vs-all unless it stores a code).
    pub fn output_code(&self) -> OutputCode {
        let classes = self.header.classes.as_ref().map_or(2, Classes::len);
        match &self.header.code {
            None => OutputCode::OneVsAll { classes },
            Some(rows) => OutputCode::Matrix {
                classes: rows.len(),
                length: self.header.outputs,
                m: rows.iter().flatten().copied().collect(),
            },
        }
    }

    fn arrays(&self) -> Vec<(String, Dtype, Vec<usize>, Vec<u8>)> {
        let (dim, c) = (self.header.dim, self.header.outputs);
        let mut out = vec![
            ("weights".to_string(), Dtype::F64, vec![dim, c], f64_bytes(&self.weights)),
            ("bias".to_string(), Dtype::F64, vec![c], f64_bytes(&self.bias)),
            ("mean".to_string(), Dtype::F64, vec![dim], f64_bytes(&self.mean)),
            ("eigenvalues".to_string(), Dtype::F64, vec![self.eigenvalues.len()], f64_bytes(&self.eigenvalues)),
        ];
        for (i, (info, p)) in self.header.projections.iter().zip(&self.projections).enumerate() {
            let len = info.end - info.start;
            out.push((format!("proj{i}.mean"), Dtype::F64, vec![len], f64_bytes(&p.mean)));
            out.push((format!("proj{i}.basis"), Dtype::F64, vec![len, info.components], f64_bytes(&p.basis)));
            out.push((
                format!("proj{i}.eigenvalues"),
                Dtype::F64,
                vec![p.eigenvalues.len()],
                f64_bytes(&p.eigenvalues),
            ));
        }
        out.extend(crate::maps::stage_arrays(&self.pipeline).into_iter().map(|a| (a.name, a.dtype, a.shape, a.bytes)));
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The model file's bytes (read back before they are returned).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let arrays = self
            .arrays()
            .into_iter()
            .map(|(name, dtype, shape, bytes)| crate::container::Array { name, dtype, shape, bytes })
            .collect();
        let mut header = self.header.clone();
        header.version = FORMAT_VERSION;
        let bytes = crate::container::encode(&header, arrays)?;
        // The container checked the header and arrays; this checks the stages rebuild.
        Model::from_bytes(&bytes).map_err(|e| Error::bug_from("the model just built loads back", e))?;
        Ok(bytes)
    }

    /// Saves atomically (temporary name, then rename), after reading the bytes back: a
    /// model that would not load is never written. Storage options come from the
    /// environment; [`Model::save_with`] takes a session.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.save_with(&Session::new(), path)
    }

    /// [`Model::save`] in `session`: its storage options, and never over one of its inputs.
    pub fn save_with(&self, session: &Session, path: &Path) -> Result<()> {
        let bytes = self.to_bytes()?;
        crate::atomic::write_bytes(session, path, &bytes)
    }

    /// An error about this model, naming the file it came from.
    pub fn refuse(&self, message: impl Into<String>) -> Error {
        let path = self.origin.clone().unwrap_or_else(|| PathBuf::from("(model in memory)"));
        Error::BadModel { path, message: message.into() }
    }

    /// Loads and checks a model file (storage options from the environment;
    /// [`Model::load_with`] takes a session).
    pub fn load(path: &Path) -> Result<Model> {
        Model::load_with(&Session::new(), path)
    }

    /// [`Model::load`] in `session`, which registers the file as one of its inputs.
    pub fn load_with(session: &Session, path: &Path) -> Result<Model> {
        let bytes = crate::atomic::read_input(session, path)?;
        let mut model =
            Self::from_bytes(&bytes).map_err(|e| Error::BadModel { path: path.into(), message: e.to_string() })?;
        model.origin = Some(path.to_path_buf());
        Ok(model)
    }

    /// Parses and verifies a model file's bytes.
    pub fn from_bytes(bytes: &[u8]) -> std::result::Result<Model, ContainerError> {
        let file = crate::container::decode::<ModelHeader>(bytes)?;
        let header = file.header.clone();
        let (dim, c, d) = (header.dim, header.outputs, header.features.dim);
        let get_f64 = |name: &str, len: usize| file.f64(name, len);
        let bad = ContainerError::Inconsistent;
        let weights = get_f64("weights", dim * c)?;
        let bias = get_f64("bias", c)?;
        let mean = get_f64("mean", dim)?;
        let ev_len = file.len_of("eigenvalues");
        let eigenvalues = get_f64("eigenvalues", ev_len)?;
        let stages = crate::maps::stages_from(&file, &header.stages, d)?;
        let mut projections = Vec::new();
        for (i, info) in header.projections.iter().enumerate() {
            if info.start > info.end || info.end > dim {
                return Err(bad(format!("projection {i} covers features outside 0..{dim}")));
            }
            let len = info.end - info.start;
            let ev = file.len_of(&format!("proj{i}.eigenvalues"));
            projections.push(Projection {
                mean: get_f64(&format!("proj{i}.mean"), len)?,
                basis: get_f64(&format!("proj{i}.basis"), len * info.components)?,
                eigenvalues: get_f64(&format!("proj{i}.eigenvalues"), ev)?,
            });
        }
        if let Some(rows) = &header.code {
            let code = OutputCode::from_rows(rows).map_err(|e| bad(format!("output code: {e}")))?;
            if code.classes() != header.classes.as_ref().map_or(0, Classes::len) || code.outputs() != c {
                return Err(bad("the output code does not match the classes and outputs".into()));
            }
        }
        let pipeline = FeaturePipeline::from_stages(stages, d);
        if pipeline.output_dim() != dim {
            return Err(bad(format!("stages give {} features but the weights have {dim}", pipeline.output_dim())));
        }
        Ok(Model { header, pipeline, weights, bias, mean, eigenvalues, projections, origin: None })
    }
}

impl crate::container::Header for ModelHeader {
    const WHAT: &'static str = "model";
    const FORMAT: &'static str = FORMAT_NAME;
    const VERSION: u32 = FORMAT_VERSION;
    const OLDEST: u32 = OLDEST_READ;
    const SEALED_FROM: u32 = 2;
    const XXH_FROM: u32 = 3;
    const HINT: &'static str = "retrain with this sketchfit";
    fn format(&self) -> &str {
        &self.format
    }
    fn version(&self) -> u32 {
        self.version
    }
    fn checksum_mut(&mut self) -> &mut String {
        &mut self.checksum
    }
}

#[cfg(test)]
mod tests {
    use crate::solve::GcvCurve;

    #[test]
    fn non_finite_scores_survive_the_json_header() {
        let curve = GcvCurve {
            sigma_bar: f64::NAN,
            grid: vec![1e-8, 1.0],
            df: vec![3.0, f64::INFINITY],
            rss: vec![vec![f64::NEG_INFINITY], vec![0.5]],
            shared: vec![f64::INFINITY, 2.0],
            per_output: vec![vec![f64::NAN], vec![2.0]],
            chosen_shared: 1,
            chosen_per_output: vec![1],
        };
        let json = serde_json::to_string(&curve).unwrap();
        assert!(!json.contains("null"), "{json}");
        let back: GcvCurve = serde_json::from_str(&json).unwrap();
        assert!(back.sigma_bar.is_nan() && back.per_output[0][0].is_nan());
        assert_eq!((back.df[1], back.rss[0][0], back.shared[0]), (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY));
        assert_eq!(serde_json::to_string(&back).unwrap(), json, "the round trip is exact, so the checksum holds");
        // Older files wrote null: read as NaN rather than refused.
        let old = json.replace("\"NaN\"", "null");
        assert!(serde_json::from_str::<GcvCurve>(&old).unwrap().sigma_bar.is_nan());
    }

    #[test]
    fn the_solve_is_stored_as_its_value_and_read_back_as_it() {
        use crate::solve::{DirectSolve, Factor, PositiveLambda, RidgeSolve};
        let solve = RidgeSolve::Direct(DirectSolve::Cholesky {
            lambda: PositiveLambda::new(0.03).unwrap(),
            factor: Factor::MixedInPlace,
        });
        let json = serde_json::to_value(solve).unwrap();
        assert_eq!(json, serde_json::json!({"path": "cholesky", "lambda": 0.03, "factor": "mixed_in_place"}));
        assert_eq!(serde_json::from_value::<RidgeSolve>(json).unwrap(), solve);
        for other in [RidgeSolve::Eigen, RidgeSolve::Direct(DirectSolve::Tridiagonal)] {
            assert_eq!(serde_json::from_value::<RidgeSolve>(serde_json::to_value(other).unwrap()).unwrap(), other);
        }
        // A Cholesky at a λ it cannot factor at is refused, never read.
        let bad = serde_json::json!({"path": "cholesky", "lambda": 0.0, "factor": "copy"});
        assert!(serde_json::from_value::<RidgeSolve>(bad).is_err());
    }
}
