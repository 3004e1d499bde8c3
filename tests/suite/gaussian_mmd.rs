//! Gaussian kernel-distance sketches, the two-sample test and group embeddings
//! (math.md §9): unbiasedness for the truncated kernels over seeds, error against
//! exp(−‖x−y‖²) shrinking with (s, m), the streamed statistic against the sketch Gram,
//! calibration under the null and power under a shift, LSH collision rates, and the
//! `mmd` / `embed` commands.

use std::sync::Arc;

use crate::common::*;
use arrow_array::{ArrayRef, Float64Array, StringArray};
use sketchfit::rng::StageRng;
use sketchfit::sketch::gaussian::{phi, GaussianSketch, GaussianSketchHd, HdBlock, Preprocess};
use sketchfit::sketch::recursive::RecursiveTensorSketch;
use sketchfit::sketch::ChunkMap;
use sketchfit::twosample::{
    lsh_collision_probability, mmd2_unbiased, permutation_test, permutations, Lsh, SketchSums, Statistic,
};

fn points(n: usize, d: usize, shift: f64, seed: u64) -> Vec<f32> {
    let mut r = StageRng::new(seed, 3);
    (0..n * d).map(|i| (r.normal() * 0.5 + if i % d == 0 { shift } else { 0.0 }) as f32).collect()
}

fn gram(z: &[f32], n: usize, m: usize) -> Vec<f64> {
    let mut g = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            g[i * n + j] = (0..m).map(|k| f64::from(z[i * m + k]) * f64::from(z[j * m + k])).sum();
        }
    }
    g
}

fn k_s(x: &[f32], y: &[f32], s: usize) -> f64 {
    x.iter()
        .zip(y)
        .map(|(&a, &b)| {
            let (mut p, mut q) = (vec![0.0; s], vec![0.0; s]);
            phi(f64::from(a), &mut p);
            phi(f64::from(b), &mut q);
            p.iter().zip(&q).map(|(u, v)| u * v).sum::<f64>()
        })
        .product()
}

fn k_hd(x: &[f32], y: &[f32], s: usize) -> f64 {
    let n2 = |v: &[f32]| v.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>();
    let dot: f64 = x.iter().zip(y).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
    let mut term = 1.0;
    let mut sum = 0.0;
    for j in 0..s {
        if j > 0 {
            term *= 2.0 * dot / j as f64;
        }
        sum += term;
    }
    (-n2(x) - n2(y)).exp() * sum
}

fn gs(d: usize, s: usize, m: usize, seed: u64) -> GaussianSketch {
    GaussianSketch {
        pre: Preprocess { center: vec![0.0; d], scale: 1.0 },
        s,
        tree: RecursiveTensorSketch::draw(s, d, m, &mut StageRng::new(seed, 0)),
    }
}

fn hd(d: usize, sizes: &[usize], seed: u64) -> GaussianSketchHd {
    let mut r = StageRng::new(seed, 1);
    GaussianSketchHd {
        pre: Preprocess { center: vec![0.0; d], scale: 1.0 },
        blocks: sizes
            .iter()
            .enumerate()
            .map(|(j, &m)| HdBlock::Tree(RecursiveTensorSketch::draw(d, j + 1, m, &mut r)))
            .collect(),
    }
}

#[test]
fn mean_sketch_gram_equals_the_truncated_kernels() {
    // 4 points: 10 distinct Gram entries; |z| < 5.5 on each keeps the family-wise
    // false-alarm rate below 1e-6 (math.md §9).
    let (n, d, seeds) = (4usize, 3usize, 400u64);
    let x = points(n, d, 0.0, 1);
    for (name, s) in [("GaussianSketch", 4usize), ("GaussianSketchHD", 4)] {
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); n * n];
        for seed in 0..seeds {
            let map: Box<dyn ChunkMap> = if name == "GaussianSketch" {
                Box::new(gs(d, s, 32, seed))
            } else {
                Box::new(hd(d, &[16, 32, 32], seed))
            };
            let m = map.output_dim();
            let mut z = vec![0f32; n * m];
            map.map(&x, n, &mut z);
            for (k, v) in gram(&z, n, m).into_iter().enumerate() {
                samples[k].push(v);
            }
        }
        for i in 0..n {
            for j in i..n {
                let v = &samples[i * n + j];
                let mean = v.iter().sum::<f64>() / seeds as f64;
                let sd = (v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (seeds - 1) as f64).sqrt();
                let (xi, xj) = (&x[i * d..(i + 1) * d], &x[j * d..(j + 1) * d]);
                let want = if name == "GaussianSketch" { k_s(xi, xj, s) } else { k_hd(xi, xj, s) };
                let z = (mean - want).abs() / (sd / (seeds as f64).sqrt()).max(1e-12);
                assert!(z < 5.5, "{name} entry ({i},{j}): mean {mean} vs {want}, z = {z}");
            }
        }
    }
}

