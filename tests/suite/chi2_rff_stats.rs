//! The χ² family and random Fourier features (math.md §7, §10): series identities and
//! exact errors, the greedy fit against every single k, the Chebyshev recurrence against
//! quadrature, the comparison with the Vedaldi–Zisserman sampled map, and RFF /
//! exp-χ² unbiasedness and variance over seeds.

use sketchfit::rng::StageRng;
use sketchfit::sketch::chi2::{chebyshev_coefficients, fit_k, k0, series_error, series_terms, Chi2Chebyshev};
use sketchfit::sketch::rff::{Rff, RffVariant, ShiftKernel};
use sketchfit::sketch::{chi2_distance, ChunkMap};

fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (m, v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0))
}

/// Dirichlet(α) histograms with `bins` bins (gamma draws by Marsaglia–Tsang with the
/// α < 1 boost), the skewed, sparse inputs the χ² kernels are for.
fn dirichlet(rows: usize, bins: usize, alpha: f64, seed: u64) -> Vec<f64> {
    let mut r = StageRng::new(seed, 5);
    let mut gamma = |a: f64| -> f64 {
        let (a1, boost) = if a < 1.0 { (a + 1.0, true) } else { (a, false) };
        let d = a1 - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        let g = loop {
            let x = r.normal();
            let v = (1.0 + c * x).powi(3);
            if v > 0.0 && (1.0 - r.uniform()).ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                break d * v;
            }
        };
        if boost {
            g * (1.0 - r.uniform()).powf(1.0 / a)
        } else {
            g
        }
    };
    let mut out = Vec::with_capacity(rows * bins);
    for _ in 0..rows {
        let g: Vec<f64> = (0..bins).map(|_| gamma(alpha)).collect();
        let s: f64 = g.iter().sum();
        // f32-representable values, as the maps see them.
        out.extend(g.iter().map(|v| f64::from((v / s) as f32)));
    }
    out
}

#[test]
fn one_step_identity_and_the_exact_n_term_error() {
    let mut r = StageRng::new(1, 1);
    for _ in 0..10_000 {
        let (x, y, k) = (r.uniform().powi(3) + 1e-9, r.uniform() + 1e-9, r.uniform() * 2.0 + 1e-6);
        let lhs = 2.0 * x * y / (x + y);
        let rhs =
            2.0 * k.sqrt() * x / (x + k) * 2.0 * k.sqrt() * y / (y + k) + (x - k) / (x + k) * (y - k) / (y + k) * lhs;
        assert!((lhs - rhs).abs() <= 1e-14 * lhs.max(1e-300) + 1e-300, "{x} {y} {k}");
    }
    // k0 = Σ c_n(x)c_n(y) + E_N(x, y), including values near 0 and near 1.
    let vals = [0.0, 1e-9, 1e-4, 0.01, 0.3, 0.5, 0.999, 1.0];
    for n in [1usize, 3, 8] {
        let k: Vec<f64> = (0..n).map(|i| 10f64.powf(-(i as f64) / 2.0)).collect();
        let (mut a, mut b) = (vec![0.0; n], vec![0.0; n]);
        for &x in &vals {
            for &y in &vals {
                series_terms(x, &k, &mut a);
                series_terms(y, &k, &mut b);
                let approx: f64 = a.iter().zip(&b).map(|(p, q)| p * q).sum();
                let e = series_error(x, y, &k);
                assert!((approx + e - k0(x, y)).abs() <= 1e-15, "N={n} x={x} y={y}");
                let en = |v: f64| v.sqrt() * k.iter().map(|&kk| ((v - kk) / (v + kk)).abs()).product::<f64>();
                assert!(e.abs() <= en(x) * en(y) * (1.0 + 1e-12) + 1e-18, "bound N={n} x={x} y={y}");
                // ‖c(x)‖² = x(1 − Π r_n(x)²).
                let norm: f64 = a.iter().map(|v| v * v).sum();
                let pr: f64 = k.iter().map(|&kk| ((x - kk) / (x + kk)).powi(2)).product();
                assert!((norm - x * (1.0 - if x > 0.0 { pr } else { 1.0 })).abs() <= 1e-15);
            }
        }
    }
}

