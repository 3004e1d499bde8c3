//! The pass state and the pass loop: the running statistics of a one- or two-pass run,
//! a chunk's targets and labeled mask, and the loop over the work units that maps each
//! chunk and folds it in, with checkpoints at unit boundaries.

use crate::error::{Error, Result};
use crate::pipeline::checkpoint::abort_after;
use crate::pipeline::checkpoint::load_checkpoint;
use crate::pipeline::checkpoint::Checkpointer;
use crate::pipeline::checkpoint::UNITS_DONE;
use crate::pipeline::plan::chunk_rows_for;
use crate::pipeline::plan::stage_ranges;
use crate::pipeline::plan::Prepared;
use crate::pipeline::plan::RunOptions;
use crate::pipeline::projection::fit_stage_pcas;
use crate::pipeline::projection::project;
use crate::pipeline::projection::StagePca;
use crate::pipeline::spec::PipelineSpec;
use crate::pipeline::state::State;
use crate::pipeline::stream::{check_nonnegative, progress, Mapped};
use crate::source::{Chunk, Dataset, ResolvedFeatures, Unit};
use crate::stats::GramStats;
use std::collections::BTreeSet;

/// Labeled-row mask and targets of a chunk.
pub(crate) fn targets(
    prep: &Prepared,
    spec: &PipelineSpec,
    ch: &Chunk,
    unlabeled_input: bool,
) -> Result<(Vec<bool>, Vec<f64>)> {
    if unlabeled_input {
        return Ok((vec![false; ch.rows], Vec::new()));
    }
    match &prep.classes {
        Some(k) => {
            let labels =
                ch.labels.as_ref().ok_or_else(|| Error::Internal("classification run read no label column".into()))?;
            let loc = ch.location.clone().column(spec.data.label.clone().unwrap_or_default());
            let codes = k.encode_opt(labels, &loc)?;
            let mask: Vec<bool> = codes.iter().map(Option::is_some).collect();
            let mut y = Vec::new();
            let code = prep.code.as_ref().ok_or_else(|| Error::Internal("classification without a code".into()))?;
            code.targets(&codes.iter().flatten().copied().collect::<Vec<_>>(), &mut y);
            Ok((mask, y))
        }
        None => Ok((vec![true; ch.rows], ch.targets.clone())),
    }
}

pub(crate) fn select_rows<T: Copy>(v: &[T], width: usize, mask: &[bool], keep: bool) -> Vec<T> {
    v.chunks_exact(width.max(1)).zip(mask).filter(|(_, &m)| m == keep).flat_map(|(r, _)| r.iter().copied()).collect()
}

pub(crate) fn data_err(ch: &Chunk) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::Numerical(m) => Error::data(ch.location.clone(), m),
        e => e,
    }
}

