//! The LASSO family as the model's learner (`[solver] kind`; math.md §13.10), and the
//! checks of `[solver]`: the lasso, the elastic net and the group lasso over the stages,
//! fitted by coordinate descent on the centred statistics the pass accumulated, in the
//! raw feature basis (no `[pca]`) or in the PCA basis. λ₁ is fixed, or chosen along a warm-started path from `λ_max`
//! down by the validation files (one stream scores the whole path), with the refit on
//! train ∪ validation at the chosen λ₁ as ridge does.

use std::ops::Range;

use crate::codes::OutputCode;
use crate::error::{Error, Result};
use crate::model::{Model, ModelHeader, Projection, ProjectionInfo, SparseTable};
use crate::pipeline::ridge_step::solve_state;
use crate::pipeline::spec::{PipelineSpec, SolverKind, SolverSpec};
use crate::pipeline::state::State;
use crate::pipeline::validation::{best_index, refit_state, score_sets, Space};
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::solve::cd::{self as lasso, Penalty, Problem};
use crate::solve::Components;
use crate::solve::{bias_for, Ridge, RotatedProblem};
use crate::source::{Classes, ResolvedFeatures};
use crate::stats::{Centered, GramStats};

impl PipelineSpec {
    /// Checks `[solver]` against the rest of the pipeline.
    pub(crate) fn check_solver(&self) -> Result<()> {
        let f = self.source.as_str();
        let sv = &self.solver;
        if sv.kind == SolverKind::Ridge {
            if *sv != SolverSpec::default() {
                return Err(Error::config(
                    f,
                    "solver.kind",
                    "the [solver] keys are for lasso, elastic_net and group_lasso",
                ));
            }
            return Ok(());
        }
        if let Some(l) = sv.lambda {
            if !(l.is_finite() && l > 0.0) {
                return Err(Error::config(f, "solver.lambda", format!("must be a number > 0, got {l}")));
            }
        } else if self.data.validation.is_empty() {
            return Err(Error::config(
                f,
                "solver.lambda",
                "give a λ₁ > 0, or data.validation files to choose it along the path",
            ));
        }
        if !(sv.l2.is_finite() && sv.l2 >= 0.0) {
            return Err(Error::config(f, "solver.l2", format!("must be a number ≥ 0, got {}", sv.l2)));
        }
        if sv.kind == SolverKind::Lasso && sv.l2 != 0.0 {
            return Err(Error::config(f, "solver.l2", "is for elastic_net and group_lasso; the lasso has none"));
        }
        if !(2..=1000).contains(&sv.path) {
            return Err(Error::config(f, "solver.path", format!("must be from 2 to 1000 values, got {}", sv.path)));
        }
        if !(sv.ratio > 0.0 && sv.ratio < 1.0) {
            return Err(Error::config(f, "solver.ratio", format!("must be in (0, 1), got {}", sv.ratio)));
        }
        if !(sv.tolerance > 0.0 && sv.tolerance < 1.0) {
            return Err(Error::config(f, "solver.tolerance", format!("must be in (0, 1), got {}", sv.tolerance)));
        }
        if sv.max_sweeps == 0 {
            return Err(Error::config(f, "solver.max_sweeps", "must be ≥ 1"));
        }
        if self.passes != 1 {
            return Err(Error::config(f, "solver.kind", "the sparse learners run on one pass (passes = 1)"));
        }
        if sv.kind == SolverKind::GroupLasso && self.components() != Components::All {
            return Err(Error::config(
                f,
                "solver.kind",
                "group_lasso's groups are the stages' features: it needs the raw basis (no [pca])",
            ));
        }
        if !self.data.unlabeled.is_empty() && self.components() == Components::All {
            return Err(Error::config(f, "data.unlabeled", "unlabeled rows enter a PCA; the raw basis has none"));
        }
        Ok(())
    }
}

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
    /// The eigenbasis (PCA), or `None` for the raw features.
    rotated: Option<RotatedProblem>,
    projections: Vec<(ProjectionInfo, Projection)>,
    eigenvalues: Vec<f64>,
    unlabeled_rows: u64,
    components_requested: usize,
}

