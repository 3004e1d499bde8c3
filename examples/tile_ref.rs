//! The Gram's tile products on one core, the way the pass runs them: for a block of
//! ROWS × D features laid out column-major, one GEMM per 256 × 256 tile on and below the
//! diagonal (f32 or f64, each tile a sequential faer call). Prints seconds and GFLOP/s,
//! to put beside `scripts/blas_ref.py tiles` (the same tile products on OpenBLAS).
//!
//! Two other layouts, to measure what the pass's layout costs: `panels` stores the block
//! as 256-feature panels, each ROWS × 256 row-major (the left operand then has unit row
//! stride, as the GEMM's microkernel reads it), and `strips W` multiplies each tile row's
//! left operand by W columns at once (so it is packed once per W columns, not per tile).
//! Usage: cargo run --release --example tile_ref -- ROWS D [f64|f32] [tiles|panels|strips W]

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use sketchfit::rng::StageRng;
use sketchfit::stats::TILE;

#[derive(Clone, Copy)]
enum Layout {
    Tiles,
    Panels,
    Strips(usize),
}

fn run<T: faer::traits::ComplexField + Copy>(
    rows: usize,
    dim: usize,
    layout: Layout,
    from: fn(f64) -> T,
) -> (f64, f64) {
    let mut r = StageRng::new(9, 9);
    let data: Vec<T> = (0..rows * dim).map(|_| from(r.uniform() - 0.5)).collect();
    // Columns `c0..c0 + w` of the block: a view of the column-major block, or (panels)
    // of the one row-major panel that holds them.
    let cols = |c0: usize, w: usize| match layout {
        Layout::Panels => {
            let p = c0 / TILE;
            MatRef::from_row_major_slice(&data[p * rows * TILE..(p + 1) * rows * TILE], rows, TILE)
                .subcols(c0 % TILE, w)
        }
        _ => MatRef::from_column_major_slice(&data, rows, dim).subcols(c0, w),
    };
    let width = match layout {
        Layout::Strips(w) => w,
        _ => TILE,
    };
    let mut prod = vec![from(0.0); TILE * width];
    let start = std::time::Instant::now();
    let mut flops = 0.0;
    for i in 0..dim / TILE {
        let a = cols(i * TILE, TILE).transpose();
        let end = (i + 1) * TILE;
        for c0 in (0..end).step_by(width) {
            let w = width.min(end - c0);
            let out = MatMut::from_row_major_slice_mut(&mut prod[..TILE * w], TILE, w);
            matmul(out, Accum::Replace, a, cols(c0, w), from(1.0), Par::Seq);
            flops += 2.0 * (TILE * w * rows) as f64;
        }
    }
    (start.elapsed().as_secs_f64(), flops)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(2048);
    let dim: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(4096).max(TILE) / TILE * TILE;
    let f32_mode = args.get(3).is_some_and(|v| v == "f32");
    let layout = match args.get(4).map(String::as_str) {
        Some("panels") => Layout::Panels,
        Some("strips") => {
            let w: usize = args.get(5).and_then(|v| v.parse().ok()).unwrap_or(4 * TILE);
            Layout::Strips(w.max(TILE) / TILE * TILE)
        }
        _ => Layout::Tiles,
    };
    let (secs, flops) =
        if f32_mode { run::<f32>(rows, dim, layout, |v| v as f32) } else { run::<f64>(rows, dim, layout, |v| v) };
    let name = match layout {
        Layout::Tiles => format!("tiles of {TILE}"),
        Layout::Panels => format!("row-major panels of {TILE}"),
        Layout::Strips(w) => format!("tile rows in strips of {w}"),
    };
    println!(
        "faer tile products, {}, one core, {rows} rows × D = {dim} ({name}): {secs:.2} s, {:.1} GFLOP/s",
        if f32_mode { "f32" } else { "f64" },
        flops / secs / 1e9
    );
}
