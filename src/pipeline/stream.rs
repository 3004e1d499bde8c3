//! Streaming helpers the drivers share: the reader → mapper → fold pipeline over work
//! units with its bounded channels and recycled buffers, the plain chunk stream, the
//! reservoir sample, the χ² input check and the progress bar.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::{Error, Result};
use crate::rng::StageRng;
use crate::sketch::FeaturePipeline;
use crate::source::{Chunk, Classes, Dataset, ResolvedFeatures, Unit};

/// Streams `units` of `dataset` through `f`, decoding on a reader thread that runs
/// ahead by at most two chunks (a bounded channel), so reading overlaps computing and
/// memory stays bounded. The first error, from either side, ends the stream.
pub fn stream(
    dataset: &Dataset,
    units: &[Unit],
    chunk_rows: usize,
    f: &mut dyn FnMut(Chunk) -> Result<()>,
) -> Result<()> {
    let (tx, rx) = crossbeam_channel::bounded::<Result<Chunk>>(2);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            for (k, &unit) in units.iter().enumerate() {
                if let Some(&next) = units.get(k + 1) {
                    dataset.prefetch(next);
                }
                let mut send = |c: Chunk| {
                    tx.send(Ok(c)).map_err(|_| Error::bug("the consumer of a stream stops only on its own error"))
                };
                if let Err(e) = dataset.read_unit(unit, chunk_rows, &mut send) {
                    // A send error means the consumer has stopped: nothing more to say.
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        });
        // Owned here: an early return drops it before the join, so the reader stops.
        let rx = rx;
        for item in rx.iter() {
            f(item?)?;
        }
        Ok(())
    })
}

/// The work of [`stream_ordered`]: a chunk and the worker's own scratch to a result.
pub type WorkFn<'a, S, T> = dyn Fn(&Chunk, &mut S) -> Result<T> + Sync + 'a;

/// [`stream`] with the work on `workers` threads: the reader decodes, each worker turns
/// whole chunks into results with its own scratch `S`, and `consume` gets every chunk and
/// its result in input order on the calling thread (where the output is written). At
/// most `workers + 2` chunks are alive at once — a token is taken before a chunk is
/// read and given back once it is consumed — so memory is bounded whatever the rows.
/// Chunk boundaries depend on `chunk_rows` alone, never on `workers`, so a result that
/// depends only on its chunk is the same for every thread count. The first error in
/// input order ends the stream, and is the one returned.
pub fn stream_ordered<S: Default, T: Send>(
    dataset: &Dataset,
    units: &[Unit],
    chunk_rows: usize,
    workers: usize,
    work: &WorkFn<'_, S, T>,
    consume: &mut dyn FnMut(&Chunk, T) -> Result<()>,
) -> Result<()> {
    let workers = workers.max(1);
    let (token_tx, token_rx) = crossbeam_channel::bounded::<()>(workers + 2);
    for _ in 0..workers + 2 {
        let _ = token_tx.send(());
    }
    let (job_tx, job_rx) = crossbeam_channel::unbounded::<(usize, Result<Chunk>)>();
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<(usize, Result<(Chunk, T)>)>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut seq = 0;
            for (k, &unit) in units.iter().enumerate() {
                if let Some(&next) = units.get(k + 1) {
                    dataset.prefetch(next);
                }
                let mut send = |c: Chunk| {
                    token_rx.recv().map_err(|_| Error::bug("consumer stopped"))?;
                    job_tx.send((seq, Ok(c))).map_err(|_| Error::bug("workers stopped"))?;
                    seq += 1;
                    Ok(())
                };
                if let Err(e) = dataset.read_unit(unit, chunk_rows, &mut send) {
                    let _ = job_tx.send((seq, Err(e)));
                    return;
                }
            }
        });
        for _ in 0..workers {
            let (job_rx, done_tx) = (job_rx.clone(), done_tx.clone());
            scope.spawn(move || {
                let mut scratch = S::default();
                for (seq, chunk) in job_rx.iter() {
                    let out = chunk.and_then(|c| work(&c, &mut scratch).map(|t| (c, t)));
                    if done_tx.send((seq, out)).is_err() {
                        return;
                    }
                }
            });
        }
        // Owned here: an early return drops them before the join, so every thread stops.
        let (done_rx, token_tx) = (done_rx, token_tx);
        drop((job_rx, done_tx));
        let mut waiting = std::collections::BTreeMap::new();
        let mut next = 0;
        for (seq, out) in done_rx.iter() {
            waiting.insert(seq, out);
            while let Some(out) = waiting.remove(&next) {
                let (chunk, t) = out?;
                consume(&chunk, t)?;
                dataset.recycle(chunk.x);
                let _ = token_tx.send(());
                next += 1;
            }
        }
        Ok(())
    })
}

