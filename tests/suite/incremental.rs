//! Statistics grown batch by batch (the bindings' `partial_fit`), per-partition parts
//! with fixed parameters merged in any grouping, a feature map alone, and pipeline text
//! without files: each against the one-call fit on the same rows.

use arrow_array::RecordBatch;
use sketchfit::api::FeatureMap;
use sketchfit::sketch::FeaturePipeline;
use sketchfit::source::Classes;
use sketchfit::{Pipeline, Statistics};

use crate::common::*;

fn row_major(b: &[RecordBatch]) -> Vec<f32> {
    let mut x = Vec::new();
    for batch in b {
        for r in 0..batch.num_rows() {
            for c in 0..4 {
                let col = batch.column(c).as_any().downcast_ref::<arrow_array::Float32Array>().unwrap();
                x.push(col.value(r));
            }
        }
    }
    x
}

#[test]
fn batches_added_one_call_at_a_time_give_the_one_call_model() {
    let parts = batches(&rings(900, 2), 150);
    let p = rings_pipeline().classes(Classes::Int(vec![0, 1, 2]));
    let whole = p.fit(parts.clone()).unwrap();
    let mut stats = p.accumulate(parts[..1].to_vec(), (0, 1)).unwrap();
    for b in &parts[1..] {
        p.add(&mut stats, [b.clone()]).unwrap();
    }
    assert_eq!(stats.rows(), 900);
    let grown = p.solve(vec![stats.clone()]).unwrap();
    // The stages have no fitted parameters here; only the accumulator's shift (from the
    // first batch's sample, not the whole's) differs, which moves rounding only.
    let (a, b) = (grown.score_batches(&parts, false).unwrap().0, whole.score_batches(&parts, false).unwrap().0);
    assert!(rel(&a, &b) < 1e-9, "{:e}", rel(&a, &b));
    assert_eq!(grown.header.rows, 900);
    // The batches' scores are the row-major scores.
    assert_eq!(b, whole.decision_function(&row_major(&parts)).unwrap());
    // A later batch with a label outside the fixed classes is refused, naming it.
    let mut bad = rings(10, 3);
    bad[4].1 = std::sync::Arc::new(arrow_array::Int64Array::from(vec![9i64; 10]));
    let err = p.add(&mut stats, batches(&bad, 10)).unwrap_err().to_string();
    assert!(err.contains("batch 0, row 0") && err.contains("label '9' is not one of the 3 classes"), "{err}");
    // Other columns than the statistics were started with are refused.
    let narrow = RecordBatch::try_from_iter(rings(10, 4).into_iter().filter(|(n, _)| *n != "d")).unwrap();
    assert!(Pipeline::classification("label")
        .stage(sketchfit::sketch::TensorSketchSpec { degree: 2, dim: 128, ..Default::default() })
        .add(&mut stats, [narrow])
        .is_err());
    assert_eq!(stats.rows(), 900, "a refused batch adds nothing");
}

