//! The solve of an accumulated state: the ridge problem on all features by the path the
//! plan chose, PCA and ridge for one or two passes, and the fold of the solved space
//! back to feature space. Below the selection methods (k-fold, the sparse path,
//! candidates), which call it; `solve_step` assembles the model on top of them.

use crate::error::{Error, Location, Result};
use crate::model::{Projection, ProjectionInfo};
use crate::pipeline::paths::solve_in_place;
use crate::pipeline::paths::solve_path;
use crate::pipeline::projection::fit_pca;
use crate::pipeline::projection::worst_residual;
use crate::pipeline::projection::StagePca;
use crate::pipeline::spec::PipelineSpec;
use crate::pipeline::state::Solved;
use crate::pipeline::state::State;
use crate::solve::{Components, LambdaChoice, Pca, Ridge, RotatedProblem, SolvePath};
use crate::stats::GramStats;

/// Ridge on all features of `stats` by the Cholesky or the tridiagonal path, with the
/// spectrum when the path yields one.
pub(crate) fn direct_ridge(
    spec: &PipelineSpec,
    stats: &mut GramStats,
    path: SolvePath,
    say: &mut dyn FnMut(&str),
) -> Result<(Ridge, Vec<f64>)> {
    let threads = spec.threads();
    match (path, spec.lambda()?) {
        (SolvePath::Cholesky, LambdaChoice::Fixed(lambda)) => {
            let work = if solve_in_place(spec, stats) {
                say("solve: factoring in place on the statistics (they are on disk, or a copy of the Gram would not fit)");
                std::mem::replace(&mut stats.gram, crate::stats::TriGram::zeros(0))
            } else {
                stats.gram.clone()
            };
            let (weights, bias) = crate::solve::cholesky::ridge_fixed(stats, work, lambda, threads)?;
            Ok((Ridge::Solved { weights, bias }, Vec::new()))
        }
        (SolvePath::Tridiagonal, _) => {
            let form = crate::solve::tridiag::Tridiagonal::new(stats, threads)?;
            let max_g = stats.gram.diagonal().into_iter().fold(0.0, f64::max);
            let lmax = form.sigma.first().copied().unwrap_or(0.0);
            let tau = stats.dim() as f64 * f64::EPSILON * lmax.max(max_g);
            let problem = form.problem(tau);
            let ev = problem.sigma.clone();
            let rank = ev.iter().filter(|&&v| v > tau).count();
            if rank < ev.len() {
                say(&format!("note: the covariance has numerical rank {rank} of {}", ev.len()));
            }
            Ok((Ridge::Tridiagonal { form: Box::new(form), problem }, ev))
        }
        (p, l) => Err(Error::Internal(format!("solve path {} chosen for λ {l:?}", p.name()))),
    }
}

