//! Every kind of bad input gets a clear error that names the file and the column or
//! row group, exits 2, and leaves no output behind.

use std::sync::Arc;

use crate::common::*;
use arrow_array::builder::{Float32Builder, ListBuilder};
use arrow_array::{ArrayRef, Float64Array, Int32Array, Int64Array, StringArray};

#[test]
fn missing_feature_column() {
    let dir = TempDir::new("missing-col");
    write_parquet(&dir.path("t.parquet"), good_columns(50), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"nope\"]", "");
    train_fails(&dir, &p, &["t.parquet", "column 'nope'", "not found", "the file has columns a, b, label"]);
}

#[test]
fn feature_glob_matching_nothing() {
    let dir = TempDir::new("glob-none");
    write_parquet(&dir.path("t.parquet"), good_columns(50), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"px*\"]", "");
    train_fails(&dir, &p, &["t.parquet", "px*", "no column matches"]);
}

#[test]
fn mistyped_feature_column() {
    let dir = TempDir::new("mistyped");
    let mut cols = good_columns(50);
    cols.push(("s", Arc::new(StringArray::from_iter_values((0..50).map(|i| i.to_string())))));
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"s\"]", "");
    train_fails(&dir, &p, &["t.parquet", "column 's'", "Utf8", "must be integers or floats"]);
}

#[test]
fn nan_and_infinity_name_row_group_row_and_column() {
    for (name, bad) in [("nan", f64::NAN), ("inf", f64::INFINITY)] {
        let dir = TempDir::new(name);
        let mut cols = good_columns(60);
        let mut b: Vec<f64> = (0..60).map(|i| i as f64 / 60.0).collect();
        b[47] = bad;
        cols[1] = ("b", Arc::new(Float64Array::from(b)));
        write_parquet(&dir.path("t.parquet"), cols, 20);
        let p = sketch_pipeline(&dir, &["t.parquet"], "", "");
        train_fails(&dir, &p, &["t.parquet", "row group 2", "row 7", "column 'b'", "not finite"]);
    }
}

#[test]
fn null_feature_value() {
    let dir = TempDir::new("null");
    let mut cols = good_columns(50);
    let a: Vec<Option<f64>> = (0..50).map(|i| if i == 33 { None } else { Some(i as f64) }).collect();
    cols[0] = ("a", Arc::new(Float64Array::from(a)));
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "");
    train_fails(&dir, &p, &["t.parquet", "row group 1", "row 13", "column 'a'", "null"]);
}

#[test]
fn null_label() {
    let dir = TempDir::new("null-label");
    let mut cols = good_columns(50);
    let l: Vec<Option<i64>> = (0..50).map(|i| if i == 5 { None } else { Some(i % 2) }).collect();
    cols[2] = ("label", Arc::new(Int64Array::from(l)));
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "");
    train_fails(&dir, &p, &["t.parquet", "row group 0", "row 5", "column 'label'", "null"]);
}

#[test]
fn ragged_list_column() {
    let dir = TempDir::new("ragged");
    let mut lb = ListBuilder::new(Float32Builder::new());
    for i in 0..30 {
        let len = if i == 25 { 2 } else { 3 };
        for j in 0..len {
            lb.values().append_value((i * j) as f32);
        }
        lb.append(true);
    }
    let list: ArrayRef = Arc::new(lb.finish());
    let label: ArrayRef = Arc::new(Int64Array::from_iter_values((0..30).map(|i| i % 2)));
    write_parquet(&dir.path("t.parquet"), vec![("v", list), ("label", label)], 10);
    let p = sketch_pipeline(&dir, &["t.parquet"], "feature_list = \"v\"", "");
    train_fails(&dir, &p, &["t.parquet", "row group 2", "row 5", "column 'v'", "ragged"]);
}

