//! Golden vectors computed from math.md by an independent numpy implementation, with
//! every random parameter given explicitly: they pin conventions (index order, FFT
//! scaling, centring, GCV), not just self-consistency.

use serde_json::Value;

use crate::common::{cases, load, mat, vec1};
use sketchfit::sketch::count::CountSketch;
use sketchfit::sketch::tensor::{PolyKernel, TensorSketch};
use sketchfit::sketch::ChunkMap;
use sketchfit::solve::{Components, LambdaChoice, Pca, RotatedProblem};
use sketchfit::stats::{Centered, GramStats};

fn case<'a>(cases: &'a [Value], name: &str) -> &'a Value {
    cases.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no case {name}"))
}

/// Normwise comparison: `max|got − exp| ≤ tol · max|exp|`.
fn close(got: &[f64], exp: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), exp.len(), "{what}: length");
    let scale = exp.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    let err = got.iter().zip(exp).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= tol * scale, "{what}: max abs error {err:e} > {tol:e} × {scale:e}\n got {got:?}\n exp {exp:?}");
}

fn close_abs(got: &[f64], exp: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), exp.len(), "{what}: length");
    let err = got.iter().zip(exp).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= tol, "{what}: max abs error {err:e} > {tol:e}");
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

#[test]
fn count_sketch_matches_golden() {
    let cases = load("count_tensor_sketch.json");
    for name in ["count_sketch_d7_D5", "count_sketch_d6_D4"] {
        let c = case(&cases, name);
        let p = &c["params"];
        let dim = p["D"].as_u64().unwrap() as usize;
        let cs = CountSketch {
            hash: vec1(&p["h"]).iter().map(|&v| v as u32).collect(),
            sign: vec1(&p["s"]).iter().map(|&v| v as i8).collect(),
            dim,
        };
        let (rows, d, x) = mat(&c["inputs"]["X"]);
        let x = f32s(&x);
        let mut got = vec![0f32; rows * dim];
        for r in 0..rows {
            cs.apply(&x[r * d..(r + 1) * d], 1.0, &mut got[r * dim..(r + 1) * dim]);
        }
        let got: Vec<f64> = got.iter().map(|&v| f64::from(v)).collect();
        close_abs(&got, &mat(&c["expected"]["Z"]).2, c["tol"]["f32_abs"].as_f64().unwrap(), name);
    }
}

#[test]
fn tensor_sketch_matches_golden_for_every_degree_dim_and_offset() {
    let mut checked = 0;
    for c in &cases("count_tensor_sketch.json", "tensor_sketch_p", 10) {
        let name = c["name"].as_str().unwrap();
        let p = &c["params"];
        let degree = p["p"].as_u64().unwrap() as u32;
        let dim = p["D"].as_u64().unwrap() as usize;
        let offset = p["c"].as_f64().unwrap();
        let gamma = p.get("gamma").and_then(Value::as_f64).unwrap_or(1.0);
        let (rows, d, x) = mat(&c["inputs"]["X"]);
        let sketches: Vec<CountSketch> = (0..degree as usize)
            .map(|j| CountSketch {
                hash: vec1(&p["h"][j]).iter().map(|&v| v as u32).collect(),
                sign: vec1(&p["s"][j]).iter().map(|&v| v as i8).collect(),
                dim,
            })
            .collect();
        assert_eq!(sketches[0].hash.len(), d + usize::from(offset > 0.0), "{name}: table covers √c");
        let ts = TensorSketch::from_sketches(PolyKernel { degree, gamma, offset }, d, dim, sketches);
        let mut got = vec![0f32; rows * dim];
        ts.map(&f32s(&x), rows, &mut got);
        let got: Vec<f64> = got.iter().map(|&v| f64::from(v)).collect();
        close_abs(&got, &mat(&c["expected"]["Z"]).2, c["tol"]["f32_abs"].as_f64().unwrap(), name);
        checked += 1;
    }
    assert_eq!(checked, 10);
}

fn stats_of(z: &[f64], y: &[f64], n: usize, c: usize, shift: Vec<f64>) -> GramStats {
    let mut st = GramStats::new(shift, c);
    st.add(&f32s(z), y, n, 2).unwrap();
    st
}

