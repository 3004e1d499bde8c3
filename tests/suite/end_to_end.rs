//! The CLI end to end on `data/` and on generated data: the main job's accuracy,
//! predict / evaluate / inspect, reproducibility, and invariance to chunk size and
//! thread count.

use std::sync::Arc;

use crate::common::*;
use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{ArrayRef, Float64Array, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use sketchfit::model::Model;

fn train(pipeline: &str, model: &std::path::Path, extra: &[&str]) -> String {
    let mut args = vec!["train", pipeline, "-o", model.to_str().unwrap(), "--quiet"];
    args.extend_from_slice(extra);
    let out = sketchfit(&args);
    assert_eq!(out.status.code(), Some(0), "train failed: {}", stderr(&out));
    stdout(&out)
}

/// The accuracy `train` printed for its test files.
fn test_accuracy(out: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix("test accuracy: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no accuracy in: {out}"))
}

fn read_f64(path: &std::path::Path, col: &str) -> Vec<f64> {
    let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap().build().unwrap();
    r.flat_map(|b| {
        let b = b.unwrap();
        b.column_by_name(col).unwrap().as_primitive::<Float64Type>().values().to_vec()
    })
    .collect()
}

#[test]
fn digits_main_job_reaches_97_percent_and_every_command_works() {
    let dir = TempDir::new("digits");
    let model = dir.path("digits.sfm");
    let out = train(&repo("pipelines/digits.toml"), &model, &[]);
    let acc = test_accuracy(&out);
    assert!(acc >= 0.97, "test accuracy {acc}");

    let test = repo("data/digits_test.parquet");
    let ev = sketchfit(&["evaluate", model.to_str().unwrap(), "--input", &test, "--json"]);
    assert_eq!(ev.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout(&ev)).unwrap();
    assert!((v["accuracy"].as_f64().unwrap() - acc).abs() < 1e-4);
    assert_eq!(v["rows"], 450);
    assert_eq!(v["confusion"].as_array().unwrap().len(), 10);

    let pred = dir.path("pred.parquet");
    let p = sketchfit(&[
        "predict",
        model.to_str().unwrap(),
        "-i",
        &test,
        "-o",
        pred.to_str().unwrap(),
        "--keep",
        "label",
        "--scores",
    ]);
    assert_eq!(p.status.code(), Some(0), "{}", stderr(&p));
    let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&pred).unwrap()).unwrap();
    let names: Vec<String> = r.schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names[..3], ["label", "prediction", "score_0"]);
    assert_eq!(names.len(), 12);
    let mut right = 0;
    let mut rows = 0;
    for b in r.build().unwrap() {
        let b = b.unwrap();
        let l = b.column_by_name("label").unwrap().as_primitive::<arrow_array::types::Int64Type>();
        let p = b.column_by_name("prediction").unwrap().as_primitive::<arrow_array::types::Int64Type>();
        right += l.values().iter().zip(p.values()).filter(|(a, b)| a == b).count();
        rows += b.num_rows();
    }
    assert_eq!(rows, 450);
    let eval_acc = v["accuracy"].as_f64().unwrap();
    assert!((right as f64 / 450.0 - eval_acc).abs() < 1e-12, "predict and evaluate disagree");

    let i = sketchfit(&["inspect", model.to_str().unwrap()]);
    assert_eq!(i.status.code(), Some(0));
    assert!(stdout(&i).contains("classes (10)") && stdout(&i).contains("spectrum"));
}

fn regression_data(dir: &TempDir, name: &str, n: usize, seed: u64) -> String {
    let mut r = sketchfit::rng::StageRng::new(seed, 0);
    let mut cols: Vec<(&str, ArrayRef)> = Vec::new();
    let xs: Vec<Vec<f64>> = (0..4).map(|_| (0..n).map(|_| r.uniform() * 2.0 - 1.0).collect()).collect();
    let y1: Vec<f64> = (0..n).map(|i| xs[0][i] * xs[1][i] + 0.5 * xs[2][i] + 0.01 * r.uniform()).collect();
    let y2: Vec<f64> = (0..n).map(|i| xs[3][i].powi(2) - xs[0][i]).collect();
    let names = ["x0", "x1", "x2", "x3"];
    for (k, x) in xs.into_iter().enumerate() {
        cols.push((names[k], Arc::new(Float64Array::from(x))));
    }
    cols.push(("y1", Arc::new(Float64Array::from(y1))));
    cols.push(("y2", Arc::new(Float64Array::from(y2))));
    cols.push(("id", Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("r{i}"))))));
    let p = dir.path(name);
    write_parquet(&p, cols, 700);
    p.to_string_lossy().into_owned()
}