#[test]
fn error_to_the_gaussian_kernel_shrinks_as_s_and_m_grow() {
    let (n, d) = (20usize, 3usize);
    let x = points(n, d, 0.0, 2);
    let exact =
        |i: usize, j: usize| (-(0..d).map(|k| f64::from(x[i * d + k] - x[j * d + k]).powi(2)).sum::<f64>()).exp();
    let mut errs = Vec::new();
    for (s, m) in [(2usize, 64usize), (4, 256), (8, 1024), (12, 4096)] {
        let mut total = 0.0;
        for seed in 0..3 {
            let g = gs(d, s, m, 100 + seed);
            let mut z = vec![0f32; n * m];
            g.map(&x, n, &mut z);
            let gr = gram(&z, n, m);
            total += (0..n * n).map(|k| (gr[k] - exact(k / n, k % n)).abs()).fold(0.0, f64::max);
        }
        errs.push(total / 3.0);
    }
    for w in errs.windows(2) {
        assert!(w[1] < w[0], "{errs:?}");
    }
    assert!(errs[3] < 0.02, "(12, 4096): max error {}", errs[3]);
}

#[test]
fn streamed_unbiased_statistic_equals_the_sketch_gram_value() {
    let (d, m) = (2usize, 64usize);
    let g = gs(d, 6, m, 5);
    let (p, q) = (points(30, d, 0.0, 6), points(25, d, 0.7, 7));
    let (mut zp, mut zq) = (vec![0f32; 30 * m], vec![0f32; 25 * m]);
    g.map(&p, 30, &mut zp);
    g.map(&q, 25, &mut zq);
    let (mut sp, mut sq) = (SketchSums::new(m), SketchSums::new(m));
    sp.add(&zp, 30);
    sq.add(&zq, 25);
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum::<f64>();
    let (mut kpp, mut kqq, mut kpq) = (0.0, 0.0, 0.0);
    for i in 0..30 {
        for j in 0..30 {
            if i != j {
                kpp += dot(&zp[i * m..(i + 1) * m], &zp[j * m..(j + 1) * m]);
            }
        }
        for j in 0..25 {
            kpq += dot(&zp[i * m..(i + 1) * m], &zq[j * m..(j + 1) * m]);
        }
    }
    for i in 0..25 {
        for j in 0..25 {
            if i != j {
                kqq += dot(&zq[i * m..(i + 1) * m], &zq[j * m..(j + 1) * m]);
            }
        }
    }
    let want = kpp / (30.0 * 29.0) + kqq / (25.0 * 24.0) - 2.0 * kpq / (30.0 * 25.0);
    let got = mmd2_unbiased(&sp, &sq);
    assert!((got - want).abs() <= 1e-9 * want.abs().max(1e-12), "{got} vs {want}");
}

fn reject(shift: f64, n: usize, seed: u64, alpha: f64) -> bool {
    let (d, m) = (2usize, 48usize);
    let g = gs(d, 6, m, 10_000 + seed);
    let mut pooled = vec![0f32; 2 * n * m];
    g.map(&points(n, d, 0.0, 2 * seed + 1), n, &mut pooled[..n * m]);
    g.map(&points(n, d, shift, 2 * seed + 2), n, &mut pooled[n * m..]);
    let perms = permutations(2 * n, 99, seed);
    let (_, _, p) = permutation_test(&pooled, m, n, &perms, Statistic::V);
    p <= alpha
}

