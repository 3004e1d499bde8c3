//! The Gram's tile products on one core, the way the pass runs them: for a block of
//! ROWS × D features laid out column-major, one GEMM per 256 × 256 tile on and below the
//! diagonal (f32 or f64, each tile a sequential faer call). Prints seconds and GFLOP/s,
//! to put beside `scripts/blas_ref.py tiles` (the same tile products on OpenBLAS).
//! Usage: cargo run --release --example tile_ref -- ROWS D [f64|f32]

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use sketchfit::rng::StageRng;
use sketchfit::stats::TILE;

fn run<T: faer::traits::ComplexField + Copy>(rows: usize, dim: usize, from: fn(f64) -> T, one: T) -> (f64, f64) {
    let mut r = StageRng::new(9, 9);
    let zt: Vec<T> = (0..rows * dim).map(|_| from(r.uniform() - 0.5)).collect();
    let zm = MatRef::from_column_major_slice(&zt, rows, dim);
    let mut prod = vec![from(0.0); TILE * TILE];
    let nt = dim / TILE;
    let start = std::time::Instant::now();
    let mut flops = 0.0;
    for i in 0..nt {
        for j in 0..=i {
            let a = zm.subcols(i * TILE, TILE).transpose();
            let b = zm.subcols(j * TILE, TILE);
            let out = MatMut::from_row_major_slice_mut(&mut prod, TILE, TILE);
            matmul(out, Accum::Replace, a, b, one, Par::Seq);
            flops += 2.0 * (TILE * TILE * rows) as f64;
        }
    }
    (start.elapsed().as_secs_f64(), flops)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(2048);
    let dim: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(4096).max(TILE) / TILE * TILE;
    let f32_mode = args.get(3).is_some_and(|v| v == "f32");
    let (secs, flops) =
        if f32_mode { run::<f32>(rows, dim, |v| v as f32, 1.0) } else { run::<f64>(rows, dim, |v| v, 1.0) };
    println!(
        "faer tile products, {}, one core, {rows} rows × D = {dim} (tiles of {TILE}): {secs:.2} s, {:.1} GFLOP/s",
        if f32_mode { "f32" } else { "f64" },
        flops / secs / 1e9
    );
}
