//! k-fold selection from fold statistics (`ridge.cv = K`, math.md §13.8): the fold-k models
//! for the whole λ grid come from the statistics of every other fold (the total minus
//! fold k, one tridiagonal reduction each); one further stream over the training rows
//! scores each row with its own fold's models; λ goes by the pooled held-out metric.
//! The stream also re-derives each fold's rows, `Σ(z−μ)` and `Σy` and checks them against
//! the fold statistics: training files replaced, shuffled or edited since `accumulate`
//! are refused rather than scored with models that trained on them.

use super::{choose, chunk_truth, Choice, Fits, Select};
use crate::error::{Error, Location, Result};
use crate::metrics::{Metric, SetScores};
use crate::model::ValidationTable;
use crate::pipeline::keep::StateLease;
use crate::pipeline::plan::chunk_rows_for;
use crate::pipeline::ridge::direct;
use crate::pipeline::solve_ctx::SolveCtx;
use crate::pipeline::stream::{check_nonnegative, lambda_text};
use crate::solve::DirectSolve;
use crate::source::{fold_of, Chunk, Dataset};
use crate::stats::{GramStats, Precision};

/// The grid of the total statistics, shared by every fold: σ̄ is the mean eigenvalue of
/// the centred scatter, its trace over D, so no eigendecomposition is needed.
pub(crate) fn grid_of(total: &GramStats) -> Vec<f64> {
    let inv = total.inv_weight();
    let diag = total.gram.diagonal();
    let trace: f64 = diag.iter().zip(&total.s).map(|(g, s)| g - s * s * inv).sum();
    crate::solve::lambda_grid(trace / total.dim().max(1) as f64)
}

/// Scores of every training row by its own fold's models.
pub(crate) struct KFoldScores<'a> {
    /// The fold statistics.
    pub folds: &'a [GramStats],
    /// Their sum.
    pub total: &'a GramStats,
    /// The metric.
    pub metric: Metric,
}

impl Select for KFoldScores<'_> {
    fn select(&mut self, fits: &dyn Fits, ctx: &mut SolveCtx<'_>) -> Result<Choice> {
        let spec = ctx.checked.spec();
        let data = ctx.training.ok_or_else(|| {
            Error::config(
                &spec.source,
                "ridge.cv",
                "k-fold scoring streams the training rows once more: solve with the training files (data.train) at hand",
            )
        })?;
        let k = self.folds.len();
        let grid = fits.grid();
        let c = self.total.c;
        let dim = self.total.dim();
        let sets: Vec<Vec<f64>> = grid.iter().map(|&l| vec![l; c]).collect();
        let cols = grid.len() * c;
        let start = std::time::Instant::now();
        // Per fold: every λ's weights side by side (D × 41c) and intercepts (41c).
        let mut models: Vec<(ndarray::Array2<f64>, Vec<f64>)> = Vec::with_capacity(k);
        for fold in self.folds {
            let mut rest = self.total.clone();
            rest.subtract(fold).map_err(|e| Error::bug_from("fold statistics of one run merge", e))?;
            let moments = rest.moments();
            let (ridge, _) = direct(&mut rest, DirectSolve::Tridiagonal, &mut StateLease::unkept(), ctx.threads, None)?;
            drop(rest);
            let wb = ridge.weights(&sets, &moments);
            let w = ndarray::Array2::from_shape_fn((dim, cols), |(i, j)| wb[j / c].0[i * c + j % c]);
            let b: Vec<f64> = (0..cols).map(|j| wb[j / c].1[j % c]).collect();
            models.push((w, b));
        }
        ctx.report.say(format!(
            "ridge: {k} fold models over {} λ in {:.1} s",
            grid.len(),
            start.elapsed().as_secs_f64()
        ));
        let scores = score_folds(ctx, data, &models, self.folds)?;
        let rmse = scores.rmse();
        // Ties go to the larger λ (more regularisation): the grid runs from small to large.
        let (best, score) = choose(&scores, self.metric, true);
        let lambda = grid[best];
        ctx.report.say(format!(
            "ridge: λ = {} by {k}-fold cross-validation on {} rows ({} {:.6})",
            lambda_text(&[lambda]),
            scores.rows,
            self.metric.name(),
            score[best]
        ));
        let table = ValidationTable {
            metric: self.metric.name().into(),
            rows: scores.rows,
            grid,
            score: score.clone(),
            rmse_per_output: rmse,
            chosen: vec![lambda; c],
            refit_rows: Some(self.total.n),
            folds: Some(k),
        };
        Ok(Choice {
            values: vec![lambda; c],
            index: best,
            table: Some(table),
            held_out: None,
            score: Some(score[best]),
        })
    }
}

