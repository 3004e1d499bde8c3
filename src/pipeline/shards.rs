//! Shards across processes: `accumulate --shard i/N` (the statistics of every N-th row
//! group, written as a part file) and `solve` (the parts checked to belong together and
//! to the pipeline, merged in shard order, and solved by the plan of the pipeline). A
//! sharded two-pass run merges its pass-one parts into a file that every shard's pass
//! two projects with.

use std::path::{Path, PathBuf};

use crate::codes::OutputCode;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::pipeline::accumulate::merge_blocks;
use crate::pipeline::assemble::{assemble, Fitted};
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::parts::{
    check_parts, check_parts_match, load_pass1, FileKind, PartMeta, PartWeights, PartsSolve, Shard, Statistics,
};
use crate::pipeline::pass::{accumulate, run_pass, Run};
use crate::pipeline::plan::{Facts, Plan, RunOptions};
use crate::pipeline::prepare::Labels;
use crate::pipeline::prepare::{prepare_with, FittedMap, Prepared};
use crate::pipeline::report::Reporter;
use crate::pipeline::run::{decide, decide_from};
use crate::sketch::StageSpec;
use crate::source::Dataset;
use crate::stats::GramStats;

/// `accumulate --shard i/N`: the statistics of every N-th row group (in the order of
/// the inputs), written to `out` with the shard's identity and row groups.
pub fn accumulate_shard(
    checked: &CheckedPipeline,
    shard: Shard,
    out: &Path,
    opts: &RunOptions,
    pass1: Option<&Path>,
    report: &mut Reporter,
) -> Result<()> {
    if checked.passes() == 1 && pass1.is_some() {
        return Err(Error::usage("--pass1", "only two-pass pipelines have a pass one"));
    }
    let opts = RunOptions { keep_statistics: true, ..opts.clone() };
    let prep = prepare_with(&opts.session, checked, opts.maps.as_deref(), report)?;
    crate::pipeline::checkpoint::check_run_outputs(
        &RunOptions { output: Some(out.to_path_buf()), ..opts.clone() },
        "--output",
    )?;
    let part = accumulate_part(checked, prep, shard, pass1, &opts, report)?;
    part.save_with(&opts.session, out)
}

