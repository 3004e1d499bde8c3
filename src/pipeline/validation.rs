//! λ by validation: scoring every λ of the grid on the validation files in one stream,
//! and the refit on train ∪ validation at the chosen λ.

use crate::codes::OutputCode;
use crate::error::{Error, Result};
use crate::model::ValidationTable;
use crate::pipeline::plan::ColumnsFor;
use crate::pipeline::projection::project;
use crate::pipeline::spec::{Metric, PipelineSpec};
use crate::pipeline::state::Solved;
use crate::pipeline::state::State;
use crate::pipeline::stream::{check_nonnegative, lambda_text};
use crate::sketch::FeaturePipeline;
use crate::source::{Chunk, Classes, Dataset};
use crate::stats::GramStats;

/// The solved space's features `φ(x) − mean_L` of a chunk, where φ is `z` (one pass) or
/// the projection (two passes): every λ's validation scores are linear in them.
pub(crate) fn centred_features(solved: &Solved, z: &[f32], rows: usize, dim: usize) -> (Vec<f64>, Vec<f64>, usize) {
    let (phi, width): (Vec<f64>, usize) = match &solved.pcas {
        None => (z[..rows * dim].iter().map(|&v| f64::from(v)).collect(), dim),
        Some(p) => {
            let e = p.iter().map(|x| x.e).sum();
            (project(p, z, rows, dim), e)
        }
    };
    let mean = &solved.labeled.mean;
    let centred = phi.chunks_exact(width.max(1)).flat_map(|r| r.iter().zip(mean).map(|(v, m)| v - m)).collect();
    (phi, centred, width)
}

#[allow(clippy::expect_used)] // Invariant: `q` is rows × qw by construction just above.
pub(crate) fn validate(
    spec: &PipelineSpec,
    prep_pipeline: &FeaturePipeline,
    classes: Option<(&Classes, &OutputCode)>,
    solved: &Solved,
    mut refit: Option<&mut GramStats>,
    say: &mut dyn FnMut(&str),
) -> Result<(ValidationTable, Vec<f64>)> {
    let ds = Dataset::open(&spec.data.validation, ColumnsFor::labeled(spec))?;
    let grid = solved.ridge.grid();
    let (c, dim) = (solved.ridge.outputs(), prep_pipeline.output_dim());
    let ymean = &solved.labeled.ymean;
    let mut sq = vec![vec![0.0; c]; grid.len()];
    let mut right = vec![0u64; grid.len()];
    let mut rows = 0u64;
    let threads = spec.threads();
    let mut z = Vec::new();
    // Every λ's weights side by side (`width × (grid · c)`), so one product per chunk
    // scores the whole grid; the centred features need no intercept but ȳ.
    let sets: Vec<Vec<f64>> = grid.iter().map(|&l| vec![l; c]).collect();
    let per_lambda = solved.ridge.weights(&sets, &solved.labeled);
    let width = per_lambda.first().map_or(0, |(w, _)| w.len() / c.max(1));
    let cols = grid.len() * c;
    let all_w = ndarray::Array2::from_shape_fn((width, cols), |(i, j)| per_lambda[j / c].0[i * c + j % c]);
    drop(per_lambda);
    crate::pipeline::stream::stream(&ds, &ds.units(), spec.run.chunk_rows, &mut |ch: Chunk| {
        check_nonnegative(prep_pipeline, &ch, &ds.features)?;
        z.resize(ch.rows * dim, 0.0);
        prep_pipeline.map_chunk(&ch.x, ch.rows, &mut z, threads);
        let (phi, q, qw) = centred_features(solved, &z, ch.rows, dim);
        let (truth, y): (Vec<u32>, Vec<f64>) = match classes {
            Some((cl, code)) => {
                let loc = ch.location.clone().column(spec.data.label.clone().unwrap_or_default());
                let labels =
                    ch.labels.as_ref().ok_or_else(|| Error::Internal("validation read no label column".into()))?;
                let t = cl.encode(labels, &loc)?;
                let mut y = Vec::new();
                code.targets(&t, &mut y);
                (t, y)
            }
            None => (Vec::new(), ch.targets.clone()),
        };
        if let Some(st) = refit.as_deref_mut() {
            // The refit's statistics, in the space the training statistics are in.
            match &solved.pcas {
                None => st.add_with(&z[..ch.rows * dim], &y, ch.rows, threads, spec.run.gram)?,
                Some(_) => st.add_f64(&phi, &y, ch.rows, threads)?,
            }
        }
        let qv = ndarray::ArrayView2::from_shape((ch.rows, qw), &q).expect("chunk features match the solved width");
        let f_all = qv.dot(&all_w);
        // One buffer for every λ's scores of this chunk.
        let mut scores = vec![0.0; ch.rows * c];
        for li in 0..grid.len() {
            let f = f_all.slice_axis(ndarray::Axis(1), ndarray::Slice::from(li * c..(li + 1) * c));
            for r in 0..ch.rows {
                for j in 0..c {
                    scores[r * c + j] = f[(r, j)] + ymean[j];
                    sq[li][j] += (scores[r * c + j] - y[r * c + j]).powi(2);
                }
            }
            if let Some((_, code)) = classes {
                right[li] +=
                    code.decode(&scores).iter().zip(&truth).filter(|(p, t)| **p == **t as usize).count() as u64;
            }
        }
        rows += ch.rows as u64;
        Ok(())
    })?;
    let n = rows.max(1) as f64;
    let rmse: Vec<Vec<f64>> = sq.iter().map(|v| v.iter().map(|s| (s / n).sqrt()).collect()).collect();
    let metric = spec.metric();
    let score: Vec<f64> = match metric {
        Metric::Accuracy => right.iter().map(|&r| r as f64 / n).collect(),
        Metric::Rmse => rmse.iter().map(|v| v.iter().sum::<f64>() / c as f64).collect(),
    };
    // Best score; ties go to the larger λ (more regularisation).
    let better = |a: f64, b: f64| match metric {
        Metric::Accuracy => a >= b,
        Metric::Rmse => a <= b,
    };
    let mut best = 0;
    for i in 1..grid.len() {
        if better(score[i], score[best]) {
            best = i;
        }
    }
    let chosen: Vec<f64> = if spec.ridge.per_output {
        (0..c)
            .map(|j| {
                let mut b = 0;
                for i in 1..grid.len() {
                    if rmse[i][j] <= rmse[b][j] {
                        b = i;
                    }
                }
                grid[b]
            })
            .collect()
    } else {
        vec![grid[best]; c]
    };
    say(&format!(
        "ridge: λ = {} by validation on {rows} rows ({} {:.6})",
        lambda_text(&chosen),
        if metric == Metric::Accuracy { "accuracy" } else { "mean RMSE" },
        score[best]
    ));
    let table = ValidationTable {
        metric: if metric == Metric::Accuracy { "accuracy".into() } else { "rmse".into() },
        rows,
        grid,
        score,
        rmse_per_output: rmse,
        chosen: chosen.clone(),
        refit_rows: None,
    };
    Ok((table, chosen))
}

/// Adds the validation rows' statistics to the labeled (one pass) or pass-two statistics.
pub(crate) fn refit_state(state: &mut State, held_out: &GramStats) -> Result<()> {
    let target = match state {
        State::One { labeled, .. } => labeled,
        State::Two { pass2: Some(p2), .. } => p2,
        State::Two { pass2: None, .. } => return Err(Error::Internal("refit before pass two".into())),
    };
    target.merge(held_out).map_err(|e| Error::Internal(format!("validation statistics: {e}")))
}
