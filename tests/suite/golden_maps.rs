//! Golden vectors for the Hadamard tools, random Maclaurin (plain, H0/1, exact p = 1,
//! Hadamard-structured), CRAFTMaps and the recursive tensor sketch, each built from the
//! explicit random parameters of the numpy reference.

use serde_json::Value;

use crate::common::{cases, load, mat, vec1};
use sketchfit::sketch::count::CountSketch;
use sketchfit::sketch::craftmaps::Craftmaps;
use sketchfit::sketch::hadamard::{fwht, Srht};
use sketchfit::sketch::maclaurin::{DotKernel, OrderLaw, Projections, RandomMaclaurin};
use sketchfit::sketch::recursive::RecursiveTensorSketch;
use sketchfit::sketch::ChunkMap;

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

fn close_abs(got: &[f32], exp: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), exp.len(), "{what}: length");
    let err = got.iter().zip(exp).fold(0.0f64, |m, (a, b)| m.max((f64::from(*a) - b).abs()));
    assert!(err <= tol, "{what}: max abs error {err:e} > {tol:e}\n got {got:?}\n exp {exp:?}");
}

fn tol(c: &Value, exp: &[f64]) -> f64 {
    c.get("tol")
        .and_then(|t| t["f32_abs"].as_f64())
        .unwrap_or_else(|| 1e-5 * exp.iter().fold(1.0f64, |m, v| m.max(v.abs())))
}

#[test]
fn fwht_matches_the_sylvester_vectors() {
    for c in &cases("hadamard.json", "fwht_", 7) {
        let v = vec1(&c["inputs"]["v"]);
        let n = c["params"]["padded_length"].as_u64().unwrap() as usize;
        let mut buf = vec![0f32; n];
        buf[..v.len()].copy_from_slice(&f32s(&v));
        close_abs(&buf, &vec1(&c["expected"]["padded"]), 0.0, "pad");
        fwht(&mut buf);
        let exp = vec1(&c["expected"]["fwht"]);
        close_abs(&buf, &exp, 1e-5 * exp.iter().fold(1.0f64, |m, v| m.max(v.abs())), c["name"].as_str().unwrap());
    }
}

fn srht_of(p: &Value) -> Srht {
    Srht {
        d_in: p["D"].as_u64().unwrap() as usize,
        zeta: vec1(&p["zeta"]).iter().map(|&v| v as i8).collect(),
        rows: vec1(&p["r"]).iter().map(|&v| v as u32).collect(),
    }
}

#[test]
fn srht_matches_golden_including_unsorted_rows_and_the_isometry() {
    for c in &cases("hadamard.json", "srht_", 3) {
        let s = srht_of(&c["params"]);
        s.validate().unwrap();
        let (rows, _, z) = mat(&c["inputs"]["Z"]);
        let mut got = vec![0f32; rows * s.output_dim()];
        s.map(&f32s(&z), rows, &mut got);
        let exp = mat(&c["expected"]["G"]).2;
        close_abs(&got, &exp, tol(c, &exp), c["name"].as_str().unwrap());
    }
}

fn kernel_of(p: &Value) -> DotKernel {
    match p["kernel"].as_str().unwrap() {
        "polynomial" => DotKernel::Polynomial {
            degree: p["p"].as_u64().unwrap() as u32,
            gamma: 1.0,
            offset: p["c"].as_f64().unwrap(),
        },
        _ => DotKernel::Exponential { gamma: p["gamma"].as_f64().unwrap() },
    }
}

fn maclaurin_of(p: &Value, d: usize) -> RandomMaclaurin {
    let orders: Vec<u32> = vec1(&p["orders"]).iter().map(|&v| v as u32).collect();
    let total: usize = orders.iter().map(|&n| n as usize).sum();
    let mut signs = vec![0f32; d * total];
    let mut col = 0;
    for w in p["w"].as_array().unwrap() {
        for vector in w.as_array().unwrap() {
            for (row, s) in vec1(vector).iter().enumerate() {
                signs[row * total + col] = *s as f32;
            }
            col += 1;
        }
    }
    RandomMaclaurin::from_parts(
        kernel_of(p),
        d,
        p["h01"].as_bool().unwrap(),
        orders,
        Projections::Dense { signs },
        p["eta"].as_f64().unwrap(),
    )
}

