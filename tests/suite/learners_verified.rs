//! The newer learners verify what they use (issue 26): ECOC scores are per class and
//! agree with the prediction, code files and k-fold inputs are checked by content,
//! non-finite candidates and LSH widths are refused, the kernel-error sweep ends at the
//! stage itself, and the inputs that used to panic, abort or mislead get exit 2 with the
//! file, key and column named.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{ArrayRef, Float32Array, Float64Array, Int64Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::common::*;

/// Every batch of a Parquet file.
fn read(path: &std::path::Path) -> Vec<RecordBatch> {
    let f = std::fs::File::open(path).unwrap();
    ParquetRecordBatchReaderBuilder::try_new(f).unwrap().build().unwrap().map(|b| b.unwrap()).collect()
}

/// The digits job at a small D without PCA, with `ridge` keys appended.
fn digits(dir: &TempDir, ridge: &str) -> String {
    let text = format!(
        "[data]\ntrain = [\"{}\"]\ntest = [\"{}\"]\nfeatures = [\"px*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"tensor_sketch\"\ndegree = 3\ndim = 512\nnormalize = \"l2\"\n\n[ridge]\n{ridge}\n\n[run]\nseed = 7\n",
        repo("data/digits_train.parquet"),
        repo("data/digits_test.parquet")
    );
    let p = dir.path("digits.toml");
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn ecoc_scores_are_one_per_class_and_their_argmax_is_the_prediction() {
    let dir = TempDir::new("ecoc-scores");
    // A short code (6 outputs for 10 classes) and the default 200: the scores are the
    // classes', never the code outputs', and predict --scores does not panic.
    for (name, ridge) in [
        ("short", "lambda = 0.001\ncodes = \"ecoc\"\ncode_length = 6"),
        ("long", "lambda = 0.001\ncodes = \"ecoc\""),
        ("ova", "lambda = 0.001"),
    ] {
        let p = digits(&dir, &format!("{ridge}\n"));
        let model = dir.path(&format!("{name}.sfm"));
        ok(&sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "--quiet"]));
        let pred = dir.path(&format!("{name}.parquet"));
        ok(&sketchfit(&[
            "predict",
            model.to_str().unwrap(),
            "-i",
            &repo("data/digits_test.parquet"),
            "-o",
            pred.to_str().unwrap(),
            "--scores",
        ]));
        let batches = read(&pred);
        let names: Vec<String> = batches[0].schema().fields().iter().map(|f| f.name().clone()).collect();
        let scores: Vec<&str> = names.iter().filter(|n| n.starts_with("score_")).map(String::as_str).collect();
        let want: Vec<String> = (0..10).map(|k| format!("score_{k}")).collect();
        assert_eq!(scores, want.iter().map(String::as_str).collect::<Vec<_>>(), "{name}: one column per class");
        let mut spread = 0.0f64;
        let mut rows = 0;
        for b in &batches {
            let prediction = b.column_by_name("prediction").unwrap().as_primitive::<Int64Type>();
            let cols: Vec<&Float64Array> =
                want.iter().map(|n| b.column_by_name(n).unwrap().as_primitive::<Float64Type>()).collect();
            for r in 0..b.num_rows() {
                let mut best = 0;
                for k in 1..10 {
                    if cols[k].value(r) > cols[best].value(r) {
                        best = k;
                    }
                    spread = spread.max(cols[k].value(r).abs());
                }
                assert_eq!(best as i64, prediction.value(r), "{name}: row {r}: argmax of the scores is the prediction");
            }
            rows += b.num_rows();
        }
        assert!(rows > 400, "{name}: {rows} rows scored");
        if name != "ova" {
            // Class scores are mean agreements with a ±1 code row: within [−max|f|, max|f|].
            assert!(spread < 10.0, "{name}: class scores {spread}");
        }
    }
}