/// Runs the current pass over `units` (indices into `prep.work`), skipping `done`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_pass(
    spec: &PipelineSpec,
    prep: &Prepared,
    state: &mut State,
    units: &[usize],
    done: &mut Vec<usize>,
    pcas: Option<&[StagePca]>,
    ckpt: &mut Option<Checkpointer>,
    show: bool,
) -> Result<String> {
    let threads = spec.threads();
    let gram = spec.run.gram;
    let dim = prep.pipeline.output_dim();
    let ranges = stage_ranges(&prep.pipeline);
    let finished: BTreeSet<usize> = done.iter().copied().collect();
    let todo: Vec<usize> = units.iter().copied().filter(|u| !finished.contains(u)).collect();
    let total: u64 = todo.iter().map(|&i| prep.work[i].unit.rows as u64).sum();
    let bar = progress(total, if state.pass() == 2 { "pass 2" } else { "train" }, show);
    let abort = abort_after();
    let units: Vec<(&Dataset, Unit, usize)> = todo
        .iter()
        .map(|&wi| {
            let w = prep.work[wi];
            (prep.dataset(w.unlabeled), w.unit, wi)
        })
        .collect();
    let map = |wi: usize, ch: &Chunk, z: &mut Vec<f32>| -> Result<(Vec<bool>, Vec<f64>)> {
        let w = prep.work[wi];
        check_nonnegative(&prep.pipeline, ch, prep.dataset(w.unlabeled).features_ref())?;
        z.resize(ch.rows * dim, 0.0);
        prep.pipeline.map_chunk(&ch.x, ch.rows, z, threads);
        targets(prep, spec, ch, w.unlabeled)
    };
    let mut chunks = 0;
    let mut alt_z = Vec::new();
    // Time the other candidates' maps take on the folding thread (reported apart).
    let mut alt_map = 0.0;
    let gemm_before = crate::stats::gemm_seconds();
    let chunk = chunk_rows_for(spec, dim, matches!(state, State::Rows(_)));
    let times = crate::pipeline::stream::stream_mapped(&units, chunk, &map, &mut |item| {
        let (wi, ch, z, (mask, y)) = match item {
            Mapped::Chunk { tag, chunk, features, extra } => (tag, chunk, features, extra),
            Mapped::UnitDone(wi) => {
                done.push(wi);
                if let Some(c) = ckpt.as_mut() {
                    c.since += chunks;
                    chunks = 0;
                    if c.every > 0 && c.since >= c.every {
                        c.write(state, done)?;
                        c.since = 0;
                    }
                }
                let total = UNITS_DONE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if abort.is_some_and(|n| total >= n) {
                    std::process::abort();
                }
                return Ok(());
            }
        };
        let all_labeled = mask.iter().all(|&m| m);
        let unit = prep.work[wi].unit;
        let fold = Folding { spec, file: unit.file, row_group: unit.row_group, threads, gram };
        match state {
            State::One { .. } | State::Folds { .. } | State::Rows(_) => fold.one_pass(state, z, dim, &mask, &y, &ch)?,
            State::Candidates { states } => {
                for (i, inner) in states.iter_mut().enumerate() {
                    if i == 0 {
                        fold.one_pass(inner, z, dim, &mask, &y, &ch)?;
                    } else {
                        // The other candidates map here, on the folding thread.
                        let alt = &prep.alternatives[i - 1].pipeline;
                        let w = alt.output_dim();
                        alt_z.resize(ch.rows * w, 0.0);
                        let t = std::time::Instant::now();
                        alt.map_chunk(&ch.x, ch.rows, &mut alt_z, threads);
                        alt_map += t.elapsed().as_secs_f64();
                        fold.one_pass(inner, &alt_z, w, &mask, &y, &ch)?;
                    }
                }
            }
            State::Two { pass1, pass2: None } => {
                for (st, r) in pass1.iter_mut().zip(&ranges) {
                    let block: Vec<f32> = z.chunks_exact(dim).flat_map(|row| row[r.clone()].iter().copied()).collect();
                    st.add_with(&block, &[], ch.rows, threads, gram).map_err(data_err(&ch))?;
                }
            }
            State::Two { pass2: Some(p2), .. } => {
                let zl = if all_labeled { z.to_vec() } else { select_rows(z, dim, &mask, true) };
                let rows = zl.len() / dim;
                let p = project(
                    pcas.ok_or_else(|| Error::Internal("pass two without pass-one projections".into()))?,
                    &zl,
                    rows,
                    dim,
                );
                p2.add_f64(&p, &y, rows, threads).map_err(data_err(&ch))?;
            }
        }
        chunks += 1;
        bar.inc(ch.rows as u64);
        Ok(())
    })?;
    let gemm = crate::stats::gemm_seconds() - gemm_before;
    let t = times;
    let others = if alt_map > 0.0 { format!(" + the other candidates' maps {alt_map:.1} s") } else { String::new() };
    let split = format!(
        "pass {} split: decode {:.1} s and map {:.1} s (their own threads); fold {:.1} s = Gram GEMM {gemm:.1} s{others} + widening, sums and T {:.1} s; fold waited {:.1} s for input",
        state.pass(),
        t.decode,
        t.map,
        t.fold,
        (t.fold - gemm - alt_map).max(0.0),
        t.wait
    );
    bar.finish_and_clear();
    Ok(split)
}

/// Where a chunk's rows go in one-pass statistics: all to the labeled sums (unlabeled
/// rows to their own), or each row to its fold's.
struct Folding<'a> {
    spec: &'a PipelineSpec,
    file: usize,
    row_group: usize,
    threads: usize,
    gram: crate::stats::Precision,
}

impl Folding<'_> {
    fn one_pass(&self, state: &mut State, z: &[f32], dim: usize, mask: &[bool], y: &[f64], ch: &Chunk) -> Result<()> {
        let (threads, gram) = (self.threads, self.gram);
        match state {
            State::One { labeled, unlabeled } => {
                if mask.iter().all(|&m| m) {
                    labeled.add_with(z, y, ch.rows, threads, gram).map_err(data_err(ch))?;
                } else {
                    let zl = select_rows(z, dim, mask, true);
                    labeled.add_with(&zl, y, zl.len() / dim, threads, gram).map_err(data_err(ch))?;
                    let zu = select_rows(z, dim, mask, false);
                    let u = unlabeled
                        .as_mut()
                        .ok_or_else(|| Error::Internal("unlabeled rows without unlabeled statistics".into()))?;
                    u.add_with(&zu, &[], zu.len() / dim, threads, gram).map_err(data_err(ch))?;
                }
            }
            State::Rows(kept) => {
                if mask.iter().all(|&m| m) {
                    kept.add(z, y, ch.rows).map_err(data_err(ch))?;
                } else {
                    let zl = select_rows(z, dim, mask, true);
                    kept.add(&zl, y, zl.len() / dim).map_err(data_err(ch))?;
                }
            }
            State::Folds { folds } => {
                let fold = crate::pipeline::kfold::chunk_folds(self.spec, self.file, self.row_group, ch, folds.len());
                let c = y.len() / ch.rows.max(1);
                for (f, st) in folds.iter_mut().enumerate() {
                    let member: Vec<bool> = fold.iter().map(|&g| g as usize == f).collect();
                    let zf = select_rows(z, dim, &member, true);
                    let yf = select_rows(y, c, &member, true);
                    st.add_with(&zf, &yf, zf.len() / dim, threads, gram).map_err(data_err(ch))?;
                }
            }
            _ => return Err(Error::Internal("one-pass folding of another state".into())),
        }
        Ok(())
    }
}

