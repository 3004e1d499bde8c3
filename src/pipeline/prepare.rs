//! Preparing a run before its first row: open and check the inputs, scan the classes,
//! read or draw the output code, take the pre-pass sample, fit the stages of every
//! candidate and their shifts, and fingerprint what decides the statistics. What the
//! planner needs of all this is [`Prepared::facts`].

use crate::session::Session;
use std::ops::Range;

use crate::codes::OutputCode;
use crate::error::{Error, Location, Result};
use crate::maps::Maps;
use crate::pipeline::check::{CheckedPipeline, CodeChoice};
use crate::pipeline::plan::Facts;
use crate::pipeline::report::Reporter;
use crate::pipeline::spec::{PipelineSpec, ShiftMode, Task};
use crate::pipeline::stream::{check_nonnegative, sample_mean, Reservoir};
use crate::rng::StageRng;
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::source::{Chunk, Classes, Dataset, ResolvedFeatures, Unit};

/// A row group of the labeled (`unlabeled = false`) or unlabeled inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkUnit {
    /// From the unlabeled inputs.
    pub unlabeled: bool,
    /// The row group.
    pub unit: Unit,
}

/// How classes become targets, and the features the model reads.
#[derive(Debug, Clone)]
pub(crate) struct Labels {
    /// Classes (classification).
    pub classes: Option<Classes>,
    /// Their output code (classification).
    pub code: Option<OutputCode>,
    /// The resolved feature columns.
    pub features: ResolvedFeatures,
}

impl Labels {
    /// Classes and code together (classification), as held-out scoring needs them.
    pub fn coded(&self) -> Option<(&Classes, &OutputCode)> {
        self.classes.as_ref().zip(self.code.as_ref())
    }
}

/// A map with its fitted stages and its accumulator shift.
#[derive(Debug)]
pub struct FittedMap {
    /// The fitted stages (what a model header and a part record).
    pub stages: Vec<StageSpec>,
    /// The map.
    pub pipeline: FeaturePipeline,
    /// The accumulator shift `μ`.
    pub shift: Vec<f64>,
}

impl FittedMap {
    /// The map of fitted `stages` for inputs of width `d`, drawn from `seed`, with its shift.
    pub fn build(stages: Vec<StageSpec>, d: usize, seed: u64, shift: Option<Vec<f64>>) -> Result<FittedMap> {
        let pipeline = FeaturePipeline::build(&stages, d, seed)?;
        let shift = shift.unwrap_or_else(|| vec![0.0; pipeline.output_dim()]);
        Ok(FittedMap { stages, pipeline, shift })
    }

    /// Its feature dimension `D`.
    pub fn dim(&self) -> usize {
        self.pipeline.output_dim()
    }

    /// Each stage's range of features.
    pub fn ranges(&self) -> Vec<Range<usize>> {
        stage_ranges(&self.pipeline)
    }
}

/// Everything fixed before the first main-pass row.
#[derive(Debug)]
pub struct Prepared {
    /// Labeled inputs.
    pub labeled: Dataset,
    /// Unlabeled inputs.
    pub unlabeled: Option<Dataset>,
    /// Classes, code and features.
    pub(crate) labels: Labels,
    /// Outputs.
    pub c: usize,
    /// The maps: the pipeline's, or one per kernel candidate (the first the pipeline's own).
    pub maps: Vec<FittedMap>,
    /// Fingerprint of what decides the statistics.
    pub fingerprint: String,
    /// Every unit, labeled inputs first.
    pub work: Vec<WorkUnit>,
    /// The digest of the maps file the run was given (`--maps`), if any.
    pub maps_digest: Option<String>,
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

    /// A unit's identity for shard manifests: (unlabeled, file path, row group).
    pub(crate) fn unit_id(&self, w: &WorkUnit) -> (bool, String, usize) {
        // A part records where its rows came from, never how the store was reached.
        let path = self.dataset(w.unlabeled).files[w.unit.file].path.display().to_string();
        (w.unlabeled, crate::identity::redact_urls(&path), w.unit.row_group)
    }

