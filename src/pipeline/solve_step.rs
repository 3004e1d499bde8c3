//! From accumulated statistics to a model: the selection the plan asks for (candidates,
//! k-fold, the sparse path, validation) over the solve of `ridge_step`, and the model
//! assembled from what they settled.

use crate::codes::OutputCode;
use crate::error::{Error, Result};
use crate::model::{Model, ModelHeader, Projection, ProjectionInfo};
use crate::pipeline::projection::StagePca;
use crate::pipeline::ridge_step::{fold, solve_state};
use crate::pipeline::spec::{LambdaValue, PipelineSpec};
use crate::pipeline::state::State;
use crate::pipeline::stream::lambda_text;
use crate::pipeline::validation::refit_state;
use crate::pipeline::validation::validate;
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::solve::LambdaChoice;
use crate::source::{Classes, ResolvedFeatures};
use crate::stats::GramStats;

/// Solves the accumulated state into a model (λ by GCV, fixed, or validation).
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish(
    spec: &PipelineSpec,
    pipeline: FeaturePipeline,
    stages: Vec<StageSpec>,
    classes: Option<Classes>,
    code: Option<OutputCode>,
    features: ResolvedFeatures,
    state: &mut State,
    pcas: Option<Vec<StagePca>>,
    data: Option<&crate::source::Dataset>,
    alternatives: &[Vec<StageSpec>],
    say: &mut dyn FnMut(&str),
) -> Result<Model> {
    if spec.solver.kind != crate::pipeline::spec::SolverKind::Ridge {
        return crate::pipeline::sparse::finish_sparse(spec, pipeline, stages, classes, code, features, state, say);
    }
    if let State::Candidates { states } = state {
        // Each candidate solved and scored as a pipeline of its own; the best is kept.
        let specs = spec.candidate_specs()?;
        if specs.len() != states.len() || alternatives.len() + 1 != states.len() {
            return Err(Error::Internal("candidate statistics do not match the candidates".into()));
        }
        let mut models = Vec::with_capacity(states.len());
        let mut first = Some(pipeline);
        for (i, (s, inner)) in specs.iter().zip(states.iter_mut()).enumerate() {
            let (map, fitted) = match first.take() {
                Some(p) => (p, stages.clone()),
                None => {
                    let fitted = alternatives[i - 1].clone();
                    (FeaturePipeline::build(&fitted, features.dim, spec.run.seed)?, fitted)
                }
            };
            let (c, k, f) = (classes.clone(), code.clone(), features.clone());
            models.push(finish(s, map, fitted, c, k, f, inner, None, data, &[], &mut |m| {
                say(&format!("candidate {i}: {m}"))
            })?);
        }
        return crate::pipeline::candidates::choose(spec, models, say);
    }
    if let State::Folds { .. } = state {
        // λ by k-fold, then the model of all rows at that λ (one Cholesky).
        let coded = classes.as_ref().zip(code.as_ref());
        let (table, lambda) = crate::pipeline::kfold::cross_validate(spec, &pipeline, coded, state, data, say)?;
        let mut at = spec.clone();
        at.ridge.cv = None;
        at.ridge.lambda = LambdaValue::Number(lambda);
        let mut model = finish(&at, pipeline, stages, classes, code, features, state, None, data, &[], say)?;
        model.header.validation = Some(table);
        model.header.pipeline = serde_json::to_value(spec).unwrap_or_default();
        return Ok(model);
    }
    let start = std::time::Instant::now();
    let lambda = spec.lambda()?;
    let use_validation = !spec.data.validation.is_empty() && !matches!(lambda, LambdaChoice::Fixed(_));
    // The per-stage bases are needed again only by a refit's second solve.
    let keep = if use_validation && spec.ridge.refit { pcas.clone() } else { None };
    let mut solved = solve_state(spec, state, pcas, say)?;
    let dim = pipeline.output_dim();
    let c = solved.ridge.outputs();
    let gcv = solved.ridge.gcv(&solved.labeled);
    let mut lambdas =
        lambda.pick(gcv.as_ref(), c).ok_or_else(|| Error::Internal("GCV asked of a path without a spectrum".into()))?;
    let mut validation = None;
    if use_validation {
        let target = match &*state {
            State::One { labeled, .. } => Some(labeled),
            State::Folds { .. } | State::Candidates { .. } | State::Rows(_) => None,
            State::Two { pass2, .. } => pass2.as_ref(),
        };
        let mut held_out = match target {
            Some(t) if spec.ridge.refit => Some(GramStats::new(t.shift.clone(), t.c)),
            _ => None,
        };
        let coded = classes.as_ref().zip(code.as_ref());
        let (mut table, chosen) = validate(spec, &pipeline, coded, &solved, held_out.as_mut(), say)?;
        lambdas = chosen;
        if let Some(held_out) = held_out {
            let (trained, unlabeled) = (solved.rows, solved.unlabeled_rows);
            refit_state(state, &held_out)?;
            // The same problem on more rows at the λ just chosen: a shared λ without PCA
            // is one Cholesky factorisation.
            let mut at = spec.clone();
            at.data.validation.clear();
            if lambdas.iter().all(|&l| l == lambdas[0]) && lambdas[0] > 0.0 {
                at.ridge.lambda = LambdaValue::Number(lambdas[0]);
                at.ridge.per_output = false;
            }
            solved = solve_state(&at, state, keep, say)?;
            solved.unlabeled_rows = unlabeled;
            say(&format!(
                "ridge: refit at λ = {} on {} rows ({trained} training + {} validation)",
                lambda_text(&lambdas),
                solved.rows,
                held_out.n
            ));
            table.refit_rows = Some(solved.rows);
        }
        validation = Some(table);
    } else if let Some(g) = &gcv {
        let i = g.chosen_shared;
        say(&format!(
            "ridge: λ = {} by GCV (grid {:.3e} … {:.3e}, GCV {:.6e}, df {:.1})",
            lambda_text(&lambdas),
            g.grid[0],
            g.grid[g.grid.len() - 1],
            g.shared[i],
            g.df[i]
        ));
    } else {
        say(&format!("ridge: λ = {:.4e} (fixed)", lambdas[0]));
    }
    let (wp, bp) = solved.ridge.weights(std::slice::from_ref(&lambdas), &solved.labeled).remove(0);
    let (weights, bias) = fold(&solved, wp, bp, dim);
    say(&format!("solve: {:.1} s ({} path)", start.elapsed().as_secs_f64(), solved.path.name()));
    let (infos, projs): (Vec<ProjectionInfo>, Vec<Projection>) = solved.projections.iter().cloned().unzip();
    let mean = match state {
        State::One { .. } | State::Folds { .. } | State::Candidates { .. } | State::Rows(_) => {
            solved.labeled.mean.clone()
        }
        State::Two { pass1, .. } => pass1.iter().flat_map(|s| s.moments().mean).collect(),
    };
    let header = ModelHeader {
        components: solved.components,
        components_requested: solved.components_requested,
        lambdas: lambdas.clone(),
        gcv,
        rows: solved.rows,
        unlabeled_rows: solved.unlabeled_rows,
        validation,
        projections: infos,
        solver: Some(solved.path.name().to_string()),
        code: code.as_ref().and_then(OutputCode::rows),
        ..crate::pipeline::header::model_header(spec, classes, features, stages, dim, c)
    };
    Ok(Model {
        header,
        pipeline,
        weights,
        bias,
        mean,
        eigenvalues: solved.eigenvalues,
        projections: projs,
        origin: None,
    })
}