/// What [`stream_mapped`] hands the consumer, in input order.
// One value per chunk of thousands of rows: boxing the chunk would save nothing measurable.
#[allow(clippy::large_enum_variant)]
pub enum Mapped<'a, M> {
    /// A chunk of the unit tagged `tag`, its mapped features and what `map` returned.
    Chunk {
        /// The tag the unit was given.
        tag: usize,
        /// The chunk as read.
        chunk: Chunk,
        /// Its features, `rows × D`.
        features: &'a [f32],
        /// The rest of `map`'s answer.
        extra: M,
    },
    /// Every chunk of the unit tagged `tag` has been handed over.
    UnitDone(usize),
}

/// Where a [`stream_mapped`] pass spent its time, in seconds. Reading and mapping run on
/// their own threads, so `decode + map` can overlap `fold`; `wait` is the time the
/// folding thread sat idle for want of a mapped chunk.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamTimes {
    /// Parquet decode and the row-major copy (the reader thread, blocked sends excluded).
    pub decode: f64,
    /// Normalisation, mapping and target decoding (the mapper thread).
    pub map: f64,
    /// Folding into the statistics (the calling thread).
    pub fold: f64,
    /// The calling thread waiting for input.
    pub wait: f64,
}

/// The mapping stage of [`stream_mapped`]: unit tag, chunk, buffer to fill.
pub type MapFn<'a, M> = dyn Fn(usize, &Chunk, &mut Vec<f32>) -> Result<M> + Sync + 'a;

/// [`stream`] over many units with a mapping stage on its own thread: `map` turns chunk
/// k + 1 into its features while `consume` folds chunk k into the statistics, across row
/// groups and files, so neither waits for the other at a boundary. `map` fills a recycled
/// buffer (two at most are alive: memory stays at two chunks' features).
pub fn stream_mapped<M: Send>(
    units: &[(&Dataset, Unit, usize)],
    chunk_rows: usize,
    map: &MapFn<'_, M>,
    consume: &mut dyn FnMut(Mapped<'_, M>) -> Result<()>,
) -> Result<StreamTimes> {
    enum Read {
        Chunk(usize, Chunk),
        Done(usize),
    }
    enum Out<M> {
        Chunk(usize, Box<Chunk>, Vec<f32>, M),
        Done(usize),
    }
    let (tx, rx) = crossbeam_channel::bounded::<Result<Read>>(1);
    let (mtx, mrx) = crossbeam_channel::bounded::<Result<Out<M>>>(1);
    let (btx, brx) = crossbeam_channel::bounded::<Vec<f32>>(2);
    for _ in 0..2 {
        let _ = btx.send(Vec::new());
    }
    use std::time::Instant;
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let (start, mut blocked) = (Instant::now(), 0.0);
            for (k, &(ds, unit, tag)) in units.iter().enumerate() {
                // The next unit's bytes come while this one is decoded (remote files).
                if let Some(&(next_ds, next, _)) = units.get(k + 1) {
                    next_ds.prefetch(next);
                }
                let mut send = |c: Chunk| {
                    let t = Instant::now();
                    let r = tx.send(Ok(Read::Chunk(tag, c))).map_err(|_| Error::bug("consumer stopped"));
                    blocked += t.elapsed().as_secs_f64();
                    r
                };
                if let Err(e) = ds.read_unit(unit, chunk_rows, &mut send) {
                    let _ = tx.send(Err(e));
                    break;
                }
                if tx.send(Ok(Read::Done(tag))).is_err() {
                    break;
                }
            }
            start.elapsed().as_secs_f64() - blocked
        });
        let mapper = scope.spawn(move || {
            let mut busy = 0.0;
            for item in rx.iter() {
                let t = Instant::now();
                let out = match item {
                    Ok(Read::Chunk(tag, ch)) => {
                        let Ok(mut buf) = brx.recv() else { break };
                        map(tag, &ch, &mut buf).map(|m| Out::Chunk(tag, Box::new(ch), buf, m))
                    }
                    Ok(Read::Done(tag)) => Ok(Out::Done(tag)),
                    Err(e) => Err(e),
                };
                busy += t.elapsed().as_secs_f64();
                let failed = out.is_err();
                if mtx.send(out).is_err() || failed {
                    break;
                }
            }
            busy
        });
        // Own the consumer's channel ends here, so that an early return (an error in
        // `consume`) drops them before the scope joins the threads: the mapper then sees
        // closed channels and stops instead of waiting forever for a buffer.
        let (mrx, btx) = (mrx, btx);
        let mut times = StreamTimes::default();
        let mut waited = Instant::now();
        for item in mrx.iter() {
            times.wait += waited.elapsed().as_secs_f64();
            let t = Instant::now();
            match item? {
                Out::Chunk(tag, chunk, buf, extra) => {
                    consume(Mapped::Chunk { tag, chunk: *chunk, features: &buf, extra })?;
                    // The mapper may have stopped already; a closed channel is no error here.
                    let _ = btx.send(buf);
                }
                Out::Done(tag) => consume(Mapped::UnitDone(tag))?,
            }
            times.fold += t.elapsed().as_secs_f64();
            waited = Instant::now();
        }
        times.decode = reader.join().unwrap_or(0.0);
        times.map = mapper.join().unwrap_or(0.0);
        Ok(times)
    })
}

