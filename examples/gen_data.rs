//! Writes a synthetic benchmark file: N rows × 784 f32 columns `px0..px783` and an
//! int64 `label` (10 classes), row groups of 65,536 rows (or ROW_GROUP).
//! Usage: cargo run --release --example gen_data -- ROWS OUT.parquet [ROW_GROUP] [SEED]

use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use sketchfit::rng::StageRng;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let out = args.get(2).cloned().unwrap_or_else(|| "bench.parquet".into());
    let group: usize = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(65_536);
    let d = 784;
    let mut fields: Vec<Field> = (0..d).map(|j| Field::new(format!("px{j}"), DataType::Float32, false)).collect();
    fields.push(Field::new("label", DataType::Int64, false));
    let schema = Arc::new(Schema::new(fields));
    let props = WriterProperties::builder().set_max_row_group_row_count(Some(group)).build();
    let mut w = ArrowWriter::try_new(std::fs::File::create(&out).expect("create output"), schema.clone(), Some(props))
        .expect("writer");
    let seed: u64 = args.get(4).and_then(|v| v.parse().ok()).unwrap_or(5);
    let mut r = StageRng::new(seed, 0);
    let batch = group.min(16_384);
    for start in (0..rows).step_by(batch) {
        let n = batch.min(rows - start);
        let labels: Vec<i64> = (0..n).map(|_| i64::from(r.below(10))).collect();
        let mut cols: Vec<ArrayRef> = (0..d)
            .map(|j| {
                let v: Vec<f32> =
                    labels.iter().map(|&l| ((j as i64 % 10 == l) as u8 as f32) * 0.5 + r.uniform() as f32).collect();
                Arc::new(Float32Array::from(v)) as ArrayRef
            })
            .collect();
        cols.push(Arc::new(Int64Array::from(labels)));
        w.write(&RecordBatch::try_new(schema.clone(), cols).expect("batch")).expect("write");
    }
    w.close().expect("close");
    println!("{rows} rows written to {out}");
}