    /// The map of the pipeline itself (the first candidate's with candidates).
    #[allow(clippy::expect_used)] // Invariant: `prepare` builds at least one map.
    pub fn map(&self) -> &FittedMap {
        self.maps.first().expect("a prepared run has a map")
    }

    /// What the planner needs to know of the inputs and maps.
    pub fn facts(&self) -> Facts {
        Facts {
            d: self.labeled.dim(),
            dims: self.maps.iter().map(FittedMap::dim).collect(),
            stage_dims: self.map().ranges().iter().map(Range::len).collect(),
            outputs: self.c,
            labeled_rows: self.labeled.total_rows(),
            unlabeled_rows: self.unlabeled.as_ref().map_or(0, Dataset::total_rows),
            files: self.labeled.files.len() + self.unlabeled.as_ref().map_or(0, |u| u.files.len()),
            map_bytes: self.maps.iter().flat_map(|m| &m.stages).map(|s| s.param_bytes(self.labeled.dim())).sum(),
            fetch_bytes: self.labeled.remote_bytes().max(self.unlabeled.as_ref().map_or(0, Dataset::remote_bytes)),
        }
    }
}

/// Opens and checks the inputs, scans the classes, fits the stages and the shift on
/// the pre-pass sample — or, when the pipeline names a maps file (`run.maps`), takes the
/// maps from it.
pub fn prepare(session: &Session, checked: &CheckedPipeline, report: &mut Reporter) -> Result<Prepared> {
    prepare_with(session, checked, None, report)
}

/// [`prepare`] without a maps file, whatever the pipeline names: the pre-pass itself.
pub(crate) fn prepare_fresh(session: &Session, checked: &CheckedPipeline, report: &mut Reporter) -> Result<Prepared> {
    let inputs = open_training(session, checked)?;
    prepare_opened(checked, inputs, None, report)
}

/// [`prepare`] with the maps of a maps file (`maps`, else the pipeline's `run.maps`, read
/// through `session`) when there is one: no pre-pass; the maps' stages, shift and class
/// list serve.
pub fn prepare_with(
    session: &Session,
    checked: &CheckedPipeline,
    maps: Option<&std::path::Path>,
    report: &mut Reporter,
) -> Result<Prepared> {
    let Some(path) = maps.or(checked.spec().run.maps.as_deref()) else {
        return prepare_fresh(session, checked, report);
    };
    // The inputs first: they put the pipeline's `[storage]` options in force, which a maps
    // file in the same store is read with.
    let inputs = open_training(session, checked)?;
    let maps = Maps::load_with(session, path)?;
    prepare_opened(checked, inputs, Some(maps), report)
}

/// The pipeline's training inputs opened in `session`, under its `[storage]` options.
fn open_training(session: &Session, checked: &CheckedPipeline) -> Result<(Dataset, Option<Dataset>)> {
    let spec = checked.spec();
    if spec.data.train.is_empty() {
        return Err(Error::config(&spec.source, "data.train", "no training files given"));
    }
    session.storage().set_options(crate::remote::Layer::Pipeline, &spec.storage)?;
    let labeled = Dataset::open(session, &spec.data.train, checked.columns())?;
    let unlabeled = if spec.data.unlabeled.is_empty() {
        None
    } else {
        Some(Dataset::open(session, &spec.data.unlabeled, checked.feature_only_columns())?)
    };
    Ok((labeled, unlabeled))
}

/// [`prepare`] on inputs already opened (files, or batches in memory).
pub fn prepare_inputs(
    checked: &CheckedPipeline,
    labeled: Dataset,
    unlabeled: Option<Dataset>,
    report: &mut Reporter,
) -> Result<Prepared> {
    let maps = match &checked.spec().run.maps {
        Some(path) => Some(Maps::load_with(labeled.session(), path)?),
        None => None,
    };
    prepare_opened(checked, (labeled, unlabeled), maps, report)
}

