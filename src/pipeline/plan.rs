//! The planner: a [`CheckedPipeline`], what the inputs are ([`Facts`]) and how the run is
//! driven ([`RunOptions`]) become one [`Plan`] before the first row is read. Every rule
//! that depends on the data or the run — dual or primal, the solve path `auto` takes,
//! dense or block Krylov PCA, in place or not, whether the statistics fit in memory — is
//! decided here, once, and the refusal names its key. The pass, the checkpoints, the shards
//! and the solve run the plan and never re-derive it.

use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::pipeline::check::{CheckedPipeline, Learner, PcaSettings, Selection, SparseSettings, DUAL_NEEDS};
use crate::pipeline::spec::PcaMethod;
pub use crate::solve::RidgeSolve;
use crate::solve::{Components, LambdaChoice, SolvePath};
use crate::stats::{GramStats, Precision};

mod memory;
mod solve;

pub use memory::MemoryPlan;
use memory::COPY_WHEN_ON_DISK_MAX;
pub(crate) use memory::{chunk_rows_for, memory_limit, mib};
pub use solve::Refit;

/// How a run is driven, beyond the pipeline file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The session the run belongs to: its storage, the files it reads and writes (a
    /// default one is fresh, with the environment's storage settings only).
    pub session: crate::session::Session,
    /// A maps file (`--maps`) whose fitted maps the run uses instead of a pre-pass.
    pub maps: Option<PathBuf>,
    /// Where `solve` writes the merged statistics of parts over a maps file as one part
    /// (`--statistics`), before it solves them.
    pub statistics: Option<PathBuf>,
    /// How `solve` weighs parts over a maps file (none: every row weighs 1).
    pub weights: Option<crate::pipeline::parts::PartWeights>,
    /// Show a progress bar.
    pub progress: bool,
    /// Where to write checkpoints (none: no checkpoints).
    pub checkpoint: Option<PathBuf>,
    /// Resume from the checkpoint.
    pub resume: bool,
    /// Where the result will be written, checked before the pass (none: not checked).
    pub output: Option<PathBuf>,
    /// Where the run's report will be written (`--report`), checked with the other outputs.
    pub report: Option<PathBuf>,
    /// Worker threads; 0 takes `run.threads` (whose 0 is every core).
    pub threads: usize,
    /// The statistics are safe on disk when the solve starts (a checkpoint is kept, or
    /// they were read from part files), so a large fixed-λ solve may factor them in place.
    pub stats_on_disk: bool,
    /// The run's product is its statistics (`accumulate`, shards, incremental fits): it
    /// never keeps rows for the dual instead.
    pub keep_statistics: bool,
    /// The statistics come from part files (`solve`).
    pub from_parts: bool,
}

impl RunOptions {
    /// The threads in force for `checked`.
    pub fn threads_for(&self, checked: &CheckedPipeline) -> usize {
        match (self.threads, checked.spec().run.threads) {
            (0, 0) => std::thread::available_parallelism().map_or(1, |n| n.get()),
            (0, t) | (t, _) => t,
        }
    }
}

/// What the planner needs to know of the inputs and the fitted maps.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Input width `d`.
    pub d: usize,
    /// Each candidate's feature dimension `D` (one entry without candidates).
    pub dims: Vec<usize>,
    /// Each stage's output width (two passes).
    pub stage_dims: Vec<usize>,
    /// Outputs `c`.
    pub outputs: usize,
    /// Rows of the labeled inputs.
    pub labeled_rows: u64,
    /// Rows of the unlabeled inputs.
    pub unlabeled_rows: u64,
    /// Input files.
    pub files: usize,
    /// The maps' dense random parameters (a bound).
    pub map_bytes: u64,
    /// Row-group bytes fetched from an object store held at once (0 for local files).
    pub fetch_bytes: u64,
}

