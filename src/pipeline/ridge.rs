//! Ridge on accumulated statistics by the path the plan chose (math.md §13.2–13.7): the
//! problem on all features (Cholesky at a fixed λ, in place where planned, or the
//! tridiagonal form for a grid), or PCA and ridge in the eigenbasis ([`primal`]); then
//! λ settled by the plan's selection, the refit where it asks for one, and the weights
//! folded back to feature space ([`settle`]). One-pass statistics, pass two's projected
//! statistics and the k-fold refit all solve here.

use std::time::Instant;

use crate::error::{Error, Location, Result};
use crate::model::{Projection, ProjectionInfo};
use crate::pipeline::check::Selection;
use crate::pipeline::plan::{PcaPlan, RidgeSolve};
use crate::pipeline::projection::{fit_pca, record, worst_residual, StagePca};
use crate::pipeline::report::{Reporter, SelectionReport, SolveReport};
use crate::pipeline::select::{self, Fits, Space};
use crate::pipeline::solve_ctx::{Settled, Solution, SolveCtx};
use crate::pipeline::stream::lambda_text;
use crate::solve::{Components, GcvCurve, Keep, LambdaChoice, Pca, Ridge, RotatedProblem, SolvePath};
use crate::stats::{Centered, GramStats};

/// A solved ridge problem: weights for any λ of its grid, and what the model records.
pub(crate) struct Solved {
    pub ridge: Ridge,
    pub path: SolvePath,
    pub labeled: Centered,
    /// The statistics' shift (a refit's held-out statistics take it).
    pub shift: Vec<f64>,
    pub projections: Vec<(ProjectionInfo, Projection)>,
    pub eigenvalues: Vec<f64>,
    pub pcas: Option<Vec<StagePca>>,
    pub rows: u64,
    pub unlabeled_rows: u64,
    pub components: usize,
    pub components_requested: usize,
    /// The Cholesky factored the statistics' own Gram.
    pub in_place: bool,
}

impl Solved {
    /// Ridge on all `D` features of the labeled rows (no projection, no unlabeled rows).
    pub(crate) fn on_all_features(ridge: Ridge, path: SolvePath, labeled: Centered, eigenvalues: Vec<f64>) -> Solved {
        let dim = labeled.mean.len();
        Solved {
            ridge,
            path,
            rows: labeled.n,
            shift: Vec::new(),
            labeled,
            projections: Vec::new(),
            eigenvalues,
            pcas: None,
            unlabeled_rows: 0,
            components: dim,
            components_requested: dim,
            in_place: false,
        }
    }
}

impl Fits for Solved {
    fn grid(&self) -> Vec<f64> {
        self.ridge.grid()
    }
    fn outputs(&self) -> usize {
        self.ridge.outputs()
    }
    fn weights(&self, sets: &[Vec<f64>]) -> Vec<(Vec<f64>, Vec<f64>)> {
        self.ridge.weights(sets, &self.labeled)
    }
    fn gcv(&self) -> Option<GcvCurve> {
        self.ridge.gcv(&self.labeled)
    }
    fn space(&self) -> Space<'_> {
        Space { pcas: self.pcas.as_deref(), mean: &self.labeled.mean, ymean: &self.labeled.ymean, shift: &self.shift }
    }
}

/// Refuses statistics of fewer than two labeled rows.
pub(crate) fn enough_rows(n: u64) -> Result<()> {
    if n < 2 {
        return Err(Error::data(Location::default(), format!("{n} labeled row(s); at least 2 are needed")));
    }
    Ok(())
}

