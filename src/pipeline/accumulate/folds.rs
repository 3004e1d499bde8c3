//! One pass of fold statistics for k-fold selection: each row goes to the fold a seeded
//! hash of its position picks (`source::fold_of`, the same in every shard and run), so
//! their sum is the labeled statistics; K Grams are kept, not K + 1. The solve chooses λ
//! by the folds' held-out scores and refits on every row at it.

use std::time::Instant;

use super::{select_rows, Accumulation, Batch, PassEnv};
use crate::error::{Error, Result};
use crate::pipeline::check::Selection;
use crate::pipeline::keep::StateLease;
use crate::pipeline::plan;
use crate::pipeline::ridge::{primal, settle, Solved};
use crate::pipeline::select::{grid_of, KFoldScores, Select};
use crate::pipeline::solve_ctx::{Solution, SolveCtx};
use crate::solve::GcvCurve;
use crate::source::fold_of;
use crate::stats::GramStats;

/// The statistics of each fold.
#[derive(Debug)]
pub(crate) struct Folds {
    plan: plan::KFold,
    folds: Vec<GramStats>,
}

impl Folds {
    pub(crate) fn new(plan: plan::KFold, shift: &[f64], c: usize) -> Folds {
        let folds = (0..plan.k).map(|_| GramStats::new(shift.to_vec(), c)).collect();
        Folds { plan, folds }
    }

    pub(crate) fn from_blocks(
        plan: plan::KFold,
        blocks: Vec<(String, GramStats)>,
    ) -> std::result::Result<Folds, String> {
        let mut folds = Vec::new();
        for (i, (name, s)) in blocks.into_iter().enumerate() {
            if name != format!("fold{i}") {
                return Err(format!("statistics '{name}' where fold {i} was expected"));
            }
            folds.push(s);
        }
        if folds.len() != plan.k {
            return Err(format!("statistics of {} folds for a pipeline of {}", folds.len(), plan.k));
        }
        Ok(Folds { plan, folds })
    }
}

/// The grid k-fold scores, as a family of fits (its models are the folds' own).
struct Grid {
    grid: Vec<f64>,
    c: usize,
}

impl crate::pipeline::select::Fits for Grid {
    fn grid(&self) -> Vec<f64> {
        self.grid.clone()
    }
    fn outputs(&self) -> usize {
        self.c
    }
    fn weights(&self, _sets: &[Vec<f64>]) -> Vec<(Vec<f64>, Vec<f64>)> {
        Vec::new()
    }
    fn gcv(&self) -> Option<GcvCurve> {
        None
    }
    fn space(&self) -> crate::pipeline::select::Space<'_> {
        crate::pipeline::select::Space { pcas: None, mean: &[], ymean: &[], shift: &[] }
    }
}

impl Accumulation for Folds {
    fn update(&mut self, b: &Batch<'_>, env: &PassEnv) -> Result<()> {
        let k = self.folds.len();
        let ch = b.chunk;
        let fold: Vec<usize> =
            (0..ch.rows).map(|r| fold_of(env.seed, b.file, b.row_group, ch.first_row + r, k)).collect();
        let c = b.y.len() / ch.rows.max(1);
        for (f, st) in self.folds.iter_mut().enumerate() {
            let member: Vec<bool> = fold.iter().map(|&g| g == f).collect();
            let zf = select_rows(b.z, b.dim, &member, true);
            let yf = select_rows(b.y, c, &member, true);
            env.add(st, &zf, &yf, zf.len() / b.dim).map_err(b.data_err())?;
        }
        Ok(())
    }
    fn state(&self) -> Result<Vec<(String, &GramStats)>> {
        Ok(named(&self.folds))
    }
    fn into_state(self: Box<Self>) -> Result<Vec<(String, GramStats)>> {
        Ok(named(self.folds))
    }
    fn size_bytes(&self) -> u64 {
        self.folds.iter().map(GramStats::size_bytes).sum()
    }
    fn rows(&self) -> u64 {
        self.folds.iter().map(|f| f.n).sum()
    }

    fn solve(self: Box<Self>, ctx: &mut SolveCtx<'_>) -> Result<Solution> {
        let Folds { plan, folds } = *self;
        let k = folds.len();
        if let Some(i) = folds.iter().position(|f| f.n < 2) {
            return Err(Error::config(
                ctx.checked.source(),
                "ridge.cv",
                format!("fold {i} of {k} holds {} row(s): too few rows for {k} folds; lower ridge.cv", folds[i].n),
            ));
        }
        let mut total = folds[0].clone();
        for f in &folds[1..] {
            total.merge(f).map_err(|e| Error::bug_from("fold statistics of one run merge", e))?;
        }
        let grid = Grid { grid: grid_of(&total), c: total.c };
        let choice = KFoldScores { folds: &folds, total: &total, metric: ctx.checked.metric }.select(&grid, ctx)?;
        if plan.refit.consumes() {
            // The folds are freed for the refit, which factors their sum in place: keep them.
            if let Some(k) = ctx.keeper {
                let named = named(&folds);
                k.keep(&named.iter().map(|(n, s)| (n.as_str(), *s)).collect::<Vec<_>>())?;
            }
        }
        drop(folds);
        // The model of all rows at that λ: one Cholesky (or the path ridge.solver names).
        let start = Instant::now();
        let lambda = choice.values.first().copied().unwrap_or(0.0);
        let solve = plan.refit.at(&[lambda])?;
        let keeper = ctx.keeper;
        let solved = primal(&mut total, None, (solve, None), ctx, &mut StateLease::merged(keeper))?;
        let mut never = |_: &GramStats, _: &[f64], _: &mut SolveCtx<'_>| -> Result<Solved> {
            Err(Error::bug("a fixed λ is never refitted"))
        };
        let mut solution = settle(solved, Selection::Fixed(lambda), &mut never, ctx, start)?;
        if let Some(s) = ctx.report.report.selections.last_mut() {
            s.method = "k-fold".into();
            s.rows = choice.table.as_ref().map_or(0, |t| t.rows);
            s.refit_rows = Some(solution.settled.rows);
        }
        solution.settled.validation = choice.table;
        solution.score = choice.score;
        Ok(solution)
    }
}

/// The folds as a checkpoint names them ([`Folds::from_blocks`] reads these names).
fn named<S>(folds: impl IntoIterator<Item = S>) -> Vec<(String, S)> {
    folds.into_iter().enumerate().map(|(i, s)| (format!("fold{i}"), s)).collect()
}
