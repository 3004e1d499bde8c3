//! The model, assembled once from a [`Fitted`] run: the chosen map (its fitted stages),
//! the classes and code, the features, and the solution's numbers and settled header.

use crate::codes::OutputCode;
use crate::model::{Model, ModelHeader, Projection, ProjectionInfo, FORMAT_NAME, FORMAT_VERSION};
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::prepare::FittedMap;
use crate::pipeline::prepare::Labels;
use crate::pipeline::solve_ctx::Solution;

/// What a model is built from.
pub(crate) struct Fitted {
    /// The map the solution was solved for.
    pub map: FittedMap,
    /// Classes, code and features.
    pub labels: Labels,
    /// The numbers and what the solve settled.
    pub solution: Solution,
}

/// The model of `fitted`, trained by `checked`.
pub(crate) fn assemble(checked: &CheckedPipeline, fitted: Fitted) -> Model {
    let Fitted { map, labels, solution } = fitted;
    let spec = checked.spec();
    let s = solution.settled;
    let (infos, projections): (Vec<ProjectionInfo>, Vec<Projection>) = solution.projections.into_iter().unzip();
    let header = ModelHeader {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        written_by: env!("CARGO_PKG_VERSION").into(),
        task: spec.task,
        code: labels.code.as_ref().and_then(OutputCode::rows),
        classes: labels.classes,
        label: spec.data.label.clone(),
        targets: spec.data.targets.clone(),
        features: labels.features,
        stages: map.stages,
        seed: spec.run.seed,
        dim: map.pipeline.output_dim(),
        outputs: solution.bias.len(),
        components: s.components,
        components_requested: s.components_requested,
        lambdas: s.lambdas,
        gcv: s.gcv,
        rows: s.rows,
        // The header keeps the pipeline as given, less any credential in its URLs.
        pipeline: crate::identity::redact_json(serde_json::to_value(spec).unwrap_or(serde_json::Value::Null)),
        checksum: String::new(),
        passes: spec.passes,
        unlabeled_rows: s.unlabeled_rows,
        validation: s.validation,
        projections: infos,
        solver: Some(s.solver),
        solve: s.solve,
        refinement: s.refinement,
        sparse: s.sparse,
        candidates: s.candidates,
    };
    Model {
        header,
        pipeline: map.pipeline,
        weights: solution.weights,
        bias: solution.bias,
        mean: solution.mean,
        eigenvalues: solution.eigenvalues,
        projections,
        origin: None,
    }
}