/// Max over pairs of |K̂ − K| relative to K for histograms (rows of `x`).
fn max_rel_error(x: &[f64], rows: usize, d: usize, k: &[f64]) -> f64 {
    let mut worst = 0.0f64;
    for i in 0..rows {
        for j in i..rows {
            let (mut exact, mut err) = (0.0, 0.0);
            for b in 0..d {
                exact += k0(x[i * d + b], x[j * d + b]);
                err += series_error(x[i * d + b], x[j * d + b], k);
            }
            worst = worst.max(err.abs() / exact);
        }
    }
    worst
}

/// Mean per-bin |E_N| over all pairs of `values`.
fn mean_bin_error(values: &[f64], k: &[f64]) -> f64 {
    let mut sum = 0.0;
    for &x in values {
        for &y in values {
            sum += series_error(x, y, k).abs();
        }
    }
    sum / (values.len() * values.len()) as f64
}

#[test]
fn fitted_ks_beat_every_single_k_and_converge() {
    let (d, rows) = (100, 120);
    let fit_sample = dirichlet(400, d, 0.3, 10);
    let test = dirichlet(rows, d, 0.3, 11);
    let mut r = StageRng::new(12, 0);
    let positive: Vec<f64> = test.iter().copied().filter(|&v| v > 0.0).collect();
    let values: Vec<f64> = (0..1500).map(|_| positive[r.below(positive.len() as u32) as usize]).collect();
    let grid: Vec<f64> = (0..40).map(|i| 10f64.powf(-7.0 + i as f64 * 0.2)).collect();
    let mut kernel_errors = Vec::new();
    for n in [2usize, 4, 6, 8, 10] {
        let k = fit_k(fit_sample.iter().copied(), n, 200).k;
        // The greedy criterion removes the largest term of E[e_N(x)], which bounds the
        // mean error: on that, the fitted k's beat the best single k at every N.
        let ours = mean_bin_error(&values, &k);
        let single = grid.iter().map(|&kk| mean_bin_error(&values, &vec![kk; n])).fold(f64::INFINITY, f64::min);
        assert!(ours < 0.8 * single, "N = {n}: mean per-bin error {ours:e} vs best single k {single:e}");
        kernel_errors.push(max_rel_error(&test, rows, d, &k));
    }
    // The worst pair's relative kernel error falls with N (math.md §10.2 measured
    // 1.3e-1 at N = 2 to 8.4e-5 at N = 10; numpy over five seeds: 17–400× from 2 to 10).
    for w in kernel_errors.windows(2) {
        assert!(w[1] < w[0], "{kernel_errors:?}");
    }
    assert!(kernel_errors[4] * 10.0 < kernel_errors[0], "{kernel_errors:?}");
    // On that worst-pair metric a single k is competitive at small N (math.md's "beats
    // the best single k at every N" does not hold there); at N = 10 the fit wins.
    let single10 = grid.iter().map(|&kk| max_rel_error(&test, rows, d, &[kk; 10])).fold(f64::INFINITY, f64::min);
    assert!(kernel_errors[4] < single10, "N = 10: {} vs best single k {single10}", kernel_errors[4]);
}

/// The Vedaldi–Zisserman homogeneous kernel map for χ² with `n` steps and period `l`:
/// per coordinate `[√(xLκ(0)), √(2xLκ(jL)) cos(jL ln x), √(2xLκ(jL)) sin(jL ln x)]`,
/// `κ(λ) = sech(πλ)`; its inner product is `√(xy) L Σ_j κ(jL) cos(jL (ln x − ln y))`.
fn vz_k0(x: f64, y: f64, n: usize, l: f64) -> f64 {
    if x <= 0.0 || y <= 0.0 {
        return 0.0;
    }
    let kappa = |v: f64| 1.0 / (std::f64::consts::PI * v).cosh();
    let delta = x.ln() - y.ln();
    (x * y).sqrt()
        * l
        * (kappa(0.0) + 2.0 * (1..=n).map(|j| kappa(j as f64 * l) * (j as f64 * l * delta).cos()).sum::<f64>())
}

