//! One pass keeping the mapped labeled rows themselves, for the dual solve (at most `D/2`
//! rows, math.md §13.7). Rows are not statistics: they never go to a checkpoint or a
//! part (the planner never keeps rows where statistics are the product).

use std::time::Instant;

use super::{select_rows, Accumulation, Batch, PassEnv};
use crate::error::{Error, Result};
use crate::pipeline::check::Selection;
use crate::pipeline::plan;
use crate::pipeline::ridge::{settle, Solved};
use crate::pipeline::solve_ctx::{Solution, SolveCtx};
use crate::solve::dual::{DualKernel, DualRidge, RowStats};
use crate::solve::{LambdaChoice, Ridge, SolvePath};
use crate::stats::GramStats;

/// The kept rows.
#[derive(Debug)]
pub(crate) struct KeptRows {
    plan: plan::Dual,
    rows: RowStats,
}

impl KeptRows {
    /// Room for the `rows` the plan counted: growing by doubling would hold up to three
    /// times their memory while the vector moves.
    pub(crate) fn new(plan: plan::Dual, dim: usize, c: usize, rows: u64) -> KeptRows {
        let n = usize::try_from(rows).unwrap_or(0);
        KeptRows { plan, rows: RowStats::new(dim, c, n) }
    }
}

fn not_statistics() -> Error {
    Error::bug("kept rows reached a statistics writer")
}

impl Accumulation for KeptRows {
    fn update(&mut self, b: &Batch<'_>, _env: &PassEnv) -> Result<()> {
        if b.labeled.iter().all(|&m| m) {
            self.rows.add(b.z, b.y, b.chunk.rows).map_err(b.data_err())
        } else {
            let zl = select_rows(b.z, b.dim, b.labeled, true);
            self.rows.add(&zl, b.y, zl.len() / b.dim).map_err(b.data_err())
        }
    }
    fn state(&self) -> Result<Vec<(String, &GramStats)>> {
        Err(not_statistics())
    }
    fn into_state(self: Box<Self>) -> Result<Vec<(String, GramStats)>> {
        Err(not_statistics())
    }
    fn size_bytes(&self) -> u64 {
        RowStats::bytes_for(self.rows.rows() as u64, self.rows.dim(), self.rows.outputs())
    }
    fn rows(&self) -> u64 {
        self.rows.rows() as u64
    }

    fn solve(self: Box<Self>, ctx: &mut SolveCtx<'_>) -> Result<Solution> {
        let start = Instant::now();
        let KeptRows { plan, rows } = *self;
        let dual = rows.solve(&plan.lambda, ctx.threads)?;
        ctx.report.say(format!(
            "solve: dual, on the {n} × {n} kernel matrix of the kept rows ({n} rows ≤ D/2)",
            n = dual.labeled.n
        ));
        let (ridge, eigenvalues) = match dual.kernel {
            DualKernel::Solved { weights, bias } => (Ridge::Solved { weights, bias, refinement: None }, Vec::new()),
            DualKernel::Gcv { form, problem } => {
                let ev = problem.sigma.clone();
                (Ridge::Dual(Box::new(DualRidge { rows, form, problem, threads: ctx.threads })), ev)
            }
        };
        let solved = Solved::on_all_features(ridge, SolvePath::Dual, dual.labeled, eigenvalues);
        let selection = match plan.lambda {
            LambdaChoice::Fixed(l) => Selection::Fixed(l),
            LambdaChoice::Gcv { per_output } => Selection::Gcv { per_output },
        };
        let mut never = |_: &GramStats, _: &[f64], _: &mut SolveCtx<'_>| -> Result<Solved> {
            Err(Error::bug("the dual is never refitted"))
        };
        settle(solved, selection, &mut never, ctx, start)
    }
}
