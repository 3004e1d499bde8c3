//! Ridge on accumulated statistics by the solve the plan chose (math.md §13.2–13.7): the
//! problem on all features (Cholesky at a fixed λ, in place where planned, or the
//! tridiagonal form for a grid), or PCA and ridge in the eigenbasis ([`primal`]); then
//! λ settled by the plan's selection, the refit where it asks for one, and the weights
//! folded back to feature space ([`settle`]). Nothing here changes a decision of the plan. One-pass statistics, pass two's projected
//! statistics and the k-fold refit all solve here.

use std::time::Instant;

use crate::error::{Error, Location, Result};
use crate::model::{Projection, ProjectionInfo};
use crate::pipeline::check::Selection;
use crate::pipeline::keep::StateLease;
use crate::pipeline::plan::{PcaPlan, RidgeSolve};
use crate::pipeline::projection::{fit_pca, record, worst_residual, StagePca};
use crate::pipeline::report::{Reporter, SelectionReport, SolveReport};
use crate::pipeline::select::{self, Fits, Space};
use crate::pipeline::solve_ctx::{Settled, Solution, SolveCtx};
use crate::pipeline::stream::lambda_text;
use crate::solve::{Components, DirectSolve, Factor, GcvCurve, Pca, Ridge, RotatedProblem, SolvePath};
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
    /// The solve that ran on Gram statistics (none: the dual's).
    pub solve: Option<RidgeSolve>,
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
            solve: None,
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

/// Ridge on all features of `stats` by the direct solve planned (`Ridge::direct`), saying
/// what the run should know: a factorisation in place, where a spilled Gram went, a rank
/// short of `D`. `lease` keeps the statistics before the solve consumes or spills them.
pub(crate) fn direct(
    stats: &mut GramStats,
    solve: DirectSolve,
    lease: &mut StateLease<'_>,
    threads: usize,
    report: Option<&mut Reporter>,
) -> Result<(Ridge, Vec<f64>)> {
    let dim = stats.dim();
    let mut report = report;
    if let (DirectSolve::Cholesky { factor, .. }, Some(r)) = (solve, report.as_deref_mut()) {
        match factor {
            Factor::InPlace => {
                r.say("solve: factoring in place on the statistics (they are on disk, or a copy of the Gram would not fit)")
            }
            Factor::MixedInPlace => r.say("solve: an f64 fallback would factor in place on the statistics (they are on disk, or a copy of the Gram would not fit)"),
            _ => {}
        }
    }
    let d = Ridge::direct(stats, solve, lease, threads);
    if let Some(r) = report.as_deref_mut() {
        for from in lease.said.drain(..) {
            r.say(format!(
                "solve: the f32 factor takes the statistics' own memory; their Gram, {from}, is streamed back by each refinement step"
            ));
        }
    }
    let d = d?;
    if let (Some(rank), Some(r)) = (d.rank, report) {
        r.say(format!("note: the covariance has numerical rank {rank} of {dim}"));
    }
    Ok((d.ridge, d.eigenvalues))
}

/// The statistics of one pass solved by `solve`: on all features directly, or PCA (`pca`;
/// on all rows when some are unlabeled) and ridge in its eigenbasis. `lease` keeps the
/// caller's whole state before a factorisation in place consumes `labeled`.
pub(crate) fn primal(
    labeled: &mut GramStats,
    unlabeled: Option<&GramStats>,
    (solve, pca_plan): (RidgeSolve, Option<&PcaPlan>),
    ctx: &mut SolveCtx<'_>,
    lease: &mut StateLease<'_>,
) -> Result<Solved> {
    enough_rows(labeled.n)?;
    let shift = labeled.shift.clone();
    if let RidgeSolve::Direct(d) = solve {
        let cl = labeled.moments();
        let (ridge, eigenvalues) = direct(labeled, d, lease, ctx.threads, Some(ctx.report))?;
        let solved = Solved::on_all_features(ridge, d.path(), cl, eigenvalues);
        return Ok(Solved { shift, solve: Some(solve), ..solved });
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
        path: SolvePath::Eigen,
        rows: cl.n,
        shift,
        labeled: cl,
        projections,
        eigenvalues: pca.eigenvalues.clone(),
        pcas: None,
        unlabeled_rows: unl,
        components: if use_pca { pca.e_eff } else { dim },
        components_requested: if use_pca { pca.e_requested } else { dim },
        solve: Some(solve),
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
    ctx.report.report.solve = Some(SolveReport {
        path: solved.path.name().into(),
        in_place: solved.solve.is_some_and(RidgeSolve::consumes),
        seconds,
        refinement,
    });
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
            solve: solved.solve,
            refinement,
            sparse: None,
            candidates: None,
        },
        candidate: ctx.candidate,
        score: choice.score,
    })
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
