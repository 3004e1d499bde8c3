//! Training in one process: prepare the inputs and maps, plan the run once, accumulate
//! every pass (with checkpoints and resume), solve by the plan, assemble the model. The
//! plan decides everything that can be decided before the first row; the steps after it
//! only run it.

use crate::error::Result;
use crate::model::Model;
use crate::pipeline::assemble::{assemble, Fitted};
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::check::Learner;
use crate::pipeline::checkpoint::Checkpointer;
use crate::pipeline::keep::Keeper;
use crate::pipeline::pass::{accumulate, Run};
use crate::pipeline::plan::{Facts, Plan, RunOptions};
use crate::pipeline::prepare::{prepare_with, Prepared};
use crate::pipeline::report::Reporter;
use crate::solve::SolvePath;

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
    let prep = prepare_with(&opts.session, checked, opts.maps.as_deref(), report)?;
    train_prepared(checked, opts, prep, report)
}

/// [`train`] from a [`Prepared`] run (see `prepare_inputs` for batches in memory).
pub fn train_prepared(
    checked: &CheckedPipeline,
    opts: &RunOptions,
    prep: Prepared,
    report: &mut Reporter,
) -> Result<Model> {
    // `auto` is a choice and the checkpoint a fact: a run resumed from a checkpoint of
    // statistics solves from statistics, never from kept rows (the dual), whatever auto
    // would pick for a fresh run. (A dual asked for by name is refused by the pass, naming
    // the checkpoint.)
    let asks_dual = matches!(checked.learner, Learner::Ridge { solver: SolvePath::Dual });
    let resumes = !asks_dual
        && match (&opts.checkpoint, opts.resume) {
            (Some(path), true) => crate::atomic::exists(&opts.session, path)?,
            _ => false,
        };
    let resumed_opts;
    let opts = if resumes && checked.candidates.is_none() {
        resumed_opts = RunOptions { keep_statistics: true, ..opts.clone() };
        &resumed_opts
    } else {
        opts
    };
    let plan = decide(checked, &prep, opts, report)?;
    // The inputs are open (and registered) now: refuse a bad output before the pass.
    crate::pipeline::checkpoint::check_run_outputs(opts, "--output")?;
    let run = Run { checked, prep: &prep, plan: &plan, opts, threads: opts.threads_for(checked) };
    let units: Vec<usize> = (0..prep.work.len()).collect();
    let acc = accumulate(&run, &units, report)?;
    // An in-place factorisation consumes the Gram: the accumulation hands its whole state
    // to the checkpoint just before, so a failed or refused solve costs no pass
    // (`--resume` solves again from it). A solve that consumes nothing — the
    // mixed-precision one unless it falls back — writes nothing (a write costs the Gram's
    // size in disk and time), and a run resumed from a checkpoint that holds its whole last pass
    // (a solve killed after that write) has its state on disk already.
    let resumed = report.report.resumed.as_ref();
    let on_disk = resumed.is_some_and(|r| r.pass == acc.pass() && r.units_done == units.len());
    let keeper = opts.checkpoint.as_deref().filter(|_| plan.consumes_statistics()).map(|path| {
        let checkpointer = Checkpointer {
            session: &opts.session,
            path,
            every: 0,
            since: 0,
            fingerprint: &prep.fingerprint,
            passes: checked.passes(),
        };
        Keeper::new(checkpointer, acc.pass(), &units, on_disk)
    });
    let solution = {
        let mut ctx = run.ctx(report, Some(&prep.labeled));
        ctx.keeper = keeper.as_ref();
        acc.solve(&mut ctx)
    };
    if let Some(k) = keeper.as_ref().filter(|k| k.written()) {
        report.say(format!("statistics written to {} before the in-place solve", k.checkpointer.path.display()));
        report.report.checkpointed_before_solve = true;
    } else if let Some(k) = keeper.as_ref().filter(|k| k.on_disk) {
        report
            .say(format!("the statistics are in {} already (every row group was done)", k.checkpointer.path.display()));
    }
    let solution = solution?;
    let Prepared { mut maps, labels, .. } = prep;
    let map = maps.swap_remove(solution.candidate.min(maps.len().saturating_sub(1)));
    Ok(assemble(checked, Fitted { map, labels, solution }))
}
