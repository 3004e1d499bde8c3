//! The training drivers. One pass (Algorithm 4 of the χ² paper, math.md §13.2–13.3):
//! a single scan accumulates the labeled statistics and, when there are unlabeled rows,
//! theirs, then PCA (on all rows) and ridge (on the labeled ones) solve from them. Two
//! passes (Algorithm 5, math.md §13.5): pass one accumulates each stage's own
//! covariance and fits its PCA; pass two projects every stage, concatenates, and
//! accumulates the statistics of the concatenation for ridge.
//!
//! Before either, [`prepare`] opens and checks every input, scans the class set,
//! draws the pre-pass sample, fits the data-dependent stage parameters and the shift,
//! and states the memory the run needs. Work is counted in units (row groups); a run
//! can checkpoint its statistics at unit boundaries and resume, and a shard
//! accumulates every N-th unit so that `solve` can merge the shards.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::codes::OutputCode;
use crate::error::{Error, Location, Result};
use crate::model::{header_base, Model, ModelHeader, Projection, ProjectionInfo, ValidationTable};
use crate::pipeline::spec::{Codes, LambdaValue, Metric, PcaMethod, PipelineSpec, ShiftMode, Task};
use crate::pipeline::train::{check_nonnegative, lambda_text, progress, sample_mean, Mapped, Reservoir};
use crate::rng::StageRng;
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::solve::{Components, LambdaChoice, Pca, Ridge, RotatedProblem, SolvePath};
use crate::source::{Chunk, Classes, Dataset, ResolvedFeatures, Unit};
use crate::stats::{stats_from_bytes, stats_to_bytes, GramStats};

/// Options of a training run beyond the pipeline file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Show a progress bar.
    pub progress: bool,
    /// Where to write checkpoints (none: no checkpoints).
    pub checkpoint: Option<PathBuf>,
    /// Resume from the checkpoint.
    pub resume: bool,
    /// Where the result will be written, checked before the pass (none: not checked).
    pub output: Option<PathBuf>,
}

/// A row group of the labeled (`unlabeled = false`) or unlabeled inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkUnit {
    /// From the unlabeled inputs.
    pub unlabeled: bool,
    /// The row group.
    pub unit: Unit,
}

/// Everything fixed before the first main-pass row.
#[derive(Debug)]
pub struct Prepared {
    /// Labeled inputs.
    pub labeled: Dataset,
    /// Unlabeled inputs.
    pub unlabeled: Option<Dataset>,
    /// Classes (classification).
    pub classes: Option<Classes>,
    /// How classes become targets (classification).
    pub code: Option<OutputCode>,
    /// Outputs.
    pub c: usize,
    /// Stages with fitted parameters.
    pub stages: Vec<StageSpec>,
    /// The map.
    pub pipeline: FeaturePipeline,
    /// The accumulator shift.
    pub shift: Vec<f64>,
    /// Fingerprint of what decides the statistics.
    pub fingerprint: String,
    /// Every unit, labeled inputs first.
    pub work: Vec<WorkUnit>,
    /// Rows may be unlabeled (unlabeled files or null labels).
    pub semi: bool,
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

impl Prepared {
    #[allow(clippy::expect_used)] // Invariant: units are marked unlabeled only when unlabeled inputs were opened.
    fn dataset(&self, unlabeled: bool) -> &Dataset {
        if unlabeled {
            self.unlabeled.as_ref().expect("unlabeled units come from the unlabeled inputs")
        } else {
            &self.labeled
        }
    }

    /// The features as resolved on the first labeled file.
    pub fn features(&self) -> &ResolvedFeatures {
        &self.labeled.features
    }

