//! The LASSO family as the pipeline's learner (`[solver]`): the model's weights equal
//! coordinate descent on the statistics computed directly from the rows, satisfy the
//! KKT conditions, and a group lasso over [a useful kernel, a pure-noise kernel] keeps
//! only the useful one.

use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array};
use sketchfit::pipeline::spec::{SolverKind, SolverSpec};
use sketchfit::sketch::{IdentitySpec, RffSpec};
use sketchfit::solve::cd::{self as lasso, Penalty, Problem};
use sketchfit::Pipeline;

use crate::common::*;

/// `n` rows of `d` columns `x0…`, target `y = 3x0 − 2x1 + noise`.
fn linear(n: usize, d: usize, seed: u64) -> (Vec<(String, ArrayRef)>, Vec<f64>, Vec<f64>) {
    let mut r = sketchfit::rng::StageRng::new(seed, 3);
    let x: Vec<f64> = (0..n * d).map(|_| r.normal()).collect();
    let y: Vec<f64> = (0..n).map(|i| 3.0 * x[i * d] - 2.0 * x[i * d + 1] + 0.3 * r.normal()).collect();
    let mut cols: Vec<(String, ArrayRef)> = (0..d)
        .map(|j| {
            let c: Vec<f64> = (0..n).map(|i| x[i * d + j]).collect();
            (format!("x{j}"), Arc::new(Float64Array::from(c)) as ArrayRef)
        })
        .collect();
    cols.push(("y".into(), Arc::new(Float64Array::from(y.clone()))));
    (cols, x, y)
}

fn write(dir: &TempDir, name: &str, cols: &[(String, ArrayRef)]) -> String {
    let path = dir.path(name);
    write_parquet(&path, cols.iter().map(|(n, a)| (n.as_str(), a.clone())).collect(), 250);
    path.to_string_lossy().into_owned()
}

fn sparse(kind: SolverKind, lambda: Option<f64>, l2: f64) -> SolverSpec {
    SolverSpec { kind, lambda, l2, tolerance: 1e-10, max_sweeps: 100_000, ..Default::default() }
}

/// The pipeline's lasso and elastic net at a fixed λ₁ against coordinate descent on the
/// centred covariance of the rows themselves (f32 features, as the pass sees them), and
/// the KKT conditions at the model's weights.
#[test]
fn fixed_lambda_weights_equal_a_direct_fit_and_meet_the_kkt_conditions() {
    let (n, d) = (1000, 8);
    let dir = TempDir::new("sparse-direct");
    let (cols, x, y) = linear(n, d, 1);
    let file = write(&dir, "t.parquet", &cols);
    let xf: Vec<f64> = x.iter().map(|&v| f64::from(v as f32)).collect();
    let mx: Vec<f64> = (0..d).map(|j| (0..n).map(|i| xf[i * d + j]).sum::<f64>() / n as f64).collect();
    let my = y.iter().sum::<f64>() / n as f64;
    let mut c = vec![0.0; d * d];
    let mut r = vec![0.0; d];
    for i in 0..n {
        for a in 0..d {
            let xa = xf[i * d + a] - mx[a];
            r[a] += xa * (y[i] - my);
            for b in 0..d {
                c[a * d + b] += xa * (xf[i * d + b] - mx[b]);
            }
        }
    }
    let cyy: f64 = y.iter().map(|v| (v - my).powi(2)).sum();
    let p = Problem { c: &c, r: &r, cyy, dim: d };
    for (kind, pen, l2) in
        [(SolverKind::Lasso, Penalty::Lasso, 0.0), (SolverKind::ElasticNet, Penalty::ElasticNet { l2: 50.0 }, 50.0)]
    {
        let l1 = 150.0;
        let mut pipe =
            Pipeline::regression(["y"]).features((0..d).map(|j| format!("x{j}"))).stage(IdentitySpec::default());
        pipe.spec_mut().solver = sparse(kind, Some(l1), l2);
        let model = pipe.fit_files([&file]).unwrap();
        let direct = lasso::fit_to(&p, &pen, l1, None, 1e-12);
        assert!(rel(&model.weights, &direct.w) < 1e-6, "{kind:?}: {:?} vs {:?}", model.weights, direct.w);
        // Noise columns are dropped, the signal kept.
        assert!(model.weights[0] > 2.0 && model.weights[1] < -1.0, "{:?}", model.weights);
        assert!(model.weights.iter().skip(2).filter(|w| **w == 0.0).count() >= 4, "{:?}", model.weights);
        // KKT: |r − C̃w| ≤ λ₁ everywhere, = λ₁ with the sign of w where w ≠ 0.
        for j in 0..d {
            let q = r[j] - (0..d).map(|b| c[j * d + b] * model.weights[b]).sum::<f64>() - l2 * model.weights[j];
            if model.weights[j] == 0.0 {
                assert!(q.abs() <= l1 * (1.0 + 1e-6), "{kind:?} j {j}: |q| {q} > λ₁");
            } else {
                assert!((q - l1 * model.weights[j].signum()).abs() <= 1e-4 * l1, "{kind:?} j {j}: q {q}");
            }
        }
        let b = my - (0..d).map(|j| model.weights[j] * mx[j]).sum::<f64>();
        assert!((model.bias[0] - b).abs() < 1e-6 * (1.0 + b.abs()), "intercept unpenalised");
        let t = model.header.sparse.as_ref().unwrap();
        assert_eq!((t.kind.as_str(), t.basis.as_str(), t.path.len()), (kind.name(), "raw", 1));
        assert!(t.gap[0] <= 1e-10 * 1.0001);
    }
}

