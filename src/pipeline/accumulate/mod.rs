//! One accumulation interface for every run mode, in the shape of DataFusion's
//! `Accumulator`: each mode's pass state — Gram statistics (`gram`), kept rows for the dual
//! (`rows`), fold statistics (`folds`), the candidates' statistics (`candidates`), the two
//! passes (`two_pass`) — adds a mapped chunk ([`Accumulation::update`]), hands out its
//! state as named blocks of statistics ([`Accumulation::state`], what checkpoints and part
//! files hold, and what [`merge_blocks`] merges by name), states its size and solves
//! itself. The pass loop, checkpoints, shards, the library's incremental fits and `solve`
//! go through this trait and never ask which mode runs; the planner's [`Plan`] is the one
//! place that builds an accumulation for a mode.

mod candidates;
mod folds;
mod gram;
mod rows;
mod two_pass;

use crate::error::{Error, Result};
use crate::pipeline::plan::Plan;
use crate::pipeline::prepare::FittedMap;
use crate::pipeline::solve_ctx::{Solution, SolveCtx};
use crate::source::Chunk;
use crate::stats::{Blocks, GramStats, Precision};

/// A mapped chunk as the pass hands it to an accumulation.
pub(crate) struct Batch<'a> {
    /// The chunk as read (its inputs, location and first row).
    pub chunk: &'a Chunk,
    /// Its features, `rows × dim`.
    pub z: &'a [f32],
    /// `D`.
    pub dim: usize,
    /// Which rows are labeled.
    pub labeled: &'a [bool],
    /// The labeled rows' targets, row-major.
    pub y: &'a [f64],
    /// The input file of the chunk (its index in the dataset).
    pub file: usize,
    /// The chunk's row group.
    pub row_group: usize,
    /// Every map of the run (the candidates map the chunk's inputs with their own).
    pub maps: &'a [FittedMap],
}

impl Batch<'_> {
    /// A fault of the chunk's features placed at the chunk (file and row group).
    pub fn data_err(&self) -> impl Fn(Error) -> Error + '_ {
        move |e| match e {
            e @ Error::BadFeature { .. } => Error::data(self.chunk.location.clone(), e.to_string()),
            e => e,
        }
    }
}

/// What every update of a pass shares.
#[derive(Debug)]
pub(crate) struct PassEnv {
    /// Threads for the Gram products.
    pub threads: usize,
    /// Their precision.
    pub gram: Precision,
    /// `run.seed` (k-fold's row hash).
    pub seed: u64,
    /// The block buffers every statistics update of the pass reuses (freed with the pass).
    blocks: std::sync::Mutex<Blocks>,
}

impl PassEnv {
    pub(crate) fn new(threads: usize, gram: Precision, seed: u64) -> PassEnv {
        PassEnv { threads, gram, seed, blocks: Default::default() }
    }

    /// Seconds the pass has spent in the Gram's tile products so far.
    pub(crate) fn gemm_seconds(&self) -> f64 {
        self.blocks.lock().map_or(0.0, |b| b.gemm_seconds())
    }

    /// Adds rows to `stats` at the pass's threads and precision, in its block buffers.
    pub(crate) fn add(&self, stats: &mut GramStats, z: &[f32], y: &[f64], rows: usize) -> Result<()> {
        let mut blocks = self.blocks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        stats.add_reusing(z, y, rows, (self.threads, self.gram), &mut blocks)
    }
}