#[test]
fn two_classes_take_a_code_of_length_one_and_code_files_that_repeat_a_column_are_refused() {
    let dir = TempDir::new("ecoc-two");
    let n = 200;
    let x0: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    let x1: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
    let label: Vec<i64> = (0..n).map(|i| i64::from(x0[i] + 0.3 * x1[i] > 0.0)).collect();
    write_parquet(
        &dir.path("t.parquet"),
        vec![
            ("x0", Arc::new(Float64Array::from(x0)) as ArrayRef),
            ("x1", Arc::new(Float64Array::from(x1)) as ArrayRef),
            ("label", Arc::new(Int64Array::from(label)) as ArrayRef),
        ],
        50,
    );
    let body = |ridge: &str| {
        format!("[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = 64\nsigma = 1.0\n\n[ridge]\nlambda = 0.01\ncodes = \"ecoc\"\n{ridge}\n")
    };
    std::fs::write(dir.path("one.toml"), body("code_length = 1")).unwrap();
    ok(&sketchfit(&[
        "train",
        dir.path("one.toml").to_str().unwrap(),
        "-o",
        dir.path("one.sfm").to_str().unwrap(),
        "-q",
    ]));
    std::fs::write(dir.path("two.toml"), body("code_length = 2")).unwrap();
    refused(
        &sketchfit(&[
            "train",
            dir.path("two.toml").to_str().unwrap(),
            "-o",
            dir.path("two.sfm").to_str().unwrap(),
            "-q",
        ]),
        &["ridge.code_length", "code_length ≤ 1"],
    );
    std::fs::write(dir.path("rep.txt"), "1 -1\n-1 1\n").unwrap();
    std::fs::write(dir.path("rep.toml"), body("code_file = \"rep.txt\"")).unwrap();
    refused(
        &sketchfit(&[
            "train",
            dir.path("rep.toml").to_str().unwrap(),
            "-o",
            dir.path("rep.sfm").to_str().unwrap(),
            "-q",
        ]),
        &["rep.txt", "column 1 is the negation of column 0"],
    );
}

#[test]
fn validation_test_and_unlabeled_files_with_other_feature_columns_name_the_column() {
    let dir = TempDir::new("other-columns");
    four_columns(&dir.path("t.parquet"), 150, None, 0);
    four_columns(&dir.path("v.parquet"), 60, Some("x3"), 7);
    let base = "[[stages]]\nkind = \"tensor_sketch\"\ndim = 16\n\n[pca]\ncomponents = 8\n\n[ridge]\nlambda = \"gcv\"\n";
    for (key, what) in [("validation", "validation"), ("test", "test"), ("unlabeled", "unlabeled")] {
        let text = format!(
            "[data]\ntrain = [\"t.parquet\"]\n{key} = [\"v.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n{base}"
        );
        std::fs::write(dir.path("p.toml"), text).unwrap();
        let model = dir.path("m.sfm");
        let out = sketchfit(&["train", dir.path("p.toml").to_str().unwrap(), "-o", model.to_str().unwrap(), "-q"]);
        refused(&out, &["v.parquet", "'x3'", &format!("the {what} files")]);
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
        assert!(!model.exists());
    }
}

#[test]
fn an_edited_code_file_between_shards_or_before_a_resume_is_refused() {
    let dir = TempDir::new("code-edit");
    four_columns(&dir.path("t.parquet"), 300, None, 0);
    let code_a = "1 1 -1\n-1 1 1\n1 -1 1\n";
    let code_b = "1 -1 -1\n-1 1 -1\n1 1 1\n";
    std::fs::write(dir.path("code.txt"), code_a).unwrap();
    let text = "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = 32\nsigma = 1.0\n\n[ridge]\nlambda = 0.01\ncodes = \"ecoc\"\ncode_file = \"code.txt\"\n";
    std::fs::write(dir.path("p.toml"), text).unwrap();
    let p = dir.path("p.toml").to_string_lossy().into_owned();
    let part = |i: usize| dir.path(&format!("part{i}.stats")).to_string_lossy().into_owned();
    ok(&sketchfit(&["accumulate", &p, "--shard", "0/2", "-o", &part(0), "-q"]));
    std::fs::write(dir.path("code.txt"), code_b).unwrap();
    ok(&sketchfit(&["accumulate", &p, "--shard", "1/2", "-o", &part(1), "-q"]));
    let out = sketchfit(&["solve", &p, &part(0), &part(1), "-o", dir.path("m.sfm").to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!dir.path("m.sfm").exists());
    // Both parts with one code solve.
    ok(&sketchfit(&["accumulate", &p, "--shard", "0/2", "-o", &part(2), "-q"]));
    ok(&sketchfit(&["solve", &p, &part(2), &part(1), "-o", dir.path("m.sfm").to_str().unwrap(), "-q"]));

    if !cfg!(feature = "fault-injection") {
        return; // the kill below needs the fault-injection hooks (scripts/test.sh builds them)
    }
    std::fs::write(dir.path("code.txt"), code_a).unwrap();
    let model = dir.path("r.sfm");
    assert_ne!(killed_train(&p, &model.to_string_lossy(), 2).status.code(), Some(0));
    assert!(dir.path("r.sfm.ckpt").exists());
    std::fs::write(dir.path("code.txt"), code_b).unwrap();
    let out =
        sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "-q", "--resume", "--set", "run.checkpoint_every=1"]);
    assert_eq!(out.status.code(), Some(2), "a resume over an edited code file: {}", stderr(&out));
    assert!(!model.exists());
}

