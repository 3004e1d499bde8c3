//! Every kind of bad input gets a clear error that names the file and the column or
//! row group, exits 2, and leaves no output behind.

use std::sync::Arc;

use crate::common::*;
use arrow_array::builder::{Float32Builder, ListBuilder};
use arrow_array::{ArrayRef, Float64Array, Int32Array, Int64Array, StringArray};

fn good_columns(n: usize) -> Vec<(&'static str, ArrayRef)> {
    let a: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    let b: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
    let label: Vec<i64> = (0..n).map(|i| (i % 3) as i64).collect();
    vec![
        ("a", Arc::new(Float64Array::from(a)) as ArrayRef),
        ("b", Arc::new(Float64Array::from(b)) as ArrayRef),
        ("label", Arc::new(Int64Array::from(label)) as ArrayRef),
    ]
}

fn pipeline(dir: &TempDir, train: &[&str], data_extra: &str, rest: &str) -> String {
    let files: Vec<String> = train.iter().map(|f| format!("\"{f}\"")).collect();
    let text = format!(
        "[data]\ntrain = [{}]\nlabel = \"label\"\n{data_extra}\n\n[[stages]]\nkind = \"tensor_sketch\"\ndim = 16\n{rest}\n",
        files.join(", ")
    );
    let p = dir.path("p.toml");
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// Runs `train`, expects exit 2 with every `needles` in stderr and no model left.
fn train_fails(dir: &TempDir, pipeline: &str, needles: &[&str]) {
    let before = dir.files();
    let model = dir.path("m.sfm");
    let out = sketchfit(&["train", pipeline, "-o", model.to_str().unwrap(), "--quiet"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "exit code; stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks '{n}': {err}");
    }
    assert_eq!(dir.files(), before, "output left behind");
}

#[test]
fn missing_feature_column() {
    let dir = TempDir::new("missing-col");
    write_parquet(&dir.path("t.parquet"), good_columns(50), 20);
    let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"nope\"]", "");
    train_fails(&dir, &p, &["t.parquet", "column 'nope'", "not found", "the file has columns a, b, label"]);
}

#[test]
fn feature_glob_matching_nothing() {
    let dir = TempDir::new("glob-none");
    write_parquet(&dir.path("t.parquet"), good_columns(50), 20);
    let p = pipeline(&dir, &["t.parquet"], "features = [\"px*\"]", "");
    train_fails(&dir, &p, &["t.parquet", "px*", "no column matches"]);
}

#[test]
fn mistyped_feature_column() {
    let dir = TempDir::new("mistyped");
    let mut cols = good_columns(50);
    cols.push(("s", Arc::new(StringArray::from_iter_values((0..50).map(|i| i.to_string())))));
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"s\"]", "");
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
        let p = pipeline(&dir, &["t.parquet"], "", "");
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
    let p = pipeline(&dir, &["t.parquet"], "", "");
    train_fails(&dir, &p, &["t.parquet", "row group 1", "row 13", "column 'a'", "null"]);
}

#[test]
fn null_label() {
    let dir = TempDir::new("null-label");
    let mut cols = good_columns(50);
    let l: Vec<Option<i64>> = (0..50).map(|i| if i == 5 { None } else { Some(i % 2) }).collect();
    cols[2] = ("label", Arc::new(Int64Array::from(l)));
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let p = pipeline(&dir, &["t.parquet"], "", "");
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
    let p = pipeline(&dir, &["t.parquet"], "feature_list = \"v\"", "");
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
        let p = pipeline(&dir, &["good.parquet", f], "", "");
        train_fails(&dir, &p, &[f, "not a readable Parquet file"]);
    }
}

#[test]
fn file_with_no_rows() {
    let dir = TempDir::new("zero-rows");
    write_parquet(&dir.path("good.parquet"), good_columns(50), 20);
    write_parquet(&dir.path("none.parquet"), good_columns(0), 20);
    let p = pipeline(&dir, &["good.parquet", "none.parquet"], "", "");
    train_fails(&dir, &p, &["none.parquet", "no rows"]);
}

#[test]
fn schemas_that_differ_between_files() {
    let dir = TempDir::new("schemas");
    write_parquet(&dir.path("one.parquet"), good_columns(50), 20);
    let mut cols = good_columns(50);
    cols[0] = ("a", Arc::new(Int32Array::from_iter_values(0..50)));
    write_parquet(&dir.path("two.parquet"), cols, 20);
    let p = pipeline(&dir, &["one.parquet", "two.parquet"], "", "");
    train_fails(&dir, &p, &["two.parquet", "column 'a'", "Int32", "Float64", "schemas differ"]);
    let mut cols = good_columns(50);
    cols.remove(1);
    write_parquet(&dir.path("three.parquet"), cols, 20);
    let p = pipeline(&dir, &["one.parquet", "three.parquet"], "", "");
    train_fails(&dir, &p, &["three.parquet", "column 'b'", "missing"]);
}

