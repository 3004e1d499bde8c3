//! λ by validation: scoring every λ of the grid on the validation files in one stream,
//! and the refit on train ∪ validation at the chosen λ.

use crate::codes::OutputCode;
use crate::error::{Error, Result};
use crate::model::ValidationTable;
use crate::pipeline::plan::ColumnsFor;
use crate::pipeline::projection::{project, StagePca};
use crate::pipeline::spec::{Metric, PipelineSpec};
use crate::pipeline::state::Solved;
use crate::pipeline::state::State;
use crate::pipeline::stream::{check_nonnegative, lambda_text};
use crate::sketch::FeaturePipeline;
use crate::source::{Chunk, Classes, Dataset};
use crate::stats::GramStats;

/// The solved space's features `φ(x) − mean_L` of a chunk, where φ is `z` (one pass) or
/// the projection (two passes): every λ's validation scores are linear in them.
fn centred_features(
    pcas: Option<&[StagePca]>,
    mean: &[f64],
    z: &[f32],
    rows: usize,
    dim: usize,
) -> (Vec<f64>, Vec<f64>, usize) {
    let (phi, width): (Vec<f64>, usize) = match pcas {
        None => (z[..rows * dim].iter().map(|&v| f64::from(v)).collect(), dim),
        Some(p) => {
            let e = p.iter().map(|x| x.e).sum();
            (project(p, z, rows, dim), e)
        }
    };
    let centred = phi.chunks_exact(width.max(1)).flat_map(|r| r.iter().zip(mean).map(|(v, m)| v - m)).collect();
    (phi, centred, width)
}

/// The validation rows' squared errors and right answers under several weight sets.
pub(crate) struct SetScores {
    /// Rows scored.
    pub(crate) rows: u64,
    /// Per set, per output: Σ (score − target)².
    pub(crate) sq: Vec<Vec<f64>>,
    /// Per set: rows classified right (classification).
    pub(crate) right: Vec<u64>,
    /// Per set: Σ over rows and outputs of `log(1 + exp(−t·f))` (classification).
    pub(crate) logistic: Vec<f64>,
}

/// `log(1 + exp(−m))` without overflow.
pub(crate) fn logistic_loss(margin: f64) -> f64 {
    if margin > 0.0 {
        (-margin).exp().ln_1p()
    } else {
        -margin + margin.exp().ln_1p()
    }
}

impl SetScores {
    pub(crate) fn new(sets: usize, c: usize) -> SetScores {
        SetScores { rows: 0, sq: vec![vec![0.0; c]; sets], right: vec![0; sets], logistic: vec![0.0; sets] }
    }

    /// Adds set `li`'s scores of some rows (row-major `rows × c`) against their coded
    /// targets `y` and, for classification, their classes (`truth`, decoded by `code`).
    pub(crate) fn add(&mut self, li: usize, scores: &[f64], y: &[f64], truth: &[u32], code: Option<&OutputCode>) {
        let c = self.sq[li].len().max(1);
        for (i, (s, t)) in scores.iter().zip(y).enumerate() {
            self.sq[li][i % c] += (s - t).powi(2);
            self.logistic[li] += logistic_loss(s * t);
        }
        if let Some(code) = code {
            self.right[li] += code.decode(scores).iter().zip(truth).filter(|(p, t)| **p == **t as usize).count() as u64;
        }
    }

    /// Per set, per output: the RMSE.
    pub(crate) fn rmse(&self) -> Vec<Vec<f64>> {
        let n = self.rows.max(1) as f64;
        self.sq.iter().map(|v| v.iter().map(|s| (s / n).sqrt()).collect()).collect()
    }

    /// Per set: accuracy, or the mean RMSE over outputs.
    pub(crate) fn score(&self, metric: Metric) -> Vec<f64> {
        let n = self.rows.max(1) as f64;
        match metric {
            Metric::Accuracy => self.right.iter().map(|&r| r as f64 / n).collect(),
            Metric::Rmse => self.rmse().iter().map(|v| v.iter().sum::<f64>() / v.len().max(1) as f64).collect(),
            Metric::LogLoss => {
                let c = self.sq.first().map_or(1, Vec::len).max(1) as f64;
                self.logistic.iter().map(|l| l / (n * c)).collect()
            }
        }
    }
}

/// A held-out chunk's class indices (classification; empty otherwise) and its coded
/// targets, `rows × c`.
pub(crate) fn chunk_truth(
    spec: &PipelineSpec,
    classes: Option<(&Classes, &OutputCode)>,
    ch: &Chunk,
) -> Result<(Vec<u32>, Vec<f64>)> {
    match classes {
        Some((cl, code)) => {
            let loc = ch.location.clone().column(spec.data.label.clone().unwrap_or_default());
            let labels =
                ch.labels.as_ref().ok_or_else(|| Error::Internal("held-out rows without a label column".into()))?;
            let t = cl.encode(labels, &loc)?;
            let mut y = Vec::new();
            code.targets(&t, &mut y);
            Ok((t, y))
        }
        None => Ok((Vec::new(), ch.targets.clone())),
    }
}

/// The index of the best score; ties go to the later set when `ties_later`, else to the
/// earlier (callers send ties to the larger λ: more regularisation).
pub(crate) fn best_index(score: &[f64], metric: Metric, ties_later: bool) -> usize {
    let better = |a: f64, b: f64| match metric {
        Metric::Accuracy => a > b || (ties_later && a == b),
        Metric::Rmse | Metric::LogLoss => a < b || (ties_later && a == b),
    };
    let mut best = 0;
    for i in 1..score.len() {
        if better(score[i], score[best]) {
            best = i;
        }
    }
    best
}