fn check_stats(st: &GramStats, exp: &Value, what: &str) {
    assert_eq!(st.n, exp["n"].as_u64().unwrap(), "{what}: n");
    close(&st.s, &vec1(&exp["s"]), 1e-12, &format!("{what}: s"));
    close(&st.gram.to_full(), &mat(&exp["G"]).2, 1e-12, &format!("{what}: G"));
    if exp.get("T").is_some() {
        close(&st.t, &mat(&exp["T"]).2, 1e-12, &format!("{what}: T"));
        close(&st.u, &vec1(&exp["u"]), 1e-12, &format!("{what}: u"));
        close(&st.v, &vec1(&exp["v"]), 1e-12, &format!("{what}: v"));
    }
}

fn check_derived(cen: &Centered, exp: &Value, what: &str) {
    close(&cen.mean, &vec1(&exp["zbar_L"]), 1e-12, &format!("{what}: zbar"));
    close(&cen.cov, &mat(&exp["C_L"]).2, 1e-12, &format!("{what}: C"));
    close(&cen.czy, &mat(&exp["C_zy"]).2, 1e-12, &format!("{what}: C_zy"));
    close(&cen.ymean, &vec1(&exp["ybar"]), 1e-12, &format!("{what}: ybar"));
    close(&cen.cyy, &vec1(&exp["c_yy"]), 1e-12, &format!("{what}: c_yy"));
}

fn check_gcv(prob: &RotatedProblem, cen: &Centered, exp: &Value, what: &str) {
    let g = prob.gcv(cen.weight, &cen.cyy);
    close(&[g.sigma_bar], &[exp["sigma_bar"].as_f64().unwrap()], 1e-9, &format!("{what}: sigma_bar"));
    close(&g.grid, &vec1(&exp["grid"]), 1e-9, &format!("{what}: grid"));
    close(&g.df, &vec1(&exp["df"]), 1e-9, &format!("{what}: df"));
    let rss: Vec<f64> = g.rss.iter().flatten().copied().collect();
    close(&rss, &mat(&exp["RSS"]).2, 1e-9, &format!("{what}: RSS"));
    close(&g.shared, &vec1(&exp["gcv_shared"]), 1e-9, &format!("{what}: gcv shared"));
    let per: Vec<f64> = g.per_output.iter().flatten().copied().collect();
    close(&per, &mat(&exp["gcv_per_output"]).2, 1e-9, &format!("{what}: gcv per output"));
    assert_eq!(g.chosen_shared as u64, exp["chosen_index_shared"].as_u64().unwrap(), "{what}");
    let want: Vec<usize> = vec1(&exp["chosen_index_per_output"]).iter().map(|&v| v as usize).collect();
    assert_eq!(g.chosen_per_output, want, "{what}");
}

fn predictions(z: &[f64], n: usize, dim: usize, w: &[f64], b: &[f64]) -> Vec<f64> {
    let c = b.len();
    let mut out = Vec::with_capacity(n * c);
    for r in 0..n {
        for k in 0..c {
            out.push(b[k] + (0..dim).map(|i| z[r * dim + i] * w[i * c + k]).sum::<f64>());
        }
    }
    out
}