/// The statistics of every N-th unit of a prepared run (`shard`), over the merged
/// pass-one file `pass1` for a two-pass run's pass two.
pub(crate) fn accumulate_part(
    checked: &CheckedPipeline,
    prep: Prepared,
    shard: Shard,
    pass1: Option<&Path>,
    opts: &RunOptions,
    report: &mut Reporter,
) -> Result<Statistics> {
    let Shard { index: i, count: n } = shard;
    // A stage whose fit leaves arrays (Nyström's landmarks) maps alike across parts only
    // from a maps file, which the solve reads them from.
    if let Some(st) = checked.stages().iter().find(|s| s.array_fitted()).filter(|_| prep.maps_digest.is_none()) {
        return Err(crate::sketch::array_fitted(st));
    }
    if prep.maps_digest.is_some() && checked.passes() == 2 {
        return Err(Error::usage(
            "--maps",
            "a two-pass pipeline's pass two projects with the pass one of its own shards: shard it without --maps",
        ));
    }
    shard.check("--shard")?;
    let opts = RunOptions { keep_statistics: true, ..opts.clone() };
    let plan = decide(checked, &prep, &opts, report)?;
    let run = Run { checked, prep: &prep, plan: &plan, opts: &opts, threads: opts.threads_for(checked) };
    let units: Vec<usize> = (0..prep.work.len()).filter(|u| u % n == i).collect();
    report.say(format!("shard {i}/{n}: {} of {} row groups", units.len(), prep.work.len()));
    let (acc, pass, pass1_checksum) = match (checked.passes(), pass1) {
        (1, _) => (accumulate(&run, &units, report)?, 1, None),
        (_, None) => {
            // Pass one of a sharded two-pass run: the per-stage statistics only.
            let mut acc = plan.accumulation(&prep.maps, prep.c, 0)?;
            run_pass(&run, acc.as_mut(), &units, &mut Vec::new(), &mut None)?;
            (acc, 1, None)
        }
        (_, Some(path)) => {
            let (blocks, _, sum) = load_pass1(&opts.session, path, Some(&prep.fingerprint))?;
            let bad = |message: String| Error::BadModel { path: path.to_path_buf(), message };
            let mut acc = plan.accumulation_from(blocks, 1).map_err(bad)?;
            acc.end_pass(&mut run.ctx(report, None))?;
            run_pass(&run, acc.as_mut(), &units, &mut Vec::new(), &mut None)?;
            (acc, 2, Some(sum))
        }
    };
    // A pass-two part carries only its own statistics; pass one is in the merged file.
    let blocks = acc.into_state()?.into_iter().filter(|(name, _)| pass == 1 || name == "pass2").collect();
    // Parts over maps are of one map whatever they read: their fingerprint leaves the
    // inputs out (each part lists its own), so they merge with any parts of the maps.
    let fingerprint = match &prep.maps_digest {
        Some(d) => crate::pipeline::keys::fingerprint(
            checked.spec(),
            &prep.map().stages,
            &[format!("maps {d}")],
            prep.labels.code.as_ref(),
        ),
        None => prep.fingerprint.clone(),
    };
    let inputs = match &prep.maps_digest {
        Some(_) => read_row_groups(&prep, &units),
        None => Vec::new(),
    };
    let meta = PartMeta {
        kind: FileKind::Shard,
        maps: prep.maps_digest.clone(),
        inputs,
        fingerprint,
        shard: i,
        shards: n,
        units: units.iter().map(|&u| prep.unit_id(&prep.work[u])).collect(),
        classes: prep.labels.classes.clone(),
        stages: prep.map().stages.clone(),
        features: prep.labels.features.clone(),
        pass,
        pass1_checksum,
        seed: Some(checked.seed()),
        map_keys: Some(PartMeta::keys_of(checked)),
        code: prep.labels.code.as_ref().and_then(OutputCode::rows),
        merged: Vec::new(),
    };
    let origin = prep.labeled.files.first().map_or_else(PathBuf::new, |f| f.path.clone());
    Ok(Statistics { origin, meta, blocks })
}

/// The row groups `units` of a prepared run as `identity#row group` (the identity:
/// `canonical path|size|footer`, an object's `url|size|etag|footer`), for the
/// double-count check of parts over maps. Batches in memory have no identity and are not
/// listed.
fn read_row_groups(prep: &Prepared, units: &[usize]) -> Vec<String> {
    let ids = [prep.labeled.identity(), prep.unlabeled.as_ref().map(Dataset::identity).unwrap_or_default()];
    units
        .iter()
        .filter_map(|&u| {
            let w = prep.work[u];
            let id = ids[usize::from(w.unlabeled)].get(w.unit.file)?;
            let (name, rest) = id.split_once('|')?;
            if rest.starts_with("memory|") {
                return None;
            }
            // A local file by its canonical path, so a link or `..` names it as itself.
            let name = match crate::remote::is_remote(std::path::Path::new(name)) {
                true => crate::identity::redact_urls(name),
                false => std::fs::canonicalize(name).map_or(name.to_string(), |p| p.display().to_string()),
            };
            Some(format!("{name}|{rest}#{}", w.unit.row_group))
        })
        .collect()
}

