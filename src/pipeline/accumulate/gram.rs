//! One pass of Gram statistics: the labeled rows' and, when some rows are unlabeled,
//! theirs apart (they enter the PCA only). Ridge solves them by the primal plan
//! ([`PrimalRun`]); the sparse learners by coordinate descent ([`SparseRun`]).

use std::time::Instant;

use super::{select_rows, take, Accumulation, Batch, PassEnv};
use crate::error::{Error, Result};
use crate::pipeline::keep::StateLease;
use crate::pipeline::plan;
use crate::pipeline::ridge::{primal, settle};
use crate::pipeline::solve_ctx::{Solution, SolveCtx};
use crate::solve::Lease;
use crate::stats::GramStats;

/// The statistics of one pass: labeled rows, and unlabeled rows apart.
#[derive(Debug, Clone)]
pub(crate) struct Sums {
    pub labeled: GramStats,
    pub unlabeled: Option<GramStats>,
}

impl Sums {
    fn new(shift: &[f64], c: usize, semi: bool) -> Sums {
        Sums { labeled: GramStats::new(shift.to_vec(), c), unlabeled: semi.then(|| GramStats::new(shift.to_vec(), 0)) }
    }

    fn from_blocks(mut blocks: Vec<(String, GramStats)>, semi: bool) -> std::result::Result<Sums, String> {
        let labeled = take(&mut blocks, "labeled").ok_or("no labeled statistics")?;
        let unlabeled = take(&mut blocks, "unlabeled");
        if semi != unlabeled.is_some() {
            return Err(if semi {
                "no unlabeled statistics where the pipeline has unlabeled rows".into()
            } else {
                "unlabeled statistics where the pipeline has none".into()
            });
        }
        if let Some((n, _)) = blocks.first() {
            return Err(format!("statistics '{n}' that one-pass ridge does not hold"));
        }
        Ok(Sums { labeled, unlabeled })
    }

    fn update(&mut self, b: &Batch<'_>, env: &PassEnv) -> Result<()> {
        let rows = b.chunk.rows;
        if b.labeled.iter().all(|&m| m) {
            return env.add(&mut self.labeled, b.z, b.y, rows).map_err(b.data_err());
        }
        let zl = select_rows(b.z, b.dim, b.labeled, true);
        env.add(&mut self.labeled, &zl, b.y, zl.len() / b.dim).map_err(b.data_err())?;
        let zu = select_rows(b.z, b.dim, b.labeled, false);
        let u = self.unlabeled.as_mut().ok_or_else(|| Error::bug("unlabeled rows without unlabeled statistics"))?;
        env.add(u, &zu, &[], zu.len() / b.dim).map_err(b.data_err())
    }

    fn state(&self) -> Vec<(String, &GramStats)> {
        Sums::named(&self.labeled, self.unlabeled.as_ref())
    }

    /// The blocks as a checkpoint names them (borrowed or owned).
    fn named<S>(labeled: S, unlabeled: Option<S>) -> Vec<(String, S)> {
        let mut v = vec![("labeled".to_string(), labeled)];
        v.extend(unlabeled.map(|u| ("unlabeled".to_string(), u)));
        v
    }

    fn size_bytes(&self) -> u64 {
        self.labeled.size_bytes() + self.unlabeled.as_ref().map_or(0, GramStats::size_bytes)
    }

    fn rows(&self) -> u64 {
        self.labeled.n + self.unlabeled.as_ref().map_or(0, |u| u.n)
    }
}

/// Ridge on one pass.
#[derive(Debug)]
pub(crate) struct PrimalRun {
    plan: plan::Primal,
    sums: Sums,
}

impl PrimalRun {
    pub(crate) fn new(plan: plan::Primal, shift: &[f64], c: usize) -> PrimalRun {
        let sums = Sums::new(shift, c, plan.semi);
        PrimalRun { plan, sums }
    }