#[test]
fn partitions_from_empty_copies_merge_in_any_grouping_and_each_once() {
    let parts = batches(&rings(1200, 5), 100);
    let p = rings_pipeline().classes(Classes::Int(vec![0, 1, 2]));
    let base = p.accumulate(parts[..2].to_vec(), (0, 1)).unwrap();
    let mut shards = Vec::new();
    for i in 0..4 {
        let mut s = base.empty_like((i, 4)).unwrap();
        assert_eq!(s.rows(), 0);
        p.add(&mut s, parts[i * 3..i * 3 + 3].to_vec()).unwrap();
        shards.push(s);
    }
    let mut whole = base.empty_like((0, 1)).unwrap();
    p.add(&mut whole, parts.clone()).unwrap();
    let reference = p.solve(vec![whole]).unwrap();
    // ((0 + 1) + (2 + 3)), through bytes as an engine would ship them.
    let ship = |s: &Statistics| Statistics::from_bytes(&s.to_bytes().unwrap(), "shipped").unwrap();
    let mut left = ship(&shards[0]);
    left.merge(ship(&shards[1])).unwrap();
    let mut right = ship(&shards[2]);
    right.merge(ship(&shards[3])).unwrap();
    left.merge(right.clone()).unwrap();
    assert_eq!(left.shards_held(), vec![0, 1, 2, 3]);
    let merged = p.solve(vec![left.clone()]).unwrap();
    assert!(rel(&merged.weights, &reference.weights) < 1e-10, "{:e}", rel(&merged.weights, &reference.weights));
    // The same shard twice is refused, in a merge or a solve; a missing one at solve.
    let err = left.merge(shards[3].clone()).unwrap_err().to_string();
    assert!(err.contains("shard 3/4 is in both"), "{err}");
    let err = p.solve(vec![right, shards[2].clone()]).unwrap_err().to_string();
    assert!(err.contains("given twice"), "{err}");
    let err = p.solve(vec![shards[0].clone()]).unwrap_err().to_string();
    assert!(err.contains("missing"), "{err}");
    // Parts whose parameters were fitted apart (here the median-heuristic bandwidth on
    // different rows) never merge.
    let fitted = Pipeline::classification("label")
        .features(["a", "b", "c", "d"])
        .stage(sketchfit::sketch::RffSpec { dim: 64, ..Default::default() })
        .classes(Classes::Int(vec![0, 1, 2]));
    let a = fitted.accumulate(parts[..2].to_vec(), (0, 1)).unwrap().empty_like((0, 2)).unwrap();
    let b = fitted.accumulate(parts[2..4].to_vec(), (0, 1)).unwrap().empty_like((1, 2)).unwrap();
    let err = a.clone().merge(b).unwrap_err().to_string();
    assert!(err.contains("fitted parameters"), "{err}");
    // Damaged bytes are refused, never used.
    let mut bytes = shards[0].to_bytes().unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    assert!(Statistics::from_bytes(&bytes, "damaged").is_err());
    assert!(base.empty_like((4, 4)).is_err());
}

#[test]
fn a_feature_map_alone_maps_as_the_pipeline_does_and_rebuilds_from_json() {
    let parts = batches(&rings(400, 7), 100);
    let p = Pipeline::classification("label")
        .features(["a", "b", "c", "d"])
        .stage(sketchfit::sketch::RffSpec { dim: 64, ..Default::default() })
        .seed(3);
    let map = FeatureMap::fit(&p, parts.clone()).unwrap();
    let sigma = match &map.stages()[0] {
        sketchfit::sketch::StageSpec::Rff(r) => r.sigma.unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(sigma > 0.0, "the bandwidth is fitted by the median heuristic");
    let (z, rows) = map.transform(parts.clone()).unwrap();
    assert_eq!((rows, z.len()), (400, 400 * 64));
    let direct = FeaturePipeline::build(map.stages(), 4, 3).unwrap();
    let mut want = vec![0f32; 400 * 64];
    direct.map_chunk(&row_major(&parts), 400, &mut want, 1);
    assert_eq!(z, want);
    let again = FeatureMap::from_json(&map.to_json().unwrap()).unwrap();
    assert_eq!(again.transform(parts).unwrap().0, z);
    let narrow = RecordBatch::try_from_iter(rings(5, 1).into_iter().filter(|(n, _)| *n != "a")).unwrap();
    assert!(map.transform([narrow]).is_err());
    assert!(FeatureMap::from_json("{\"stages\": []}").is_err());
}

#[test]
fn pipeline_text_needs_no_files_but_a_pipeline_file_does() {
    let text = "task = \"regression\"\n[data]\ntrain = []\ntargets = [\"y\"]\n[[stages]]\nkind = \"identity\"\n";
    assert!(Pipeline::from_toml_str(text, "text").is_ok());
    let dir = TempDir::new("api-text");
    let path = dir.path("p.toml");
    std::fs::write(&path, text).unwrap();
    let err = Pipeline::load(&path, &[]).unwrap_err().to_string();
    assert!(err.contains("data.train"), "{err}");
    let err = Pipeline::from_toml_str("task = \"regression\"\n[data]\ntrain = []\nbogus = 1\n", "text").unwrap_err();
    assert!(err.to_string().contains("bogus"), "{err}");
}
