//! The header of a model a pipeline trained, before the solve fills in what it settles.
//! Here, not in `model`, since it reads the pipeline spec and `model` knows no pipeline.

use crate::model::{ModelHeader, FORMAT_NAME, FORMAT_VERSION};
use crate::pipeline::spec::PipelineSpec;
use crate::sketch::StageSpec;
use crate::source::{Classes, ResolvedFeatures};

/// The header of a model trained by `spec` on `features`, with its fitted `stages`,
/// `dim` features and `outputs` outputs; the solve fills in what it settles
/// (components, λ, selection tables, rows, solver, code).
pub(crate) fn model_header(
    spec: &PipelineSpec,
    classes: Option<Classes>,
    features: ResolvedFeatures,
    stages: Vec<StageSpec>,
    dim: usize,
    outputs: usize,
) -> ModelHeader {
    ModelHeader {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        written_by: env!("CARGO_PKG_VERSION").into(),
        task: spec.task,
        classes,
        label: spec.data.label.clone(),
        targets: spec.data.targets.clone(),
        features,
        stages,
        seed: spec.run.seed,
        dim,
        outputs,
        components: dim,
        components_requested: dim,
        lambdas: Vec::new(),
        gcv: None,
        rows: 0,
        pipeline: serde_json::to_value(spec).unwrap_or(serde_json::Value::Null),
        checksum: String::new(),
        passes: spec.passes,
        unlabeled_rows: 0,
        validation: None,
        projections: Vec::new(),
        solver: None,
        code: None,
        sparse: None,
        candidates: None,
    }
}
