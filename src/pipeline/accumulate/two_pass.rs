//! Two passes (Algorithm 5, math.md §13.5): pass one accumulates each stage's own
//! statistics over all rows and, at its end, fits each stage's PCA; pass two projects
//! every stage, concatenates, and accumulates the labeled rows' statistics of the
//! concatenation, which ridge solves; the weights fold back through the projections.

use std::time::Instant;

use super::{select_rows, take, Accumulation, Batch, PassEnv};
use crate::error::{Error, Result};
use crate::model::{Projection, ProjectionInfo};
use crate::pipeline::keep::StateLease;
use crate::pipeline::plan;
use crate::pipeline::prepare::FittedMap;
use crate::pipeline::projection::{fit_stage_pcas, project, StagePca};
use crate::pipeline::ridge::{enough_rows, primal, settle, Solved};
use crate::pipeline::solve_ctx::{Solution, SolveCtx};
use crate::solve::Lease;
use crate::stats::GramStats;

/// Pass one's per-stage statistics, the PCA fitted from them, and pass two's statistics.
#[derive(Debug)]
pub(crate) struct TwoPassRun {
    plan: plan::TwoPass,
    pass1: Vec<GramStats>,
    pass2: Option<GramStats>,
    pcas: Option<Vec<StagePca>>,
    ranges: Vec<std::ops::Range<usize>>,
    c: usize,
}

impl TwoPassRun {
    pub(crate) fn new(plan: plan::TwoPass, map: &FittedMap, c: usize) -> TwoPassRun {
        let ranges = map.ranges();
        let pass1 = ranges.iter().map(|r| GramStats::new(map.shift[r.clone()].to_vec(), 0)).collect();
        TwoPassRun { plan, pass1, pass2: None, pcas: None, ranges, c }
    }

    /// From named blocks: `pass1.stage{i}` (every stage) and, in pass two, `pass2`.
    pub(crate) fn from_blocks(
        plan: plan::TwoPass,
        mut blocks: Vec<(String, GramStats)>,
        pass: u32,
    ) -> std::result::Result<TwoPassRun, String> {
        let mut pass1 = Vec::new();
        while let Some(s) = take(&mut blocks, &format!("pass1.stage{}", pass1.len())) {
            pass1.push(s);
        }
        if pass1.len() != plan.stages.len() {
            return Err(format!(
                "pass-one statistics of {} stages for a pipeline of {}",
                pass1.len(),
                plan.stages.len()
            ));
        }
        let pass2 = take(&mut blocks, "pass2");
        if (pass == 2) != pass2.is_some() {
            return Err(format!(
                "pass-{pass} statistics {} pass-two statistics",
                if pass == 2 { "without" } else { "with" }
            ));
        }
        if let Some((n, _)) = blocks.first() {
            return Err(format!("statistics '{n}' that a two-pass run does not hold"));
        }
        let c = plan.outputs;
        let mut start = 0;
        let ranges = pass1
            .iter()
            .map(|s| {
                let r = start..start + s.dim();
                start = r.end;
                r
            })
            .collect();
        Ok(TwoPassRun { plan, pass1, pass2, pcas: None, ranges, c })
    }

    fn fit(&mut self, ctx: &mut SolveCtx<'_>) -> Result<()> {
        if self.pcas.is_none() {
            let env = (ctx.checked.seed(), ctx.threads);
            self.pcas = Some(fit_stage_pcas(&self.plan.stages, &self.pass1, &self.ranges, env, ctx.report)?);
        }
        Ok(())
    }
}

impl Accumulation for TwoPassRun {
    fn update(&mut self, b: &Batch<'_>, env: &PassEnv) -> Result<()> {
        let (dim, rows) = (b.dim, b.chunk.rows);
        match (&mut self.pass2, &self.pcas) {
            (None, _) => {
                for (st, r) in self.pass1.iter_mut().zip(&self.ranges) {
                    let block: Vec<f32> =
                        b.z.chunks_exact(dim).flat_map(|row| row[r.clone()].iter().copied()).collect();
                    env.add(st, &block, &[], rows).map_err(b.data_err())?;
                }
                Ok(())
            }
            (Some(p2), Some(pcas)) => {
                let zl =
                    if b.labeled.iter().all(|&m| m) { b.z.to_vec() } else { select_rows(b.z, dim, b.labeled, true) };
                let n = zl.len() / dim;
                let p = project(pcas, &zl, n, dim);
                p2.add_f64(&p, b.y, n, env.threads).map_err(b.data_err())
            }
            (Some(_), None) => Err(Error::bug("pass two without pass-one projections")),
        }
    }

