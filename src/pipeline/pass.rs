//! The pass loop: every work unit read, mapped (on its own thread) and handed to the
//! run's [`Accumulation`], with checkpoints at unit boundaries, resume from one, and as
//! many passes as the accumulation asks for. The loop never asks which mode runs.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::pipeline::accumulate::{Accumulation, Batch, PassEnv};
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::checkpoint::{abort_after, load_checkpoint, Checkpointer};
use crate::pipeline::plan::{chunk_rows_for, Plan, RunOptions};
use crate::pipeline::prepare::Prepared;
use crate::pipeline::report::{PassReport, Reporter, ResumeReport};
use crate::pipeline::solve_ctx::SolveCtx;
use crate::pipeline::stream::{check_nonnegative, progress, Mapped};
use crate::source::{Chunk, Dataset, Unit};

/// A run: the checked pipeline, its prepared inputs and maps, its plan and options.
pub(crate) struct Run<'a> {
    pub checked: &'a CheckedPipeline,
    pub prep: &'a Prepared,
    pub plan: &'a Plan,
    pub opts: &'a RunOptions,
    pub threads: usize,
}

impl Run<'_> {
    /// A solve context over this run's maps (the accumulation's pass hooks and its solve).
    pub(crate) fn ctx<'c>(&'c self, report: &'c mut Reporter, training: Option<&'c Dataset>) -> SolveCtx<'c> {
        SolveCtx {
            session: &self.opts.session,
            checked: self.checked,
            maps: &self.prep.maps,
            candidate: 0,
            labels: &self.prep.labels,
            training,
            training_units: None,
            threads: self.threads,
            report,
            gram: self.plan.gram(),
            keeper: None,
        }
    }
}

/// Labeled-row mask and targets of a chunk.
fn targets(run: &Run<'_>, ch: &Chunk, unlabeled_input: bool) -> Result<(Vec<bool>, Vec<f64>)> {
    if unlabeled_input {
        return Ok((vec![false; ch.rows], Vec::new()));
    }
    let labels = &run.prep.labels;
    match (&labels.classes, &labels.code) {
        (Some(k), Some(code)) => {
            let column = ch.labels.as_ref().ok_or_else(|| Error::bug("classification run read no label column"))?;
            let loc = ch.location.clone().column(run.checked.spec().data.label.clone().unwrap_or_default());
            let codes = k.encode_opt(column, &loc)?;
            let mask: Vec<bool> = codes.iter().map(Option::is_some).collect();
            let mut y = Vec::new();
            code.targets(&codes.iter().flatten().copied().collect::<Vec<_>>(), &mut y);
            Ok((mask, y))
        }
        (Some(_), None) => Err(Error::bug("classification without a code")),
        (None, _) => Ok((vec![true; ch.rows], ch.targets.clone())),
    }
}

/// Runs the accumulation's current pass over `units` (indices into the prepared work),
/// skipping `done`, with checkpoints as asked.
pub(crate) fn run_pass(
    run: &Run<'_>,
    acc: &mut dyn Accumulation,
    units: &[usize],
    done: &mut Vec<usize>,
    ckpt: &mut Option<Checkpointer<'_>>,
) -> Result<PassReport> {
    let prep = run.prep;
    let spec = run.checked.spec();
    let env = PassEnv::new(run.threads, run.plan.gram(), spec.run.seed);
    let map = &prep.map().pipeline;
    let dim = map.output_dim();
    let needs = map.needs_nonnegative();
    let finished: BTreeSet<usize> = done.iter().copied().collect();
    let todo: Vec<usize> = units.iter().copied().filter(|u| !finished.contains(u)).collect();
    let total: u64 = todo.iter().map(|&i| prep.work[i].unit.rows as u64).sum();
    let pass = acc.pass();
    let bar = progress(total, if pass == 2 { "pass 2" } else { "train" }, run.opts.progress);
    let abort = abort_after();
    let work: Vec<(&Dataset, Unit, usize)> = todo
        .iter()
        .map(|&wi| {
            let w = prep.work[wi];
            (prep.dataset(w.unlabeled), w.unit, wi)
        })
        .collect();
    let mapper = |wi: usize, ch: &Chunk, z: &mut Vec<f32>| -> Result<(Vec<bool>, Vec<f64>)> {
        let w = prep.work[wi];
        check_nonnegative(needs, ch, &prep.dataset(w.unlabeled).features)?;
        z.resize(ch.rows * dim, 0.0);
        map.map_chunk(&ch.x, ch.rows, z, run.threads);
        targets(run, ch, w.unlabeled)
    };
    let mut chunks = 0;
    let side_before = acc.side_map_seconds();
    let start = Instant::now();
    let chunk = chunk_rows_for(spec.run.chunk_rows, dim, run.plan.keeps_rows());
    let times = crate::pipeline::stream::stream_mapped(&work, chunk, &mapper, &mut |item| {
        let (wi, ch, z, (mask, y)) = match item {
            Mapped::Chunk { tag, chunk, features, extra } => (tag, chunk, features, extra),
            Mapped::UnitDone(wi) => {
                done.push(wi);
                if let Some(c) = ckpt.as_mut() {
                    c.since += chunks;
                    chunks = 0;
                    if c.every > 0 && c.since >= c.every {
                        c.write(&*acc, done)?;
                        c.since = 0;
                    }
                }
                let total = run.opts.session.count_unit();
                if abort.is_some_and(|n| total >= n) {
                    std::process::abort();
                }
                return Ok(());
            }
        };
        let unit = prep.work[wi].unit;
        let batch = Batch {
            chunk: &ch,
            z,
            dim,
            labeled: &mask,
            y: &y,
            file: unit.file,
            row_group: unit.row_group,
            maps: &prep.maps,
        };
        acc.update(&batch, &env)?;
        chunks += 1;
        bar.inc(ch.rows as u64);
        Ok(())
    })?;
    bar.finish_and_clear();
    Ok(PassReport {
        pass,
        rows: acc.rows(),
        seconds: start.elapsed().as_secs_f64(),
        decode: times.decode,
        map: times.map,
        fold: times.fold,
        gemm: env.gemm_seconds(),
        other_maps: acc.side_map_seconds() - side_before,
        wait: times.wait,
    })
}

