//! Shards and parts: accumulating every N-th unit into a part file, and `solve`, which
//! verifies the parts against each other and the pipeline and merges them.

use crate::codes::OutputCode;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::pipeline::checkpoint::read_stats;
use crate::pipeline::pass::accumulate;
use crate::pipeline::pass::run_pass;
use crate::pipeline::plan::stage_ranges;
use crate::pipeline::plan::RunOptions;
use crate::pipeline::plan::{prepare, Prepared};
use crate::pipeline::projection::fit_stage_pcas;
use crate::pipeline::solve_step::finish;
use crate::pipeline::spec::PipelineSpec;
use crate::pipeline::state::State;
use crate::sketch::{FeaturePipeline, StageSpec};
use crate::source::{Classes, ResolvedFeatures};
use crate::stats::{stats_to_bytes, GramStats};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A shard's manifest, stored in its statistics file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PartMeta {
    pub(crate) kind: String,
    pub(crate) fingerprint: String,
    pub(crate) shard: usize,
    pub(crate) shards: usize,
    pub(crate) units: Vec<(bool, String, usize)>,
    pub(crate) classes: Option<Classes>,
    pub(crate) stages: Vec<StageSpec>,
    pub(crate) features: ResolvedFeatures,
    /// Which pass of a two-pass pipeline the part holds (1 for one-pass pipelines).
    #[serde(default = "pass_one")]
    pub(crate) pass: u32,
    /// For pass-two parts: the checksum of the merged pass-one file they projected with.
    #[serde(default)]
    pub(crate) pass1_checksum: Option<String>,
    /// The seed the maps were drawn with: `solve` rebuilds them from it, never from its
    /// own command line.
    #[serde(default)]
    pub(crate) seed: Option<u64>,
    /// The pipeline keys that define the features, as accumulated (see [`map_keys`]).
    #[serde(default)]
    pub(crate) map_keys: Option<serde_json::Value>,
    /// The output code's rows (ECOC), as the targets were encoded.
    #[serde(default)]
    pub(crate) code: Option<Vec<Vec<i8>>>,
    /// Other shards of the same run merged into this part (see `Statistics::merge`).
    #[serde(default)]
    pub(crate) merged: Vec<usize>,
}

