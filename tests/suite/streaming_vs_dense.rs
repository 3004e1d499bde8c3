//! The streamed statistics and solvers against a direct in-memory computation on the
//! same features: centring of the data matrix, its SVD for the PCA, ridge through a
//! Cholesky solve of the projected normal equations, GCV through the explicit hat
//! matrix, and the model file round trip.

use faer::prelude::*;
use faer::{Mat, Side};
use sketchfit::rng::StageRng;
use sketchfit::sketch::{FeaturePipeline, IdentitySpec, Normalize, StageSpec, TensorSketchSpec};
use sketchfit::solve::{Components, LambdaChoice, Pca, RotatedProblem};
use sketchfit::stats::GramStats;

fn rel(a: &[f64], b: &[f64]) -> f64 {
    let s = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / s
}

struct Data {
    n: usize,
    dim: usize,
    z: Vec<f32>,
    y: Vec<f64>,
    c: usize,
}

fn data() -> (FeaturePipeline, Data) {
    let (n, d, c) = (700, 6, 3);
    let mut r = StageRng::new(42, 7);
    let x: Vec<f32> = (0..n * d).map(|_| (r.uniform() * 2.0 - 1.0) as f32 + 3.0).collect();
    let specs = vec![
        StageSpec::TensorSketch(TensorSketchSpec {
            degree: 2,
            gamma: 0.5,
            offset: 1.0,
            dim: 37,
            normalize: Normalize::None,
            weight: 1.0,
            ..Default::default()
        }),
        StageSpec::Identity(IdentitySpec { normalize: Normalize::L2, weight: 2.0, ..Default::default() }),
    ];
    let pipe = FeaturePipeline::build(&specs, d, 3).unwrap();
    let dim = pipe.output_dim();
    let mut z = vec![0f32; n * dim];
    pipe.map_chunk(&x, n, &mut z, 2);
    let y: Vec<f64> = (0..n)
        .flat_map(|i| {
            let row = &x[i * d..(i + 1) * d];
            let a = f64::from(row[0] * row[1]);
            vec![a, f64::from(row[2]) - a, (f64::from(row[3])).sin()]
        })
        .collect();
    (pipe, Data { n, dim, z, y, c })
}

fn streamed(dt: &Data, chunk: usize) -> GramStats {
    // Shift from the first rows, as training does; chunks of an odd size.
    let shift: Vec<f64> = (0..dt.dim).map(|j| f64::from(dt.z[j]) + 0.25).collect();
    let mut st = GramStats::new(shift, dt.c);
    for start in (0..dt.n).step_by(chunk) {
        let rows = chunk.min(dt.n - start);
        st.add(&dt.z[start * dt.dim..(start + rows) * dt.dim], &dt.y[start * dt.c..(start + rows) * dt.c], rows, 2)
            .unwrap();
    }
    st
}

/// Centred data matrix and targets, and the column means.
fn centred(dt: &Data) -> (Mat<f64>, Mat<f64>, Vec<f64>, Vec<f64>) {
    let (n, dim, c) = (dt.n, dt.dim, dt.c);
    let zm: Vec<f64> = (0..dim).map(|j| (0..n).map(|i| f64::from(dt.z[i * dim + j])).sum::<f64>() / n as f64).collect();
    let ym: Vec<f64> = (0..c).map(|k| (0..n).map(|i| dt.y[i * c + k]).sum::<f64>() / n as f64).collect();
    let zc = Mat::from_fn(n, dim, |i, j| f64::from(dt.z[i * dim + j]) - zm[j]);
    let yc = Mat::from_fn(n, c, |i, k| dt.y[i * c + k] - ym[k]);
    (zc, yc, zm, ym)
}