    fn state(&self) -> Result<Vec<(String, &GramStats)>> {
        Ok(named(&self.pass1, self.pass2.as_ref()))
    }
    fn into_state(self: Box<Self>) -> Result<Vec<(String, GramStats)>> {
        Ok(named(self.pass1, self.pass2))
    }

    fn size_bytes(&self) -> u64 {
        self.pass1.iter().chain(&self.pass2).map(GramStats::size_bytes).sum()
    }

    fn rows(&self) -> u64 {
        match &self.pass2 {
            Some(p2) => p2.n,
            None => self.pass1.first().map_or(0, |p| p.n),
        }
    }

    fn pass(&self) -> u32 {
        if self.pass2.is_some() {
            2
        } else {
            1
        }
    }

    fn begin_pass(&mut self, ctx: &mut SolveCtx<'_>) -> Result<()> {
        if self.pass2.is_some() {
            self.fit(ctx)?;
        }
        Ok(())
    }

    fn end_pass(&mut self, ctx: &mut SolveCtx<'_>) -> Result<bool> {
        if self.pass2.is_some() {
            return Ok(false);
        }
        self.fit(ctx)?;
        let e: usize = self.pcas.iter().flatten().map(|p| p.e).sum();
        self.pass2 = Some(GramStats::new(vec![0.0; e], self.c));
        Ok(true)
    }

    fn solve(mut self: Box<Self>, ctx: &mut SolveCtx<'_>) -> Result<Solution> {
        let start = Instant::now();
        self.fit(ctx)?;
        let TwoPassRun { plan, pass1, pass2, pcas, .. } = *self;
        let mut p2 = pass2.ok_or_else(|| Error::bug("pass two did not run"))?;
        let pcas = pcas.ok_or_else(|| Error::bug("no pass-one projections"))?;
        enough_rows(p2.n)?;
        let seen = pass1.first().map_or(0, |s| s.n);
        let with_stages = |solved: Solved| -> Solved {
            let e: usize = pcas.iter().map(|p| p.e).sum();
            Solved {
                projections: pcas.iter().map(stage_projection).collect(),
                eigenvalues: pcas[0].eigenvalues.clone(),
                // Pass one saw every training row; after a refit pass two also holds the
                // validation rows, which pass one never saw.
                unlabeled_rows: seen.saturating_sub(solved.rows),
                components: e,
                components_requested: e,
                pcas: Some(pcas.clone()),
                ..solved
            }
        };
        let keeper = ctx.keeper;
        // The state as a checkpoint names it (`named`), pass two's block leased.
        let state = || -> Vec<(String, Option<&GramStats>)> { named(pass1.iter().map(Some), Some(None)) };
        let first = state();
        let solved = primal(&mut p2, None, (plan.solve, None), ctx, &mut StateLease::state(keeper, kept(&first)))?;
        let solved = with_stages(solved);
        let mut refit = |held_out: &GramStats, lambdas: &[f64], ctx: &mut SolveCtx<'_>| {
            let solve =
                plan.refit.ok_or_else(|| Error::bug("a held-out choice refits only where planned"))?.at(lambdas)?;
            if solve.consumes() {
                // The merge ends pass two's own statistics and the factor consumes them.
                StateLease::state(keeper, kept(&first)).consume(&p2)?;
            }
            p2.merge(held_out)
                .map_err(|e| Error::bug_from("validation statistics merge with the training statistics", e))?;
            Ok(with_stages(primal(&mut p2, None, (solve, None), ctx, &mut StateLease::merged(keeper))?))
        };
        let mut solution = settle(solved, plan.selection, &mut refit, ctx, start)?;
        solution.mean = pass1.iter().flat_map(|s| s.moments().mean).collect();
        Ok(solution)
    }
}

/// A state by borrowed names.
fn kept<'a>(state: &'a [(String, Option<&'a GramStats>)]) -> Vec<(&'a str, Option<&'a GramStats>)> {
    state.iter().map(|(n, s)| (n.as_str(), *s)).collect()
}

/// The blocks as a checkpoint names them.
fn named<S>(pass1: impl IntoIterator<Item = S>, pass2: Option<S>) -> Vec<(String, S)> {
    let mut v: Vec<(String, S)> = pass1.into_iter().enumerate().map(|(i, s)| (format!("pass1.stage{i}"), s)).collect();
    v.extend(pass2.map(|p| ("pass2".to_string(), p)));
    v
}

fn stage_projection(p: &StagePca) -> (ProjectionInfo, Projection) {
    (
        ProjectionInfo {
            start: p.range.start,
            end: p.range.end,
            components: p.e,
            residual: p.residual,
            variance_total: Some(p.trace),
        },
        Projection { mean: p.mean.clone(), basis: p.basis.clone(), eigenvalues: p.eigenvalues.clone() },
    )
}