#[test]
fn random_maclaurin_plain_h01_and_exact_cases_match_golden() {
    let cases = load("maclaurin.json");
    assert_eq!(cases.len(), 7);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        let p = &c["params"];
        let (rows, d, x) = mat(&c["inputs"]["X"]);
        let k = kernel_of(p);
        let a9: Vec<f64> = (0..9).map(|n| k.coef(n)).collect();
        let exp_a = vec1(&c["expected"]["a_n_first9"]);
        for (a, b) in a9.iter().zip(&exp_a) {
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{name}: a_n");
        }
        let law = OrderLaw::new(k, p["eta"].as_f64().unwrap(), if p["h01"].as_bool().unwrap() { 2 } else { 0 });
        for (n, q) in vec1(&p["orders"]).iter().zip(vec1(&c["expected"]["q_of_orders"])) {
            assert!((law.unwrap().q(*n as u32) - q).abs() <= 1e-12 * q, "{name}: q");
        }
        let m = maclaurin_of(p, d);
        assert_eq!(m.output_dim() as u64, p["D"].as_u64().unwrap(), "{name}: output dimension");
        let mut got = vec![0f32; rows * m.output_dim()];
        m.map(&f32s(&x), rows, &mut got);
        let exp = mat(&c["expected"]["Z"]).2;
        close_abs(&got, &exp, tol(c, &exp), name);
        if p["h01"].as_bool().unwrap() {
            // The exact block is bit-identical to [√a0; √a1 x] as f32.
            let a0 = k.coef(0);
            let ex = d + usize::from(a0 > 0.0);
            let mut want = Vec::new();
            if a0 > 0.0 {
                want.push(a0.sqrt() as f32);
            }
            want.extend(x[..d].iter().map(|&v| k.coef(1).sqrt() as f32 * v as f32));
            assert_eq!(&got[..ex], &want[..], "{name}: exact block");
        }
    }
}

#[test]
fn craftmaps_rm_h01_to_srht_matches_golden() {
    let cases = load("hadamard.json");
    let c = cases.iter().find(|c| c["name"] == "craftmaps_rm_h01_D12_to_E5").unwrap();
    let (rows, d, x) = mat(&c["inputs"]["X"]);
    let up = maclaurin_of(&c["params"]["up"], d);
    let craft = Craftmaps { up: Box::new(up), down: Box::new(srht_of(&c["params"]["down"])) };
    let mut zup = vec![0f32; rows * craft.up.output_dim()];
    craft.up.map(&f32s(&x), rows, &mut zup);
    let eu = mat(&c["inputs"]["Z_up"]).2;
    close_abs(&zup, &eu, tol(c, &eu), "Z_up");
    let mut got = vec![0f32; rows * craft.output_dim()];
    craft.map(&f32s(&x), rows, &mut got);
    let exp = mat(&c["expected"]["Z"]).2;
    close_abs(&got, &exp, tol(c, &exp), "CRAFTMaps");
}

#[test]
fn hadamard_structured_up_projection_matches_golden() {
    let cases = load("hadamard.json");
    let c = cases.iter().find(|c| c["name"] == "craftmaps_structured_up_exp_h01").unwrap();
    let p = &c["params"];
    let (rows, d, x) = mat(&c["inputs"]["X"]);
    let (_, _, zeta) = mat(&p["zeta"]);
    let m = RandomMaclaurin::from_parts(
        kernel_of(p),
        d,
        true,
        vec1(&p["orders"]).iter().map(|&v| v as u32).collect(),
        Projections::Hadamard {
            d_pad: p["d_prime"].as_u64().unwrap() as usize,
            zeta: zeta.iter().map(|&v| v as i8).collect(),
            perm: vec1(&p["pi"]).iter().map(|&v| v as u32).collect(),
        },
        p["eta"].as_f64().unwrap(),
    );
    let mut got = vec![0f32; rows * m.output_dim()];
    m.map(&f32s(&x), rows, &mut got);
    let exp = mat(&c["expected"]["Z"]).2;
    close_abs(&got, &exp, tol(c, &exp), "structured");
}

