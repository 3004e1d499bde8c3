//! k-fold cross-validation from fold statistics (`ridge.cv = K`, math.md §13.8): the
//! pass keeps one set of statistics per fold (rows go to folds by a seeded hash of
//! their position, the same in every shard); the fold-k models for the whole λ grid
//! come from the statistics of every other fold (the total minus fold k, so K Grams
//! are kept, not K + 1), one tridiagonal reduction each; one further stream over the
//! training rows scores each row with its own fold's models; λ goes by the pooled
//! held-out metric, and the model is refitted on all rows at that λ.

use crate::codes::OutputCode;
use crate::error::{Error, Location, Result};
use crate::model::ValidationTable;
use crate::pipeline::ridge_step::direct_ridge;
use crate::pipeline::spec::{LambdaValue, PipelineSpec};
use crate::pipeline::state::State;
use crate::pipeline::stream::{check_nonnegative, lambda_text};
use crate::pipeline::validation::{best_index, chunk_truth, SetScores};
use crate::sketch::FeaturePipeline;
use crate::solve::SolvePath;
use crate::source::{Chunk, Classes, Dataset};
use crate::stats::GramStats;

impl PipelineSpec {
    /// `ridge.cv`: K from 2 to 10, on what the fold models can be built for.
    pub(crate) fn check_cv(&self) -> Result<()> {
        let Some(k) = self.ridge.cv else { return Ok(()) };
        let f = self.source.as_str();
        let refuse = |why: &str| Err(Error::config(f, "ridge.cv", why.to_string()));
        if !(2..=10).contains(&k) {
            return refuse(&format!("must be from 2 to 10 folds, got {k}"));
        }
        if self.passes != 1 || self.components() != crate::solve::Components::All {
            return refuse("k-fold selection is for ridge on all D features: drop [pca] and passes = 2 (each fold would need its own PCA)");
        }
        if !self.data.validation.is_empty() {
            return refuse("choose λ either on data.validation or by k-fold, not both");
        }
        if !self.data.unlabeled.is_empty() || self.data.null_labels == crate::pipeline::spec::NullLabels::Unlabeled {
            return refuse("k-fold selection needs every row labeled (no unlabeled rows)");
        }
        if !matches!(self.lambda()?, crate::solve::LambdaChoice::Gcv { .. }) {
            return refuse("k-fold chooses λ from the grid: leave ridge.lambda = \"gcv\"");
        }
        if self.ridge.per_output {
            return refuse("k-fold chooses one shared λ: set ridge.per_output = false");
        }
        if self.solver.kind != crate::pipeline::spec::SolverKind::Ridge {
            return refuse("k-fold selection is for ridge; the [solver] learners choose λ₁ on data.validation");
        }
        Ok(())
    }
}

