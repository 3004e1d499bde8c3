//! Planning a run before its first row: open and check the inputs, scan the classes,
//! choose the output code, draw the pre-pass sample, fit the stages and the shift, and
//! state (and check) the memory the run and its solve path need.

use std::path::PathBuf;

use crate::codes::OutputCode;
use crate::error::{Error, Location, Result};
use crate::pipeline::paths::memory_limit;
use crate::pipeline::paths::solve_bytes;
use crate::pipeline::paths::solve_path;
use crate::pipeline::spec::{Codes, PipelineSpec, ShiftMode, Task};
use crate::pipeline::stream::{sample_mean, Reservoir};
use crate::rng::StageRng;
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::solve::{Components, LambdaChoice, SolvePath};
use crate::source::{Chunk, Classes, Dataset, ResolvedFeatures, Unit};
use crate::stats::GramStats;

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
    /// The run keeps its mapped rows and solves in the dual (`paths::takes_dual`).
    pub dual: bool,
    /// Kernel candidates after the first (`stages.N.candidates`; the first is the
    /// prepared map itself): each one's pipeline spec, fitted stages, map and shift.
    pub alternatives: Vec<Alternative>,
}

/// One more kernel candidate of a run, fitted on the same pre-pass sample.
#[derive(Debug)]
pub struct Alternative {
    /// The candidate's own pipeline (no candidates).
    pub spec: PipelineSpec,
    /// Its fitted stages.
    pub stages: Vec<StageSpec>,
    /// Its map.
    pub pipeline: FeaturePipeline,
    /// Its accumulator shift.
    pub shift: Vec<f64>,
}

pub(crate) fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

impl Prepared {
    #[allow(clippy::expect_used)] // Invariant: units are marked unlabeled only when unlabeled inputs were opened.
    pub(crate) fn dataset(&self, unlabeled: bool) -> &Dataset {
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
    pub(crate) fn unit_id(&self, w: &WorkUnit) -> (bool, String, usize) {
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
            same_features(&labeled, &u, "unlabeled")?;
            Some(u)
        }
    };
    for (files, what) in [(&spec.data.test, "test"), (&spec.data.validation, "validation")] {
        if !files.is_empty() {
            same_features(&labeled, &Dataset::open(files, ColumnsFor::labeled(spec))?, what)?;
        }
    }
    let classes = match spec.task {
        Task::Classification => {
            let classes = match &spec.data.classes {
                Some(given) => given.clone(),
                None => labeled.scan_classes()?,
            };
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

    let mut check = negative_check(spec, labeled.features.clone());
    let sample = prepass_sample(&labeled, unlabeled.as_ref(), &work, spec, &mut check)?;
    // With candidates, the prepared map is the first candidate's; the others follow it.
    let mut candidates = spec.candidate_specs()?.into_iter();
    let first = candidates.next().ok_or_else(|| Error::Internal("no candidate pipelines".into()))?;
    // Stage errors found only with the data (a down_dim at or above the map's width)
    // name the pipeline file and, with candidates, the candidate.
    let candidate = |j: usize| {
        spec.candidates.as_ref().and_then(|c| c.values.get(j).map(|v| format!("stages.{}.{} = {v}", c.stage, c.key)))
    };
    let place = |j: usize| move |e: Error| e.in_pipeline(&spec.source, candidate(j).as_deref());
    let stages: Vec<StageSpec> = first
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| s.fit(&sample, d, spec.run.seed, i))
        .collect::<Result<_>>()
        .map_err(place(0))?;
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
    let pipeline = FeaturePipeline::build(&stages, d, spec.run.seed).map_err(place(0))?;
    let threads = spec.threads();
    let shift = match spec.run.shift {
        ShiftMode::Zero => vec![0.0; pipeline.output_dim()],
        ShiftMode::Sample => sample_mean(&pipeline, &sample, threads),
    };
    // The resolved inputs (every file's path, size and footer) are part of what a
    // checkpoint or a shard must match: a glob that gains a file cannot resume.
    let files: Vec<String> =
        labeled.identity().into_iter().chain(unlabeled.iter().flat_map(Dataset::identity)).collect();
    let fingerprint = spec.fingerprint(&stages, spec.run.shift, &files, code.as_ref());
    let mut alternatives = Vec::new();
    for (j, alt) in candidates.enumerate() {
        let stages: Vec<StageSpec> = alt
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| s.fit(&sample, d, spec.run.seed, i))
            .collect::<Result<_>>()
            .map_err(place(j + 1))?;
        let pipeline = FeaturePipeline::build(&stages, d, spec.run.seed).map_err(place(j + 1))?;
        let shift = match spec.run.shift {
            ShiftMode::Zero => vec![0.0; pipeline.output_dim()],
            ShiftMode::Sample => sample_mean(&pipeline, &sample, threads),
        };
        alternatives.push(Alternative { spec: alt, stages, pipeline, shift });
    }
    let dual = crate::pipeline::paths::takes_dual(spec, labeled.total_rows(), semi, pipeline.output_dim())?;
    let prep = Prepared {
        labeled,
        unlabeled,
        classes,
        code,
        c,
        stages,
        pipeline,
        shift,
        fingerprint,
        work,
        semi,
        dual,
        alternatives,
    };
    check_memory(spec, &prep, say)?;
    Ok(prep)
}