/// The merged statistics of parts over one maps file, written as one part (`solve
/// --statistics`): it lists every row group its parts read, so a later solve of it with
/// new parts still refuses a row group counted twice.
fn write_merged(
    session: &crate::session::Session,
    path: &Path,
    first: &PartMeta,
    parts: &[Statistics],
    blocks: &[(String, GramStats)],
) -> Result<()> {
    if first.maps.is_none() {
        return Err(Error::usage(
            "--statistics",
            "merged statistics are written for parts over a maps file (accumulate --maps); solve shards of one run as they are",
        ));
    }
    let mut meta = first.clone();
    meta.inputs = parts.iter().flat_map(|p| p.meta.inputs.iter().cloned()).collect();
    meta.units = parts.iter().flat_map(|p| p.meta.units.iter().cloned()).collect();
    meta.merged = parts.iter().skip(1).flat_map(|p| p.meta.shards_held()).collect();
    let named: Vec<(&str, &GramStats)> = blocks.iter().map(|(n, s)| (n.as_str(), s)).collect();
    crate::stats::stats_to_file(session, path, &named, serde_json::to_value(&meta).unwrap_or_default())
}

/// Scales each part's sums by its weight (parts over a maps file only: the shards of
/// one run are one data set, not a series).
fn weigh(parts: &mut [Statistics], over_maps: bool, weights: &PartWeights, report: &mut Reporter) -> Result<()> {
    if !over_maps {
        return Err(Error::usage(
            weights.flag(),
            "parts are weighted when they are accumulated over a maps file (accumulate --maps); the shards of one run are one data set",
        ));
    }
    let w = weights.resolve(parts.len())?;
    for (p, &w) in parts.iter_mut().zip(&w) {
        p.blocks.iter_mut().for_each(|(_, s)| s.scale(w));
    }
    let shown: Vec<String> = w.iter().map(|w| format!("{w:.4}")).collect();
    report.say(format!("parts weighted, oldest first: {}", shown.join(" ")));
    Ok(())
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
    checked: &CheckedPipeline,
    parts: &[PathBuf],
    how: PartsSolve<'_>,
    out: &Path,
    opts: &RunOptions,
    report: &mut Reporter,
) -> Result<SolveOutcome> {
    let session = &opts.session;
    if parts.is_empty() {
        return Err(Error::usage("PART", "no statistics files given"));
    }
    let mut loaded = Vec::new();
    for path in parts {
        loaded.push(Statistics::load_with(session, path)?);
    }
    crate::atomic::check_output(session, out)?;
    let opts = RunOptions { from_parts: true, stats_on_disk: true, ..opts.clone() };
    solve_loaded(checked, loaded, how, Some(out), &opts, report)
}