#[test]
fn a_k_fold_solve_refuses_training_files_that_are_not_the_accumulated_rows() {
    let dir = TempDir::new("kfold-rows");
    four_columns(&dir.path("t.parquet"), 300, None, 0);
    let text = "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = 32\nsigma = 1.0\n\n[ridge]\ncv = 3\n";
    std::fs::write(dir.path("p.toml"), text).unwrap();
    let p = dir.path("p.toml").to_string_lossy().into_owned();
    let part = dir.path("all.stats").to_string_lossy().into_owned();
    ok(&sketchfit(&["accumulate", &p, "-o", &part, "-q"]));
    ok(&sketchfit(&["solve", &p, &part, "-o", dir.path("ok.sfm").to_str().unwrap(), "-q"]));
    // The same rows in another order (same size, same footer shape): the fold models would
    // score rows they trained on.
    four_columns(&dir.path("t.parquet"), 300, None, 150);
    let out = sketchfit(&["solve", &p, &part, "-o", dir.path("m.sfm").to_str().unwrap(), "-q"]);
    refused(&out, &["t.parquet", "not the rows the fold statistics were accumulated from"]);
    assert!(!dir.path("m.sfm").exists());
}

#[test]
fn non_finite_candidates_and_lsh_widths_are_refused() {
    let dir = TempDir::new("non-finite");
    four_columns(&dir.path("t.parquet"), 150, None, 0);
    four_columns(&dir.path("v.parquet"), 60, None, 3);
    for bad in ["nan", "inf", "-inf"] {
        let text = format!(
            "[data]\ntrain = [\"t.parquet\"]\nvalidation = [\"v.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = 32\ncandidates = {{ sigma = [1.0, {bad}] }}\n"
        );
        std::fs::write(dir.path("p.toml"), text).unwrap();
        let out =
            sketchfit(&["train", dir.path("p.toml").to_str().unwrap(), "-o", dir.path("m.sfm").to_str().unwrap()]);
        refused(&out, &["stages[0].candidates.sigma", "value 2", "finite"]);
    }
    for w in ["0", "nan", "-1", "inf"] {
        let out = sketchfit(&[
            "embed",
            "-i",
            dir.path("t.parquet").to_str().unwrap(),
            "--group-by",
            "label",
            "--features",
            "x*",
            "--dim",
            "64",
            "-o",
            dir.path("e.parquet").to_str().unwrap(),
            "--lsh",
            "2",
            &format!("--lsh-width={w}"),
        ]);
        refused(&out, &["--lsh-width", "positive"]);
        assert!(!dir.path("e.parquet").exists());
    }
}

#[test]
fn the_kernel_error_sweep_ends_at_the_stage_itself_and_says_what_it_measured() {
    let dir = TempDir::new("sweep");
    four_columns(&dir.path("t.parquet"), 200, None, 0);
    let text = "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"gaussian_sketch_hd\"\ndim = 512\nsigma = 1.0\n\n[[stages]]\nkind = \"rff\"\ndim = 256\nsigma = 1.0\n";
    std::fs::write(dir.path("p.toml"), text).unwrap();
    let out = sketchfit(&[
        "kernel-error",
        dir.path("p.toml").to_str().unwrap(),
        "--sample",
        "80",
        "--seeds",
        "2",
        "--json",
        "--plot",
        dir.path("e.svg").to_str().unwrap(),
    ]);
    ok(&out);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    for (i, stage) in report["stages"].as_array().unwrap().iter().enumerate() {
        let own = stage["dim"].as_u64().unwrap();
        let points: Vec<&serde_json::Value> =
            report["sweep"].as_array().unwrap().iter().filter(|e| e["stage"].as_u64() == Some(i as u64)).collect();
        let dims: Vec<u64> = points.iter().map(|e| e["dim"].as_u64().unwrap()).collect();
        assert_eq!(dims.last(), Some(&own), "stage {i}: the last point is the stage itself: {dims:?}");
        assert!(dims.windows(2).all(|w| w[0] < w[1]), "stage {i}: rising dimensions {dims:?}");
        assert_eq!(points.last().unwrap()["nrms_mean"], stage["nrms_mean"], "stage {i}: the same measurement");
        for e in &points {
            if let Some(asked) = e["requested"].as_u64() {
                assert_ne!(asked, e["dim"].as_u64().unwrap(), "requested is given only when it differs");
            }
        }
    }
    // The RFF stage sweeps what it says: 16 … 256.
    let rff: Vec<u64> = report["sweep"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["stage"] == 1)
        .map(|e| e["dim"].as_u64().unwrap())
        .collect();
    assert_eq!(rff, vec![16, 32, 64, 128, 256]);
}

