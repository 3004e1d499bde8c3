//! Statistics grown batch by batch and merged in any grouping: the library's
//! incremental fit (Python's `partial_fit`) and the per-partition reduce of the engines
//! (Dask, Ray, Spark). The first accumulation fixes every fitted parameter (stages,
//! shift, classes, output code, fingerprint); a later batch maps with those, so the
//! sums stay sums of one feature map and merge exactly.

use std::collections::BTreeSet;
use std::path::Path;

use arrow_array::RecordBatch;

use super::pass::accumulate;
use super::plan::{Prepared, RunOptions, WorkUnit};
use super::shards::{check_parts_match, Statistics};
use super::spec::PipelineSpec;
use super::state::State;
use crate::error::{Error, Result};
use crate::sketch::FeaturePipeline;
use crate::source::Dataset;
use crate::stats::{stats_from_bytes, GramStats};

impl Statistics {
    /// Reads and verifies a part file's bytes (`name` stands for the file in messages).
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Statistics> {
        let path = Path::new(name);
        let (blocks, meta) =
            stats_from_bytes(bytes).map_err(|e| Error::BadModel { path: path.into(), message: e.to_string() })?;
        Statistics::from_blocks(path, blocks, meta)
    }

    /// Statistics of no rows with this part's fitted parameters, as shard `i` of `n`:
    /// give one to each of `n` partitions, [`Statistics::add`] its rows, and
    /// [`Statistics::merge`] the `n` results (each shard once, as `solve` checks).
    pub fn empty_like(&self, shard: (usize, usize)) -> Result<Statistics> {
        let (i, n) = shard;
        if n == 0 || i >= n {
            return Err(Error::config("library", "shard", format!("shard {i}/{n}: need 0 ≤ i < N")));
        }
        self.one_pass()?;
        let zero = |s: &GramStats| GramStats::new(s.shift.clone(), s.c);
        let state = match &self.state {
            State::One { labeled, unlabeled } => {
                State::One { labeled: zero(labeled), unlabeled: unlabeled.as_ref().map(zero) }
            }
            State::Two { .. } | State::Folds { .. } | State::Candidates { .. } | State::Rows(_) => {
                return Err(Error::Internal("a one-pass part holds two-pass, fold or kept-row statistics".into()))
            }
        };
        let mut meta = self.meta.clone();
        (meta.shard, meta.shards, meta.units, meta.merged) = (i, n, Vec::new(), Vec::new());
        Ok(Statistics { origin: self.origin.clone(), meta, state })
    }

    /// Adds the rows of record batches, mapped with this part's fitted parameters. The
    /// batches need the part's feature columns (and label or targets); a label outside
    /// the part's classes is an error naming the batch and row.
    pub fn add(&mut self, spec: &PipelineSpec, batches: Vec<RecordBatch>) -> Result<()> {
        self.one_pass()?;
        spec.check()?;
        check_parts_match(spec, &self.origin, &self.meta)?;
        let data = Dataset::from_batches("record batches", batches, spec.columns())?;
        let want = &self.meta.features;
        if data.features != *want {
            return Err(Error::data(
                data.files[0].location().column(data.features.columns.first().cloned().unwrap_or_default()),
                format!(
                    "the batches have {} features ({}), the statistics {} ({}): give the columns they were started with",
                    data.features.dim,
                    data.features.columns.join(", "),
                    want.dim,
                    want.columns.join(", ")
                ),
            ));
        }
        let State::One { labeled, unlabeled } = &self.state else {
            return Err(Error::Internal("a one-pass part holds two-pass statistics".into()));
        };
        let work: Vec<WorkUnit> = data.units().into_iter().map(|unit| WorkUnit { unlabeled: false, unit }).collect();
        let seed = self.meta.seed.unwrap_or(spec.run.seed);
        let prep = Prepared {
            pipeline: FeaturePipeline::build(&self.meta.stages, want.dim, seed)?,
            labeled: data,
            unlabeled: None,
            classes: self.meta.classes.clone(),
            code: self.meta.output_code()?,
            c: labeled.c,
            stages: self.meta.stages.clone(),
            shift: labeled.shift.clone(),
            fingerprint: self.meta.fingerprint.clone(),
            work,
            semi: unlabeled.is_some(),
            dual: false,
            alternatives: Vec::new(),
        };
        let units: Vec<usize> = (0..prep.work.len()).collect();
        let (more, _) = accumulate(spec, &prep, &units, &RunOptions::default(), &mut |_| {})?;
        self.state.merge(&more).map_err(Error::Internal)
    }

    /// Merges another part of the same run into this one: same fitted parameters and
    /// shard count, no shard or row group in both (merging a part twice would count
    /// its rows twice, so it is refused).
    pub fn merge(&mut self, other: Statistics) -> Result<()> {
        let bad = |message: String| Error::BadModel { path: other.origin.clone(), message };
        let (a, b) = (&self.meta, &other.meta);
        if a.fingerprint != b.fingerprint {
            return Err(bad(format!(
                "written by a different pipeline, data, seed or fitted parameters than {}",
                self.origin.display()
            )));
        }
        if a.pass != b.pass || a.shards != b.shards {
            return Err(bad(format!(
                "pass {} of {} shards does not merge with pass {} of {} shards",
                b.pass, b.shards, a.pass, a.shards
            )));
        }
        let mine: BTreeSet<usize> = std::iter::once(a.shard).chain(a.merged.iter().copied()).collect();
        if let Some(s) = std::iter::once(b.shard).chain(b.merged.iter().copied()).find(|s| mine.contains(s)) {
            return Err(bad(format!("shard {s}/{} is in both; merging it again would count its rows twice", a.shards)));
        }
        let units: BTreeSet<_> = a.units.iter().collect();
        if let Some(u) = b.units.iter().find(|u| units.contains(u)) {
            return Err(bad(format!("row group {} of {} is in both parts", u.2, u.1)));
        }
        self.state.merge(&other.state).map_err(bad)?;
        let Statistics { meta, .. } = other;
        self.meta.merged.push(meta.shard);
        self.meta.merged.extend(meta.merged);
        self.meta.merged.sort_unstable();
        self.meta.units.extend(meta.units);
        Ok(())
    }

    /// The shards this part holds, its own first.
    pub fn shards_held(&self) -> Vec<usize> {
        std::iter::once(self.meta.shard).chain(self.meta.merged.iter().copied()).collect()
    }

    fn one_pass(&self) -> Result<()> {
        if self.meta.pass != 1 || !matches!(self.state, State::One { .. }) {
            return Err(Error::config(
                "library",
                "passes",
                "only one-pass statistics without k-fold grow batch by batch; shard a two-pass or k-fold run with the command line's `accumulate`",
            ));
        }
        Ok(())
    }
}