impl PartMeta {
    /// The code the part's targets were encoded with.
    pub(crate) fn output_code(&self) -> Result<Option<OutputCode>> {
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
pub(crate) fn map_keys(spec: &PipelineSpec) -> serde_json::Value {
    let mut keys = serde_json::json!({
        "task": spec.task, "passes": spec.passes, "features": spec.data.features,
        "feature_list": spec.data.feature_list, "label": spec.data.label, "targets": spec.data.targets,
        "stages": spec.stages, "seed": spec.run.seed, "sample_rows": spec.run.sample_rows,
        "shift": spec.run.shift,
        // In two passes the per-stage PCA decides what pass two accumulated.
        "pca": if spec.passes == 2 { serde_json::to_value(&spec.pca).unwrap_or_default() } else { serde_json::Value::Null },
    });
    // The fold layout decides what the parts hold; without k-fold the keys are as before.
    if let (Some(k), Some(o)) = (spec.ridge.cv, keys.as_object_mut()) {
        o.insert("ridge.cv".into(), k.into());
    }
    keys
}

/// Refuses to solve parts with a pipeline whose features differ from theirs, naming the
/// first key that differs.
pub(crate) fn check_parts_match(spec: &PipelineSpec, part: &Path, meta: &PartMeta) -> Result<()> {
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
    if let (Some(a), Some(k)) = (keys.as_object(), spec.ridge.cv) {
        if !a.contains_key("ridge.cv") {
            return Err(Error::config(
                file,
                "ridge.cv",
                format!(
                    "is {k}, but the parts ({}) were accumulated without folds; accumulate them again with it",
                    part.display()
                ),
            ));
        }
    }
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

pub(crate) fn pass_one() -> u32 {
    1
}

/// The merged pass-one statistics of a sharded two-pass run.
pub(crate) fn load_pass1(path: &Path, fingerprint: Option<&str>) -> Result<(Vec<GramStats>, PartMeta, String)> {
    let bad = |message: String| Error::BadModel { path: path.into(), message };
    let (blocks, meta) = read_stats(path, true)?;
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
    Ok((pass1, meta, crate::container::file_checksum(path).map_err(|e| Error::io(path, e))?))
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
    let mut spec = spec.clone();
    spec.run.keep_statistics = true;
    let spec = &spec;
    let prep = prepare(spec, say)?;
    for out in std::iter::once(out).chain(opts.checkpoint.as_deref()) {
        crate::atomic::check_output(out)?;
    }
    let part = accumulate_part(spec, prep, shard, opts, pass1, say)?;
    part.write(out)
}

/// A shard's statistics and manifest, as a part file holds them.
#[derive(Debug, Clone)]
pub struct Statistics {
    /// Where it was read from, or what it was made from (for messages).
    pub origin: PathBuf,
    pub(crate) meta: PartMeta,
    pub(crate) state: State,
}

impl Statistics {
    /// Rows accumulated (labeled and unlabeled; pass one's for a two-pass part one).
    pub fn rows(&self) -> u64 {
        self.state.blocks().ok().and_then(|b| b.first().map(|(_, s)| s.n)).unwrap_or(0)
    }
    /// `(shard, shards)`.
    pub fn shard(&self) -> (usize, usize) {
        (self.meta.shard, self.meta.shards)
    }
    /// The part file's bytes (read back before they are returned).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let blocks = self.state.blocks()?;
        stats_to_bytes(&self.part_blocks(&blocks), serde_json::to_value(&self.meta).unwrap_or_default())
    }
    /// Writes the part file (streamed: no copy of the statistics in memory).
    fn write(&self, path: &Path) -> Result<()> {
        let blocks = self.state.blocks()?;
        crate::stats::stats_to_file(
            path,
            &self.part_blocks(&blocks),
            serde_json::to_value(&self.meta).unwrap_or_default(),
        )
    }
    /// A pass-two part carries only its own statistics; pass one is in the merged file.
    fn part_blocks<'a>(&self, blocks: &'a [(String, &'a GramStats)]) -> Vec<(&'a str, &'a GramStats)> {
        blocks.iter().filter(|(n, _)| self.meta.pass == 1 || n == "pass2").map(|(n, s)| (n.as_str(), *s)).collect()
    }
    /// Reads and verifies a part file.
    pub fn load(path: &Path) -> Result<Statistics> {
        let (blocks, meta) = read_stats(path, true)?;
        Statistics::from_blocks(path, blocks, meta)
    }
    pub(crate) fn from_blocks(
        path: &Path,
        blocks: Vec<(String, GramStats)>,
        meta: serde_json::Value,
    ) -> Result<Statistics> {
        let bad = |message: String| Error::BadModel { path: path.to_path_buf(), message };
        let meta: PartMeta = serde_json::from_value(meta).map_err(|e| bad(format!("not a shard's statistics: {e}")))?;
        if meta.kind != "shard" {
            return Err(bad("not a shard's statistics".into()));
        }
        let state = if meta.pass == 2 {
            let (_, p2) =
                blocks.into_iter().find(|(n, _)| n == "pass2").ok_or_else(|| bad("no pass-two statistics".into()))?;
            State::Two { pass1: Vec::new(), pass2: Some(p2) }
        } else {
            // Which layout the blocks have; whether it is the pipeline's is checked at solve.
            let passes = if blocks.iter().any(|(n, _)| n.starts_with("pass1.")) { 2 } else { 1 };
            State::from_blocks(passes, blocks).map_err(bad)?
        };
        Ok(Statistics { origin: path.to_path_buf(), meta, state })
    }
    /// Saves the part file atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.write(path)
    }
}

/// The statistics of every N-th unit of a prepared run.
pub(crate) fn accumulate_part(
    spec: &PipelineSpec,
    prep: Prepared,
    shard: (usize, usize),
    opts: &RunOptions,
    pass1: Option<&Path>,
    say: &mut dyn FnMut(&str),
) -> Result<Statistics> {
    let (i, n) = shard;
    if n == 0 || i >= n {
        return Err(Error::config("command line", "--shard", format!("shard {i}/{n}: need 0 ≤ i < N")));
    }
    refuse_candidates(spec)?;
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
        merged: Vec::new(),
    };
    let origin = prep.labeled.files.first().map_or_else(PathBuf::new, |f| f.path.clone());
    Ok(Statistics { origin, meta, state })
}

/// Kernel candidates are fitted and chosen in one process: a part would have to carry
/// every candidate's fitted map.
fn refuse_candidates(spec: &PipelineSpec) -> Result<()> {
    match &spec.candidates {
        Some(c) => Err(Error::config(
            &spec.source,
            format!("stages.{}.candidates", c.stage),
            "candidates run in one process (`train`); to shard, give each candidate its own pipeline",
        )),
        None => Ok(()),
    }
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
    let mut loaded = Vec::new();
    for path in parts {
        loaded.push(Statistics::load(path)?);
    }
    crate::atomic::check_output(out)?;
    solve_loaded(spec, loaded, allow_partial, pass1, Some(out), say)
}

/// [`solve_parts`] on parts already loaded (or accumulated in this process). `out` is
/// where merged pass-one statistics go (two-pass pass-one parts only).
pub(crate) fn solve_loaded(
    spec: &PipelineSpec,
    parts: Vec<Statistics>,
    allow_partial: bool,
    pass1: Option<&Path>,
    out: Option<&Path>,
    say: &mut dyn FnMut(&str),
) -> Result<SolveOutcome> {
    if parts.is_empty() {
        return Err(Error::config(&spec.source, "parts", "no statistics given"));
    }
    refuse_candidates(spec)?;
    let mut loaded: Vec<(PathBuf, PartMeta, State)> = parts.into_iter().map(|p| (p.origin, p.meta, p.state)).collect();
    let first = loaded[0].1.clone();
    let mut seen_units = BTreeSet::new();
    let mut seen_shards = BTreeSet::new();
    for (path, m, _) in &loaded {
        let bad = |message: String| Error::BadModel { path: path.clone(), message };
        if m.fingerprint != first.fingerprint {
            return Err(bad(format!("written by a different pipeline, data or seed than {}", loaded[0].0.display())));
        }
        // The fingerprint covers a code file's rows since this release; the codes
        // themselves are compared too, so parts written before it cannot mix codes.
        if m.code != first.code {
            return Err(bad(format!(
                "built with another output code than {} (was ridge.code_file edited between the shards?); accumulate every shard with one code",
                loaded[0].0.display()
            )));
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
        for shard in std::iter::once(m.shard).chain(m.merged.iter().copied()) {
            if !seen_shards.insert(shard) {
                return Err(bad(format!(
                    "shard {shard}/{} is given twice; merging it again would count its rows twice",
                    m.shards
                )));
            }
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
    let (mut state, pcas) = match (spec.passes, first.pass) {
        (2, 1) => {
            let meta = PartMeta { kind: "pass1".into(), shard: 0, shards: 1, units: Vec::new(), ..first.clone() };
            let blocks = state.blocks()?;
            let named: Vec<(&str, &GramStats)> = blocks.iter().map(|(n, s)| (n.as_str(), *s)).collect();
            let out = out.ok_or_else(|| {
                Error::config(&spec.source, "parts", "pass-one parts merge into a file: give an output path")
            })?;
            crate::stats::stats_to_file(out, &named, serde_json::to_value(&meta).unwrap_or_default())?;
            return Ok(SolveOutcome::Pass1Merged);
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
            (State::Two { pass1: p1, pass2 }, Some(pcas))
        }
        _ => (state, None),
    };
    // k-fold scoring streams the training rows once more: the pipeline's files.
    let data = match (&state, spec.data.train.is_empty()) {
        (State::Folds { .. }, false) => Some(crate::source::Dataset::open(&spec.data.train, spec.columns())?),
        _ => None,
    };
    finish(
        spec,
        pipeline,
        first.stages.clone(),
        first.classes.clone(),
        first.output_code()?,
        first.features.clone(),
        &mut state,
        pcas,
        data.as_ref(),
        &[],
        say,
    )
    .map(|m| SolveOutcome::Model(Box::new(m)))
}