/// Ridge on all features of `stats` by the direct path planned (`Ridge::direct`), saying
/// what the run should know: a factorisation in place, a rank short of `D`. `keep` keeps
/// the statistics before an in-place factor consumes them; `spill` is where a planned
/// spill of the Gram goes (beside the checkpoint).
pub(crate) fn direct(
    stats: &mut GramStats,
    solve: RidgeSolve,
    lambda: LambdaChoice,
    threads: usize,
    report: Option<&mut Reporter>,
    (keep, spill): (Option<Keep<'_>>, Option<&std::path::Path>),
) -> Result<(Ridge, Vec<f64>)> {
    let spill = spill.filter(|_| solve.spill && solve.consumes());
    let in_place = solve.consumes();
    let dim = stats.dim();
    let mut report = report;
    if let (true, None, Some(r)) = (in_place, spill, report.as_deref_mut()) {
        r.say(match solve.path {
            SolvePath::CholeskyF32 => "solve: an f64 fallback would factor in place on the statistics (they are on disk, or a copy of the Gram would not fit)",
            _ => "solve: factoring in place on the statistics (they are on disk, or a copy of the Gram would not fit)",
        });
    }
    // Statistics that nothing keeps (no checkpoint, or a copy of them) are consumed as they are.
    let mut nothing = |_: &GramStats| Ok(None);
    let mut keep: Option<Keep<'_>> = match (in_place, keep) {
        (false, _) => None,
        (true, Some(k)) => Some(&mut *k),
        (true, None) => Some(&mut nothing),
    };
    // A spilled solve knows where its Gram is read back from once the state is kept.
    let mut saying;
    if let Some((spill, inner)) = spill.and_then(|s| keep.take().map(|k| (s, k))) {
        let mut r = report.as_deref_mut();
        saying = move |s: &GramStats| {
            let kept = inner(s)?;
            let from = kept.as_ref().map_or_else(
                || format!("spilled to {}", spill.display()),
                |k| format!("read from the checkpoint {} (block '{}'), not written again", k.path.display(), k.block),
            );
            if let Some(r) = r.as_deref_mut() {
                r.say(format!(
                    "solve: the f32 factor takes the statistics' own memory; their Gram, {from}, is streamed back by each refinement step"
                ));
            }
            Ok(kept)
        };
        keep = Some(&mut saying);
    }
    let d = Ridge::direct(stats, solve.path, lambda, keep, spill, threads)?;
    if let (Some(rank), Some(r)) = (d.rank, report) {
        r.say(format!("note: the covariance has numerical rank {rank} of {dim}"));
    }
    Ok((d.ridge, d.eigenvalues))
}

