//! The reference a training pass is measured against: a plain full GEMM `ZᵀZ` of the
//! same total shape (ROWS × D, in blocks of 8,192 rows into one dense D × D), on all
//! cores, by the same GEMM library the pass uses (faer). Prints seconds and GFLOP/s.
//! Usage: cargo run --release --example gemm_ref -- ROWS D [f64|f32]

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, Par};
use sketchfit::rng::StageRng;

fn run<T: faer::traits::ComplexField + Copy>(rows: usize, dim: usize, from: fn(f64) -> T, one: T) -> f64 {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let block = 8192.min(rows);
    let mut r = StageRng::new(9, 9);
    let z = Mat::<T>::from_fn(block, dim, |_, _| from(r.uniform() - 0.5));
    let mut full = Mat::<T>::zeros(dim, dim);
    let start = std::time::Instant::now();
    let mut done = 0;
    while done < rows {
        let nb = block.min(rows - done);
        let zb = z.as_ref().subrows(0, nb);
        matmul(full.as_mut(), Accum::Add, zb.transpose(), zb, one, Par::rayon(threads));
        done += nb;
    }
    start.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(60_000);
    let dim: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(4096);
    let f32_mode = args.get(3).is_some_and(|v| v == "f32");
    let secs = if f32_mode { run::<f32>(rows, dim, |v| v as f32, 1.0) } else { run::<f64>(rows, dim, |v| v, 1.0) };
    let flops = 2.0 * rows as f64 * (dim as f64).powi(2);
    println!(
        "plain {} GEMM ZᵀZ, {rows} × {dim}: {secs:.2} s, {:.1} GFLOP/s",
        if f32_mode { "f32" } else { "f64" },
        flops / secs / 1e9
    );
}