/// How one PCA is found.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PcaPlan {
    /// Components asked for.
    pub components: Components,
    /// `Some(E)`: the top `E` pairs by block Krylov on the tiled Gram; `None`: dense.
    pub krylov: Option<usize>,
    /// Block Krylov's residual tolerance.
    pub tolerance: f64,
}

/// Ridge on one pass of Gram statistics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Primal {
    /// The precision of the pass's Gram products (`run.gram`).
    pub gram: Precision,
    /// The solve of the statistics as accumulated.
    pub solve: RidgeSolve,
    /// The PCA (none: ridge on all `D` features).
    pub pca: Option<PcaPlan>,
    /// Unlabeled rows are kept apart (they enter the PCA only).
    pub semi: bool,
    /// How λ is settled.
    pub selection: Selection,
    /// The solve at the chosen λ on train ∪ validation (held-out selection with refit).
    pub refit: Option<Refit>,
}

/// Ridge on the kept rows' `n × n` kernel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dual {
    /// Fixed λ or GCV.
    pub lambda: LambdaChoice,
    /// Labeled rows kept.
    pub rows: u64,
}

/// λ by k-fold cross-validation, then the refit on every row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KFold {
    /// The precision of the pass's Gram products (`run.gram`).
    pub gram: Precision,
    /// Folds.
    pub k: usize,
    /// The refit at the chosen λ.
    pub refit: Refit,
}

/// Two passes: a PCA per stage, then ridge on the projected features.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TwoPass {
    /// The precision of the pass's Gram products (`run.gram`).
    pub gram: Precision,
    /// Each stage's PCA.
    pub stages: Vec<PcaPlan>,
    /// The solve of pass two's statistics.
    pub solve: RidgeSolve,
    /// How λ is settled.
    pub selection: Selection,
    /// The refit at the chosen λ.
    pub refit: Option<Refit>,
    /// Outputs `c` (pass two's targets).
    pub outputs: usize,
}

/// A sparse learner on one pass of Gram statistics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sparse {
    /// The precision of the pass's Gram products (`run.gram`).
    pub gram: Precision,
    /// The learner.
    #[serde(skip)]
    pub settings: SparseSettings,
    /// The PCA basis it works in (none: the raw features).
    pub pca: Option<PcaPlan>,
    /// Unlabeled rows are kept apart.
    pub semi: bool,
}

/// Which run this is, and everything its mode needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Plan {
    /// One pass, ridge on the statistics.
    Primal(Primal),
    /// One pass keeping the rows, ridge in the dual.
    Dual(Dual),
    /// One pass of fold statistics, λ by k-fold.
    KFold(KFold),
    /// Kernel candidates in one pass, each with its own plan (primal or k-fold).
    Candidates {
        /// One plan per candidate, the first the prepared map's.
        plans: Vec<Plan>,
    },
    /// Two passes.
    TwoPass(TwoPass),
    /// One pass, a sparse learner.
    Sparse(Sparse),
}

/// The planner's view of one run: the pipeline, the options and the limit.
struct Planner<'a> {
    checked: &'a CheckedPipeline,
    opts: &'a RunOptions,
    facts: &'a Facts,
    limit: Option<u64>,
    /// The run's driver keeps the statistics in its checkpoint before a solve consumes
    /// them (not a candidate's solve, nor a solve of parts).
    keeps: bool,
}

impl Plan {
    /// Decides the run and the memory it needs. Refuses what cannot run — the dual asked
    /// for where it cannot take the run, candidates in parts — naming the key; whether
    /// the memory fits is [`MemoryPlan::check`], once its line has been said.
    pub fn decide(checked: &CheckedPipeline, facts: &Facts, opts: &RunOptions) -> Result<(Plan, MemoryPlan)> {
        let keeps = opts.checkpoint.is_some() && !opts.from_parts;
        let planner = Planner { checked, opts, facts, limit: memory_limit(checked, facts.map_bytes), keeps };
        let plan = planner.plan()?;
        let mut memory = match &plan {
            Plan::Dual(d) => planner.dual_memory(d),
            _ => planner.gram_memory(&plan),
        };
        memory.hint = planner.hint(&plan);
        Ok((plan, memory))
    }