#[test]
fn empty_truncated_and_non_parquet_files() {
    let dir = TempDir::new("corrupt");
    write_parquet(&dir.path("good.parquet"), good_columns(50), 20);
    let bytes = std::fs::read(dir.path("good.parquet")).unwrap();
    std::fs::write(dir.path("empty.parquet"), b"").unwrap();
    std::fs::write(dir.path("cut.parquet"), &bytes[..bytes.len() / 2]).unwrap();
    std::fs::write(dir.path("text.parquet"), b"a,b,label\n1,2,0\n").unwrap();
    for f in ["empty.parquet", "cut.parquet", "text.parquet"] {
        let p = sketch_pipeline(&dir, &["good.parquet", f], "", "");
        train_fails(&dir, &p, &[f, "not a readable Parquet file"]);
    }
}

#[test]
fn file_with_no_rows() {
    let dir = TempDir::new("zero-rows");
    write_parquet(&dir.path("good.parquet"), good_columns(50), 20);
    write_parquet(&dir.path("none.parquet"), good_columns(0), 20);
    let p = sketch_pipeline(&dir, &["good.parquet", "none.parquet"], "", "");
    train_fails(&dir, &p, &["none.parquet", "no rows"]);
}

#[test]
fn schemas_that_differ_between_files() {
    let dir = TempDir::new("schemas");
    write_parquet(&dir.path("one.parquet"), good_columns(50), 20);
    let mut cols = good_columns(50);
    cols[0] = ("a", Arc::new(Int32Array::from_iter_values(0..50)));
    write_parquet(&dir.path("two.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["one.parquet", "two.parquet"], "", "");
    train_fails(&dir, &p, &["two.parquet", "column 'a'", "Int32", "Float64", "schemas differ"]);
    let mut cols = good_columns(50);
    cols.remove(1);
    write_parquet(&dir.path("three.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["one.parquet", "three.parquet"], "", "");
    train_fails(&dir, &p, &["three.parquet", "column 'b'", "missing"]);
}

#[test]
fn missing_input_file_and_unmatched_glob() {
    let dir = TempDir::new("missing-file");
    let p = sketch_pipeline(&dir, &["nowhere.parquet"], "", "");
    train_fails(&dir, &p, &["nowhere.parquet", "not found"]);
    let p = sketch_pipeline(&dir, &["none-*.parquet"], "", "");
    train_fails(&dir, &p, &["none-*.parquet", "no file matches"]);
}

#[test]
fn float_label_for_classification() {
    let dir = TempDir::new("float-label");
    let mut cols = good_columns(50);
    cols[2] = ("label", Arc::new(Float64Array::from_iter_values((0..50).map(|i| i as f64))));
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "");
    train_fails(&dir, &p, &["t.parquet", "column 'label'", "Float64", "regression"]);
}

#[test]
fn single_class() {
    let dir = TempDir::new("one-class");
    let mut cols = good_columns(50);
    cols[2] = ("label", Arc::new(Int64Array::from_iter_values((0..50).map(|_| 4))));
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "");
    train_fails(&dir, &p, &["t.parquet", "column 'label'", "at least 2"]);
}

#[test]
fn bad_pipeline_keys_and_values() {
    let dir = TempDir::new("bad-keys");
    write_parquet(&dir.path("t.parquet"), good_columns(50), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "lable = \"x\"", "");
    train_fails(&dir, &p, &["p.toml", "data", "unknown field `lable`"]);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "wibble = 3");
    train_fails(&dir, &p, &["p.toml", "stages[0]", "unknown field `wibble`"]);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "degree = 0");
    train_fails(&dir, &p, &["p.toml", "stages[0].degree", "from 1 to 16"]);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "normalize = \"l3\"");
    train_fails(&dir, &p, &["p.toml", "stages[0]", "l3"]);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "kind = \"magic\"");
    let text = std::fs::read_to_string(&p).unwrap().replace("kind = \"tensor_sketch\"\n", "");
    std::fs::write(&p, text).unwrap();
    train_fails(&dir, &p, &["p.toml", "stages[0].kind", "unknown stage kind 'magic'"]);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "[ridge]\nlambda = -1");
    train_fails(&dir, &p, &["p.toml", "ridge.lambda", "≥ 0"]);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "[speed]\nfast = true");
    train_fails(&dir, &p, &["p.toml", "speed", "unknown key"]);
    std::fs::write(&p, "this is = = not toml").unwrap();
    train_fails(&dir, &p, &["p.toml", "not valid TOML"]);
}