/// The statistics of one pass solved by `solve`: on all features directly, or PCA (on
/// all rows when some are unlabeled) and ridge in its eigenbasis. `keep` is called
/// before a factorisation in place consumes `labeled` (the caller's whole state with it).
pub(crate) fn primal(
    labeled: &mut GramStats,
    unlabeled: Option<&GramStats>,
    solve: (RidgeSolve, Option<&PcaPlan>),
    lambda: LambdaChoice,
    ctx: &mut SolveCtx<'_>,
    keep: Option<Keep<'_>>,
) -> Result<Solved> {
    let (mut solve, pca_plan) = solve;
    enough_rows(labeled.n)?;
    // λ = 0 (a grid of a zero spectrum) is the pseudo-inverse: the Cholesky cannot take it.
    if solve.path.is_cholesky() && !matches!(lambda, LambdaChoice::Fixed(l) if l > 0.0) {
        solve = RidgeSolve { path: SolvePath::Eigen, in_place: false, spill: false };
    }
    let shift = labeled.shift.clone();
    if solve.path != SolvePath::Eigen {
        let cl = labeled.moments();
        let spill = ctx.keeper.and_then(|k| k.spill_path());
        if solve.spill && spill.is_none() {
            // Nowhere to spill the Gram (the planner spills only beside a local
            // checkpoint): the f64 factor in place needs no more memory, and the model
            // names the path that solved.
            solve = RidgeSolve { path: SolvePath::Cholesky, in_place: true, spill: false };
        }
        let (ridge, eigenvalues) =
            direct(labeled, solve, lambda, ctx.threads, Some(ctx.report), (keep, spill.as_deref()))?;
        let in_place = solve.consumes();
        return Ok(Solved { shift, in_place, ..Solved::on_all_features(ridge, solve.path, cl, eigenvalues) });
    }
    let use_pca = pca_plan.is_some();
    let dense = PcaPlan { components: Components::All, krylov: None, tolerance: ctx.checked.pca.tolerance };
    let plan = pca_plan.unwrap_or(&dense);
    let env = (ctx.checked.seed(), ctx.threads);
    let (pca, cl, ca, unl) = match unlabeled {
        Some(u) if u.n > 0 => {
            let mut all = labeled.without_targets();
            all.merge(u).map_err(|e| Error::bug_from("labeled and unlabeled statistics share a shape", e))?;
            let (pca, ca) = fit_pca(plan, &all, env)?;
            // S = Ūᵀ C_L Ū needs the labeled covariance itself.
            (pca, labeled.centered(), Some(ca), u.n)
        }
        _ => {
            let (pca, cl) = fit_pca(plan, labeled, env)?;
            (pca, cl, None, 0)
        }
    };
    record(ctx.report, None, &pca);
    if !pca.residuals.is_empty() {
        let worst = pca.residuals.iter().copied().fold(0.0, f64::max);
        ctx.report.say(format!(
            "pca: top {} pairs by block Krylov ({} block products), worst residual {worst:.2e}",
            pca.e_eff, pca.iterations
        ));
    }
    for w in &pca.warnings {
        ctx.report.warn(w.clone());
    }
    let problem = RotatedProblem::new(&pca, &cl, ca.is_none(), use_pca)?;
    let mean_a = ca.as_ref().map_or(cl.mean.clone(), |c| c.mean.clone());
    let dim = cl.mean.len();
    let projections = if use_pca { vec![projection(&pca, 0..dim, mean_a)] } else { Vec::new() };
    Ok(Solved {
        ridge: Ridge::Eigen(problem),
        path: solve.path,
        rows: cl.n,
        shift,
        labeled: cl,
        projections,
        eigenvalues: pca.eigenvalues.clone(),
        pcas: None,
        unlabeled_rows: unl,
        components: if use_pca { pca.e_eff } else { dim },
        components_requested: if use_pca { pca.e_requested } else { dim },
        in_place: false,
    })
}

fn projection(pca: &Pca, range: std::ops::Range<usize>, mean: Vec<f64>) -> (ProjectionInfo, Projection) {
    (
        ProjectionInfo {
            start: range.start,
            end: range.end,
            components: pca.e_eff,
            residual: worst_residual(pca),
            variance_total: Some(pca.trace),
        },
        Projection { mean, basis: pca.basis.clone(), eigenvalues: pca.eigenvalues.clone() },
    )
}

/// How a held-out choice is refitted: the statistics merged with the held-out rows'
/// solved again at the chosen λ (one per output).
pub(crate) type Refit<'r> = dyn FnMut(&GramStats, &[f64], &mut SolveCtx<'_>) -> Result<Solved> + 'r;

