//! The typed library API: pipelines built in code, fitted on record batches in memory,
//! give the model the same pipeline gives on the same rows in Parquet; errors in memory
//! name the batch, row and column; predictions on a batch equal the command's.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Float32Array, Float64Array, RecordBatch, StringArray};
use sketchfit::sketch::TensorSketchSpec;
use sketchfit::{Lambda, Model, Pipeline};

use crate::common::*;

#[test]
fn batches_in_memory_fit_the_model_the_same_rows_in_parquet_fit() {
    let dir = TempDir::new("api-fit");
    let cols = rings(900, 1);
    write_parquet(&dir.path("t.parquet"), cols.clone(), 200);
    let from_files = rings_pipeline().fit_files([dir.path("t.parquet")]).unwrap();
    let from_memory = rings_pipeline().fit(batches(&cols, 200)).unwrap();
    assert_eq!(from_memory.header.rows, 900);
    assert_eq!(from_memory.weights, from_files.weights, "same rows, same units, same seed: same weights");
    assert_eq!(from_memory.bias, from_files.bias);
    assert_eq!(from_memory.header.lambdas, from_files.header.lambdas);

    // Predictions on a batch equal the command's on the file, and the model round-trips.
    let path = dir.path("m.sfm");
    from_memory.save(&path).unwrap();
    let loaded = Model::load(&path).unwrap();
    let test = rings(300, 2);
    let test_batch = RecordBatch::try_from_iter(test.iter().cloned()).unwrap();
    let got = loaded.predict_batch(&test_batch, true).unwrap();
    write_parquet(&dir.path("test.parquet"), test.clone(), 100);
    let out = dir.path("p.parquet");
    let run = sketchfit(&[
        "predict",
        path.to_str().unwrap(),
        "-i",
        dir.path("test.parquet").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let file = std::fs::File::open(&out).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    let mut cli = Vec::new();
    for b in reader {
        cli.extend(b.unwrap().column_by_name("prediction").unwrap().as_primitive::<Int64Type>().values().to_vec());
    }
    let mine = got.column_by_name("prediction").unwrap().as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(mine, cli);
    assert!(got.column_by_name("score_2").is_some(), "scores asked for: {:?}", got.schema());
    let truth = test[4].1.as_primitive::<Int64Type>().values().to_vec();
    let right = mine.iter().zip(&truth).filter(|(a, b)| a == b).count();
    assert!(right as f64 / 300.0 > 0.9, "accuracy {right}/300");

    // Row-major slices give the same classes.
    let feats: Vec<&[f32]> =
        (0..4).map(|j| test[j].1.as_primitive::<arrow_array::types::Float32Type>().values().as_ref()).collect();
    let x: Vec<f32> = (0..300).flat_map(|r| feats.iter().map(move |f| f[r])).collect();
    let classes = loaded.predict_classes(&x).unwrap();
    assert_eq!(classes.iter().map(|&k| k as i64).collect::<Vec<_>>(), mine);
    assert!(loaded.decision_function(&x[..7]).is_err(), "7 values are not rows of 4");
}

#[test]
fn faults_in_memory_name_the_batch_row_and_column() {
    let mut cols = rings(90, 3);
    let mut a: Vec<f32> = cols[0].1.as_primitive::<arrow_array::types::Float32Type>().values().to_vec();
    a[47] = f32::NAN;
    cols[0].1 = Arc::new(Float32Array::from(a));
    let err = rings_pipeline().fit(batches(&cols, 20)).unwrap_err().to_string();
    for needle in ["record batches", "batch 2", "row 7", "column 'a'", "not finite"] {
        assert!(err.contains(needle), "'{needle}' missing from: {err}");
    }
    let good = batches(&rings(40, 4), 20);
    let other = RecordBatch::try_from_iter([("a", Arc::new(Float64Array::from(vec![1.0; 5])) as ArrayRef)]).unwrap();
    let err = rings_pipeline().fit([good[0].clone(), other]).unwrap_err().to_string();
    assert!(err.contains("batch 1") && err.contains("schema differs"), "{err}");
    let err = rings_pipeline().fit(Vec::<RecordBatch>::new()).unwrap_err().to_string();
    assert!(err.contains("no batches"), "{err}");
    // A setting is checked like a pipeline file's, naming its key.
    let err = rings_pipeline().pca(0).fit(good.clone()).unwrap_err().to_string();
    assert!(err.contains("pca.components"), "{err}");
    let err =
        rings_pipeline().stage(TensorSketchSpec { degree: 0, ..Default::default() }).fit(good).unwrap_err().to_string();
    assert!(err.contains("stages.2.degree"), "{err}");
}

#[test]
fn string_labels_and_regression_in_memory() {
    let cols = rings(300, 5);
    let names = ["x", "y", "z"];
    let labels: Vec<&str> = cols[4].1.as_primitive::<Int64Type>().values().iter().map(|&k| names[k as usize]).collect();
    let mut with_strings = cols.clone();
    with_strings[4] = ("label", Arc::new(StringArray::from(labels)));
    let model = rings_pipeline().fit(batches(&with_strings, 100)).unwrap();
    let p = model.predict_batch(&batches(&with_strings, 300)[0], false).unwrap();
    let p = p.column_by_name("prediction").unwrap().as_string::<i32>();
    assert!(p.iter().all(|v| v.is_some_and(|s| names.contains(&s))));

    let mut reg = cols[..4].to_vec();
    let y: Vec<f64> = (0..300)
        .map(|r| f64::from(reg[0].1.as_primitive::<arrow_array::types::Float32Type>().value(r)) * 2.0)
        .collect();
    reg.push(("y", Arc::new(Float64Array::from(y.clone()))));
    let model = Pipeline::regression(["y"])
        .features(["a", "b", "c", "d"])
        .stage(sketchfit::sketch::IdentitySpec::default())
        .lambda(Lambda::Fixed(1e-6))
        .fit(batches(&reg, 64))
        .unwrap();
    let p = model.predict_batch(&batches(&reg, 300)[0], false).unwrap();
    let p = p.column_by_name("prediction").unwrap().as_primitive::<arrow_array::types::Float64Type>();
    let worst = p.values().iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-3, "a linear target through the identity stage: worst error {worst:e}");
}

#[test]
fn statistics_of_shards_in_memory_merge_to_the_one_process_model_and_round_trip_as_files() {
    let dir = TempDir::new("api-stats");
    let cols = rings(900, 6);
    let parts = batches(&cols, 100);
    let p = rings_pipeline().pca(32);
    let whole = p.fit(parts.clone()).unwrap();
    let shards: Vec<sketchfit::Statistics> = (0..3).map(|i| p.accumulate(parts.clone(), (i, 3)).unwrap()).collect();
    assert_eq!(shards.iter().map(|s| s.rows()).sum::<u64>(), 900);
    assert_eq!(shards[1].shard(), (1, 3));
    // A part saved and loaded is the part: the same files as `accumulate` writes.
    let path = dir.path("s1.stats");
    shards[1].save(&path).unwrap();
    let back = sketchfit::Statistics::load(&path).unwrap();
    assert_eq!(back.to_bytes().unwrap(), shards[1].to_bytes().unwrap());
    let mut shards = shards;
    shards[1] = back;
    let merged = p.solve(shards).unwrap();
    assert!(rel(&merged.weights, &whole.weights) < 1e-10, "{:e}", rel(&merged.weights, &whole.weights));
    assert_eq!(merged.header.rows, 900);
    // A shard given twice, a missing shard, or another pipeline's shard is refused.
    let twice = vec![p.accumulate(parts.clone(), (0, 2)).unwrap(), p.accumulate(parts.clone(), (0, 2)).unwrap()];
    assert!(p.solve(twice).unwrap_err().to_string().contains("given twice"));
    let missing = vec![p.accumulate(parts.clone(), (0, 2)).unwrap()];
    assert!(p.solve(missing).unwrap_err().to_string().contains("missing"));
    let other = p.clone().seed(12);
    let foreign = vec![other.accumulate(parts.clone(), (0, 1)).unwrap()];
    assert!(p.solve(foreign).is_err());
    assert!(p.accumulate(parts, (3, 3)).is_err(), "shard 3 of 3 does not exist");
}