/// Says a pass's time split and rate.
fn say_pass(report: &mut Reporter, p: PassReport) {
    let others =
        if p.other_maps > 0.0 { format!(" + the other candidates' maps {:.1} s", p.other_maps) } else { String::new() };
    report.say(format!(
        "pass {} split: decode {:.1} s and map {:.1} s (their own threads); fold {:.1} s = Gram GEMM {:.1} s{others} + widening, sums and T {:.1} s; fold waited {:.1} s for input",
        p.pass,
        p.decode,
        p.map,
        p.fold,
        p.gemm,
        (p.fold - p.gemm - p.other_maps).max(0.0),
        p.wait
    ));
    let what = if p.pass == 2 { "labeled rows" } else { "rows" };
    report.say(format!(
        "pass {}: {} {what} in {:.1} s ({:.0} rows/s)",
        p.pass,
        p.rows,
        p.seconds,
        p.rows as f64 / p.seconds.max(1e-9)
    ));
    report.report.passes.push(p);
}

/// Accumulates every pass over `units` (all of them for a single run, a shard's share for
/// `accumulate`), from a checkpoint when resuming, with checkpoints as asked.
pub(crate) fn accumulate(run: &Run<'_>, units: &[usize], report: &mut Reporter) -> Result<Box<dyn Accumulation>> {
    let prep = run.prep;
    let opts = run.opts;
    let fresh = || run.plan.accumulation(&prep.maps, prep.c, prep.labeled.total_rows());
    let found = match (&opts.checkpoint, opts.resume) {
        (Some(path), true) => crate::atomic::exists(&opts.session, path)?,
        _ => false,
    };
    let (mut acc, mut done) = match (&opts.checkpoint, opts.resume) {
        (Some(path), true) if found => {
            // The dual keeps rows and never checkpoints, so a checkpoint holds
            // statistics: refuse before the pass, not after it.
            if run.plan.keeps_rows() {
                return Err(Error::BadModel {
                    path: path.clone(),
                    message: "this checkpoint holds statistics (ZᵀZ), not the kept rows the dual solve needs \
                              (ridge.solver = \"dual\", or auto with at most D/2 rows); resume with \
                              ridge.solver = \"cholesky\" or \"tridiagonal\", or start afresh without --resume"
                        .into(),
                });
            }
            let (acc, done) = load_checkpoint(&opts.session, path, &prep.fingerprint, run.plan)?;
            report.say(format!(
                "resuming from {} (pass {}, {} row groups done)",
                path.display(),
                acc.pass(),
                done.len()
            ));
            report.report.resumed =
                Some(ResumeReport { checkpoint: path.display().to_string(), pass: acc.pass(), units_done: done.len() });
            (acc, done)
        }
        (Some(path), true) => {
            report.say(format!("no checkpoint at {}: starting afresh", path.display()));
            (fresh()?, Vec::new())
        }
        _ => (fresh()?, Vec::new()),
    };
    let keeps_rows = run.plan.keeps_rows();
    if keeps_rows && opts.checkpoint.is_some() {
        report.say("no checkpoint: the rows are kept for the dual solve (the pass is one read of at most D/2 rows)");
    }
    let mut ckpt = opts.checkpoint.as_deref().filter(|_| !keeps_rows).map(|path| Checkpointer {
        session: &opts.session,
        path,
        every: run.checked.spec().run.checkpoint_every,
        since: 0,
        fingerprint: &prep.fingerprint,
        passes: run.checked.passes(),
    });
    loop {
        acc.begin_pass(&mut run.ctx(report, None))?;
        let p = run_pass(run, acc.as_mut(), units, &mut done, &mut ckpt)?;
        say_pass(report, p);
        if !acc.end_pass(&mut run.ctx(report, None))? {
            break;
        }
        done.clear();
        if let Some(c) = ckpt.as_mut() {
            c.write(acc.as_ref(), &done)?;
            c.since = 0;
        }
    }
    report.report.statistics_bytes = acc.size_bytes();
    Ok(acc)
}