#[test]
fn supervised_regression_pca_ridge_gcv_and_no_pca_match_golden() {
    let cases = load("solver.json");
    let c = case(&cases, "regression_c2_supervised");
    let (n, dim, z) = mat(&c["inputs"]["Z"]);
    let (_, nc, y) = mat(&c["inputs"]["Y"]);
    let e = &c["expected"];
    let st = stats_of(&z, &y, n, nc, vec1(&c["params"]["shift_mu"]));
    check_stats(&st, &e["stats"], "stats");
    let cen = st.centered();
    check_derived(&cen, &e["derived"], "derived");

    let pca = Pca::fit(&cen, Components::Fixed(3)).unwrap();
    close(&pca.eigenvalues, &vec1(&e["eigenvalues"]), 1e-9, "eigenvalues");
    close(&[pca.tau], &[e["tau"].as_f64().unwrap()], 1e-9, "tau");
    assert_eq!(pca.e_eff as u64, e["E_eff"].as_u64().unwrap());
    close(&pca.basis, &mat(&e["U_bar"]).2, 1e-9, "U_bar");
    let auto = Pca::fit(&cen, Components::Share(0.99)).unwrap();
    assert_eq!(auto.e_eff as u64, e["E_auto_rho"].as_u64().unwrap());

    let prob = RotatedProblem::new(&pca, &cen, true, true).unwrap();
    close(&prob.rt, &mat(&e["R"]).2, 1e-9, "R");
    let lambda = c["params"]["lambda"].as_f64().unwrap();
    let fit = prob.solve(&cen, &LambdaChoice::Fixed(lambda));
    close(&prob.coefficients(&[lambda; 2]), &mat(&e["w"]).2, 1e-9, "w");
    close(&fit.weights, &mat(&e["W"]).2, 1e-9, "W");
    close(&fit.bias, &vec1(&e["b"]), 1e-9, "b");
    let pred = predictions(&z[..5 * dim], 5, dim, &fit.weights, &fit.bias);
    close(&pred, &mat(&e["predictions_first5"]).2, 1e-9, "predictions");
    check_gcv(&prob, &cen, &e["gcv_pca"], "gcv pca");
    let gfit = prob.solve(&cen, &LambdaChoice::Gcv { per_output: false });
    close(&gfit.lambdas[..1], &[e["gcv_pca"]["chosen_lambda_shared"].as_f64().unwrap()], 1e-12, "chosen λ");
    let pfit = prob.solve(&cen, &LambdaChoice::Gcv { per_output: true });
    close(&pfit.lambdas, &vec1(&e["gcv_pca"]["chosen_lambda_per_output"]), 1e-12, "chosen λ per output");

    // No PCA: the eigendecomposition of C_L itself.
    let full = Pca::fit(&cen, Components::All).unwrap();
    let np = RotatedProblem::new(&full, &cen, true, false).unwrap();
    let e2 = &e["no_pca"];
    close(&np.sigma, &vec1(&e2["sigma"]), 1e-9, "no-PCA sigma");
    let fit = np.solve(&cen, &LambdaChoice::Fixed(lambda));
    close(&fit.weights, &mat(&e2["W"]).2, 1e-9, "no-PCA W");
    close(&fit.bias, &vec1(&e2["b"]), 1e-9, "no-PCA b");
    let fit0 = np.solve(&cen, &LambdaChoice::Fixed(0.0));
    close(&fit0.weights, &mat(&e2["W_lambda0"]).2, 1e-9, "no-PCA W λ=0");
    close(&fit0.bias, &vec1(&e2["b_lambda0"]), 1e-9, "no-PCA b λ=0");
    check_gcv(&np, &cen, &e2["gcv"], "gcv no pca");
}

#[test]
fn classification_encoding_and_scores_match_golden() {
    let cases = load("solver.json");
    let c = case(&cases, "classification_3class");
    let (n, dim, z) = mat(&c["inputs"]["Z"]);
    let e = &c["expected"];
    let (_, nc, y) = mat(&e["Y_pm1"]);
    let st = stats_of(&z, &y, n, nc, vec1(&c["params"]["shift_mu"]));
    check_stats(&st, &e["stats"], "stats");
    let cen = st.centered();
    let pca = Pca::fit(&cen, Components::Fixed(c["params"]["E"].as_u64().unwrap() as usize)).unwrap();
    close(&pca.basis, &mat(&e["U_bar"]).2, 1e-9, "U_bar");
    let prob = RotatedProblem::new(&pca, &cen, true, true).unwrap();
    let fit = prob.solve(&cen, &LambdaChoice::Fixed(c["params"]["lambda"].as_f64().unwrap()));
    close(&fit.weights, &mat(&e["W"]).2, 1e-9, "W");
    close(&fit.bias, &vec1(&e["b"]), 1e-9, "b");
    let scores = predictions(&z, n, dim, &fit.weights, &fit.bias);
    close(&scores, &mat(&e["scores"]).2, 1e-9, "scores");
    let classes = vec1(&e["classes"]);
    let labels: Vec<f64> = scores
        .chunks(nc)
        .map(|s| classes[s.iter().enumerate().fold(0, |b, (i, &v)| if v > s[b] { i } else { b })])
        .collect();
    assert_eq!(labels, vec1(&e["predicted_labels"]));
    check_gcv(&prob, &cen, &e["gcv_pca"], "gcv");
}

