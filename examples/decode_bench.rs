//! Rows/s of Parquet decode alone, of decode + the row-major chunk copy, and of
//! decode + copy + tensor sketch (D = 4096), on one file, single reader thread.
//! Usage: cargo run --release --example decode_bench -- FILE.parquet

use std::path::PathBuf;
use std::time::Instant;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use sketchfit::sketch::{FeaturePipeline, Normalize, StageSpec, TensorSketchSpec};
use sketchfit::source::{ColumnSpec, Dataset, FeatureColumns};

fn main() {
    let path = PathBuf::from(std::env::args().nth(1).expect("FILE.parquet"));
    let t = Instant::now();
    let mut rows = 0usize;
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).expect("open"))
        .expect("parquet")
        .with_batch_size(8192)
        .build()
        .expect("reader");
    for b in reader {
        rows += b.expect("batch").num_rows();
    }
    let t_decode = t.elapsed().as_secs_f64();
    println!("decode only           {:10.0} rows/s", rows as f64 / t_decode);

    let spec = ColumnSpec {
        features: FeatureColumns::Columns(vec!["px*".into()]),
        label: Some("label".into()),
        targets: vec![],
        keep: vec![],
        null_labels_unlabeled: false,
    };
    let ds = Dataset::open(&sketchfit::Session::new(), &[path], spec).expect("dataset");
    let t = Instant::now();
    for u in ds.units() {
        ds.read_unit(u, 8192, &mut |_| Ok(())).expect("read");
    }
    let t_chunks = t.elapsed().as_secs_f64();
    println!(
        "decode + row-major    {:10.0} rows/s  (copy costs {:.2}× the decode)",
        rows as f64 / t_chunks,
        (t_chunks - t_decode) / t_decode
    );

    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pipe = FeaturePipeline::build(
        &[StageSpec::TensorSketch(TensorSketchSpec {
            degree: 2,
            gamma: 1.0,
            offset: 1.0,
            dim: 4096,
            normalize: Normalize::L2,
            weight: 1.0,
            ..Default::default()
        })],
        ds.dim(),
        1,
    )
    .expect("a tensor sketch needs no fitting");
    let mut z = Vec::new();
    let t = Instant::now();
    for u in ds.units() {
        ds.read_unit(u, 8192, &mut |ch| {
            z.resize(ch.rows * 4096, 0.0);
            pipe.map_chunk(&ch.x, ch.rows, &mut z, threads);
            Ok(())
        })
        .expect("read");
    }
    println!(
        "decode + TS (D=4096)  {:10.0} rows/s  ({threads} mapping threads)",
        rows as f64 / t.elapsed().as_secs_f64()
    );
}