/// The solved space a set of weights lives in: its per-stage projections (two passes)
/// and the labeled means the weights are centred on.
pub(crate) struct Space<'a> {
    pub(crate) pcas: Option<&'a [StagePca]>,
    pub(crate) mean: &'a [f64],
    pub(crate) ymean: &'a [f64],
}

/// Scores every weight set (`width × c` each, on the centred features of `space`) on
/// the validation files in one stream: one product per chunk with all sets side by
/// side. With `refit`, the validation rows' statistics are taken in the same stream.
#[allow(clippy::expect_used)] // Invariant: `q` is rows × qw by construction just above.
pub(crate) fn score_sets(
    spec: &PipelineSpec,
    prep_pipeline: &FeaturePipeline,
    classes: Option<(&Classes, &OutputCode)>,
    space: &Space,
    sets: Vec<Vec<f64>>,
    mut refit: Option<&mut GramStats>,
) -> Result<SetScores> {
    let ds = Dataset::open(&spec.data.validation, ColumnsFor::labeled(spec))?;
    let (c, dim) = (space.ymean.len(), prep_pipeline.output_dim());
    let ymean = space.ymean;

    let threads = spec.threads();
    let mut z = Vec::new();
    let width = sets.first().map_or(0, |w| w.len() / c.max(1));
    let cols = sets.len() * c;
    let all_w = ndarray::Array2::from_shape_fn((width, cols), |(i, j)| sets[j / c][i * c + j % c]);
    // The side-by-side copy is all the stream needs: at large D the sets are not kept twice.
    let n_sets = sets.len();
    drop(sets);
    let mut out = SetScores::new(n_sets, c);
    crate::pipeline::stream::stream(&ds, &ds.units(), spec.run.chunk_rows, &mut |ch: Chunk| {
        check_nonnegative(prep_pipeline, &ch, &ds.features)?;
        z.resize(ch.rows * dim, 0.0);
        prep_pipeline.map_chunk(&ch.x, ch.rows, &mut z, threads);
        let (phi, q, qw) = centred_features(space.pcas, space.mean, &z, ch.rows, dim);
        let (truth, y) = chunk_truth(spec, classes, &ch)?;
        if let Some(st) = refit.as_deref_mut() {
            // The refit's statistics, in the space the training statistics are in.
            match space.pcas {
                None => st.add_with(&z[..ch.rows * dim], &y, ch.rows, threads, spec.run.gram)?,
                Some(_) => st.add_f64(&phi, &y, ch.rows, threads)?,
            }
        }
        let qv = ndarray::ArrayView2::from_shape((ch.rows, qw), &q).expect("chunk features match the solved width");
        let f_all = qv.dot(&all_w);
        // One buffer for every set's scores of this chunk.
        let mut scores = vec![0.0; ch.rows * c];
        for li in 0..n_sets {
            let f = f_all.slice_axis(ndarray::Axis(1), ndarray::Slice::from(li * c..(li + 1) * c));
            for r in 0..ch.rows {
                for j in 0..c {
                    scores[r * c + j] = f[(r, j)] + ymean[j];
                }
            }
            out.add(li, &scores, &y, &truth, classes.map(|(_, code)| code));
        }
        out.rows += ch.rows as u64;
        Ok(())
    })?;
    Ok(out)
}

/// λ by validation: every λ of the grid scored in one stream, the best kept.
pub(crate) fn validate(
    spec: &PipelineSpec,
    prep_pipeline: &FeaturePipeline,
    classes: Option<(&Classes, &OutputCode)>,
    solved: &Solved,
    refit: Option<&mut GramStats>,
    say: &mut dyn FnMut(&str),
) -> Result<(ValidationTable, Vec<f64>)> {
    let grid = solved.ridge.grid();
    let c = solved.ridge.outputs();
    let lambda_sets: Vec<Vec<f64>> = grid.iter().map(|&l| vec![l; c]).collect();
    let sets: Vec<Vec<f64>> = solved.ridge.weights(&lambda_sets, &solved.labeled).into_iter().map(|(w, _)| w).collect();
    let space = Space { pcas: solved.pcas.as_deref(), mean: &solved.labeled.mean, ymean: &solved.labeled.ymean };
    let scores = score_sets(spec, prep_pipeline, classes, &space, sets, refit)?;
    let rows = scores.rows;
    let rmse = scores.rmse();
    let metric = spec.metric();
    let score = scores.score(metric);
    // Ties go to the larger λ (more regularisation): the grid runs from small to large.
    let best = best_index(&score, metric, true);
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
        metric.name(),
        score[best]
    ));
    let table = ValidationTable {
        metric: metric.name().into(),
        rows,
        grid,
        score,
        rmse_per_output: rmse,
        chosen: chosen.clone(),
        refit_rows: None,
        folds: None,
    };
    Ok((table, chosen))
}

/// Adds the validation rows' statistics to the labeled (one pass) or pass-two statistics.
pub(crate) fn refit_state(state: &mut State, held_out: &GramStats) -> Result<()> {
    let target = match state {
        State::One { labeled, .. } => labeled,
        State::Two { pass2: Some(p2), .. } => p2,
        State::Two { pass2: None, .. } => return Err(Error::Internal("refit before pass two".into())),
        State::Folds { .. } | State::Candidates { .. } | State::Rows(_) => {
            return Err(Error::Internal("a validation refit of fold, candidate or kept-row statistics".into()))
        }
    };
    target.merge(held_out).map_err(|e| Error::Internal(format!("validation statistics: {e}")))
}
