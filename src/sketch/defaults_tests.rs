//! The registry's own tests: every family's defaults, fit, build and restore.

use super::*;

#[test]
fn code_defaults_equal_the_file_defaults_and_validate() {
    let all = [
        StageSpec::Identity(Default::default()),
        StageSpec::TensorSketch(Default::default()),
        StageSpec::RandomMaclaurin(Default::default()),
        StageSpec::RecursiveTensorSketch(Default::default()),
        StageSpec::Craftmaps(Default::default()),
        StageSpec::Rff(Default::default()),
        StageSpec::Chi2(Default::default()),
        StageSpec::Chi2Chebyshev(Default::default()),
        StageSpec::ExpChi2(Default::default()),
        StageSpec::GaussianSketch(Default::default()),
        StageSpec::GaussianSketchHd(Default::default()),
        StageSpec::Nystrom(Default::default()),
    ];
    assert_eq!(all.len(), KINDS.len());
    // The registry's list for bindings covers every kind, with its keys.
    let listed = families();
    assert_eq!(listed.iter().map(|f| f.kind).collect::<Vec<_>>(), KINDS);
    let chi2 = listed.iter().find(|f| f.kind == "chi2").unwrap();
    assert!(chi2.nonnegative && chi2.keys.contains(&"k".to_string()) && chi2.keys.contains(&"down_dim".to_string()));
    let craft = listed.iter().find(|f| f.kind == "craftmaps").unwrap();
    assert!(
        !craft.nonnegative
            && craft.keys.contains(&"up_dim".to_string())
            && !craft.keys.contains(&"down_dim".to_string())
    );
    for (spec, kind) in all.iter().zip(KINDS) {
        let table = toml::Table::from_iter([("kind".to_string(), toml::Value::String(kind.to_string()))]);
        assert_eq!(&StageSpec::from_toml(&table, "t", "stages.0").unwrap(), spec, "{kind}");
        spec.validate("t", "stages.0").unwrap();
    }
}

fn sample(n: usize, d: usize) -> Vec<f32> {
    let mut rng = StageRng::new(5, 0);
    (0..n * d).map(|_| rng.below(1000) as f32 / 1000.0).collect()
}

/// Every family, fitted on a sample, builds; its arrays rebuild the same map; an
/// unfitted spec is an error, never a panic.
#[test]
fn every_family_fits_builds_and_restores_and_unfitted_specs_are_errors() {
    let (n, d) = (40, 6);
    let x = sample(n, d);
    for kind in KINDS {
        let table = toml::Table::from_iter([
            ("kind".to_string(), toml::Value::String(kind.to_string())),
            ("normalize".to_string(), toml::Value::String("l1".into())),
        ]);
        let mut spec = StageSpec::from_toml(&table, "t", "stages.0").unwrap();
        spec = spec.with_dim(24);
        if spec.needs_fit() {
            // A family whose fit leaves arrays is a user's error here (its spec came
            // from a part or a JSON), the others' an internal one.
            let built = build_map(&spec, d, &mut StageRng::new(1, 0));
            if spec.array_fitted() {
                assert!(matches!(built, Err(Error::Config { .. })), "{kind}");
            } else {
                assert!(matches!(built, Err(Error::Internal { .. })), "{kind}");
                assert!(spec.kernel().is_err(), "{kind}");
            }
            assert!(map_from_params(&spec, d, &[]).is_err(), "{kind}");
        }
        let fitted = spec.fit(&x, d, 3, 0).unwrap();
        assert!(!fitted.needs_fit(), "{kind}");
        assert!(fitted.kernel().is_ok(), "{kind}");
        let map = build_map(&fitted, d, &mut StageRng::new(1, 0)).unwrap();
        let back = map_from_params(&fitted, d, &map.params()).unwrap();
        let (mut a, mut b) = (vec![0f32; n * map.output_dim()], vec![0f32; n * back.output_dim()]);
        map.map(&x, n, &mut a);
        back.map(&x, n, &mut b);
        assert_eq!(a, b, "{kind}");
        // And with a down-projection after it, for every family that takes one.
        for down in [DownKind::Srht, DownKind::Gaussian] {
            let with = fitted.with_down(Some(down), 5);
            if with.down_keys().0.is_none() {
                continue;
            }
            let map = build_map(&with, d, &mut StageRng::new(1, 0)).unwrap();
            assert_eq!(map.output_dim(), 5, "{kind}");
            let back = map_from_params(&with, d, &map.params()).unwrap();
            let (mut a, mut b) = (vec![0f32; n * 5], vec![0f32; n * 5]);
            map.map(&x, n, &mut a);
            back.map(&x, n, &mut b);
            assert_eq!(a, b, "{kind} {down:?}");
        }
    }
}

#[test]
fn width_dependent_keys_are_checked_against_d_and_name_the_key() {
    let hd = |t: &str| StageSpec::from_toml(&toml::from_str(t).unwrap(), "t", "stages.0");
    let err = hd("kind = \"gaussian_sketch_hd\"\nblocks = [0, 4]").unwrap_err().to_string();
    assert!(err.contains("stages.0.blocks") && err.contains("entry 0 is 0"), "{err}");
    let s = hd("kind = \"gaussian_sketch\"\ncenter = [0.0, 1.0]").unwrap();
    let err = s.check_width(3, 2).unwrap_err().to_string();
    assert!(err.contains("stages.2.center") && err.contains("d = 3"), "{err}");
    assert!(s.fit(&sample(10, 3), 3, 1, 2).is_err());
    assert!(s.check_width(2, 2).is_ok());
    let err = hd("kind = \"gaussian_sketch\"\ncenter = [0.0, nan]").unwrap_err().to_string();
    assert!(err.contains("stages.0.center") && err.contains("finite"), "{err}");
    // A stored model whose centre does not match its width is refused on load.
    let fitted = s.fit(&sample(10, 2), 2, 1, 0).unwrap();
    let map = build_map(&fitted, 2, &mut StageRng::new(1, 0)).unwrap();
    assert!(map_from_params(&fitted, 3, &map.params()).is_err());
}

/// A dimension sweep refits the HD block sizes for each new total (they were once
/// cleared and measured empty).
#[test]
fn hd_dimension_sweeps_refit_the_blocks() {
    let d = 8;
    let x = sample(50, d);
    let s = StageSpec::from(GaussianSketchHdSpec::default()).fit(&x, d, 1, 0).unwrap();
    let mut outs = Vec::new();
    for dim in [64, 1024] {
        let f = s.with_dim(dim).fit(&x, d, 1, 0).unwrap();
        let StageSpec::GaussianSketchHd(h) = &f else { panic!("kind changed") };
        let out = build_map(&f, d, &mut StageRng::new(1, 0)).unwrap().output_dim();
        assert_eq!(out, 1 + h.blocks.iter().sum::<usize>(), "dim {dim}");
        outs.push(out);
    }
    assert!(outs[1] > 2 * outs[0], "{outs:?}");
}
