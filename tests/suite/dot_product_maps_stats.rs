//! Statistical tests of random Maclaurin, the SRHT, CRAFTMaps and the recursive tensor
//! sketch (math.md §4–§8, §14). Seeds are fixed lists; tolerances come from exact
//! variances where math.md gives them, else from sample SDs with S ≥ 2000.

use sketchfit::rng::StageRng;
use sketchfit::sketch::hadamard::{fwht, next_pow2, Srht};
use sketchfit::sketch::maclaurin::{DotKernel, Layout, OrderLaw, RandomMaclaurin};
use sketchfit::sketch::recursive::RecursiveTensorSketch;
use sketchfit::sketch::{build_map, ChunkMap, CraftmapsSpec, DotKind, DownKind, Normalize, StageSpec, UpKind};

use crate::common::{mean_tolerance, variance_band};

fn unit(seed: u64, d: usize) -> Vec<f32> {
    let mut r = StageRng::new(seed, 77);
    let v: Vec<f64> = (0..d).map(|_| r.normal()).collect();
    let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    v.iter().map(|x| (x / n) as f32).collect()
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum()
}

fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (m, v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0))
}

/// A random Maclaurin layout with the order base η = 2.
fn layout(kernel: DotKernel, d: usize, dim: usize, h01: bool, hadamard: bool) -> Layout {
    Layout { kernel, d, dim, eta: 2.0, h01, hadamard }
}

/// One big map of `s` independent random features; each feature's product, rescaled by
/// the number of random features, is one sample of the single-feature estimator.
fn maclaurin_samples(kernel: DotKernel, h01: bool, x: &[f32], y: &[f32], s: usize) -> Vec<f64> {
    let d = x.len();
    let exact = if h01 { d + usize::from(kernel.coef(0) > 0.0) } else { 0 };
    let m = RandomMaclaurin::draw(layout(kernel, d, s + exact, h01, false), &mut StageRng::new(2024, 0));
    let dz = m.output_dim();
    let mut rows = x.to_vec();
    rows.extend_from_slice(y);
    let mut z = vec![0f32; 2 * dz];
    m.map(&rows, 2, &mut z);
    (exact..dz).map(|i| f64::from(z[i]) * f64::from(z[dz + i]) * s as f64).collect()
}

#[test]
fn random_maclaurin_is_unbiased_with_the_exact_variance() {
    let s = 400_000;
    let (x, y) = (unit(1, 10), unit(2, 10));
    let t = dot(&x, &y);
    let q: f64 = x.iter().zip(&y).map(|(&a, &b)| f64::from(a * a * b * b)).sum();
    let m_xy = 1.0 + 2.0 * t * t - 2.0 * q; // ‖x‖ = ‖y‖ = 1
    for kernel in [DotKernel::Polynomial { degree: 3, gamma: 1.0, offset: 1.0 }, DotKernel::Exponential { gamma: 1.0 }]
    {
        for h01 in [false, true] {
            let n_min = if h01 { 2 } else { 0 };
            let law = OrderLaw::new(kernel, 2.0, n_min).unwrap();
            let top = kernel.max_order().unwrap_or(200);
            let f_s: f64 = (n_min..=top).map(|n| kernel.coef(n) * t.powi(n as i32)).sum();
            let v1: f64 = (n_min..=top)
                .filter(|&n| law.q(n) > 0.0)
                .map(|n| kernel.coef(n).powi(2) / law.q(n) * m_xy.powi(n as i32))
                .sum::<f64>()
                - f_s * f_s;
            let draws = maclaurin_samples(kernel, h01, &x, &y, s);
            let (mean, var) = mean_var(&draws);
            let tol = mean_tolerance(v1, s);
            assert!((mean - f_s).abs() <= tol, "{kernel:?} h01={h01}: mean {mean} vs {f_s} ± {tol}");
            // Kurtosis 37–115: the band at α = 1e-6 is about ±8 % at 400,000 draws.
            let (lo, hi) = variance_band(&draws);
            let ratio = var / v1;
            assert!(
                (lo..=hi).contains(&ratio),
                "{kernel:?} h01={h01}: variance ratio {ratio} outside [{lo:.3}, {hi:.3}]"
            );
            assert!(hi - 1.0 < 0.12, "{kernel:?} h01={h01}: band [{lo}, {hi}] too wide to fail");
        }
    }
}

#[test]
fn h01_with_degree_one_is_exact() {
    let k = DotKernel::Polynomial { degree: 1, gamma: 1.0, offset: 2.0 };
    let m = RandomMaclaurin::draw(layout(k, 5, 64, true, false), &mut StageRng::new(3, 0));
    assert_eq!(m.output_dim(), 6);
    let (x, y) = (unit(5, 5), unit(6, 5));
    let mut rows = x.clone();
    rows.extend_from_slice(&y);
    let mut z = vec![0f32; 12];
    m.map(&rows, 2, &mut z);
    assert!((dot(&z[..6], &z[6..]) - (dot(&x, &y) + 2.0)).abs() < 1e-6);
}

