//! The dual path (at most D/2 labeled rows): the same model as the primal solve, taken
//! by `auto` where it answers the question, refused by key where it cannot, and never
//! resumed over a statistics checkpoint.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::Int64Array;
use sketchfit::api::InMemoryFit;
use sketchfit::sketch::RffSpec;
use sketchfit::solve::SolvePath;
use sketchfit::{Lambda, Model, Pipeline};

use crate::common::*;

/// Random Fourier features of the rings (`D` = 1024, a full-rank kernel).
fn rff_pipeline(lambda: Lambda) -> Pipeline {
    Pipeline::classification("label")
        .features(["a", "b", "c", "d"])
        .stage(RffSpec { dim: 1024, sigma: Some(1.5), ..Default::default() })
        .lambda(lambda)
        .seed(5)
        .threads(2)
}

fn with_solver(p: Pipeline, solver: SolvePath) -> Pipeline {
    let mut p = p;
    p.spec_mut().ridge.solver = solver;
    p
}

#[test]
fn few_rows_train_in_the_dual_and_give_the_primal_model() {
    // 300 rows ≤ D/2 = 512: `auto` keeps the rows and solves on the 300 × 300 kernel.
    // A quarter of the labels moved to the next class: GCV wants a λ well above the
    // rounding floor, where both paths are accurate to 1e-8 (at the grid's smallest λ,
    // C + λI has a condition number near 1e9 and the two agree to about 1e-7).
    let mut cols = rings(300, 3);
    let noisy: Vec<i64> = cols[4]
        .1
        .as_primitive::<Int64Type>()
        .values()
        .iter()
        .enumerate()
        .map(|(i, &k)| if i % 4 == 0 { (k + 1) % 3 } else { k })
        .collect();
    cols[4].1 = Arc::new(Int64Array::from(noisy));
    for (lambda, primal) in [
        (Lambda::Fixed(0.05), SolvePath::Cholesky),
        (Lambda::Gcv, SolvePath::Tridiagonal),
        (Lambda::GcvPerOutput, SolvePath::Tridiagonal),
    ] {
        let dual = rff_pipeline(lambda).fit(batches(&cols, 100)).unwrap();
        let want = with_solver(rff_pipeline(lambda), primal).fit(batches(&cols, 100)).unwrap();
        assert_eq!(dual.header.solver.as_deref(), Some("dual"), "{lambda:?}");
        assert_eq!(want.header.solver.as_deref(), Some(primal.name()));
        assert!(rel(&dual.header.lambdas, &want.header.lambdas) < 1e-12, "{lambda:?}: λ {:?}", dual.header.lambdas);
        // Rounding grows with the condition number of C + λI, at most D·σ̄/λ.
        let lambda_min = dual.header.lambdas.iter().copied().fold(f64::INFINITY, f64::min);
        let trace = dual.header.gcv.as_ref().map_or(0.0, |g| 1024.0 * g.sigma_bar);
        let tol = (1e-15 * trace / lambda_min).max(1e-8);
        let (dw, db) = (rel(&dual.weights, &want.weights), rel(&dual.bias, &want.bias));
        assert!(dw < tol && db < tol, "{lambda:?}: weights {dw}, bias {db}, tolerance {tol}");
        if let (Some(a), Some(b)) = (&dual.header.gcv, &want.header.gcv) {
            // Both curves carry the rounding of C's smallest eigenvalues, which grows
            // as σ_max/λ ≤ D·σ̄/λ = 1024·10^(8 − i/4): tolerance 1e-12·10^(8 − i/4),
            // floored at 1e-9 (at λ = 10^-8·σ̄ they agree to 5e-6, from λ = σ̄ to 1e-10).
            for i in 0..b.grid.len() {
                let tol = (1e-12 * 10f64.powf(8.0 - i as f64 / 4.0)).max(1e-9);
                assert!((a.shared[i] - b.shared[i]).abs() <= tol * b.shared[i], "GCV at {i}");
                assert!((a.df[i] - b.df[i]).abs() <= tol * b.df[i], "df at {i}");
            }
        }
    }

    // The command line takes the same path on the same rows, and leaves no checkpoint.
    let dir = TempDir::new("dual");
    write_parquet(&dir.path("t.parquet"), cols.clone(), 100);
    let text = "task = \"classification\"\n[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"a\", \"b\", \"c\", \"d\"]\nlabel = \"label\"\n[[stages]]\nkind = \"rff\"\ndim = 1024\nsigma = 1.5\n[ridge]\nlambda = 0.05\n[run]\nseed = 5\nthreads = 2\n";
    std::fs::write(dir.path("p.toml"), text).unwrap();
    let model = dir.path("m.sfm");
    let json = dir.path("m.json");
    let p = dir.path("p.toml");
    let out =
        sketchfit(&["train", p.to_str().unwrap(), "-o", model.to_str().unwrap(), "--report", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = report(&json);
    assert_eq!(r["plan"], serde_json::json!({"mode": "dual", "lambda": {"fixed": 0.05}, "rows": 300}), "{r}");
    assert!(r["memory"]["line"].as_str().unwrap().contains("300 rows ≤ D/2 = 512"), "{r}");
    assert_eq!(r["solve"]["path"], "dual");
    assert!(!dir.path("m.sfm.ckpt").exists());
    let cli = Model::load(&model).unwrap();
    let lib = rff_pipeline(Lambda::Fixed(0.05)).fit(batches(&cols, 100)).unwrap();
    assert_eq!(cli.weights, lib.weights);

    // An in-memory fit keeps what continues it: the model for few rows, the statistics
    // (which solve to the model `fit` gives) for more than D/2.
    let p = rff_pipeline(Lambda::Fixed(0.05));
    match p.fit_or_accumulate(batches(&cols, 100)).unwrap() {
        InMemoryFit::Model(m) => assert_eq!(m.weights, lib.weights),
        InMemoryFit::Statistics(_) => panic!("300 rows of D = 1024 should train in the dual"),
    }
    let many = rings(700, 4);
    match p.fit_or_accumulate(batches(&many, 100)).unwrap() {
        InMemoryFit::Statistics(s) => {
            let m = p.solve(vec![*s]).unwrap();
            assert_eq!(m.header.solver.as_deref(), Some("cholesky"));
            assert_eq!(m.weights, p.fit(batches(&many, 100)).unwrap().weights);
        }
        InMemoryFit::Model(_) => panic!("700 rows > D/2 keep statistics"),
    }
    // Statistics are never rows: accumulating 300 rows gives a part that solves by Cholesky.
    let part = p.accumulate(batches(&cols, 100), (0, 1)).unwrap();
    let m = p.solve(vec![part]).unwrap();
    assert_eq!(m.header.solver.as_deref(), Some("cholesky"));
    assert!(rel(&m.weights, &lib.weights) < 1e-8);

    // Asked for where it cannot run (PCA; λ = 0; too many rows): refused, naming the key.
    for (p, rows) in [
        (with_solver(rff_pipeline(Lambda::Fixed(0.05)).pca(16), SolvePath::Dual), &cols),
        (with_solver(rff_pipeline(Lambda::Fixed(0.0)), SolvePath::Dual), &cols),
        (with_solver(rff_pipeline(Lambda::Fixed(0.05)), SolvePath::Dual), &many),
    ] {
        let err = p.fit(batches(rows, 100)).unwrap_err().to_string();
        assert!(err.contains("ridge.solver") && err.contains("at most D/2"), "{err}");
    }
    let asked = with_solver(rff_pipeline(Lambda::Fixed(0.05)), SolvePath::Dual).fit(batches(&cols, 100)).unwrap();
    assert_eq!(asked.weights, lib.weights);
}

#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection hooks: cargo test --features fault-injection (scripts/test.sh)"
)]
fn a_resume_in_the_dual_over_a_statistics_checkpoint_is_refused_before_the_pass() {
    let dir = TempDir::new("dual-resume");
    four_columns(&dir.path("t.parquet"), 300, None, 0);
    let text = "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = 1024\nsigma = 1.0\n\n[ridge]\nlambda = 0.1\nsolver = \"cholesky\"\n";
    std::fs::write(dir.path("p.toml"), text).unwrap();
    let p = dir.path("p.toml").to_string_lossy().into_owned();
    let model = dir.path("m.sfm").to_string_lossy().into_owned();
    let out = killed_train(&p, &model, 2);
    assert_ne!(out.status.code(), Some(0));
    let out = sketchfit(&["train", &p, "-o", &model, "--resume", "--set", "ridge.solver=dual"]);
    refused(&out, &["m.sfm.ckpt", "statistics", "dual"]);
    assert!(!stderr(&out).contains("pass 1:"), "refused before the pass: {}", stderr(&out));
}