    /// The first solve is a fixed-λ Cholesky that consumes the Gram (the memory line
    /// counts no copy for it).
    pub fn factors_in_place(&self) -> bool {
        match self {
            Plan::Primal(p) => p.solve.consumes(),
            Plan::TwoPass(t) => t.solve.consumes(),
            _ => false,
        }
    }

    /// Some solve of this plan may consume the pass's statistics: a Cholesky in place,
    /// first or in the refit at the chosen λ (which merges the held-out rows into them).
    pub fn consumes_statistics(&self) -> bool {
        let refit = |r: &Option<Refit>| r.is_some_and(Refit::consumes);
        match self {
            Plan::Primal(p) => p.solve.consumes() || refit(&p.refit),
            Plan::TwoPass(t) => t.solve.consumes() || refit(&t.refit),
            Plan::KFold(k) => k.refit.consumes(),
            _ => false,
        }
    }

    /// The first solve's mixed-precision factor takes the Gram's memory, the f64 Gram
    /// spilled to disk.
    pub fn spills(&self) -> bool {
        match self {
            Plan::Primal(p) => p.solve.spills(),
            Plan::TwoPass(t) => t.solve.spills(),
            _ => false,
        }
    }

    /// The path named in the model and the memory line.
    pub fn path(&self) -> SolvePath {
        match self {
            Plan::Primal(p) => p.solve.path(),
            Plan::TwoPass(t) => t.solve.path(),
            Plan::KFold(_) => SolvePath::Tridiagonal,
            Plan::Dual(_) => SolvePath::Dual,
            Plan::Sparse(_) => SolvePath::Eigen,
            Plan::Candidates { plans } => plans.first().map_or(SolvePath::Eigen, Plan::path),
        }
    }

    /// The precision of the pass's Gram products (the dual keeps rows, not a Gram).
    pub fn gram(&self) -> Precision {
        match self {
            Plan::Primal(Primal { gram, .. })
            | Plan::KFold(KFold { gram, .. })
            | Plan::TwoPass(TwoPass { gram, .. })
            | Plan::Sparse(Sparse { gram, .. }) => *gram,
            Plan::Candidates { plans } => plans.first().map_or(Precision::F64, Plan::gram),
            Plan::Dual(_) => Precision::F64,
        }
    }

    /// The run keeps its rows (the dual).
    pub fn keeps_rows(&self) -> bool {
        matches!(self, Plan::Dual(_))
    }
}