#[test]
fn srht_conditional_variance_matches_the_formula() {
    let (dp, e, s) = (64usize, 8usize, 100_000usize);
    let mut r = StageRng::new(11, 0);
    let z: Vec<f32> = (0..dp).map(|_| r.normal() as f32).collect();
    let w: Vec<f32> = z.iter().map(|&a| a * 0.6 + r.normal() as f32 * 0.8).collect();
    let zeta: Vec<i8> = (0..dp).map(|_| r.sign()).collect();
    let hm = |v: &[f32]| {
        let mut b: Vec<f32> = v.iter().zip(&zeta).map(|(&a, &s)| a * f32::from(s)).collect();
        fwht(&mut b);
        b
    };
    let (hz, hw) = (hm(&z), hm(&w));
    let v: Vec<f64> = (0..dp).map(|i| f64::from(hz[i]) * f64::from(hw[i]) / dp as f64).collect();
    let vbar = v.iter().sum::<f64>() / dp as f64;
    let sigma2 = v.iter().map(|a| (a - vbar).powi(2)).sum::<f64>() / dp as f64;
    let want = (dp * dp) as f64 * sigma2 * (dp - e) as f64 / (e as f64 * (dp - 1) as f64);
    let mut samples = Vec::with_capacity(s);
    for i in 0..s {
        let srht =
            Srht { d_in: dp, zeta: zeta.clone(), rows: Srht::draw(dp, e, &mut StageRng::new(500 + i as u64, 1)).rows };
        let mut out = vec![0f32; 2 * e];
        let mut rows = z.clone();
        rows.extend_from_slice(&w);
        srht.map(&rows, 2, &mut out);
        samples.push(dot(&out[..e], &out[e..]));
    }
    let (mean, var) = mean_var(&samples);
    assert!((mean - dot(&z, &w)).abs() <= 5.0 * (want / s as f64).sqrt(), "conditional mean");
    let ratio = var / want;
    assert!((0.95..=1.05).contains(&ratio), "conditional variance ratio {ratio}");
}

fn craft_spec(dim: usize, up_dim: usize, hadamard: bool) -> StageSpec {
    StageSpec::Craftmaps(CraftmapsSpec {
        up: UpKind::RandomMaclaurin,
        down: DownKind::Srht,
        kernel: DotKind::Polynomial,
        degree: 3,
        gamma: 1.0,
        offset: 1.0,
        dim,
        up_dim,
        eta: 2.0,
        h01: true,
        hadamard,
        normalize: Normalize::None,
        weight: 1.0,
    })
}

#[test]
fn craftmaps_is_unbiased_end_to_end() {
    let s = 20_000;
    let (x, y) = (unit(31, 8), unit(32, 8));
    let exact = (dot(&x, &y) + 1.0).powi(3);
    let mut rows = x.clone();
    rows.extend_from_slice(&y);
    let spec = craft_spec(16, 64, false);
    let samples: Vec<f64> = (0..s)
        .map(|i| {
            let m = build_map(&spec, 8, &mut StageRng::new(9000 + i as u64, 0)).unwrap();
            let mut z = vec![0f32; 32];
            m.map(&rows, 2, &mut z);
            dot(&z[..16], &z[16..])
        })
        .collect();
    let (mean, var) = mean_var(&samples);
    let tol = 5.0 * (var / s as f64).sqrt();
    assert!((mean - exact).abs() <= tol, "mean {mean} vs {exact} ± {tol}");
    assert!(tol < 0.1 * exact, "the test must be able to fail: tol {tol}, exact {exact}");
}

/// NRMS ‖K̂ − K‖_F / ‖K‖_F of a map on `x` (`n × d`) for the kernel `k`.
fn nrms(map: &dyn ChunkMap, x: &[f32], n: usize, k: impl Fn(&[f32], &[f32]) -> f64) -> f64 {
    let (d, dz) = (map.input_dim(), map.output_dim());
    let mut z = vec![0f32; n * dz];
    map.map(x, n, &mut z);
    let (mut num, mut den) = (0.0, 0.0);
    for i in 0..n {
        for j in 0..n {
            let exact = k(&x[i * d..(i + 1) * d], &x[j * d..(j + 1) * d]);
            let est = dot(&z[i * dz..(i + 1) * dz], &z[j * dz..(j + 1) * dz]);
            num += (est - exact).powi(2);
            den += exact * exact;
        }
    }
    (num / den).sqrt()
}