/// Refuses a chunk with a negative value when a stage needs non-negative inputs,
/// naming the row and column.
fn negative_check(spec: &PipelineSpec, features: ResolvedFeatures) -> impl FnMut(&Chunk) -> Result<()> {
    let needs_nonneg = spec.stages.iter().any(StageSpec::needs_nonnegative);
    move |ch: &Chunk| -> Result<()> {
        if needs_nonneg {
            let d = features.dim.max(1);
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
    }
}

/// The stages of `spec` fitted on the pre-pass sample of one dataset (a feature map
/// without a training run).
pub(crate) fn fit_stages(spec: &PipelineSpec, data: &Dataset) -> Result<Vec<StageSpec>> {
    let work: Vec<WorkUnit> = data.units().into_iter().map(|unit| WorkUnit { unlabeled: false, unit }).collect();
    let mut check = negative_check(spec, data.features.clone());
    let sample = prepass_sample(data, None, &work, spec, &mut check)?;
    let d = data.dim();
    spec.stages.iter().enumerate().map(|(i, s)| s.fit(&sample, d, spec.run.seed, i)).collect()
}

/// The output code of a classification run (`ridge.codes`).
pub(crate) fn output_code(spec: &PipelineSpec, classes: usize) -> Result<OutputCode> {
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

/// Every input a run reads beside the training files (unlabeled, test, validation)
/// must give the training files' feature columns in their order: the column globs are
/// resolved on each input's own first file, so they can match another set. Names the
/// first column that differs.
fn same_features(train: &Dataset, other: &Dataset, what: &str) -> Result<()> {
    let (t, o) = (&train.features, &other.features);
    if t.columns == o.columns && t.dim == o.dim {
        return Ok(());
    }
    let at = other.files[0].location();
    let message = if let Some(missing) = t.columns.iter().find(|c| !o.columns.contains(c)) {
        format!(
            "the {what} files have no feature column '{missing}' that the training files have ({} features here, {} there): give every {what} file the training files' feature columns",
            o.dim, t.dim
        )
    } else if let Some(extra) = o.columns.iter().find(|c| !t.columns.contains(c)) {
        format!(
            "the {what} files have a feature column '{extra}' that the training files lack ({} features here, {} there): the feature columns must match",
            o.dim, t.dim
        )
    } else if t.columns == o.columns {
        format!(
            "the {what} files' feature list has {} values per row, the training files' {}: the feature columns must match",
            o.dim, t.dim
        )
    } else {
        format!("the {what} files have the training files' feature columns in another order: the order must match")
    };
    Err(Error::data(at, message))
}

/// Column sets for the other labeled inputs (test, validation).
pub(crate) struct ColumnsFor;

impl ColumnsFor {
    pub(crate) fn labeled(spec: &PipelineSpec) -> crate::source::ColumnSpec {
        crate::source::ColumnSpec { null_labels_unlabeled: false, ..spec.columns() }
    }
}

/// The pre-pass sample: units in a seeded random order until they hold four times the
/// sample size (every unit for small inputs), then a seeded reservoir over their rows.
/// It reads only those row groups and is the same in every shard.
pub(crate) fn prepass_sample(
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

pub(crate) fn stage_ranges(pipeline: &FeaturePipeline) -> Vec<std::ops::Range<usize>> {
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

pub(crate) fn check_memory(spec: &PipelineSpec, prep: &Prepared, say: &mut dyn FnMut(&str)) -> Result<()> {
    if prep.dual {
        return check_dual_memory(spec, prep, say);
    }
    let (d, dim, c) = (prep.labeled.dim(), prep.pipeline.output_dim(), prep.c);
    let chunk = chunk_rows_for(spec, dim, false);
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
        // k-fold keeps one set of statistics per fold (their total is the sum).
        let sets = if prep.semi { 2 } else { spec.ridge.cv.unwrap_or(1) as u64 };
        let widths = std::iter::once(dim).chain(prep.alternatives.iter().map(|a| a.pipeline.output_dim()));
        let stats = widths.map(|w| GramStats::bytes_for(w, c)).sum::<u64>() * sets;
        (stats, dim, solve_path(spec, spec.components() != Components::All, prep.semi)?)
    };
    // Two chunks' features are alive at once (one mapped while the other is added).
    let buffers = (4 * chunk * (d * 4 + 2 * dim)) as u64 + GramStats::scratch_bytes(dim);
    let limit = memory_limit(spec);
    let solve = solve_bytes(path, solve_dim, c);
    // The chunk buffers are gone by the solve: the copy has to fit beside the statistics.
    let in_place = path == SolvePath::Cholesky
        && (limit.is_some_and(|l| stats + solve > l) || crate::pipeline::paths::large_copy_on_disk(spec, solve));
    // A refit keeps the validation rows' statistics beside the solve's matrices.
    let refit =
        spec.ridge.refit && !spec.data.validation.is_empty() && !matches!(spec.lambda()?, LambdaChoice::Fixed(_));
    let held_out = if refit { GramStats::bytes_for(solve_dim, c) } else { 0 };
    // k-fold's solve: the total and one fold's complement beside the reduction, and every
    // fold's 41 weight sets.
    let held_out =
        held_out + spec.ridge.cv.map_or(0, |k| 2 * GramStats::bytes_for(dim, c) + (k * 41 * dim * c * 8) as u64);
    let needed = stats + held_out + buffers + if in_place { 0 } else { solve };
    say(&format!(
        "memory: statistics {} (D = {dim}, {} pass(es){}), chunk buffers {}, solve {} ({} path{}); {} rows × d = {d} in {} file(s)",
        mib(stats + held_out),
        spec.passes,
        match (prep.semi, refit) {
            _ if !prep.alternatives.is_empty() => ", one per kernel candidate",
            _ if spec.ridge.cv.is_some() => ", one per fold, and the k-fold solve's total, complement and fold models",
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

/// [`check_memory`] for a run that keeps its rows (the dual solve).
fn check_dual_memory(spec: &PipelineSpec, prep: &Prepared, say: &mut dyn FnMut(&str)) -> Result<()> {
    use crate::solve::dual::RowStats;
    let (d, dim, c) = (prep.labeled.dim(), prep.pipeline.output_dim(), prep.c);
    let n = prep.labeled.total_rows();
    let rows = RowStats::bytes_for(n, dim, c);
    let gcv = matches!(spec.lambda()?, LambdaChoice::Gcv { .. });
    let solve = RowStats::solve_bytes(n, c, gcv);
    let chunk = chunk_rows_for(spec, dim, true);
    let buffers = (4 * chunk * (d * 4 + 2 * dim)) as u64;
    let needed = rows + solve + buffers;
    say(&format!(
        "memory: {n} rows ≤ D/2 = {}: the mapped rows are kept {} instead of the Gram {}, chunk buffers {}, solve {} (dual path: the {n} × {n} kernel matrix); d = {d} in {} file(s)",
        dim / 2,
        mib(rows),
        mib(GramStats::bytes_for(dim, c)),
        mib(buffers),
        mib(solve),
        prep.labeled.files.len(),
    ));
    match memory_limit(spec) {
        Some(limit) if needed > limit => Err(Error::Memory {
            needed,
            limit,
            hint: "lower the stages' dim or raise run.memory_limit_mib (the dual path holds the mapped rows and an n × n matrix)".into(),
        }),
        _ => Ok(()),
    }
}

/// Rows per chunk in the pass: `run.chunk_rows`, lowered so that one chunk's features
/// stay within 128 MiB (two are alive at once): at large D the chunk buffers would
/// otherwise rival the Gram. A run that keeps its rows copies each chunk out: 64-row
/// chunks keep the mapped buffers small beside the rows.
pub(crate) fn chunk_rows_for(spec: &PipelineSpec, dim: usize, keeps_rows: bool) -> usize {
    let cap = (128usize << 20) / (4 * dim.max(1));
    let rows = spec.run.chunk_rows.min(cap.max(256)).max(1);
    if keeps_rows {
        rows.min(64)
    } else {
        rows
    }
}

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
