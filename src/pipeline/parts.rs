//! Part files: a shard's statistics with its manifest ([`Statistics`]), written and read
//! back a block at a time, and the one check that parts belong together
//! ([`check_parts`]: one run, each shard once, no row group twice) that `solve`, the
//! library's merges and the engines' reduces all use.

use crate::session::Session;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::codes::OutputCode;
use crate::error::{Error, Result};
use crate::pipeline::accumulate::merge_blocks;
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::keys::{first_difference, statistics_keys};
use crate::sketch::StageSpec;
use crate::source::{Classes, ResolvedFeatures};
use crate::stats::{stats_from_file, stats_to_bytes, GramStats};

/// What a statistics file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// One shard's statistics (`accumulate`, the library's partitions).
    Shard,
    /// The merged pass one of a sharded two-pass run (`solve` of pass-one parts).
    Pass1,
    /// A run's own checkpoint.
    Checkpoint,
}

/// A row group's identity in a manifest: (unlabeled, file path, row group).
pub(crate) type UnitId = (bool, String, usize);

/// A shard's manifest, stored in its statistics file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PartMeta {
    pub(crate) kind: FileKind,
    pub(crate) fingerprint: String,
    pub(crate) shard: usize,
    pub(crate) shards: usize,
    pub(crate) units: Vec<UnitId>,
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
    /// The pipeline keys that decide the statistics, as accumulated (`keys.rs`).
    #[serde(default)]
    pub(crate) map_keys: Option<serde_json::Value>,
    /// The output code's rows (ECOC), as the targets were encoded.
    #[serde(default)]
    pub(crate) code: Option<Vec<Vec<i8>>>,
    /// Other shards of the same run merged into this part (see `Statistics::merge`).
    #[serde(default)]
    pub(crate) merged: Vec<usize>,
    /// The digest of the maps file the part was accumulated with (`--maps`): such parts
    /// merge with any parts of the same maps, whatever data they read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) maps: Option<String>,
    /// Every row group the part read, as `path|size|footer#row group` (the canonical
    /// path; an object: `url|size|etag|footer#row group`), so that no rows are counted
    /// twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) inputs: Vec<String>,
}

fn pass_one() -> u32 {
    1
}

impl PartMeta {
    /// The code the part's targets were encoded with.
    pub(crate) fn output_code(&self) -> Result<Option<OutputCode>> {
        match (&self.classes, &self.code) {
            (None, _) => Ok(None),
            (Some(k), None) => Ok(Some(OutputCode::OneVsAll { classes: k.len() })),
            (Some(_), Some(rows)) => {
                OutputCode::from_rows(rows).map(Some).map_err(|e| Error::bug_from("a part's output code is a code", e))
            }
        }
    }

    /// The shards the part holds, its own first.
    pub(crate) fn shards_held(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.shard).chain(self.merged.iter().copied())
    }

    /// The keys recorded for a pipeline.
    pub(crate) fn keys_of(checked: &CheckedPipeline) -> serde_json::Value {
        serde_json::Value::Object(statistics_keys(checked.spec()))
    }
}

/// Named blocks of statistics, as a file holds them.
pub(crate) type Blocks = Vec<(String, GramStats)>;

/// A statistics file: its named blocks and its meta value.
pub(crate) type StatsFile = (Blocks, serde_json::Value);

/// `input`: a file this run only reads (parts), as opposed to its own checkpoint. Read a
/// block at a time into the statistics (a 16 GiB part needs 16 GiB, not 32).
pub(crate) fn read_stats(session: &Session, path: &Path, input: bool) -> Result<StatsFile> {
    let bad = |message: String| Error::BadModel { path: path.into(), message };
    let file = if input { crate::atomic::open_input(session, path)? } else { crate::atomic::open_own(session, path)? };
    stats_from_file(file).map_err(|e| bad(e.to_string()))
}

