//! The memory side of the plan: what each solve path and the pass's buffers allocate, the
//! limit in force, and the [`MemoryPlan`] stated before the pass and checked against it.

use serde::Serialize;

use super::{Dual, Plan, Primal, RidgeSolve, TwoPass};
use crate::error::{Error, Result};
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::check::Learner;
use crate::solve::dual::RowStats;
use crate::solve::{DirectSolve, Factor, LambdaChoice, SolvePath};
use crate::stats::GramStats;

/// The memory a plan needs, as stated before the pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MemoryPlan {
    /// The statistics (or kept rows), with what selection keeps beside them.
    pub statistics: u64,
    /// The chunk buffers of the pass.
    pub buffers: u64,
    /// What the solve allocates beyond the statistics.
    pub solve: u64,
    /// All of it at once.
    pub needed: u64,
    /// The limit in force (`run.memory_limit_mib`, or the memory the machine has available).
    pub limit: Option<u64>,
    /// The line printed before the pass.
    pub line: String,
    /// What to change when it does not fit.
    #[serde(skip)]
    pub hint: String,
}

impl MemoryPlan {
    /// A plan of these parts and its line, with no hint yet.
    pub(crate) fn new(
        statistics: u64,
        buffers: u64,
        solve: u64,
        needed: u64,
        limit: Option<u64>,
        line: String,
    ) -> Self {
        MemoryPlan { statistics, buffers, solve, needed, limit, line, hint: String::new() }
    }

    /// Refuses a plan that needs more than the limit.
    pub fn check(&self) -> Result<()> {
        match self.limit {
            Some(limit) if self.needed > limit => {
                Err(Error::Memory { needed: self.needed, limit, hint: self.hint.clone() })
            }
            _ => Ok(()),
        }
    }
}

const MIB: f64 = (1u64 << 20) as f64;

pub(crate) fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / MIB)
}

pub(crate) fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The memory limit in force: `run.memory_limit_mib`, or what the machine has available
/// plus `held`, the bytes the run already holds that its plan counts (the maps, built
/// before the plan): the machine's figure no longer includes them, and the plan's total
/// does. Without `held` those maps would count twice: once in the plan and once as memory
/// the machine no longer has.
pub(crate) fn memory_limit(checked: &CheckedPipeline, held: u64) -> Option<u64> {
    match checked.spec().run.memory_limit_mib {
        0 => available_memory().map(|a| a.saturating_add(held)),
        // The check refuses a limit past 2⁴⁰ MiB; saturate all the same, so no value wraps.
        m => Some(m.saturating_mul(1 << 20)),
    }
}

/// The largest Gram copy a fixed-λ solve makes when the statistics are safe on disk
/// anyway: past it (D above about 8,000) factoring them in place saves more memory than
/// writing them costs time (a Gram's bytes against a pass that reads every row:
/// `SECTIONS=spill scripts/bench.sh`).
pub(super) const COPY_WHEN_ON_DISK_MAX: u64 = 256 << 20;

/// Rows per chunk in the pass: `run.chunk_rows`, lowered so that one chunk's features
/// stay within 128 MiB (two are alive at once) but never below one f32 product block
/// ([`crate::stats::PRODUCT_ROWS`]). The chunk is the block the Gram's products see: each
/// block costs a pass over the whole `D × D` triangle (the f32 tiles added into the f64
/// sums): at D = 65,536 the cap's 512-row chunks made the products 1.08× slower than
/// 2,048-row ones. The floor's features, `8·PRODUCT_ROWS·D` bytes for two chunks, are
/// `2·PRODUCT_ROWS / D` of the Gram's `4·D²` where the cap binds (D > 16,384): an
/// eighth at D = 32,768, a sixteenth at 65,536.
/// A run that keeps its rows copies each chunk out: 64-row chunks keep the mapped
/// buffers small beside the rows.
pub(crate) fn chunk_rows_for(chunk_rows: usize, dim: usize, keeps_rows: bool) -> usize {
    let cap = (128usize << 20) / (4 * dim.max(1));
    let rows = chunk_rows.min(cap.max(crate::stats::PRODUCT_ROWS)).max(1);
    if keeps_rows {
        rows.min(64)
    } else {
        rows
    }
}

impl super::PcaPlan {
    /// Bytes this PCA allocates beside the statistics of its `dim` features (`c` outputs):
    /// block Krylov's basis and Rayleigh–Ritz matrices, then the kept components and the
    /// problem in their basis; the dense decomposition's three `D × D` matrices.
    pub(crate) fn bytes(&self, dim: usize, c: usize) -> u64 {
        match self.krylov {
            Some(e) => {
                let e = e.min(dim);
                crate::solve::krylov::bytes_for(dim, e) + 8 * (2 * dim * e + 3 * e * e + 2 * e * c.max(1)) as u64
            }
            None => crate::solve::SolvePath::Eigen.bytes(dim, c),
        }
    }
}