/// Every training row scored by its own fold's models, in one stream, and checked
/// against the fold statistics.
fn score_folds(
    ctx: &SolveCtx<'_>,
    data: &Dataset,
    models: &[(ndarray::Array2<f64>, Vec<f64>)],
    folds: &[GramStats],
) -> Result<SetScores> {
    let spec = ctx.checked.spec();
    let k = models.len();
    let c = folds.first().map_or(0, |f| f.c);
    let n_sets = models.first().map_or(0, |m| m.1.len() / c.max(1));
    let map = &ctx.map().pipeline;
    let dim = map.output_dim();
    let label = spec.data.label.clone().unwrap_or_default();
    let coded = ctx.labels.coded();
    let needs = map.needs_nonnegative();
    let mut seen = FoldCheck::new(folds, dim, c, ctx.gram);
    let mut out = SetScores::new(n_sets, c);
    let mut z = Vec::new();
    // The pass's chunk rows: the memory line counts its buffers, not `run.chunk_rows`'.
    let chunk = chunk_rows_for(spec.run.chunk_rows, dim, false);
    let units = ctx.training_units.map_or_else(|| data.units(), <[_]>::to_vec);
    for unit in units {
        data.read_unit(unit, chunk, &mut |ch: Chunk| {
            check_nonnegative(needs, &ch, &data.features)?;
            z.resize(ch.rows * dim, 0.0);
            map.map_chunk(&ch.x, ch.rows, &mut z, ctx.threads);
            let (truth, y) = chunk_truth(&label, coded, &ch)?;
            let fold: Vec<usize> =
                (0..ch.rows).map(|r| fold_of(spec.run.seed, unit.file, unit.row_group, ch.first_row + r, k)).collect();
            for (f, (w, b)) in models.iter().enumerate() {
                let members: Vec<usize> = (0..ch.rows).filter(|&r| fold[r] == f).collect();
                if members.is_empty() {
                    continue;
                }
                let zf =
                    ndarray::Array2::from_shape_fn((members.len(), dim), |(i, j)| f64::from(z[members[i] * dim + j]));
                seen.add(f, &members, &z, &y);
                let f_all = zf.dot(w);
                let yf: Vec<f64> = members.iter().flat_map(|&r| y[r * c..(r + 1) * c].iter().copied()).collect();
                let tf: Vec<u32> = members.iter().filter_map(|&r| truth.get(r).copied()).collect();
                let mut s = vec![0.0; members.len() * c];
                for li in 0..n_sets {
                    for i in 0..members.len() {
                        for j in 0..c {
                            s[i * c + j] = f_all[(i, li * c + j)] + b[li * c + j];
                        }
                    }
                    let predicted = coded.map(|(_, code)| code.decode(&s));
                    out.add(li, &s, &yf, predicted.as_deref().map(|p| (p, tf.as_slice())));
                }
            }
            out.rows += ch.rows as u64;
            Ok(())
        })?;
    }
    seen.verify(folds, data)?;
    Ok(out)
}

/// What the scoring stream saw of each fold, to check against the fold statistics.
struct FoldCheck {
    n: Vec<u64>,
    /// `Σ(z−μ)` and `Σ|z−μ|` (the rounding scale) per fold, `k × D` each.
    s: Vec<f64>,
    scale: Vec<f64>,
    /// `Σy` and `Σ|y|` per fold, `k × c` each.
    u: Vec<f64>,
    uscale: Vec<f64>,
    shift: Vec<f64>,
    dim: usize,
    c: usize,
    /// With the f32 Gram the pass sums `z − μ` rounded to f32: sum the same values.
    f32_sums: bool,
}

impl FoldCheck {
    fn new(folds: &[GramStats], dim: usize, c: usize, gram: Precision) -> FoldCheck {
        let k = folds.len();
        FoldCheck {
            n: vec![0; k],
            s: vec![0.0; k * dim],
            scale: vec![0.0; k * dim],
            u: vec![0.0; k * c],
            uscale: vec![0.0; k * c],
            shift: folds.first().map_or_else(|| vec![0.0; dim], |f| f.shift.clone()),
            dim,
            c,
            f32_sums: gram == Precision::F32,
        }
    }

    fn add(&mut self, fold: usize, members: &[usize], z: &[f32], y: &[f64]) {
        let (dim, c) = (self.dim, self.c);
        self.n[fold] += members.len() as u64;
        for &r in members {
            for j in 0..dim {
                let mut v = f64::from(z[r * dim + j]) - self.shift[j];
                if self.f32_sums {
                    v = f64::from(v as f32);
                }
                self.s[fold * dim + j] += v;
                self.scale[fold * dim + j] += v.abs();
            }
            for j in 0..c {
                self.u[fold * c + j] += y[r * c + j];
                self.uscale[fold * c + j] += y[r * c + j].abs();
            }
        }
    }

    /// Row counts exactly; sums to 1e-8 of their absolute sums (the two sides add the
    /// same values in other orders and blocks, so they differ by about `n·2⁻⁵³` of it).
    fn verify(&self, folds: &[GramStats], data: &Dataset) -> Result<()> {
        let (dim, c) = (self.dim, self.c);
        let differs = |a: f64, b: f64, scale: f64| (a - b).abs() > 1e-8 * scale.max(1.0);
        for (f, st) in folds.iter().enumerate() {
            let what = if self.n[f] != st.n {
                Some(format!("fold {f} has {} rows in these files, {} in the statistics", self.n[f], st.n))
            } else if (0..dim).any(|j| differs(self.s[f * dim + j], st.s[j], self.scale[f * dim + j])) {
                Some(format!("fold {f}'s rows map to other features than the statistics hold"))
            } else if (0..c).any(|j| differs(self.u[f * c + j], st.u[j], self.uscale[f * c + j])) {
                Some(format!("fold {f}'s labels or targets differ from the statistics'"))
            } else {
                None
            };
            if let Some(what) = what {
                let at = data.files.first().map_or_else(|| Location::file("data.train"), |f| f.location());
                return Err(Error::data(
                    at,
                    format!(
                        "the training files are not the rows the fold statistics were accumulated from: {what} \
                         (a file replaced, shuffled or edited since accumulate?); k-fold scoring must stream the \
                         same rows: accumulate the parts again from these files"
                    ),
                ));
            }
        }
        Ok(())
    }
}