    pub(crate) fn from_blocks(
        plan: plan::Primal,
        blocks: Vec<(String, GramStats)>,
    ) -> std::result::Result<PrimalRun, String> {
        let sums = Sums::from_blocks(blocks, plan.semi)?;
        Ok(PrimalRun { plan, sums })
    }
}

impl Accumulation for PrimalRun {
    fn update(&mut self, batch: &Batch<'_>, env: &PassEnv) -> Result<()> {
        self.sums.update(batch, env)
    }
    fn state(&self) -> Result<Vec<(String, &GramStats)>> {
        Ok(self.sums.state())
    }
    fn into_state(self: Box<Self>) -> Result<Vec<(String, GramStats)>> {
        Ok(Sums::named(self.sums.labeled, self.sums.unlabeled))
    }
    fn size_bytes(&self) -> u64 {
        self.sums.size_bytes()
    }
    fn rows(&self) -> u64 {
        self.sums.rows()
    }

    fn solve(self: Box<Self>, ctx: &mut SolveCtx<'_>) -> Result<Solution> {
        let start = Instant::now();
        let PrimalRun { plan, sums } = *self;
        let Sums { mut labeled, unlabeled } = sums;
        let keeper = ctx.keeper;
        // The state as a checkpoint names it (`Sums::named`), the labeled block leased.
        let state = || -> Vec<(&str, Option<&GramStats>)> {
            [("labeled", None)].into_iter().chain(unlabeled.as_ref().map(|u| ("unlabeled", Some(u)))).collect()
        };
        let solve = (plan.solve, plan.pca.as_ref());
        let solved = primal(&mut labeled, unlabeled.as_ref(), solve, ctx, &mut StateLease::state(keeper, state()))?;
        let pca = plan.pca;
        let mut refit = |held_out: &GramStats, lambdas: &[f64], ctx: &mut SolveCtx<'_>| {
            let solve =
                plan.refit.ok_or_else(|| Error::bug("a held-out choice refits only where planned"))?.at(lambdas)?;
            if solve.consumes() {
                // The merge ends the pass's own statistics and the factor consumes them.
                StateLease::state(keeper, state()).consume(&labeled)?;
            }
            labeled
                .merge(held_out)
                .map_err(|e| Error::bug_from("validation statistics merge with the training statistics", e))?;
            primal(&mut labeled, unlabeled.as_ref(), (solve, pca.as_ref()), ctx, &mut StateLease::merged(keeper))
        };
        settle(solved, plan.selection, &mut refit, ctx, start)
    }
}

/// A sparse learner on one pass.
#[derive(Debug)]
pub(crate) struct SparseRun {
    plan: plan::Sparse,
    sums: Sums,
}

impl SparseRun {
    pub(crate) fn new(plan: plan::Sparse, shift: &[f64], c: usize) -> SparseRun {
        let sums = Sums::new(shift, c, plan.semi);
        SparseRun { plan, sums }
    }

    pub(crate) fn from_blocks(
        plan: plan::Sparse,
        blocks: Vec<(String, GramStats)>,
    ) -> std::result::Result<SparseRun, String> {
        let sums = Sums::from_blocks(blocks, plan.semi)?;
        Ok(SparseRun { plan, sums })
    }
}

impl Accumulation for SparseRun {
    fn update(&mut self, batch: &Batch<'_>, env: &PassEnv) -> Result<()> {
        self.sums.update(batch, env)
    }
    fn state(&self) -> Result<Vec<(String, &GramStats)>> {
        Ok(self.sums.state())
    }
    fn into_state(self: Box<Self>) -> Result<Vec<(String, GramStats)>> {
        Ok(Sums::named(self.sums.labeled, self.sums.unlabeled))
    }
    fn size_bytes(&self) -> u64 {
        self.sums.size_bytes()
    }
    fn rows(&self) -> u64 {
        self.sums.rows()
    }

    fn solve(self: Box<Self>, ctx: &mut SolveCtx<'_>) -> Result<Solution> {
        let SparseRun { plan, sums } = *self;
        crate::pipeline::sparse::solve(&plan, sums.labeled, sums.unlabeled, ctx)
    }
}
