//! RF-PCA by the method the plan chose (dense, or block Krylov on the tiled Gram), the
//! per-stage PCA of two-pass mode (fitted from pass one's statistics) and the projection
//! of mapped features onto it.

use crate::error::Result;
use crate::pipeline::plan::PcaPlan;
use crate::pipeline::report::{PcaReport, Reporter};
use crate::solve::Pca;
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

/// Each stage's PCA from pass one's per-stage statistics.
pub(crate) fn fit_stage_pcas(
    plans: &[PcaPlan],
    pass1: &[GramStats],
    ranges: &[std::ops::Range<usize>],
    env: (u64, usize),
    report: &mut Reporter,
) -> Result<Vec<StagePca>> {
    pass1
        .iter()
        .zip(ranges)
        .zip(plans)
        .enumerate()
        .map(|(i, ((st, r), plan))| {
            let (pca, cen) = fit_pca(plan, st, env)?;
            for w in &pca.warnings {
                report.warn(format!("stage {i}: {w}"));
            }
            let residual = worst_residual(&pca);
            record(report, Some(i), &pca);
            if let Some(worst) = residual {
                report.say(format!(
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

/// Records a solved PCA in the report.
pub(crate) fn record(report: &mut Reporter, stage: Option<usize>, pca: &Pca) {
    report.report.pca.push(PcaReport {
        stage,
        components: pca.e_eff,
        krylov: !pca.residuals.is_empty(),
        iterations: pca.iterations,
        worst_residual: worst_residual(pca),
    });
}

/// The worst residual of an iterative PCA's kept pairs (none for the dense one).
pub(crate) fn worst_residual(pca: &Pca) -> Option<f64> {
    (!pca.residuals.is_empty()).then(|| pca.residuals.iter().copied().fold(0.0, f64::max))
}

/// PCA of `stats` by the plan's method: block Krylov on the tiled Gram for `E ≪ D` (no
/// dense `D × D`), the dense decomposition otherwise. Returns the centred quantities too
/// (with the dense covariance only when it was formed). `env` is the seed and threads.
pub(crate) fn fit_pca(plan: &PcaPlan, stats: &GramStats, env: (u64, usize)) -> Result<(Pca, crate::stats::Centered)> {
    let (seed, threads) = env;
    match plan.krylov {
        Some(e) => Ok((Pca::fit_top(stats, e, plan.tolerance, seed, threads)?, stats.moments())),
        None => {
            let c = stats.centered();
            Ok((Pca::fit(&c, plan.components)?, c))
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