#[test]
fn missing_input_file_and_unmatched_glob() {
    let dir = TempDir::new("missing-file");
    let p = pipeline(&dir, &["nowhere.parquet"], "", "");
    train_fails(&dir, &p, &["nowhere.parquet", "not found"]);
    let p = pipeline(&dir, &["none-*.parquet"], "", "");
    train_fails(&dir, &p, &["none-*.parquet", "no file matches"]);
}

#[test]
fn float_label_for_classification() {
    let dir = TempDir::new("float-label");
    let mut cols = good_columns(50);
    cols[2] = ("label", Arc::new(Float64Array::from_iter_values((0..50).map(|i| i as f64))));
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let p = pipeline(&dir, &["t.parquet"], "", "");
    train_fails(&dir, &p, &["t.parquet", "column 'label'", "Float64", "regression"]);
}

#[test]
fn single_class() {
    let dir = TempDir::new("one-class");
    let mut cols = good_columns(50);
    cols[2] = ("label", Arc::new(Int64Array::from_iter_values((0..50).map(|_| 4))));
    write_parquet(&dir.path("t.parquet"), cols, 20);
    let p = pipeline(&dir, &["t.parquet"], "", "");
    train_fails(&dir, &p, &["t.parquet", "column 'label'", "at least 2"]);
}

#[test]
fn bad_pipeline_keys_and_values() {
    let dir = TempDir::new("bad-keys");
    write_parquet(&dir.path("t.parquet"), good_columns(50), 20);
    let p = pipeline(&dir, &["t.parquet"], "lable = \"x\"", "");
    train_fails(&dir, &p, &["p.toml", "data", "unknown field `lable`"]);
    let p = pipeline(&dir, &["t.parquet"], "", "wibble = 3");
    train_fails(&dir, &p, &["p.toml", "stages[0]", "unknown field `wibble`"]);
    let p = pipeline(&dir, &["t.parquet"], "", "degree = 0");
    train_fails(&dir, &p, &["p.toml", "stages[0].degree", "from 1 to 16"]);
    let p = pipeline(&dir, &["t.parquet"], "", "normalize = \"l3\"");
    train_fails(&dir, &p, &["p.toml", "stages[0]", "l3"]);
    let p = pipeline(&dir, &["t.parquet"], "", "kind = \"magic\"");
    let text = std::fs::read_to_string(&p).unwrap().replace("kind = \"tensor_sketch\"\n", "");
    std::fs::write(&p, text).unwrap();
    train_fails(&dir, &p, &["p.toml", "stages[0].kind", "unknown stage kind 'magic'"]);
    let p = pipeline(&dir, &["t.parquet"], "", "[ridge]\nlambda = -1");
    train_fails(&dir, &p, &["p.toml", "ridge.lambda", "≥ 0"]);
    let p = pipeline(&dir, &["t.parquet"], "", "[speed]\nfast = true");
    train_fails(&dir, &p, &["p.toml", "speed", "unknown key"]);
    std::fs::write(&p, "this is = = not toml").unwrap();
    train_fails(&dir, &p, &["p.toml", "not valid TOML"]);
}

#[test]
fn bad_set_overrides() {
    let dir = TempDir::new("bad-set");
    write_parquet(&dir.path("t.parquet"), good_columns(50), 20);
    let p = pipeline(&dir, &["t.parquet"], "", "");
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
    let p = pipeline(&dir, &["t.parquet"], "", "");
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
    let p = pipeline(&dir, &["t.parquet"], "", "");
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
    let p = pipeline(&dir, &["t.parquet"], "", "");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("kind = \"tensor_sketch\"\ndim = 16", "kind = \"exp_chi2\"\nterms = 3\ndim = 16");
    std::fs::write(&p, text).unwrap();
    train_fails(&dir, &p, &["t.parquet", "row group 2", "row 4", "column 'b'", "negative"]);
}

