//! The Nyström family (src/sketch/nystrom.rs states its math): exact on its landmarks up to the jitter, exact
//! everywhere for a finite-rank kernel once the landmarks span its features, an error
//! that falls as landmarks are added, the same features on any thread count, its arrays
//! through a model file and a feature map's JSON, and the runs that cannot hold it
//! refused by name.

use sketchfit::rng::StageRng;
use sketchfit::sketch::{FeaturePipeline, Kernel, NystromKernel, NystromSpec, StageSpec, TensorSketchSpec};

use crate::common::{sketchfit, stderr, TempDir};

fn rows(seed: u64, n: usize, d: usize) -> Vec<f32> {
    let mut r = StageRng::new(seed, 5);
    (0..n * d).map(|_| r.normal() as f32).collect()
}

fn spec(kernel: NystromKernel, degree: u32, dim: usize, jitter: f64) -> StageSpec {
    NystromSpec { kernel, degree, offset: 1.0, dim, jitter, ..NystromSpec::default() }.into()
}

/// The stage fitted on `sample` and built, with the kernel it approximates.
fn fitted(s: &StageSpec, sample: &[f32], d: usize) -> (FeaturePipeline, Kernel) {
    let f = s.fit(sample, d, 3, 0).unwrap();
    let k = f.kernel().unwrap();
    (FeaturePipeline::build(&[f], d, 3).unwrap(), k)
}

fn features(p: &FeaturePipeline, x: &[f32], threads: usize) -> Vec<f32> {
    let n = x.len() / p.input_dim();
    let mut z = vec![0f32; n * p.output_dim()];
    p.map_chunk(x, n, &mut z, threads);
    z
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum()
}

/// `max |z(x)ᵀz(y) − k(x, y)|` over the pairs of `x`'s rows (the diagonal included),
/// and the mean `k(x, x)`.
fn max_error(p: &FeaturePipeline, k: &Kernel, x: &[f32], d: usize) -> (f64, f64) {
    let z = features(p, x, 1);
    let (n, m) = (x.len() / d, p.output_dim());
    let mut worst: f64 = 0.0;
    let mut diag = 0.0;
    for i in 0..n {
        diag += k.eval(&x[i * d..(i + 1) * d], &x[i * d..(i + 1) * d]) / n as f64;
        for j in 0..=i {
            let exact = k.eval(&x[i * d..(i + 1) * d], &x[j * d..(j + 1) * d]);
            worst = worst.max((dot(&z[i * m..(i + 1) * m], &z[j * m..(j + 1) * m]) - exact).abs());
        }
    }
    (worst, diag)
}

#[test]
fn on_its_landmarks_the_map_is_the_kernel_up_to_the_jitter() {
    // With M = n every sample row is a landmark: z_iᵀz_j = (K(K+εI)⁻¹K)_ij, which
    // differs from K_ij by ε(K(K+εI)⁻¹)_ij, at most ε in size. ε = 10⁻³ of the mean
    // diagonal here, so the f32 solve's rounding (cond(L)·2⁻²⁴ ≲ 10⁻⁴ relative) stays
    // below it; the bound allows ε plus 10⁻⁵ of the diagonal for it. 300 landmarks are
    // two tiles of the factor, the second partial.
    let (n, d) = (300, 6);
    let x = rows(1, n, d);
    for (kernel, degree) in [(NystromKernel::Polynomial, 3), (NystromKernel::Gaussian, 2)] {
        let jitter = 1e-3;
        let (p, k) = fitted(&spec(kernel, degree, n, jitter), &x, d);
        let (worst, diag) = max_error(&p, &k, &x, d);
        assert!(worst <= (jitter + 1e-5) * diag, "{kernel:?}: {worst} > ε = {}", jitter * diag);
    }
}

