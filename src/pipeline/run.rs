//! Training in one process: prepare the inputs and maps, plan the run once, accumulate
//! every pass (with checkpoints and resume), solve by the plan, assemble the model. The
//! plan decides everything that can be decided before the first row; the steps after it
//! only run it.

use crate::error::Result;
use crate::model::Model;
use crate::pipeline::assemble::{assemble, Fitted};
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::checkpoint::Checkpointer;
use crate::pipeline::pass::{accumulate, Run};
use crate::pipeline::plan::{Facts, Plan, RunOptions};
use crate::pipeline::prepare::{prepare, Prepared};
use crate::pipeline::report::Reporter;
use crate::stats::GramStats;

/// The plan of a prepared run, with the memory it needs stated (and refused beyond the
/// limit) before the pass.
pub(crate) fn decide(
    checked: &CheckedPipeline,
    prep: &Prepared,
    opts: &RunOptions,
    report: &mut Reporter,
) -> Result<Plan> {
    decide_from(checked, &prep.facts(), opts, report)
}

/// [`decide`] from the facts alone (statistics read from parts).
pub(crate) fn decide_from(
    checked: &CheckedPipeline,
    facts: &Facts,
    opts: &RunOptions,
    report: &mut Reporter,
) -> Result<Plan> {
    let (plan, memory) = Plan::decide(checked, facts, opts)?;
    report.say(memory.line.clone());
    report.report.memory = Some(memory.clone());
    report.report.plan = Some(plan.clone());
    memory.check()?;
    Ok(plan)
}

/// Trains in one process: prepare, plan, every pass over every unit (with checkpoints
/// and resume as asked), solve.
pub fn train(checked: &CheckedPipeline, opts: &RunOptions, report: &mut Reporter) -> Result<Model> {
    let prep = prepare(checked, report)?;
    train_prepared(checked, opts, prep, report)
}

/// [`train`] from a [`Prepared`] run (see `prepare_inputs` for batches in memory).
pub fn train_prepared(
    checked: &CheckedPipeline,
    opts: &RunOptions,
    prep: Prepared,
    report: &mut Reporter,
) -> Result<Model> {
    let plan = decide(checked, &prep, opts, report)?;
    // The inputs are open (and registered) now: refuse a bad output before the pass.
    for out in opts.output.iter().chain(&opts.checkpoint) {
        crate::atomic::check_output(out)?;
    }
    let run = Run { checked, prep: &prep, plan: &plan, opts, threads: opts.threads_for(checked) };
    let units: Vec<usize> = (0..prep.work.len()).collect();
    let acc = accumulate(&run, &units, report)?;
    // An in-place factorisation consumes the Gram: the pass goes to disk before it does,
    // so a failed or refused solve costs no pass (`--resume` solves again from it). Where
    // the state is the one labeled block the solve holds, the solve writes it just before
    // consuming it — the mixed-precision solve, which consumes the Gram only when it falls
    // back, then writes nothing (1 GiB and 6 s at D = 16,384); any other state is written
    // here.
    let checkpointer = opts.checkpoint.as_deref().filter(|_| plan.factors_in_place()).map(|path| Checkpointer {
        path,
        every: 0,
        since: 0,
        fingerprint: &prep.fingerprint,
        passes: checked.passes(),
    });
    let labeled_only = checkpointer.is_some() && acc.state()?.iter().map(|(name, _)| name.as_str()).eq(["labeled"]);
    let written = std::cell::Cell::new(false);
    if let (Some(c), false) = (&checkpointer, labeled_only) {
        c.write(acc.as_ref(), &units)?;
        written.set(true);
    }
    let pass = acc.pass();
    let mut keep = |labeled: &GramStats| -> Result<()> {
        if let Some(c) = &checkpointer {
            c.write_blocks(&[("labeled", labeled)], pass, &units)?;
            written.set(true);
        }
        Ok(())
    };
    let solution = {
        let mut ctx = run.ctx(report, Some(&prep.labeled));
        if labeled_only {
            ctx.keep = Some(&mut keep);
        }
        acc.solve(&mut ctx)
    };
    if let (Some(c), true) = (&checkpointer, written.get()) {
        report.say(format!("statistics written to {} before the in-place solve", c.path.display()));
        report.report.checkpointed_before_solve = true;
    }
    let solution = solution?;
    let Prepared { mut maps, labels, .. } = prep;
    let map = maps.swap_remove(solution.candidate.min(maps.len().saturating_sub(1)));
    Ok(assemble(checked, Fitted { map, labels, solution }))
}