/// Max over pairs of histograms of the absolute kernel error, for a per-bin error.
fn kernel_abs_error(test: &[f64], rows: usize, d: usize, per_bin: &dyn Fn(f64, f64) -> f64) -> f64 {
    let mut worst = 0.0f64;
    for i in 0..rows {
        for j in i..rows {
            let e: f64 = (0..d).map(|b| per_bin(test[i * d + b], test[j * d + b])).sum();
            worst = worst.max(e.abs());
        }
    }
    worst
}

/// (series error, VZ error at its best period) at per-bin dimension 2·steps + 1.
fn series_vs_vz(fit_sample: &[f64], test: &[f64], rows: usize, d: usize, steps: usize) -> (f64, f64) {
    let k = fit_k(fit_sample.iter().copied(), 2 * steps + 1, 200).k;
    let ours = kernel_abs_error(test, rows, d, &|x, y| series_error(x, y, &k));
    let vz = (1..=60)
        .map(|i| 0.05 * i as f64)
        .map(|l| kernel_abs_error(test, rows, d, &|x, y| vz_k0(x, y, steps, l) - k0(x, y)))
        .fold(f64::INFINITY, f64::min);
    (ours, vz)
}

#[test]
fn direct_series_against_the_vedaldi_zisserman_map_at_equal_dimension() {
    // Dense histograms (every bin filled): the fitted series is far ahead, and its lead
    // grows with the dimension because its error falls geometrically.
    let mut r = StageRng::new(30, 0);
    let (d, rows) = (100, 60);
    let uniform = |r: &mut StageRng, n: usize| -> Vec<f64> {
        (0..n * d).map(|_| f64::from((0.001 + 0.999 * r.uniform()) as f32)).collect()
    };
    let (fit_u, test_u) = (uniform(&mut r, 400), uniform(&mut r, rows));
    let (o2, v2) = series_vs_vz(&fit_u, &test_u, rows, d, 2);
    let (o3, v3) = series_vs_vz(&fit_u, &test_u, rows, d, 3);
    assert!(o2 * 5.0 <= v2, "uniform, 2 steps: series {o2:e} vs VZ {v2:e}");
    assert!(o3 * 50.0 <= v3, "uniform, 3 steps: series {o3:e} vs VZ {v3:e}");
    assert!(v3 / o3 > v2 / o2, "the series' lead must grow with the dimension");
    let dense = dirichlet(400 + rows, d, 1.0, 31);
    let (o3, v3) = series_vs_vz(&dense[..400 * d], &dense[400 * d..], rows, d, 3);
    assert!(o3 * 5.0 <= v3, "Dirichlet(1), 3 steps: series {o3:e} vs VZ {v3:e}");
    // Very sparse histograms (Dirichlet(0.3): values from 1e-8 to 1) at 5 dimensions per
    // bin are the exception: VZ's error scales with √(xy), and 5 k's cannot cover eight
    // decades, so VZ is ahead there (measured 0.2× in numpy). The issue's "100× at 2 or
    // 3 steps" therefore does not hold in general; this pins what does.
    let sparse = dirichlet(400 + rows, d, 0.3, 32);
    let (o2, v2) = series_vs_vz(&sparse[..400 * d], &sparse[400 * d..], rows, d, 2);
    assert!(o2 > v2, "Dirichlet(0.3), 2 steps: series {o2:e} vs VZ {v2:e} (VZ is expected ahead)");
}