#[test]
fn bad_set_overrides() {
    let dir = TempDir::new("bad-set");
    write_parquet(&dir.path("t.parquet"), good_columns(50), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "");
    let model = dir.path("m.sfm");
    for (set, needle) in [
        ("run.speed=3", "unknown field `speed`"),
        ("stages.4.dim=8", "there are 1 stages"),
        ("stages.0.dim=0", "stages[0].dim"),
        ("nonsense", "expected key=value"),
    ] {
        let out = sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "--set", set, "--quiet"]);
        assert_eq!(out.status.code(), Some(2), "{set}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{set}: {}", stderr(&out));
        assert!(!model.exists());
    }
}

#[test]
fn unknown_label_at_evaluate_and_bad_input_at_predict_leave_nothing() {
    let dir = TempDir::new("eval-label");
    write_parquet(&dir.path("t.parquet"), good_columns(90), 40);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "");
    let model = dir.path("m.sfm");
    let out = sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let mut cols = good_columns(50);
    cols[2] = ("label", Arc::new(Int64Array::from_iter_values((0..50).map(|i| if i == 44 { 9 } else { i % 3 }))));
    write_parquet(&dir.path("new.parquet"), cols, 20);
    let out = sketchfit(&["evaluate", model.to_str().unwrap(), "--input", dir.path("new.parquet").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    for n in ["new.parquet", "row group 2", "row 4", "column 'label'", "label '9' is not one of the 3 classes"] {
        assert!(stderr(&out).contains(n), "{}", stderr(&out));
    }

    let mut cols = good_columns(50);
    let mut a: Vec<f64> = vec![0.5; 50];
    a[45] = f64::NAN;
    cols[0] = ("a", Arc::new(Float64Array::from(a)));
    write_parquet(&dir.path("nan.parquet"), cols, 20);
    let before = dir.files();
    let pred = dir.path("pred.parquet");
    let out = sketchfit(&[
        "predict",
        model.to_str().unwrap(),
        "--input",
        dir.path("nan.parquet").to_str().unwrap(),
        "-o",
        pred.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nan.parquet") && stderr(&out).contains("column 'a'"));
    assert_eq!(dir.files(), before, "partial predictions left behind");

    let mut cols = good_columns(50);
    cols.remove(1);
    write_parquet(&dir.path("narrow.parquet"), cols, 20);
    let out = sketchfit(&[
        "predict",
        model.to_str().unwrap(),
        "-i",
        dir.path("narrow.parquet").to_str().unwrap(),
        "-o",
        pred.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("column 'b'"), "{}", stderr(&out));
    assert!(!pred.exists());
}

#[test]
fn damaged_or_foreign_model_files() {
    let dir = TempDir::new("bad-model");
    write_parquet(&dir.path("t.parquet"), good_columns(90), 40);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "");
    let model = dir.path("m.sfm");
    assert_eq!(sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "-q"]).status.code(), Some(0));
    let mut bytes = std::fs::read(&model).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0x55;
    std::fs::write(dir.path("flipped.sfm"), &bytes).unwrap();
    std::fs::write(dir.path("text.sfm"), b"hello").unwrap();
    for (f, needle) in
        [("flipped.sfm", "checksum mismatch"), ("text.sfm", "not a safetensors file"), ("none.sfm", "not found")]
    {
        let out = sketchfit(&["inspect", dir.path(f).to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{f}");
        assert!(stderr(&out).contains(f) && stderr(&out).contains(needle), "{f}: {}", stderr(&out));
    }
}

#[test]
fn usage_errors_exit_2() {
    let out = sketchfit(&["train"]);
    assert_eq!(out.status.code(), Some(2));
    let out = sketchfit(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(sketchfit(&["--help"]).status.code(), Some(0));
}

#[test]
fn negative_values_for_chi2_stages() {
    let dir = TempDir::new("negative");
    let mut cols = good_columns(60);
    let mut b: Vec<f64> = (0..60).map(|i| i as f64 / 60.0).collect();
    b[44] = -0.5;
    cols[1] = ("b", Arc::new(Float64Array::from(b)));
    let a: Vec<f64> = (0..60).map(|i| 0.1 + i as f64).collect();
    cols[0] = ("a", Arc::new(Float64Array::from(a)));
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "", "");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("kind = \"tensor_sketch\"\ndim = 16", "kind = \"exp_chi2\"\nterms = 3\ndim = 16");
    std::fs::write(&p, text).unwrap();
    train_fails(&dir, &p, &["t.parquet", "row group 2", "row 4", "column 'b'", "negative"]);
}

/// Replaces the first `from` in the file's bytes by `to` (same length).
fn patch(path: &std::path::Path, from: &str, to: &str) -> bool {
    let mut bytes = std::fs::read(path).unwrap();
    let Some(at) = bytes.windows(from.len()).position(|w| w == from.as_bytes()) else { return false };
    bytes[at..at + from.len()].copy_from_slice(to.as_bytes());
    std::fs::write(path, bytes).unwrap();
    true
}

#[test]
fn a_changed_model_header_is_refused() {
    let dir = TempDir::new("header-sum");
    write_parquet(&dir.path("t.parquet"), good_columns(30), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "normalize = \"l2\"\ndim = 64");
    std::fs::write(&p, std::fs::read_to_string(&p).unwrap().replace("dim = 16\n", "")).unwrap();
    let model = dir.path("m.sfm");
    let ok = sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "--quiet"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let predict = |out: &str| {
        sketchfit(&["predict", model.to_str().unwrap(), "-i", dir.path("t.parquet").to_str().unwrap(), "-o", out])
    };
    assert_eq!(predict(dir.path("p1.parquet").to_str().unwrap()).status.code(), Some(0));
    // One byte of a stage parameter in the header, the file otherwise intact.
    // The header is a JSON string inside the safetensors metadata: its quotes are escaped.
    assert!(patch(&model, r#"\"normalize\":\"l2\""#, r#"\"normalize\":\"l1\""#));
    let out = predict(dir.path("p2.parquet").to_str().unwrap());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("checksum mismatch"), "{}", stderr(&out));
    assert!(!dir.path("p2.parquet").exists());
}

#[test]
fn inputs_that_used_to_panic_exit_2_naming_the_key_or_column() {
    let dir = TempDir::new("no-panic");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    // A validation file that lacks a feature column.
    let mut cols = good_columns(30);
    cols.remove(1);
    write_parquet(&dir.path("v.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]\nvalidation = [\"v.parquet\"]", "");
    train_fails(&dir, &p, &["v.parquet", "'b'"]);
    // A Gaussian sketch centre of the wrong length, in both variants.
    for kind in ["gaussian_sketch", "gaussian_sketch_hd"] {
        let text = format!(
            "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"a\", \"b\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"{kind}\"\ndim = 64\nsigma = 1.0\ntruncation = 4\ncenter = [0.0, 0.0, 0.0]\n"
        );
        std::fs::write(dir.path("g.toml"), text).unwrap();
        train_fails(&dir, dir.path("g.toml").to_str().unwrap(), &["stages.0.center", "3 entries", "d = 2"]);
    }
    let text = "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"a\", \"b\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"gaussian_sketch_hd\"\ndim = 64\nsigma = 1.0\ntruncation = 3\nblocks = [0, 8]\n";
    std::fs::write(dir.path("b.toml"), text).unwrap();
    train_fails(&dir, dir.path("b.toml").to_str().unwrap(), &["blocks", "≥ 1"]);
}

#[test]
fn lossy_label_casts_duplicate_names_and_glob_named_columns_are_not_silent() {
    use arrow_array::UInt64Array;
    let dir = TempDir::new("lossy");
    // Labels above i64::MAX would have become nulls, trained as class 0.
    let mut cols = good_columns(40);
    cols[2] = ("label", Arc::new(UInt64Array::from((0..40).map(|i| u64::MAX - (i % 3)).collect::<Vec<_>>())));
    write_parquet(&dir.path("u.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["u.parquet"], "features = [\"a\", \"b\"]", "");
    train_fails(&dir, &p, &["u.parquet", "column 'label'", "without losing values"]);
    // An integer model scored on string labels that are not numbers.
    write_parquet(&dir.path("t.parquet"), good_columns(40), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let model = dir.path("m.sfm");
    let ok = sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "-q"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let mut cols = good_columns(10);
    cols[2] = ("label", Arc::new(StringArray::from(vec!["x"; 10])));
    write_parquet(&dir.path("s.parquet"), cols, 5);
    let out = sketchfit(&["evaluate", model.to_str().unwrap(), "-i", dir.path("s.parquet").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // Two columns of one name would read the first twice.
    let mut cols = good_columns(40);
    let b = cols[1].1.clone();
    cols.push(("a", b));
    write_parquet(&dir.path("d.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["d.parquet"], "features = [\"a\", \"b\"]", "");
    train_fails(&dir, &p, &["d.parquet", "column 'a'", "2 columns of this name"]);
    // A column whose name has glob characters is that column, not a pattern.
    let mut cols = good_columns(40);
    cols[0].0 = "x[1]";
    write_parquet(&dir.path("g.parquet"), cols, 20);
    let p = sketch_pipeline(&dir, &["g.parquet"], "features = [\"x[1]\", \"b\"]", "");
    let out = sketchfit(&["train", &p, "-o", dir.path("g.sfm").to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let inspect = sketchfit(&["inspect", dir.path("g.sfm").to_str().unwrap(), "--json"]);
    assert!(stdout(&inspect).contains("\"x[1]\""), "{}", stdout(&inspect));
}

#[test]
fn a_mistyped_value_names_its_key_not_its_section() {
    let dir = TempDir::new("typed-key");
    write_parquet(&dir.path("t.parquet"), good_columns(30), 20);
    for (rest, key) in [
        ("[run]\nthreads = 1\nseed = \"x\"", "run.seed"),
        ("[ridge]\nper_output = 3", "ridge.per_output"),
        ("[pca]\ncomponents = \"many\"", "pca.components"),
    ] {
        let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", rest);
        train_fails(&dir, &p, &[&format!("{key}:")]);
    }
}

#[test]
fn a_mistyped_data_value_names_its_key() {
    let dir = TempDir::new("typed-data-key");
    write_parquet(&dir.path("t.parquet"), good_columns(30), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let out =
        sketchfit(&["train", &p, "-o", dir.path("m.sfm").to_str().unwrap(), "-q", "--set", "data.train=t.parquet"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("data.train:"), "{}", stderr(&out));
}

#[test]
fn a_transform_error_names_the_model_file() {
    let dir = TempDir::new("transform-path");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let model = dir.path("nopca.sfm");
    assert_eq!(sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "-q"]).status.code(), Some(0));
    let t = dir.path("t.parquet");
    let x = dir.path("x.parquet");
    let out = sketchfit(&["transform", model.to_str().unwrap(), "-i", t.to_str().unwrap(), "-o", x.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nopca.sfm") && stderr(&out).contains("no PCA projection"), "{}", stderr(&out));
}

#[test]
fn dictionary_encoded_labels_train_like_plain_ones() {
    use arrow_array::types::Int32Type;
    use arrow_array::DictionaryArray;
    let dir = TempDir::new("dict-label");
    let names = ["cat", "dog", "eel"];
    let plain: Vec<&str> = (0..60).map(|i| names[i % 3]).collect();
    let mut cols = good_columns(60);
    cols[2] = ("label", Arc::new(StringArray::from(plain.clone())));
    write_parquet(&dir.path("s.parquet"), cols, 20);
    let mut cols = good_columns(60);
    cols[2] = ("label", Arc::new(plain.iter().copied().collect::<DictionaryArray<Int32Type>>()));
    write_parquet(&dir.path("d.parquet"), cols, 20);
    let mut inspected = Vec::new();
    for f in ["s", "d"] {
        let p = sketch_pipeline(&dir, &[&format!("{f}.parquet")], "features = [\"a\", \"b\"]", "");
        let model = dir.path(&format!("{f}.sfm"));
        let out = sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "-q"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let ev = sketchfit(&["evaluate", model.to_str().unwrap(), "-i", dir.path("d.parquet").to_str().unwrap()]);
        assert_eq!(ev.status.code(), Some(0), "{}", stderr(&ev));
        inspected.push((stdout(&sketchfit(&["inspect", model.to_str().unwrap(), "--json"])), stdout(&ev)));
    }
    assert!(inspected[1].0.contains("\"dog\""), "{}", inspected[1].0);
    assert_eq!(inspected[0].1, inspected[1].1, "the same evaluation from either encoding");
}

#[test]
fn a_part_whose_stages_lost_their_fitted_values_is_refused_not_a_panic() {
    let dir = TempDir::new("unfitted-part");
    write_parquet(&dir.path("t.parquet"), good_columns(80), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let text = std::fs::read_to_string(&p).unwrap().replace("kind = \"tensor_sketch\"", "kind = \"rff\"");
    std::fs::write(&p, text).unwrap();
    let part = dir.path("p0.stats");
    let out = sketchfit(&["accumulate", &p, "--shard", "0/1", "-o", part.to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Re-seal the part with the fitted bandwidth removed: the checksum holds, the content lies.
    let (blocks, mut meta) = sketchfit::stats::stats_from_bytes(&std::fs::read(&part).unwrap()).unwrap();
    let stage = meta["stages"][0].as_object_mut().unwrap();
    assert!(stage.remove("sigma").is_some() || stage.remove("gamma").is_some(), "{stage:?}");
    let named: Vec<(&str, &sketchfit::stats::GramStats)> = blocks.iter().map(|(n, s)| (n.as_str(), s)).collect();
    std::fs::write(&part, sketchfit::stats::stats_to_bytes(&named, meta).unwrap()).unwrap();
    let out = sketchfit(&["solve", &p, part.to_str().unwrap(), "-o", dir.path("m.sfm").to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("p0.stats") && stderr(&out).contains("not fitted"), "{}", stderr(&out));
}

#[test]
fn a_gaussian_hd_sketch_on_rows_that_barely_spread_still_has_a_block() {
    // Found by `scripts/fuzz.sh` (seed 4242, case 760): the fitted truncation was 1, the
    // map had no block, and the model could not be read back (an internal error).
    let dir = TempDir::new("hd-one-term");
    let n = 60;
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("f0", Arc::new(Float64Array::from(vec![1.0; n])) as ArrayRef),
        ("label", Arc::new(Int64Array::from((0..n as i64).map(|i| i % 2).collect::<Vec<_>>()))),
    ];
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let text = "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"f*\"]\nlabel = \"label\"\n[[stages]]\nkind = \"gaussian_sketch_hd\"\ndim = 8\nnormalize = \"l2\"\n";
    std::fs::write(dir.path("p.toml"), text).unwrap();
    let model = dir.path("m.sfm");
    let out = sketchfit(&["train", dir.path("p.toml").to_str().unwrap(), "-o", model.to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(sketchfit(&["inspect", model.to_str().unwrap()]).status.code(), Some(0));
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"f0\"]", "");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("kind = \"tensor_sketch\"\ndim = 16", "kind = \"gaussian_sketch_hd\"\ndim = 16\ntruncation = 1");
    std::fs::write(&p, text).unwrap();
    train_fails(&dir, &p, &["stages[0].truncation", "≥ 2"]);
}