fn regression_pipeline(dir: &TempDir, extra: &str) -> String {
    let text = format!(
        "task = \"regression\"\n[data]\ntrain = [\"tr*.parquet\"]\ntest = [\"te.parquet\"]\nfeatures = [\"x*\"]\ntargets = [\"y1\", \"y2\"]\n\n\
         [[stages]]\nkind = \"tensor_sketch\"\ndegree = 2\noffset = 1.0\ndim = 512\n\n[[stages]]\nkind = \"identity\"\n\n{extra}\n"
    );
    let p = dir.path("reg.toml");
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn regression_with_two_targets_two_files_and_concatenated_stages() {
    let dir = TempDir::new("regression");
    regression_data(&dir, "tr1.parquet", 2500, 1);
    regression_data(&dir, "tr2.parquet", 1500, 2);
    let test = regression_data(&dir, "te.parquet", 800, 3);
    let p = regression_pipeline(&dir, "[pca]\nvariance = 0.999\n[ridge]\nper_output = true");
    let model = dir.path("r.sfm");
    let out = train(&p, &model, &[]);
    // The targets are degree-2 polynomials of x: the degree-2 sketch fits them well.
    for line in out.lines().filter(|l| l.starts_with("test y")) {
        let r2: f64 = line.split("r2 ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
        assert!(r2 > 0.95, "{line}");
    }
    let pred = dir.path("p.parquet");
    let o = sketchfit(&["predict", model.to_str().unwrap(), "-i", &test, "-o", pred.to_str().unwrap(), "--keep", "id"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(read_f64(&pred, "prediction_y1").len(), 800);
}

#[test]
fn same_seed_same_model_and_chunks_threads_change_only_rounding() {
    let dir = TempDir::new("repro");
    regression_data(&dir, "tr1.parquet", 3000, 4);
    let test = regression_data(&dir, "te.parquet", 500, 5);
    let p = regression_pipeline(&dir, "[pca]\ncomponents = 200");
    let (m1, m2, m3, m4) = (dir.path("a.sfm"), dir.path("b.sfm"), dir.path("c.sfm"), dir.path("d.sfm"));
    train(&p, &m1, &["--threads", "2"]);
    train(&p, &m2, &["--threads", "2"]);
    assert_eq!(std::fs::read(&m1).unwrap(), std::fs::read(&m2).unwrap(), "same seed, same threads: same bytes");
    train(&p, &m3, &["--threads", "1", "--set", "run.chunk_rows=333"]);
    train(&p, &m4, &["--set", "run.seed=99"]);
    let preds: Vec<Vec<f64>> = [&m1, &m3, &m4]
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let out = dir.path(&format!("p{i}.parquet"));
            let o = sketchfit(&["predict", m.to_str().unwrap(), "-i", &test, "-o", out.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(0));
            read_f64(&out, "prediction_y1")
        })
        .collect();
    let scale = preds[0].iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let diff = |a: &[f64], b: &[f64]| a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale;
    assert!(
        diff(&preds[0], &preds[1]) < 1e-6,
        "chunk size / threads changed the model: {}",
        diff(&preds[0], &preds[1])
    );
    // At D = 512 the degree-2 sketch of 5 inputs barely collides, so another seed gives
    // nearly the same predictions; its random tables, and so its bytes, must differ.
    assert_ne!(std::fs::read(&m1).unwrap(), std::fs::read(&m4).unwrap(), "another seed, another model");
}

#[test]
fn fixed_size_list_features_and_string_labels() {
    let dir = TempDir::new("list");
    let n = 600;
    let mut r = sketchfit::rng::StageRng::new(8, 0);
    let mut lb = FixedSizeListBuilder::new(Float32Builder::new(), 5);
    let mut labels = Vec::new();
    for _ in 0..n {
        let v: Vec<f32> = (0..5).map(|_| (r.uniform() * 2.0 - 1.0) as f32).collect();
        // Class by the sign of a product: needs the degree-2 kernel.
        labels.push(if v[0] * v[1] > 0.0 { "same" } else { "diff" });
        for x in v {
            lb.values().append_value(x);
        }
        lb.append(true);
    }
    let cols: Vec<(&str, ArrayRef)> =
        vec![("v", Arc::new(lb.finish())), ("label", Arc::new(StringArray::from_iter_values(labels)))];
    write_parquet(&dir.path("t.parquet"), cols, 256);
    let text = "[data]\ntrain = [\"t.parquet\"]\ntest = [\"t.parquet\"]\nfeature_list = \"v\"\nlabel = \"label\"\n\
                [[stages]]\nkind = \"tensor_sketch\"\ndegree = 2\ndim = 256\n";
    std::fs::write(dir.path("l.toml"), text).unwrap();
    let model = dir.path("l.sfm");
    let out = train(dir.path("l.toml").to_str().unwrap(), &model, &[]);
    let acc: f64 = out.lines().find_map(|l| l.strip_prefix("test accuracy: ")).unwrap()[..6].parse().unwrap();
    assert!(acc > 0.9, "{out}");
    let i = sketchfit(&["inspect", model.to_str().unwrap()]);
    assert!(stdout(&i).contains("classes (2): diff, same"), "{}", stdout(&i));
}

#[test]
fn save_load_predict_gives_identical_scores_for_every_stage_kind() {
    let stages = [
        "kind = \"tensor_sketch\"\ndegree = 3\noffset = 1.0\ndim = 512\nnormalize = \"l2\"",
        "kind = \"identity\"\nnormalize = \"l1\"\nweight = 2.0",
        "kind = \"random_maclaurin\"\ndegree = 3\noffset = 1.0\ndim = 300\nnormalize = \"l2\"",
        "kind = \"random_maclaurin\"\nkernel = \"exponential\"\ngamma = 2.0\ndim = 300\nhadamard = true\nnormalize = \"l2\"",
        "kind = \"recursive_tensor_sketch\"\ndegree = 3\noffset = 1.0\ndim = 256\nnormalize = \"l2\"",
        "kind = \"craftmaps\"\ndegree = 3\noffset = 1.0\ndim = 200\nnormalize = \"l2\"",
        "kind = \"craftmaps\"\nup = \"tensor_sketch\"\ndown = \"gaussian\"\ndegree = 2\noffset = 1.0\ndim = 100\nup_dim = 700\nnormalize = \"l2\"",
        "kind = \"rff\"\ndim = 600\nnormalize = \"l2\"",
        "kind = \"rff\"\nkernel = \"laplacian\"\nvariant = \"cos\"\ndim = 600\nnormalize = \"l1\"",
        "kind = \"chi2\"\nterms = 4\nnormalize = \"l1\"",
        "kind = \"chi2_chebyshev\"\nterms = 6\nnormalize = \"l1\"",
        "kind = \"exp_chi2\"\nterms = 3\ndim = 600\nnormalize = \"l1\"",
    ];
    for stage in stages {
        let text = format!(
            "[data]\ntrain = [\"{}\"]\nfeatures = [\"px*\"]\nlabel = \"label\"\n[[stages]]\n{stage}\n[pca]\ncomponents = 60\n",
            repo("data/digits_train.parquet")
        );
        let table: toml::Table = text.parse().unwrap();
        let spec = sketchfit::pipeline::spec::PipelineSpec::from_table(table, "inline.toml").unwrap().check().unwrap();
        let model =
            sketchfit::pipeline::run::train(&spec, &Default::default(), &mut sketchfit::pipeline::Reporter::silent())
                .unwrap();
        let loaded = sketchfit::model::Model::from_bytes(&model.to_bytes().unwrap()).unwrap();
        let ds = sketchfit::source::Dataset::open(
            &sketchfit::Session::new(),
            &[repo("data/digits_test.parquet").into()],
            spec.columns(),
        )
        .unwrap();
        let (mut z, mut n, mut right) = (Vec::new(), 0, 0);
        for u in ds.units() {
            ds.read_unit(u, 100, &mut |ch| {
                let a = model.scores(&ch.x, ch.rows, &mut z, 2);
                let b = loaded.scores(&ch.x, ch.rows, &mut z, 1);
                assert_eq!(a, b, "{stage}: loaded model scores differ");
                let truth = model.header.classes.as_ref().unwrap().encode(ch.labels.as_ref().unwrap(), &ch.location)?;
                right += truth.iter().zip(model.classify(&a)).filter(|(t, p)| **t as usize == *p).count();
                n += ch.rows;
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(n, 450);
        // Every kernel here separates the digits well; a broken map would not.
        assert!(right as f64 / 450.0 > 0.9, "{stage}: accuracy {}", right as f64 / 450.0);
        // Fitted parameters are stored: the model's stage spec needs no more fitting.
        assert!(!model.header.stages[0].needs_fit(), "{stage}");
    }
}

#[test]
fn exp_chi2_digits_job_and_kernel_error_for_the_chi2_family() {
    let dir = TempDir::new("expchi2");
    let model = dir.path("e.sfm");
    let out = train(&repo("pipelines/digits_exp_chi2.toml"), &model, &[]);
    let acc: f64 = out.lines().find_map(|l| l.strip_prefix("test accuracy: ")).unwrap()[..6].parse().unwrap();
    assert!(acc >= 0.97, "{out}");
    let o =
        sketchfit(&["kernel-error", &repo("pipelines/compare_chi2.toml"), "--sample", "150", "--seeds", "3", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let stages = v["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 5);
    // Deterministic χ² maps: the series (10 terms) is far more exact than Chebyshev (40).
    let (series, cheb) = (stages[0]["nrms_mean"].as_f64().unwrap(), stages[1]["nrms_mean"].as_f64().unwrap());
    assert!(series < 1e-3 && cheb < 0.05 && series < cheb, "{series} {cheb}");
    assert!(stages[0]["nrms_sd"].as_f64().unwrap() <= 1e-9 * series, "the χ² series has no randomness");
    for s in &stages[2..] {
        let e = s["nrms_mean"].as_f64().unwrap();
        assert!(e > 0.0 && e < 0.2, "{s}");
    }
}

#[test]
fn kernel_error_compares_the_dot_product_maps_and_plots_the_decay() {
    let dir = TempDir::new("kernel-error");
    let svg = dir.path("err.svg");
    let out = sketchfit(&[
        "kernel-error",
        &repo("pipelines/compare_poly.toml"),
        "--input",
        &repo("data/digits_test.parquet"),
        "--sample",
        "200",
        "--seeds",
        "4",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["rows"], 200);
    let stages = v["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 4);
    for s in stages {
        let e = s["nrms_mean"].as_f64().unwrap();
        assert!(e > 0.0 && e < 0.5, "{s}");
    }
    // Sixteen times the dimension gives a clearly smaller error for every map.
    let sweep = v["sweep"].as_array().unwrap();
    for st in 0..4 {
        let pts: Vec<f64> =
            sweep.iter().filter(|e| e["stage"] == st).map(|e| e["nrms_mean"].as_f64().unwrap()).collect();
        assert_eq!(pts.len(), 5);
        assert!(pts[4] < 0.6 * pts[0], "stage {st}: {pts:?}");
    }
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.matches("<polyline").count() == 4);
}

#[test]
fn the_pipeline_reference_is_a_valid_pipeline_with_every_stage_kind() {
    let page = std::fs::read_to_string(repo("docs/src/reference/pipeline.md")).unwrap();
    let start = page.find("```toml\n").expect("a toml block in the pipeline reference") + 8;
    let end = start + page[start..].find("```").unwrap();
    let table: toml::Table = page[start..end].parse().expect("the pipeline reference parses as TOML");
    let spec = sketchfit::pipeline::spec::PipelineSpec::from_table(table, "pipeline.md").expect("and validates");
    let kinds: Vec<String> =
        spec.stages.iter().map(|s| serde_json::to_value(s).unwrap()["kind"].as_str().unwrap().to_string()).collect();
    for k in sketchfit::sketch::KINDS {
        assert!(kinds.iter().any(|x| x == k), "the pipeline reference does not document stage kind {k}");
    }
}

#[test]
fn few_components_go_to_block_krylov_whose_model_equals_the_dense_pca() {
    // D = 2048 per stage with E ≤ D/32: `auto` takes block Krylov on the tiled Gram. With
    // a tight tolerance its model equals the dense decomposition's, in one pass and in
    // two (a PCA per stage), and its residual is stored and shown.
    let dir = TempDir::new("krylov");
    for passes in [1, 2] {
        let pca = if passes == 1 { "components = 64" } else { "per_stage = [64, 48]" };
        let p = dir.path(&format!("p{passes}.toml"));
        std::fs::write(
            &p,
            format!(
                "passes = {passes}\n[data]\ntrain = [\"{}\"]\nfeatures = [\"px*\"]\nlabel = \"label\"\n\
                 [[stages]]\nkind = \"tensor_sketch\"\ndegree = 2\ndim = 2048\nnormalize = \"l2\"\n\
                 [[stages]]\nkind = \"rff\"\ndim = 2048\n\
                 [pca]\n{pca}\ntolerance = 1e-10\n[ridge]\nlambda = 0.01\n",
                repo("data/digits_train.parquet")
            ),
        )
        .unwrap();
        let p = p.to_string_lossy().into_owned();
        let krylov = dir.path(&format!("k{passes}.sfm"));
        let dense = dir.path(&format!("d{passes}.sfm"));
        let (rk, rd) = (dir.path(&format!("k{passes}.json")), dir.path(&format!("d{passes}.json")));
        let out = sketchfit(&["train", &p, "-o", krylov.to_str().unwrap(), "--report", rk.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let dense_set = ["--set", "pca.method=\"dense\"", "--report", rd.to_str().unwrap()];
        let out = sketchfit(&[&["train", &p, "-o", dense.to_str().unwrap()][..], &dense_set[..]].concat());
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        // Each PCA by the method asked: block Krylov (every stage's in two passes), or dense.
        let krylov_pcas = |json: &std::path::Path| -> Vec<bool> {
            let r = report(json);
            r["pca"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["stage"].is_null() == (passes == 1))
                .map(|p| p["krylov"].as_bool().unwrap())
                .collect()
        };
        let (k_runs, d_runs) = (krylov_pcas(&rk), krylov_pcas(&rd));
        assert!(!k_runs.is_empty() && k_runs.iter().all(|&k| k), "{passes}: {k_runs:?}");
        assert!(!d_runs.is_empty() && d_runs.iter().all(|&k| !k), "{passes}: {d_runs:?}");
        let (k, d) = (Model::load(&krylov).unwrap(), Model::load(&dense).unwrap());
        assert!(k.header.projections.iter().all(|i| i.residual.is_some_and(|r| r <= 1e-10)));
        assert!(d.header.projections.iter().all(|i| i.residual.is_none()));
        // The weights on the sketch's features depend on the subspace, not its basis.
        let diff = rel(&k.weights, &d.weights);
        assert!(diff < 1e-6, "{passes} pass(es): weights differ by {diff}");
        let shown = stdout(&sketchfit(&["inspect", krylov.to_str().unwrap()]));
        assert!(shown.contains("components by block Krylov"), "{shown}");
    }
}

/// The MNIST pipelines (whose data `scripts/get_mnist.py` fetches, so CI never has it)
/// run as shipped on the digits, at a small E: their keys parse and combine, the fixed-λ
/// ones take `auto`'s f64 Cholesky at this D, and the selecting ones choose on their
/// validation rows (and refit where they say so).
#[test]
fn the_mnist_pipelines_run_as_shipped_on_the_digits() {
    let dir = TempDir::new("mnist-pipelines");
    let train_file = repo("data/digits_train.parquet");
    let test_file = repo("data/digits_test.parquet");
    for name in ["mnist_select", "mnist_nystrom_select", "mnist_rows_select", "mnist", "mnist_long"] {
        let path = repo(&format!("pipelines/{name}.toml"));
        let text = std::fs::read_to_string(&path).unwrap();
        let model = dir.path(&format!("{name}.sfm"));
        let report = dir.path(&format!("{name}.json"));
        let mut sets = vec![
            format!("data.train=[\"{train_file}\"]"),
            format!("data.test=[\"{test_file}\"]"),
            "stages.0.dim=512".to_string(),
        ];
        if text.contains("up_dim") {
            sets.push("stages.0.up_dim=2048".to_string());
        }
        let selects = text.contains("validation = ");
        if selects {
            sets.push(format!("data.validation=[\"{test_file}\"]"));
        }
        let mut args = vec!["--report", report.to_str().unwrap()];
        for s in &sets {
            args.extend(["--set", s.as_str()]);
        }
        let out = train(&path, &model, &args);
        let acc = test_accuracy(&out);
        assert!(acc >= 0.9, "{name}: test accuracy {acc}");
        let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        if selects {
            assert_eq!(r["selections"][0]["method"], "validation", "{name}: {r}");
            let refit =
                if text.contains("refit = true") { serde_json::json!(1347 + 450) } else { serde_json::Value::Null };
            assert_eq!(r["selections"][0]["refit_rows"], refit, "{name}: {r}");
        } else {
            // `auto` below D = 8,192 takes the f64 Cholesky; at the shipped sizes it takes
            // the f32 factor where it fits beside the statistics (the run says which).
            assert_eq!(r["solve"]["path"], "cholesky", "{name}: {r}");
        }
    }
}