#[test]
fn the_permutation_test_is_calibrated_under_the_null() {
    // α = 0.05 over 2000 replicates: the rejection rate has SD 0.0049, so the band
    // [0.02, 0.08] is ±6 SD (a correct test fails it with probability < 1e-8).
    let reps = 2000;
    let rejections = (0..reps).filter(|&s| reject(0.0, 30, s, 0.05)).count();
    let rate = rejections as f64 / reps as f64;
    assert!((0.02..=0.08).contains(&rate), "null rejection rate {rate}");
}

#[test]
fn the_test_has_power_against_a_shift() {
    // A shift of 0.8 (1.6 SD of the coordinates) with 40 rows per set.
    let reps = 200;
    let rejections = (0..reps).filter(|&s| reject(0.8, 40, 50_000 + s, 0.05)).count();
    assert!(rejections as f64 >= 0.9 * reps as f64, "power {}", rejections as f64 / reps as f64);
}

#[test]
fn lsh_collision_frequency_matches_the_formula() {
    let m = 8;
    let v1 = vec![0.0; m];
    let mut v2 = vec![0.0; m];
    v2[0] = 0.6;
    v2[3] = 0.8; // distance 1
    for w in [0.5f64, 1.0, 3.0] {
        let trials = 20_000u64;
        let hits = (0..trials).filter(|&s| {
            let l = Lsh::draw(1, m, w, s);
            l.hashes(&v1) == l.hashes(&v2)
        });
        let freq = hits.count() as f64 / trials as f64;
        let p = lsh_collision_probability(1.0, w);
        let se = (p * (1.0 - p) / trials as f64).sqrt();
        assert!((freq - p).abs() <= 5.0 * se, "w = {w}: frequency {freq} vs formula {p}");
    }
}

fn grouped(dir: &TempDir) -> String {
    // 12 groups of 300 rows: g0..g5 from N(0, I), g6..g11 shifted by 1.5 in x0.
    let mut r = StageRng::new(9, 9);
    let (mut g, mut x0, mut x1, mut x2) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for k in 0..12 {
        for _ in 0..300 {
            g.push(format!("g{k}"));
            x0.push(r.normal() + if k >= 6 { 1.5 } else { 0.0 });
            x1.push(r.normal());
            x2.push(r.normal());
        }
    }
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("group", Arc::new(StringArray::from(g))),
        ("x0", Arc::new(Float64Array::from(x0))),
        ("x1", Arc::new(Float64Array::from(x1))),
        ("x2", Arc::new(Float64Array::from(x2))),
    ];
    let p = dir.path("groups.parquet");
    write_parquet(&p, cols, 1000);
    p.to_string_lossy().into_owned()
}