/// A run mode's pass state.
pub(crate) trait Accumulation: Send + std::fmt::Debug {
    /// Adds a mapped chunk.
    fn update(&mut self, batch: &Batch<'_>, env: &PassEnv) -> Result<()>;

    /// The state as named blocks of statistics (a checkpoint's or a part's layout).
    /// Kept rows are not statistics: a run that keeps them writes no file.
    fn state(&self) -> Result<Vec<(String, &GramStats)>>;

    /// [`Accumulation::state`] taken rather than borrowed (a part written or handed
    /// over): a copy would double the statistics, 16 GiB at D = 65,536.
    fn into_state(self: Box<Self>) -> Result<Vec<(String, GramStats)>>;

    /// Bytes held.
    fn size_bytes(&self) -> u64;

    /// Rows added (labeled and unlabeled; pass one's in two passes).
    fn rows(&self) -> u64;

    /// The pass running (1 or 2).
    fn pass(&self) -> u32 {
        1
    }

    /// Called before a pass runs (two passes resumed in pass two fit the per-stage PCA
    /// of the pass-one statistics they hold).
    fn begin_pass(&mut self, _ctx: &mut SolveCtx<'_>) -> Result<()> {
        Ok(())
    }

    /// Called when a pass is complete; `Ok(true)` when another pass follows (two passes
    /// fit the per-stage PCA here and start pass two's statistics).
    fn end_pass(&mut self, _ctx: &mut SolveCtx<'_>) -> Result<bool> {
        Ok(false)
    }

    /// Solves the state into the model's numbers, by the plan it was built for.
    fn solve(self: Box<Self>, ctx: &mut SolveCtx<'_>) -> Result<Solution>;

    /// Seconds the accumulation spent mapping on its own (the other candidates' maps).
    fn side_map_seconds(&self) -> f64 {
        0.0
    }
}

/// Merges `theirs` into `mine`, block by block: the layouts must be equal, name for
/// name, and each block's shape. The one merge of statistics (shards, partitions,
/// incremental batches), in a fixed order.
pub(crate) fn merge_blocks(
    mut mine: Vec<(String, &mut GramStats)>,
    theirs: &[(String, &GramStats)],
) -> std::result::Result<(), String> {
    let names = |v: Vec<&String>| v.into_iter().cloned().collect::<Vec<_>>().join(", ");
    if mine.len() != theirs.len() || mine.iter().zip(theirs).any(|((a, _), (b, _))| a != b) {
        return Err(format!(
            "statistics of another layout ({} against {}) do not merge",
            names(theirs.iter().map(|(n, _)| n).collect()),
            names(mine.iter().map(|(n, _)| n).collect())
        ));
    }
    for ((name, a), (_, b)) in mine.iter_mut().zip(theirs) {
        if a.dim() != b.dim() || a.c != b.c {
            return Err(format!("statistics of different shapes in {name}"));
        }
        a.merge(b).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

impl Plan {
    /// Fresh state for this plan over the prepared maps.
    pub(crate) fn accumulation(&self, maps: &[FittedMap], outputs: usize, rows: u64) -> Result<Box<dyn Accumulation>> {
        let first = maps.first().ok_or_else(|| Error::bug("a run without a map"))?;
        Ok(match self {
            Plan::Primal(p) => Box::new(gram::PrimalRun::new(p.clone(), &first.shift, outputs)),
            Plan::Sparse(s) => Box::new(gram::SparseRun::new(s.clone(), &first.shift, outputs)),
            Plan::Dual(d) => Box::new(rows::KeptRows::new(d.clone(), first.dim(), outputs, rows)),
            Plan::KFold(k) => Box::new(folds::Folds::new(k.clone(), &first.shift, outputs)),
            Plan::TwoPass(t) => Box::new(two_pass::TwoPassRun::new(t.clone(), first, outputs)),
            Plan::Candidates { plans } => {
                let inner = plans
                    .iter()
                    .zip(maps)
                    .map(|(p, m)| p.accumulation(std::slice::from_ref(m), outputs, rows))
                    .collect::<Result<Vec<_>>>()?;
                Box::new(candidates::CandidateRun::new(inner))
            }
        })
    }

    /// The state of this plan from a statistics file's named blocks (a checkpoint or a
    /// part), taking them rather than copying them. The blocks must be this plan's layout.
    pub(crate) fn accumulation_from(
        &self,
        blocks: Vec<(String, GramStats)>,
        pass: u32,
    ) -> std::result::Result<Box<dyn Accumulation>, String> {
        Ok(match self {
            Plan::Primal(p) => Box::new(gram::PrimalRun::from_blocks(p.clone(), blocks)?),
            Plan::Sparse(s) => Box::new(gram::SparseRun::from_blocks(s.clone(), blocks)?),
            Plan::Dual(_) => return Err("kept rows are never written to a file".into()),
            Plan::KFold(k) => Box::new(folds::Folds::from_blocks(k.clone(), blocks)?),
            Plan::TwoPass(t) => Box::new(two_pass::TwoPassRun::from_blocks(t.clone(), blocks, pass)?),
            Plan::Candidates { plans } => {
                let mut blocks = blocks;
                let mut inner = Vec::new();
                for (i, p) in plans.iter().enumerate() {
                    let prefix = format!("candidate{i}.");
                    let (mine, rest): (Vec<_>, Vec<_>) = blocks.into_iter().partition(|(n, _)| n.starts_with(&prefix));
                    blocks = rest;
                    let mine = mine.into_iter().map(|(n, s)| (n[prefix.len()..].to_string(), s)).collect();
                    inner.push(p.accumulation_from(mine, 1)?);
                }
                if let Some((n, _)) = blocks.first() {
                    return Err(format!("statistics '{n}' of no candidate"));
                }
                Box::new(candidates::CandidateRun::new(inner))
            }
        })
    }
}

/// Takes the block `name` out of `blocks`.
pub(crate) fn take(blocks: &mut Vec<(String, GramStats)>, name: &str) -> Option<GramStats> {
    blocks.iter().position(|(n, _)| n == name).map(|i| blocks.remove(i).1)
}

/// Rows of `v` (width `width`) where `mask` is `keep`.
pub(crate) fn select_rows<T: Copy>(v: &[T], width: usize, mask: &[bool], keep: bool) -> Vec<T> {
    v.chunks_exact(width.max(1)).zip(mask).filter(|(_, &m)| m == keep).flat_map(|(r, _)| r.iter().copied()).collect()
}