impl Planner<'_> {
    fn plan(&self) -> Result<Plan> {
        let c = self.checked;
        if let Some(set) = &c.candidates {
            if self.opts.keep_statistics || self.opts.from_parts {
                return Err(Error::config(
                    c.source(),
                    format!("{}.candidates", set.key.rsplit_once('.').map_or(set.key.as_str(), |(s, _)| s)),
                    "candidates run in one process (`train`); to shard, give each candidate its own pipeline",
                ));
            }
            let plans = set
                .pipelines
                .iter()
                .zip(&self.facts.dims)
                .map(|(p, &dim)| Planner { checked: p, keeps: false, ..*self }.one(dim))
                .collect::<Result<_>>()?;
            return Ok(Plan::Candidates { plans });
        }
        let dim = self.facts.dims.first().copied().unwrap_or(0);
        if let Some(dual) = self.dual(dim)? {
            return Ok(Plan::Dual(dual));
        }
        self.one(dim).map(|plan| self.settle(plan))
    }

    /// The plan of one map of `dim` features (no candidates).
    fn one(&self, dim: usize) -> Result<Plan> {
        let c = self.checked;
        let gram = c.spec().run.gram;
        if let Some(settings) = c.sparse() {
            let pca = (c.components != Components::All).then(|| self.pca(c.components, dim));
            return Ok(Plan::Sparse(Sparse { gram, settings: settings.clone(), pca, semi: c.semi }));
        }
        if let Selection::KFold { k } = c.selection {
            // The refit is at a fixed λ: `auto` factors once; a named path is kept.
            let refit = match c.learner {
                Learner::Ridge { solver: SolvePath::Tridiagonal } => Refit::Tridiagonal,
                Learner::Ridge { solver: SolvePath::Eigen } => Refit::Eigen,
                Learner::Ridge { solver: SolvePath::CholeskyF32 } => {
                    Refit::Cholesky(self.cholesky(SolvePath::CholeskyF32, dim, 1))
                }
                _ => Refit::Cholesky(self.cholesky(SolvePath::Cholesky, dim, 1)),
            };
            return Ok(Plan::KFold(KFold { gram, k, refit }));
        }
        if c.passes() == 2 {
            let stages = c.per_stage.iter().zip(&self.facts.stage_dims).map(|(&e, &w)| self.pca(e, w)).collect();
            let e = self.two_pass_width();
            let solve = self.ridge_solve(true, e, 1)?;
            let refit = self.refit(solve, e);
            return Ok(Plan::TwoPass(TwoPass {
                gram,
                stages,
                solve,
                selection: c.selection,
                refit,
                outputs: self.facts.outputs,
            }));
        }
        let use_pca = c.components != Components::All;
        let sets = if c.semi { 2 } else { 1 };
        let solve = self.ridge_solve(!use_pca && !c.semi, dim, sets)?;
        let pca = use_pca.then(|| self.pca(c.components, dim));
        let refit = self.refit(solve, dim);
        Ok(Plan::Primal(Primal { gram, solve, pca, semi: c.semi, selection: c.selection, refit }))
    }

    /// The projected width of a two-pass run: each stage's components (its width when
    /// the share is decided by the spectrum).
    fn two_pass_width(&self) -> usize {
        self.checked
            .per_stage
            .iter()
            .zip(&self.facts.stage_dims)
            .map(|(e, &w)| match e {
                Components::Fixed(e) => (*e).min(w),
                _ => w,
            })
            .sum()
    }

    /// Dense or block Krylov for `E` of `dim`: block Krylov's basis grows to about 3E, so
    /// it beats the dense decomposition up to about E = D/8 and costs more near D/4
    /// (`SECTIONS=solve scripts/bench.sh`). `auto` takes it up to D/8 from D = 2048
    /// (below, dense is fast and exact to rounding) and up to D/4 where the dense matrices
    /// would not fit.
    fn pca(&self, components: Components, dim: usize) -> PcaPlan {
        let PcaSettings { method, tolerance } = self.checked.pca;
        let krylov = match (method, components) {
            (PcaMethod::Subspace, Components::Fixed(e)) => Some(e),
            (PcaMethod::Auto, Components::Fixed(e))
                if (dim >= 2048 && e.saturating_mul(8) <= dim)
                    || (e.saturating_mul(4) <= dim
                        && self.limit.is_some_and(|l| SolvePath::Eigen.bytes(dim, 0) > l)) =>
            {
                Some(e)
            }
            _ => None,
        };
        PcaPlan { components, krylov, tolerance }
    }

    /// The dual, when it takes the run (math.md §13.7): with at most `D/2` labeled rows
    /// the `n × n` kernel matrix is smaller than the Gram and cheaper to build (`n²D`
    /// against `nD²`) and to factor. `auto` takes it when the question is ridge on all
    /// features at a fixed λ > 0 or by GCV; `ridge.solver = "dual"` is refused where it
    /// cannot take the run.
    fn dual(&self, dim: usize) -> Result<Option<Dual>> {
        let c = self.checked;
        let rows = self.facts.labeled_rows;
        let statistics = self.opts.keep_statistics || self.opts.from_parts;
        let eligible = c.dual_question() && !statistics && rows >= 2 && 2 * rows <= dim as u64;
        match &c.learner {
            Learner::Ridge { solver: SolvePath::Auto } if eligible => {}
            Learner::Ridge { solver: SolvePath::Dual } if eligible => {}
            Learner::Ridge { solver: SolvePath::Dual } => {
                return Err(Error::config(c.source(), "ridge.solver", DUAL_NEEDS.to_string()))
            }
            _ => return Ok(None),
        }
        Ok(Some(Dual { lambda: c.selection.lambda(), rows }))
    }

    fn hint(&self, plan: &Plan) -> String {
        match plan {
            Plan::Dual(_) => "lower the stages' dim or raise run.memory_limit_mib (the dual path holds the mapped rows and an n × n matrix)",
            Plan::Primal(Primal { pca: Some(PcaPlan { krylov: Some(_), .. }), .. }) => "lower pca.components or the stages' dim, or raise run.memory_limit_mib: block Krylov keeps a basis of about 3E columns and its product, 6·D·E doubles",
            _ => match plan.path() {
                SolvePath::Eigen => "lower the stages' dim (the Gram grows as D²), raise run.memory_limit_mib, or drop PCA: the dense eigendecomposition needs 3·D² doubles where a fixed λ (Cholesky) needs none beyond the statistics",
                SolvePath::Tridiagonal => "lower the stages' dim, raise run.memory_limit_mib, or fix ridge.lambda: GCV needs one dense D × D matrix, a fixed λ solves in place",
                _ => "lower the stages' dim (the Gram grows as D²) or raise run.memory_limit_mib",
            },
        }
        .into()
    }

    /// The pass's buffers: two chunks' features alive at once (one mapped while the
    /// other is added) and the Gram's scratch; none for statistics read from parts.
    fn buffers(&self, chunk: usize, d: usize, dim: usize) -> u64 {
        if self.opts.from_parts {
            0
        } else {
            let threads = self.opts.threads_for(self.checked);
            (4 * chunk * (d * 4 + 2 * dim)) as u64
                + GramStats::scratch_bytes(dim, self.checked.spec().run.gram, threads)
        }
    }

    fn gram_memory(&self, plan: &Plan) -> MemoryPlan {
        let f = self.facts;
        let (d, c) = (f.d, f.outputs);
        let dim = f.dims.first().copied().unwrap_or(0);
        let checked = self.checked;
        let chunk = chunk_rows_for(checked.spec().run.chunk_rows, dim, false);
        let kfold = match checked.selection {
            Selection::KFold { k } => Some(k),
            _ => None,
        };
        let (stats, solve_dim) = if let Plan::TwoPass(_) = plan {
            let e = self.two_pass_width();
            (f.stage_dims.iter().map(|&w| GramStats::bytes_for(w, 0)).sum::<u64>() + GramStats::bytes_for(e, c), e)
        } else {
            // k-fold keeps one set of statistics per fold (their total is the sum).
            let sets = if checked.semi { 2 } else { kfold.unwrap_or(1) as u64 };
            (f.dims.iter().map(|&w| GramStats::bytes_for(w, c)).sum::<u64>() * sets, dim)
        };
        // Two chunks' features are alive at once (one mapped while the other is added).
        let buffers = self.buffers(chunk, d, dim);
        let path = plan.path();
        // The chunk buffers are gone by the solve: the copy has to fit beside the statistics.
        let in_place = plan.factors_in_place();
        let solve = match (in_place, plan.spills()) {
            (true, true) => SolvePath::spilled_bytes(solve_dim, c),
            (true, false) => path.in_place_bytes(solve_dim, c),
            (false, _) => path.bytes(solve_dim, c),
        };
        // Where a PCA runs, its own memory: block Krylov keeps a basis, not the dense path's
        // 3·D²; two passes decompose each stage's statistics before pass two's solve.
        let (solve, path_name) = match plan {
            Plan::Primal(Primal { pca: Some(p), .. }) | Plan::Sparse(Sparse { pca: Some(p), .. }) => (
                p.bytes(dim, c),
                p.krylov.map_or(format!("{} path", path.name()), |e| format!("block Krylov PCA of {e} components")),
            ),
            Plan::TwoPass(t) => (
                t.stages.iter().zip(&f.stage_dims).map(|(p, &w)| p.bytes(w, c)).fold(solve, u64::max),
                format!("{} path, or a stage's PCA before it", path.name()),
            ),
            _ => (solve, format!("{} path", path.name())),
        };
        // A refit keeps the validation rows' statistics beside the solve's matrices.
        let refit = matches!(checked.selection, Selection::HeldOut { refit: true, .. });
        let mut held_out = if refit { GramStats::bytes_for(solve_dim, c) } else { 0 };
        // Scoring the held-out rows streams them during the solve, beside its matrices:
        // a chunk's features in f32, in f64 and centred (20 bytes a value; 671 MB at any
        // large D, where the chunk cap keeps chunk × D fixed).
        if matches!(checked.selection, Selection::HeldOut { .. }) {
            held_out += (20 * chunk * dim) as u64;
        }
        // k-fold's solve: the total and one fold's complement beside the reduction, and
        // every fold's 41 weight sets.
        if let Some(k) = kfold {
            held_out += 2 * GramStats::bytes_for(dim, c) + (k * 41 * dim * c * 8) as u64;
        }
        // Statistics read from parts are in memory already, and no pass runs.
        let resident = if self.opts.from_parts { f.map_bytes } else { stats + buffers + f.fetch_bytes + f.map_bytes };
        let needed = resident + held_out + solve;
        let what = match (checked.semi, refit) {
            _ if checked.candidates.is_some() => ", one per kernel candidate",
            _ if kfold.is_some() => ", one per fold, and the k-fold solve's total, complement and fold models",
            (true, true) => ", labeled, unlabeled and validation",
            (true, false) => ", labeled and unlabeled",
            (false, true) => ", training and validation",
            (false, false) => "",
        };
        let scoring = if matches!(checked.selection, Selection::HeldOut { .. }) {
            ", with the held-out rows' scoring buffers"
        } else {
            ""
        };
        let mut maps = if f.map_bytes > 0 { format!(", maps {}", mib(f.map_bytes)) } else { String::new() };
        if f.fetch_bytes > 0 && !self.opts.from_parts {
            maps += &format!(
                ", object-store fetches {} (the row group decoded, the next, and one buffer kept for reuse)",
                mib(f.fetch_bytes)
            );
        }
        let line = format!(
            "memory: statistics {} (D = {dim}, {} pass(es){what}{scoring}), chunk buffers {}{maps}, solve {} ({}{}); {} rows × d = {d} in {} file(s)",
            mib(stats + held_out),
            checked.passes(),
            mib(buffers),
            mib(solve),
            path_name,
            match (in_place, path) {
                (true, SolvePath::CholeskyF32) if plan.spills() => format!(
                    ", in place: the f32 factor in the Gram's own memory, refined against the Gram read back from the checkpoint (where the checkpoint holds no copy of it, spilled beside it: {} on disk)",
                    mib(8 * crate::stats::TriGram::len_for(solve_dim) as u64)
                ),
                (true, SolvePath::CholeskyF32) => ", in place: the f32 factor beside the statistics, which an f64 fallback would checkpoint and factor themselves".into(),
                (true, _) => ", in place on the statistics, which are checkpointed first".into(),
                (false, _) => String::new(),
            },
            f.labeled_rows + f.unlabeled_rows,
            f.files,
        );
        self.with_model_write(MemoryPlan::new(stats + held_out, buffers, solve, needed, self.limit, line))
    }
}

#[cfg(test)]
mod tests;
