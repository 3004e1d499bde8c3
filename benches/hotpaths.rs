//! The hot paths, measured as ratios within one run: the tiled-triangle Gram update
//! against a plain full GEMM of the same shape on the same backend, and the tensor
//! sketch's rows/s. Sizes: SKETCHFIT_BENCH_D (default 4096), SKETCHFIT_BENCH_ROWS
//! (default 4096).

use std::time::Instant;

use ndarray::Array2;
use sketchfit::rng::StageRng;
use sketchfit::sketch::hadamard::fwht;
use sketchfit::sketch::tensor::{PolyKernel, TensorSketch};
use sketchfit::sketch::{build_map, ChunkMap, StageSpec};
use sketchfit::stats::TriGram;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
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

    println!("## Gram update, B = {rows} rows, D = {dim} (faer GEMMs; the pass runs the same code per block)");
    let zs: Vec<f64> = z.iter().copied().collect();
    let zm = faer::MatRef::from_row_major_slice(&zs, rows, dim);
    let mut full = faer::Mat::<f64>::zeros(dim, dim);
    let gemm = |full: &mut faer::Mat<f64>, par: faer::Par| {
        faer::linalg::matmul::matmul(full.as_mut(), faer::Accum::Add, zm.transpose(), zm, 1.0, par)
    };
    let t_gemm = best_of(2, || gemm(&mut full, faer::Par::Seq));
    println!("plain full GEMM ZᵀZ (1 thread)       {:8.3} s  {:6.1} GFLOP/s", t_gemm, flops / t_gemm / 1e9);
    let t_gemm_all = best_of(2, || gemm(&mut full, faer::Par::rayon(threads)));
    println!(
        "plain full GEMM ZᵀZ ({threads} threads)      {:8.3} s  {:6.1} GFLOP/s",
        t_gemm_all,
        flops / t_gemm_all / 1e9
    );
    let mut tri = TriGram::zeros(dim);
    let t1 = best_of(2, || tri.syrk(z.view(), 1));
    println!(
        "tiled triangle (1 thread)            {:8.3} s  {:6.1} GFLOP/s-equivalent  ({:.2}× the 1-thread GEMM)",
        t1,
        flops / t1 / 1e9,
        t_gemm / t1
    );
    let tt = best_of(2, || tri.syrk(z.view(), threads));
    println!(
        "tiled triangle ({threads} threads)           {:8.3} s  {:6.1} GFLOP/s-equivalent  ({:.2}× the {threads}-thread GEMM)",
        tt,
        flops / tt / 1e9,
        t_gemm_all / tt
    );
    // The pass hands its blocks over column-major (each feature's values contiguous).
    let mut zt32 = vec![0f32; rows * dim];
    for b in (0..rows).step_by(1024) {
        let nb = 1024.min(rows - b);
        for r in 0..nb {
            for j in 0..dim {
                zt32[b * dim + j * nb + r] = zs[(b + r) * dim + j] as f32;
            }
        }
    }
    let t32 = best_of(2, || {
        for b in (0..rows).step_by(1024) {
            let nb = 1024.min(rows - b);
            tri.syrk_f32_cols(&zt32[b * dim..(b + nb) * dim], nb, threads);
        }
    });
    println!(
        "tiled triangle, f32 blocks ({threads} threads) {:8.3} s  {:6.1} GFLOP/s-equivalent  ({:.2}× the {threads}-thread f64 GEMM)",
        t32,
        flops / t32 / 1e9,
        t_gemm_all / t32
    );

    println!("\n## Tensor sketch, d = 784, {rows} rows per chunk, 1 thread");
    let d = 784;
    let x: Vec<f32> = (0..rows * d).map(|_| r.uniform() as f32).collect();
    for &dim in &[4096usize, 16384] {
        for p in [2u32, 3] {
            let ts =
                TensorSketch::draw(PolyKernel { degree: p, gamma: 1.0, offset: 1.0 }, d, dim, &mut StageRng::new(2, 0));
            let mut out = vec![0f32; rows * dim];
            let t = best_of(2, || ts.map(&x, rows, &mut out));
            println!("p = {p}, D = {dim:6}: {:10.0} rows/s", rows as f64 / t);
        }
    }

    println!("\n## Dot-product maps, d = 784, polynomial (⟨x,y⟩+1)^3, {} rows per call, 1 thread", MAP_ROWS);
    let x: Vec<f32> = (0..MAP_ROWS * d).map(|_| r.uniform() as f32 / 28.0).collect();
    let stage = |toml: &str| -> StageSpec {
        let t: toml::Table = toml.parse().expect("stage toml");
        StageSpec::from_toml(&t, "bench", "stage").expect("stage spec")
    };
    let maps = [
        ("tensor_sketch D=4096", "kind='tensor_sketch'\ndegree=3\noffset=1.0\ndim=4096"),
        ("tensor_sketch D=16384", "kind='tensor_sketch'\ndegree=3\noffset=1.0\ndim=16384"),
        ("random_maclaurin D=4096", "kind='random_maclaurin'\ndegree=3\noffset=1.0\ndim=4096"),
        ("random_maclaurin D=16384", "kind='random_maclaurin'\ndegree=3\noffset=1.0\ndim=16384"),
        ("random_maclaurin hadamard D=4096", "kind='random_maclaurin'\ndegree=3\noffset=1.0\ndim=4096\nhadamard=true"),
        (
            "random_maclaurin hadamard D=16384",
            "kind='random_maclaurin'\ndegree=3\noffset=1.0\ndim=16384\nhadamard=true",
        ),
        ("recursive_tensor_sketch D=4096", "kind='recursive_tensor_sketch'\ndegree=3\noffset=1.0\ndim=4096"),
        ("recursive_tensor_sketch D=16384", "kind='recursive_tensor_sketch'\ndegree=3\noffset=1.0\ndim=16384"),
        ("craftmaps RM 16384 -> 4096", "kind='craftmaps'\ndegree=3\noffset=1.0\ndim=4096\nup_dim=16384"),
        ("craftmaps RM 65536 -> 4096", "kind='craftmaps'\ndegree=3\noffset=1.0\ndim=4096\nup_dim=65536"),
        (
            "craftmaps RM-hadamard 65536 -> 4096",
            "kind='craftmaps'\ndegree=3\noffset=1.0\ndim=4096\nup_dim=65536\nhadamard=true",
        ),
        (
            "craftmaps TS 65536 -> 4096",
            "kind='craftmaps'\nup='tensor_sketch'\ndegree=3\noffset=1.0\ndim=4096\nup_dim=65536",
        ),
    ];
    for (name, toml) in maps {
        let m = build_map(&stage(toml), d, &mut StageRng::new(3, 0)).expect("the bench stages need no fitting");
        let mut out = vec![0f32; MAP_ROWS * m.output_dim()];
        let t = best_of(1, || m.map(&x, MAP_ROWS, &mut out));
        println!("{name:38} {:10.0} rows/s", MAP_ROWS as f64 / t);
    }

    println!(
        "\n## χ² family and random Fourier features, d = 784 (histogram rows), {} rows per call, 1 thread",
        MAP_ROWS
    );
    let hist: Vec<f32> = {
        let mut h: Vec<f32> = (0..MAP_ROWS * d).map(|_| (r.uniform() as f32).powi(4)).collect();
        for row in h.chunks_mut(d) {
            let s: f32 = row.iter().sum();
            row.iter_mut().for_each(|v| *v /= s);
        }
        h
    };
    let chi = [
        ("chi2 N=3", "kind='chi2'\nterms=3\nk=[0.001,0.0001,0.01]"),
        ("chi2 N=8", "kind='chi2'\nterms=8\nk=[0.001,0.0001,0.01,0.00001,0.003,0.0003,0.03,0.000003]"),
        ("chi2_chebyshev Q=8", "kind='chi2_chebyshev'\nterms=8"),
        ("chi2_chebyshev Q=40", "kind='chi2_chebyshev'\nterms=40"),
        ("exp_chi2 N=3 D=4096", "kind='exp_chi2'\nterms=3\nk=[0.001,0.0001,0.01]\nbeta=1.0\ndim=4096"),
        (
            "exp_chi2 N=8 D=4096",
            "kind='exp_chi2'\nterms=8\nk=[0.001,0.0001,0.01,0.00001,0.003,0.0003,0.03,0.000003]\nbeta=1.0\ndim=4096",
        ),
        ("rff gaussian D=4096", "kind='rff'\nsigma=1.0\ndim=4096"),
        ("rff gaussian D=16384", "kind='rff'\nsigma=1.0\ndim=16384"),
        ("rff laplacian cos D=4096", "kind='rff'\nkernel='laplacian'\nvariant='cos'\nsigma=1.0\ndim=4096"),
    ];
    for (name, toml) in chi {
        let m = build_map(&stage(toml), d, &mut StageRng::new(3, 0)).expect("the bench stages need no fitting");
        let mut out = vec![0f32; MAP_ROWS * m.output_dim()];
        let t = best_of(2, || m.map(&hist, MAP_ROWS, &mut out));
        println!("{name:38} {:10.0} rows/s", MAP_ROWS as f64 / t);
    }

    println!("\n## Gaussian kernel-distance sketches, m ≈ 4096, {} rows per call, 1 thread", MAP_ROWS);
    for dg in [8usize, 64, 784] {
        let xg: Vec<f32> = (0..MAP_ROWS * dg).map(|_| (r.normal() * 0.3) as f32).collect();
        let center = vec!["0.0"; dg].join(",");
        let (sizes, identity) = sketchfit::sketch::gaussian::hd_block_sizes(4096, 10, 1.5, dg);
        let blocks = sizes.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",");
        let mut specs = vec![(
            format!("gaussian_sketch_hd d={dg} s=10"),
            format!("kind='gaussian_sketch_hd'\nsigma=1.0\ntruncation=10\ndim=4096\ncenter=[{center}]\nblocks=[{blocks}]\nidentity_block={identity}"),
        )];
        if dg <= 64 {
            specs.push((
                format!("gaussian_sketch d={dg} s=8"),
                format!("kind='gaussian_sketch'\nsigma=1.0\ntruncation=8\ndim=4096\ncenter=[{center}]"),
            ));
        }
        for (name, toml) in specs {
            let m = build_map(&stage(&toml), dg, &mut StageRng::new(3, 0)).expect("the bench stages need no fitting");
            let mut out = vec![0f32; MAP_ROWS * m.output_dim()];
            let t = best_of(1, || m.map(&xg, MAP_ROWS, &mut out));
            println!("{name:38} {:10.0} rows/s", MAP_ROWS as f64 / t);
        }
    }

    println!("\n## FWHT, f32, in place, per transform, next to one read+write pass over the same buffer");
    for log in [12u32, 16, 20] {
        let n = 1usize << log;
        let mut v: Vec<f32> = (0..n).map(|_| r.uniform() as f32).collect();
        let reps = (1 << 24) / n;
        let t_fwht = best_of(3, || {
            for _ in 0..reps {
                fwht(&mut v);
                v[0] *= 0.5;
            }
        }) / reps as f64;
        let t_pass = best_of(3, || {
            for _ in 0..reps {
                v.iter_mut().for_each(|a| *a = *a * 0.999 + 1e-9);
            }
        }) / reps as f64;
        println!(
            "n = 2^{log:2}: {:9.2} µs per FWHT = {:5.2} × log2(n) passes of {:8.2} µs ({:.1} GB/s read+write)",
            t_fwht * 1e6,
            t_fwht / (t_pass * log as f64),
            t_pass * 1e6,
            8.0 * n as f64 / t_pass / 1e9
        );
    }
}

const MAP_ROWS: usize = 256;