#[test]
fn semi_supervised_pca_on_all_rows_ridge_on_labeled_matches_golden() {
    let cases = load("solver.json");
    let c = case(&cases, "semi_supervised");
    let (nl, _, zl) = mat(&c["inputs"]["Z_labeled"]);
    let (nu, _, zu) = mat(&c["inputs"]["Z_unlabeled"]);
    let (_, nc, y) = mat(&c["inputs"]["Y"]);
    let e = &c["expected"];
    let shift = vec1(&c["params"]["shift_mu"]);
    let mut all = stats_of(&zl, &[], nl, 0, shift.clone());
    all.merge(&stats_of(&zu, &[], nu, 0, shift.clone())).unwrap();
    check_stats(&all, &e["stats_A"], "A");
    let lab = stats_of(&zl, &y, nl, nc, shift);
    check_stats(&lab, &e["stats_L"], "L");
    let (ca, cl) = (all.centered(), lab.centered());
    let pca = Pca::fit(&ca, Components::Fixed(3)).unwrap();
    close(&pca.eigenvalues, &vec1(&e["eigenvalues_C_A"]), 1e-9, "eigenvalues");
    close(&[pca.tau], &[e["tau"].as_f64().unwrap()], 1e-9, "tau");
    close(&pca.basis, &mat(&e["U_bar"]).2, 1e-9, "U_bar");
    let prob = RotatedProblem::new(&pca, &cl, false, true).unwrap();
    close(&prob.sigma, &vec1(&e["sigma_S_desc"]), 1e-9, "sigma(S)");
    let fit = prob.solve(&cl, &LambdaChoice::Fixed(c["params"]["lambda"].as_f64().unwrap()));
    close(&fit.weights, &mat(&e["W"]).2, 1e-9, "W");
    close(&fit.bias, &vec1(&e["b"]), 1e-9, "b");
    check_gcv(&prob, &cl, &e["gcv_pca"], "gcv");
}

#[test]
fn merge_with_shift_change_matches_golden() {
    let cases = load("solver.json");
    let c = case(&cases, "merge_with_shift_change");
    let (n, dim, z) = mat(&c["inputs"]["Z"]);
    let (_, nc, y) = mat(&c["inputs"]["Y"]);
    let split = c["inputs"]["split"].as_u64().unwrap() as usize;
    let e = &c["expected"];
    let mu1 = vec1(&c["params"]["shift_half1"]);
    let mu2 = vec1(&c["params"]["shift_half2_and_merged"]);
    let mut h1 = stats_of(&z[..split * dim], &y[..split * nc], split, nc, mu1);
    check_stats(&h1, &e["half1_stats"], "half 1");
    let h2 = stats_of(&z[split * dim..], &y[split * nc..], n - split, nc, mu2.clone());
    check_stats(&h2, &e["half2_stats"], "half 2");
    h1.reshift(&mu2);
    check_stats(&h1, &e["half1_reshifted"], "half 1 reshifted");
    h1.merge(&h2).unwrap();
    check_stats(&h1, &e["merged"], "merged");
    check_stats(&h1, &e["whole_with_shift2"], "whole");
}

#[test]
fn rank_deficient_drops_two_eigenvalues_and_lambda_zero_is_min_norm() {
    let cases = load("solver.json");
    let c = case(&cases, "rank_deficient_const_and_duplicate");
    let (n, _, z) = mat(&c["inputs"]["Z"]);
    let (_, nc, y) = mat(&c["inputs"]["Y"]);
    let e = &c["expected"];
    let cen = stats_of(&z, &y, n, nc, vec1(&c["params"]["shift_mu"])).centered();
    let pca = Pca::fit(&cen, Components::Fixed(6)).unwrap();
    close(&[pca.tau], &[e["tau"].as_f64().unwrap()], 1e-9, "tau");
    assert_eq!(pca.e_eff, 4);
    assert!(pca.eigenvalues[4..].iter().all(|&v| v <= pca.tau));
    close(&pca.eigenvalues[..4], &vec1(&e["eigenvalues"])[..4], 1e-9, "eigenvalues");
    close(&pca.basis, &mat(&e["U_bar"]).2, 1e-9, "U_bar");
    assert!(!pca.warnings.is_empty(), "a rank below E is reported");
    let full = Pca::fit(&cen, Components::All).unwrap();
    let fit = RotatedProblem::new(&full, &cen, true, false).unwrap().solve(&cen, &LambdaChoice::Fixed(0.0));
    close(&fit.weights, &mat(&e["no_pca_W_lambda0_min_norm"]).2, 1e-9, "min-norm W");
    close(&fit.bias, &vec1(&e["no_pca_b_lambda0"]), 1e-9, "min-norm b");
}
