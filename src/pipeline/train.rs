//! The one-pass training driver (Algorithm 4 of the χ² paper, math.md §13.2): open
//! and check the inputs, scan the label column for the class set, fit the shift on a
//! bounded pre-pass sample, stream every row group once through the stages into the
//! statistics, then solve PCA and ridge from the statistics alone.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::{Error, Result};
use crate::model::{header_base, Model, ModelHeader};
use crate::pipeline::spec::{PipelineSpec, ShiftMode, Task};
use crate::rng::StageRng;
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::solve::{Components, Pca, RotatedProblem};
use crate::source::{Chunk, Classes, Dataset, ResolvedFeatures, Unit};
use crate::stats::GramStats;

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
            for &unit in units {
                let mut send = |c: Chunk| tx.send(Ok(c)).map_err(|_| Error::Numerical("consumer stopped".into()));
                if let Err(e) = dataset.read_unit(unit, chunk_rows, &mut send) {
                    // A send error means the consumer has stopped: nothing more to say.
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        });
        for item in rx.iter() {
            f(item?)?;
        }
        Ok(())
    })
}

/// A uniform sample of `n` rows (reservoir sampling, Algorithm R) in input order of
/// arrival; returns the rows (`m × d`, `m ≤ n`).
pub fn reservoir(
    dataset: &Dataset,
    n: usize,
    seed: u64,
    chunk_rows: usize,
    check: &mut dyn FnMut(&Chunk) -> Result<()>,
) -> Result<Vec<f32>> {
    let d = dataset.dim();
    let mut rng = StageRng::new(seed, u64::MAX);
    let mut keep: Vec<f32> = Vec::with_capacity(n * d);
    let mut seen: u64 = 0;
    stream(dataset, &dataset.units(), chunk_rows, &mut |ch: Chunk| {
        check(&ch)?;
        for r in 0..ch.rows {
            let row = &ch.x[r * d..(r + 1) * d];
            if (seen as usize) < n {
                keep.extend_from_slice(row);
            } else {
                let j = (rng.uniform() * (seen + 1) as f64) as u64;
                if (j as usize) < n {
                    keep[j as usize * d..(j as usize + 1) * d].copy_from_slice(row);
                }
            }
            seen += 1;
        }
        Ok(())
    })?;
    Ok(keep)
}

/// The first negative input of a χ² stage, as a data error naming the column and row.
pub fn check_nonnegative(pipeline: &FeaturePipeline, ch: &Chunk, features: &ResolvedFeatures) -> Result<()> {
    match pipeline.first_negative(&ch.x, ch.rows) {
        None => Ok(()),
        Some((r, j, v)) => {
            let column =
                if features.list { format!("{}[{j}]", features.columns[0]) } else { features.columns[j].clone() };
            Err(Error::data(
                ch.location.clone().column(column).row(ch.first_row + r),
                format!("value {v} is negative; χ² stages need non-negative inputs such as histograms or counts"),
            ))
        }
    }
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
    bar.set_message(what.to_string());
    bar
}

/// The ±1 one-vs-all targets of classes (one column for two classes).
pub fn encode_targets(classes: &[u32], c: usize, y: &mut Vec<f64>) {
    y.clear();
    for &k in classes {
        if c == 1 {
            y.push(if k == 1 { 1.0 } else { -1.0 });
        } else {
            y.extend((0..c).map(|j| if j == k as usize { 1.0 } else { -1.0 }));
        }
    }
}