#[test]
fn embed_puts_groups_of_one_distribution_nearer_and_in_shared_buckets() {
    let dir = TempDir::new("embed");
    let input = grouped(&dir);
    let out = dir.path("emb.parquet");
    let o = sketchfit(&[
        "embed",
        "-i",
        &input,
        "--group-by",
        "group",
        "--features",
        "x*",
        "--dim",
        "512",
        "-o",
        out.to_str().unwrap(),
        "--lsh",
        "2",
        "--query",
        "g0",
        "--top",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let near: Vec<&str> = text.lines().skip(1).take(5).map(|l| l.split_whitespace().next().unwrap()).collect();
    for g in &near {
        let k: usize = g[1..].parse().unwrap();
        assert!(k < 6, "g0's nearest groups must share its distribution: {near:?}");
    }
    // Buckets: pairs within a distribution share a bucket more often than across.
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&out).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let mut buckets = Vec::new();
    for b in r {
        let b = b.unwrap();
        let col = b.column_by_name("bucket").unwrap();
        buckets.extend(
            arrow_array::cast::AsArray::as_primitive::<arrow_array::types::UInt64Type>(col.as_ref())
                .values()
                .iter()
                .copied(),
        );
    }
    assert_eq!(buckets.len(), 12);
    let (mut within, mut across) = ((0, 0), (0, 0));
    for i in 0..12 {
        for j in i + 1..12 {
            let same = (i < 6) == (j < 6);
            let hit = usize::from(buckets[i] == buckets[j]);
            if same {
                within = (within.0 + hit, within.1 + 1);
            } else {
                across = (across.0 + hit, across.1 + 1);
            }
        }
    }
    let (fw, fa) = (within.0 as f64 / within.1 as f64, across.0 as f64 / across.1 as f64);
    assert!(fw > fa, "within-distribution bucket sharing {fw} vs across {fa}");
}

#[test]
fn embed_and_mmd_errors_exit_2_and_leave_nothing() {
    let dir = TempDir::new("embed-errors");
    let input = grouped(&dir);
    let out = dir.path("e.parquet");
    for (args, needle) in [
        (vec!["--group-by", "nope"], "column 'nope'"),
        (vec!["--group-by", "group", "--min-rows", "500"], "fewer than --min-rows 500"),
        (vec!["--group-by", "group", "--sigma=-1"], "must be a positive number"),
        (vec!["--group-by", "group", "--query", "zz"], "no group 'zz'"),
    ] {
        let mut a = vec!["embed", "-i", input.as_str(), "--features", "x*", "--dim", "64", "-o", out.to_str().unwrap()];
        a.extend(args);
        let o = sketchfit(&a);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{a:?}: {}", stderr(&o));
        assert!(!out.exists(), "{a:?} left output");
    }
    let o = sketchfit(&["mmd", "--a", &input, "--b", dir.path("none.parquet").to_str().unwrap(), "--features", "x*"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn mmd_on_the_digits_separates_classes_and_matches_the_exact_distance() {
    let same = sketchfit(&[
        "mmd",
        "--a",
        &repo("data/digits_train.parquet"),
        "--b",
        &repo("data/digits_test.parquet"),
        "--features",
        "px*",
        "--exact",
        "--json",
        "--permutations",
        "199",
    ]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    let v: serde_json::Value = serde_json::from_str(&stdout(&same)).unwrap();
    assert!(v["p_value"].as_f64().unwrap() > 0.01, "train and test come from one distribution: {v}");
    let ratio = v["kernel_distance_sq"].as_f64().unwrap() / v["exact_distance_sq"].as_f64().unwrap();
    assert!((ratio - 1.0).abs() < 0.05, "sketched/exact {ratio}");
    let diff = sketchfit(&[
        "mmd",
        "--a",
        &repo("data/digits_test_0to4.parquet"),
        "--b",
        &repo("data/digits_test_5to9.parquet"),
        "--features",
        "px*",
        "--exact",
        "--json",
        "--permutations",
        "199",
    ]);
    assert_eq!(diff.status.code(), Some(0), "{}", stderr(&diff));
    let v: serde_json::Value = serde_json::from_str(&stdout(&diff)).unwrap();
    assert!(v["p_value"].as_f64().unwrap() <= 0.01, "{v}");
    let ratio = v["kernel_distance_sq"].as_f64().unwrap() / v["exact_distance_sq"].as_f64().unwrap();
    let sd = v["relative_sd_estimate"].as_f64().unwrap();
    assert!((ratio - 1.0).abs() < 5.0 * sd.max(1e-3), "sketched/exact {ratio}, estimated relative SD {sd}");
}

#[test]
fn kernel_error_sweeps_the_hd_sketch_at_the_dimensions_it_names() {
    let dir = TempDir::new("ke-hd");
    let p = dir.path("p.toml");
    let body = format!(
        "[data]\ntrain = [\"{}\"]\nfeatures = [\"px*\"]\nlabel = \"label\"\n[[stages]]\nkind = \"gaussian_sketch_hd\"\ndim = 512\n",
        repo("data/digits_train.parquet")
    );
    std::fs::write(&p, body).unwrap();
    let out =
        sketchfit(&["kernel-error", p.to_str().unwrap(), "--plot", dir.path("k.svg").to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let dims: Vec<u64> = v["sweep"].as_array().unwrap().iter().map(|s| s["dim"].as_u64().unwrap()).collect();
    assert!(dims.len() >= 3, "{dims:?}");
    // Blocks are refitted per point: the dimension grows along the sweep, never stuck at 1.
    assert!(dims.windows(2).all(|w| w[0] < w[1]) && dims[0] > 1, "sweep dimensions {dims:?}");
}
