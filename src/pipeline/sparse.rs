//! The LASSO family as the model's learner (`[solver] kind`; math.md §13.10): the lasso,
//! the elastic net and the group lasso over the stages, fitted by coordinate descent
//! (`solve::cd`) on the centred statistics the pass accumulated, in the raw feature basis
//! (no `[pca]`) or in the PCA basis. λ₁ is fixed, or the warm-started path from `λ_max`
//! down is a family of fits the held-out selection scores in one stream, with the refit
//! on train ∪ validation at the chosen λ₁ as ridge does.

use std::ops::Range;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::model::{Projection, ProjectionInfo, SparseTable};
use crate::pipeline::check::SparseSettings;
use crate::pipeline::keep::StateLease;
use crate::pipeline::plan::{self, RidgeSolve};
use crate::pipeline::report::{SelectionReport, SolveReport};
use crate::pipeline::ridge::{enough_rows, primal};
use crate::pipeline::select::{Fits, HeldOut, Select, Space};
use crate::pipeline::solve_ctx::{Settled, Solution, SolveCtx};
use crate::sketch::FeaturePipeline;
use crate::solve::cd::{self as lasso, Penalty, Problem};
use crate::solve::{bias_for, GcvCurve, Ridge, RotatedProblem};
use crate::stats::{Centered, GramStats};

/// The quadratic problems of every output in the basis the penalty acts in.
struct Basis {
    /// Width `k` of the basis.
    k: usize,
    /// `C` in the basis, row-major `k × k`.
    cmat: Vec<f64>,
    /// `r` per output (`k` each).
    r: Vec<Vec<f64>>,
    /// The labeled rows' centred statistics.
    labeled: Centered,
    /// The statistics' shift.
    shift: Vec<f64>,
    /// The eigenbasis (PCA), or `None` for the raw features.
    rotated: Option<RotatedProblem>,
    projections: Vec<(ProjectionInfo, Projection)>,
    eigenvalues: Vec<f64>,
    unlabeled_rows: u64,
    components_requested: usize,
}

impl Basis {
    fn new(
        plan: &plan::Sparse,
        labeled: &mut GramStats,
        unlabeled: Option<&GramStats>,
        ctx: &mut SolveCtx<'_>,
    ) -> Result<Basis> {
        enough_rows(labeled.n)?;
        let Some(pca) = &plan.pca else {
            let mut cl = labeled.centered();
            let (dim, c) = (cl.mean.len(), cl.cyy.len());
            let r = (0..c).map(|k| (0..dim).map(|i| cl.czy[i * c + k]).collect()).collect();
            return Ok(Basis {
                k: dim,
                // The covariance moves into the problem: no second dense D × D.
                cmat: std::mem::take(&mut cl.cov),
                r,
                labeled: cl,
                shift: labeled.shift.clone(),
                rotated: None,
                projections: Vec::new(),
                eigenvalues: Vec::new(),
                unlabeled_rows: 0,
                components_requested: dim,
            });
        };
        // In the PCA basis the labeled covariance is diagonal (its eigenvalues), and the
        // rotated right-hand sides are what ridge's eigen path computes.
        let solved = primal(labeled, unlabeled, (RidgeSolve::Eigen, Some(pca)), ctx, &mut StateLease::unkept())?;
        let Ridge::Eigen(problem) = solved.ridge else {
            return Err(Error::bug("the PCA basis needs the eigen path"));
        };
        let (k, c) = (problem.k, problem.c);
        let mut cmat = vec![0.0; k * k];
        for j in 0..k {
            cmat[j * k + j] = problem.sigma[j];
        }
        let r = (0..c).map(|o| (0..k).map(|j| problem.rt[j * c + o]).collect()).collect();
        Ok(Basis {
            k,
            cmat,
            r,
            labeled: solved.labeled,
            shift: solved.shift,
            rotated: Some(problem),
            projections: solved.projections,
            eigenvalues: solved.eigenvalues,
            unlabeled_rows: solved.unlabeled_rows,
            components_requested: solved.components_requested,
        })
    }

