//! Per-stage PCA of two-pass mode (fitted from pass one's statistics) and the
//! projection of mapped features onto it.

use crate::error::Result;
use crate::pipeline::paths::memory_limit;
use crate::pipeline::paths::solve_bytes;
use crate::pipeline::spec::{PcaMethod, PipelineSpec};
use crate::solve::{Components, Pca, SolvePath};
use crate::stats::GramStats;

/// Per-stage PCA results of two-pass pass one.
#[derive(Debug, Clone)]
pub(crate) struct StagePca {
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) mean: Vec<f64>,
    pub(crate) basis: Vec<f64>,
    pub(crate) e: usize,
    pub(crate) eigenvalues: Vec<f64>,
    pub(crate) residual: Option<f64>,
    pub(crate) trace: f64,
}

pub(crate) fn fit_stage_pcas(
    spec: &PipelineSpec,
    pass1: &[GramStats],
    ranges: &[std::ops::Range<usize>],
    say: &mut dyn FnMut(&str),
) -> Result<Vec<StagePca>> {
    pass1
        .iter()
        .zip(ranges)
        .enumerate()
        .map(|(i, (st, r))| {
            let (pca, cen) = fit_pca(spec, st, spec.stage_components(i))?;
            for w in &pca.warnings {
                say(&format!("warning: stage {i}: {w}"));
            }
            let residual = worst_residual(&pca);
            if let Some(worst) = residual {
                say(&format!(
                    "pca: stage {i}: top {} pairs by block Krylov ({} block products), worst residual {worst:.2e}",
                    pca.e_eff, pca.iterations
                ));
            }
            Ok(StagePca {
                range: r.clone(),
                mean: cen.mean,
                basis: pca.basis,
                e: pca.e_eff,
                residual,
                trace: pca.trace,
                eigenvalues: pca.eigenvalues,
            })
        })
        .collect()
}

/// The worst residual of an iterative PCA's kept pairs (none for the dense one).
pub(crate) fn worst_residual(pca: &Pca) -> Option<f64> {
    (!pca.residuals.is_empty()).then(|| pca.residuals.iter().copied().fold(0.0, f64::max))
}

/// PCA of `stats` by the method the pipeline asks: block Krylov on the tiled Gram for
/// `E ≪ D` (no dense `D × D`), the dense decomposition otherwise. Returns
/// the centred quantities too (with the dense covariance only when it was formed).
pub(crate) fn fit_pca(
    spec: &PipelineSpec,
    stats: &GramStats,
    components: Components,
) -> Result<(Pca, crate::stats::Centered)> {
    let dim = stats.dim();
    let top = match (spec.pca.method, components) {
        (PcaMethod::Subspace, Components::Fixed(e)) => Some(e),
        // Measured here (60k rows, D = 4096, one run): block Krylov takes 2.1 s for
        // E = D/16 and 4.7 s for E = D/8 where the dense decomposition takes 5.7 s; its
        // basis grows to about 3E, so near E = D/4 it costs more than dense. `auto` takes
        // it up to D/8 from D = 2048 (below, dense takes under a second and is exact to
        // rounding, where Krylov answers to `pca.tolerance`), and up to D/4 where the
        // dense matrices would not fit.
        (PcaMethod::Auto, Components::Fixed(e))
            if (dim >= 2048 && e.saturating_mul(8) <= dim)
                || (e.saturating_mul(4) <= dim
                    && memory_limit(spec).is_some_and(|l| solve_bytes(SolvePath::Eigen, dim, 0) > l)) =>
        {
            Some(e)
        }
        _ => None,
    };
    match top {
        Some(e) => {
            let tol = spec.pca.tolerance.unwrap_or(1e-6);
            Ok((Pca::fit_top(stats, e, tol, spec.run.seed, spec.threads())?, stats.moments()))
        }
        None => {
            let c = stats.centered();
            Ok((Pca::fit(&c, components)?, c))
        }
    }
}

/// `p(x) = [Ū_iᵀ(z_i − z̄_i)]_i` for a chunk of features (`rows × ΣE_i`, f64).
#[allow(clippy::expect_used)] // Invariant: the fitted basis is len × E by construction (`Pca::fit*`).
pub(crate) fn project(pcas: &[StagePca], z: &[f32], rows: usize, dim: usize) -> Vec<f64> {
    let total: usize = pcas.iter().map(|p| p.e).sum();
    let mut out = vec![0.0; rows * total];
    let mut col = 0;
    for p in pcas {
        let len = p.range.len();
        let zc =
            ndarray::Array2::from_shape_fn((rows, len), |(r, i)| f64::from(z[r * dim + p.range.start + i]) - p.mean[i]);
        let u = ndarray::ArrayView2::from_shape((len, p.e), &p.basis).expect("basis shape");
        let q = zc.dot(&u);
        for r in 0..rows {
            for j in 0..p.e {
                out[r * total + col + j] = q[(r, j)];
            }
        }
        col += p.e;
    }
    out
}