fn cs(v: &Value, hk: &str, sk: &str, m: usize) -> CountSketch {
    CountSketch {
        hash: vec1(&v[hk]).iter().map(|&x| x as u32).collect(),
        sign: vec1(&v[sk]).iter().map(|&x| x as i8).collect(),
        dim: m,
    }
}

#[test]
fn recursive_tensor_sketch_tree_matches_golden() {
    let mut checked = 0;
    for c in &cases("gaussian_sketch.json", "recursive_ts_", 4) {
        let p = &c["params"];
        let (n, k, m) =
            (p["n"].as_u64().unwrap() as usize, p["k"].as_u64().unwrap() as usize, p["m"].as_u64().unwrap() as usize);
        let leaves = p["leaves"].as_array().unwrap().iter().map(|l| cs(l, "h", "s", m)).collect();
        let nodes = p["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|level| {
                level.as_array().unwrap().iter().map(|nd| (cs(nd, "h1", "s1", m), cs(nd, "h2", "s2", m))).collect()
            })
            .collect();
        let t = RecursiveTensorSketch::from_parts(n, k, m, leaves, nodes);
        let (_, _, u) = mat(&c["inputs"]["u"]);
        let u = f32s(&u);
        let mut s = t.scratch();
        let mut got = vec![0f32; m];
        t.sketch(|i| &u[i * n..(i + 1) * n], &mut s, &mut got);
        let exp = vec1(&c["expected"]["T"]);
        close_abs(&got, &exp, 1e-5 * exp.iter().fold(1.0f64, |a, v| a.max(v.abs())), c["name"].as_str().unwrap());
        checked += 1;
    }
    assert_eq!(checked, 4);
}

use sketchfit::sketch::chi2::{
    chebyshev_coefficients, fit_k, k0, series_error, series_terms, Chi2Chebyshev, Chi2Series,
};
use sketchfit::sketch::exp_chi2::ExpChi2;
use sketchfit::sketch::rff::{Rff, RffVariant};

fn close64(got: &[f64], exp: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), exp.len(), "{what}: length");
    let scale = exp.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    let err = got.iter().zip(exp).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= tol * scale, "{what}: {err:e} > {tol:e} × {scale:e}");
}

fn rff_of(p: &Value, d: usize) -> Rff {
    let (f, _, w) = mat(&p["W"]);
    let mut wt = vec![0f32; d * f];
    for fi in 0..f {
        for j in 0..d {
            wt[j * f + fi] = w[fi * d + j] as f32;
        }
    }
    let variant = if p["variant"] == "cos" { RffVariant::Cos } else { RffVariant::CosSin };
    let phase = if variant == RffVariant::Cos { f32s(&vec1(&p["b"])) } else { Vec::new() };
    Rff { d, wt, phase, variant }
}

#[test]
fn rff_matches_golden_for_both_kernels_and_variants() {
    let cases = load("rff.json");
    assert_eq!(cases.len(), 8);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        let (rows, d, x) = mat(&c["inputs"]["X"]);
        let m = rff_of(&c["params"], d);
        assert_eq!(m.output_dim() as u64, c["params"]["D"].as_u64().unwrap());
        let mut got = vec![0f32; rows * m.output_dim()];
        m.map(&f32s(&x), rows, &mut got);
        let exp = mat(&c["expected"]["Z"]).2;
        close_abs(&got, &exp, tol(c, &exp), name);
    }
}

