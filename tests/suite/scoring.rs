//! Scoring on every core: `predict`, `transform` and `evaluate` split the mapping and
//! scoring over worker threads and write in input order; the result does not depend on
//! the thread count, bit for bit, and the library's scores are the command's.

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use sketchfit::Model;

use crate::common::*;

fn digits_model(dir: &TempDir) -> std::path::PathBuf {
    let p = dir.path("p.toml");
    std::fs::write(
        &p,
        format!(
            "[data]\ntrain = [\"{}\"]\nfeatures = [\"px*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"tensor_sketch\"\ndegree = 3\noffset = 1.0\ndim = 1024\nnormalize = \"l2\"\n\n[pca]\ncomponents = 64\n\n[ridge]\nlambda = 0.01\n",
            repo("data/digits_train.parquet")
        ),
    )
    .unwrap();
    let model = dir.path("m.sfm");
    let out = sketchfit(&["train", p.to_str().unwrap(), "-o", model.to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    model
}

#[test]
fn predictions_scores_and_pca_features_are_the_same_bytes_for_any_thread_count() {
    let dir = TempDir::new("scoring-threads");
    let model = digits_model(&dir);
    let test = repo("data/digits_test.parquet");
    for (cmd, extra) in [("predict", vec!["--scores", "--keep", "label"]), ("transform", vec!["--keep", "label"])] {
        let mut outputs = Vec::new();
        for threads in ["1", "2", "3"] {
            let out = dir.path(&format!("{cmd}-{threads}.parquet"));
            let mut args =
                vec![cmd, model.to_str().unwrap(), "-i", &test, "-o", out.to_str().unwrap(), "--threads", threads];
            args.extend(["--chunk-rows", "100"]);
            args.extend(extra.iter().copied());
            let run = sketchfit(&args);
            assert_eq!(run.status.code(), Some(0), "{cmd} --threads {threads}: {}", stderr(&run));
            // What the stream holds is said before it reads, by part, for the threads asked.
            let said = stderr(&run);
            let line = said.lines().find(|l| l.starts_with("memory: chunks ")).unwrap_or_default();
            assert!(
                line.contains(&format!("({} of 100 rows at most)", threads.parse::<usize>().unwrap() + 3))
                    && line.contains(&format!("({threads} thread(s))"))
                    && line.contains("output row group ≤ 64.0 MiB"),
                "{cmd}: {said}"
            );
            outputs.push(std::fs::read(&out).unwrap());
        }
        assert!(outputs[0] == outputs[1] && outputs[0] == outputs[2], "{cmd}: the thread count changed the output");
    }
    // The rows come out in input order: the kept labels are the file's.
    let read = |path: &std::path::Path| -> Vec<arrow_array::RecordBatch> {
        ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
            .unwrap()
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let kept: Vec<i64> = read(&dir.path("predict-2.parquet"))
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name("label").unwrap();
            // Labels are Int64 in the digits file and kept as they are read.
            c.as_primitive::<arrow_array::types::Int64Type>().values().to_vec()
        })
        .collect();
    let input: Vec<i64> = read(std::path::Path::new(&test))
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name("label").unwrap();
            // Labels are Int64 in the digits file and kept as they are read.
            c.as_primitive::<arrow_array::types::Int64Type>().values().to_vec()
        })
        .collect();
    assert_eq!(kept, input);
    // The library's scores (every core, row blocks) are the command's, and its row-major
    // decision values do not depend on the threads either.
    let m = Model::load(&model).unwrap();
    let batches = read(std::path::Path::new(&test));
    let (lib, rows) = m.score_batches(&batches, false).unwrap();
    let written: Vec<f64> = read(&dir.path("predict-1.parquet"))
        .iter()
        .flat_map(|b| {
            let names: Vec<String> =
                b.schema().fields().iter().map(|f| f.name().clone()).filter(|n| n.starts_with("score_")).collect();
            let cols: Vec<Vec<f64>> = names
                .iter()
                .map(|n| b.column_by_name(n).unwrap().as_primitive::<Float64Type>().values().to_vec())
                .collect();
            (0..b.num_rows()).flat_map(move |r| cols.iter().map(move |c| c[r]).collect::<Vec<_>>())
        })
        .collect();
    assert_eq!(lib.len(), rows * 10);
    assert_eq!(lib, written);
    let x: Vec<f32> = {
        let d = m.header.features.dim;
        let mut z = Vec::new();
        for b in &batches {
            for r in 0..b.num_rows() {
                for j in 0..d {
                    let c = b.column_by_name(&m.header.features.columns[j]).unwrap();
                    // The digits' pixels are UInt8.
                    z.push(f32::from(c.as_primitive::<arrow_array::types::UInt8Type>().value(r)));
                }
            }
        }
        z
    };
    let mut z = Vec::new();
    let one = m.scores(&x, rows, &mut z, 1);
    let three = m.scores(&x, rows, &mut z, 3);
    assert_eq!(one, three);
    // Nor on the chunk size: a row's PCA features are the same bits whichever product
    // block (and its size) the row lands in.
    let pca = |path: &std::path::Path| -> Vec<u32> {
        read(path)
            .iter()
            .flat_map(|b| {
                let list = b.column_by_name("pca").unwrap().as_fixed_size_list().clone();
                list.values().as_primitive::<arrow_array::types::Float32Type>().values().to_vec()
            })
            .map(f32::to_bits)
            .collect()
    };
    let reference = pca(&dir.path("transform-2.parquet"));
    assert_eq!(reference.len(), rows * 64);
    for chunk in ["1", "37", "1000"] {
        let out = dir.path(&format!("transform-chunk-{chunk}.parquet"));
        let args = [
            "transform",
            model.to_str().unwrap(),
            "-i",
            &test,
            "-o",
            out.to_str().unwrap(),
            "--threads",
            "2",
            "--chunk-rows",
            chunk,
        ];
        let run = sketchfit(&args);
        assert_eq!(run.status.code(), Some(0), "transform --chunk-rows {chunk}: {}", stderr(&run));
        assert!(pca(&out) == reference, "--chunk-rows {chunk} changed the PCA features");
    }
}