/// λ settled by `selection` over `solved`, the refit where the choice carries held-out
/// statistics, and the weights folded back to feature space.
pub(crate) fn settle(
    mut solved: Solved,
    selection: Selection,
    refit: &mut Refit<'_>,
    ctx: &mut SolveCtx<'_>,
    start: Instant,
) -> Result<Solution> {
    let gcv = solved.ridge.gcv(&solved.labeled);
    let choice = select::for_ridge(selection, ctx.checked.metric).select(&solved, ctx)?;
    let lambdas = choice.values.clone();
    let mut table = choice.table;
    let mut chosen =
        SelectionReport { method: selection.name().into(), chosen: lambdas.clone(), ..SelectionReport::default() };
    if let Some(t) = &mut table {
        let metric = ctx.checked.metric;
        ctx.report.say(format!(
            "ridge: λ = {} by validation on {} rows ({} {:.6})",
            lambda_text(&lambdas),
            t.rows,
            metric.name(),
            choice.score.unwrap_or(f64::NAN)
        ));
        chosen.rows = t.rows;
        if let Some(held_out) = &choice.held_out {
            let (trained, unlabeled) = (solved.rows, solved.unlabeled_rows);
            solved = refit(held_out, &lambdas, ctx)?;
            solved.unlabeled_rows = unlabeled;
            ctx.report.say(format!(
                "ridge: refit at λ = {} on {} rows ({trained} training + {} validation)",
                lambda_text(&lambdas),
                solved.rows,
                held_out.n
            ));
            t.refit_rows = Some(solved.rows);
            chosen.refit_rows = Some(solved.rows);
        }
    }
    ctx.report.report.selections.push(chosen);
    let (wp, bp) = solved.ridge.weights(std::slice::from_ref(&lambdas), &solved.labeled).remove(0);
    let dim = ctx.map().dim();
    let (weights, bias) = fold_back(&solved, wp, bp, dim);
    let seconds = start.elapsed().as_secs_f64();
    ctx.report.say(format!("solve: {seconds:.1} s ({} path)", solved.path.name()));
    let refinement = solved.ridge.refinement();
    match refinement {
        Some(r) if r.fell_back => ctx.report.say(format!(
            "note: the f32 factor could not be refined at this λ ({}; C + λI is too ill-conditioned for f32, κ·2⁻²⁴ near 1 or above); the f64 Cholesky solved instead",
            match r.residual {
                Some(res) => format!("the residual stalled at {res:.1e} after {} step(s)", r.steps),
                None => "the f32 factor failed".into(),
            }
        )),
        Some(r) => ctx.report.say(format!(
            "solve: the f32 factor refined in {} step(s) to a residual of {:.1e}",
            r.steps,
            r.residual.unwrap_or(f64::NAN)
        )),
        None => {}
    }
    ctx.report.report.solve =
        Some(SolveReport { path: solved.path.name().into(), in_place: solved.in_place, seconds, refinement });
    Ok(Solution {
        weights,
        bias,
        mean: solved.labeled.mean.clone(),
        eigenvalues: solved.eigenvalues,
        projections: solved.projections,
        settled: Settled {
            components: solved.components,
            components_requested: solved.components_requested,
            lambdas,
            gcv,
            rows: solved.rows,
            unlabeled_rows: solved.unlabeled_rows,
            validation: table,
            solver: solved.path.name().into(),
            refinement,
            sparse: None,
            candidates: None,
        },
        candidate: ctx.candidate,
        score: choice.score,
    })
}

/// The refit's λ choice: a shared λ > 0 solves once at it (the Cholesky the plan chose),
/// anything else keeps the grid of the first solve.
pub(crate) fn refit_lambda(solve: RidgeSolve, lambdas: &[f64]) -> (RidgeSolve, LambdaChoice) {
    let shared = lambdas.windows(2).all(|w| w[0] == w[1]) && lambdas.first().is_some_and(|&l| l > 0.0);
    match (solve.path, shared) {
        (path, true) if path.is_cholesky() => (solve, LambdaChoice::Fixed(lambdas[0])),
        (path, false) if path.is_cholesky() => (
            RidgeSolve { path: SolvePath::Tridiagonal, in_place: false, spill: false },
            LambdaChoice::Gcv { per_output: true },
        ),
        _ => (solve, LambdaChoice::Gcv { per_output: !shared }),
    }
}

/// Folds the solved space's `(W_p, b_p)` into `W` (D × c) and `b` over the features.
pub(crate) fn fold_back(solved: &Solved, wp: Vec<f64>, bp: Vec<f64>, dim: usize) -> (Vec<f64>, Vec<f64>) {
    let c = solved.ridge.outputs();
    match &solved.pcas {
        None => (wp, bp),
        Some(pcas) => {
            // W_i = Ū_i w_i, b = b_p − Σ W_iᵀ z̄_i (math.md §13.5).
            let mut w = vec![0.0; dim * c];
            let mut b = bp;
            let mut row = 0;
            for p in pcas {
                for (i, zi) in p.range.clone().zip(&p.mean) {
                    let li = i - p.range.start;
                    for k in 0..c {
                        let v: f64 = (0..p.e).map(|j| p.basis[li * p.e + j] * wp[(row + j) * c + k]).sum();
                        w[i * c + k] = v;
                        b[k] -= v * zi;
                    }
                }
                row += p.e;
            }
            (w, b)
        }
    }
}