/// The one check that parts belong to one run: the same fingerprint (pipeline, data,
/// seed and fitted parameters), output code, pass and shard count as the first; no shard
/// in two of them; no row group in two of them. Names the part at fault.
pub(crate) fn check_parts(parts: &[(&Path, &PartMeta)]) -> Result<()> {
    let Some(&(first_path, first)) = parts.first() else { return Ok(()) };
    if first.maps.is_some() || parts.iter().any(|(_, m)| m.maps.is_some()) {
        return check_parts_of_maps(parts);
    }
    let mut seen_units = BTreeSet::new();
    let mut seen_shards = std::collections::BTreeMap::new();
    for &(path, m) in parts {
        let bad = |message: String| Error::BadModel { path: path.to_path_buf(), message };
        if m.fingerprint != first.fingerprint {
            return Err(bad(format!(
                "written by a different pipeline, data, seed or fitted parameters than {}",
                first_path.display()
            )));
        }
        // The fingerprint covers a code file's rows since this release; the codes
        // themselves are compared too, so parts written before it cannot mix codes.
        if m.code != first.code {
            return Err(bad(format!(
                "built with another output code than {} (was ridge.code_file edited between the shards?); accumulate every shard with one code",
                first_path.display()
            )));
        }
        if m.pass != first.pass || m.shards != first.shards {
            return Err(bad(format!(
                "pass {} of {} shards does not belong with pass {} of {} shards",
                m.pass, m.shards, first.pass, first.shards
            )));
        }
        for shard in m.shards_held() {
            if let Some(other) = seen_shards.insert(shard, path) {
                return Err(bad(format!(
                    "shard {shard}/{} is in both {} and {}: given twice, merging it again would count its rows twice",
                    m.shards,
                    other.display(),
                    path.display()
                )));
            }
        }
        for u in &m.units {
            if !seen_units.insert(u.clone()) {
                return Err(bad(format!("row group {} of {} is in two parts", u.2, u.1)));
            }
        }
    }
    Ok(())
}

