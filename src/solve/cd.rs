//! Sparse and grouped penalties on the sufficient statistics (math.md §13.10): LASSO,
//! elastic net and group LASSO fitted by coordinate descent in covariance form, so only
//! the centred `C = Σ(z − z̄)(z − z̄)ᵀ`, `r = Σ(z − z̄)(y − ȳ)` and `c_yy = Σ(y − ȳ)²` are
//! needed, never the rows. Each fit stops on the duality gap, which it reports; a path
//! from `λ_max` down uses warm starts. The intercept `b = ȳ − wᵀz̄` is unpenalised and
//! left to the caller.
//!
//! This module is the solver; `pipeline/sparse.rs` runs it as the model's learner.

use std::ops::Range;

/// One output's quadratic problem, from the statistics (`c` row-major `dim × dim`).
#[derive(Debug, Clone, Copy)]
pub struct Problem<'a> {
    /// `C`.
    pub c: &'a [f64],
    /// `r`.
    pub r: &'a [f64],
    /// `c_yy`.
    pub cyy: f64,
    /// `dim`.
    pub dim: usize,
}

/// The penalty `λ₁ Ω(w) + (λ₂/2)‖w‖²`.
#[derive(Debug, Clone, PartialEq)]
pub enum Penalty {
    /// `Ω = ‖w‖₁`, `λ₂ = 0`.
    Lasso,
    /// `Ω = ‖w‖₁` with a ridge term `λ₂`.
    ElasticNet {
        /// `λ₂ ≥ 0`.
        l2: f64,
    },
    /// `Ω = Σ_g √|g| ‖w_g‖` over disjoint groups covering every coordinate.
    GroupLasso {
        /// The groups (for kernels: the stages' feature ranges).
        groups: Vec<Range<usize>>,
        /// `λ₂ ≥ 0`.
        l2: f64,
    },
}

impl Penalty {
    fn l2(&self) -> f64 {
        match self {
            Penalty::Lasso => 0.0,
            Penalty::ElasticNet { l2 } | Penalty::GroupLasso { l2, .. } => *l2,
        }
    }
}

/// A fitted output.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// `λ₁`.
    pub l1: f64,
    /// `w`.
    pub w: Vec<f64>,
    /// The primal objective `P(w)`.
    pub objective: f64,
    /// The duality gap at `w` (≥ 0).
    pub gap: f64,
    /// Sweeps over the coordinates (or groups).
    pub sweeps: usize,
}

/// Stop when the gap is at most this share of `c_yy`.
pub const GAP_TOLERANCE: f64 = 1e-7;
const MAX_SWEEPS: usize = 100_000;