#[test]
fn outputs_never_replace_inputs_by_name_link_or_glob() {
    let dir = TempDir::new("clobber");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    write_parquet(&dir.path("te.parquet"), good_columns(30), 20);
    let p = pipeline(&dir, &["t*.parquet"], "features = [\"a\", \"b\"]", "[pca]\ncomponents = 4");
    let model = dir.path("m.sfm");
    let ok = sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "--quiet"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    std::os::unix::fs::symlink(dir.path("t.parquet"), dir.path("alias.parquet")).unwrap();
    std::fs::hard_link(dir.path("te.parquet"), dir.path("hard.parquet")).unwrap();
    let snapshot = |d: &TempDir| -> Vec<(String, Vec<u8>)> {
        d.files().into_iter().map(|f| (f.clone(), std::fs::read(d.path(&f)).unwrap())).collect()
    };
    let before = snapshot(&dir);
    let s = |f: &str| dir.path(f).to_string_lossy().into_owned();
    let cases: Vec<Vec<String>> = vec![
        // The glob t*.parquet matches both files: either is an input.
        vec!["train".into(), p.clone(), "-o".into(), s("te.parquet"), "--quiet".into()],
        vec!["train".into(), p.clone(), "-o".into(), s("alias.parquet"), "--quiet".into()],
        vec!["train".into(), p.clone(), "-o".into(), s("hard.parquet"), "--quiet".into()],
        vec!["predict".into(), s("m.sfm"), "-i".into(), s("te.parquet"), "-o".into(), s("te.parquet")],
        vec!["predict".into(), s("m.sfm"), "-i".into(), s("te.parquet"), "-o".into(), s("m.sfm")],
        vec!["predict".into(), s("m.sfm"), "-i".into(), s("hard.parquet"), "-o".into(), s("te.parquet")],
        vec!["transform".into(), s("m.sfm"), "-i".into(), s("t.parquet"), "-o".into(), s("alias.parquet")],
    ];
    for args in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sketchfit(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("never replaces an input"), "{args:?}: {err}");
        assert_eq!(snapshot(&dir), before, "{args:?} changed a file");
    }
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
    let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "normalize = \"l2\"\ndim = 64");
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
    let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]\nvalidation = [\"v.parquet\"]", "");
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
fn a_missing_output_directory_is_refused_before_the_pass() {
    let dir = TempDir::new("no-out-dir");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let out = sketchfit(&["train", &p, "-o", dir.path("nope/m.sfm").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("does not exist"), "{err}");
    // Refused before any pass: no pass line was printed.
    assert!(!err.contains("pass 1:"), "the pass ran before the output was checked: {err}");
}

/// One random Parquet file: 1–5 feature columns `f0…` of random numeric types (some with
/// nulls, NaN, huge or negative values), a label of a random type (sometimes with nulls
/// or a single class), random row counts and row-group sizes.
fn random_file(r: &mut sketchfit::rng::StageRng, path: &std::path::Path, valid: bool) -> usize {
    use arrow_array::{Float32Array, UInt64Array};
    let rows = if valid {
        [20usize, 45][r.below(2) as usize]
    } else {
        [0usize, 2, 7, 20, 45, 45, 45, 45, 45, 45][r.below(10) as usize]
    };
    let ncols = 1 + r.below(5) as usize;
    let mut cols: Vec<(String, ArrayRef)> = Vec::new();
    for j in 0..ncols {
        let odd = if valid { 3 + r.below(13) } else { r.below(16) };
        let v: Vec<f64> = (0..rows)
            .map(|i| match odd {
                0 if i == rows / 2 => f64::NAN,
                1 => -(r.uniform() * 3.0),
                2 if i == 0 => 1e30,
                _ => r.uniform(),
            })
            .collect();
        let nulls = !valid && r.below(16) == 0;
        let col: ArrayRef = match r.below(4) {
            0 => Arc::new(Float32Array::from(
                v.iter().enumerate().map(|(i, &x)| (!nulls || i % 5 != 1).then_some(x as f32)).collect::<Vec<_>>(),
            )),
            1 => Arc::new(Int32Array::from(v.iter().map(|&x| Some((x * 10.0) as i32)).collect::<Vec<_>>())),
            // Valid-mode files keep every feature within a few orders of magnitude (a
            // 1e19 column leaves C + λI singular to working precision at λ = 0.1).
            2 => {
                let scale = if valid { 1e3 } else { 1e19 };
                Arc::new(UInt64Array::from(v.iter().map(|&x| (x.abs() * scale) as u64).collect::<Vec<_>>()))
            }
            _ => Arc::new(Float64Array::from(
                v.iter().enumerate().map(|(i, &x)| (!nulls || i % 5 != 1).then_some(x)).collect::<Vec<_>>(),
            )),
        };
        cols.push((format!("f{j}"), col));
    }
    let classes = if valid { [2i64, 3, 3, 5][r.below(4) as usize] } else { [1i64, 2, 3, 3, 5][r.below(5) as usize] };
    let label: ArrayRef = match if valid { [0, 3, 5][r.below(3) as usize] } else { r.below(10) } {
        0 | 4 => Arc::new(StringArray::from((0..rows).map(|i| format!("c{}", i as i64 % classes)).collect::<Vec<_>>())),
        1 => Arc::new(Int64Array::from(
            (0..rows).map(|i| (i % 7 != 3).then_some(i as i64 % classes)).collect::<Vec<_>>(),
        )),
        2 => Arc::new(Float64Array::from((0..rows).map(|i| i as f64 * 0.5).collect::<Vec<_>>())),
        _ => Arc::new(Int64Array::from((0..rows).map(|i| i as i64 % classes).collect::<Vec<_>>())),
    };
    cols.push(("label".into(), label));
    let named: Vec<(&str, ArrayRef)> = cols.iter().map(|(n, a)| (n.as_str(), a.clone())).collect();
    write_parquet(path, named, 1 + r.below(12) as usize);
    rows
}

/// One random pipeline over the file's `f*` columns: a random stage (valid parameters
/// mostly, broken ones sometimes), random PCA, λ, solver, Gram precision and task.
fn random_pipeline(r: &mut sketchfit::rng::StageRng, valid: bool) -> String {
    // Half the cases draw only values that are valid on their own, so that enough runs
    // train for the checks on the trained model; the other half draw broken ones too.
    const BROKEN: &[&str] = &["0", "-1", "1e-300", "bogus", "100000", "11", "\"dual\"", "lambda = -1\n"];
    let pick = move |r: &mut sketchfit::rng::StageRng, xs: &[&str]| {
        let good: Vec<&str> = xs.iter().copied().filter(|x| !(valid && BROKEN.contains(x))).collect();
        let from = if good.is_empty() { xs.to_vec() } else { good };
        from[r.below(from.len() as u32) as usize].to_string()
    };
    let kind = pick(
        r,
        &[
            "tensor_sketch",
            "random_maclaurin",
            "recursive_tensor_sketch",
            "craftmaps",
            "identity",
            "rff",
            "chi2",
            "chi2_chebyshev",
            "exp_chi2",
            "gaussian_sketch",
            "gaussian_sketch_hd",
        ],
    );
    let dim = pick(r, &["2", "8", "16", "16", "33", "64", "64", "0"]);
    let mut stage = format!("[[stages]]\nkind = \"{kind}\"\n");
    if kind != "identity" && kind != "chi2" && kind != "chi2_chebyshev" {
        stage += &format!("dim = {dim}\n");
    }
    if matches!(kind.as_str(), "tensor_sketch" | "random_maclaurin" | "recursive_tensor_sketch" | "craftmaps") {
        stage += &format!("degree = {}\n", pick(r, &["1", "2", "2", "3", "3", "0"]));
    }
    if r.below(3) == 0 {
        stage += &format!("normalize = \"{}\"\n", pick(r, &["l2", "l2", "l1", "none", "none", "bogus"]));
    }
    if r.below(6) == 0 {
        stage += &format!(
            "down = \"{}\"\ndown_dim = {}\n",
            pick(r, &["srht", "gaussian", "bogus"]),
            pick(r, &["1", "8", "8", "0", "100000"])
        );
    }
    let task = if r.below(5) == 0 { "task = \"regression\"\n" } else { "" };
    let target = if task.is_empty() { "label = \"label\"" } else { "targets = [\"label\"]" };
    let pca = match r.below(5) {
        0 | 3 => format!("[pca]\ncomponents = {}\n", pick(r, &["1", "3", "3", "50", "0"])),
        1 => "[pca]\nvariance = 0.9\n".to_string(),
        _ => String::new(),
    };
    let lambda = pick(r, &["\"gcv\"", "\"gcv\"", "0.1", "0.1", "0", "-1", "1e-300"]);
    let solver = pick(r, &["auto", "auto", "auto", "auto", "cholesky", "tridiagonal", "eigen", "dual"]);
    let gram = pick(r, &["f64", "f32"]);
    // Output codes, held-out λ with or without the refit (the training file serves as
    // its own validation file: the point is the code path, not the score).
    let codes = match r.below(6) {
        0 | 1 => format!("codes = \"ecoc\"\ncode_length = {}\n", pick(r, &["1", "2", "3", "7", "200", "0"])),
        // A code file (written beside the data by `random_code_file`): right or wrong
        // row count, sometimes a repeated column.
        2 => "codes = \"ecoc\"\ncode_file = \"code.txt\"\n".to_string(),
        _ => String::new(),
    };
    // k-fold (its own λ rules; refused where they do not hold) and kernel candidates of
    // every key kind, non-finite values among them.
    let validation = if r.below(4) == 0 { "validation = [\"t.parquet\"]\n" } else { "" };
    // Mostly where their rules hold (GCV on all features for k-fold, held-out rows for
    // candidates), sometimes anywhere, so both the runs and the refusals are exercised.
    let cv_fits = lambda == "\"gcv\"" && pca.is_empty() && validation.is_empty();
    let cv = if r.below(if cv_fits { 3 } else { 12 }) == 0 {
        format!("cv = {}\n", pick(r, &["2", "3", "3", "11"]))
    } else {
        String::new()
    };
    let held_out = !validation.is_empty() || !cv.is_empty();
    if r.below(if held_out { 2 } else { 12 }) == 0 {
        stage += &format!(
            "candidates = {{ {} }}\n",
            pick(
                r,
                &[
                    "dim = [8, 16]",
                    "sigma = [0.5, 2.0]",
                    "sigma = [1.0, nan]",
                    "sigma = [1.0, inf]",
                    "degree = [2, 3]",
                    "gamma = [0.5, 1.0]",
                    "offset = [0.0, 1.0]",
                    "normalize = [\"l2\", \"none\"]",
                    "beta = [1.0, 2.0]",
                    "dim = [16]",
                ]
            )
        );
    }
    let refit = pick(r, &["true", "true", "false"]);
    // The sparse learners, fixed λ₁ or by validation, with short paths and sweep caps.
    let sparse = match r.below(5) {
        0 => format!(
            "[solver]\nkind = \"{}\"\n{}path = 5\nmax_sweeps = {}\nl2 = {}\n",
            pick(r, &["lasso", "elastic_net", "group_lasso", "ridge"]),
            pick(r, &["lambda = 0.5\n", "lambda = 0.5\n", "", "lambda = -1\n"]),
            pick(r, &["50", "1", "0"]),
            pick(r, &["0.0", "0.0", "1.0"])
        ),
        _ => String::new(),
    };
    format!(
        "{task}[data]\ntrain = [\"t.parquet\"]\n{validation}features = [\"f*\"]\n{target}\n\n{stage}\n{pca}\n[ridge]\nlambda = {lambda}\nsolver = \"{solver}\"\nrefit = {refit}\n{codes}{cv}\n{sparse}[run]\ngram = \"{gram}\"\nsample_rows = 50\n"
    )
}

/// A code file for the random pipelines: 1–5 rows of ±1 (the data have 1–5 classes),
/// sometimes with a repeated column.
fn random_code_file(r: &mut sketchfit::rng::StageRng, path: &std::path::Path) {
    let rows = [1usize, 2, 3, 3, 3, 5][r.below(6) as usize];
    let cols = 1 + r.below(3) as usize;
    let mut text = String::new();
    for _ in 0..rows {
        let mut row: Vec<&str> = (0..cols).map(|_| if r.below(2) == 1 { "1" } else { "-1" }).collect();
        if cols > 1 && r.below(4) == 0 {
            row[1] = row[0];
        }
        text += &row.join(" ");
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// The columns of a Parquet file and its rows.
fn parquet_columns(path: &std::path::Path) -> (Vec<String>, usize) {
    let f = std::fs::File::open(path).unwrap();
    let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let names = b.schema().fields().iter().map(|f| f.name().clone()).collect();
    let rows = b.metadata().file_metadata().num_rows() as usize;
    (names, rows)
}

/// What the trained model of a random case must do besides loading: `predict --scores`
/// gives one score column per class (one for binary one-vs-all), `transform` runs on a
/// model with PCA and is refused on one without, and two shards solve to the one-process
/// model where λ is fixed.
fn check_trained_model(case: u64, text: &str, dir: &TempDir, valid: bool) {
    let model = dir.path("m.sfm");
    let m = sketchfit::Model::load(&model).unwrap();
    let pred = dir.path("pred.parquet");
    let _ = std::fs::remove_file(&pred);
    let out = sketchfit(&[
        "predict",
        model.to_str().unwrap(),
        "-i",
        dir.path("t.parquet").to_str().unwrap(),
        "-o",
        pred.to_str().unwrap(),
        "--scores",
    ]);
    let code = out.status.code();
    assert!(
        matches!(code, Some(0) | Some(2)),
        "case {case}: predict --scores {:?}\n{text}\n{}",
        out.status,
        stderr(&out)
    );
    if code == Some(0) {
        if let Some(classes) = &m.header.classes {
            let (names, _) = parquet_columns(&pred);
            let scores = names.iter().filter(|n| n.starts_with("score_")).count();
            let want = if classes.len() == 2 && m.header.code.is_none() { 1 } else { classes.len() };
            assert_eq!(scores, want, "case {case}: score columns {names:?}\n{text}");
        }
    }
    let tr = dir.path("tr.parquet");
    let out = sketchfit(&[
        "transform",
        model.to_str().unwrap(),
        "-i",
        dir.path("t.parquet").to_str().unwrap(),
        "-o",
        tr.to_str().unwrap(),
    ]);
    let want = if m.header.projections.is_empty() { Some(2) } else { Some(0) };
    assert!(
        out.status.code() == want || out.status.code() == Some(2),
        "case {case}: transform {:?}\n{text}\n{}",
        out.status,
        stderr(&out)
    );
    // Shards: fixed λ = 0.1 without selection (validation, candidates, k-fold, sparse),
    // on a valid-mode file (no 1e30 or NaN planted).
    let plain = valid
        && text.contains("lambda = 0.1\n")
        && !text.contains("validation =")
        && !text.contains("candidates =")
        && !text.contains("cv =")
        && !text.contains("[solver]")
        && !text.contains("solver = \"dual\"")
        // A PCA of fewer rows than components has a null space whose basis rounding
        // may turn: its models agree on the data, not weight by weight.
        && !text.contains("[pca]");
    if !plain {
        return;
    }
    let p = dir.path("p.toml").to_string_lossy().into_owned();
    let parts: Vec<String> =
        (0..2).map(|i| dir.path(&format!("part{i}.stats")).to_string_lossy().into_owned()).collect();
    for (i, part) in parts.iter().enumerate() {
        let _ = std::fs::remove_file(part);
        let out = sketchfit(&["accumulate", &p, "--shard", &format!("{i}/2"), "-o", part, "-q"]);
        assert_eq!(out.status.code(), Some(0), "case {case}: accumulate {i}/2\n{text}\n{}", stderr(&out));
    }
    let sharded = dir.path("s.sfm");
    let _ = std::fs::remove_file(&sharded);
    let out = sketchfit(&["solve", &p, &parts[0], &parts[1], "-o", sharded.to_str().unwrap(), "-q"]);
    // Features of 1e19 (the u64 columns) square to 1e38, beside which λ = 0.1 is below
    // rounding: C + λI is singular to working precision and the sums of one process and
    // of two shards may fall either side of the pivot test. Both outcomes are honest.
    if out.status.code() == Some(2) && stderr(&out).contains("not positive definite") {
        return;
    }
    assert_eq!(out.status.code(), Some(0), "case {case}: solve\n{text}\n{}", stderr(&out));
    let s = sketchfit::Model::load(&sharded).unwrap();
    let scale = m.weights.iter().fold(0.0f64, |a, v| a.max(v.abs())).max(1e-300);
    let diff = m.weights.iter().zip(&s.weights).fold(0.0f64, |a, (x, y)| a.max((x - y).abs()));
    assert!(diff <= 1e-5 * scale, "case {case}: shards give another model ({diff:e} of {scale:e})\n{text}");
}

#[test]
fn random_pipelines_and_schemas_exit_0_or_2_and_every_written_model_loads() {
    // `scripts/fuzz.sh` runs many more cases with other seeds.
    let cases: u64 = std::env::var("SKETCHFIT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let seed: u64 = std::env::var("SKETCHFIT_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let dir = TempDir::new("fuzz");
    let (mut ok, mut refused) = (0, 0);
    let mut reasons: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for case in 0..cases {
        let mut r = sketchfit::rng::StageRng::new(seed, case);
        let valid = r.below(2) == 0;
        random_file(&mut r, &dir.path("t.parquet"), valid);
        random_code_file(&mut r, &dir.path("code.txt"));
        let text = random_pipeline(&mut r, valid);
        std::fs::write(dir.path("p.toml"), &text).unwrap();
        let model = dir.path("m.sfm");
        let _ = std::fs::remove_file(&model);
        let out = sketchfit(&["train", dir.path("p.toml").to_str().unwrap(), "-o", model.to_str().unwrap(), "-q"]);
        let code = out.status.code();
        assert!(
            code == Some(0) || code == Some(2),
            "case {case} (seed {seed}) exited {code:?}:\n{text}\n{}",
            stderr(&out)
        );
        if code == Some(0) {
            ok += 1;
            let inspect = sketchfit(&["inspect", model.to_str().unwrap()]);
            assert_eq!(
                inspect.status.code(),
                Some(0),
                "case {case}: the model does not load:\n{text}\n{}",
                stderr(&inspect)
            );
            check_trained_model(case, &text, &dir, valid);
        } else {
            refused += 1;
            let err = stderr(&out);
            let reason: String = err.rsplit(": ").nth(1).unwrap_or("").chars().take(40).collect();
            *reasons.entry(reason).or_default() += 1;
            assert!(!model.exists(), "case {case}: a refused run left a model");
            assert!(stderr(&out).starts_with("error:"), "case {case}: {}", stderr(&out));
        }
    }
    eprintln!("{cases} random cases: {ok} trained, {refused} refused with exit 2");
    for (reason, n) in &reasons {
        eprintln!("  {n:5}  …{reason}");
    }
    assert!(ok > 0 && refused > 0, "the generator should produce both outcomes ({ok} / {refused})");
}

#[test]
fn the_memory_statement_covers_the_solve_path_and_a_fixed_lambda_factors_in_place() {
    let dir = TempDir::new("memory");
    write_parquet(&dir.path("t.parquet"), good_columns(300), 100);
    // D = 4096: the Gram is 64 MiB, small chunks keep the buffers near the 32 MiB scratch:
    // the pass fits in 110 MiB, the Gram and a copy (128 MiB) do not. (300 rows ≤ D/2
    // would go to the dual path: the primal paths are named.)
    let p = pipeline(
        &dir,
        &["t.parquet"],
        "features = [\"a\", \"b\"]",
        "dim = 4096\n\n[ridge]\nlambda = 0.1\nsolver = \"cholesky\"\n\n[run]\nchunk_rows = 64\nmemory_limit_mib = 110",
    );
    std::fs::write(&p, std::fs::read_to_string(&p).unwrap().replace("dim = 16\n", "")).unwrap();
    let model = dir.path("m.sfm");
    // A copy of the Gram does not fit beside it: factored in place, after the
    // statistics were written to the checkpoint.
    let out = sketchfit(&["train", &p, "-o", model.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("cholesky path, in place"), "{err}");
    assert!(err.contains("before the in-place solve"), "{err}");
    assert!(model.exists() && !dir.path("m.sfm.ckpt").exists());
    // GCV needs a dense D × D (128 MiB): refused before the pass, naming the path.
    let gcv = ["--set", "ridge.lambda=\"gcv\"", "--set", "ridge.solver=\"tridiagonal\""];
    let out = sketchfit(&[&["train", &p, "-o", dir.path("g.sfm").to_str().unwrap()][..], &gcv[..]].concat());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not enough memory") && err.contains("tridiagonal"), "{err}");
    assert!(!err.contains("pass 1:"), "{err}");
    assert!(!dir.path("g.sfm").exists());
}

#[test]
fn a_large_fixed_lambda_solve_consumes_statistics_that_are_on_disk_and_equals_the_copy() {
    let dir = TempDir::new("on-disk");
    write_parquet(&dir.path("t.parquet"), good_columns(200), 100);
    // D = 8192: the Gram copy (277 MB) passes the 256 MiB a solve copies when the
    // statistics are safe on disk anyway.
    let p = pipeline(
        &dir,
        &["t.parquet"],
        "features = [\"a\", \"b\"]",
        "dim = 8192\n\n[ridge]\nlambda = 0.1\nsolver = \"cholesky\"",
    );
    std::fs::write(&p, std::fs::read_to_string(&p).unwrap().replace("dim = 16\n", "")).unwrap();
    let path = |name: &str| dir.path(name).to_string_lossy().into_owned();
    // `train` keeps a checkpoint by default: written, factored in place, removed.
    let out = sketchfit(&["train", &p, "-o", &path("in.sfm")]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("cholesky path, in place"), "{err}");
    assert!(err.contains("before the in-place solve") && !dir.path("in.sfm.ckpt").exists(), "{err}");
    // Without a checkpoint the statistics exist only in memory: a copy is factored.
    let out = sketchfit(&["train", &p, "-o", &path("copy.sfm"), "--set", "run.checkpoint_every=0"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("in place"), "{err}");
    // `solve` from a part: the part is the copy on disk.
    let out = sketchfit(&["accumulate", &p, "--shard", "0/1", "-o", &path("p.stats"), "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = sketchfit(&["solve", &p, &path("p.stats"), "-o", &path("part.sfm")]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("factoring in place"), "{err}");
    assert!(dir.path("p.stats").exists());
    // The same arithmetic either way: the models are equal bit for bit.
    let load = |name: &str| sketchfit::model::Model::load(&dir.path(name)).unwrap();
    let (a, b, c) = (load("in.sfm"), load("copy.sfm"), load("part.sfm"));
    assert_eq!((&a.weights, &a.bias), (&b.weights, &b.bias));
    assert_eq!((&a.weights, &a.bias), (&c.weights, &c.bias));
}

#[test]
fn lossy_label_casts_duplicate_names_and_glob_named_columns_are_not_silent() {
    use arrow_array::UInt64Array;
    let dir = TempDir::new("lossy");
    // Labels above i64::MAX would have become nulls, trained as class 0.
    let mut cols = good_columns(40);
    cols[2] = ("label", Arc::new(UInt64Array::from((0..40).map(|i| u64::MAX - (i % 3)).collect::<Vec<_>>())));
    write_parquet(&dir.path("u.parquet"), cols, 20);
    let p = pipeline(&dir, &["u.parquet"], "features = [\"a\", \"b\"]", "");
    train_fails(&dir, &p, &["u.parquet", "column 'label'", "without losing values"]);
    // An integer model scored on string labels that are not numbers.
    write_parquet(&dir.path("t.parquet"), good_columns(40), 20);
    let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
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
    let p = pipeline(&dir, &["d.parquet"], "features = [\"a\", \"b\"]", "");
    train_fails(&dir, &p, &["d.parquet", "column 'a'", "2 columns of this name"]);
    // A column whose name has glob characters is that column, not a pattern.
    let mut cols = good_columns(40);
    cols[0].0 = "x[1]";
    write_parquet(&dir.path("g.parquet"), cols, 20);
    let p = pipeline(&dir, &["g.parquet"], "features = [\"x[1]\", \"b\"]", "");
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
        let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", rest);
        train_fails(&dir, &p, &[&format!("{key}:")]);
    }
}

#[test]
fn a_mistyped_data_value_names_its_key() {
    let dir = TempDir::new("typed-data-key");
    write_parquet(&dir.path("t.parquet"), good_columns(30), 20);
    let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let out =
        sketchfit(&["train", &p, "-o", dir.path("m.sfm").to_str().unwrap(), "-q", "--set", "data.train=t.parquet"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("data.train:"), "{}", stderr(&out));
}

#[cfg(unix)]
#[test]
fn fifos_directories_and_symlink_loops_are_refused_not_waited_on() {
    let dir = TempDir::new("non-regular");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let fifo = dir.path("f.parquet");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success());
    std::os::unix::fs::symlink(dir.path("b.parquet"), dir.path("a.parquet")).unwrap();
    std::os::unix::fs::symlink(dir.path("a.parquet"), dir.path("b.parquet")).unwrap();
    std::fs::create_dir(dir.path("d.parquet")).unwrap();
    for (name, needle) in
        [("f.parquet", "not a regular file"), ("a.parquet", "symlink loop"), ("d.parquet", "a directory")]
    {
        let p = pipeline(&dir, &[name], "features = [\"a\", \"b\"]", "");
        // A FIFO opened for reading would block this test forever: the refusal comes first.
        train_fails(&dir, &p, &[name, needle]);
    }
    let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let model = dir.path("m.sfm");
    assert_eq!(sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "-q"]).status.code(), Some(0));
    let (f, t, x) = (fifo.to_str().unwrap(), dir.path("t.parquet"), dir.path("x.out"));
    let (t, x) = (t.to_str().unwrap(), x.to_str().unwrap());
    for args in [
        vec!["predict", f, "-i", t, "-o", x],
        vec!["inspect", f],
        vec!["train", f, "-o", x],
        vec!["solve", &p, f, "-o", x],
    ] {
        let out = sketchfit(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("f.parquet") && stderr(&out).contains("not a regular file"), "{}", stderr(&out));
    }
}

#[test]
fn a_transform_error_names_the_model_file() {
    let dir = TempDir::new("transform-path");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
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
        let p = pipeline(&dir, &[&format!("{f}.parquet")], "features = [\"a\", \"b\"]", "");
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
    let p = pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
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
    let p = pipeline(&dir, &["t.parquet"], "features = [\"f0\"]", "");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("kind = \"tensor_sketch\"\ndim = 16", "kind = \"gaussian_sketch_hd\"\ndim = 16\ntruncation = 1");
    std::fs::write(&p, text).unwrap();
    train_fails(&dir, &p, &["stages[0].truncation", "≥ 2"]);
}