/// [`solve_parts`] on parts already loaded (or accumulated in this process); `out` is
/// where merged pass-one statistics go (two-pass pass-one parts only).
pub(crate) fn solve_loaded(
    checked: &CheckedPipeline,
    mut parts: Vec<Statistics>,
    how: PartsSolve<'_>,
    out: Option<&Path>,
    opts: &RunOptions,
    report: &mut Reporter,
) -> Result<SolveOutcome> {
    let PartsSolve { allow_partial, pass1 } = how;
    if parts.is_empty() {
        return Err(Error::config(checked.source(), "parts", "no statistics given"));
    }
    {
        let metas: Vec<(&Path, &PartMeta)> = parts.iter().map(|p| (p.origin.as_path(), &p.meta)).collect();
        check_parts(&metas)?;
    }
    // The parts agree with each other; now they must agree with this pipeline.
    check_parts_match(checked, &parts[0].origin, &parts[0].meta)?;
    let first = parts[0].meta.clone();
    let held: std::collections::BTreeSet<usize> = parts.iter().flat_map(|p| p.meta.shards_held()).collect();
    // Parts over a maps file are whatever data each read: no shard of theirs is missing.
    let missing: Vec<usize> =
        if first.maps.is_some() { Vec::new() } else { (0..first.shards).filter(|s| !held.contains(s)).collect() };
    if !missing.is_empty() && !allow_partial {
        return Err(Error::usage(
            "PART",
            format!("shards {missing:?} of {} are missing (pass --allow-partial to solve without them)", first.shards),
        ));
    }
    // Weights follow the order the parts were given in (oldest first), before the sort.
    if let Some(weights) = &opts.weights {
        weigh(&mut parts, first.maps.is_some(), weights, report)?;
    }
    parts.sort_by_key(|p| p.meta.shard);
    // Take the parts' statistics rather than copy them, and free each once merged: at
    // large D a part is gigabytes.
    let mut blocks = std::mem::take(&mut parts[0].blocks);
    for p in parts.iter_mut().skip(1) {
        let theirs = std::mem::take(&mut p.blocks);
        let named: Vec<(String, &GramStats)> = theirs.iter().map(|(n, s)| (n.clone(), s)).collect();
        merge_blocks(blocks.iter_mut().map(|(n, s)| (n.clone(), s)).collect(), &named)
            .map_err(|message| Error::BadModel { path: p.origin.clone(), message })?;
    }
    match &first.maps {
        Some(_) => report.say(format!("merged {} part(s) over one maps file", parts.len())),
        None => report.say(format!("merged {} shard(s) of {}", parts.len(), first.shards)),
    }
    if let Some(path) = &opts.statistics {
        write_merged(&opts.session, path, &first, &parts, &blocks)?;
        report
            .say(format!("merged statistics written to {}", crate::identity::redact_urls(&path.display().to_string())));
    }
    // Solved without some shards, a stream over the training rows (k-fold scoring) must
    // see only the row groups the parts hold.
    let covered: Option<Vec<(String, usize)>> = (!missing.is_empty()).then(|| {
        parts.iter().flat_map(|p| &p.meta.units).filter(|u| !u.0).map(|(_, path, rg)| (path.clone(), *rg)).collect()
    });
    let origin = parts[0].origin.clone();
    // (Over a maps file, the fitted stages are the file's.)
    if let Some(i) = first.stages.iter().position(StageSpec::needs_fit).filter(|_| first.maps.is_none()) {
        return Err(Error::BadModel {
            path: origin,
            message: format!("stage {i} is not fitted in the part's header; accumulate the parts again"),
        });
    }
    if (checked.passes(), first.pass) == (2, 1) {
        let meta = PartMeta { kind: FileKind::Pass1, shard: 0, shards: 1, units: Vec::new(), ..first };
        let named: Vec<(&str, &GramStats)> = blocks.iter().map(|(n, s)| (n.as_str(), s)).collect();
        let out = out.ok_or_else(|| {
            Error::config(checked.source(), "parts", "pass-one parts merge into a file: give an output path")
        })?;
        crate::stats::stats_to_file(&opts.session, out, &named, serde_json::to_value(&meta).unwrap_or_default())?;
        return Ok(SolveOutcome::Pass1Merged);
    }
    if first.pass == 2 {
        let path = pass1
            .ok_or_else(|| Error::usage("--pass1", "pass-two parts solve with the merged pass-one file (--pass1)"))?;
        let (p1, _, sum) = load_pass1(&opts.session, path, Some(&first.fingerprint))?;
        if let Some(p) = parts.iter().find(|p| p.meta.pass1_checksum.as_deref() != Some(sum.as_str())) {
            return Err(Error::BadModel {
                path: p.origin.clone(),
                message: format!("projected with another pass-one file than {}", path.display()),
            });
        }
        blocks.splice(0..0, p1);
    }
    let labels =
        Labels { classes: first.classes.clone(), code: first.output_code()?, features: first.features.clone() };
    let shift = blocks.iter().find(|(n, _)| n == "labeled" || n == "fold0").map(|(_, s)| s.shift.clone());
    let maps_file = opts.maps.as_ref().or(checked.spec().run.maps.as_ref());
    let map = match (&first.maps, maps_file) {
        (Some(digest), Some(path)) => {
            let maps = crate::maps::Maps::load_with(&opts.session, path)?;
            if maps.digest() != digest {
                return Err(maps.refuse(format!(
                    "these maps (digest {}) are not the ones the parts were accumulated with ({digest})",
                    maps.digest()
                )));
            }
            let crate::maps::Maps { header, pipeline, shift: fitted, .. } = maps;
            FittedMap { stages: header.stages, pipeline, shift: shift.unwrap_or(fitted) }
        }
        (Some(digest), None) if first.stages.iter().any(StageSpec::array_fitted) => {
            return Err(Error::usage(
                "--maps",
                format!("the parts were accumulated with maps {digest}, whose landmarks they do not hold: give that maps file"),
            ));
        }
        (None, Some(_)) => {
            return Err(Error::usage(
                "--maps",
                "the parts were accumulated without a maps file: solve them without it",
            ));
        }
        _ => FittedMap::build(first.stages.clone(), first.features.dim, checked.seed(), shift)?,
    };
    let merged = Merged { blocks, pass: first.pass, origin: &origin, covered: covered.as_deref() };
    let solved = solve_blocks(checked, map, labels, merged, opts, report)?;
    Ok(SolveOutcome::Model(Box::new(solved)))
}