/// The fold of a row: a seeded hash of its position (file, row group, row within the
/// row group) modulo `k`. The same row lands in the same fold in every shard and run.
pub fn fold_of(seed: u64, file: usize, row_group: usize, row: usize, k: usize) -> usize {
    let mut h = seed ^ 0x243F_6A88_85A3_08D3;
    for v in [file as u64, row_group as u64, row as u64] {
        h = splitmix(h ^ v);
    }
    (h % k.max(1) as u64) as usize
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Folds of a chunk's rows.
pub(crate) fn chunk_folds(spec: &PipelineSpec, file: usize, row_group: usize, ch: &Chunk, k: usize) -> Vec<u8> {
    (0..ch.rows).map(|r| fold_of(spec.run.seed, file, row_group, ch.first_row + r, k) as u8).collect()
}

/// The GCV grid of the total statistics, shared by every fold: σ̄ is the mean eigenvalue
/// of the centred scatter, its trace over D, so no eigendecomposition is needed.
fn grid_of(total: &GramStats) -> Vec<f64> {
    let inv = 1.0 / total.n.max(1) as f64;
    let diag = total.gram.diagonal();
    let trace: f64 = diag.iter().zip(&total.s).map(|(g, s)| g - s * s * inv).sum();
    crate::solve::lambda_grid(trace / total.dim().max(1) as f64)
}

/// Chooses λ by k-fold cross-validation and leaves the total statistics in `state`
/// (as one-pass statistics) for the refit. Returns the score table and the λ.
pub(crate) fn cross_validate(
    spec: &PipelineSpec,
    pipeline: &FeaturePipeline,
    classes: Option<(&Classes, &OutputCode)>,
    state: &mut State,
    data: Option<&Dataset>,
    say: &mut dyn FnMut(&str),
) -> Result<(ValidationTable, f64)> {
    let State::Folds { folds } = state else {
        return Err(Error::Internal("k-fold selection without fold statistics".into()));
    };
    let data = data.ok_or_else(|| {
        Error::config(
            &spec.source,
            "ridge.cv",
            "k-fold scoring streams the training rows once more: solve with the training files (data.train) at hand",
        )
    })?;
    let k = folds.len();
    if let Some(i) = folds.iter().position(|f| f.n < 2) {
        return Err(Error::config(
            &spec.source,
            "ridge.cv",
            format!("fold {i} of {k} holds {} row(s): too few rows for {k} folds; lower ridge.cv", folds[i].n),
        ));
    }
    let mut total = folds[0].clone();
    for f in &folds[1..] {
        total.merge(f).map_err(|e| Error::Internal(format!("fold statistics: {e}")))?;
    }
    let grid = grid_of(&total);
    let c = total.c;
    let dim = total.dim();
    let sets: Vec<Vec<f64>> = grid.iter().map(|&l| vec![l; c]).collect();
    let cols = grid.len() * c;
    let mut at = spec.clone();
    at.ridge.lambda = LambdaValue::Word("gcv".into());
    let start = std::time::Instant::now();
    // Per fold: every λ's weights side by side (D × 41c) and intercepts (41c).
    let mut models: Vec<(ndarray::Array2<f64>, Vec<f64>)> = Vec::with_capacity(k);
    for fold in folds.iter() {
        let mut rest = total.clone();
        rest.subtract(fold).map_err(|e| Error::Internal(format!("fold statistics: {e}")))?;
        let moments = rest.moments();
        let (ridge, _) = direct_ridge(&at, &mut rest, SolvePath::Tridiagonal, &mut |_| {})?;
        drop(rest);
        let wb = ridge.weights(&sets, &moments);
        let w = ndarray::Array2::from_shape_fn((dim, cols), |(i, j)| wb[j / c].0[i * c + j % c]);
        let b: Vec<f64> = (0..cols).map(|j| wb[j / c].1[j % c]).collect();
        models.push((w, b));
    }
    say(&format!("ridge: {k} fold models over {} λ in {:.1} s", grid.len(), start.elapsed().as_secs_f64()));
    let scores = score_folds(spec, pipeline, classes, data, &models, folds)?;
    let metric = spec.metric();
    let score = scores.score(metric);
    let rmse = scores.rmse();
    // Ties go to the larger λ (more regularisation): the grid runs from small to large.
    let best = best_index(&score, metric, true);
    let lambda = grid[best];
    say(&format!(
        "ridge: λ = {} by {k}-fold cross-validation on {} rows ({} {:.6})",
        lambda_text(&[lambda]),
        scores.rows,
        metric.name(),
        score[best]
    ));
    let table = ValidationTable {
        metric: metric.name().into(),
        rows: scores.rows,
        grid,
        score,
        rmse_per_output: rmse,
        chosen: vec![lambda; c],
        refit_rows: Some(total.n),
        folds: Some(k),
    };
    *state = State::One { labeled: total, unlabeled: None };
    Ok((table, lambda))
}

/// Every training row scored by its own fold's models, in one stream. The stream also
/// re-derives each fold's row count, `Σ(z−μ)` and `Σy` and checks them against the fold
/// statistics: a `solve` of k-fold parts streams `data.train` once more, and files
/// replaced, shuffled or edited since `accumulate` would otherwise score rows with fold
/// models that trained on them, with nothing to show for it.
fn score_folds(
    spec: &PipelineSpec,
    pipeline: &FeaturePipeline,
    classes: Option<(&Classes, &OutputCode)>,
    data: &Dataset,
    models: &[(ndarray::Array2<f64>, Vec<f64>)],
    folds: &[GramStats],
) -> Result<SetScores> {
    let k = models.len();
    let c = folds.first().map_or(0, |f| f.c);
    let n_sets = models.first().map_or(0, |m| m.1.len() / c.max(1));
    let dim = pipeline.output_dim();
    let threads = spec.threads();
    let mut seen = FoldCheck::new(folds, dim, c, spec.run.gram);
    let mut out = SetScores::new(n_sets, c);
    let mut z = Vec::new();
    for unit in data.units() {
        data.read_unit(unit, spec.run.chunk_rows, &mut |ch: Chunk| {
            check_nonnegative(pipeline, &ch, &data.features)?;
            z.resize(ch.rows * dim, 0.0);
            pipeline.map_chunk(&ch.x, ch.rows, &mut z, threads);
            let (truth, y) = chunk_truth(spec, classes, &ch)?;
            let fold = chunk_folds(spec, unit.file, unit.row_group, &ch, k);
            for (f, (w, b)) in models.iter().enumerate() {
                let members: Vec<usize> = (0..ch.rows).filter(|&r| fold[r] as usize == f).collect();
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
                    out.add(li, &s, &yf, &tf, classes.map(|(_, code)| code));
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
    fn new(folds: &[GramStats], dim: usize, c: usize, gram: crate::stats::Precision) -> FoldCheck {
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
            f32_sums: gram == crate::stats::Precision::F32,
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