fn prepare_opened(
    checked: &CheckedPipeline,
    (labeled, unlabeled): (Dataset, Option<Dataset>),
    maps: Option<Maps>,
    report: &mut Reporter,
) -> Result<Prepared> {
    let spec = checked.spec();
    let session = labeled.session().clone();
    if let Some(u) = &unlabeled {
        same_features(&labeled, u, "unlabeled")?;
    }
    for (files, what) in [(&spec.data.test, "test"), (&spec.data.validation, "validation")] {
        if !files.is_empty() {
            same_features(&labeled, &Dataset::open(&session, files, checked.labeled_columns())?, what)?;
        }
    }
    if let Some(m) = maps {
        return from_maps(checked, (labeled, unlabeled), m, report);
    }
    let labels = labels(checked, &labeled)?;
    let c = labels.code.as_ref().map_or(spec.data.targets.len(), OutputCode::outputs);
    let mut work: Vec<WorkUnit> = labeled.units().into_iter().map(|unit| WorkUnit { unlabeled: false, unit }).collect();
    if let Some(u) = &unlabeled {
        work.extend(u.units().into_iter().map(|unit| WorkUnit { unlabeled: true, unit }));
    }
    let needs = spec.stages.iter().any(StageSpec::needs_nonnegative);
    let mut check = |ch: &Chunk| check_nonnegative(needs, ch, &labeled.features);
    // With candidates, the first map is the first candidate's; the others follow it.
    let pipelines: Vec<&CheckedPipeline> = match &checked.candidates {
        Some(set) => set.pipelines.iter().collect(),
        None => vec![checked],
    };
    // Each candidate fits on the sample its own run would draw (a Nyström stage enlarges
    // it to its landmarks), so the chosen candidate's model is its own run's, bit for bit:
    // one read of the row groups feeds a reservoir per distinct size.
    let sizes: Vec<usize> = pipelines
        .iter()
        .map(|p| sample_size(spec, p.stages().iter().map(StageSpec::sample_rows).max().unwrap_or(0)))
        .collect();
    let mut distinct = sizes.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let t0 = std::time::Instant::now();
    let samples = prepass_samples(&labeled, unlabeled.as_ref(), &work, (spec, &distinct), &mut check)?;
    let read = t0.elapsed().as_secs_f64();
    let maps = pipelines
        .iter()
        .zip(&sizes)
        .enumerate()
        .map(|(j, (p, n))| {
            let sample = distinct.iter().position(|m| m == n).and_then(|k| samples.get(k));
            let sample = sample.ok_or_else(|| Error::bug("every candidate's sample size was drawn"))?;
            fitted_map(checked, p.stages(), sample, labeled.dim(), j)
        })
        .collect::<Result<Vec<_>>>()?;
    let first = maps.first().ok_or_else(|| Error::bug("no candidate pipelines"))?;
    report.say(format!(
        "pre-pass: {} sample rows read in {read:.1} s; stages fitted, maps drawn and the shift taken in {:.1} s",
        samples.iter().map(Vec::len).max().unwrap_or(0) / labeled.dim().max(1),
        t0.elapsed().as_secs_f64() - read
    ));
    for (i, st) in first.pipeline.stages().iter().enumerate() {
        if let Some(note) = st.map.fitted_note() {
            report.say(format!("stage {i} ({}): {note}", st.spec.kind()));
        }
    }
    for (i, st) in first.stages.iter().enumerate() {
        let t = match st {
            StageSpec::GaussianSketch(g) => g.truncation,
            StageSpec::GaussianSketchHd(g) => g.truncation,
            _ => None,
        };
        if let Some(t) = t.filter(|&t| t > 64) {
            report.warn(format!(
                "stage {i}: the Gaussian sketch needs {t} terms: the bandwidth is small next to the data's spread; random Fourier features suit better"
            ));
        }
    }
    // The resolved inputs (every file's path, size and footer) are part of what a
    // checkpoint or a shard must match: a glob that gains a file cannot resume.
    let files: Vec<String> =
        labeled.identity().into_iter().chain(unlabeled.iter().flat_map(Dataset::identity)).collect();
    let fingerprint = crate::pipeline::keys::fingerprint(spec, &first.stages, &files, labels.code.as_ref());
    Ok(Prepared { labeled, unlabeled, labels, c, maps, fingerprint, work, maps_digest: None })
}