/// A uniform sample of at most `n` rows of width `d` (Algorithm R) from rows offered
/// one at a time, driven by its own seeded stream.
pub struct Reservoir {
    n: usize,
    d: usize,
    seen: u64,
    rng: StageRng,
    /// The kept rows, row-major.
    pub rows: Vec<f32>,
}

impl Reservoir {
    /// An empty reservoir for `n` rows of width `d`, on the stream `(seed, salt)`.
    pub fn new(n: usize, d: usize, seed: u64, salt: u64) -> Self {
        Reservoir { n, d, seen: 0, rng: StageRng::new(seed, salt), rows: Vec::new() }
    }

    /// Offers every row of `x` (`rows × d`).
    pub fn offer(&mut self, x: &[f32], rows: usize) {
        let d = self.d;
        for row in x[..rows * d].chunks_exact(d.max(1)) {
            if (self.seen as usize) < self.n {
                self.rows.extend_from_slice(row);
            } else {
                let j = (self.rng.uniform() * (self.seen + 1) as f64) as usize;
                if j < self.n {
                    self.rows[j * d..(j + 1) * d].copy_from_slice(row);
                }
            }
            self.seen += 1;
        }
    }
}

/// A uniform sample of `n` rows of a whole dataset (reservoir sampling); `check` sees
/// every chunk first.
pub fn reservoir(
    dataset: &Dataset,
    n: usize,
    seed: u64,
    chunk_rows: usize,
    check: &mut dyn FnMut(&Chunk) -> Result<()>,
) -> Result<Vec<f32>> {
    let mut res = Reservoir::new(n, dataset.dim(), seed, u64::MAX);
    stream(dataset, &dataset.units(), chunk_rows, &mut |ch: Chunk| {
        check(&ch)?;
        res.offer(&ch.x, ch.rows);
        Ok(())
    })?;
    Ok(res.rows)
}

/// The one non-negative rule: when a stage needs non-negative inputs (`needs`, the χ²
/// family), the first negative input of the chunk is a data error naming its row and
/// column. The pre-pass, the pass, scoring and the held-out streams all check with it.
pub fn check_nonnegative(needs: bool, ch: &Chunk, features: &ResolvedFeatures) -> Result<()> {
    let d = features.dim.max(1);
    let Some(p) = needs.then(|| ch.x[..ch.rows * d].iter().position(|&v| v < 0.0)).flatten() else {
        return Ok(());
    };
    let (r, j) = (p / d, p % d);
    let column = if features.list { format!("{}[{j}]", features.columns[0]) } else { features.columns[j].clone() };
    Err(Error::data(ch.location.clone().column(column).row(ch.first_row + r), nonnegative_message(ch.x[p])))
}

/// What is said of a negative input to a χ² stage.
pub fn nonnegative_message(v: f32) -> String {
    format!("value {v} is negative; χ² stages need non-negative inputs such as histograms or counts")
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(total_rows: u64, what: &str, enabled: bool) -> ProgressBar {
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(Some(total_rows), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::with_draw_target(Some(total_rows), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{msg} [{bar:30}] {human_pos}/{human_len} rows, {per_sec}, ETA {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(crate::remote::redact(what));
    bar
}

/// Mean features of the pre-pass sample: the accumulator shift.
pub fn sample_mean(pipeline: &FeaturePipeline, sample: &[f32], threads: usize) -> Vec<f64> {
    pipeline.mean_features(sample, threads)
}

/// Classes of a model, for callers that only need the count.
pub fn output_count(classes: &Classes) -> usize {
    if classes.len() == 2 {
        1
    } else {
        classes.len()
    }
}

/// λ values as text: one number when they are all equal.
pub fn lambda_text(lambdas: &[f64]) -> String {
    if lambdas.windows(2).all(|w| w[0] == w[1]) {
        lambdas.first().map_or(String::new(), |l| format!("{l:.4e}"))
    } else {
        lambdas.iter().map(|l| format!("{l:.4e}")).collect::<Vec<_>>().join(", ")
    }
}