    fn problem(&self, o: usize) -> Problem<'_> {
        Problem { c: &self.cmat, r: &self.r[o], cyy: self.labeled.cyy[o], dim: self.k }
    }

    fn outputs(&self) -> usize {
        self.r.len()
    }

    /// Weights over the features (`D × c`) and bias of basis coefficients (`k × c`).
    fn fold(&self, coef: &[f64]) -> (Vec<f64>, Vec<f64>) {
        match &self.rotated {
            Some(p) => p.fold(coef, &self.labeled),
            None => {
                let b = bias_for(coef, self.outputs(), &self.labeled);
                (coef.to_vec(), b)
            }
        }
    }
}

/// One fitted point of the path: the coefficients of every output and the worst
/// relative duality gap.
struct Point {
    l1: f64,
    coef: Vec<f64>,
    gap: f64,
}

/// The fitted path as a family of fits: weights in feature space at each point.
struct Path<'a> {
    basis: &'a Basis,
    points: &'a [Point],
}

impl Fits for Path<'_> {
    fn grid(&self) -> Vec<f64> {
        self.points.iter().map(|p| p.l1).collect()
    }
    fn outputs(&self) -> usize {
        self.basis.outputs()
    }
    fn weights(&self, sets: &[Vec<f64>]) -> Vec<(Vec<f64>, Vec<f64>)> {
        sets.iter()
            .filter_map(|s| s.first().and_then(|l| self.points.iter().find(|p| p.l1 == *l)))
            .map(|p| self.basis.fold(&p.coef))
            .collect()
    }
    fn gcv(&self) -> Option<GcvCurve> {
        None
    }
    fn space(&self) -> Space<'_> {
        // Sets in feature space are centred on the labeled mean, as the scores need.
        Space { pcas: None, mean: &self.basis.labeled.mean, ymean: &self.basis.labeled.ymean, shift: &self.basis.shift }
    }
}

/// Fits every output at each `λ₁` of `grid` (warm-started along it), outputs over threads.
fn fit_grid(
    basis: &Basis,
    pen: &Penalty,
    grid: &[f64],
    warm: Option<&[f64]>,
    sv: &SparseSettings,
    threads: usize,
) -> Vec<Point> {
    let (k, c) = (basis.k, basis.outputs());
    let per_output = |o: usize| -> Vec<lasso::Fit> {
        let p = basis.problem(o);
        let mut prev: Option<Vec<f64>> = warm.map(|w| (0..k).map(|j| w[j * c + o]).collect());
        grid.iter()
            .map(|&l1| {
                let f = lasso::fit_limited(&p, pen, l1, prev.as_deref(), sv.tolerance, sv.max_sweeps);
                prev = Some(f.w.clone());
                f
            })
            .collect()
    };
    let mut fits: Vec<Option<Vec<lasso::Fit>>> = (0..c).map(|_| None).collect();
    let threads = threads.clamp(1, c.max(1));
    std::thread::scope(|scope| {
        let per_output = &per_output;
        let handles: Vec<_> = (0..threads)
            .map(|t| scope.spawn(move || (t..c).step_by(threads).map(|o| (o, per_output(o))).collect::<Vec<_>>()))
            .collect();
        for h in handles {
            if let Ok(done) = h.join() {
                for (o, f) in done {
                    fits[o] = Some(f);
                }
            }
        }
    });
    grid.iter()
        .enumerate()
        .map(|(i, &l1)| {
            let mut coef = vec![0.0; k * c];
            let mut gap = 0.0f64;
            for (o, f) in fits.iter().enumerate() {
                if let Some(f) = f.as_ref().and_then(|v| v.get(i)) {
                    for j in 0..k {
                        coef[j * c + o] = f.w[j];
                    }
                    gap = gap.max(f.gap / basis.labeled.cyy[o].max(f64::MIN_POSITIVE));
                }
            }
            Point { l1, coef, gap }
        })
        .collect()
}

/// The stages' feature ranges and names: the groups of the group lasso.
fn stage_groups(pipeline: &FeaturePipeline) -> (Vec<Range<usize>>, Vec<String>) {
    let mut start = 0;
    let mut ranges = Vec::new();
    let mut names = Vec::new();
    for (i, st) in pipeline.stages().iter().enumerate() {
        let end = start + st.output_dim();
        ranges.push(start..end);
        names.push(format!("stage {i} ({})", st.spec.kind()));
        start = end;
    }
    (ranges, names)
}