#[test]
fn a_finite_rank_kernel_is_exact_off_the_landmarks_once_they_span_it() {
    // (⟨x,y⟩ + 1)² on d = 4 has rank C(6, 2) = 15: 60 landmarks in general position span
    // its features, so rows never seen are mapped exactly too (to the jitter's 10⁻⁶ over
    // the features' smallest landmark eigenvalue, and the f32 rounding); with 8
    // landmarks they cannot be.
    let d = 4;
    let (sample, unseen) = (rows(2, 60, d), rows(3, 50, d));
    let (p, k) = fitted(&spec(NystromKernel::Polynomial, 2, 60, 1e-6), &sample, d);
    let (worst, diag) = max_error(&p, &k, &unseen, d);
    assert!(worst < 1e-4 * diag, "{worst} vs diagonal {diag}");
    let (p8, _) = fitted(&spec(NystromKernel::Polynomial, 2, 8, 1e-6), &sample, d);
    let (worst8, _) = max_error(&p8, &k, &unseen, d);
    assert!(worst8 > 100.0 * worst.max(1e-6 * diag), "8 landmarks: {worst8}");
}

#[test]
fn the_error_off_the_landmarks_falls_as_landmarks_are_added() {
    // The Gaussian kernel has full rank: the mean error on unseen pairs is the part of
    // k(x, ·) off the landmarks' span, which shrinks as the span grows (not sampling
    // noise: each landmark set contains the previous one's expected span).
    let d = 5;
    let (sample, unseen) = (rows(4, 800, d), rows(5, 60, d));
    let mut last = f64::INFINITY;
    for m in [25, 100, 400] {
        let (p, k) = fitted(&spec(NystromKernel::Gaussian, 2, m, 1e-6), &sample, d);
        let z = features(&p, &unseen, 1);
        let n = unseen.len() / d;
        let mut err = 0.0;
        for i in 0..n {
            for j in 0..n {
                let exact = k.eval(&unseen[i * d..(i + 1) * d], &unseen[j * d..(j + 1) * d]);
                err += (dot(&z[i * m..(i + 1) * m], &z[j * m..(j + 1) * m]) - exact).abs() / (n * n) as f64;
            }
        }
        assert!(err < 0.3 * last, "M = {m}: mean error {err}, at the previous M {last}");
        last = err;
    }
}

#[test]
fn the_mean_by_the_kernel_rows_is_the_mean_of_the_features() {
    // The accumulator shift takes L⁻¹ times the mean kernel row instead of mapping the
    // sample: the same vector up to f32 rounding of the features (with weight 2, the
    // weighted one; beside a tensor sketch, whose part is the mean of its features, on
    // any thread count).
    let d = 7;
    let x = rows(8, 900, d);
    for weight in [1.0, 2.0] {
        let s: StageSpec = NystromSpec { degree: 3, offset: 1.0, dim: 150, weight, ..NystromSpec::default() }.into();
        let ts: StageSpec = TensorSketchSpec { degree: 2, dim: 64, weight: 0.5, ..TensorSketchSpec::default() }.into();
        let fitted: Vec<StageSpec> = [s, ts].iter().map(|s| s.fit(&x[..600 * d], d, 3, 0).unwrap()).collect();
        let p = FeaturePipeline::build(&fitted, d, 3).unwrap();
        let z = features(&p, &x, 1);
        let m = p.output_dim();
        let mut mean = vec![0.0f64; m];
        for row in z.chunks_exact(m) {
            mean.iter_mut().zip(row).for_each(|(a, &v)| *a += f64::from(v) / 900.0);
        }
        let fast = p.mean_features(&x, 1);
        assert_eq!(fast, p.mean_features(&x, 3), "weight {weight}: the thread count changed the mean");
        let scale = mean.iter().map(|v| v.abs()).fold(0.0, f64::max);
        let worst = mean.iter().zip(&fast).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-4 * scale, "weight {weight}: {worst} against {scale}");
    }
}

#[test]
fn features_do_not_depend_on_the_thread_count() {
    let d = 8;
    let x = rows(6, 3000, d);
    let (p, _) = fitted(&spec(NystromKernel::Polynomial, 3, 200, 1e-6), &x[..800 * d], d);
    let one = features(&p, &x, 1);
    assert_eq!(one, features(&p, &x, 2));
    assert_eq!(one, features(&p, &x, 7));
    assert!(one.iter().all(|v| v.is_finite()));
}