/// What a training run reports besides the model.
#[derive(Debug, Default)]
pub struct TrainLog {
    /// Lines for stderr (memory, warnings, λ).
    pub lines: Vec<String>,
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Trains a model as the spec says. `say` receives progress lines for stderr.
pub fn train(spec: &PipelineSpec, show_progress: bool, say: &mut dyn FnMut(&str)) -> Result<Model> {
    let threads = spec.threads();
    let dataset = Dataset::open(&spec.data.train, spec.columns())?;
    let d = dataset.dim();
    let classes = match spec.task {
        Task::Classification => {
            let classes = dataset.scan_classes()?;
            if classes.len() < 2 {
                return Err(Error::data(
                    crate::error::Location::file(&dataset.files[0].path)
                        .column(spec.data.label.clone().unwrap_or_default()),
                    format!(
                        "the label column has {} distinct value(s); classification needs at least 2",
                        classes.len()
                    ),
                ));
            }
            Some(classes)
        }
        Task::Regression => None,
    };
    let c = match &classes {
        Some(k) if k.len() == 2 => 1,
        Some(k) => k.len(),
        None => spec.data.targets.len(),
    };
    // The pre-pass: a uniform sample fits the data-dependent stage parameters and the
    // shift. Its check is the χ² non-negativity one, so a bad value is reported before
    // anything is fitted.
    let needs_nonneg = spec.stages.iter().any(StageSpec::needs_nonnegative);
    let features = dataset.features.clone();
    let sample = reservoir(&dataset, spec.run.sample_rows.max(1), spec.run.seed, spec.run.chunk_rows, &mut |ch| {
        if needs_nonneg {
            if let Some(p) = ch.x.iter().position(|&v| v < 0.0) {
                let (r, j) = (p / d, p % d);
                let column =
                    if features.list { format!("{}[{j}]", features.columns[0]) } else { features.columns[j].clone() };
                return Err(Error::data(
                    ch.location.clone().column(column).row(ch.first_row + r),
                    format!(
                        "value {} is negative; χ² stages need non-negative inputs such as histograms or counts",
                        ch.x[p]
                    ),
                ));
            }
        }
        Ok(())
    })?;
    let stages: Vec<StageSpec> =
        spec.stages.iter().enumerate().map(|(i, s)| s.fit(&sample, d, spec.run.seed, i)).collect();
    let pipeline = FeaturePipeline::build(&stages, d, spec.run.seed);
    let dim = pipeline.output_dim();

    let chunk = spec.run.chunk_rows;
    let stats_bytes = GramStats::bytes_for(dim, c);
    let buffers = (4 * chunk * (d * 4 + dim)) as u64 + GramStats::scratch_bytes(dim);
    let solve_bytes = 3 * 8 * (dim * dim) as u64;
    let needed = stats_bytes + buffers + solve_bytes;
    say(&format!(
        "memory: statistics {} (D = {dim}, one triangle), chunk buffers {}, solve {}; {} rows × d = {d} in {} file(s)",
        mib(stats_bytes),
        mib(buffers),
        mib(solve_bytes),
        dataset.total_rows(),
        dataset.files.len()
    ));
    let limit = if spec.run.memory_limit_mib > 0 { Some(spec.run.memory_limit_mib << 20) } else { available_memory() };
    if let Some(limit) = limit {
        if needed > limit {
            return Err(Error::Memory {
                needed,
                limit,
                hint: "lower the stages' dim (the Gram grows as D²) or raise run.memory_limit_mib".into(),
            });
        }
    }

    let units = dataset.units();
    let mut z = Vec::new();
    let shift = match spec.run.shift {
        ShiftMode::Zero => vec![0.0; dim],
        ShiftMode::Sample => sample_mean(&pipeline, &sample, threads),
    };
    let mut stats = GramStats::new(shift, c);
    let bar = progress(dataset.total_rows(), "train", show_progress);
    let mut y = Vec::new();
    let pass_start = std::time::Instant::now();
    stream(&dataset, &units, chunk, &mut |ch: Chunk| {
        check_nonnegative(&pipeline, &ch, &dataset.features)?;
        z.resize(ch.rows * dim, 0.0);
        pipeline.map_chunk(&ch.x, ch.rows, &mut z, threads);
        match &classes {
            Some(k) => {
                let labels = ch.labels.as_ref().expect("label column is read for classification");
                let loc = ch.location.clone().column(spec.data.label.clone().unwrap_or_default());
                encode_targets(&k.encode(labels, &loc)?, c, &mut y);
            }
            None => {
                y.clear();
                y.extend_from_slice(&ch.targets);
            }
        }
        stats.add(&z, &y, ch.rows, threads).map_err(|e| match e {
            Error::Numerical(m) => Error::data(ch.location.clone(), m),
            e => e,
        })?;
        bar.inc(ch.rows as u64);
        Ok(())
    })?;
    bar.finish_and_clear();
    if stats.n < 2 {
        return Err(Error::data(
            crate::error::Location::file(&dataset.files[0].path),
            format!("{} training row(s); at least 2 are needed", stats.n),
        ));
    }

    let pass_secs = pass_start.elapsed().as_secs_f64();
    say(&format!("pass: {} rows in {pass_secs:.1} s ({:.0} rows/s)", stats.n, stats.n as f64 / pass_secs.max(1e-9)));
    let solve_start = std::time::Instant::now();
    let components = spec.components();
    let cen = stats.centered();
    let pca = Pca::fit(&cen, components)?;
    for w in &pca.warnings {
        say(&format!("warning: {w}"));
    }
    let use_pca = components != Components::All;
    let problem = RotatedProblem::new(&pca, &cen, true, use_pca)?;
    let fit = problem.solve(&cen, &spec.lambda()?);
    if let Some(g) = &fit.gcv {
        let i = g.chosen_shared;
        say(&format!(
            "ridge: λ = {} by GCV (grid {:.3e} … {:.3e}, GCV {:.6e}, df {:.1})",
            lambda_text(&fit.lambdas),
            g.grid[0],
            g.grid[g.grid.len() - 1],
            g.shared[i],
            g.df[i]
        ));
    } else {
        say(&format!("ridge: λ = {:.4e} (fixed)", fit.lambdas[0]));
    }
    say(&format!("solve: {:.1} s", solve_start.elapsed().as_secs_f64()));
    let (format, version, written_by) = header_base();
    let header = ModelHeader {
        format,
        version,
        written_by,
        task: spec.task,
        classes,
        label: spec.data.label.clone(),
        targets: spec.data.targets.clone(),
        features: dataset.features.clone(),
        stages,
        seed: spec.run.seed,
        dim,
        outputs: c,
        components: if use_pca { pca.e_eff } else { dim },
        components_requested: if use_pca { pca.e_requested } else { dim },
        lambdas: fit.lambdas.clone(),
        gcv: fit.gcv.clone(),
        rows: stats.n,
        pipeline: serde_json::to_value(spec).unwrap_or(serde_json::Value::Null),
        checksum: String::new(),
    };
    Ok(Model { header, pipeline, weights: fit.weights, bias: fit.bias, mean: cen.mean, eigenvalues: pca.eigenvalues })
}

/// Mean features of the pre-pass sample: the accumulator shift.
fn sample_mean(pipeline: &FeaturePipeline, sample: &[f32], threads: usize) -> Vec<f64> {
    let (d, dim) = (pipeline.input_dim(), pipeline.output_dim());
    let n = sample.len().checked_div(d).unwrap_or(0);
    let mut sum = vec![0.0f64; dim];
    let mut z = Vec::new();
    for block in sample.chunks(4096 * d.max(1)) {
        let rows = block.len() / d.max(1);
        z.resize(rows * dim, 0.0);
        pipeline.map_chunk(block, rows, &mut z, threads);
        for row in z.chunks_exact(dim) {
            sum.iter_mut().zip(row).for_each(|(s, &v)| *s += f64::from(v));
        }
    }
    if n > 0 {
        sum.iter_mut().for_each(|s| *s /= n as f64);
    }
    sum
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