#[test]
fn a_down_dim_at_the_stage_width_names_the_file_the_stage_and_the_candidate() {
    let dir = TempDir::new("down-dim");
    four_columns(&dir.path("t.parquet"), 150, None, 0);
    four_columns(&dir.path("v.parquet"), 60, None, 3);
    let text = "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = 32\nsigma = 1.0\n\n[[stages]]\nkind = \"tensor_sketch\"\ndim = 64\ndown = \"srht\"\ndown_dim = 64\n";
    std::fs::write(dir.path("p.toml"), text).unwrap();
    let p = dir.path("p.toml").to_string_lossy().into_owned();
    refused(&sketchfit(&["train", &p, "-o", dir.path("m.sfm").to_str().unwrap()]), &["p.toml", "stages.1.down_dim"]);
    let text = "[data]\ntrain = [\"t.parquet\"]\nvalidation = [\"v.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"tensor_sketch\"\ndim = 64\ndown = \"srht\"\ndown_dim = 48\ncandidates = { dim = [128, 48] }\n";
    std::fs::write(dir.path("c.toml"), text).unwrap();
    let c = dir.path("c.toml").to_string_lossy().into_owned();
    refused(
        &sketchfit(&["train", &c, "-o", dir.path("m.sfm").to_str().unwrap()]),
        &["c.toml", "stages.0.down_dim", "candidate stages.0.dim = 48"],
    );
}

#[test]
fn a_float64_beyond_the_f32_range_says_so() {
    let dir = TempDir::new("f32-range");
    let n = 60;
    let mut a: Vec<f64> = (0..n).map(|i| (i as f64).sin()).collect();
    a[17] = 1e39;
    let b: Vec<f32> = (0..n).map(|i| (i as f32).cos()).collect();
    let label: Vec<i64> = (0..n).map(|i| (i % 2) as i64).collect();
    write_parquet(
        &dir.path("t.parquet"),
        vec![
            ("a", Arc::new(Float64Array::from(a)) as ArrayRef),
            ("b", Arc::new(Float32Array::from(b)) as ArrayRef),
            ("label", Arc::new(Int64Array::from(label)) as ArrayRef),
        ],
        20,
    );
    let text = "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"a\", \"b\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = 16\n";
    std::fs::write(dir.path("p.toml"), text).unwrap();
    let out = sketchfit(&["train", dir.path("p.toml").to_str().unwrap(), "-o", dir.path("m.sfm").to_str().unwrap()]);
    refused(&out, &["t.parquet", "row group 0", "row 17", "column 'a'", "1e39", "exceeds the float32 range"]);
}

#[test]
fn a_footer_whose_file_row_count_is_zero_reads_its_row_groups() {
    // Some writers (early parquet-rs, beside a repeated struct) leave the file-level
    // num_rows at 0 while the row groups hold the rows. Patch a file's footer the same
    // way: num_rows = 53 is field 3 (i64) right after the schema list, `0x16`, then the
    // zigzag varint 106 = `0x6a`; 0 is one byte too, so the footer keeps its length.
    let dir = TempDir::new("zero-num-rows");
    four_columns(&dir.path("t.parquet"), 53, None, 0);
    let mut bytes = std::fs::read(dir.path("t.parquet")).unwrap();
    let n = bytes.len();
    let footer_len = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
    let start = n - 8 - footer_len;
    let at: Vec<usize> = (start..n - 9).filter(|&i| bytes[i] == 0x16 && bytes[i + 1] == 0x6a).collect();
    assert_eq!(at.len(), 1, "one num_rows field in the footer");
    bytes[at[0] + 1] = 0;
    std::fs::write(dir.path("z.parquet"), &bytes).unwrap();
    let text = |f: &str| {
        format!("[data]\ntrain = [\"{f}\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = 16\nsigma = 1.0\n\n[ridge]\nlambda = 0.1\n")
    };
    std::fs::write(dir.path("t.toml"), text("t.parquet")).unwrap();
    std::fs::write(dir.path("z.toml"), text("z.parquet")).unwrap();
    ok(&sketchfit(&["train", dir.path("t.toml").to_str().unwrap(), "-o", dir.path("t.sfm").to_str().unwrap(), "-q"]));
    ok(&sketchfit(&["train", dir.path("z.toml").to_str().unwrap(), "-o", dir.path("z.sfm").to_str().unwrap(), "-q"]));
    let (t, z) =
        (sketchfit::Model::load(&dir.path("t.sfm")).unwrap(), sketchfit::Model::load(&dir.path("z.sfm")).unwrap());
    assert_eq!(z.header.rows, 53);
    assert_eq!(z.weights, t.weights, "the same rows, the same model");
}