fn quad_coefficient(x: f64, q: usize) -> f64 {
    // d_q = 2 ∫ {cos, sin}(L ω) cos(q z(ω)) sech(πω) dω over |ω| ≤ 25, z = 2 arctan e^{πω}.
    let l = x.ln();
    let (a, b, n) = (-25.0f64, 25.0f64, 400_000usize);
    let h = (b - a) / n as f64;
    let f = |w: f64| {
        let z = 2.0 * (std::f64::consts::PI * w).exp().atan();
        let g = if q.is_multiple_of(2) { (l * w).cos() } else { (l * w).sin() };
        2.0 * g * (q as f64 * z).cos() / (std::f64::consts::PI * w).cosh()
    };
    let mut s = f(a) + f(b);
    for i in 1..n {
        s += f(a + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    s * h / 3.0
}

#[test]
fn chebyshev_recurrence_matches_quadrature_and_parseval_rises_to_one() {
    for &x in &[1e-6, 0.01, 0.2, 1.0, 2.5] {
        let mut d = vec![0.0; 12];
        chebyshev_coefficients(x, &mut d);
        for (q, &dq) in d.iter().enumerate() {
            let quad = quad_coefficient(x, q);
            assert!((dq - quad).abs() <= 1e-10, "x = {x}, q = {q}: recurrence {dq} vs quadrature {quad}");
        }
        let mut partial = d[0] * d[0] / 4.0;
        for &dq in &d[1..] {
            let next = partial + 0.5 * dq * dq;
            assert!(next >= partial && next <= 1.0 + 1e-12);
            partial = next;
        }
        let mut long = vec![0.0; 400];
        chebyshev_coefficients(x, &mut long);
        let total = long[0] * long[0] / 4.0 + 0.5 * long[1..].iter().map(|v| v * v).sum::<f64>();
        // Convergence is O(1/Q): at x = 1e-6 (|ln x| ≈ 14) 400 terms hold 99.3 %.
        assert!((total - 1.0).abs() < 1e-2, "Parseval at x = {x}: {total}");
        assert!(long.iter().all(|v| v.abs() <= 2.0 + 1e-12));
    }
}

#[test]
fn chebyshev_error_falls_like_one_over_q() {
    let mut r = StageRng::new(3, 3);
    let pts: Vec<(f32, f32)> =
        (0..400).map(|_| ((0.001 + 0.999 * r.uniform()) as f32, (0.001 + 0.999 * r.uniform()) as f32)).collect();
    let err = |q: usize| {
        let m = Chi2Chebyshev { d: 1, q };
        let (mut a, mut b) = (vec![0f32; q], vec![0f32; q]);
        pts.iter()
            .map(|&(x, y)| {
                m.map(&[x], 1, &mut a);
                m.map(&[y], 1, &mut b);
                let est: f64 = a.iter().zip(&b).map(|(p, q)| f64::from(*p) * f64::from(*q)).sum();
                (est - k0(f64::from(x), f64::from(y))).abs()
            })
            .fold(0.0, f64::max)
    };
    let (e5, e20, e80) = (err(5), err(20), err(80));
    for (a, b) in [(e5, e20), (e20, e80)] {
        let ratio = b / a;
        assert!((0.1..=0.5).contains(&ratio), "Chebyshev error ratio at 4× Q: {ratio} ({e5:e}, {e20:e}, {e80:e})");
    }
}

fn rff_samples(kernel: ShiftKernel, variant: RffVariant, dim: usize, x: &[f32], y: &[f32], s: u64) -> Vec<f64> {
    let d = x.len();
    let mut rows = x.to_vec();
    rows.extend_from_slice(y);
    let mut z = vec![0f32; 2 * dim];
    (0..s)
        .map(|seed| {
            let m = Rff::draw(kernel, 0.8, variant, d, dim, &mut StageRng::new(seed + 7000, 0));
            m.map(&rows, 2, &mut z);
            z[..dim].iter().zip(&z[dim..]).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum()
        })
        .collect()
}

#[test]
fn rff_is_unbiased_with_the_exact_variance() {
    let s = 20_000;
    let x = [0.3f32, -0.2, 0.5, 0.1];
    let y = [-0.3f32, 0.5, 0.2, 0.8];
    for kernel in [ShiftKernel::Gaussian, ShiftKernel::Laplacian] {
        let dist2: f64 = x.iter().zip(&y).map(|(a, b)| f64::from(a - b).powi(2)).sum();
        let dist1: f64 = x.iter().zip(&y).map(|(a, b)| f64::from(a - b).abs()).sum();
        let (k, k2) = match kernel {
            ShiftKernel::Gaussian => ((-dist2 / (2.0 * 0.64)).exp(), (-4.0 * dist2 / (2.0 * 0.64)).exp()),
            ShiftKernel::Laplacian => ((-dist1 / 0.8).exp(), (-2.0 * dist1 / 0.8).exp()),
        };
        assert!(k <= 0.5, "the variance band needs k ≤ 0.5, got {k}");
        for variant in [RffVariant::CosSin, RffVariant::Cos] {
            for dim in [2usize, 64] {
                let var = match variant {
                    RffVariant::Cos => (1.0 - k * k + k2 / 2.0) / dim as f64,
                    RffVariant::CosSin => ((1.0 + k2) / 2.0 - k * k) / (dim / 2) as f64,
                };
                let (m, v) = mean_var(&rff_samples(kernel, variant, dim, &x, &y, s));
                let tol = 5.0 * (var / s as f64).sqrt();
                assert!((m - k).abs() <= tol, "{kernel:?} {variant:?} D={dim}: mean {m} vs {k} ± {tol}");
                let ratio = v / var;
                assert!((0.93..=1.07).contains(&ratio), "{kernel:?} {variant:?} D={dim}: variance ratio {ratio}");
            }
        }
    }
}

#[test]
fn rff_cos_sin_has_unit_norm_and_is_shift_invariant() {
    let m = Rff::draw(ShiftKernel::Gaussian, 1.3, RffVariant::CosSin, 3, 256, &mut StageRng::new(1, 2));
    let rows = [0.1f32, 0.2, 0.3, -0.5, 0.7, 0.0, 1.1, 1.2, 1.3, 0.5, 1.7, 1.0];
    let mut z = vec![0f32; 4 * 256];
    m.map(&rows, 4, &mut z);
    let dot = |a: usize, b: usize| -> f64 {
        z[a * 256..(a + 1) * 256]
            .iter()
            .zip(&z[b * 256..(b + 1) * 256])
            .map(|(p, q)| f64::from(*p) * f64::from(*q))
            .sum()
    };
    for r in 0..4 {
        assert!((dot(r, r) - 1.0).abs() < 1e-5);
    }
    // Rows 2, 3 are rows 0, 1 shifted by (1, 1, 1).
    assert!((dot(0, 1) - dot(2, 3)).abs() < 1e-4, "{} vs {}", dot(0, 1), dot(2, 3));
}

#[test]
fn rff_error_falls_like_one_over_d() {
    let x = [0.3f32, -0.2, 0.5];
    let y = [0.1f32, 0.4, -0.2];
    let (_, v1) = mean_var(&rff_samples(ShiftKernel::Gaussian, RffVariant::CosSin, 16, &x, &y, 20_000));
    let (_, v4) = mean_var(&rff_samples(ShiftKernel::Gaussian, RffVariant::CosSin, 64, &x, &y, 20_000));
    assert!((2.5..=6.5).contains(&(v1 / v4)), "Var(D)/Var(4D) = {}", v1 / v4);
}

#[test]
fn exp_chi2_chain_is_unbiased_for_its_target() {
    use sketchfit::sketch::chi2::Chi2Series;
    use sketchfit::sketch::exp_chi2::ExpChi2;
    let s = 4000u64;
    let x = [0.5f32, 0.25, 0.0, 0.25];
    let y = [0.1f32, 0.3, 0.4, 0.2];
    let k = vec![0.3, 0.05, 0.01];
    let beta = 1.5;
    let series = Chi2Series { d: 4, k: k.clone() };
    let (mut cx, mut cy) = (vec![0f32; 12], vec![0f32; 12]);
    series.map(&x, 1, &mut cx);
    series.map(&y, 1, &mut cy);
    let cdist: f64 = cx.iter().zip(&cy).map(|(a, b)| f64::from(a - b).powi(2)).sum();
    let target = (-beta * cdist).exp();
    let mut rows = x.to_vec();
    rows.extend_from_slice(&y);
    let dim = 64;
    let samples: Vec<f64> = (0..s)
        .map(|seed| {
            let m = ExpChi2 {
                series: series.clone(),
                rff: Rff::draw(
                    ShiftKernel::Gaussian,
                    1.0 / (2.0 * beta).sqrt(),
                    RffVariant::CosSin,
                    12,
                    dim,
                    &mut StageRng::new(seed, 9),
                ),
            };
            let mut z = vec![0f32; 2 * dim];
            m.map(&rows, 2, &mut z);
            z[..dim].iter().zip(&z[dim..]).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum()
        })
        .collect();
    let (m, v) = mean_var(&samples);
    assert!((m - target).abs() <= 5.0 * (v / s as f64).sqrt(), "mean {m} vs target {target}");
    // The target is close to the exact exp-χ² kernel: the χ² series error is small.
    let exact = (-beta * chi2_distance(&x, &y)).exp();
    assert!((target - exact).abs() < 0.1 * exact, "{target} vs {exact}");
}