#[test]
fn chi2_direct_series_and_exact_error_match_golden() {
    let cases = load("chi2.json");
    let c = cases.iter().find(|c| c["name"] == "direct_series_N3").unwrap();
    let k = vec1(&c["params"]["k"]);
    let (rows, d, x) = mat(&c["inputs"]["X"]);
    let m = Chi2Series { d, k: k.clone() };
    let mut got = vec![0f32; rows * m.output_dim()];
    m.map(&f32s(&x), rows, &mut got);
    let exp = mat(&c["expected"]["C"]).2;
    let scale = exp.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    close_abs(&got, &exp, 1e-6 * scale, "C (f32 output)");
    // f64 path: per-bin errors and the kernel of rows 0 and 1.
    let e_n: Vec<f64> = (0..d).map(|i| series_error(x[i], x[d + i], &k)).collect();
    close64(&e_n, &vec1(&c["expected"]["E_N_per_bin_X0_X1"]), 1e-12, "E_N per bin");
    let kx: f64 = (0..d).map(|i| k0(x[i], x[d + i])).sum();
    close64(&[kx], &[c["expected"]["K_chi2_X0_X1"].as_f64().unwrap()], 1e-12, "K");
    let mut approx = 0.0;
    let (mut a, mut b) = (vec![0.0; 3], vec![0.0; 3]);
    for i in 0..d {
        series_terms(x[i], &k, &mut a);
        series_terms(x[d + i], &k, &mut b);
        approx += a.iter().zip(&b).map(|(p, q)| p * q).sum::<f64>();
    }
    close64(&[approx], &[c["expected"]["approx_K_chi2_X0_X1"].as_f64().unwrap()], 1e-12, "approx K");
    for name in ["exact_error_N1", "exact_error_N3", "exact_error_N8"] {
        let c = cases.iter().find(|c| c["name"] == name).unwrap();
        let k = vec1(&c["params"]["k"]);
        let (n, _, pairs) = mat(&c["inputs"]["pairs"]);
        let got: Vec<f64> = (0..n).map(|i| series_error(pairs[2 * i], pairs[2 * i + 1], &k)).collect();
        close64(&got, &vec1(&c["expected"]["E_N"]), 1e-12, name);
        let got: Vec<f64> = (0..n).map(|i| k0(pairs[2 * i], pairs[2 * i + 1])).collect();
        close64(&got, &vec1(&c["expected"]["k0"]), 1e-12, name);
    }
}

#[test]
fn greedy_k_fit_matches_golden_including_edge_cases() {
    for c in &cases("chi2.json", "greedy_", 4) {
        let name = c["name"].as_str().unwrap();
        let (_, _, sample) = mat(&c["inputs"]["sample"]);
        let n = c["params"]["N"].as_u64().unwrap() as usize;
        let fit = fit_k(sample.iter().copied(), n, c["params"]["B"].as_u64().unwrap() as usize);
        let e = &c["expected"];
        close64(&fit.k, &vec1(&e["k"]), 1e-12, name);
        assert_eq!(fit.n_positive as u64, e["n_positive"].as_u64().unwrap(), "{name}");
        if let Some(b) = e.get("b_star") {
            let want: Vec<usize> = vec1(b).iter().map(|&v| v as usize).collect();
            assert_eq!(fit.b_star, want, "{name}: b_star");
            let counts: Vec<u64> = vec1(&e["bin_counts"]).iter().map(|&v| v as u64).collect();
            assert_eq!(fit.counts, counts, "{name}: bin counts");
            close64(&[fit.lo, fit.hi], &[e["lo"].as_f64().unwrap(), e["hi"].as_f64().unwrap()], 1e-12, name);
        }
    }
}

#[test]
fn chebyshev_coefficients_and_map_match_golden() {
    let cases = load("chi2.json");
    let c = cases.iter().find(|c| c["name"] == "chebyshev_Q8").unwrap();
    let q = c["params"]["Q"].as_u64().unwrap() as usize;
    let xs = vec1(&c["inputs"]["x_scalars"]);
    let (_, _, want) = mat(&c["expected"]["d"]);
    let mut got = Vec::new();
    for &x in &xs {
        let mut d = vec![0.0; q];
        chebyshev_coefficients(x, &mut d);
        got.extend(d);
    }
    close64(&got, &want, 1e-12, "d_q");
    let (rows, d, x) = mat(&c["inputs"]["X"]);
    let m = Chi2Chebyshev { d, q };
    let mut psi = vec![0f32; rows * d * q];
    m.map(&f32s(&x), rows, &mut psi);
    let exp = mat(&c["expected"]["Psi"]).2;
    let scale = exp.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    close_abs(&psi, &exp, 1e-6 * scale, "Psi");
}