pub(crate) fn solve_state(
    spec: &PipelineSpec,
    state: &mut State,
    pcas: Option<Vec<StagePca>>,
    say: &mut dyn FnMut(&str),
) -> Result<Solved> {
    match state {
        State::Folds { .. } | State::Candidates { .. } => {
            Err(Error::Internal("fold or candidate statistics reached the solve before their selection".into()))
        }
        State::Rows(kept) => {
            let dual = kept.solve(&spec.lambda()?, spec.threads())?;
            say(&format!(
                "solve: dual, on the {n} × {n} kernel matrix of the kept rows ({n} rows ≤ D/2)",
                n = dual.labeled.n
            ));
            let dim = dual.labeled.mean.len();
            let (ridge, eigenvalues) = match dual.kernel {
                crate::solve::dual::DualKernel::Solved { weights, bias } => {
                    (Ridge::Solved { weights, bias }, Vec::new())
                }
                crate::solve::dual::DualKernel::Gcv { form, problem } => {
                    let ev = problem.sigma.clone();
                    let rows = std::mem::replace(kept, crate::solve::dual::RowStats::new(dim, problem.c, 0));
                    let ridge = crate::solve::dual::DualRidge { rows, form, problem, threads: spec.threads() };
                    (Ridge::Dual(Box::new(ridge)), ev)
                }
            };
            Ok(Solved::on_all_features(ridge, SolvePath::Dual, dual.labeled, eigenvalues))
        }
        State::One { labeled, unlabeled } => {
            if labeled.n < 2 {
                return Err(Error::data(
                    Location::default(),
                    format!("{} labeled row(s); at least 2 are needed", labeled.n),
                ));
            }
            let components = spec.components();
            let use_pca = components != Components::All;
            let semi = unlabeled.as_ref().is_some_and(|u| u.n > 0);
            let path = solve_path(spec, use_pca, semi)?;
            if path != SolvePath::Eigen {
                let cl = labeled.moments();
                let (ridge, eigenvalues) = direct_ridge(spec, labeled, path, say)?;
                return Ok(Solved::on_all_features(ridge, path, cl, eigenvalues));
            }
            let (pca, cl, ca, unl) = match unlabeled {
                Some(u) if u.n > 0 => {
                    let mut all = labeled.without_targets();
                    all.merge(u).map_err(|e| Error::Internal(e.to_string()))?;
                    let (pca, ca) = fit_pca(spec, &all, components)?;
                    // S = Ūᵀ C_L Ū needs the labeled covariance itself.
                    (pca, labeled.centered(), Some(ca), u.n)
                }
                _ => {
                    let (pca, cl) = fit_pca(spec, labeled, components)?;
                    (pca, cl, None, 0)
                }
            };
            if !pca.residuals.is_empty() {
                let worst = pca.residuals.iter().copied().fold(0.0, f64::max);
                say(&format!(
                    "pca: top {} pairs by block Krylov ({} block products), worst residual {worst:.2e}",
                    pca.e_eff, pca.iterations
                ));
            }
            for w in &pca.warnings {
                say(&format!("warning: {w}"));
            }
            let problem = RotatedProblem::new(&pca, &cl, ca.is_none(), use_pca)?;
            let mean_a = ca.as_ref().map_or(cl.mean.clone(), |c| c.mean.clone());
            let dim = cl.mean.len();
            let projections = if use_pca {
                vec![(
                    ProjectionInfo {
                        start: 0,
                        end: dim,
                        components: pca.e_eff,
                        residual: worst_residual(&pca),
                        variance_total: Some(pca.trace),
                    },
                    Projection { mean: mean_a, basis: pca.basis.clone(), eigenvalues: pca.eigenvalues.clone() },
                )]
            } else {
                Vec::new()
            };
            Ok(Solved {
                ridge: Ridge::Eigen(problem),
                path,
                rows: cl.n,
                labeled: cl,
                projections,
                eigenvalues: pca.eigenvalues.clone(),
                pcas: None,
                unlabeled_rows: unl,
                components: if use_pca { pca.e_eff } else { dim },
                components_requested: if use_pca { pca.e_requested } else { dim },
            })
        }
        State::Two { pass1, pass2 } => {
            let p2 = pass2.as_mut().ok_or_else(|| Error::Internal("pass two did not run".into()))?;
            if p2.n < 2 {
                return Err(Error::data(
                    Location::default(),
                    format!("{} labeled row(s); at least 2 are needed", p2.n),
                ));
            }
            let pcas = pcas.ok_or_else(|| Error::Numerical("no pass-one projections".into()))?;
            let path = solve_path(spec, false, false)?;
            let (ridge, cl) = if path == SolvePath::Eigen {
                let cl = p2.centered();
                let full = Pca::fit(&cl, Components::All)?;
                (Ridge::Eigen(RotatedProblem::new(&full, &cl, true, false)?), cl)
            } else {
                let moments = p2.moments();
                (direct_ridge(spec, p2, path, say)?.0, moments)
            };
            let projections = pcas
                .iter()
                .map(|p| {
                    (
                        ProjectionInfo {
                            start: p.range.start,
                            end: p.range.end,
                            components: p.e,
                            residual: p.residual,
                            variance_total: Some(p.trace),
                        },
                        Projection { mean: p.mean.clone(), basis: p.basis.clone(), eigenvalues: p.eigenvalues.clone() },
                    )
                })
                .collect();
            let e: usize = pcas.iter().map(|p| p.e).sum();
            Ok(Solved {
                ridge,
                path,
                rows: cl.n,
                labeled: cl,
                projections,
                eigenvalues: pcas[0].eigenvalues.clone(),
                // Pass one saw every training row; after a refit pass two also holds the
                // validation rows, which pass one never saw.
                unlabeled_rows: pass1.first().map_or(0, |s| s.n).saturating_sub(p2.n),
                components: e,
                components_requested: e,
                pcas: Some(pcas),
            })
        }
    }
}

/// Folds the solved space's `(W_p, b_p)` into `W` (D × c) and `b` over the features.
pub(crate) fn fold(solved: &Solved, wp: Vec<f64>, bp: Vec<f64>, dim: usize) -> (Vec<f64>, Vec<f64>) {
    let c = solved.ridge.outputs();
    match &solved.pcas {
        None => (wp, bp),
        Some(pcas) => {
            // W_i = Ū_i w_i, b = b_p − Σ W_iᵀ z̄_i (math.md §13.5).
            let mut w = vec![0.0; dim * c];
            let mut b = bp;
            let mut row = 0;
            for p in pcas {
                for (i, zi) in p.range.clone().zip(&p.mean) {
                    let li = i - p.range.start;
                    for k in 0..c {
                        let v: f64 = (0..p.e).map(|j| p.basis[li * p.e + j] * wp[(row + j) * c + k]).sum();
                        w[i * c + k] = v;
                        b[k] -= v * zi;
                    }
                }
                row += p.e;
            }
            (w, b)
        }
    }
}
