//! The down-projection after any stage (`down`, `down_dim`; math.md §5–6): unbiased
//! for the stage's kernel whatever the stage, checked by key, restored from a model
//! file to the same predictions, and measured by `kernel-error`.

use sketchfit::rng::StageRng;
use sketchfit::sketch::{build_map, ChunkMap, DownKind, StageSpec};
use sketchfit::{Lambda, Model, Pipeline};

use crate::common::*;

fn spec(toml: &str) -> StageSpec {
    StageSpec::from_toml(&toml::from_str(toml).unwrap(), "t", "stages.0").unwrap()
}

/// `⟨z(x), z(y)⟩` for one map.
fn khat(m: &dyn ChunkMap, x: &[f32], y: &[f32]) -> f64 {
    let dz = m.output_dim();
    let mut rows = x.to_vec();
    rows.extend_from_slice(y);
    let mut z = vec![0f32; 2 * dz];
    m.map(&rows, 2, &mut z);
    (0..dz).map(|i| f64::from(z[i]) * f64::from(z[dz + i])).sum()
}

/// Over S seeds the mean estimate lies within 5 standard errors (from the seeds' own
/// spread) of the target: the exact kernel for RFF and the HD sketch (both unbiased,
/// the HD truncation bias ≤ 1e-6), the stage's own deterministic inner product for the
/// χ² series. Both projections, on three families.
#[test]
fn a_down_projection_after_any_stage_is_unbiased_for_the_stages_estimate() {
    let d = 6;
    let mut r = StageRng::new(17, 1);
    let x: Vec<f32> = (0..d).map(|_| r.uniform() as f32).collect();
    let y: Vec<f32> = x.iter().map(|&v| (v + 0.3 * r.uniform() as f32).min(1.0)).collect();
    let s = 400;
    let cases = [
        ("kind = \"rff\"\nsigma = 1.0\ndim = 256\ndown_dim = 48", true),
        ("kind = \"gaussian_sketch_hd\"\nsigma = 1.5\ndim = 256\ndown_dim = 12", true),
        ("kind = \"chi2\"\nk = [0.3, 0.6, 1.0, 1.5, 2.2, 3.0]\nterms = 6\ndown_dim = 12", false),
    ];
    for (toml, exact_target) in cases {
        for down in ["srht", "gaussian"] {
            let full = spec(&format!("{toml}\ndown = \"{down}\""));
            let full = full.fit(&[x.clone(), y.clone()].concat(), d, 1, 0).unwrap();
            let target = if exact_target {
                full.kernel().unwrap().eval(&x, &y)
            } else {
                let inner = build_map(&full.with_down(None, 0), d, &mut StageRng::new(0, 0)).unwrap();
                khat(inner.as_ref(), &x, &y)
            };
            let est: Vec<f64> = (0..s)
                .map(|seed| {
                    let m = build_map(&full, d, &mut StageRng::new(5000 + seed, 0)).unwrap();
                    assert_eq!(m.output_dim(), full.down_keys().1);
                    khat(m.as_ref(), &x, &y)
                })
                .collect();
            let mean = est.iter().sum::<f64>() / s as f64;
            let sd = (est.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (s - 1) as f64).sqrt();
            let se = sd / (s as f64).sqrt();
            assert!(sd > 0.0, "{toml} {down}: the projection adds variance");
            assert!((mean - target).abs() < 5.0 * se, "{toml} {down}: mean {mean} vs {target} (se {se})");
        }
    }
}

#[test]
fn down_keys_are_checked_and_named() {
    let bad = |toml: &str, d: usize| {
        let s = StageSpec::from_toml(&toml::from_str(toml).unwrap(), "t", "stages.0");
        match s {
            Err(e) => e.to_string(),
            Ok(s) => {
                let s = s.fit(&[0.5; 12], d, 1, 0).unwrap();
                build_map(&s, d, &mut StageRng::new(1, 0)).unwrap_err().to_string()
            }
        }
    };
    let e = bad("kind = \"rff\"\nsigma = 1.0\ndown_dim = 8", 4);
    assert!(e.contains("stages.0.down_dim") && e.contains("needs down"), "{e}");
    let e = bad("kind = \"rff\"\nsigma = 1.0\ndown = \"srht\"", 4);
    assert!(e.contains("stages.0.down_dim") && e.contains("from 1"), "{e}");
    let e = bad("kind = \"rff\"\nsigma = 1.0\ndim = 16\ndown = \"srht\"\ndown_dim = 16", 4);
    assert!(e.contains("down_dim") && e.contains("below the stage's own output dimension 16"), "{e}");
    let e = bad("kind = \"rff\"\ndown = \"fft\"\ndown_dim = 8", 4);
    assert!(e.contains("stages.0.down") && e.contains("unknown variant `fft`"), "{e}");
    // CRAFTMaps has its own down-projection, to `dim`.
    let e = bad("kind = \"craftmaps\"\ndown_dim = 8", 4);
    assert!(e.contains("down_dim"), "{e}");
    assert_eq!(spec("kind = \"craftmaps\"\ndown = \"gaussian\"").down_keys(), (None, 0));
    assert_eq!(spec("kind = \"rff\"\ndown = \"gaussian\"\ndown_dim = 9").down_keys(), (Some(DownKind::Gaussian), 9));
}

/// A model with down-projected stages predicts the same after a save and load, and
/// learns the digits.
#[test]
fn a_model_with_down_projected_stages_round_trips_and_learns() {
    let dir = TempDir::new("down-model");
    let pipe = Pipeline::load(
        std::path::Path::new(&repo("pipelines/digits.toml")),
        &["stages.0.down=\"srht\"".into(), "stages.0.down_dim=512".into()],
    )
    .unwrap();
    let model = pipe.lambda(Lambda::Gcv).threads(2).fit_files([repo("data/digits_train.parquet")]).unwrap();
    assert_eq!(model.header.dim, 512);
    let path = dir.path("m.sfm");
    model.save(&path).unwrap();
    let loaded = Model::load(&path).unwrap();
    let ev = sketchfit(&["evaluate", path.to_str().unwrap(), "--input", &repo("data/digits_test.parquet"), "--json"]);
    assert_eq!(ev.status.code(), Some(0), "{}", stderr(&ev));
    let v: serde_json::Value = serde_json::from_str(&stdout(&ev)).unwrap();
    assert!(v["accuracy"].as_f64().unwrap() > 0.95, "{v}");
    assert_eq!(loaded.header.stages, model.header.stages);
    assert_eq!(loaded.weights, model.weights);
}

#[test]
fn kernel_error_reports_what_the_down_projection_adds() {
    let dir = TempDir::new("down-kerr");
    let p = dir.path("p.toml");
    std::fs::write(
        &p,
        format!(
            "[data]\ntrain = [\"{}\"]\nfeatures = [\"px*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\n\
             dim = 1024\ndown = \"srht\"\ndown_dim = 128\n",
            repo("data/digits_train.parquet")
        ),
    )
    .unwrap();
    let out = sketchfit(&["kernel-error", p.to_str().unwrap(), "--sample", "60", "--seeds", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("without its down-projection") && text.contains("the projection adds"), "{text}");
}