/// Parts merged into one set of statistics blocks, and where they came from.
struct Merged<'a> {
    blocks: Vec<(String, GramStats)>,
    /// The pass the blocks are of.
    pass: u32,
    /// The first part's file (named when the blocks do not fit the plan).
    origin: &'a Path,
    /// The row groups the parts hold, where they are not all of the run's.
    covered: Option<&'a [(String, usize)]>,
}

/// Solves merged statistics blocks by the pipeline's plan, with the map and labels the
/// parts were made with.
fn solve_blocks(
    checked: &CheckedPipeline,
    map: FittedMap,
    labels: Labels,
    merged: Merged<'_>,
    opts: &RunOptions,
    report: &mut Reporter,
) -> Result<Model> {
    let Merged { blocks, pass, origin, covered } = merged;
    let outputs = labels.code.as_ref().map_or(checked.spec().data.targets.len(), OutputCode::outputs);
    let facts = Facts {
        d: labels.features.dim,
        dims: vec![map.dim()],
        stage_dims: map.ranges().iter().map(std::ops::Range::len).collect(),
        outputs,
        labeled_rows: blocks.first().map_or(0, |(_, s)| s.n),
        unlabeled_rows: 0,
        files: 0,
        map_bytes: map.stages.iter().map(|s| s.param_bytes(labels.features.dim)).sum(),
        fetch_bytes: 0,
    };
    let plan = decide_from(checked, &facts, opts, report)?;
    let bad = |message: String| Error::BadModel { path: origin.to_path_buf(), message };
    let acc = plan.accumulation_from(blocks, pass).map_err(bad)?;
    // k-fold scoring streams the training rows once more: the pipeline's files.
    let spec = checked.spec();
    let training = match (&plan, spec.data.train.is_empty()) {
        (Plan::KFold(_), false) => Some(Dataset::open(&opts.session, &spec.data.train, checked.columns())?),
        _ => None,
    };
    let units: Option<Vec<crate::source::Unit>> = match (&training, covered) {
        (Some(data), Some(covered)) => Some(
            data.units()
                .into_iter()
                .filter(|u| {
                    let path = crate::identity::redact_urls(&data.files[u.file].path.display().to_string());
                    covered.iter().any(|(p, rg)| *p == path && *rg == u.row_group)
                })
                .collect(),
        ),
        _ => None,
    };
    let maps = [map];
    let solution = {
        let mut ctx = crate::pipeline::solve_ctx::SolveCtx {
            session: &opts.session,
            checked,
            maps: &maps,
            candidate: 0,
            labels: &labels,
            training: training.as_ref(),
            training_units: units.as_deref(),
            threads: opts.threads_for(checked),
            report,
            gram: plan.gram(),
            keeper: None,
        };
        acc.solve(&mut ctx)?
    };
    let [map] = maps;
    Ok(assemble(checked, Fitted { map, labels, solution }))
}
