//! Which solve path a run takes and what memory it has: the path for the pipeline's λ
//! and PCA, the bytes each path needs beyond the statistics, and the limit they must fit.

use crate::error::{Error, Result};
use crate::pipeline::spec::PipelineSpec;
use crate::solve::{LambdaChoice, SolvePath};
use crate::stats::GramStats;

pub(crate) fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The memory limit in force: `run.memory_limit_mib`, or what the machine has available.
pub(crate) fn memory_limit(spec: &PipelineSpec) -> Option<u64> {
    if spec.run.memory_limit_mib > 0 {
        Some(spec.run.memory_limit_mib << 20)
    } else {
        available_memory()
    }
}

/// Bytes a solve path allocates beyond the statistics for `D` features and `c` outputs.
pub(crate) fn solve_bytes(path: SolvePath, dim: usize, c: usize) -> u64 {
    match path {
        SolvePath::Cholesky => 8 * (crate::stats::TriGram::len_for(dim) + 2 * dim * c) as u64,
        SolvePath::Tridiagonal => crate::solve::tridiag::bytes_for(dim, c),
        SolvePath::Eigen | SolvePath::Auto => 3 * 8 * (dim * dim) as u64,
        // The dual's memory depends on the rows: `RowStats::solve_bytes`.
        SolvePath::Dual => 0,
    }
}

/// The largest Gram copy a fixed-λ solve makes when the statistics are safe on disk
/// anyway: past it (D above about 8,000) factoring them in place saves more memory than
/// writing them costs time (1 GiB at D = 16,384 against a pass of minutes).
const COPY_WHEN_ON_DISK_MAX: u64 = 256 << 20;

/// Whether the Cholesky path factors the statistics' own Gram: a copy would not fit
/// beside them within `run.memory_limit_mib` (or in the memory the machine has left), or
/// the statistics are on disk (`run.stats_on_disk`) and the copy would be large.
pub(crate) fn solve_in_place(spec: &PipelineSpec, stats: &GramStats) -> bool {
    let copy = solve_bytes(SolvePath::Cholesky, stats.dim(), stats.c);
    let fits = if spec.run.memory_limit_mib > 0 {
        stats.size_bytes() + copy <= spec.run.memory_limit_mib << 20
    } else {
        available_memory().is_none_or(|free| copy <= free)
    };
    !fits || large_copy_on_disk(spec, copy)
}

/// The statistics are on disk and a Gram copy of `copy` bytes would be large.
pub(crate) fn large_copy_on_disk(spec: &PipelineSpec, copy: u64) -> bool {
    spec.run.stats_on_disk && copy > COPY_WHEN_ON_DISK_MAX
}

/// The solve path for this pipeline (math.md §13.7): the cheapest one that answers its
/// question, or the one `ridge.solver` names when it can.
pub(crate) fn solve_path(spec: &PipelineSpec, use_pca: bool, semi: bool) -> Result<SolvePath> {
    let lambda = spec.lambda()?;
    let fixed_positive = matches!(lambda, LambdaChoice::Fixed(l) if l > 0.0);
    let zero = matches!(lambda, LambdaChoice::Fixed(l) if l == 0.0);
    let direct = !use_pca && !semi;
    let refuse = |why: &str| Err(Error::config(spec.source.as_str(), "ridge.solver", why.to_string()));
    // The sparse learners work on the dense centred covariance (raw basis) or after the
    // dense PCA: the eigen path's memory bounds both.
    if spec.solver.kind != crate::pipeline::spec::SolverKind::Ridge {
        return Ok(SolvePath::Eigen);
    }
    match spec.ridge.solver {
        SolvePath::Auto if !direct || zero => Ok(SolvePath::Eigen),
        SolvePath::Auto if fixed_positive => Ok(SolvePath::Cholesky),
        SolvePath::Auto => Ok(SolvePath::Tridiagonal),
        SolvePath::Eigen => Ok(SolvePath::Eigen),
        SolvePath::Cholesky if !direct => {
            refuse("\"cholesky\" solves ridge on all features; PCA and unlabeled rows need \"eigen\"")
        }
        SolvePath::Cholesky if !fixed_positive => refuse("\"cholesky\" needs a fixed ridge.lambda > 0"),
        SolvePath::Tridiagonal if !direct => {
            refuse("\"tridiagonal\" solves ridge on all features; PCA and unlabeled rows need \"eigen\"")
        }
        SolvePath::Tridiagonal if zero => refuse("λ = 0 is the pseudo-inverse, which needs \"eigen\""),
        SolvePath::Dual => refuse(DUAL_NEEDS),
        path => Ok(path),
    }
}

/// What `ridge.solver = "dual"` needs (and `auto` checks before it keeps the rows).
const DUAL_NEEDS: &str = "\"dual\" keeps the rows instead of statistics: it needs one pass, at most D/2 labeled rows, ridge on all features (no PCA, no unlabeled rows) with a fixed λ > 0 or λ by GCV, no validation files, k-fold or candidates, and a run whose product is a model (not accumulate's part files)";

/// Whether the run keeps its mapped rows and solves ridge in the dual (math.md §13.7):
/// with at most `D/2` labeled rows the `n × n` kernel matrix is smaller than the Gram
/// and cheaper to build (`n²D` against `nD²`) and to factor. Taken by `auto` when the
/// question is ridge on all features at a fixed λ > 0 or by GCV; `ridge.solver = "dual"`
/// asks for it and is refused when the run cannot take it.
pub(crate) fn takes_dual(spec: &PipelineSpec, labeled_rows: u64, semi: bool, dim: usize) -> Result<bool> {
    let lambda = spec.lambda()?;
    let question = matches!(lambda, LambdaChoice::Fixed(l) if l > 0.0) || matches!(lambda, LambdaChoice::Gcv { .. });
    let eligible = question
        && spec.solver.kind == crate::pipeline::spec::SolverKind::Ridge
        && spec.passes == 1
        && spec.components() == crate::solve::Components::All
        && !semi
        && spec.data.validation.is_empty()
        && spec.ridge.cv.is_none()
        && spec.candidates.is_none()
        && !spec.run.keep_statistics
        && labeled_rows >= 2
        && 2 * labeled_rows <= dim as u64;
    match spec.ridge.solver {
        SolvePath::Auto => Ok(eligible),
        SolvePath::Dual if eligible => Ok(true),
        SolvePath::Dual => Err(Error::config(spec.source.as_str(), "ridge.solver", DUAL_NEEDS.to_string())),
        _ => Ok(false),
    }
}
