//! The hot paths, measured as ratios within one run: the tiled-triangle Gram update
//! against a plain full GEMM of the same shape on the same backend, and the tensor
//! sketch's rows/s. Sizes: SKETCHFIT_BENCH_D (default 4096), SKETCHFIT_BENCH_ROWS
//! (default 4096).

use std::time::Instant;

use ndarray::Array2;
use sketchfit::rng::StageRng;
use sketchfit::sketch::tensor::{PolyKernel, TensorSketch};
use sketchfit::sketch::FeatureMap;
use sketchfit::stats::TriGram;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn best_of<F: FnMut()>(reps: usize, mut f: F) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let dim = env("SKETCHFIT_BENCH_D", 4096);
    let rows = env("SKETCHFIT_BENCH_ROWS", 4096);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut r = StageRng::new(1, 1);
    let z = Array2::from_shape_fn((rows, dim), |_| r.uniform() - 0.5);
    let flops = 2.0 * rows as f64 * (dim as f64).powi(2);

    println!("## Gram update, f64, B = {rows} rows, D = {dim}");
    let mut full = Array2::<f64>::zeros((dim, dim));
    let t_gemm = best_of(2, || {
        ndarray::linalg::general_mat_mul(1.0, &z.t(), &z, 1.0, &mut full)
    });
    println!(
        "full GEMM ZᵀZ (1 thread)        {:8.3} s  {:6.1} GFLOP/s",
        t_gemm,
        flops / t_gemm / 1e9
    );
    let mut tri = TriGram::zeros(dim);
    let t1 = best_of(2, || tri.syrk(z.view(), 1));
    println!(
        "tiled triangle (1 thread)       {:8.3} s  {:6.1} GFLOP/s-equivalent  ({:.2}× the GEMM's speed)",
        t1,
        flops / t1 / 1e9,
        t_gemm / t1
    );
    let tt = best_of(2, || tri.syrk(z.view(), threads));
    println!(
        "tiled triangle ({threads} threads)      {:8.3} s  {:6.1} GFLOP/s-equivalent  ({:.2}× the 1-thread GEMM)",
        tt,
        flops / tt / 1e9,
        t_gemm / tt
    );

    println!("\n## Tensor sketch, d = 784, {rows} rows per chunk, 1 thread");
    let d = 784;
    let x: Vec<f32> = (0..rows * d).map(|_| r.uniform() as f32).collect();
    for &dim in &[4096usize, 16384] {
        for p in [2u32, 3] {
            let ts = TensorSketch::draw(
                PolyKernel {
                    degree: p,
                    gamma: 1.0,
                    offset: 1.0,
                },
                d,
                dim,
                &mut StageRng::new(2, 0),
            );
            let mut out = vec![0f32; rows * dim];
            let t = best_of(2, || ts.map(&x, rows, &mut out));
            println!("p = {p}, D = {dim:6}: {:10.0} rows/s", rows as f64 / t);
        }
    }
}