#[test]
fn a_trained_model_scores_as_trained_and_parts_are_refused_by_name() {
    let dir = TempDir::new("nystrom");
    let p = dir.path("p.toml");
    std::fs::write(
        &p,
        format!(
            "task = \"classification\"\n[data]\ntrain = [\"{}\"]\ntest = [\"{}\"]\nfeatures = [\"px*\"]\nlabel = \"label\"\n\
             [[stages]]\nkind = \"nystrom\"\ndegree = 3\noffset = 1.0\ndim = 400\nnormalize = \"l2\"\n[ridge]\nlambda = 0.01\n",
            crate::common::repo("data/digits_train.parquet"),
            crate::common::repo("data/digits_test.parquet")
        ),
    )
    .unwrap();
    let (p, model) = (p.to_str().unwrap().to_string(), dir.path("m.sfm"));
    let out = sketchfit(&["train", &p, "-o", model.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = crate::common::stdout(&out) + &stderr(&out);
    let acc: f64 = said
        .lines()
        .find_map(|l| l.strip_prefix("test accuracy: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(acc > 0.97, "{acc}");
    // The model's landmarks and factor come back from the file: the same accuracy.
    let ev =
        sketchfit(&["evaluate", model.to_str().unwrap(), "--input", &crate::common::repo("data/digits_test.parquet")]);
    assert_eq!(ev.status.code(), Some(0), "{}", stderr(&ev));
    let shown = crate::common::stdout(&ev) + &stderr(&ev);
    assert!(shown.contains(&format!("{acc:.4}")), "{acc} not in {shown}");
    // A part holds no landmarks: refused before its pass, naming the stage.
    let part = dir.path("s0.sfs");
    let out = sketchfit(&["accumulate", &p, "--shard", "0/2", "-o", part.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nystrom stage's landmarks") && !part.exists(), "{}", stderr(&out));
    // The build's f64 factor counts against the memory limit before it is made: at
    // M = 1,000 its tiles need 8.3 MB while the stage keeps 2.8 MB, and 7 MiB is refused.
    let out = sketchfit(&[
        "train",
        &p,
        "-o",
        dir.path("y.sfm").to_str().unwrap(),
        "--set",
        "stages.0.dim=1000",
        "--set",
        "run.memory_limit_mib=7",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("while built"), "{}", stderr(&out));
    // Keys out of range, or for the other kernel, are refused by name.
    for (set, says) in [
        ("stages.0.jitter=0", "must be in (0, 1), got 0"),
        ("stages.0.jitter=1.5", "must be in (0, 1), got 1.5"),
        ("stages.0.sigma=1.0", "is for kernel = \"gaussian\""),
    ] {
        let out = sketchfit(&["train", &p, "-o", dir.path("k.sfm").to_str().unwrap(), "--set", set]);
        let key = set.split('=').next().unwrap_or_default().replace("stages.0", "stages[0]");
        assert_eq!(out.status.code(), Some(2), "{set}: {}", stderr(&out));
        assert!(stderr(&out).contains(&key) && stderr(&out).contains(says), "{set}: {}", stderr(&out));
    }
    // More landmarks than rows: refused, naming the key and the largest dim allowed.
    let out = sketchfit(&["train", &p, "-o", dir.path("x.sfm").to_str().unwrap(), "--set", "stages.0.dim=5000"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("stages.0.dim") && stderr(&out).contains("at most 1347"), "{}", stderr(&out));
}

#[test]
fn a_feature_map_keeps_its_landmarks_through_its_json() {
    use sketchfit::api::{FeatureMap, Pipeline};
    let d = 6;
    let x = rows(7, 300, d);
    let batch = {
        use std::sync::Arc;
        let cols: Vec<(String, arrow_array::ArrayRef)> = (0..d)
            .map(|j| {
                let v: Vec<f32> = (0..300).map(|i| x[i * d + j]).collect();
                (format!("x{j}"), Arc::new(arrow_array::Float32Array::from(v)) as arrow_array::ArrayRef)
            })
            .collect();
        arrow_array::RecordBatch::try_from_iter(cols).unwrap()
    };
    let text = "task = \"regression\"\n[data]\ntrain = []\nfeatures = [\"x*\"]\ntargets = [\"__none__\"]\n\
                [[stages]]\nkind = \"nystrom\"\nkernel = \"gaussian\"\ndim = 120\n";
    let map = FeatureMap::fit(&Pipeline::from_toml_str(text, "test").unwrap(), [batch.clone()]).unwrap();
    let again = FeatureMap::from_json(&map.to_json().unwrap()).unwrap();
    assert_eq!(map.transform([batch.clone()]).unwrap(), again.transform([batch]).unwrap());
    // Without its arrays the JSON is refused, not redrawn.
    let mut v: serde_json::Value = serde_json::from_str(&map.to_json().unwrap()).unwrap();
    v["arrays"] = serde_json::json!([]);
    let e = FeatureMap::from_json(&v.to_string()).unwrap_err().to_string();
    assert!(e.contains("arrays are missing"), "{e}");
}

#[test]
fn edge_data_and_the_smallest_jitters_train_and_the_model_reads_back() {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Float64Array, Int64Array};
    let dir = TempDir::new("nystrom-edge");
    let n = 120;
    let label: ArrayRef = Arc::new(Int64Array::from((0..n).map(|i| (i % 2) as i64).collect::<Vec<_>>()));
    let column = |f: &dyn Fn(usize) -> f64| Arc::new(Float64Array::from((0..n).map(f).collect::<Vec<_>>())) as ArrayRef;
    // All-zero rows (a zero K_MM under the polynomial kernel with no offset), constant
    // rows, and rows duplicated in pairs (a singular K_MM).
    type Column<'a> = &'a dyn Fn(usize) -> f64;
    let sets: [(&str, Column, Column); 3] = [
        ("zero", &|_| 0.0, &|_| 0.0),
        ("five", &|_| 5.0, &|_| 5.0),
        ("pairs", &|i| ((i / 2) as f64 * 0.7).sin(), &|i| ((i / 2) as f64 * 0.3).cos()),
    ];
    for (name, a, b) in sets {
        let file = dir.path(&format!("{name}.parquet"));
        crate::common::write_parquet(&file, vec![("a", column(a)), ("b", column(b)), ("label", label.clone())], 40);
        for jitter in ["1e-6", "1e-50", "1e-300"] {
            let p = dir.path("p.toml");
            std::fs::write(
                &p,
                format!(
                    "task = \"classification\"\n[data]\ntrain = [\"{}\"]\nfeatures = [\"a\", \"b\"]\nlabel = \"label\"\n\
                     [[stages]]\nkind = \"nystrom\"\ndegree = 2\noffset = 0.0\ndim = 16\njitter = {jitter}\n\
                     [ridge]\nlambda = 0.1\n",
                    file.display()
                ),
            )
            .unwrap();
            let model = dir.path(&format!("{name}-{jitter}.sfm"));
            let out = sketchfit(&["train", p.to_str().unwrap(), "-o", model.to_str().unwrap(), "-q"]);
            assert_eq!(out.status.code(), Some(0), "{name}, jitter {jitter}: {}", stderr(&out));
            let m = sketchfit::Model::load(&model).unwrap_or_else(|e| panic!("{name}, jitter {jitter}: {e}"));
            assert!(m.weights.iter().all(|w| w.is_finite()), "{name}, jitter {jitter}");
            let scores = m.scores(&[0.0, 0.0, 5.0, 5.0], 2, &mut Vec::new(), 1);
            assert!(scores.iter().all(|s| s.is_finite()), "{name}, jitter {jitter}: {scores:?}");
            if name == "zero" {
                // Every row maps to zero features: the scores are the intercepts alone.
                let c = scores.len() / 2;
                assert_eq!(scores[..c], scores[c..], "{name}: constant scores");
            }
        }
    }
}