#[test]
fn craftmaps_beats_its_up_projection_at_equal_dimension() {
    // Unit-norm data with a decaying spectrum, (⟨x,y⟩ + 1)^7, d = 32 (math.md §6).
    let (n, d) = (200, 32);
    let mut r = StageRng::new(77, 3);
    let mut x = Vec::with_capacity(n * d);
    for _ in 0..n {
        let v: Vec<f64> = (0..d).map(|j| r.normal() / (1.0 + j as f64)).collect();
        let norm = v.iter().map(|a| a * a).sum::<f64>().sqrt();
        x.extend(v.iter().map(|a| (a / norm) as f32));
    }
    let k = |a: &[f32], b: &[f32]| (dot(a, b) + 1.0).powi(7);
    let (mut craft, mut rm) = (0.0, 0.0);
    for seed in 0..10 {
        let mut spec = craft_spec(128, 1024, false);
        if let StageSpec::Craftmaps(s) = &mut spec {
            s.degree = 7;
        }
        craft += nrms(build_map(&spec, d, &mut StageRng::new(seed, 0)).unwrap().as_ref(), &x, n, k);
        let poly7 = DotKernel::Polynomial { degree: 7, gamma: 1.0, offset: 1.0 };
        let plain = RandomMaclaurin::draw(layout(poly7, d, 128, true, false), &mut StageRng::new(seed, 1));
        rm += nrms(&plain, &x, n, k);
    }
    let (craft, rm) = (craft / 10.0, rm / 10.0);
    assert!(craft < 0.75 * rm, "CRAFTMaps NRMS {craft:.3} vs random Maclaurin {rm:.3}");
}

#[test]
fn hadamard_structured_up_projection_agrees_with_dense_at_large_dimension() {
    let (x, y) = (unit(41, 12), unit(42, 12));
    let k = DotKernel::Polynomial { degree: 2, gamma: 1.0, offset: 1.0 };
    let exact = (dot(&x, &y) + 1.0).powi(2);
    let mut rows = x.clone();
    rows.extend_from_slice(&y);
    let mut est = Vec::new();
    for seed in 0..400 {
        let m = RandomMaclaurin::draw(layout(k, 12, 512, true, true), &mut StageRng::new(seed, 0));
        let dz = m.output_dim();
        let mut z = vec![0f32; 2 * dz];
        m.map(&rows, 2, &mut z);
        est.push(dot(&z[..dz], &z[dz..]));
    }
    let (mean, var) = mean_var(&est);
    // Relative bias is O(n²/ΣN_i) ≈ 1e-3 here: far inside 5 SE.
    assert!((mean - exact).abs() <= 5.0 * (var / 400.0).sqrt() + 1e-3 * exact, "{mean} vs {exact}");
}

#[test]
fn recursive_tensor_sketch_is_unbiased_for_distinct_inputs() {
    let (n, m, s) = (4usize, 32usize, 6000u64);
    for k in 1..=5usize {
        let us: Vec<Vec<f32>> = (0..k).map(|i| unit(100 + i as u64, n)).collect();
        let vs: Vec<Vec<f32>> = (0..k).map(|i| unit(200 + i as u64, n)).collect();
        let exact: f64 = us.iter().zip(&vs).map(|(u, v)| dot(u, v)).product();
        let samples: Vec<f64> = (0..s)
            .map(|seed| {
                let t = RecursiveTensorSketch::draw(n, k, m, &mut StageRng::new(seed + 10_000 * k as u64, 0));
                let mut sc = t.scratch();
                let (mut a, mut b) = (vec![0f32; m], vec![0f32; m]);
                t.sketch(|i| &us[i], &mut sc, &mut a);
                t.sketch(|i| &vs[i], &mut sc, &mut b);
                dot(&a, &b)
            })
            .collect();
        let (mean, var) = mean_var(&samples);
        let tol = 5.0 * (var / s as f64).sqrt();
        assert!((mean - exact).abs() <= tol, "k = {k}: mean {mean} vs {exact} ± {tol}");
    }
}

#[test]
fn recursive_tensor_sketch_variance_is_below_the_bound() {
    let (n, m, s) = (6usize, 64usize, 3000u64);
    for k in [2usize, 3, 4] {
        let big_k = k.next_power_of_two() as i32;
        let u: Vec<Vec<f32>> = (0..k).map(|i| unit(300 + i as u64, n)).collect();
        let mf = m as f64;
        let bound = (1.0 + 2.0 / mf).powi(big_k) * (1.0 + (6.0 + 4.0 / mf) / mf).powi(big_k - 1) - 1.0;
        let samples: Vec<f64> = (0..s)
            .map(|seed| {
                let t = RecursiveTensorSketch::draw(n, k, m, &mut StageRng::new(seed + 50_000, k as u64));
                let mut sc = t.scratch();
                let mut a = vec![0f32; m];
                t.sketch(|i| &u[i], &mut sc, &mut a);
                dot(&a, &a)
            })
            .collect();
        let (mean, var) = mean_var(&samples);
        let kurt = samples.iter().map(|x| (x - mean).powi(4)).sum::<f64>() / s as f64 / (var * var);
        let slack = 1.0 + 6.0 * ((kurt.max(3.0) * 2.0 - 1.0) / s as f64).sqrt();
        assert!(var <= bound * slack, "k = {k}: variance {var} above bound {bound} (slack {slack})");
    }
}

#[test]
fn srht_pads_to_a_power_of_two() {
    assert_eq!(next_pow2(12), 16);
    let s = Srht::draw(12, 16, &mut StageRng::new(1, 1));
    assert_eq!(s.padded(), 16);
}