#[test]
fn exp_chi2_chain_matches_golden() {
    let cases = load("chi2.json");
    for name in ["exp_chi2_chain_cos_sin", "exp_chi2_chain_cos"] {
        let c = cases.iter().find(|c| c["name"] == name).unwrap();
        let p = &c["params"];
        let (rows, d, x) = mat(&c["inputs"]["X"]);
        let k = vec1(&p["k"]);
        let m = ExpChi2 { series: Chi2Series { d, k: k.clone() }, rff: rff_of(p, d * k.len()) };
        let mut got = vec![0f32; rows * m.output_dim()];
        m.map(&f32s(&x), rows, &mut got);
        let exp = mat(&c["expected"]["Z"]).2;
        close_abs(&got, &exp, 1e-5 * exp.iter().fold(1.0f64, |a, v| a.max(v.abs())), name);
    }
}

use sketchfit::sketch::gaussian::{phi, GaussianSketch, GaussianSketchHd, HdBlock, Preprocess};
use sketchfit::twosample::{mmd2_unbiased, mmd2_v, permutation_test, SketchSums, Statistic};

fn tree_of(v: &Value) -> RecursiveTensorSketch {
    let (n, k, m) =
        (v["n"].as_u64().unwrap() as usize, v["k"].as_u64().unwrap() as usize, v["m"].as_u64().unwrap() as usize);
    let leaves = v["leaves"].as_array().unwrap().iter().map(|l| cs(l, "h", "s", m)).collect();
    let nodes = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|level| {
            level.as_array().unwrap().iter().map(|nd| (cs(nd, "h1", "s1", m), cs(nd, "h2", "s2", m))).collect()
        })
        .collect();
    RecursiveTensorSketch::from_parts(n, k, m, leaves, nodes)
}