/// The check of parts accumulated with one maps file: each names the same maps, keys and
/// code (so their sums are of one map), and no row group of an input is in two of them
/// (inputs compared by their canonical path or URL), which would count its rows twice.
fn check_parts_of_maps(parts: &[(&Path, &PartMeta)]) -> Result<()> {
    let Some(&(first_path, first)) = parts.first() else { return Ok(()) };
    let mut seen: std::collections::BTreeMap<(String, String), (usize, &Path)> = std::collections::BTreeMap::new();
    for (k, &(path, m)) in parts.iter().enumerate() {
        let bad = |message: String| Error::BadModel { path: path.to_path_buf(), message };
        if m.maps != first.maps {
            let name = |d: &Option<String>| d.as_deref().map_or("no maps file".to_string(), |d| format!("maps {d}"));
            return Err(bad(format!(
                "accumulated with {}, {} with {}: parts merge only over one maps file",
                name(&m.maps),
                first_path.display(),
                name(&first.maps)
            )));
        }
        if m.fingerprint != first.fingerprint || m.code != first.code || m.pass != first.pass {
            return Err(bad(format!(
                "accumulated with other pipeline keys or code than {} (over the same maps): accumulate both with one pipeline",
                first_path.display()
            )));
        }
        for input in &m.inputs {
            let (id, rg) = input.rsplit_once('#').unwrap_or((input.as_str(), "0"));
            let name = id.split('|').next().unwrap_or(id).to_string();
            if let Some((j, other)) = seen.insert((name.clone(), rg.to_string()), (k, path)) {
                if j != k {
                    return Err(bad(format!(
                        "read row group {rg} of {name}, and {} read it too: its rows would be counted twice; leave one of the parts out",
                        other.display()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Refuses to solve parts with a pipeline whose statistics keys differ from theirs,
/// naming the first key that differs.
pub(crate) fn check_parts_match(checked: &CheckedPipeline, part: &Path, meta: &PartMeta) -> Result<()> {
    let spec = checked.spec();
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
    if let Some((k, v)) = first_difference(spec, keys) {
        return Err(Error::config(
            file,
            k,
            format!(
                "differs from the parts' ({}: {v}); solve with the pipeline they were accumulated with",
                part.display()
            ),
        ));
    }
    Ok(())
}

/// A shard's statistics and manifest, as a part file holds them.
#[derive(Debug, Clone)]
pub struct Statistics {
    /// Where it was read from, or what it was made from (for messages).
    pub origin: PathBuf,
    pub(crate) meta: PartMeta,
    pub(crate) blocks: Vec<(String, GramStats)>,
}

impl Statistics {
    /// Rows accumulated (labeled and unlabeled; pass one's for a two-pass part one).
    pub fn rows(&self) -> u64 {
        self.blocks.first().map_or(0, |(_, s)| s.n)
    }

    /// `(shard, shards)`.
    pub fn shard(&self) -> (usize, usize) {
        (self.meta.shard, self.meta.shards)
    }

    /// The shards this part holds, its own first.
    pub fn shards_held(&self) -> Vec<usize> {
        self.meta.shards_held().collect()
    }

    fn named(&self) -> Vec<(&str, &GramStats)> {
        self.blocks.iter().map(|(n, s)| (n.as_str(), s)).collect()
    }

    /// The part file's bytes (read back before they are returned).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        stats_to_bytes(&self.named(), serde_json::to_value(&self.meta).unwrap_or_default())
    }

    /// Writes the part file (streamed: no copy of the statistics in memory), atomically;
    /// storage options from the environment ([`Statistics::save_with`] takes a session).
    pub fn save(&self, path: &Path) -> Result<()> {
        self.save_with(&Session::new(), path)
    }

    /// [`Statistics::save`] in `session`: its storage options, never over its inputs.
    pub fn save_with(&self, session: &Session, path: &Path) -> Result<()> {
        let meta = serde_json::to_value(&self.meta).unwrap_or_default();
        crate::stats::stats_to_file(session, path, &self.named(), meta)
    }

    /// Reads and verifies a part file (storage options from the environment;
    /// [`Statistics::load_with`] takes a session).
    pub fn load(path: &Path) -> Result<Statistics> {
        Statistics::load_with(&Session::new(), path)
    }

    /// [`Statistics::load`] in `session`, which registers the file as one of its inputs.
    pub fn load_with(session: &Session, path: &Path) -> Result<Statistics> {
        let (blocks, meta) = read_stats(session, path, true)?;
        Statistics::from_blocks(path, blocks, meta)
    }

    /// Reads and verifies a part file's bytes (`name` stands for the file in messages).
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Statistics> {
        let path = Path::new(name);
        let (blocks, meta) = crate::stats::stats_from_bytes(bytes)
            .map_err(|e| Error::BadModel { path: path.into(), message: e.to_string() })?;
        Statistics::from_blocks(path, blocks, meta)
    }

    pub(crate) fn from_blocks(
        path: &Path,
        blocks: Vec<(String, GramStats)>,
        meta: serde_json::Value,
    ) -> Result<Statistics> {
        let bad = |message: String| Error::BadModel { path: path.to_path_buf(), message };
        let meta: PartMeta = serde_json::from_value(meta).map_err(|e| bad(format!("not a shard's statistics: {e}")))?;
        if meta.kind != FileKind::Shard {
            return Err(bad("not a shard's statistics".into()));
        }
        if meta.pass == 2 && !blocks.iter().any(|(n, _)| n == "pass2") {
            return Err(bad("no pass-two statistics".into()));
        }
        Ok(Statistics { origin: path.to_path_buf(), meta, blocks })
    }

    /// Merges another part of the same run into this one: same fitted parameters and
    /// shard count, no shard or row group in both (merging a part twice would count
    /// its rows twice, so it is refused).
    pub fn merge(&mut self, other: Statistics) -> Result<()> {
        check_parts(&[(&self.origin, &self.meta), (&other.origin, &other.meta)])?;
        let bad = |message: String| Error::BadModel { path: other.origin.clone(), message };
        let theirs: Vec<(String, &GramStats)> = other.blocks.iter().map(|(n, s)| (n.clone(), s)).collect();
        merge_blocks(self.blocks.iter_mut().map(|(n, s)| (n.clone(), s)).collect(), &theirs).map_err(bad)?;
        let Statistics { meta, .. } = other;
        self.meta.merged.push(meta.shard);
        self.meta.merged.extend(meta.merged);
        self.meta.merged.sort_unstable();
        self.meta.units.extend(meta.units);
        self.meta.inputs.extend(meta.inputs);
        Ok(())
    }
}

/// The merged pass-one statistics of a sharded two-pass run, and the file's checksum.
pub(crate) fn load_pass1(
    session: &Session,
    path: &Path,
    fingerprint: Option<&str>,
) -> Result<(Blocks, PartMeta, String)> {
    let bad = |message: String| Error::BadModel { path: path.into(), message };
    let (blocks, meta) = read_stats(session, path, true)?;
    let meta: PartMeta =
        serde_json::from_value(meta).map_err(|e| bad(format!("not merged pass-one statistics: {e}")))?;
    if meta.kind != FileKind::Pass1 {
        return Err(bad("not merged pass-one statistics (made by `solve` from pass-one parts)".into()));
    }
    if fingerprint.is_some_and(|f| f != meta.fingerprint) {
        return Err(bad("written by a different pipeline, data or seed".into()));
    }
    if !blocks.iter().any(|(n, _)| n.starts_with("pass1.")) {
        return Err(bad("no pass-one statistics".into()));
    }
    let blocks = blocks.into_iter().filter(|(n, _)| n.starts_with("pass1.")).collect();
    Ok((blocks, meta, crate::container::file_checksum(session, path).map_err(|e| Error::io(path, e))?))
}

/// Which part of a sharded run a process accumulates: every `count`-th row group from the
/// `index`-th (in the order of the inputs). A pair `(index, count)` converts into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// `i`, from 0.
    pub index: usize,
    /// `N`, the run's shards.
    pub count: usize,
}

impl Shard {
    /// The whole run as one shard.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Refuses a shard that is not `0 ≤ i < N`, naming `key` (the flag or parameter).
    pub fn check(self, key: &str) -> Result<Shard> {
        if self.count == 0 || self.index >= self.count {
            let (i, n) = (self.index, self.count);
            return Err(Error::usage(key, format!("shard {i}/{n}: need 0 ≤ i < N")));
        }
        Ok(self)
    }
}

impl From<(usize, usize)> for Shard {
    fn from((index, count): (usize, usize)) -> Shard {
        Shard { index, count }
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Parses `i/N`.
pub fn parse_shard(s: &str) -> Result<Shard> {
    let bad = || Error::usage("--shard", format!("'{s}' is not i/N with 0 ≤ i < N"));
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    Shard::from((i, n)).check("--shard").map_err(|_| bad())
}

/// How `solve` takes its parts, beyond the parts themselves.
#[derive(Debug, Clone, Copy, Default)]
pub struct PartsSolve<'a> {
    /// Solve although some shards of the run are missing (`--allow-partial`).
    pub allow_partial: bool,
    /// The merged pass-one file a two-pass run's pass-two parts were made over (`--pass1`).
    pub pass1: Option<&'a Path>,
}

/// Weights of the parts `solve` merges, in the order they are given (a sorted glob of
/// daily parts: oldest first). Each part's sums are scaled by its weight before they add,
/// so the model is weighted ridge over the rows: old days count less, smoothly.
#[derive(Debug, Clone, PartialEq)]
pub enum PartWeights {
    /// `--decay H`: the newest part weighs 1 and every part `H` parts older half as much,
    /// `w_k = 2^(−(P−1−k)/H)`. Exponential, so a merged window decayed this way and
    /// solved later with one more day weighs alike to the same days decayed at once.
    HalfLife(f64),
    /// `--weights`: one weight per part, in order.
    Each(Vec<f64>),
}

impl PartWeights {
    /// The weight of each of `parts` parts; every one finite and positive, or the flag's
    /// usage error.
    pub fn resolve(&self, parts: usize) -> Result<Vec<f64>> {
        let flag = self.flag();
        let weights: Vec<f64> = match self {
            PartWeights::HalfLife(h) if h.is_finite() && *h > 0.0 => {
                (0..parts).map(|k| (-((parts - 1 - k) as f64) / h).exp2()).collect()
            }
            PartWeights::HalfLife(h) => {
                return Err(Error::usage("--decay", format!("a half-life of {h} parts; give a number above 0")))
            }
            PartWeights::Each(w) if w.len() != parts => {
                return Err(Error::usage(
                    "--weights",
                    format!("{} weight(s) for {parts} part(s); give one per part, in the parts' order", w.len()),
                ))
            }
            PartWeights::Each(w) => w.clone(),
        };
        if let Some((k, w)) = weights.iter().enumerate().find(|(_, w)| !(w.is_finite() && **w > 0.0)) {
            return Err(Error::usage(
                flag,
                format!("part {} has weight {w}; weights are above 0 (leave a part out to drop it)", k + 1),
            ));
        }
        Ok(weights)
    }

    /// The flag these weights came from, for the refusals that name it.
    pub fn flag(&self) -> &'static str {
        match self {
            PartWeights::HalfLife(_) => "--decay",
            PartWeights::Each(_) => "--weights",
        }
    }
}
