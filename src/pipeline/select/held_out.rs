//! Held-out selection (math.md §13.8): every point of the family scored on the validation
//! files in one stream (one product per chunk with all weight sets side by side), the
//! best kept by the metric, and — for a refit — the validation rows' statistics taken in
//! the same stream, in the space the training statistics are in.

use super::{choose, per_output_best, Choice, Fits, Select, Space};
use crate::codes::OutputCode;
use crate::error::{Error, Result};
use crate::metrics::{Metric, SetScores};
use crate::model::ValidationTable;
use crate::pipeline::plan::chunk_rows_for;
use crate::pipeline::projection::project;
use crate::pipeline::solve_ctx::SolveCtx;
use crate::pipeline::stream::check_nonnegative;
use crate::source::{Chunk, Classes, Dataset};
use crate::stats::GramStats;

/// Scores on `data.validation`.
pub(crate) struct HeldOut {
    /// The metric.
    pub metric: Metric,
    /// One value per output (by RMSE).
    pub per_output: bool,
    /// Take the validation rows' statistics for a refit.
    pub refit: bool,
    /// Ties go to the later point (the larger λ) rather than the earlier (the sparser λ₁).
    pub ties_later: bool,
}

impl Select for HeldOut {
    fn select(&mut self, fits: &dyn Fits, ctx: &mut SolveCtx<'_>) -> Result<Choice> {
        let grid = fits.grid();
        let c = fits.outputs();
        let lambda_sets: Vec<Vec<f64>> = grid.iter().map(|&l| vec![l; c]).collect();
        let sets: Vec<Vec<f64>> = fits.weights(&lambda_sets).into_iter().map(|(w, _)| w).collect();
        let space = fits.space();
        // The refit's statistics, in the space the training statistics are in.
        let mut held_out = self.refit.then(|| GramStats::new(vec![0.0; 0], c));
        let scores = score_sets(ctx, &space, sets, held_out.as_mut())?;
        let rows = scores.rows;
        let rmse = scores.rmse();
        let (best, score) = choose(&scores, self.metric, self.ties_later);
        let values: Vec<f64> = if self.per_output {
            per_output_best(&rmse, c).into_iter().map(|i| grid[i]).collect()
        } else {
            vec![grid[best]; c]
        };
        let table = ValidationTable {
            metric: self.metric.name().into(),
            rows,
            grid,
            score: score.clone(),
            rmse_per_output: rmse,
            chosen: values.clone(),
            refit_rows: None,
            folds: None,
        };
        Ok(Choice { values, index: best, table: Some(table), held_out, score: Some(score[best]) })
    }
}

/// A held-out chunk's class indices (classification; empty otherwise) and its coded
/// targets, `rows × c`.
pub(crate) fn chunk_truth(
    label: &str,
    classes: Option<(&Classes, &OutputCode)>,
    ch: &Chunk,
) -> Result<(Vec<u32>, Vec<f64>)> {
    match classes {
        Some((cl, code)) => {
            let loc = ch.location.clone().column(label);
            let labels = ch.labels.as_ref().ok_or_else(|| Error::bug("held-out rows without a label column"))?;
            let t = cl.encode(labels, &loc)?;
            let mut y = Vec::new();
            code.targets(&t, &mut y);
            Ok((t, y))
        }
        None => Ok((Vec::new(), ch.targets.clone())),
    }
}

/// The solved space's features `φ(x) − mean_L` of a chunk, where φ is `z` (one pass) or
/// the projection (two passes): every set's scores are linear in them.
fn centred_features(space: &Space<'_>, z: &[f32], rows: usize, dim: usize) -> (Vec<f64>, Vec<f64>, usize) {
    let (phi, width): (Vec<f64>, usize) = match space.pcas {
        None => (z[..rows * dim].iter().map(|&v| f64::from(v)).collect(), dim),
        Some(p) => (project(p, z, rows, dim), p.iter().map(|x| x.e).sum()),
    };
    let centred = phi.chunks_exact(width.max(1)).flat_map(|r| r.iter().zip(space.mean).map(|(v, m)| v - m)).collect();
    (phi, centred, width)
}

/// Scores every weight set (`width × c` each, on the centred features of `space`) on the
/// validation files in one stream. With `refit`, the validation rows' statistics are
/// taken in the same stream (their shift is set here, the training statistics' own).
#[allow(clippy::expect_used)] // Invariant: `q` is rows × qw by construction just above.
fn score_sets(
    ctx: &mut SolveCtx<'_>,
    space: &Space<'_>,
    sets: Vec<Vec<f64>>,
    mut refit: Option<&mut GramStats>,
) -> Result<SetScores> {
    let spec = ctx.checked.spec();
    let ds = Dataset::open(ctx.session, &spec.data.validation, ctx.checked.labeled_columns())?;
    let map = &ctx.map().pipeline;
    let (c, dim) = (space.ymean.len(), map.output_dim());
    let label = spec.data.label.clone().unwrap_or_default();
    let coded = ctx.labels.coded();
    let (threads, gram) = (ctx.threads, ctx.gram);
    let width = sets.first().map_or(0, |w| w.len() / c.max(1));
    let cols = sets.len() * c;
    let all_w = ndarray::Array2::from_shape_fn((width, cols), |(i, j)| sets[j / c][i * c + j % c]);
    // The side-by-side copy is all the stream needs: at large D the sets are not kept twice.
    let n_sets = sets.len();
    drop(sets);
    if let Some(st) = refit.as_deref_mut() {
        *st = GramStats::new(space.shift.to_vec(), c);
    }
    let mut out = SetScores::new(n_sets, c);
    let mut z = Vec::new();
    let needs = map.needs_nonnegative();
    // The pass's chunk rows, which the memory line counts the scoring buffers by: a chunk
    // of `run.chunk_rows` at large D would hold more than the line states.
    let chunk = chunk_rows_for(spec.run.chunk_rows, dim, false);
    crate::pipeline::stream::stream(&ds, &ds.units(), chunk, &mut |ch: Chunk| {
        check_nonnegative(needs, &ch, &ds.features)?;
        z.resize(ch.rows * dim, 0.0);
        map.map_chunk(&ch.x, ch.rows, &mut z, threads);
        let (phi, q, qw) = centred_features(space, &z, ch.rows, dim);
        let (truth, y) = chunk_truth(&label, coded, &ch)?;
        if let Some(st) = refit.as_deref_mut() {
            match space.pcas {
                None => st.add_with(&z[..ch.rows * dim], &y, ch.rows, threads, gram)?,
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
                    scores[r * c + j] = f[(r, j)] + space.ymean[j];
                }
            }
            let predicted = coded.map(|(_, code)| code.decode(&scores));
            out.add(li, &scores, &y, predicted.as_deref().map(|p| (p, truth.as_slice())));
        }
        out.rows += ch.rows as u64;
        Ok(())
    })?;
    Ok(out)
}