/// A run prepared on fitted maps: the inputs are checked against them (the columns, the
/// keys that decide the statistics), their class list and code serve (a label outside the
/// list is refused by the pass, naming it), and no pre-pass reads a row.
fn from_maps(
    checked: &CheckedPipeline,
    (labeled, unlabeled): (Dataset, Option<Dataset>),
    maps: Maps,
    report: &mut Reporter,
) -> Result<Prepared> {
    let spec = checked.spec();
    if checked.candidates.is_some() {
        return Err(Error::usage(
            "--maps",
            "kernel candidates fit one map each and choose among them; run them without --maps",
        ));
    }
    let (have, want) = (&labeled.features, &maps.header.features);
    if have != want {
        return Err(maps.refuse(format!(
            "fitted on {} feature column(s) ({}, d = {}); the inputs resolve to {} ({}, d = {}): give inputs with the maps' columns, or fit maps for these",
            want.columns.len(),
            preview(&want.columns),
            want.dim,
            have.columns.len(),
            preview(&have.columns),
            have.dim
        )));
    }
    // (The columns were compared as resolved just above.)
    if let Some((key, was)) = crate::pipeline::keys::first_difference_over_maps(spec, &maps.header.keys) {
        return Err(Error::config(
            &spec.source,
            key,
            format!(
                "differs from the maps' ({}: {was}); run with the pipeline the maps were fitted with",
                maps.origin.as_deref().unwrap_or(std::path::Path::new("maps")).display()
            ),
        ));
    }
    // A regression over a classifier's maps takes the map, not the class list.
    let classes = if spec.task == Task::Regression { None } else { maps.header.classes.clone() };
    let code = match (&classes, &maps.header.code) {
        (None, _) => None,
        (Some(k), None) => Some(OutputCode::OneVsAll { classes: k.len() }),
        (Some(_), Some(rows)) => {
            Some(OutputCode::from_rows(rows).map_err(|e| maps.refuse(format!("output code: {e}")))?)
        }
    };
    let labels = Labels { classes, code, features: labeled.features.clone() };
    let c = labels.code.as_ref().map_or(spec.data.targets.len(), OutputCode::outputs);
    let mut work: Vec<WorkUnit> = labeled.units().into_iter().map(|unit| WorkUnit { unlabeled: false, unit }).collect();
    if let Some(u) = &unlabeled {
        work.extend(u.units().into_iter().map(|unit| WorkUnit { unlabeled: true, unit }));
    }
    let digest = maps.digest().to_string();
    report.say(format!(
        "maps: {} (digest {}); no pre-pass",
        crate::identity::redact_urls(&maps.origin.as_deref().map_or(String::new(), |p| p.display().to_string())),
        &digest[..digest.len().min(16)]
    ));
    let Maps { header, pipeline, shift, .. } = maps;
    let map = FittedMap { stages: header.stages, pipeline, shift };
    let mut files: Vec<String> =
        labeled.identity().into_iter().chain(unlabeled.iter().flat_map(Dataset::identity)).collect();
    files.push(format!("maps {digest}"));
    let fingerprint = crate::pipeline::keys::fingerprint(spec, &map.stages, &files, labels.code.as_ref());
    Ok(Prepared { labeled, unlabeled, labels, c, maps: vec![map], fingerprint, work, maps_digest: Some(digest) })
}