#[test]
fn a_footer_whose_size_statistics_are_typed_otherwise_is_read() {
    // A Dremio-written file's footer types a list of the column-chunk size statistics as
    // i16 where the format has i64; this reader's strict footer decoder refused it.
    // Write nullable columns (so each chunk has a definition-level histogram, field 3 of
    // SizeStatistics: `0x39`, then the list header `0x26`: 2 elements of i64) and retype
    // every such list as i16 (`0x24`): the varints that follow decode the same either way.
    use arrow_schema::{DataType, Field, Schema};
    let dir = TempDir::new("dremio-footer");
    let n = 60;
    let col = |k: f32| {
        Arc::new(Float32Array::from((0..n).map(|i| Some((i as f32 * k).sin())).collect::<Vec<_>>())) as ArrayRef
    };
    let label = Arc::new(Int64Array::from((0..n).map(|i| Some(i % 2)).collect::<Vec<_>>())) as ArrayRef;
    let schema = Arc::new(Schema::new(vec![
        Field::new("x0", DataType::Float32, true),
        Field::new("x1", DataType::Float32, true),
        Field::new("label", DataType::Int64, true),
    ]));
    let batch = RecordBatch::try_new(schema.clone(), vec![col(0.3), col(0.7), label]).unwrap();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(dir.path("t.parquet")).unwrap(), schema, None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let mut bytes = std::fs::read(dir.path("t.parquet")).unwrap();
    let len = bytes.len();
    let footer_len = u32::from_le_bytes(bytes[len - 8..len - 4].try_into().unwrap()) as usize;
    let start = len - 8 - footer_len;
    let at: Vec<usize> = (start..len - 9).filter(|&i| bytes[i] == 0x39 && bytes[i + 1] == 0x26).collect();
    assert_eq!(at.len(), 3, "one definition-level histogram per column chunk");
    for i in at {
        bytes[i + 1] = 0x24;
    }
    std::fs::write(dir.path("d.parquet"), &bytes).unwrap();
    // The reproduction: a reader that decodes every statistic refuses it.
    let strict = parquet::arrow::arrow_reader::ArrowReaderMetadata::load(
        &std::fs::File::open(dir.path("d.parquet")).unwrap(),
        Default::default(),
    )
    .unwrap_err();
    assert!(strict.to_string().contains("Expected list element type of I64 but got I16"), "{strict}");
    // sketchfit never uses the statistics, so it does not decode them: the same model.
    let text = |f: &str| {
        format!("[data]\ntrain = [\"{f}\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = 16\nsigma = 1.0\n\n[ridge]\nlambda = 0.1\n")
    };
    for f in ["t", "d"] {
        std::fs::write(dir.path(&format!("{f}.toml")), text(&format!("{f}.parquet"))).unwrap();
        let (p, m) = (dir.path(&format!("{f}.toml")), dir.path(&format!("{f}.sfm")));
        ok(&sketchfit(&["train", p.to_str().unwrap(), "-o", m.to_str().unwrap(), "-q"]));
    }
    let (t, d) =
        (sketchfit::Model::load(&dir.path("t.sfm")).unwrap(), sketchfit::Model::load(&dir.path("d.sfm")).unwrap());
    assert_eq!((d.header.rows, &d.weights), (60, &t.weights));
}

#[test]
fn candidates_with_a_fixed_lambda_are_refused_by_key_not_an_internal_error() {
    // Found by the extended property test (seed 2, case 485): exit 1, "a candidate without scores".
    let dir = TempDir::new("cand-fixed");
    four_columns(&dir.path("t.parquet"), 150, None, 0);
    let text = "[data]\ntrain = [\"t.parquet\"]\nvalidation = [\"t.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = 16\ncandidates = { sigma = [0.5, 1.0] }\n\n[ridge]\nlambda = 0.1\n";
    std::fs::write(dir.path("p.toml"), text).unwrap();
    let out = sketchfit(&["train", dir.path("p.toml").to_str().unwrap(), "-o", dir.path("m.sfm").to_str().unwrap()]);
    refused(&out, &["ridge.lambda", "gcv"]);
}