fn soft(x: f64, t: f64) -> f64 {
    x.signum() * (x.abs() - t).max(0.0)
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// `C̃w` with `C̃ = C + λ₂I`.
fn ct_times(p: &Problem, l2: f64, w: &[f64]) -> Vec<f64> {
    (0..p.dim)
        .map(|i| p.c[i * p.dim..(i + 1) * p.dim].iter().zip(w).map(|(a, b)| a * b).sum::<f64>() + l2 * w[i])
        .collect()
}

/// The primal objective and the duality gap at `w` (math.md §13.10).
pub fn objective_and_gap(p: &Problem, pen: &Penalty, l1: f64, w: &[f64]) -> (f64, f64) {
    let l2 = pen.l2();
    let cw = ct_times(p, l2, w);
    let rw: f64 = p.r.iter().zip(w).map(|(a, b)| a * b).sum();
    let wcw: f64 = w.iter().zip(&cw).map(|(a, b)| a * b).sum();
    let e2 = (p.cyy - 2.0 * rw + wcw).max(0.0);
    let ye = p.cyy - rw;
    let q: Vec<f64> = p.r.iter().zip(&cw).map(|(a, b)| a - b).collect();
    let (omega, kappa) = match pen {
        Penalty::Lasso | Penalty::ElasticNet { .. } => {
            let qmax = q.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            (w.iter().map(|v| v.abs()).sum::<f64>(), if qmax > 0.0 { (l1 / qmax).min(1.0) } else { 1.0 })
        }
        Penalty::GroupLasso { groups, .. } => {
            let mut k = 1.0f64;
            let mut om = 0.0;
            for g in groups {
                let s = (g.len() as f64).sqrt();
                om += s * norm(&w[g.clone()]);
                let qn = norm(&q[g.clone()]);
                if qn > 0.0 {
                    k = k.min(l1 * s / qn);
                }
            }
            (om, k)
        }
    };
    let primal = 0.5 * e2 + l1 * omega;
    let dual = kappa * ye - 0.5 * kappa * kappa * e2;
    (primal, (primal - dual).max(0.0))
}

/// The path of `λ₁` values from `top` (`λ_max`) down to `ratio · top`, `n` points on a
/// log grid (math.md §13.10).
pub fn path_grid(top: f64, n: usize, ratio: f64) -> Vec<f64> {
    let n = n.max(2);
    (0..n).map(|i| top * ratio.powf(i as f64 / (n - 1) as f64)).collect()
}

/// The smallest `λ₁` at which `w = 0` is optimal.
pub fn lambda_max(p: &Problem, pen: &Penalty) -> f64 {
    match pen {
        Penalty::Lasso | Penalty::ElasticNet { .. } => p.r.iter().fold(0.0f64, |m, v| m.max(v.abs())),
        Penalty::GroupLasso { groups, .. } => {
            groups.iter().map(|g| norm(&p.r[g.clone()]) / (g.len() as f64).sqrt()).fold(0.0, f64::max)
        }
    }
}

/// Fits at `λ₁` from `warm` (or zero) until the gap is within [`GAP_TOLERANCE`]·`c_yy`.
pub fn fit(p: &Problem, pen: &Penalty, l1: f64, warm: Option<&[f64]>) -> Fit {
    fit_to(p, pen, l1, warm, GAP_TOLERANCE)
}

/// [`fit`] to a gap of at most `rel_gap`·`c_yy`.
pub fn fit_to(p: &Problem, pen: &Penalty, l1: f64, warm: Option<&[f64]>, rel_gap: f64) -> Fit {
    fit_limited(p, pen, l1, warm, rel_gap, MAX_SWEEPS)
}

/// [`fit_to`] with at most `max_sweeps` sweeps; the gap reached is reported either way.
pub fn fit_limited(p: &Problem, pen: &Penalty, l1: f64, warm: Option<&[f64]>, rel_gap: f64, max_sweeps: usize) -> Fit {
    let (d, l2) = (p.dim, pen.l2());
    let mut w = warm.map_or_else(|| vec![0.0; d], <[f64]>::to_vec);
    // g = Cw (without λ₂), kept up to date by every coordinate step.
    let mut g = ct_times(p, 0.0, &w);
    let tol = rel_gap * p.cyy.max(f64::MIN_POSITIVE);
    let mut sweeps = 0;
    loop {
        sweeps += 1;
        match pen {
            Penalty::Lasso | Penalty::ElasticNet { .. } => {
                for j in 0..d {
                    let cjj = p.c[j * d + j];
                    if cjj + l2 <= 0.0 {
                        continue;
                    }
                    let rho = p.r[j] - g[j] + cjj * w[j];
                    let new = soft(rho, l1) / (cjj + l2);
                    let delta = new - w[j];
                    if delta != 0.0 {
                        for (gi, ci) in g.iter_mut().zip(p.c.iter().skip(j).step_by(d)) {
                            *gi += delta * ci;
                        }
                        w[j] = new;
                    }
                }
            }
            Penalty::GroupLasso { groups, .. } => {
                for grp in groups {
                    let block = group_step(p, l2, l1 * (grp.len() as f64).sqrt(), grp, &w, &g);
                    for (k, j) in grp.clone().enumerate() {
                        let delta = block[k] - w[j];
                        if delta != 0.0 {
                            for (gi, ci) in g.iter_mut().zip(p.c.iter().skip(j).step_by(d)) {
                                *gi += delta * ci;
                            }
                            w[j] = block[k];
                        }
                    }
                }
            }
        }
        if sweeps % 5 == 0 || sweeps == 1 || sweeps >= max_sweeps {
            let (objective, gap) = objective_and_gap(p, pen, l1, &w);
            if gap <= tol || sweeps >= max_sweeps {
                return Fit { l1, w, objective, gap, sweeps };
            }
        }
    }
}

/// The exact minimiser over one group with the others fixed: zero when
/// `‖ρ_g‖ ≤ t` (`t = λ₁√|g|`), else proximal gradient on the block.
fn group_step(p: &Problem, l2: f64, t: f64, grp: &Range<usize>, w: &[f64], g: &[f64]) -> Vec<f64> {
    let d = p.dim;
    let idx: Vec<usize> = grp.clone().collect();
    let m = idx.len();
    let cgg: Vec<f64> = idx.iter().flat_map(|&i| idx.iter().map(move |&j| p.c[i * d + j])).collect();
    // ρ_g = r_g − (Cw)_g + C_gg w_g: the block's linear term with the block removed.
    let rho: Vec<f64> =
        (0..m).map(|a| p.r[idx[a]] - g[idx[a]] + (0..m).map(|b| cgg[a * m + b] * w[idx[b]]).sum::<f64>()).collect();
    if norm(&rho) <= t {
        return vec![0.0; m];
    }
    // Step 1/L with L ≥ λ_max(C_gg + λ₂I): the largest absolute row sum bounds it.
    let lip = (0..m).map(|a| (0..m).map(|b| cgg[a * m + b].abs()).sum::<f64>()).fold(0.0, f64::max) + l2;
    let mut x: Vec<f64> = idx.iter().map(|&j| w[j]).collect();
    // Each step lowers the block's objective, so a bounded number per visit still
    // converges through the outer sweeps; large groups (a stage of thousands of
    // features) would otherwise spend the whole fit in one block.
    let steps = if m > 64 { 50 } else { 10_000 };
    for _ in 0..steps {
        let grad: Vec<f64> =
            (0..m).map(|a| (0..m).map(|b| cgg[a * m + b] * x[b]).sum::<f64>() + l2 * x[a] - rho[a]).collect();
        let y: Vec<f64> = x.iter().zip(&grad).map(|(xi, gi)| xi - gi / lip).collect();
        let ny = norm(&y);
        let shrink = if ny > 0.0 { (1.0 - t / (lip * ny)).max(0.0) } else { 0.0 };
        let next: Vec<f64> = y.iter().map(|v| v * shrink).collect();
        let moved = next.iter().zip(&x).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        x = next;
        if moved <= 1e-15 * (1.0 + norm(&x)) {
            break;
        }
    }
    x
}

/// Fits along `count` values of `λ₁` from `λ_max` down to `ratio·λ_max` (log-spaced),
/// each warm-started from the previous.
pub fn path(p: &Problem, pen: &Penalty, count: usize, ratio: f64) -> Vec<Fit> {
    let top = lambda_max(p, pen);
    let mut out: Vec<Fit> = Vec::with_capacity(count);
    for k in 0..count {
        let l1 = top * ratio.powf(k as f64 / (count.max(2) - 1) as f64);
        let warm = out.last().map(|f| f.w.clone());
        out.push(fit(p, pen, l1, warm.as_deref()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::StageRng;

    /// Centred statistics of `n` rows: the first `k` features carry the signal.
    fn problem(n: usize, d: usize, k: usize, noise: f64, seed: u64) -> (Vec<f64>, Vec<f64>, f64) {
        let mut r = StageRng::new(seed, 1);
        let x: Vec<f64> = (0..n * d).map(|_| r.normal()).collect();
        let y: Vec<f64> =
            (0..n).map(|i| (0..k).map(|j| (j as f64 + 1.0) * x[i * d + j]).sum::<f64>() + noise * r.normal()).collect();
        let mx: Vec<f64> = (0..d).map(|j| (0..n).map(|i| x[i * d + j]).sum::<f64>() / n as f64).collect();
        let my = y.iter().sum::<f64>() / n as f64;
        let mut c = vec![0.0; d * d];
        let mut rv = vec![0.0; d];
        for i in 0..n {
            for a in 0..d {
                let xa = x[i * d + a] - mx[a];
                rv[a] += xa * (y[i] - my);
                for b in 0..d {
                    c[a * d + b] += xa * (x[i * d + b] - mx[b]);
                }
            }
        }
        let cyy = y.iter().map(|v| (v - my).powi(2)).sum();
        (c, rv, cyy)
    }

    /// An independent reference: FISTA on the explicit objective, many iterations.
    fn fista(p: &Problem, pen: &Penalty, l1: f64) -> Vec<f64> {
        let d = p.dim;
        let l2 = pen.l2();
        let lip = (0..d).map(|a| (0..d).map(|b| p.c[a * d + b].abs()).sum::<f64>()).fold(0.0, f64::max) + l2;
        let (mut x, mut y, mut t) = (vec![0.0; d], vec![0.0; d], 1.0f64);
        for _ in 0..200_000 {
            let grad: Vec<f64> =
                (0..d).map(|a| (0..d).map(|b| p.c[a * d + b] * y[b]).sum::<f64>() + l2 * y[a] - p.r[a]).collect();
            let z: Vec<f64> = y.iter().zip(&grad).map(|(a, g)| a - g / lip).collect();
            let next: Vec<f64> = match pen {
                Penalty::GroupLasso { groups, .. } => {
                    let mut v = z.clone();
                    for grp in groups {
                        let s = (grp.len() as f64).sqrt() * l1 / lip;
                        let nz = norm(&z[grp.clone()]);
                        let f = if nz > 0.0 { (1.0 - s / nz).max(0.0) } else { 0.0 };
                        for j in grp.clone() {
                            v[j] = z[j] * f;
                        }
                    }
                    v
                }
                _ => z.iter().map(|v| soft(*v, l1 / lip)).collect(),
            };
            let t2 = (1.0 + (1.0 + 4.0 * t * t).sqrt()) / 2.0;
            y = next.iter().zip(&x).map(|(a, b)| a + (t - 1.0) / t2 * (a - b)).collect();
            x = next;
            t = t2;
        }
        x
    }

    #[test]
    fn lasso_and_elastic_net_reach_the_reference_objective_and_the_kkt_conditions() {
        let (c, r, cyy) = problem(200, 12, 3, 0.5, 1);
        let p = Problem { c: &c, r: &r, cyy, dim: 12 };
        for pen in [Penalty::Lasso, Penalty::ElasticNet { l2: 5.0 }] {
            let l1 = 0.1 * lambda_max(&p, &pen);
            let f = fit_to(&p, &pen, l1, None, 1e-13);
            let reference = fista(&p, &pen, l1);
            let (pref, _) = objective_and_gap(&p, &pen, l1, &reference);
            assert!((f.objective - pref).abs() <= 1e-8 * pref.abs(), "{pen:?}: {} vs {pref}", f.objective);
            assert!(f.gap <= 1e-13 * cyy);
            assert!(fit(&p, &pen, l1, None).gap <= GAP_TOLERANCE * cyy, "the default stop");
            // KKT: q = r − C̃w has |q_j| ≤ λ₁, with equality and sign(w_j) on the support.
            let q: Vec<f64> = p.r.iter().zip(ct_times(&p, pen.l2(), &f.w)).map(|(a, b)| a - b).collect();
            for (j, (&qj, &wj)) in q.iter().zip(&f.w).enumerate() {
                if wj != 0.0 {
                    assert!((qj - l1 * wj.signum()).abs() <= 1e-4 * l1, "{pen:?} j={j}: {qj} vs {l1}");
                } else {
                    assert!(qj.abs() <= l1 * (1.0 + 1e-6), "{pen:?} j={j}: |{qj}| > {l1}");
                }
            }
        }
    }

    #[test]
    fn the_limits_are_least_squares_ridge_and_the_lasso() {
        let (c, r, cyy) = problem(150, 8, 8, 0.3, 2);
        let p = Problem { c: &c, r: &r, cyy, dim: 8 };
        let solve = |l2: f64| {
            // (C + λ₂I) w = r by Gaussian elimination, the direct in-memory answer.
            let n = 8;
            let mut a: Vec<f64> = c.clone();
            (0..n).for_each(|i| a[i * n + i] += l2);
            let mut b = r.clone();
            for k in 0..n {
                for i in k + 1..n {
                    let f = a[i * n + k] / a[k * n + k];
                    for j in k..n {
                        a[i * n + j] -= f * a[k * n + j];
                    }
                    b[i] -= f * b[k];
                }
            }
            let mut x = vec![0.0; n];
            for i in (0..n).rev() {
                x[i] = (b[i] - (i + 1..n).map(|j| a[i * n + j] * x[j]).sum::<f64>()) / a[i * n + i];
            }
            x
        };
        let rel = |a: &[f64], b: &[f64]| {
            a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
                / b.iter().fold(0.0f64, |m, v| m.max(v.abs()))
        };
        // λ₁ → 0: least squares.
        let ls = fit_to(&p, &Penalty::Lasso, 1e-9 * lambda_max(&p, &Penalty::Lasso), None, 1e-14);
        assert!(rel(&ls.w, &solve(0.0)) < 1e-5, "lasso at λ→0 vs least squares: {:e}", rel(&ls.w, &solve(0.0)));
        // Elastic net with λ₁ = 0: ridge.
        let en = fit_to(&p, &Penalty::ElasticNet { l2: 7.0 }, 0.0, None, 1e-14);
        assert!(rel(&en.w, &solve(7.0)) < 1e-6, "elastic net at α = 0 vs ridge: {:e}", rel(&en.w, &solve(7.0)));
        // One group per feature: the lasso.
        let single = Penalty::GroupLasso { groups: (0..8).map(|j| j..j + 1).collect(), l2: 0.0 };
        let l1 = 0.2 * lambda_max(&p, &Penalty::Lasso);
        let (a, b) = (fit_to(&p, &single, l1, None, 1e-14), fit_to(&p, &Penalty::Lasso, l1, None, 1e-14));
        assert!(rel(&a.w, &b.w) < 1e-6, "singleton groups vs lasso: {:e}", rel(&a.w, &b.w));
        assert_eq!(lambda_max(&p, &single), lambda_max(&p, &Penalty::Lasso));
    }

    #[test]
    fn group_lasso_reaches_the_reference_and_drops_a_pure_noise_group() {
        // Features 0..4 carry the signal, 4..10 are noise: two "kernels".
        let (c, r, cyy) = problem(400, 10, 4, 1.0, 3);
        let p = Problem { c: &c, r: &r, cyy, dim: 10 };
        let pen = Penalty::GroupLasso { groups: vec![0..4, 4..10], l2: 0.0 };
        let fits = path(&p, &pen, 30, 1e-3);
        assert_eq!(fits[0].w, vec![0.0; 10], "w = 0 at λ_max");
        assert!(fits.iter().all(|f| f.gap <= GAP_TOLERANCE * cyy * 1.0001), "every gap within tolerance");
        // Somewhere along the path the useful group is in and the noise group out.
        let selects = fits.iter().any(|f| norm(&f.w[0..4]) > 0.0 && f.w[4..10].iter().all(|&v| v == 0.0));
        assert!(selects, "no λ keeps the signal group alone");
        let mid = fit_to(&p, &pen, fits[10].l1, Some(&fits[10].w), 1e-13);
        let reference = fista(&p, &pen, mid.l1);
        let (pref, _) = objective_and_gap(&p, &pen, mid.l1, &reference);
        assert!((mid.objective - pref).abs() <= 1e-8 * pref.abs(), "{} vs {pref}", mid.objective);
    }
}