/// A group lasso over [identity: the signal, RFF with a bandwidth far below the
/// points' spacing: features that cannot generalise] chosen on validation rows keeps
/// the identity group and drops the noise kernel.
#[test]
fn a_group_lasso_over_a_useful_and_a_noise_kernel_drops_the_noise_kernel() {
    let d = 4;
    let dir = TempDir::new("sparse-groups");
    let (train, _, _) = linear(1500, d, 2);
    let (valid, _, _) = linear(500, d, 3);
    let (tf, vf) = (write(&dir, "t.parquet", &train), write(&dir, "v.parquet", &valid));
    let mut pipe = Pipeline::regression(["y"])
        .features((0..d).map(|j| format!("x{j}")))
        .stage(IdentitySpec::default())
        .stage(RffSpec { dim: 64, sigma: Some(1e-3), ..Default::default() })
        .validation([&vf]);
    pipe.spec_mut().solver = SolverSpec { kind: SolverKind::GroupLasso, path: 30, ..Default::default() };
    let model = pipe.fit_files([&tf]).unwrap();
    let t = model.header.sparse.as_ref().unwrap();
    assert_eq!(t.groups.len(), 2);
    assert_eq!(t.active[t.chosen], vec![0], "active groups {:?} at λ₁ {}", t.active[t.chosen], t.path[t.chosen]);
    assert!(model.weights[d..].iter().all(|w| *w == 0.0), "the noise kernel's weights are all zero");
    assert_eq!(t.validation_rows, 500);
    assert_eq!(t.refit_rows, Some(2000));
    // The path starts empty, and inspect shows where each group enters.
    assert!(t.active[0].is_empty());
    let path = dir.path("m.sfm");
    model.save(&path).unwrap();
    let out = sketchfit(&["inspect", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(
        text.contains("solver: group_lasso in the raw basis") && text.contains("active groups stage 0 (identity)"),
        "{text}"
    );
}

#[test]
fn solver_settings_are_checked_by_key() {
    let dir = TempDir::new("sparse-keys");
    let (cols, _, _) = linear(50, 3, 4);
    let f = write(&dir, "t.parquet", &cols);
    let run = |body: &str| {
        let p = dir.path("p.toml");
        std::fs::write(
            &p,
            format!("task = \"regression\"\n[data]\ntrain = [\"{f}\"]\ntargets = [\"y\"]\n[[stages]]\nkind = \"identity\"\n{body}"),
        )
        .unwrap();
        let o = sketchfit(&["train", p.to_str().unwrap(), "-o", dir.path("m.sfm").to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{body}");
        stderr(&o)
    };
    let e = run("[solver]\nkind = \"lasso\"\n");
    assert!(e.contains("solver.lambda") && e.contains("data.validation"), "{e}");
    let e = run("[solver]\nkind = \"lasso\"\nlambda = 1.0\nl2 = 2.0\n");
    assert!(e.contains("solver.l2"), "{e}");
    let e = run("[solver]\nkind = \"group_lasso\"\nlambda = 1.0\n[pca]\ncomponents = 2\n");
    assert!(e.contains("solver.kind") && e.contains("raw basis"), "{e}");
    let e = run("[solver]\nkind = \"ridge\"\nlambda = 1.0\n");
    assert!(e.contains("solver.kind"), "{e}");
    let e = run("[solver]\nkind = \"lasso\"\nlambda = -1.0\n");
    assert!(e.contains("solver.lambda") && e.contains("> 0"), "{e}");
    let e = run("[solver]\nkind = \"lasso\"\nlambda = 1.0\nsweeps = 3\n");
    assert!(e.contains("solver") && e.contains("sweeps"), "{e}");
}