/// The groups with a nonzero coefficient in any output.
fn active(groups: &[Range<usize>], coef: &[f64], c: usize) -> Vec<usize> {
    groups
        .iter()
        .enumerate()
        .filter(|(_, g)| (*g).clone().any(|j| (0..c).any(|o| coef[j * c + o] != 0.0)))
        .map(|(i, _)| i)
        .collect()
}

/// The penalty of the learner, with the stages as groups in the raw basis.
fn penalty(sv: &SparseSettings, groups: &[Range<usize>]) -> Result<Penalty> {
    use crate::pipeline::spec::SolverKind;
    Ok(match sv.kind {
        SolverKind::Lasso => Penalty::Lasso,
        SolverKind::ElasticNet => Penalty::ElasticNet { l2: sv.l2 },
        SolverKind::GroupLasso => Penalty::GroupLasso { groups: groups.to_vec(), l2: sv.l2 },
        SolverKind::Ridge => return Err(Error::bug("ridge is solved by the ridge path")),
    })
}

/// Solves one pass's statistics with the sparse learner.
pub(crate) fn solve(
    plan: &plan::Sparse,
    mut labeled: GramStats,
    unlabeled: Option<GramStats>,
    ctx: &mut SolveCtx<'_>,
) -> Result<Solution> {
    let start = Instant::now();
    let sv = &plan.settings;
    let mut basis = Basis::new(plan, &mut labeled, unlabeled.as_ref(), ctx)?;
    let c = basis.outputs();
    let raw = basis.rotated.is_none();
    let (ranges, names) = stage_groups(&ctx.map().pipeline);
    let (groups, group_names) = if raw { (ranges, names) } else { (Vec::new(), Vec::new()) };
    let pen = penalty(sv, &groups)?;
    let grid: Vec<f64> = match sv.lambda {
        Some(l1) => vec![l1],
        None => {
            let top = (0..c).map(|o| lasso::lambda_max(&basis.problem(o), &pen)).fold(0.0, f64::max);
            lasso::path_grid(top, sv.path, sv.ratio)
        }
    };
    let points = fit_grid(&basis, &pen, &grid, None, sv, ctx.threads);
    let mut table = SparseTable {
        kind: sv.kind.name().into(),
        basis: if raw { "raw".into() } else { "pca".into() },
        l2: sv.l2,
        path: grid.clone(),
        gap: points.iter().map(|p| p.gap).collect(),
        nonzeros: points
            .iter()
            .map(|p| (0..basis.k).filter(|&j| (0..c).any(|o| p.coef[j * c + o] != 0.0)).count())
            .collect(),
        groups: group_names,
        active: points.iter().map(|p| active(&groups, &p.coef, c)).collect(),
        metric: None,
        score: Vec::new(),
        validation_rows: 0,
        chosen: 0,
        refit_rows: None,
    };
    let mut report = SelectionReport { method: "fixed".into(), chosen: vec![grid[0]], ..SelectionReport::default() };
    if sv.lambda.is_some() {
        ctx.report.say(format!(
            "solver: {} λ₁ = {:.4e} (fixed; {} of {} coefficients, gap {:.1e})",
            sv.kind.name(),
            grid[0],
            table.nonzeros[0],
            basis.k,
            points[0].gap
        ));
        ctx.report.report.selections.push(report);
        return finish(Settle { basis: &basis, point: &points[0], table, chosen: 0, start }, sv, ctx);
    }
    let metric = ctx.checked.metric;
    // The path runs from large to small λ₁: ties go to the earlier, sparser point.
    let mut held_out = HeldOut { metric, per_output: false, refit: sv.refit, ties_later: false };
    let choice = held_out.select(&Path { basis: &basis, points: &points }, ctx)?;
    let chosen = choice.index;
    let scored = choice.table.as_ref().ok_or_else(|| Error::bug("a held-out choice without scores"))?;
    ctx.report.say(format!(
        "solver: {} λ₁ = {:.4e} by validation on {} rows ({} {:.6}; {} of {} coefficients, gap {:.1e})",
        sv.kind.name(),
        grid[chosen],
        scored.rows,
        metric.name(),
        scored.score[chosen],
        table.nonzeros[chosen],
        basis.k,
        points[chosen].gap
    ));
    if chosen + 1 == grid.len() {
        ctx.report.warn("the best λ₁ is the path's last point; a smaller solver.ratio may score better");
    }
    table.metric = Some(metric.name().into());
    table.score.clone_from(&scored.score);
    table.validation_rows = scored.rows;
    report = SelectionReport { method: "path".into(), chosen: vec![grid[chosen]], rows: scored.rows, refit_rows: None };
    let Some(held_out) = choice.held_out else {
        ctx.report.report.selections.push(report);
        return finish(Settle { basis: &basis, point: &points[chosen], table, chosen, start }, sv, ctx);
    };
    let trained = basis.labeled.n;
    labeled
        .merge(&held_out)
        .map_err(|e| Error::bug_from("validation statistics merge with the training statistics", e))?;
    let warm = points[chosen].coef.clone();
    basis = Basis::new(plan, &mut labeled, unlabeled.as_ref(), ctx)?;
    let refit = fit_grid(&basis, &pen, &grid[chosen..=chosen], Some(&warm), sv, ctx.threads);
    ctx.report.say(format!(
        "solver: refit at λ₁ = {:.4e} on {} rows ({trained} training + {} validation)",
        grid[chosen], basis.labeled.n, held_out.n
    ));
    table.refit_rows = Some(basis.labeled.n);
    table.gap[chosen] = refit[0].gap;
    report.refit_rows = Some(basis.labeled.n);
    ctx.report.report.selections.push(report);
    finish(Settle { basis: &basis, point: &refit[0], table, chosen, start }, sv, ctx)
}