/// The first columns of a list, for messages.
fn preview(columns: &[String]) -> String {
    let mut s = columns.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    if columns.len() > 3 {
        s.push_str(", …");
    }
    s
}

/// Classes (scanned or given), their code, and the features.
fn labels(checked: &CheckedPipeline, labeled: &Dataset) -> Result<Labels> {
    let spec = checked.spec();
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
    let code = match (&classes, &checked.code) {
        (Some(k), Some(choice)) => Some(output_code(labeled.session(), checked, choice, k.len())?),
        _ => None,
    };
    Ok(Labels { classes, code, features: labeled.features.clone() })
}

/// Candidate `j`'s stages fitted on the sample, its map and its shift. Stage errors found
/// only with the data (a `down_dim` at or above the map's width) name the pipeline file
/// and, with candidates, the candidate.
fn fitted_map(
    checked: &CheckedPipeline,
    stages: &[StageSpec],
    sample: &[f32],
    d: usize,
    j: usize,
) -> Result<FittedMap> {
    let spec = checked.spec();
    let candidate =
        spec.candidates.as_ref().and_then(|c| c.values.get(j).map(|v| format!("stages.{}.{} = {v}", c.stage, c.key)));
    let place = |e: Error| e.in_pipeline(&spec.source, candidate.as_deref());
    let fitted: Vec<StageSpec> = stages
        .iter()
        .enumerate()
        .map(|(i, s)| s.fit(sample, d, spec.run.seed, i))
        .collect::<Result<_>>()
        .map_err(place)?;
    // The maps' dense random parameters are drawn before the plan: refuse what would not
    // fit before drawing them (D = 2^20 over thousands of input columns is terabytes).
    // A Nyström stage needs more while it is built (its f64 factor) than it keeps.
    let kept: u64 = fitted.iter().map(|s| s.param_bytes(d)).sum();
    let bytes = fitted.iter().map(|s| kept - s.param_bytes(d) + s.build_peak_bytes(d)).fold(kept, u64::max);
    if let Some(limit) = crate::pipeline::plan::memory_limit(checked, 0).filter(|&l| bytes > l) {
        return Err(Error::Memory {
            needed: bytes,
            limit,
            hint: format!(
                "the stages' random parameters ({} at their largest, while built) grow as the input width × dim (Nyström: as dim²): lower the stages' dim or the input columns",
                crate::pipeline::plan::mib(bytes)
            ),
        });
    }
    let mut map = FittedMap::build(fitted, d, spec.run.seed, None).map_err(place)?;
    if spec.run.shift == ShiftMode::Sample {
        let threads = crate::pipeline::plan::RunOptions::default().threads_for(checked);
        // The shift only conditions the sums, so run.sample_rows rows of a sample
        // enlarged for landmarks are enough (mapping them all is a Nyström pass of its own).
        let rows = (sample.len() / d.max(1)).min(spec.run.sample_rows.max(1));
        map.shift = sample_mean(&map.pipeline, &sample[..rows * d], threads);
    }
    Ok(map)
}

/// The stages of `spec` fitted on the pre-pass sample of one dataset (a feature map
/// without a training run).
pub(crate) fn fit_stages(spec: &PipelineSpec, data: &Dataset) -> Result<Vec<StageSpec>> {
    let work: Vec<WorkUnit> = data.units().into_iter().map(|unit| WorkUnit { unlabeled: false, unit }).collect();
    let needs = spec.stages.iter().any(StageSpec::needs_nonnegative);
    let mut check = |ch: &Chunk| check_nonnegative(needs, ch, &data.features);
    let at_least = spec.stages.iter().map(StageSpec::sample_rows).max().unwrap_or(0);
    let sizes = [sample_size(spec, at_least)];
    let sample = prepass_samples(data, None, &work, (spec, &sizes), &mut check)?.pop().unwrap_or_default();
    let d = data.dim();
    spec.stages.iter().enumerate().map(|(i, s)| s.fit(&sample, d, spec.run.seed, i)).collect()
}