impl Dataset {
    pub(crate) fn features_ref(&self) -> &ResolvedFeatures {
        &self.features
    }
}

/// Accumulates every pass for `units` (all of them for a single run, a shard's share
/// for `accumulate`), with checkpoints as asked. Returns the final state and, in
/// two-pass mode, the per-stage PCAs.
pub(crate) fn accumulate(
    spec: &PipelineSpec,
    prep: &Prepared,
    units: &[usize],
    opts: &RunOptions,
    say: &mut dyn FnMut(&str),
) -> Result<(State, Option<Vec<StagePca>>)> {
    let (mut state, mut done) = match (&opts.checkpoint, opts.resume) {
        (Some(path), true) if path.exists() => {
            let (s, d) = load_checkpoint(path, &prep.fingerprint)?;
            // The dual keeps rows and never checkpoints, so a checkpoint holds
            // statistics: refuse before the pass, not after it.
            if prep.dual && !matches!(s, State::Rows(_)) {
                return Err(Error::BadModel {
                    path: path.clone(),
                    message: "this checkpoint holds statistics (ZᵀZ), not the kept rows the dual solve needs \
                              (ridge.solver = \"dual\", or auto with at most D/2 rows); resume with \
                              ridge.solver = \"cholesky\" or \"tridiagonal\", or start afresh without --resume"
                        .into(),
                });
            }
            say(&format!("resuming from {} (pass {}, {} row groups done)", path.display(), s.pass(), d.len()));
            (s, d)
        }
        (Some(path), true) => {
            say(&format!("no checkpoint at {}: starting afresh", path.display()));
            (State::new(spec, prep), Vec::new())
        }
        _ => (State::new(spec, prep), Vec::new()),
    };
    if matches!(state, State::Rows(_)) && opts.checkpoint.is_some() {
        say("no checkpoint: the rows are kept for the dual solve (the pass is one read of at most D/2 rows)");
    }
    let keeps_rows = matches!(state, State::Rows(_));
    let mut ckpt = opts.checkpoint.as_deref().filter(|_| !keeps_rows).map(|path| Checkpointer {
        path,
        every: spec.run.checkpoint_every,
        since: 0,
        fingerprint: &prep.fingerprint,
    });
    let start = std::time::Instant::now();
    if state.pass() == 1 {
        let split = run_pass(spec, prep, &mut state, units, &mut done, None, &mut ckpt, opts.progress)?;
        say(&split);
    }
    fn rows(s: &State) -> u64 {
        match s {
            State::One { labeled, unlabeled } => labeled.n + unlabeled.as_ref().map_or(0, |u| u.n),
            State::Folds { folds } => folds.iter().map(|f| f.n).sum(),
            State::Rows(kept) => kept.rows() as u64,
            State::Candidates { states } => states.first().map_or(0, rows),
            State::Two { pass1, .. } => pass1.first().map_or(0, |p| p.n),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    say(&format!("pass 1: {} rows in {secs:.1} s ({:.0} rows/s)", rows(&state), rows(&state) as f64 / secs.max(1e-9)));
    let mut pcas = None;
    if let State::Two { pass1, pass2 } = &mut state {
        let ranges = stage_ranges(&prep.pipeline);
        let fitted = fit_stage_pcas(spec, pass1, &ranges, say)?;
        if pass2.is_none() {
            let e: usize = fitted.iter().map(|p| p.e).sum();
            *pass2 = Some(GramStats::new(vec![0.0; e], prep.c));
            done.clear();
            if let Some(c) = ckpt.as_mut() {
                c.write(&state, &done)?;
                c.since = 0;
            }
        }
        let start = std::time::Instant::now();
        let split = run_pass(spec, prep, &mut state, units, &mut done, Some(&fitted), &mut ckpt, opts.progress)?;
        say(&split);
        let secs = start.elapsed().as_secs_f64();
        if let State::Two { pass2: Some(p2), .. } = &state {
            say(&format!("pass 2: {} labeled rows in {secs:.1} s ({:.0} rows/s)", p2.n, p2.n as f64 / secs.max(1e-9)));
        }
        pcas = Some(fitted);
    }
    Ok((state, pcas))
}