    /// A unit's identity for shard manifests: (unlabeled, file path, row group).
    fn unit_id(&self, w: &WorkUnit) -> (bool, String, usize) {
        (w.unlabeled, self.dataset(w.unlabeled).files[w.unit.file].path.display().to_string(), w.unit.row_group)
    }
}

/// Opens and checks the inputs, scans the classes, fits the stages and the shift on
/// the pre-pass sample, and checks the memory the run needs.
pub fn prepare(spec: &PipelineSpec, say: &mut dyn FnMut(&str)) -> Result<Prepared> {
    if spec.data.train.is_empty() {
        return Err(Error::config(&spec.source, "data.train", "no training files given"));
    }
    let labeled = Dataset::open(&spec.data.train, spec.columns())?;
    let unlabeled = if spec.data.unlabeled.is_empty() {
        None
    } else {
        Some(Dataset::open(&spec.data.unlabeled, spec.feature_only_columns())?)
    };
    prepare_inputs(spec, labeled, unlabeled, say)
}

/// [`prepare`] on inputs already opened (files, or batches in memory).
pub fn prepare_inputs(
    spec: &PipelineSpec,
    labeled: Dataset,
    unlabeled: Option<Dataset>,
    say: &mut dyn FnMut(&str),
) -> Result<Prepared> {
    let d = labeled.dim();
    let unlabeled = match unlabeled {
        None => None,
        Some(u) => {
            if u.dim() != d || u.features.columns != labeled.features.columns {
                return Err(Error::data(
                    u.files[0].location(),
                    format!(
                        "the unlabeled files have {} features, the training files {d}: the feature columns must match",
                        u.dim()
                    ),
                ));
            }
            Some(u)
        }
    };
    for files in [&spec.data.test, &spec.data.validation] {
        if !files.is_empty() {
            Dataset::open(files, ColumnsFor::labeled(spec))?;
        }
    }
    let classes = match spec.task {
        Task::Classification => {
            let classes = labeled.scan_classes()?;
            if classes.len() < 2 {
                return Err(Error::data(
                    labeled.files[0].location().column(spec.data.label.clone().unwrap_or_default()),
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
    let code = match &classes {
        Some(k) => Some(output_code(spec, k.len())?),
        None => None,
    };
    let c = code.as_ref().map_or(spec.data.targets.len(), OutputCode::outputs);
    let mut work: Vec<WorkUnit> = labeled.units().into_iter().map(|unit| WorkUnit { unlabeled: false, unit }).collect();
    if let Some(u) = &unlabeled {
        work.extend(u.units().into_iter().map(|unit| WorkUnit { unlabeled: true, unit }));
    }
    let semi = unlabeled.is_some() || spec.columns().null_labels_unlabeled;

    let features = labeled.features.clone();
    let needs_nonneg = spec.stages.iter().any(StageSpec::needs_nonnegative);
    let mut check = |ch: &Chunk| -> Result<()> {
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
    };
    let sample = prepass_sample(&labeled, unlabeled.as_ref(), &work, spec, &mut check)?;
    let stages: Vec<StageSpec> =
        spec.stages.iter().enumerate().map(|(i, s)| s.fit(&sample, d, spec.run.seed, i)).collect::<Result<_>>()?;
    for (i, st) in stages.iter().enumerate() {
        let t = match st {
            StageSpec::GaussianSketch(g) => g.truncation,
            StageSpec::GaussianSketchHd(g) => g.truncation,
            _ => None,
        };
        if let Some(t) = t.filter(|&t| t > 64) {
            say(&format!(
                "warning: stage {i}: the Gaussian sketch needs {t} terms: the bandwidth is small next to the data's spread; random Fourier features suit better"
            ));
        }
    }
    let pipeline = FeaturePipeline::build(&stages, d, spec.run.seed)?;
    let threads = spec.threads();
    let shift = match spec.run.shift {
        ShiftMode::Zero => vec![0.0; pipeline.output_dim()],
        ShiftMode::Sample => sample_mean(&pipeline, &sample, threads),
    };
    // The resolved inputs (every file's path, size and footer) are part of what a
    // checkpoint or a shard must match: a glob that gains a file cannot resume.
    let files: Vec<String> =
        labeled.identity().into_iter().chain(unlabeled.iter().flat_map(Dataset::identity)).collect();
    let fingerprint = spec.fingerprint(&stages, spec.run.shift, &files);
    let prep = Prepared { labeled, unlabeled, classes, code, c, stages, pipeline, shift, fingerprint, work, semi };
    check_memory(spec, &prep, say)?;
    Ok(prep)
}

/// The output code of a classification run (`ridge.codes`).
fn output_code(spec: &PipelineSpec, classes: usize) -> Result<OutputCode> {
    let f = spec.source.as_str();
    match (spec.ridge.codes, &spec.ridge.code_file) {
        (Codes::OneVsAll, _) => Ok(OutputCode::OneVsAll { classes }),
        (Codes::Ecoc, Some(path)) => {
            let bytes = crate::atomic::read_input(path)?;
            let text = String::from_utf8(bytes).map_err(|_| Error::data(Location::file(path), "not UTF-8 text"))?;
            let code = OutputCode::parse(&text).map_err(|e| Error::data(Location::file(path), e.to_string()))?;
            if code.classes() != classes {
                return Err(Error::data(
                    Location::file(path),
                    format!("the code has {} rows but the labels have {classes} classes", code.classes()),
                ));
            }
            Ok(code)
        }
        (Codes::Ecoc, None) => OutputCode::random(classes, spec.ridge.code_length, spec.run.seed)
            .map_err(|e| Error::config(f, "ridge.code_length", e.to_string())),
    }
}

/// Column sets for the other labeled inputs (test, validation).
struct ColumnsFor;

impl ColumnsFor {
    fn labeled(spec: &PipelineSpec) -> crate::source::ColumnSpec {
        crate::source::ColumnSpec { null_labels_unlabeled: false, ..spec.columns() }
    }
}

/// The pre-pass sample: units in a seeded random order until they hold four times the
/// sample size (every unit for small inputs), then a seeded reservoir over their rows.
/// It reads only those row groups and is the same in every shard.
fn prepass_sample(
    labeled: &Dataset,
    unlabeled: Option<&Dataset>,
    work: &[WorkUnit],
    spec: &PipelineSpec,
    check: &mut dyn FnMut(&Chunk) -> Result<()>,
) -> Result<Vec<f32>> {
    let n = spec.run.sample_rows.max(1);
    let d = labeled.dim();
    let mut rng = StageRng::new(spec.run.seed, u64::MAX - 1);
    let mut order: Vec<usize> = (0..work.len()).collect();
    for k in (1..order.len()).rev() {
        let j = rng.below(k as u32 + 1) as usize;
        order.swap(k, j);
    }
    let mut take = Vec::new();
    let mut rows = 0;
    for &i in &order {
        if rows >= 4 * n {
            break;
        }
        take.push(i);
        rows += work[i].unit.rows;
    }
    take.sort_unstable();
    let mut res = Reservoir::new(n, d, spec.run.seed, u64::MAX);
    for &i in &take {
        let w = work[i];
        let ds = match (w.unlabeled, unlabeled) {
            (true, Some(u)) => u,
            (true, None) => return Err(Error::Internal("unlabeled work unit without unlabeled inputs".into())),
            (false, _) => labeled,
        };
        ds.read_unit(w.unit, spec.run.chunk_rows, &mut |ch: Chunk| {
            check(&ch)?;
            res.offer(&ch.x, ch.rows);
            Ok(())
        })?;
    }
    Ok(res.rows)
}

fn stage_ranges(pipeline: &FeaturePipeline) -> Vec<std::ops::Range<usize>> {
    let mut start = 0;
    pipeline
        .stages()
        .iter()
        .map(|s| {
            let r = start..start + s.output_dim();
            start = r.end;
            r
        })
        .collect()
}

fn check_memory(spec: &PipelineSpec, prep: &Prepared, say: &mut dyn FnMut(&str)) -> Result<()> {
    let (d, dim, c) = (prep.labeled.dim(), prep.pipeline.output_dim(), prep.c);
    let chunk = chunk_rows_for(spec, dim);
    let (stats, solve_dim, path) = if spec.passes == 2 {
        let ranges = stage_ranges(&prep.pipeline);
        let e: usize = ranges
            .iter()
            .enumerate()
            .map(|(i, r)| match spec.stage_components(i) {
                Components::Fixed(e) => e.min(r.len()),
                _ => r.len(),
            })
            .sum();
        let stats = ranges.iter().map(|r| GramStats::bytes_for(r.len(), 0)).sum::<u64>() + GramStats::bytes_for(e, c);
        (stats, e, solve_path(spec, false, false)?)
    } else {
        let stats = GramStats::bytes_for(dim, c) * if prep.semi { 2 } else { 1 };
        (stats, dim, solve_path(spec, spec.components() != Components::All, prep.semi)?)
    };
    // Two chunks' features are alive at once (one mapped while the other is added).
    let buffers = (4 * chunk * (d * 4 + 2 * dim)) as u64 + GramStats::scratch_bytes(dim);
    let limit = memory_limit(spec);
    let solve = solve_bytes(path, solve_dim, c);
    // The chunk buffers are gone by the solve: the copy has to fit beside the statistics.
    let in_place = path == SolvePath::Cholesky && limit.is_some_and(|l| stats + solve > l);
    // A refit keeps the validation rows' statistics beside the solve's matrices.
    let refit =
        spec.ridge.refit && !spec.data.validation.is_empty() && !matches!(spec.lambda()?, LambdaChoice::Fixed(_));
    let held_out = if refit { GramStats::bytes_for(solve_dim, c) } else { 0 };
    let needed = stats + held_out + buffers + if in_place { 0 } else { solve };
    say(&format!(
        "memory: statistics {} (D = {dim}, {} pass(es){}), chunk buffers {}, solve {} ({} path{}); {} rows × d = {d} in {} file(s)",
        mib(stats + held_out),
        spec.passes,
        match (prep.semi, refit) {
            (true, true) => ", labeled, unlabeled and validation",
            (true, false) => ", labeled and unlabeled",
            (false, true) => ", training and validation",
            (false, false) => "",
        },
        mib(buffers),
        mib(if in_place { 0 } else { solve }),
        path.name(),
        if in_place { ", in place on the statistics, which are checkpointed first" } else { "" },
        prep.labeled.total_rows() + prep.unlabeled.as_ref().map_or(0, Dataset::total_rows),
        prep.labeled.files.len() + prep.unlabeled.as_ref().map_or(0, |u| u.files.len()),
    ));
    if let Some(limit) = limit {
        if needed > limit {
            let hint = match path {
                SolvePath::Eigen => "lower the stages' dim (the Gram grows as D²), raise run.memory_limit_mib, or drop PCA: the dense eigendecomposition needs 3·D² doubles where a fixed λ (Cholesky) needs none beyond the statistics",
                SolvePath::Tridiagonal => "lower the stages' dim, raise run.memory_limit_mib, or fix ridge.lambda: GCV needs one dense D × D matrix, a fixed λ solves in place",
                _ => "lower the stages' dim (the Gram grows as D²) or raise run.memory_limit_mib",
            };
            return Err(Error::Memory { needed, limit, hint: hint.into() });
        }
    }
    Ok(())
}

/// Rows per chunk in the pass: `run.chunk_rows`, lowered so that one chunk's features
/// stay within 128 MiB (two are alive at once): at large D the chunk buffers would
/// otherwise rival the Gram.
fn chunk_rows_for(spec: &PipelineSpec, dim: usize) -> usize {
    let cap = (128usize << 20) / (4 * dim.max(1));
    spec.run.chunk_rows.min(cap.max(256)).max(1)
}

/// The memory limit in force: `run.memory_limit_mib`, or what the machine has available.
fn memory_limit(spec: &PipelineSpec) -> Option<u64> {
    if spec.run.memory_limit_mib > 0 {
        Some(spec.run.memory_limit_mib << 20)
    } else {
        available_memory()
    }
}

/// Bytes a solve path allocates beyond the statistics for `D` features and `c` outputs.
fn solve_bytes(path: SolvePath, dim: usize, c: usize) -> u64 {
    match path {
        SolvePath::Cholesky => 8 * (crate::stats::TriGram::len_for(dim) + 2 * dim * c) as u64,
        SolvePath::Tridiagonal => crate::tridiag::bytes_for(dim, c),
        SolvePath::Eigen | SolvePath::Auto => 3 * 8 * (dim * dim) as u64,
    }
}

/// Whether the Cholesky path must factor the statistics' own Gram: a copy would not fit
/// beside them within `run.memory_limit_mib`, or in the memory the machine has left.
fn solve_in_place(spec: &PipelineSpec, stats: &GramStats) -> bool {
    let copy = solve_bytes(SolvePath::Cholesky, stats.dim(), stats.c);
    if spec.run.memory_limit_mib > 0 {
        stats.size_bytes() + copy > spec.run.memory_limit_mib << 20
    } else {
        available_memory().is_some_and(|free| copy > free)
    }
}

/// The running statistics of a training run.
#[derive(Debug, Clone)]
pub enum State {
    /// One pass: labeled rows, and unlabeled rows when there are any.
    One {
        /// `L`.
        labeled: GramStats,
        /// `U` (PCA only).
        unlabeled: Option<GramStats>,
    },
    /// Two passes: per-stage statistics over all rows, then the projected statistics.
    Two {
        /// Pass one, one per stage.
        pass1: Vec<GramStats>,
        /// Pass two (present once pass one is complete).
        pass2: Option<GramStats>,
    },
}

impl State {
    fn new(spec: &PipelineSpec, prep: &Prepared) -> State {
        if spec.passes == 2 {
            let pass1 =
                stage_ranges(&prep.pipeline).into_iter().map(|r| GramStats::new(prep.shift[r].to_vec(), 0)).collect();
            State::Two { pass1, pass2: None }
        } else {
            State::One {
                labeled: GramStats::new(prep.shift.clone(), prep.c),
                unlabeled: prep.semi.then(|| GramStats::new(prep.shift.clone(), 0)),
            }
        }
    }

    fn pass(&self) -> u32 {
        match self {
            State::Two { pass2: Some(_), .. } => 2,
            _ => 1,
        }
    }

    /// Named blocks for a statistics file.
    fn blocks(&self) -> Vec<(String, &GramStats)> {
        match self {
            State::One { labeled, unlabeled } => {
                let mut v = vec![("labeled".to_string(), labeled)];
                if let Some(u) = unlabeled {
                    v.push(("unlabeled".into(), u));
                }
                v
            }
            State::Two { pass1, pass2 } => {
                let mut v: Vec<(String, &GramStats)> =
                    pass1.iter().enumerate().map(|(i, s)| (format!("pass1.stage{i}"), s)).collect();
                if let Some(p) = pass2 {
                    v.push(("pass2".into(), p));
                }
                v
            }
        }
    }

    fn from_blocks(passes: u32, mut blocks: Vec<(String, GramStats)>) -> std::result::Result<State, String> {
        let mut take = |name: &str| blocks.iter().position(|(n, _)| n == name).map(|i| blocks.remove(i).1);
        if passes == 2 {
            let mut pass1 = Vec::new();
            while let Some(s) = take(&format!("pass1.stage{}", pass1.len())) {
                pass1.push(s);
            }
            if pass1.is_empty() {
                return Err("no pass-one statistics".into());
            }
            Ok(State::Two { pass1, pass2: take("pass2") })
        } else {
            let labeled = take("labeled").ok_or("no labeled statistics")?;
            Ok(State::One { labeled, unlabeled: take("unlabeled") })
        }
    }

    fn merge(&mut self, other: &State) -> std::result::Result<(), String> {
        match (self, other) {
            (State::One { labeled, unlabeled }, State::One { labeled: l2, unlabeled: u2 }) => {
                if labeled.dim() != l2.dim() || labeled.c != l2.c {
                    return Err("statistics of different shapes".into());
                }
                labeled.merge(l2).map_err(|e| e.to_string())?;
                match (unlabeled, u2) {
                    (Some(a), Some(b)) => a.merge(b).map_err(|e| e.to_string())?,
                    (None, None) => {}
                    _ => return Err("one part has unlabeled statistics and the other not".into()),
                }
                Ok(())
            }
            (State::Two { pass1: a, pass2: pa }, State::Two { pass1: b, pass2: pb }) => {
                match (pa, pb) {
                    (Some(x), Some(y)) => x.merge(y).map_err(|e| e.to_string())?,
                    (None, None) => {
                        if a.len() != b.len() {
                            return Err("parts with different stage counts".into());
                        }
                        for (x, y) in a.iter_mut().zip(b) {
                            x.merge(y).map_err(|e| e.to_string())?;
                        }
                    }
                    _ => return Err("pass-one and pass-two statistics do not merge".into()),
                }
                Ok(())
            }
            _ => Err("one-pass and two-pass statistics do not merge".into()),
        }
    }
}

/// Per-stage PCA results of two-pass pass one.
#[derive(Debug, Clone)]
struct StagePca {
    range: std::ops::Range<usize>,
    mean: Vec<f64>,
    basis: Vec<f64>,
    e: usize,
    eigenvalues: Vec<f64>,
    residual: Option<f64>,
    trace: f64,
}

fn fit_stage_pcas(
    spec: &PipelineSpec,
    pass1: &[GramStats],
    ranges: &[std::ops::Range<usize>],
    say: &mut dyn FnMut(&str),
) -> Result<Vec<StagePca>> {
    pass1
        .iter()
        .zip(ranges)
        .enumerate()
        .map(|(i, (st, r))| {
            let (pca, cen) = fit_pca(spec, st, spec.stage_components(i))?;
            for w in &pca.warnings {
                say(&format!("warning: stage {i}: {w}"));
            }
            let residual = worst_residual(&pca);
            Ok(StagePca {
                range: r.clone(),
                mean: cen.mean,
                basis: pca.basis,
                e: pca.e_eff,
                residual,
                trace: pca.trace,
                eigenvalues: pca.eigenvalues,
            })
        })
        .collect()
}

/// The worst residual of an iterative PCA's kept pairs (none for the dense one).
fn worst_residual(pca: &Pca) -> Option<f64> {
    (!pca.residuals.is_empty()).then(|| pca.residuals.iter().copied().fold(0.0, f64::max))
}

/// PCA of `stats` by the method the pipeline asks: block subspace iteration on the
/// tiled Gram for `E ≪ D` (no dense `D × D`), the dense decomposition otherwise. Returns
/// the centred quantities too (with the dense covariance only when it was formed).
fn fit_pca(spec: &PipelineSpec, stats: &GramStats, components: Components) -> Result<(Pca, crate::stats::Centered)> {
    let dim = stats.dim();
    let top = match (spec.pca.method, components) {
        (PcaMethod::Subspace, Components::Fixed(e)) => Some(e),
        // Measured here (60k rows, D = 4096): subspace iteration needs 36–57 steps to a
        // 1e-6 residual and is slower than the dense decomposition, so `auto` takes it
        // only where the dense matrices would not fit.
        (PcaMethod::Auto, Components::Fixed(e))
            if e.saturating_mul(4) <= dim
                && memory_limit(spec).is_some_and(|l| solve_bytes(SolvePath::Eigen, dim, 0) > l) =>
        {
            Some(e)
        }
        _ => None,
    };
    match top {
        Some(e) => {
            let tol = spec.pca.tolerance.unwrap_or(1e-6);
            Ok((Pca::fit_top(stats, e, tol, spec.run.seed, spec.threads())?, stats.moments()))
        }
        None => {
            let c = stats.centered();
            Ok((Pca::fit(&c, components)?, c))
        }
    }
}

/// `p(x) = [Ū_iᵀ(z_i − z̄_i)]_i` for a chunk of features (`rows × ΣE_i`, f64).
#[allow(clippy::expect_used)] // Invariant: the fitted basis is len × E by construction (`Pca::fit*`).
fn project(pcas: &[StagePca], z: &[f32], rows: usize, dim: usize) -> Vec<f64> {
    let total: usize = pcas.iter().map(|p| p.e).sum();
    let mut out = vec![0.0; rows * total];
    let mut col = 0;
    for p in pcas {
        let len = p.range.len();
        let zc =
            ndarray::Array2::from_shape_fn((rows, len), |(r, i)| f64::from(z[r * dim + p.range.start + i]) - p.mean[i]);
        let u = ndarray::ArrayView2::from_shape((len, p.e), &p.basis).expect("basis shape");
        let q = zc.dot(&u);
        for r in 0..rows {
            for j in 0..p.e {
                out[r * total + col + j] = q[(r, j)];
            }
        }
        col += p.e;
    }
    out
}

/// Labeled-row mask and targets of a chunk.
fn targets(prep: &Prepared, spec: &PipelineSpec, ch: &Chunk, unlabeled_input: bool) -> Result<(Vec<bool>, Vec<f64>)> {
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

fn select_rows<T: Copy>(v: &[T], width: usize, mask: &[bool], keep: bool) -> Vec<T> {
    v.chunks_exact(width.max(1)).zip(mask).filter(|(_, &m)| m == keep).flat_map(|(r, _)| r.iter().copied()).collect()
}

fn data_err(ch: &Chunk) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::Numerical(m) => Error::data(ch.location.clone(), m),
        e => e,
    }
}

/// Writes checkpoints at unit boundaries.
struct Checkpointer<'a> {
    path: &'a Path,
    every: usize,
    since: usize,
    fingerprint: &'a str,
}

#[derive(Serialize, Deserialize)]
struct CheckpointMeta {
    kind: String,
    fingerprint: String,
    passes: u32,
    pass: u32,
    done: Vec<usize>,
}

impl Checkpointer<'_> {
    fn write(&self, state: &State, done: &[usize]) -> Result<()> {
        let meta = CheckpointMeta {
            kind: "checkpoint".into(),
            fingerprint: self.fingerprint.to_string(),
            passes: if matches!(state, State::Two { .. }) { 2 } else { 1 },
            pass: state.pass(),
            done: done.to_vec(),
        };
        let blocks = state.blocks();
        let named: Vec<(&str, &GramStats)> = blocks.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        let bytes = stats_to_bytes(&named, serde_json::to_value(&meta).unwrap_or_default())?;
        crate::atomic::write_bytes(self.path, &bytes)
    }
}

fn load_checkpoint(path: &Path, fingerprint: &str) -> Result<(State, Vec<usize>)> {
    let bad = |message: String| Error::BadModel { path: path.into(), message };
    // Callers resume only from a checkpoint that exists; the shared reader names any other fault.
    let (blocks, meta, _) = read_stats(path, false)?;
    let meta: CheckpointMeta = serde_json::from_value(meta).map_err(|e| bad(format!("bad checkpoint header: {e}")))?;
    if meta.kind != "checkpoint" {
        return Err(bad("not a checkpoint".into()));
    }
    if meta.fingerprint != fingerprint {
        return Err(
            bad("the checkpoint was written by a different pipeline or data; remove it to start afresh".into()),
        );
    }
    let state = State::from_blocks(meta.passes, blocks).map_err(bad)?;
    if state.pass() != meta.pass {
        return Err(bad("the checkpoint's pass does not match its statistics".into()));
    }
    Ok((state, meta.done))
}

/// Units (over all passes) this process completes before the test hook aborts it,
/// simulating a kill at an exact point.
fn abort_after() -> Option<usize> {
    std::env::var("SKETCHFIT_TEST_ABORT_AFTER_UNITS").ok().and_then(|v| v.parse().ok())
}

static UNITS_DONE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs the current pass over `units` (indices into `prep.work`), skipping `done`.
#[allow(clippy::too_many_arguments)]
fn run_pass(
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
    let gemm_before = crate::stats::gemm_seconds();
    let times = crate::pipeline::train::stream_mapped(&units, chunk_rows_for(spec, dim), &map, &mut |item| {
        let (ch, z, (mask, y)) = match item {
            Mapped::Chunk { chunk, features, extra, .. } => (chunk, features, extra),
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
        match state {
            State::One { labeled, unlabeled } => {
                if all_labeled {
                    labeled.add_with(z, &y, ch.rows, threads, gram).map_err(data_err(&ch))?;
                } else {
                    let zl = select_rows(z, dim, &mask, true);
                    labeled.add_with(&zl, &y, zl.len() / dim, threads, gram).map_err(data_err(&ch))?;
                    let zu = select_rows(z, dim, &mask, false);
                    let u = unlabeled
                        .as_mut()
                        .ok_or_else(|| Error::Internal("unlabeled rows without unlabeled statistics".into()))?;
                    u.add_with(&zu, &[], zu.len() / dim, threads, gram).map_err(data_err(&ch))?;
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
    let split = format!(
        "pass {} split: decode {:.1} s and map {:.1} s (their own threads); fold {:.1} s = Gram GEMM {gemm:.1} s + widening, sums and T {:.1} s; fold waited {:.1} s for input",
        state.pass(),
        t.decode,
        t.map,
        t.fold,
        (t.fold - gemm).max(0.0),
        t.wait
    );
    bar.finish_and_clear();
    Ok(split)
}

impl Dataset {
    fn features_ref(&self) -> &ResolvedFeatures {
        &self.features
    }
}

/// Accumulates every pass for `units` (all of them for a single run, a shard's share
/// for `accumulate`), with checkpoints as asked. Returns the final state and, in
/// two-pass mode, the per-stage PCAs.
fn accumulate(
    spec: &PipelineSpec,
    prep: &Prepared,
    units: &[usize],
    opts: &RunOptions,
    say: &mut dyn FnMut(&str),
) -> Result<(State, Option<Vec<StagePca>>)> {
    let (mut state, mut done) = match (&opts.checkpoint, opts.resume) {
        (Some(path), true) if path.exists() => {
            let (s, d) = load_checkpoint(path, &prep.fingerprint)?;
            say(&format!("resuming from {} (pass {}, {} row groups done)", path.display(), s.pass(), d.len()));
            (s, d)
        }
        (Some(path), true) => {
            say(&format!("no checkpoint at {}: starting afresh", path.display()));
            (State::new(spec, prep), Vec::new())
        }
        _ => (State::new(spec, prep), Vec::new()),
    };
    let mut ckpt = opts.checkpoint.as_deref().map(|path| Checkpointer {
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
    let rows = |s: &State| match s {
        State::One { labeled, unlabeled } => labeled.n + unlabeled.as_ref().map_or(0, |u| u.n),
        State::Two { pass1, .. } => pass1.first().map_or(0, |p| p.n),
    };
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

/// What the solve produced besides the weights: the rotated problem for validation.
struct Solved {
    ridge: Ridge,
    path: SolvePath,
    labeled: crate::stats::Centered,
    projections: Vec<(ProjectionInfo, Projection)>,
    eigenvalues: Vec<f64>,
    pcas: Option<Vec<StagePca>>,
    rows: u64,
    unlabeled_rows: u64,
    components: usize,
    components_requested: usize,
}

/// The solve path for this pipeline (math.md §13.7): the cheapest one that answers its
/// question, or the one `ridge.solver` names when it can.
fn solve_path(spec: &PipelineSpec, use_pca: bool, semi: bool) -> Result<SolvePath> {
    let lambda = spec.lambda()?;
    let fixed_positive = matches!(lambda, LambdaChoice::Fixed(l) if l > 0.0);
    let zero = matches!(lambda, LambdaChoice::Fixed(l) if l == 0.0);
    let direct = !use_pca && !semi;
    let refuse = |why: &str| Err(Error::config(spec.source.as_str(), "ridge.solver", why.to_string()));
    match spec.ridge.solver {
        SolvePath::Auto if !direct || zero => Ok(SolvePath::Eigen),
        SolvePath::Auto if fixed_positive => Ok(SolvePath::Cholesky),
        SolvePath::Auto => Ok(SolvePath::Tridiagonal),
        SolvePath::Eigen => Ok(SolvePath::Eigen),
        SolvePath::Cholesky if !direct => {
            refuse("\"cholesky\" solves ridge on all features; PCA and unlabeled rows need \"eigen\"")
        }
        SolvePath::Cholesky if !fixed_positive => refuse("\"cholesky\" needs a fixed ridge.lambda > 0"),
        SolvePath::Tridiagonal if !direct => {
            refuse("\"tridiagonal\" solves ridge on all features; PCA and unlabeled rows need \"eigen\"")
        }
        SolvePath::Tridiagonal if zero => refuse("λ = 0 is the pseudo-inverse, which needs \"eigen\""),
        path => Ok(path),
    }
}

/// Ridge on all features of `stats` by the Cholesky or the tridiagonal path, with the
/// spectrum when the path yields one.
fn direct_ridge(
    spec: &PipelineSpec,
    stats: &mut GramStats,
    path: SolvePath,
    say: &mut dyn FnMut(&str),
) -> Result<(Ridge, Vec<f64>)> {
    let threads = spec.threads();
    match (path, spec.lambda()?) {
        (SolvePath::Cholesky, LambdaChoice::Fixed(lambda)) => {
            let work = if solve_in_place(spec, stats) {
                say("solve: factoring in place on the statistics (a copy of the Gram would not fit)");
                std::mem::replace(&mut stats.gram, crate::stats::TriGram::zeros(0))
            } else {
                stats.gram.clone()
            };
            let (weights, bias) = crate::chol::ridge_fixed(stats, work, lambda, threads)?;
            Ok((Ridge::Solved { weights, bias }, Vec::new()))
        }
        (SolvePath::Tridiagonal, _) => {
            let form = crate::tridiag::Tridiagonal::new(stats, threads)?;
            let max_g = stats.gram.diagonal().into_iter().fold(0.0, f64::max);
            let lmax = form.sigma.first().copied().unwrap_or(0.0);
            let tau = stats.dim() as f64 * f64::EPSILON * lmax.max(max_g);
            let problem = form.problem(tau);
            let ev = problem.sigma.clone();
            let rank = ev.iter().filter(|&&v| v > tau).count();
            if rank < ev.len() {
                say(&format!("note: the covariance has numerical rank {rank} of {}", ev.len()));
            }
            Ok((Ridge::Tridiagonal { form: Box::new(form), problem }, ev))
        }
        (p, l) => Err(Error::Internal(format!("solve path {} chosen for λ {l:?}", p.name()))),
    }
}

fn solve_state(
    spec: &PipelineSpec,
    state: &mut State,
    pcas: Option<Vec<StagePca>>,
    say: &mut dyn FnMut(&str),
) -> Result<Solved> {
    match state {
        State::One { labeled, unlabeled } => {
            if labeled.n < 2 {
                return Err(Error::data(
                    Location::default(),
                    format!("{} labeled row(s); at least 2 are needed", labeled.n),
                ));
            }
            let components = spec.components();
            let use_pca = components != Components::All;
            let semi = unlabeled.as_ref().is_some_and(|u| u.n > 0);
            let path = solve_path(spec, use_pca, semi)?;
            if path != SolvePath::Eigen {
                let cl = labeled.moments();
                let (ridge, eigenvalues) = direct_ridge(spec, labeled, path, say)?;
                let dim = cl.mean.len();
                return Ok(Solved {
                    ridge,
                    path,
                    rows: cl.n,
                    labeled: cl,
                    projections: Vec::new(),
                    eigenvalues,
                    pcas: None,
                    unlabeled_rows: 0,
                    components: dim,
                    components_requested: dim,
                });
            }
            let (pca, cl, ca, unl) = match unlabeled {
                Some(u) if u.n > 0 => {
                    let mut all = labeled.without_targets();
                    all.merge(u).map_err(|e| Error::Internal(e.to_string()))?;
                    let (pca, ca) = fit_pca(spec, &all, components)?;
                    // S = Ūᵀ C_L Ū needs the labeled covariance itself.
                    (pca, labeled.centered(), Some(ca), u.n)
                }
                _ => {
                    let (pca, cl) = fit_pca(spec, labeled, components)?;
                    (pca, cl, None, 0)
                }
            };
            if !pca.residuals.is_empty() {
                let worst = pca.residuals.iter().copied().fold(0.0, f64::max);
                say(&format!(
                    "pca: top {} pairs by subspace iteration ({} iterations), worst residual {worst:.2e}",
                    pca.e_eff, pca.iterations
                ));
            }
            for w in &pca.warnings {
                say(&format!("warning: {w}"));
            }
            let problem = RotatedProblem::new(&pca, &cl, ca.is_none(), use_pca)?;
            let mean_a = ca.as_ref().map_or(cl.mean.clone(), |c| c.mean.clone());
            let dim = cl.mean.len();
            let projections = if use_pca {
                vec![(
                    ProjectionInfo {
                        start: 0,
                        end: dim,
                        components: pca.e_eff,
                        residual: worst_residual(&pca),
                        variance_total: Some(pca.trace),
                    },
                    Projection { mean: mean_a, basis: pca.basis.clone(), eigenvalues: pca.eigenvalues.clone() },
                )]
            } else {
                Vec::new()
            };
            Ok(Solved {
                ridge: Ridge::Eigen(problem),
                path,
                rows: cl.n,
                labeled: cl,
                projections,
                eigenvalues: pca.eigenvalues.clone(),
                pcas: None,
                unlabeled_rows: unl,
                components: if use_pca { pca.e_eff } else { dim },
                components_requested: if use_pca { pca.e_requested } else { dim },
            })
        }
        State::Two { pass1, pass2 } => {
            let p2 = pass2.as_mut().ok_or_else(|| Error::Internal("pass two did not run".into()))?;
            if p2.n < 2 {
                return Err(Error::data(
                    Location::default(),
                    format!("{} labeled row(s); at least 2 are needed", p2.n),
                ));
            }
            let pcas = pcas.ok_or_else(|| Error::Numerical("no pass-one projections".into()))?;
            let path = solve_path(spec, false, false)?;
            let (ridge, cl) = if path == SolvePath::Eigen {
                let cl = p2.centered();
                let full = Pca::fit(&cl, Components::All)?;
                (Ridge::Eigen(RotatedProblem::new(&full, &cl, true, false)?), cl)
            } else {
                let moments = p2.moments();
                (direct_ridge(spec, p2, path, say)?.0, moments)
            };
            let projections = pcas
                .iter()
                .map(|p| {
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
                })
                .collect();
            let e: usize = pcas.iter().map(|p| p.e).sum();
            Ok(Solved {
                ridge,
                path,
                rows: cl.n,
                labeled: cl,
                projections,
                eigenvalues: pcas[0].eigenvalues.clone(),
                unlabeled_rows: pass1.first().map_or(0, |s| s.n) - p2.n,
                components: e,
                components_requested: e,
                pcas: Some(pcas),
            })
        }
    }
}

/// Folds the solved space's `(W_p, b_p)` into `W` (D × c) and `b` over the features.
fn fold(solved: &Solved, wp: Vec<f64>, bp: Vec<f64>, dim: usize) -> (Vec<f64>, Vec<f64>) {
    let c = solved.ridge.outputs();
    match &solved.pcas {
        None => (wp, bp),
        Some(pcas) => {
            // W_i = Ū_i w_i, b = b_p − Σ W_iᵀ z̄_i (math.md §13.5).
            let mut w = vec![0.0; dim * c];
            let mut b = bp;
            let mut row = 0;
            for p in pcas {
                for (i, zi) in p.range.clone().zip(&p.mean) {
                    let li = i - p.range.start;
                    for k in 0..c {
                        let v: f64 = (0..p.e).map(|j| p.basis[li * p.e + j] * wp[(row + j) * c + k]).sum();
                        w[i * c + k] = v;
                        b[k] -= v * zi;
                    }
                }
                row += p.e;
            }
            (w, b)
        }
    }
}

/// The solved space's features `φ(x) − mean_L` of a chunk, where φ is `z` (one pass) or
/// the projection (two passes): every λ's validation scores are linear in them.
fn centred_features(solved: &Solved, z: &[f32], rows: usize, dim: usize) -> (Vec<f64>, Vec<f64>, usize) {
    let (phi, width): (Vec<f64>, usize) = match &solved.pcas {
        None => (z[..rows * dim].iter().map(|&v| f64::from(v)).collect(), dim),
        Some(p) => {
            let e = p.iter().map(|x| x.e).sum();
            (project(p, z, rows, dim), e)
        }
    };
    let mean = &solved.labeled.mean;
    let centred = phi.chunks_exact(width.max(1)).flat_map(|r| r.iter().zip(mean).map(|(v, m)| v - m)).collect();
    (phi, centred, width)
}

#[allow(clippy::expect_used)] // Invariant: `q` is rows × qw by construction just above.
fn validate(
    spec: &PipelineSpec,
    prep_pipeline: &FeaturePipeline,
    classes: Option<(&Classes, &OutputCode)>,
    solved: &Solved,
    mut refit: Option<&mut GramStats>,
    say: &mut dyn FnMut(&str),
) -> Result<(ValidationTable, Vec<f64>)> {
    let ds = Dataset::open(&spec.data.validation, ColumnsFor::labeled(spec))?;
    let grid = solved.ridge.grid();
    let (c, dim) = (solved.ridge.outputs(), prep_pipeline.output_dim());
    let ymean = &solved.labeled.ymean;
    let mut sq = vec![vec![0.0; c]; grid.len()];
    let mut right = vec![0u64; grid.len()];
    let mut rows = 0u64;
    let threads = spec.threads();
    let mut z = Vec::new();
    // Every λ's weights side by side (`width × (grid · c)`), so one product per chunk
    // scores the whole grid; the centred features need no intercept but ȳ.
    let sets: Vec<Vec<f64>> = grid.iter().map(|&l| vec![l; c]).collect();
    let per_lambda = solved.ridge.weights(&sets, &solved.labeled);
    let width = per_lambda.first().map_or(0, |(w, _)| w.len() / c.max(1));
    let cols = grid.len() * c;
    let all_w = ndarray::Array2::from_shape_fn((width, cols), |(i, j)| per_lambda[j / c].0[i * c + j % c]);
    drop(per_lambda);
    crate::pipeline::train::stream(&ds, &ds.units(), spec.run.chunk_rows, &mut |ch: Chunk| {
        check_nonnegative(prep_pipeline, &ch, &ds.features)?;
        z.resize(ch.rows * dim, 0.0);
        prep_pipeline.map_chunk(&ch.x, ch.rows, &mut z, threads);
        let (phi, q, qw) = centred_features(solved, &z, ch.rows, dim);
        let (truth, y): (Vec<u32>, Vec<f64>) = match classes {
            Some((cl, code)) => {
                let loc = ch.location.clone().column(spec.data.label.clone().unwrap_or_default());
                let labels =
                    ch.labels.as_ref().ok_or_else(|| Error::Internal("validation read no label column".into()))?;
                let t = cl.encode(labels, &loc)?;
                let mut y = Vec::new();
                code.targets(&t, &mut y);
                (t, y)
            }
            None => (Vec::new(), ch.targets.clone()),
        };
        if let Some(st) = refit.as_deref_mut() {
            // The refit's statistics, in the space the training statistics are in.
            match &solved.pcas {
                None => st.add_with(&z[..ch.rows * dim], &y, ch.rows, threads, spec.run.gram)?,
                Some(_) => st.add_f64(&phi, &y, ch.rows, threads)?,
            }
        }
        let qv = ndarray::ArrayView2::from_shape((ch.rows, qw), &q).expect("chunk features match the solved width");
        let f_all = qv.dot(&all_w);
        for li in 0..grid.len() {
            let f = f_all.slice_axis(ndarray::Axis(1), ndarray::Slice::from(li * c..(li + 1) * c));
            let mut scores = vec![0.0; ch.rows * c];
            for r in 0..ch.rows {
                for j in 0..c {
                    scores[r * c + j] = f[(r, j)] + ymean[j];
                    sq[li][j] += (scores[r * c + j] - y[r * c + j]).powi(2);
                }
            }
            if let Some((_, code)) = classes {
                right[li] +=
                    code.decode(&scores).iter().zip(&truth).filter(|(p, t)| **p == **t as usize).count() as u64;
            }
        }
        rows += ch.rows as u64;
        Ok(())
    })?;
    let n = rows.max(1) as f64;
    let rmse: Vec<Vec<f64>> = sq.iter().map(|v| v.iter().map(|s| (s / n).sqrt()).collect()).collect();
    let metric = spec.metric();
    let score: Vec<f64> = match metric {
        Metric::Accuracy => right.iter().map(|&r| r as f64 / n).collect(),
        Metric::Rmse => rmse.iter().map(|v| v.iter().sum::<f64>() / c as f64).collect(),
    };
    // Best score; ties go to the larger λ (more regularisation).
    let better = |a: f64, b: f64| match metric {
        Metric::Accuracy => a >= b,
        Metric::Rmse => a <= b,
    };
    let mut best = 0;
    for i in 1..grid.len() {
        if better(score[i], score[best]) {
            best = i;
        }
    }
    let chosen: Vec<f64> = if spec.ridge.per_output {
        (0..c)
            .map(|j| {
                let mut b = 0;
                for i in 1..grid.len() {
                    if rmse[i][j] <= rmse[b][j] {
                        b = i;
                    }
                }
                grid[b]
            })
            .collect()
    } else {
        vec![grid[best]; c]
    };
    say(&format!(
        "ridge: λ = {} by validation on {rows} rows ({} {:.6})",
        lambda_text(&chosen),
        if metric == Metric::Accuracy { "accuracy" } else { "mean RMSE" },
        score[best]
    ));
    let table = ValidationTable {
        metric: if metric == Metric::Accuracy { "accuracy".into() } else { "rmse".into() },
        rows,
        grid,
        score,
        rmse_per_output: rmse,
        chosen: chosen.clone(),
        refit_rows: None,
    };
    Ok((table, chosen))
}

/// Adds the validation rows' statistics to the labeled (one pass) or pass-two statistics.
fn refit_state(state: &mut State, held_out: &GramStats) -> Result<()> {
    let target = match state {
        State::One { labeled, .. } => labeled,
        State::Two { pass2: Some(p2), .. } => p2,
        State::Two { pass2: None, .. } => return Err(Error::Internal("refit before pass two".into())),
    };
    target.merge(held_out).map_err(|e| Error::Internal(format!("validation statistics: {e}")))
}

/// Solves the accumulated state into a model (λ by GCV, fixed, or validation).
#[allow(clippy::too_many_arguments)]
fn finish(
    spec: &PipelineSpec,
    pipeline: FeaturePipeline,
    stages: Vec<StageSpec>,
    classes: Option<Classes>,
    code: Option<OutputCode>,
    features: ResolvedFeatures,
    state: &mut State,
    pcas: Option<Vec<StagePca>>,
    say: &mut dyn FnMut(&str),
) -> Result<Model> {
    let start = std::time::Instant::now();
    let mut solved = solve_state(spec, state, pcas.clone(), say)?;
    let dim = pipeline.output_dim();
    let lambda = spec.lambda()?;
    let use_validation = !spec.data.validation.is_empty() && !matches!(lambda, LambdaChoice::Fixed(_));
    let c = solved.ridge.outputs();
    let gcv = solved.ridge.gcv(&solved.labeled);
    let mut lambdas =
        lambda.pick(gcv.as_ref(), c).ok_or_else(|| Error::Internal("GCV asked of a path without a spectrum".into()))?;
    let mut validation = None;
    if use_validation {
        let target = match &*state {
            State::One { labeled, .. } => Some(labeled),
            State::Two { pass2, .. } => pass2.as_ref(),
        };
        let mut held_out = match target {
            Some(t) if spec.ridge.refit => Some(GramStats::new(t.shift.clone(), t.c)),
            _ => None,
        };
        let coded = classes.as_ref().zip(code.as_ref());
        let (mut table, chosen) = validate(spec, &pipeline, coded, &solved, held_out.as_mut(), say)?;
        lambdas = chosen;
        if let Some(held_out) = held_out {
            let trained = solved.rows;
            refit_state(state, &held_out)?;
            // The same problem on more rows at the λ just chosen: a shared λ without PCA
            // is one Cholesky factorisation.
            let mut at = spec.clone();
            at.data.validation.clear();
            if lambdas.iter().all(|&l| l == lambdas[0]) && lambdas[0] > 0.0 {
                at.ridge.lambda = LambdaValue::Number(lambdas[0]);
                at.ridge.per_output = false;
            }
            solved = solve_state(&at, state, pcas, say)?;
            say(&format!(
                "ridge: refit at λ = {} on {} rows ({trained} training + {} validation)",
                lambda_text(&lambdas),
                solved.rows,
                held_out.n
            ));
            table.refit_rows = Some(solved.rows);
        }
        validation = Some(table);
    } else if let Some(g) = &gcv {
        let i = g.chosen_shared;
        say(&format!(
            "ridge: λ = {} by GCV (grid {:.3e} … {:.3e}, GCV {:.6e}, df {:.1})",
            lambda_text(&lambdas),
            g.grid[0],
            g.grid[g.grid.len() - 1],
            g.shared[i],
            g.df[i]
        ));
    } else {
        say(&format!("ridge: λ = {:.4e} (fixed)", lambdas[0]));
    }
    let (wp, bp) = solved.ridge.weights(std::slice::from_ref(&lambdas), &solved.labeled).remove(0);
    let (weights, bias) = fold(&solved, wp, bp, dim);
    say(&format!("solve: {:.1} s ({} path)", start.elapsed().as_secs_f64(), solved.path.name()));
    let (format, version, written_by) = header_base();
    let (infos, projs): (Vec<ProjectionInfo>, Vec<Projection>) = solved.projections.iter().cloned().unzip();
    let mean = match state {
        State::One { .. } => solved.labeled.mean.clone(),
        State::Two { pass1, .. } => pass1.iter().flat_map(|s| s.moments().mean).collect(),
    };
    let header = ModelHeader {
        format,
        version,
        written_by,
        task: spec.task,
        classes,
        label: spec.data.label.clone(),
        targets: spec.data.targets.clone(),
        features,
        stages,
        seed: spec.run.seed,
        dim,
        outputs: c,
        components: solved.components,
        components_requested: solved.components_requested,
        lambdas: lambdas.clone(),
        gcv,
        rows: solved.rows,
        pipeline: serde_json::to_value(spec).unwrap_or(serde_json::Value::Null),
        checksum: String::new(),
        passes: spec.passes,
        unlabeled_rows: solved.unlabeled_rows,
        validation,
        projections: infos,
        solver: Some(solved.path.name().to_string()),
        code: code.as_ref().and_then(OutputCode::rows),
    };
    Ok(Model {
        header,
        pipeline,
        weights,
        bias,
        mean,
        eigenvalues: solved.eigenvalues,
        projections: projs,
        origin: None,
    })
}

/// Trains in one process: prepare, every pass over every unit (with checkpoints and
/// resume as asked), solve.
pub fn train(spec: &PipelineSpec, opts: &RunOptions, say: &mut dyn FnMut(&str)) -> Result<Model> {
    let prep = prepare(spec, say)?;
    train_prepared(spec, opts, prep, say)
}

/// [`train`] from a [`Prepared`] run (see [`prepare_inputs`] for batches in memory).
pub fn train_prepared(
    spec: &PipelineSpec,
    opts: &RunOptions,
    prep: Prepared,
    say: &mut dyn FnMut(&str),
) -> Result<Model> {
    // The inputs are open (and registered) now: refuse a bad output before the pass.
    for out in opts.output.iter().chain(&opts.checkpoint) {
        crate::atomic::check_output(out)?;
    }
    let units: Vec<usize> = (0..prep.work.len()).collect();
    let (mut state, pcas) = accumulate(spec, &prep, &units, opts, say)?;
    if let Some(path) = &opts.checkpoint {
        // An in-place factorisation consumes the Gram: keep the pass on disk first, so a
        // failed or refused solve costs no pass (`--resume` solves again from it).
        let last = match &state {
            State::One { labeled, unlabeled: None } => Some(labeled),
            State::Two { pass2: Some(p2), .. } => Some(p2),
            _ => None,
        };
        if last.is_some_and(|st| {
            solve_path(spec, false, false).ok() == Some(SolvePath::Cholesky) && solve_in_place(spec, st)
        }) {
            let c = Checkpointer { path, every: 0, since: 0, fingerprint: &prep.fingerprint };
            c.write(&state, &units)?;
            say(&format!("statistics written to {} before the in-place solve", path.display()));
        }
    }
    let Prepared { pipeline, stages, classes, code, labeled, .. } = prep;
    finish(spec, pipeline, stages, classes, code, labeled.features, &mut state, pcas, say)
}

/// A shard's manifest, stored in its statistics file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PartMeta {
    kind: String,
    fingerprint: String,
    shard: usize,
    shards: usize,
    units: Vec<(bool, String, usize)>,
    classes: Option<Classes>,
    stages: Vec<StageSpec>,
    features: ResolvedFeatures,
    /// Which pass of a two-pass pipeline the part holds (1 for one-pass pipelines).
    #[serde(default = "pass_one")]
    pass: u32,
    /// For pass-two parts: the checksum of the merged pass-one file they projected with.
    #[serde(default)]
    pass1_checksum: Option<String>,
    /// The seed the maps were drawn with: `solve` rebuilds them from it, never from its
    /// own command line.
    #[serde(default)]
    seed: Option<u64>,
    /// The pipeline keys that define the features, as accumulated (see [`map_keys`]).
    #[serde(default)]
    map_keys: Option<serde_json::Value>,
    /// The output code's rows (ECOC), as the targets were encoded.
    #[serde(default)]
    code: Option<Vec<Vec<i8>>>,
}

impl PartMeta {
    /// The code the part's targets were encoded with.
    fn output_code(&self) -> Result<Option<OutputCode>> {
        match (&self.classes, &self.code) {
            (None, _) => Ok(None),
            (Some(k), None) => Ok(Some(OutputCode::OneVsAll { classes: k.len() })),
            (Some(_), Some(rows)) => {
                OutputCode::from_rows(rows).map(Some).map_err(|e| Error::Internal(format!("a part's output code: {e}")))
            }
        }
    }
}

/// The keys of a pipeline that decide which features the statistics hold: a solve must
/// see the same ones as the accumulation did.
fn map_keys(spec: &PipelineSpec) -> serde_json::Value {
    serde_json::json!({
        "task": spec.task, "passes": spec.passes, "features": spec.data.features,
        "feature_list": spec.data.feature_list, "label": spec.data.label, "targets": spec.data.targets,
        "stages": spec.stages, "seed": spec.run.seed, "sample_rows": spec.run.sample_rows,
        "shift": spec.run.shift,
        // In two passes the per-stage PCA decides what pass two accumulated.
        "pca": if spec.passes == 2 { serde_json::to_value(&spec.pca).unwrap_or_default() } else { serde_json::Value::Null },
    })
}

/// Refuses to solve parts with a pipeline whose features differ from theirs, naming the
/// first key that differs.
fn check_parts_match(spec: &PipelineSpec, part: &Path, meta: &PartMeta) -> Result<()> {
    let file = spec.source.as_str();
    let (Some(seed), Some(keys)) = (meta.seed, &meta.map_keys) else {
        return Err(Error::BadModel {
            path: part.to_path_buf(),
            message: "written by an older sketchfit that did not record its seed and stages; accumulate it again"
                .into(),
        });
    };
    if seed != spec.run.seed {
        return Err(Error::config(
            file,
            "run.seed",
            format!(
                "the parts were accumulated with run.seed = {seed}, this pipeline has {}; their maps are drawn from their seed, so solve with the pipeline they were accumulated with",
                spec.run.seed
            ),
        ));
    }
    let now = map_keys(spec);
    if let (Some(a), Some(b)) = (keys.as_object(), now.as_object()) {
        for (k, v) in a {
            if b.get(k) != Some(v) {
                return Err(Error::config(
                    file,
                    k.as_str(),
                    format!(
                        "differs from the parts' ({}: {v}); solve with the pipeline they were accumulated with",
                        part.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn pass_one() -> u32 {
    1
}

/// A statistics file: its named blocks, its meta value and its bytes.
type StatsFile = (Vec<(String, GramStats)>, serde_json::Value, Vec<u8>);

/// `input`: a file this run only reads (parts), as opposed to its own checkpoint.
fn read_stats(path: &Path, input: bool) -> Result<StatsFile> {
    let bad = |message: String| Error::BadModel { path: path.into(), message };
    let bytes = if input { crate::atomic::read_input(path)? } else { crate::atomic::read_own(path)? };
    let (blocks, meta) = stats_from_bytes(&bytes).map_err(|e| bad(e.to_string()))?;
    Ok((blocks, meta, bytes))
}

/// The merged pass-one statistics of a sharded two-pass run.
fn load_pass1(path: &Path, fingerprint: Option<&str>) -> Result<(Vec<GramStats>, PartMeta, String)> {
    let bad = |message: String| Error::BadModel { path: path.into(), message };
    let (blocks, meta, bytes) = read_stats(path, true)?;
    let meta: PartMeta =
        serde_json::from_value(meta).map_err(|e| bad(format!("not merged pass-one statistics: {e}")))?;
    if meta.kind != "pass1" {
        return Err(bad("not merged pass-one statistics (made by `solve` from pass-one parts)".into()));
    }
    if fingerprint.is_some_and(|f| f != meta.fingerprint) {
        return Err(bad("written by a different pipeline, data or seed".into()));
    }
    let State::Two { pass1, .. } = State::from_blocks(2, blocks).map_err(bad)? else {
        return Err(bad("no pass-one statistics".into()));
    };
    Ok((pass1, meta, crate::stats::checksum([bytes.as_slice()])))
}

/// Parses `i/N`.
pub fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let bad = || Error::config("command line", "--shard", format!("'{s}' is not i/N with 0 ≤ i < N"));
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// `accumulate --shard i/N`: the statistics of every N-th row group (in the order of
/// the inputs), written to `out` with the shard's identity and row groups.
pub fn accumulate_shard(
    spec: &PipelineSpec,
    shard: (usize, usize),
    out: &Path,
    opts: &RunOptions,
    pass1: Option<&Path>,
    say: &mut dyn FnMut(&str),
) -> Result<()> {
    if spec.passes == 1 && pass1.is_some() {
        return Err(Error::config("command line", "--pass1", "only two-pass pipelines have a pass one"));
    }
    let prep = prepare(spec, say)?;
    for out in std::iter::once(out).chain(opts.checkpoint.as_deref()) {
        crate::atomic::check_output(out)?;
    }
    let (i, n) = shard;
    let units: Vec<usize> = (0..prep.work.len()).filter(|u| u % n == i).collect();
    say(&format!("shard {i}/{n}: {} of {} row groups", units.len(), prep.work.len()));
    let (state, pass, pass1_checksum) = match (spec.passes, pass1) {
        (1, _) => (accumulate(spec, &prep, &units, opts, say)?.0, 1, None),
        (_, None) => {
            // Pass one of a sharded two-pass run: the per-stage statistics only.
            let mut state = State::new(spec, &prep);
            run_pass(spec, &prep, &mut state, &units, &mut Vec::new(), None, &mut None, opts.progress)?;
            (state, 1, None)
        }
        (_, Some(path)) => {
            let (p1, _, sum) = load_pass1(path, Some(&prep.fingerprint))?;
            let pcas = fit_stage_pcas(spec, &p1, &stage_ranges(&prep.pipeline), say)?;
            let e: usize = pcas.iter().map(|p| p.e).sum();
            let mut state = State::Two { pass1: p1, pass2: Some(GramStats::new(vec![0.0; e], prep.c)) };
            run_pass(spec, &prep, &mut state, &units, &mut Vec::new(), Some(&pcas), &mut None, opts.progress)?;
            (state, 2, Some(sum))
        }
    };
    let meta = PartMeta {
        kind: "shard".into(),
        fingerprint: prep.fingerprint.clone(),
        shard: i,
        shards: n,
        units: units.iter().map(|&u| prep.unit_id(&prep.work[u])).collect(),
        classes: prep.classes.clone(),
        stages: prep.stages.clone(),
        features: prep.labeled.features.clone(),
        pass,
        pass1_checksum,
        seed: Some(spec.run.seed),
        map_keys: Some(map_keys(spec)),
        code: prep.code.as_ref().and_then(OutputCode::rows),
    };
    let blocks = state.blocks();
    // A pass-two part carries only its own statistics; pass one is in the merged file.
    let named: Vec<(&str, &GramStats)> =
        blocks.iter().filter(|(n, _)| pass == 1 || n == "pass2").map(|(n, s)| (n.as_str(), *s)).collect();
    let bytes = stats_to_bytes(&named, serde_json::to_value(&meta).unwrap_or_default())?;
    crate::atomic::write_bytes(out, &bytes)
}

/// What `solve` produced.
#[derive(Debug)]
pub enum SolveOutcome {
    /// The model.
    Model(Box<Model>),
    /// Pass one of a sharded two-pass run, merged and written to the output.
    Pass1Merged,
}

/// `solve PIPELINE PART…`: checks that the parts are the shards of one run (same
/// fingerprint, each shard once, disjoint row groups, none missing unless allowed),
/// merges them in shard order and solves. For a sharded two-pass run, pass-one parts
/// merge into a file for `accumulate --pass1` (written to `out`), and pass-two parts
/// solve with that file given as `pass1`.
pub fn solve_parts(
    spec: &PipelineSpec,
    parts: &[PathBuf],
    allow_partial: bool,
    pass1: Option<&Path>,
    out: &Path,
    say: &mut dyn FnMut(&str),
) -> Result<SolveOutcome> {
    if parts.is_empty() {
        return Err(Error::config("command line", "PART", "no statistics files given"));
    }
    let mut loaded: Vec<(PathBuf, PartMeta, State)> = Vec::new();
    for path in parts {
        let bad = |message: String| Error::BadModel { path: path.clone(), message };
        let (blocks, meta, _) = read_stats(path, true)?;
        let meta: PartMeta = serde_json::from_value(meta).map_err(|e| bad(format!("not a shard's statistics: {e}")))?;
        if meta.kind != "shard" {
            return Err(bad("not a shard's statistics".into()));
        }
        let state = if meta.pass == 2 {
            let (_, p2) =
                blocks.into_iter().find(|(n, _)| n == "pass2").ok_or_else(|| bad("no pass-two statistics".into()))?;
            State::Two { pass1: Vec::new(), pass2: Some(p2) }
        } else {
            State::from_blocks(spec.passes, blocks).map_err(bad)?
        };
        loaded.push((path.clone(), meta, state));
    }
    crate::atomic::check_output(out)?;
    let first = loaded[0].1.clone();
    let mut seen_units = BTreeSet::new();
    let mut seen_shards = BTreeSet::new();
    for (path, m, _) in &loaded {
        let bad = |message: String| Error::BadModel { path: path.clone(), message };
        if m.fingerprint != first.fingerprint {
            return Err(bad(format!("written by a different pipeline, data or seed than {}", loaded[0].0.display())));
        }
        if m.pass != first.pass {
            return Err(bad(format!("a pass-{} part among pass-{} parts", m.pass, first.pass)));
        }
        if m.shards != first.shards {
            return Err(bad(format!(
                "shard {}/{} does not belong to a run of {} shards",
                m.shard, m.shards, first.shards
            )));
        }
        if !seen_shards.insert(m.shard) {
            return Err(bad(format!(
                "shard {}/{} is given twice; merging it again would count its rows twice",
                m.shard, m.shards
            )));
        }
        for u in &m.units {
            if !seen_units.insert(u.clone()) {
                return Err(bad(format!("row group {} of {} is also in another part", u.2, u.1)));
            }
        }
    }
    // The parts agree with each other; now they must agree with this pipeline.
    check_parts_match(spec, &loaded[0].0, &first)?;
    let missing: Vec<usize> = (0..first.shards).filter(|s| !seen_shards.contains(s)).collect();
    if !missing.is_empty() && !allow_partial {
        return Err(Error::config(
            "command line",
            "PART",
            format!("shards {missing:?} of {} are missing (pass --allow-partial to solve without them)", first.shards),
        ));
    }
    loaded.sort_by_key(|(_, m, _)| m.shard);
    // Take the parts' statistics rather than copy them, and free each once merged: at
    // large D a part is gigabytes.
    let empty = || State::Two { pass1: Vec::new(), pass2: None };
    let mut state = std::mem::replace(&mut loaded[0].2, empty());
    for (path, _, s) in loaded[1..].iter_mut() {
        state.merge(s).map_err(|message| Error::BadModel { path: path.clone(), message })?;
        *s = empty();
    }
    say(&format!("merged {} shard(s) of {}", loaded.len(), first.shards));
    if let Some(i) = first.stages.iter().position(StageSpec::needs_fit) {
        return Err(Error::BadModel {
            path: loaded[0].0.clone(),
            message: format!("stage {i} is not fitted in the part's header; accumulate the parts again"),
        });
    }
    let pipeline = FeaturePipeline::build(&first.stages, first.features.dim, spec.run.seed)?;
    match (spec.passes, first.pass) {
        (2, 1) => {
            let meta = PartMeta { kind: "pass1".into(), shard: 0, shards: 1, units: Vec::new(), ..first.clone() };
            let blocks = state.blocks();
            let named: Vec<(&str, &GramStats)> = blocks.iter().map(|(n, s)| (n.as_str(), *s)).collect();
            let bytes = stats_to_bytes(&named, serde_json::to_value(&meta).unwrap_or_default())?;
            crate::atomic::write_bytes(out, &bytes)?;
            Ok(SolveOutcome::Pass1Merged)
        }
        (2, _) => {
            let path = pass1.ok_or_else(|| {
                Error::config("command line", "--pass1", "pass-two parts solve with the merged pass-one file (--pass1)")
            })?;
            let (p1, _, sum) = load_pass1(path, Some(&first.fingerprint))?;
            for (part, m, _) in &loaded {
                if m.pass1_checksum.as_deref() != Some(sum.as_str()) {
                    return Err(Error::BadModel {
                        path: part.clone(),
                        message: format!("projected with another pass-one file than {}", path.display()),
                    });
                }
            }
            let State::Two { pass2, .. } = state else {
                return Err(Error::BadModel {
                    path: loaded[0].0.clone(),
                    message: "a pass-two part without pass-two statistics".into(),
                });
            };
            let pcas = fit_stage_pcas(spec, &p1, &stage_ranges(&pipeline), say)?;
            let mut state = State::Two { pass1: p1, pass2 };
            finish(
                spec,
                pipeline,
                first.stages.clone(),
                first.classes.clone(),
                first.output_code()?,
                first.features.clone(),
                &mut state,
                Some(pcas),
                say,
            )
            .map(|m| SolveOutcome::Model(Box::new(m)))
        }
        _ => finish(
            spec,
            pipeline,
            first.stages.clone(),
            first.classes.clone(),
            first.output_code()?,
            first.features.clone(),
            &mut state,
            None,
            say,
        )
        .map(|m| SolveOutcome::Model(Box::new(m))),
    }
}