/// The output code of a classification run (`ridge.codes`).
pub(crate) fn output_code(
    session: &Session,
    checked: &CheckedPipeline,
    choice: &CodeChoice,
    classes: usize,
) -> Result<OutputCode> {
    match choice {
        CodeChoice::OneVsAll => Ok(OutputCode::OneVsAll { classes }),
        CodeChoice::File(path) => {
            let bytes = crate::atomic::read_input(session, path)?;
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
        CodeChoice::Drawn { length } => OutputCode::random(classes, *length, checked.seed())
            .map_err(|e| Error::config(checked.source(), "ridge.code_length", e.to_string())),
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

/// Rows in the pre-pass sample: `run.sample_rows`, or `at_least` where more (a Nyström
/// stage's landmarks).
fn sample_size(spec: &PipelineSpec, at_least: usize) -> usize {
    spec.run.sample_rows.max(at_least).max(1)
}

/// The pre-pass samples of the given sizes, as each would be drawn alone: for a size `n`,
/// units in a seeded random order until they hold four times `n` rows (every unit for
/// small inputs), then a seeded reservoir of `n` over their rows. The order does not
/// depend on `n`, so one read of the largest size's units feeds every reservoir (each
/// offered only its own units' rows). It reads only those row groups and is the same in
/// every shard.
pub(crate) fn prepass_samples(
    labeled: &Dataset,
    unlabeled: Option<&Dataset>,
    work: &[WorkUnit],
    (spec, sizes): (&PipelineSpec, &[usize]),
    check: &mut dyn FnMut(&Chunk) -> Result<()>,
) -> Result<Vec<Vec<f32>>> {
    let d = labeled.dim();
    let mut rng = StageRng::new(spec.run.seed, u64::MAX - 1);
    let mut order: Vec<usize> = (0..work.len()).collect();
    for k in (1..order.len()).rev() {
        let j = rng.below(k as u32 + 1) as usize;
        order.swap(k, j);
    }
    // The units each size takes: a prefix of the one order.
    let takes: Vec<Vec<usize>> = sizes
        .iter()
        .map(|&n| {
            let mut take = Vec::new();
            let mut rows = 0;
            for &i in &order {
                if rows >= n.saturating_mul(4) {
                    break;
                }
                take.push(i);
                rows += work[i].unit.rows;
            }
            take
        })
        .collect();
    let mut all: Vec<usize> = takes.iter().flatten().copied().collect();
    all.sort_unstable();
    all.dedup();
    let mut reservoirs: Vec<Reservoir> = sizes.iter().map(|&n| Reservoir::new(n, d, spec.run.seed, u64::MAX)).collect();
    let dataset = |w: WorkUnit| match (w.unlabeled, unlabeled) {
        (true, Some(u)) => Ok(u),
        (true, None) => Err(Error::bug("unlabeled work unit without unlabeled inputs")),
        (false, _) => Ok(labeled),
    };
    for (k, &i) in all.iter().enumerate() {
        let w = work[i];
        let ds = dataset(w)?;
        // The next sampled row group's bytes come while this one is read (remote files).
        if let Some(&next) = all.get(k + 1) {
            dataset(work[next])?.prefetch(work[next].unit);
        }
        let wanted: Vec<bool> = takes.iter().map(|t| t.contains(&i)).collect();
        ds.read_unit(w.unit, spec.run.chunk_rows, &mut |ch: Chunk| {
            check(&ch)?;
            for (res, _) in reservoirs.iter_mut().zip(&wanted).filter(|(_, w)| **w) {
                res.offer(&ch.x, ch.rows);
            }
            Ok(())
        })?;
    }
    Ok(reservoirs.into_iter().map(|r| r.rows).collect())
}

/// Each stage's range of features in `pipeline`'s output.
pub(crate) fn stage_ranges(pipeline: &FeaturePipeline) -> Vec<Range<usize>> {
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