#[test]
fn gaussian_expansions_and_sketches_match_golden() {
    let cases = load("gaussian_sketch.json");
    let find = |n: &str| cases.iter().find(|c| c["name"] == n).unwrap();
    let c = find("phi_per_coordinate_s6");
    let s = c["params"]["s"].as_u64().unwrap() as usize;
    let (_, _, want) = mat(&c["expected"]["phi"]);
    let mut got = Vec::new();
    for a in vec1(&c["inputs"]["a"]) {
        let mut p = vec![0.0; s];
        phi(a, &mut p);
        got.extend(p);
    }
    close64(&got, &want, 1e-13, "phi");

    let c = find("expansions_with_preprocessing");
    let p = &c["params"];
    let (_, d, xr) = mat(&c["inputs"]["X_raw"]);
    let pre = Preprocess { center: vec1(&p["centre"]), scale: p["gamma"].as_f64().unwrap().sqrt() };
    let x: Vec<f64> = (0..2 * d).map(|i| pre.scale * (xr[i] - pre.center[i % d])).collect();
    close64(&x, &mat(&c["expected"]["X"]).2, 1e-13, "preprocessed X");
    let s = p["s"].as_u64().unwrap() as usize;
    // K_s = Π_j ⟨φ(x_j), φ(y_j)⟩ and K_HD_s = e^{−|x|²−|y|²} Σ_{j<s} (2⟨x,y⟩)^j / j!.
    let mut ks = 1.0;
    for j in 0..d {
        let (mut a, mut b) = (vec![0.0; s], vec![0.0; s]);
        phi(x[j], &mut a);
        phi(x[d + j], &mut b);
        ks *= a.iter().zip(&b).map(|(p, q)| p * q).sum::<f64>();
    }
    close64(&[ks], &[c["expected"]["K_s"].as_f64().unwrap()], 1e-13, "K_s");
    let (n2x, n2y, dot): (f64, f64, f64) = (
        (0..d).map(|j| x[j] * x[j]).sum(),
        (0..d).map(|j| x[d + j] * x[d + j]).sum(),
        (0..d).map(|j| x[j] * x[d + j]).sum(),
    );
    let mut fact = 1.0;
    let blocks: Vec<f64> = (0..s)
        .map(|j| {
            if j > 0 {
                fact *= j as f64;
            }
            (-n2x - n2y).exp() * (2.0 * dot).powi(j as i32) / fact
        })
        .collect();
    close64(&blocks, &vec1(&c["expected"]["hd_block_inner_products"]), 1e-13, "HD blocks");
    close64(&[blocks.iter().sum::<f64>()], &[c["expected"]["K_HD_s"].as_f64().unwrap()], 1e-13, "K_HD_s");

    let c = find("gaussian_sketch_s3_m6");
    let (rows, d, x) = mat(&c["inputs"]["X"]);
    let g = GaussianSketch {
        pre: Preprocess { center: vec![0.0; d], scale: 1.0 },
        s: c["params"]["s"].as_u64().unwrap() as usize,
        tree: tree_of(&c["params"]),
    };
    let mut got = vec![0f32; rows * g.output_dim()];
    g.map(&f32s(&x), rows, &mut got);
    let exp = mat(&c["expected"]["G"]).2;
    close_abs(&got, &exp, 1e-5 * exp.iter().fold(1.0f64, |a, v| a.max(v.abs())), "GaussianSketch");

    let c = find("gaussian_sketch_hd_s3");
    let (rows, d, x) = mat(&c["inputs"]["X"]);
    let blocks = c["params"]["blocks"].as_array().unwrap()[1..].iter().map(|b| HdBlock::Tree(tree_of(b))).collect();
    let g = GaussianSketchHd { pre: Preprocess { center: vec![0.0; d], scale: 1.0 }, blocks };
    let mut got = vec![0f32; rows * g.output_dim()];
    g.map(&f32s(&x), rows, &mut got);
    let exp = mat(&c["expected"]["G"]).2;
    close_abs(&got, &exp, 1e-5 * exp.iter().fold(1.0f64, |a, v| a.max(v.abs())), "GaussianSketchHD");
}

#[test]
fn mmd_sums_statistics_and_permutation_p_values_match_golden() {
    let cases = load("gaussian_sketch.json");
    let c = cases.iter().find(|c| c["name"] == "mmd_unbiased_and_permutation").unwrap();
    let (np, m, zp) = mat(&c["inputs"]["sketches_P"]);
    let (nq, _, zq) = mat(&c["inputs"]["sketches_Q"]);
    let (mut p, mut q) = (SketchSums::new(m), SketchSums::new(m));
    p.add(&f32s(&zp), np);
    q.add(&f32s(&zq), nq);
    let e = &c["expected"];
    close64(&p.s, &vec1(&e["S_P"]), 1e-12, "S_P");
    close64(&[p.q], &[e["Q_P"].as_f64().unwrap()], 1e-12, "Q_P");
    close64(&q.s, &vec1(&e["S_Q"]), 1e-12, "S_Q");
    close64(&[mmd2_unbiased(&p, &q)], &[e["mmd2_unbiased"].as_f64().unwrap()], 1e-12, "MMD²_u");
    close64(&[mmd2_v(&p, &q)], &[e["mmd2_V_statistic"].as_f64().unwrap()], 1e-12, "V");
    let perms: Vec<Vec<usize>> = c["params"]["permutations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| vec1(p).iter().map(|&v| v as usize).collect())
        .collect();
    let mut pooled = f32s(&zp);
    pooled.extend(f32s(&zq));
    for (which, tb, pv) in
        [(Statistic::Unbiased, "T_b_unbiased", "p_value_unbiased"), (Statistic::V, "T_b_V", "p_value_V")]
    {
        let (_, got, p) = permutation_test(&pooled, m, np, &perms, which);
        close64(&got, &vec1(&e[tb]), 1e-12, tb);
        assert_eq!(p, e[pv].as_f64().unwrap(), "{pv}");
    }
}