impl Basis {
    fn new(spec: &PipelineSpec, state: &mut State, say: &mut dyn FnMut(&str)) -> Result<Basis> {
        let use_pca = spec.components() != crate::solve::Components::All;
        if !use_pca {
            let State::One { labeled, .. } = state else {
                return Err(Error::Internal("the sparse learners run on one pass".into()));
            };
            let mut cl = labeled.centered();
            let (dim, c) = (cl.mean.len(), cl.cyy.len());
            let r = (0..c).map(|k| (0..dim).map(|i| cl.czy[i * c + k]).collect()).collect();
            return Ok(Basis {
                k: dim,
                // The covariance moves into the problem: no second dense D × D.
                cmat: std::mem::take(&mut cl.cov),
                r,
                labeled: cl,
                rotated: None,
                projections: Vec::new(),
                eigenvalues: Vec::new(),
                unlabeled_rows: 0,
                components_requested: dim,
            });
        }
        // In the PCA basis the labeled covariance is diagonal (its eigenvalues), and the
        // rotated right-hand sides are what ridge's eigen path computes.
        let solved = solve_state(spec, state, None, say)?;
        let Ridge::Eigen(problem) = solved.ridge else {
            return Err(Error::Internal("the PCA basis needs the eigen path".into()));
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

/// Fits every output at each `λ₁` of `grid` (warm-started along it), outputs over threads.
fn fit_grid(
    basis: &Basis,
    pen: &Penalty,
    grid: &[f64],
    warm: Option<&[f64]>,
    sv: &crate::pipeline::spec::SolverSpec,
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

/// Solves the accumulated state with the `[solver]` learner into a model.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_sparse(
    spec: &PipelineSpec,
    pipeline: FeaturePipeline,
    stages: Vec<StageSpec>,
    classes: Option<Classes>,
    code: Option<OutputCode>,
    features: ResolvedFeatures,
    state: &mut State,
    say: &mut dyn FnMut(&str),
) -> Result<Model> {
    let start = std::time::Instant::now();
    let sv = &spec.solver;
    let dim = pipeline.output_dim();
    let mut basis = Basis::new(spec, state, say)?;
    let c = basis.outputs();
    let raw = basis.rotated.is_none();
    let (ranges, names) = stage_groups(&pipeline);
    let (groups, group_names) = if raw { (ranges, names) } else { (Vec::new(), Vec::new()) };
    let pen = match sv.kind {
        SolverKind::Lasso => Penalty::Lasso,
        SolverKind::ElasticNet => Penalty::ElasticNet { l2: sv.l2 },
        SolverKind::GroupLasso => Penalty::GroupLasso { groups: groups.clone(), l2: sv.l2 },
        SolverKind::Ridge => return Err(Error::Internal("ridge is solved by the ridge path".into())),
    };
    let grid: Vec<f64> = match sv.lambda {
        Some(l1) => vec![l1],
        None => {
            let top = (0..c).map(|o| lasso::lambda_max(&basis.problem(o), &pen)).fold(0.0, f64::max);
            let n = sv.path.max(2);
            (0..n).map(|i| top * sv.ratio.powf(i as f64 / (n - 1) as f64)).collect()
        }
    };
    let threads = spec.threads();
    let points = fit_grid(&basis, &pen, &grid, None, sv, threads);
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
    let mut chosen = 0;
    if sv.lambda.is_none() {
        let sets: Vec<Vec<f64>> = points.iter().map(|p| basis.fold(&p.coef).0).collect();
        let mut held_out = match &*state {
            State::One { labeled, .. } if spec.ridge.refit => Some(GramStats::new(labeled.shift.clone(), labeled.c)),
            _ => None,
        };
        let coded = classes.as_ref().zip(code.as_ref());
        let space = Space { pcas: None, mean: &basis.labeled.mean, ymean: &basis.labeled.ymean };
        // Sets in feature space are centred on the labeled mean, as the scores need.
        let scores = score_sets(spec, &pipeline, coded, &space, sets, held_out.as_mut())?;
        let metric = spec.metric();
        let score = scores.score(metric);
        // The path runs from large to small λ₁: ties go to the earlier, sparser point.
        chosen = best_index(&score, metric, false);
        say(&format!(
            "solver: {} λ₁ = {:.4e} by validation on {} rows ({} {:.6}; {} of {} coefficients, gap {:.1e})",
            sv.kind.name(),
            grid[chosen],
            scores.rows,
            metric.name(),
            score[chosen],
            table.nonzeros[chosen],
            basis.k,
            points[chosen].gap
        ));
        if chosen + 1 == grid.len() {
            say("warning: the best λ₁ is the path's last point; a smaller solver.ratio may score better");
        }
        table.metric = Some(metric.name().into());
        table.score = score;
        table.validation_rows = scores.rows;
        if let Some(held_out) = held_out {
            let trained = basis.labeled.n;
            refit_state(state, &held_out)?;
            let warm = points[chosen].coef.clone();
            basis = Basis::new(spec, state, say)?;
            let refit = fit_grid(&basis, &pen, &grid[chosen..=chosen], Some(&warm), sv, threads);
            say(&format!(
                "solver: refit at λ₁ = {:.4e} on {} rows ({trained} training + {} validation)",
                grid[chosen], basis.labeled.n, held_out.n
            ));
            table.refit_rows = Some(basis.labeled.n);
            table.gap[chosen] = refit[0].gap;
            let settled = Settled { basis: &basis, point: &refit[0], table, chosen, start, dim };
            return model(spec, pipeline, stages, classes, code, features, settled, say);
        }
    } else {
        say(&format!(
            "solver: {} λ₁ = {:.4e} (fixed; {} of {} coefficients, gap {:.1e})",
            sv.kind.name(),
            grid[0],
            table.nonzeros[0],
            basis.k,
            points[0].gap
        ));
    }
    let settled = Settled { basis: &basis, point: &points[chosen], table, chosen, start, dim };
    model(spec, pipeline, stages, classes, code, features, settled, say)
}

/// What the solve settled, for the model.
struct Settled<'a> {
    basis: &'a Basis,
    point: &'a Point,
    table: SparseTable,
    chosen: usize,
    start: std::time::Instant,
    dim: usize,
}

#[allow(clippy::too_many_arguments)]
fn model(
    spec: &PipelineSpec,
    pipeline: FeaturePipeline,
    stages: Vec<StageSpec>,
    classes: Option<Classes>,
    code: Option<OutputCode>,
    features: ResolvedFeatures,
    settled: Settled,
    say: &mut dyn FnMut(&str),
) -> Result<Model> {
    let Settled { basis, point, mut table, chosen, start, dim } = settled;
    let c = basis.outputs();
    if point.gap > spec.solver.tolerance {
        say(&format!(
            "warning: the fit stopped after solver.max_sweeps = {} with a duality gap of {:.1e} of c_yy (tolerance {:.0e}); raise max_sweeps for a tighter fit",
            spec.solver.max_sweeps, point.gap, spec.solver.tolerance
        ));
    }
    let (weights, bias) = basis.fold(&point.coef);
    table.chosen = chosen;
    if !table.groups.is_empty() {
        let act = active(&stage_groups(&pipeline).0, &weights, c);
        let names: Vec<&str> = act.iter().map(|&g| table.groups[g].as_str()).collect();
        say(&format!("solver: active groups {}", names.join(", ")));
    }
    say(&format!("solve: {:.1} s ({} {})", start.elapsed().as_secs_f64(), table.kind, table.basis));
    let (infos, projs): (Vec<ProjectionInfo>, Vec<Projection>) = basis.projections.iter().cloned().unzip();
    let components = basis.rotated.as_ref().map_or(dim, |p| p.k);
    let header = ModelHeader {
        components,
        components_requested: basis.components_requested,
        lambdas: vec![point.l1; c],
        rows: basis.labeled.n,
        unlabeled_rows: basis.unlabeled_rows,
        projections: infos,
        solver: Some(format!("{} ({} basis)", table.kind, table.basis)),
        code: code.as_ref().and_then(OutputCode::rows),
        sparse: Some(table),
        ..crate::pipeline::header::model_header(spec, classes, features, stages, dim, c)
    };
    Ok(Model {
        header,
        pipeline,
        weights,
        bias,
        mean: basis.labeled.mean.clone(),
        eigenvalues: basis.eigenvalues.clone(),
        projections: projs,
        origin: None,
    })
}
