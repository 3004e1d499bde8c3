//! Batch-job features: shard and merge, checkpoint and resume (including real kills),
//! two-pass mode and semi-supervised PCA against dense in-memory computations, λ by
//! validation against scoring each λ separately, and `transform`.

use std::sync::Arc;

use crate::common::*;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type};
use arrow_array::{ArrayRef, Float64Array, Int64Array};
use faer::prelude::*;
use faer::{Mat, Side};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use sketchfit::model::Model;
use sketchfit::rng::StageRng;

#[test]
fn sharded_runs_give_the_single_process_model_and_duplicates_are_refused() {
    let dir = TempDir::new("shards");
    write_data(&dir.path("train.parquet"), 3000, 150, 1);
    let p = pipeline_file(&dir, CLASSIFY);
    let single = dir.path("single.sfm");
    run_ok(&["train", &p, "-o", single.to_str().unwrap(), "-q"]);
    let reference = Model::load(&single).unwrap();
    for n in [1usize, 2, 3, 7] {
        let parts: Vec<String> = (0..n)
            .map(|i| {
                let part = dir.path(&format!("part-{i}-of-{n}.stats"));
                run_ok(&["accumulate", &p, "--shard", &format!("{i}/{n}"), "-o", part.to_str().unwrap(), "-q"]);
                part.to_string_lossy().into_owned()
            })
            .collect();
        let merged = dir.path(&format!("merged{n}.sfm"));
        let mut args = vec!["solve", &p];
        args.extend(parts.iter().map(String::as_str));
        args.extend(["-o", merged.to_str().unwrap(), "-q"]);
        run_ok(&args);
        let m = Model::load(&merged).unwrap();
        assert!(
            rel(&m.weights, &reference.weights) < 1e-10,
            "N = {n}: W differs by {}",
            rel(&m.weights, &reference.weights)
        );
        assert!(rel(&m.bias, &reference.bias) < 1e-10, "N = {n}: b");
        assert_eq!(m.header.rows, 3000);
        if n == 3 {
            // Any order of the parts gives the same model: they merge in shard order.
            let reversed = dir.path("reversed.sfm");
            let mut args = vec!["solve", &p];
            args.extend(parts.iter().rev().map(String::as_str));
            args.extend(["-o", reversed.to_str().unwrap(), "-q"]);
            run_ok(&args);
            assert_eq!(std::fs::read(&reversed).unwrap(), std::fs::read(&merged).unwrap());
            // The same shard twice is refused, not double-counted.
            let out = sketchfit(&[
                "solve",
                &p,
                &parts[0],
                &parts[1],
                &parts[1],
                &parts[2],
                "-o",
                dir.path("dup.sfm").to_str().unwrap(),
            ]);
            assert_eq!(out.status.code(), Some(2));
            assert!(stderr(&out).contains("given twice"), "{}", stderr(&out));
            assert!(!dir.path("dup.sfm").exists());
            // solve rebuilds the maps from the parts' seed and stages, never from its own
            // command line: a different seed or stage is refused, naming the key.
            let other = dir.path("other.sfm");
            for (set, key) in [("run.seed=2", "run.seed"), ("stages.0.dim=48", "stages")] {
                let mut args = vec!["solve", &p, "--set", set];
                args.extend(parts.iter().map(String::as_str));
                args.extend(["-o", other.to_str().unwrap()]);
                let out = sketchfit(&args);
                assert_eq!(out.status.code(), Some(2), "{set}: {}", stderr(&out));
                assert!(stderr(&out).contains(key), "{set}: {}", stderr(&out));
                assert!(!other.exists());
            }
            // Shards of one run are one data set: weighing them by age is refused.
            let parts_args = [parts[0].as_str(), parts[1].as_str(), parts[2].as_str()];
            let out = sketchfit(
                &[
                    &["solve", p.as_str()][..],
                    &parts_args[..],
                    &["--decay", "1", "-o", dir.path("d.sfm").to_str().unwrap()],
                ]
                .concat(),
            );
            assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
            assert!(stderr(&out).contains("accumulated over a maps file"), "{}", stderr(&out));
            // Merged statistics are for parts over maps; shards of a run solve as they are.
            let merged_out = dir.path("merged.sfs");
            let out = sketchfit(
                &[
                    &["solve", p.as_str()][..],
                    &parts_args[..],
                    &["--statistics", merged_out.to_str().unwrap(), "-o", dir.path("d.sfm").to_str().unwrap()],
                ]
                .concat(),
            );
            assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
            assert!(stderr(&out).contains("--statistics") && !merged_out.exists(), "{}", stderr(&out));
            // A missing shard is an error unless allowed.
            let out = sketchfit(&["solve", &p, &parts[0], &parts[2], "-o", dir.path("miss.sfm").to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(2));
            assert!(stderr(&out).contains("missing"), "{}", stderr(&out));
            run_ok(&[
                "solve",
                &p,
                &parts[0],
                &parts[2],
                "--allow-partial",
                "-o",
                dir.path("partial.sfm").to_str().unwrap(),
                "-q",
            ]);
            // 20 row groups of 150 rows; shard 1 of 3 holds 7 of them.
            assert_eq!(Model::load(&dir.path("partial.sfm")).unwrap().header.rows, 3000 - 7 * 150);
            // A damaged part is detected.
            let mut bytes = std::fs::read(&parts[1]).unwrap();
            let k = bytes.len() - 9;
            bytes[k] ^= 1;
            std::fs::write(dir.path("bad.stats"), bytes).unwrap();
            let out = sketchfit(&[
                "solve",
                &p,
                &parts[0],
                dir.path("bad.stats").to_str().unwrap(),
                &parts[2],
                "-o",
                dir.path("bad.sfm").to_str().unwrap(),
            ]);
            assert_eq!(out.status.code(), Some(2));
            assert!(stderr(&out).contains("checksum mismatch"), "{}", stderr(&out));
        }
    }
    // Shards of another pipeline (another seed) do not mix.
    let other = dir.path("other.stats");
    run_ok(&["accumulate", &p, "--shard", "1/2", "--set", "run.seed=5", "-o", other.to_str().unwrap(), "-q"]);
    let first = dir.path("part-0-of-2.stats");
    let out = sketchfit(&[
        "solve",
        &p,
        first.to_str().unwrap(),
        other.to_str().unwrap(),
        "-o",
        dir.path("mix.sfm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("different pipeline"), "{}", stderr(&out));
    let out = sketchfit(&["accumulate", &p, "--shard", "3/3", "-o", dir.path("x.stats").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

/// Dense rows of features z(x) for a model's map.
fn features(m: &Model, path: &std::path::Path) -> (Vec<f32>, Vec<f64>, usize) {
    let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap().build().unwrap();
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for b in r {
        let b = b.unwrap();
        for i in 0..b.num_rows() {
            for name in ["x0", "x1", "x2", "x3", "x4", "x5"] {
                x.push(
                    b.column_by_name(name).unwrap().as_primitive::<arrow_array::types::Float64Type>().value(i) as f32
                );
            }
            y.push(b.column_by_name("y").unwrap().as_primitive::<arrow_array::types::Float64Type>().value(i));
        }
    }
    let n = y.len();
    let mut z = vec![0f32; n * m.header.dim];
    m.pipeline.map_chunk(&x, n, &mut z, 1);
    (z, y, n)
}

/// Top-`e` right singular vectors of the centred block `z[:, range]` and its mean.
fn block_pca(z: &[f32], n: usize, dim: usize, range: std::ops::Range<usize>, e: usize) -> (Mat<f64>, Vec<f64>) {
    let len = range.len();
    let mean: Vec<f64> =
        (0..len).map(|j| (0..n).map(|i| f64::from(z[i * dim + range.start + j])).sum::<f64>() / n as f64).collect();
    let zc = Mat::from_fn(n, len, |i, j| f64::from(z[i * dim + range.start + j]) - mean[j]);
    let svd = zc.thin_svd().unwrap();
    (Mat::from_fn(len, e, |i, j| svd.V()[(i, j)]), mean)
}

fn ridge_predict(p_train: &Mat<f64>, y: &[f64], p_test: &Mat<f64>, lambda: f64) -> Vec<f64> {
    let (n, e) = (p_train.nrows(), p_train.ncols());
    let pm: Vec<f64> = (0..e).map(|j| (0..n).map(|i| p_train[(i, j)]).sum::<f64>() / n as f64).collect();
    let ym = y.iter().sum::<f64>() / n as f64;
    let pc = Mat::from_fn(n, e, |i, j| p_train[(i, j)] - pm[j]);
    let yc = Mat::from_fn(n, 1, |i, _| y[i] - ym);
    let a = pc.transpose() * &pc + Mat::<f64>::identity(e, e) * Scale(lambda);
    let w = a.llt(Side::Lower).unwrap().solve(pc.transpose() * &yc);
    (0..p_test.nrows()).map(|i| ym + (0..e).map(|j| (p_test[(i, j)] - pm[j]) * w[(j, 0)]).sum::<f64>()).collect()
}

const REGRESS: &str =
    "task = \"regression\"\n[data]\ntrain = [\"train.parquet\"]\nfeatures = [\"x*\"]\ntargets = [\"y\"]\n\
    [[stages]]\nkind = \"identity\"\n[[stages]]\nkind = \"tensor_sketch\"\ndegree = 2\noffset = 1.0\ndim = 24\n\
    [ridge]\nlambda = 0.5\n";

#[test]
fn two_pass_equals_the_dense_in_memory_computation() {
    let dir = TempDir::new("two-pass");
    write_data(&dir.path("train.parquet"), 800, 100, 4);
    write_data(&dir.path("test.parquet"), 200, 100, 5);
    let p = pipeline_file(&dir, &format!("passes = 2\n{REGRESS}[pca]\nper_stage = [3, 10]\n"));
    let mpath = dir.path("m.sfm");
    run_ok(&["train", &p, "-o", mpath.to_str().unwrap(), "-q"]);
    let m = Model::load(&mpath).unwrap();
    assert_eq!(m.header.passes, 2);
    let dim = m.header.dim;
    let (z, y, n) = features(&m, &dir.path("train.parquet"));
    let (zt, _, nt) = features(&m, &dir.path("test.parquet"));
    let blocks = [(0..6, 3), (6..30, 10)];
    let project = |z: &[f32], rows: usize, fits: &[(Mat<f64>, Vec<f64>)]| {
        Mat::from_fn(rows, 13, |i, j| {
            let (b, jj) = if j < 3 { (0, j) } else { (1, j - 3) };
            let (range, _) = &blocks[b];
            (0..range.len())
                .map(|k| (f64::from(z[i * dim + range.start + k]) - fits[b].1[k]) * fits[b].0[(k, jj)])
                .sum()
        })
    };
    let fits: Vec<(Mat<f64>, Vec<f64>)> = blocks.iter().map(|(r, e)| block_pca(&z, n, dim, r.clone(), *e)).collect();
    let want = ridge_predict(&project(&z, n, &fits), &y, &project(&zt, nt, &fits), 0.5);
    let mut buf = Vec::new();
    let xt: Vec<f32> = {
        let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(dir.path("test.parquet")).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let mut x = Vec::new();
        for b in r {
            let b = b.unwrap();
            for i in 0..b.num_rows() {
                for name in ["x0", "x1", "x2", "x3", "x4", "x5"] {
                    x.push(b.column_by_name(name).unwrap().as_primitive::<arrow_array::types::Float64Type>().value(i)
                        as f32);
                }
            }
        }
        x
    };
    let got = m.scores(&xt, nt, &mut buf, 1);
    assert!(rel(&got, &want) < 1e-8, "two-pass vs dense: {}", rel(&got, &want));
}

#[test]
fn unlabeled_rows_enter_the_pca_only() {
    let dir = TempDir::new("semi");
    write_data(&dir.path("train.parquet"), 600, 100, 6);
    write_data(&dir.path("extra.parquet"), 400, 100, 7);
    write_data(&dir.path("test.parquet"), 100, 100, 8);
    let base = format!("{REGRESS}[pca]\ncomponents = 12\n");
    let semi = base.replace("targets = [\"y\"]", "targets = [\"y\"]\nunlabeled = [\"extra.parquet\"]");
    let (ps, pu) = (dir.path("s.sfm"), dir.path("u.sfm"));
    run_ok(&["train", &pipeline_file(&dir, &base), "-o", ps.to_str().unwrap(), "-q"]);
    run_ok(&["train", &pipeline_file(&dir, &semi), "-o", pu.to_str().unwrap(), "-q"]);
    let (ms, mu) = (Model::load(&ps).unwrap(), Model::load(&pu).unwrap());
    assert_eq!((ms.header.unlabeled_rows, mu.header.unlabeled_rows), (0, 400));
    assert_eq!(ms.header.rows, mu.header.rows, "the ridge sees the labeled rows only");
    assert!(rel(&mu.eigenvalues, &ms.eigenvalues) > 1e-3, "the unlabeled rows change the PCA");
    // In-memory: PCA of all 1000 rows, ridge on the 600 labeled ones.
    let dim = mu.header.dim;
    let (zl, y, nl) = features(&mu, &dir.path("train.parquet"));
    let (zu, _, nu) = features(&mu, &dir.path("extra.parquet"));
    let (zt, _, nt) = features(&mu, &dir.path("test.parquet"));
    let mut all = zl.clone();
    all.extend_from_slice(&zu);
    let (u, mean) = block_pca(&all, nl + nu, dim, 0..dim, 12);
    let proj = |z: &[f32], rows: usize| {
        Mat::from_fn(rows, 12, |i, j| (0..dim).map(|k| (f64::from(z[i * dim + k]) - mean[k]) * u[(k, j)]).sum())
    };
    let want = ridge_predict(&proj(&zl, nl), &y, &proj(&zt, nt), 0.5);
    // Model scores from the features directly (f(x) = Wᵀz + b).
    let got: Vec<f64> = (0..nt)
        .map(|i| mu.bias[0] + (0..dim).map(|k| f64::from(zt[i * dim + k]) * mu.weights[k]).sum::<f64>())
        .collect();
    assert!(rel(&got, &want) < 1e-8, "semi-supervised vs dense: {}", rel(&got, &want));
}

#[test]
fn null_labels_as_unlabeled_rows_and_no_unlabeled_rows_gives_the_supervised_model() {
    let dir = TempDir::new("null-labels");
    write_data(&dir.path("train.parquet"), 600, 100, 9);
    let sup = dir.path("sup.sfm");
    run_ok(&["train", &pipeline_file(&dir, CLASSIFY), "-o", sup.to_str().unwrap(), "-q"]);
    let semi_body = CLASSIFY.replace("label = \"label\"", "label = \"label\"\nnull_labels = \"unlabeled\"");
    let semi = dir.path("semi.sfm");
    run_ok(&["train", &pipeline_file(&dir, &semi_body), "-o", semi.to_str().unwrap(), "-q"]);
    let (a, b) = (Model::load(&sup).unwrap(), Model::load(&semi).unwrap());
    assert_eq!(a.weights, b.weights, "zero unlabeled rows: the one-pass model");
    assert_eq!(a.bias, b.bias);
    // Now null out a third of the labels: they join the PCA only.
    let mut r = StageRng::new(3, 0);
    let n = 600;
    let labels: Vec<Option<i64>> = (0..n).map(|i| if i % 3 == 0 { None } else { Some(r.below(3) as i64) }).collect();
    let x: Vec<f64> = (0..n).map(|_| r.uniform()).collect();
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("x0", Arc::new(Float64Array::from(x.clone()))),
        ("x1", Arc::new(Float64Array::from(x.iter().map(|v| v * v).collect::<Vec<_>>()))),
        ("label", Arc::new(Int64Array::from(labels))),
    ];
    write_parquet(&dir.path("train.parquet"), cols, 100);
    let m = dir.path("nulls.sfm");
    run_ok(&["train", &pipeline_file(&dir, &semi_body), "-o", m.to_str().unwrap(), "-q"]);
    let mm = Model::load(&m).unwrap();
    assert_eq!((mm.header.rows, mm.header.unlabeled_rows), (400, 200));
    // Without the setting a null label is an error.
    let out = sketchfit(&["train", &pipeline_file(&dir, CLASSIFY), "-o", dir.path("e.sfm").to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("null"));
}

#[test]
fn validation_scores_equal_scoring_each_lambda_separately() {
    let dir = TempDir::new("validation");
    write_data(&dir.path("train.parquet"), 900, 150, 10);
    write_data(&dir.path("valid.parquet"), 300, 150, 11);
    let body = CLASSIFY.replace("label = \"label\"", "label = \"label\"\nvalidation = [\"valid.parquet\"]");
    let p = pipeline_file(&dir, &body);
    let mpath = dir.path("v.sfm");
    // Without the refit, the model is the training rows' model at the chosen λ.
    let out = run_ok(&["train", &p, "-o", mpath.to_str().unwrap(), "-q", "--set", "ridge.refit=false"]);
    assert!(out.contains("trained on 900 rows"));
    let m = Model::load(&mpath).unwrap();
    let table = m.header.validation.clone().expect("a validation table");
    assert_eq!((table.metric.as_str(), table.rows, table.grid.len()), ("accuracy", 300, 41));
    let best = table.score.iter().copied().fold(f64::MIN, f64::max);
    assert!((table.score[table.grid.iter().position(|&l| l == m.header.lambdas[0]).unwrap()] - best).abs() < 1e-15);
    for i in [4usize, 20, 36] {
        let fixed = dir.path(&format!("f{i}.sfm"));
        run_ok(&[
            "train",
            &p,
            "-o",
            fixed.to_str().unwrap(),
            "-q",
            "--set",
            &format!("ridge.lambda={:e}", table.grid[i]),
        ]);
        let ev =
            run_ok(&["evaluate", fixed.to_str().unwrap(), "-i", dir.path("valid.parquet").to_str().unwrap(), "--json"]);
        let acc = serde_json::from_str::<serde_json::Value>(&ev).unwrap()["accuracy"].as_f64().unwrap();
        assert!(
            (acc - table.score[i]).abs() < 1e-12,
            "λ = {}: evaluate {acc} vs table {}",
            table.grid[i],
            table.score[i]
        );
    }
}

#[test]
fn a_validation_refit_equals_training_on_both_files_at_the_chosen_lambda() {
    let dir = TempDir::new("refit");
    write_data(&dir.path("train.parquet"), 900, 150, 10);
    write_data(&dir.path("valid.parquet"), 300, 150, 11);
    let no_pca = CLASSIFY.replace("[pca]\ncomponents = 40\n", "");
    for (name, body) in [("pca", CLASSIFY.to_string()), ("no-pca", no_pca)] {
        let with_validation = body.replace("label = \"label\"", "label = \"label\"\nvalidation = [\"valid.parquet\"]");
        let p = pipeline_file(&dir, &with_validation);
        let refit = dir.path(&format!("{name}-refit.sfm"));
        let out = run_ok(&["train", &p, "-o", refit.to_str().unwrap(), "-q"]);
        assert!(out.contains("trained on 1200 rows"), "{name}: {out}");
        let m = Model::load(&refit).unwrap();
        let table = m.header.validation.clone().expect("a validation table");
        assert_eq!((table.rows, table.refit_rows, m.header.rows), (300, Some(1200), 1200), "{name}");
        let shown = run_ok(&["inspect", refit.to_str().unwrap()]);
        assert!(shown.contains("by accuracy on 300 validation rows, then refitted on 1200 rows"), "{shown}");
        // The same rows trained in one pass at the chosen λ.
        let both = body.replace("train = [\"train.parquet\"]", "train = [\"train.parquet\", \"valid.parquet\"]");
        let p = pipeline_file(&dir, &both);
        let direct = dir.path(&format!("{name}-direct.sfm"));
        let lambda = format!("ridge.lambda={:e}", m.header.lambdas[0]);
        run_ok(&["train", &p, "-o", direct.to_str().unwrap(), "-q", "--set", &lambda]);
        let d = Model::load(&direct).unwrap();
        assert_eq!(d.header.rows, 1200);
        assert!(rel(&m.weights, &d.weights) < 1e-7, "{name}: weights differ by {:e}", rel(&m.weights, &d.weights));
        assert!(rel(&m.bias, &d.bias) < 1e-7, "{name}: bias differs by {:e}", rel(&m.bias, &d.bias));
    }
    // Two passes: the validation rows join the pass-two statistics.
    let two = CLASSIFY
        .replace("[data]", "passes = 2\n[data]")
        .replace("label = \"label\"", "label = \"label\"\nvalidation = [\"valid.parquet\"]");
    let out = run_ok(&["train", &pipeline_file(&dir, &two), "-o", dir.path("two.sfm").to_str().unwrap(), "-q"]);
    assert!(out.contains("trained on 1200 rows"), "{out}");
    let m = Model::load(&dir.path("two.sfm")).unwrap();
    assert_eq!((m.header.rows, m.header.unlabeled_rows), (1200, 0), "no row is unlabeled");
}

#[test]
fn ecoc_with_the_identity_code_is_one_vs_all_and_a_drawn_code_shards_like_one_process() {
    let dir = TempDir::new("ecoc");
    write_data(&dir.path("train.parquet"), 1200, 150, 21);
    write_data(&dir.path("test.parquet"), 400, 100, 22);
    let test = dir.path("test.parquet");
    let predict = |m: &std::path::Path, out: &str| -> Vec<i64> {
        let o = dir.path(out);
        run_ok(&["predict", m.to_str().unwrap(), "-i", test.to_str().unwrap(), "-o", o.to_str().unwrap()]);
        let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&o).unwrap()).unwrap().build().unwrap();
        r.flat_map(|b| b.unwrap().column_by_name("prediction").unwrap().as_primitive::<Int64Type>().values().to_vec())
            .collect()
    };
    let ova = dir.path("ova.sfm");
    run_ok(&["train", &pipeline_file(&dir, CLASSIFY), "-o", ova.to_str().unwrap(), "-q"]);
    // The identity code 2I − 11ᵀ (3 classes) as a code file: the same targets, so the
    // same weights, and nearest-row decoding is the argmax.
    std::fs::write(dir.path("identity.code"), "1 -1 -1\n-1 1 -1\n-1 -1 1\n").unwrap();
    let ident = CLASSIFY.to_string() + "[ridge]\ncodes = \"ecoc\"\ncode_file = \"identity.code\"\n";
    let im = dir.path("ident.sfm");
    run_ok(&["train", &pipeline_file(&dir, &ident), "-o", im.to_str().unwrap(), "-q"]);
    let (a, b) = (Model::load(&ova).unwrap(), Model::load(&im).unwrap());
    assert_eq!(b.header.code.as_ref().map(Vec::len), Some(3), "the model stores its code");
    assert!(rel(&b.weights, &a.weights) < 1e-12 && rel(&b.bias, &a.bias) < 1e-12);
    assert_eq!(predict(&im, "pi.parquet"), predict(&ova, "po.parquet"));

    // 3 classes have only 3 useful columns: a longer drawn code is refused, naming the key.
    let long = CLASSIFY.to_string() + "[ridge]\ncodes = \"ecoc\"\n";
    let out = sketchfit(&["train", &pipeline_file(&dir, &long), "-o", dir.path("x.sfm").to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("ridge.code_length") && stderr(&out).contains("code_length ≤ 3"), "{}", stderr(&out));

    // A drawn code of length 3: shards carry it, and solve gives the one-process model.
    let drawn = CLASSIFY.to_string() + "[ridge]\ncodes = \"ecoc\"\ncode_length = 3\n";
    let p = pipeline_file(&dir, &drawn);
    let single = dir.path("single.sfm");
    run_ok(&["train", &p, "-o", single.to_str().unwrap(), "-q"]);
    let parts: Vec<String> = (0..2)
        .map(|i| {
            let part = dir.path(&format!("e{i}.stats"));
            run_ok(&["accumulate", &p, "--shard", &format!("{i}/2"), "-o", part.to_str().unwrap(), "-q"]);
            part.to_string_lossy().into_owned()
        })
        .collect();
    let merged = dir.path("merged.sfm");
    run_ok(&["solve", &p, &parts[0], &parts[1], "-o", merged.to_str().unwrap(), "-q"]);
    let (s, m) = (Model::load(&single).unwrap(), Model::load(&merged).unwrap());
    assert_eq!(s.header.code, m.header.code);
    let shown = run_ok(&["inspect", merged.to_str().unwrap()]);
    assert!(shown.contains("output code: ECOC, 3 classes × L = 3"), "{shown}");
    assert_eq!(s.header.outputs, 3);
    assert!(rel(&m.weights, &s.weights) < 1e-10);
    let truth: Vec<i64> = {
        let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&test).unwrap()).unwrap().build().unwrap();
        r.flat_map(|b| b.unwrap().column_by_name("label").unwrap().as_primitive::<Int64Type>().values().to_vec())
            .collect()
    };
    let got = predict(&merged, "pm.parquet");
    let right = got.iter().zip(&truth).filter(|(a, b)| a == b).count();
    assert!(right as f64 > 0.8 * truth.len() as f64, "ECOC accuracy {right}/{}", truth.len());
}

#[test]
fn transform_writes_uncorrelated_pca_features_with_the_eigenvalues_as_variances() {
    let dir = TempDir::new("transform");
    write_data(&dir.path("train.parquet"), 700, 100, 12);
    // The features span 27 dimensions (quadratic monomials of 6 inputs, centred): keep 20.
    let body = CLASSIFY.replace("components = 40", "components = 20");
    let p = pipeline_file(&dir, &body);
    let mpath = dir.path("m.sfm");
    run_ok(&["train", &p, "-o", mpath.to_str().unwrap(), "-q"]);
    let out = dir.path("pca.parquet");
    run_ok(&[
        "transform",
        mpath.to_str().unwrap(),
        "-i",
        dir.path("train.parquet").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--keep",
        "label",
    ]);
    let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&out).unwrap()).unwrap().build().unwrap();
    let mut p: Vec<f64> = Vec::new();
    let mut rows = 0;
    for b in r {
        let b = b.unwrap();
        let list = b.column_by_name("pca").unwrap().as_fixed_size_list();
        assert_eq!(list.value_length(), 20);
        p.extend(list.values().as_primitive::<Float32Type>().values().iter().map(|&v| f64::from(v)));
        rows += b.num_rows();
        assert!(b.column_by_name("label").is_some());
    }
    assert_eq!(rows, 700);
    let m = Model::load(&mpath).unwrap();
    let ev = &m.projections[0].eigenvalues;
    for j in 0..20 {
        let mean: f64 = (0..rows).map(|i| p[i * 20 + j]).sum::<f64>() / rows as f64;
        assert!(mean.abs() < 1e-4 * ev[0].sqrt(), "component {j} is not centred: {mean}");
        for k in 0..=j {
            let c: f64 = (0..rows).map(|i| p[i * 20 + j] * p[i * 20 + k]).sum();
            let want = if j == k { ev[j] } else { 0.0 };
            assert!((c - want).abs() < 1e-4 * ev[0], "cov[{j}][{k}] = {c}, want {want}");
        }
    }
    let i = sketchfit(&["inspect", mpath.to_str().unwrap(), "--plot", dir.path("scree.svg").to_str().unwrap()]);
    assert_eq!(i.status.code(), Some(0));
    assert!(std::fs::read_to_string(dir.path("scree.svg")).unwrap().contains("<polyline"));
    // A model without PCA has nothing to transform.
    let np = pipeline_file(&dir, &CLASSIFY.replace("[pca]\ncomponents = 40\n", ""));
    assert!(!std::fs::read_to_string(&np).unwrap().contains("[pca]"));
    run_ok(&["train", &np, "-o", dir.path("nopca.sfm").to_str().unwrap(), "-q"]);
    let o = sketchfit(&[
        "transform",
        dir.path("nopca.sfm").to_str().unwrap(),
        "-i",
        dir.path("train.parquet").to_str().unwrap(),
        "-o",
        dir.path("x.parquet").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!dir.path("x.parquet").exists());
}

#[test]
fn sharded_two_pass_runs_give_the_single_process_model() {
    let dir = TempDir::new("shards-two-pass");
    write_data(&dir.path("train.parquet"), 2400, 150, 13);
    let p = pipeline_file(&dir, &format!("passes = 2\n{}", CLASSIFY.replace("components = 40", "per_stage = [20, 5]")));
    let single = dir.path("single.sfm");
    run_ok(&["train", &p, "-o", single.to_str().unwrap(), "-q"]);
    let reference = Model::load(&single).unwrap();
    let n = 3;
    let run_parts = |pass1: Option<&str>, tag: &str| -> Vec<String> {
        (0..n)
            .map(|i| {
                let part = dir.path(&format!("{tag}-{i}.stats"));
                let shard = format!("{i}/{n}");
                let mut args =
                    vec!["accumulate", p.as_str(), "--shard", shard.as_str(), "-o", part.to_str().unwrap(), "-q"];
                if let Some(f) = pass1 {
                    args.extend(["--pass1", f]);
                }
                run_ok(&args);
                part.to_string_lossy().into_owned()
            })
            .collect()
    };
    let p1 = run_parts(None, "p1");
    let merged1 = dir.path("pass1.stats");
    let mut args = vec!["solve", p.as_str()];
    args.extend(p1.iter().map(String::as_str));
    args.extend(["-o", merged1.to_str().unwrap(), "-q"]);
    assert!(run_ok(&args).contains("pass one merged"));
    let p2 = run_parts(Some(merged1.to_str().unwrap()), "p2");
    let model = dir.path("sharded.sfm");
    let mut args = vec!["solve", p.as_str(), "--pass1", merged1.to_str().unwrap()];
    args.extend(p2.iter().map(String::as_str));
    args.extend(["-o", model.to_str().unwrap(), "-q"]);
    run_ok(&args);
    let m = Model::load(&model).unwrap();
    assert!(rel(&m.weights, &reference.weights) < 1e-10, "W differs by {}", rel(&m.weights, &reference.weights));
    assert!(rel(&m.bias, &reference.bias) < 1e-10);
    // Pass-two parts without their pass-one file, or mixed with pass-one parts, are refused.
    let x = dir.path("x.sfm");
    let mut args = vec!["solve", p.as_str()];
    args.extend(p2.iter().map(String::as_str));
    args.extend(["-o", x.to_str().unwrap()]);
    let o = sketchfit(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = sketchfit(&[
        "solve",
        &p,
        "--pass1",
        merged1.to_str().unwrap(),
        &p1[0],
        &p2[1],
        &p2[2],
        "-o",
        dir.path("y.sfm").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!dir.path("x.sfm").exists() && !dir.path("y.sfm").exists());
}
