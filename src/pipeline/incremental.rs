//! Statistics grown batch by batch and merged in any grouping: the library's
//! incremental fit (Python's `partial_fit`) and the per-partition reduce of the engines
//! (Dask, Ray, Spark). The first accumulation fixes every fitted parameter (stages,
//! shift, classes, output code, fingerprint); a later batch maps with those, so the
//! sums stay sums of one feature map and merge exactly.

use arrow_array::RecordBatch;

use crate::error::{Error, Result};
use crate::pipeline::accumulate::merge_blocks;
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::parts::{check_parts_match, Statistics};
use crate::pipeline::pass::{accumulate, Run};
use crate::pipeline::plan::RunOptions;
use crate::pipeline::prepare::Labels;
use crate::pipeline::prepare::{FittedMap, Prepared, WorkUnit};
use crate::pipeline::report::Reporter;
use crate::pipeline::run::decide;
use crate::source::Dataset;
use crate::stats::GramStats;

impl Statistics {
    /// Statistics of no rows with this part's fitted parameters, as shard `i` of `n`:
    /// give one to each of `n` partitions, [`Statistics::add`] its rows, and
    /// [`Statistics::merge`] the `n` results (each shard once, as `solve` checks).
    pub fn empty_like(&self, shard: impl Into<crate::pipeline::parts::Shard>) -> Result<Statistics> {
        let crate::pipeline::parts::Shard { index: i, count: n } = shard.into().check("shard")?;
        self.one_pass()?;
        let blocks = self.blocks.iter().map(|(name, s)| (name.clone(), GramStats::new(s.shift.clone(), s.c))).collect();
        let mut meta = self.meta.clone();
        (meta.shard, meta.shards, meta.units, meta.merged, meta.inputs) = (i, n, Vec::new(), Vec::new(), Vec::new());
        Ok(Statistics { origin: self.origin.clone(), meta, blocks })
    }

    /// Adds the rows of record batches, mapped with this part's fitted parameters. The
    /// batches need the part's feature columns (and label or targets); a label outside
    /// the part's classes is an error naming the batch and row.
    pub fn add(&mut self, checked: &CheckedPipeline, batches: Vec<RecordBatch>) -> Result<()> {
        self.one_pass()?;
        check_parts_match(checked, &self.origin, &self.meta)?;
        let data = Dataset::from_batches("record batches", batches, checked.columns())?;
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
        let (shift, c) = self.blocks.first().map(|(_, s)| (s.shift.clone(), s.c)).unwrap_or_default();
        let work: Vec<WorkUnit> = data.units().into_iter().map(|unit| WorkUnit { unlabeled: false, unit }).collect();
        let seed = self.meta.seed.unwrap_or(checked.seed());
        // Over a maps file the map is the file's (a landmark stage cannot be redrawn).
        let map = match (&self.meta.maps, &checked.spec().run.maps) {
            (Some(digest), Some(path)) => {
                let maps = crate::maps::Maps::load_with(data.session(), path)?;
                if maps.digest() != digest {
                    return Err(maps.refuse(format!("not the maps these statistics were accumulated with ({digest})")));
                }
                FittedMap { stages: maps.header.stages.clone(), pipeline: maps.pipeline, shift }
            }
            _ => FittedMap::build(self.meta.stages.clone(), want.dim, seed, Some(shift))?,
        };
        let prep = Prepared {
            maps: vec![map],
            labels: Labels {
                classes: self.meta.classes.clone(),
                code: self.meta.output_code()?,
                features: want.clone(),
            },
            labeled: data,
            unlabeled: None,
            c,
            fingerprint: self.meta.fingerprint.clone(),
            work,
            maps_digest: self.meta.maps.clone(),
        };
        let opts = RunOptions { keep_statistics: true, ..RunOptions::default() };
        let mut report = Reporter::silent();
        let plan = decide(checked, &prep, &opts, &mut report)?;
        let run = Run { checked, prep: &prep, plan: &plan, opts: &opts, threads: opts.threads_for(checked) };
        let units: Vec<usize> = (0..prep.work.len()).collect();
        let more = accumulate(&run, &units, &mut report)?;
        let theirs = more.state()?;
        merge_blocks(self.blocks.iter_mut().map(|(n, s)| (n.clone(), s)).collect(), &theirs).map_err(|m| {
            Error::BadModel { path: self.origin.clone(), message: format!("the batches' statistics: {m}") }
        })
    }

    /// Only one-pass statistics without folds grow batch by batch.
    fn one_pass(&self) -> Result<()> {
        let one_pass = self.blocks.iter().all(|(n, _)| n == "labeled" || n == "unlabeled");
        if self.meta.pass != 1 || !one_pass {
            return Err(Error::config(
                "library",
                "passes",
                "only one-pass statistics without k-fold grow batch by batch; shard a two-pass or k-fold run with the command line's `accumulate`",
            ));
        }
        Ok(())
    }
}