impl super::Planner<'_> {
    /// Where the first solve's Cholesky keeps its memory — a copy of the statistics, in
    /// place on them, the f32 factor in the Gram's own memory with the Gram spilled, or
    /// (for `auto`) the f64 factor in place — chosen by the memory line itself
    /// ([`Self::gram_memory`], the same terms it prints and checks): the first, in that
    /// order, whose line fits the limit. A copy is passed over where the statistics are on
    /// disk and the copy is large. Where none fits, the one that needs least, which the
    /// memory check then refuses with its figure.
    pub(super) fn settle(&self, plan: Plan) -> Plan {
        let (lambda, factor) = match &plan {
            Plan::Primal(Primal { solve, .. }) | Plan::TwoPass(TwoPass { solve, .. }) => match solve {
                RidgeSolve::Direct(DirectSolve::Cholesky { lambda, factor }) => (*lambda, *factor),
                _ => return plan,
            },
            _ => return plan,
        };
        let with = |factor: Factor| {
            let mut p = plan.clone();
            let solve = RidgeSolve::Direct(DirectSolve::Cholesky { lambda, factor });
            match &mut p {
                Plan::Primal(x) => x.solve = solve,
                Plan::TwoPass(x) => x.solve = solve,
                _ => {}
            }
            p
        };
        let (path, f) = (factor.path(), self.facts);
        let dim = match &plan {
            Plan::TwoPass(_) => self.two_pass_width(),
            _ => f.dims.first().copied().unwrap_or(0),
        };
        let auto = matches!(self.checked.learner, Learner::Ridge { solver: SolvePath::Auto | SolvePath::Dual });
        let copy_on_disk = self.opts.stats_on_disk && path.bytes(dim, f.outputs) > COPY_WHEN_ON_DISK_MAX;
        let mut options = Vec::new();
        if !copy_on_disk {
            options.push(Factor::of(path, false));
        }
        options.push(Factor::of(path, true));
        if path == SolvePath::CholeskyF32 && self.keeps_beside_local_file() && matches!(plan, Plan::Primal(_)) {
            options.push(Factor::MixedSpilled);
        }
        if path == SolvePath::CholeskyF32 && auto {
            options.push(Factor::InPlace);
        }
        let needed: Vec<(Factor, u64)> = options.into_iter().map(|s| (s, self.gram_memory(&with(s)).needed)).collect();
        let fits = needed.iter().find(|(_, n)| self.limit.is_none_or(|l| *n <= l));
        let least = needed.iter().min_by_key(|(_, n)| *n);
        fits.or(least).map_or(plan.clone(), |(s, _)| with(*s))
    }

    /// Where the mixed solve's f32 factor does not fit beside the statistics, it takes
    /// the Gram's own memory, the f64 Gram spilled beside the checkpoint (a run that keeps
    /// its statistics in a local checkpoint); else `auto` factors in f64 in place (which
    /// needs nothing more) and an explicit `cholesky_f32` is left to the memory check.
    /// Counted as the memory line counts it (`gram_memory`).
    pub(super) fn mixed_where_it_fits(&self, factor: Factor, dim: usize, sets: u64, auto: bool) -> Factor {
        let c = self.facts.outputs;
        let f = self.facts;
        let chunk = chunk_rows_for(self.checked.spec().run.chunk_rows, dim, false);
        let resident = if self.opts.from_parts { 0 } else { sets * GramStats::bytes_for(dim, f.outputs) }
            + self.buffers(chunk, f.d, dim)
            + f.map_bytes;
        let fits = |bytes: u64| self.limit.is_none_or(|l| resident + bytes <= l);
        if factor != Factor::MixedInPlace || fits(factor.bytes(dim, c)) {
            return factor;
        }
        if self.keeps_beside_local_file() && fits(Factor::MixedSpilled.bytes(dim, c)) {
            return Factor::MixedSpilled;
        }
        if auto {
            return self.cholesky(SolvePath::Cholesky, dim, sets);
        }
        factor
    }

    /// The run keeps its statistics before a solve consumes them in a local checkpoint,
    /// beside which a Gram can be spilled: a run of one pipeline (a candidate's solve
    /// keeps nothing) with a checkpoint on local disk.
    fn keeps_beside_local_file(&self) -> bool {
        self.keeps && self.opts.checkpoint.as_deref().is_some_and(|p| !crate::remote::is_remote(p))
    }

    /// The model's write after the statistics are freed: its arrays encoded, decoded
    /// again and the maps rebuilt from them (the read-back check), beside the maps still
    /// held — three copies of the stored parameters besides their own. For the random
    /// maps that is megabytes; a Nyström model stores its landmarks and factor (3.5 GB
    /// at M = 40,960), and then it can exceed the pass.
    pub(super) fn with_model_write(&self, mut plan: MemoryPlan) -> MemoryPlan {
        let f = self.facts;
        let dim = f.dims.iter().copied().max().unwrap_or(0) as u64;
        let write = 3 * f.map_bytes + 16 * dim * f.outputs as u64;
        if f.map_bytes > 0 {
            plan.line += &format!("; the model's write and read-back {} beside the maps", mib(write));
        }
        plan.needed = plan.needed.max(f.map_bytes + write);
        plan
    }

    pub(super) fn dual_memory(&self, dual: &Dual) -> MemoryPlan {
        let f = self.facts;
        let (d, c, n) = (f.d, f.outputs, dual.rows);
        let dim = f.dims.first().copied().unwrap_or(0);
        let rows = RowStats::bytes_for(n, dim, c);
        let solve = RowStats::solve_bytes(n, c, matches!(dual.lambda, LambdaChoice::Gcv { .. }));
        let chunk = chunk_rows_for(self.checked.spec().run.chunk_rows, dim, true);
        let buffers = (4 * chunk * (d * 4 + 2 * dim)) as u64;
        let maps = if f.map_bytes > 0 { format!(", maps {}", mib(f.map_bytes)) } else { String::new() };
        let line = format!(
            "memory: {n} rows ≤ D/2 = {}: the mapped rows are kept {} instead of the Gram {}, chunk buffers {}{maps}, solve {} (dual path: the {n} × {n} kernel matrix); d = {d} in {} file(s)",
            dim / 2,
            mib(rows),
            mib(GramStats::bytes_for(dim, c)),
            mib(buffers),
            mib(solve),
            f.files,
        );
        let needed = rows + solve + buffers + f.map_bytes + f.fetch_bytes;
        self.with_model_write(MemoryPlan::new(rows, buffers, solve, needed, self.limit, line))
    }
}