#[test]
fn pca_ridge_and_gcv_equal_the_in_memory_computation() {
    let (_, dt) = data();
    let (n, dim, c) = (dt.n, dt.dim, dt.c);
    let st = streamed(&dt, 97);
    let cen = st.centered();
    let (zc, yc, zm, ym) = centred(&dt);
    assert!(rel(&cen.mean, &zm) < 1e-12);

    // PCA: right singular vectors of the centred data, σ² = eigenvalues.
    let e = 12;
    let svd = zc.thin_svd().unwrap();
    let sv: Vec<f64> = (0..dim).map(|j| svd.S()[j] * svd.S()[j]).collect();
    let pca = Pca::fit(&cen, Components::Fixed(e)).unwrap();
    assert!(rel(&pca.eigenvalues[..e], &sv[..e]) < 1e-9);
    // Same subspace: |⟨u_j, v_j⟩| = 1 column by column (signs are fixed differently).
    for j in 0..e {
        let dotp: f64 = (0..dim).map(|i| pca.basis[i * e + j] * svd.V()[(i, j)]).sum();
        assert!((dotp.abs() - 1.0).abs() < 1e-8, "component {j}: {dotp}");
    }

    let ubar = Mat::from_fn(dim, e, |i, j| pca.basis[i * e + j]);
    let p = &zc * &ubar;
    for lambda in [1e-3, 0.7, 40.0] {
        let prob = RotatedProblem::new(&pca, &cen, true, true).unwrap();
        let fit = prob.solve(&cen, &LambdaChoice::Fixed(lambda));
        let a = p.transpose() * &p + Mat::<f64>::identity(e, e) * Scale(lambda);
        let w = a.llt(Side::Lower).unwrap().solve(p.transpose() * &yc);
        let wf = &ubar * &w;
        let want: Vec<f64> = (0..dim).flat_map(|i| (0..c).map(move |k| (i, k))).map(|(i, k)| wf[(i, k)]).collect();
        assert!(rel(&fit.weights, &want) < 1e-8, "λ = {lambda}: W");
        let b: Vec<f64> = (0..c).map(|k| ym[k] - (0..dim).map(|i| wf[(i, k)] * zm[i]).sum::<f64>()).collect();
        assert!(rel(&fit.bias, &b) < 1e-8, "λ = {lambda}: b");
    }

    // GCV through the explicit hat matrix H = 11ᵀ/n + P(PᵀP + λI)⁻¹Pᵀ.
    let prob = RotatedProblem::new(&pca, &cen, true, true).unwrap();
    let curve = prob.gcv(cen.weight, &cen.cyy);
    for &i in &[5usize, 20, 33] {
        let lambda = curve.grid[i];
        let a = p.transpose() * &p + Mat::<f64>::identity(e, e) * Scale(lambda);
        let inv = a.llt(Side::Lower).unwrap().solve(Mat::<f64>::identity(e, e));
        let h = &p * &inv * p.transpose();
        let tr = 1.0 + (0..n).map(|r| h[(r, r)]).sum::<f64>();
        let resid = &yc - &h * &yc;
        let rss: f64 = (0..n).flat_map(|r| (0..c).map(move |k| (r, k))).map(|(r, k)| resid[(r, k)].powi(2)).sum();
        let gcv = n as f64 * rss / (n as f64 - tr).powi(2);
        assert!((curve.shared[i] - gcv).abs() <= 1e-8 * gcv, "GCV at λ = {lambda}: {} vs {gcv}", curve.shared[i]);
        assert!((curve.df[i] - tr).abs() <= 1e-8 * tr);
    }
}

#[test]
fn no_pca_ridge_equals_the_regularised_normal_equations() {
    let (_, dt) = data();
    let (dim, c) = (dt.dim, dt.c);
    let cen = streamed(&dt, 64).centered();
    let (zc, yc, _, _) = centred(&dt);
    let pca = Pca::fit(&cen, Components::All).unwrap();
    let lambda = 0.05;
    let fit = RotatedProblem::new(&pca, &cen, true, false).unwrap().solve(&cen, &LambdaChoice::Fixed(lambda));
    let a = zc.transpose() * &zc + Mat::<f64>::identity(dim, dim) * Scale(lambda);
    let w = a.llt(Side::Lower).unwrap().solve(zc.transpose() * &yc);
    let want: Vec<f64> = (0..dim).flat_map(|i| (0..c).map(move |k| (i, k))).map(|(i, k)| w[(i, k)]).collect();
    assert!(rel(&fit.weights, &want) < 1e-8);
}

#[test]
fn chunking_and_merging_change_nothing_but_rounding() {
    let (_, dt) = data();
    let whole = streamed(&dt, dt.n);
    let small = streamed(&dt, 13);
    assert!(rel(&small.gram.to_full(), &whole.gram.to_full()) < 1e-13);
    // Two shards with different shifts, merged.
    let half = dt.n / 2;
    let (a, b) = (
        Data { n: half, z: dt.z[..half * dt.dim].to_vec(), y: dt.y[..half * dt.c].to_vec(), ..dt },
        Data { n: dt.n - half, z: dt.z[half * dt.dim..].to_vec(), y: dt.y[half * dt.c..].to_vec(), ..dt },
    );
    let mut sa = streamed(&a, 50);
    sa.merge(&streamed(&b, 71)).unwrap();
    let (cm, cw) = (sa.centered(), whole.centered());
    assert!(rel(&cm.cov, &cw.cov) < 1e-10);
    assert!(rel(&cm.czy, &cw.czy) < 1e-10);
    assert_eq!(sa.n, whole.n);
}