/// What the solve settled, for the model.
struct Settle<'a> {
    basis: &'a Basis,
    point: &'a Point,
    table: SparseTable,
    chosen: usize,
    start: Instant,
}

fn finish(settled: Settle<'_>, sv: &SparseSettings, ctx: &mut SolveCtx<'_>) -> Result<Solution> {
    let Settle { basis, point, mut table, chosen, start } = settled;
    let c = basis.outputs();
    let dim = ctx.map().dim();
    if point.gap > sv.tolerance {
        ctx.report.warn(format!(
            "the fit stopped after solver.max_sweeps = {} with a duality gap of {:.1e} of c_yy (tolerance {:.0e}); raise max_sweeps for a tighter fit",
            sv.max_sweeps, point.gap, sv.tolerance
        ));
    }
    let (weights, bias) = basis.fold(&point.coef);
    table.chosen = chosen;
    if !table.groups.is_empty() {
        let act = active(&stage_groups(&ctx.map().pipeline).0, &weights, c);
        let names: Vec<&str> = act.iter().map(|&g| table.groups[g].as_str()).collect();
        ctx.report.say(format!("solver: active groups {}", names.join(", ")));
    }
    let seconds = start.elapsed().as_secs_f64();
    ctx.report.say(format!("solve: {seconds:.1} s ({} {})", table.kind, table.basis));
    let solver = format!("{} ({} basis)", table.kind, table.basis);
    ctx.report.report.solve = Some(SolveReport { path: solver.clone(), in_place: false, seconds, refinement: None });
    let components = basis.rotated.as_ref().map_or(dim, |p| p.k);
    Ok(Solution {
        weights,
        bias,
        mean: basis.labeled.mean.clone(),
        eigenvalues: basis.eigenvalues.clone(),
        projections: basis.projections.clone(),
        settled: Settled {
            components,
            components_requested: basis.components_requested,
            lambdas: vec![point.l1; c],
            gcv: None,
            rows: basis.labeled.n,
            unlabeled_rows: basis.unlabeled_rows,
            validation: None,
            solver,
            solve: None,
            refinement: None,
            sparse: Some(table),
            candidates: None,
        },
        candidate: ctx.candidate,
        score: None,
    })
}
