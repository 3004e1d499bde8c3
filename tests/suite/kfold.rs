//! k-fold cross-validation from fold statistics (`ridge.cv`): the pooled held-out
//! scores equal K separately trained models scored on their held-out rows, the refit
//! equals training on all rows at the chosen λ, shards give the one-process selection,
//! and the fold assignment is reproducible.

use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, RecordBatch};
use sketchfit::sketch::{RffSpec, TensorSketchSpec};
use sketchfit::source::fold_of;
use sketchfit::{Lambda, Model, Pipeline};

use crate::common::*;

const ROWS: usize = 900;
const GROUP: usize = 300;
const K: usize = 3;

fn cv_pipeline(p: Pipeline) -> Pipeline {
    let mut p = p
        .stage(TensorSketchSpec { degree: 2, dim: 64, ..Default::default() })
        .stage(RffSpec { dim: 64, sigma: Some(1.0), ..Default::default() })
        .seed(5)
        .threads(2);
    p.spec_mut().ridge.cv = Some(K);
    p
}

/// Rows of the file by fold, as the pass assigns them (file 0, row group, row in group).
fn fold_rows(seed: u64) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); K];
    for r in 0..ROWS {
        out[fold_of(seed, 0, r / GROUP, r % GROUP, K)].push(r);
    }
    out
}

/// The given rows of a batch of f32, f64 and i64 columns.
fn take(batch: &RecordBatch, rows: &[usize]) -> RecordBatch {
    use arrow_array::{Array, Float32Array, Int64Array};
    let cols: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| -> ArrayRef {
            if let Some(a) = c.as_any().downcast_ref::<Float32Array>() {
                Arc::new(Float32Array::from(rows.iter().map(|&r| a.value(r)).collect::<Vec<_>>()))
            } else if let Some(a) = c.as_any().downcast_ref::<Float64Array>() {
                Arc::new(Float64Array::from(rows.iter().map(|&r| a.value(r)).collect::<Vec<_>>()))
            } else {
                let a = c.as_any().downcast_ref::<Int64Array>().unwrap();
                assert_eq!(a.null_count(), 0);
                Arc::new(Int64Array::from(rows.iter().map(|&r| a.value(r)).collect::<Vec<_>>()))
            }
        })
        .collect();
    RecordBatch::try_new(batch.schema(), cols).unwrap()
}

fn data(dir: &TempDir, regression: bool) -> (std::path::PathBuf, RecordBatch) {
    let mut cols = rings(ROWS, 9);
    if regression {
        let a = cols[0].1.as_any().downcast_ref::<arrow_array::Float32Array>().unwrap().clone();
        let y: Vec<f64> = (0..ROWS).map(|i| (f64::from(a.value(i)) * 3.0).sin() + (i % 7) as f64 * 0.05).collect();
        cols.pop();
        cols.push(("y", Arc::new(Float64Array::from(y))));
    }
    let path = dir.path(if regression { "reg.parquet" } else { "cls.parquet" });
    write_parquet(&path, cols.clone(), GROUP);
    (path, RecordBatch::try_from_iter(cols).unwrap())
}

#[test]
fn pooled_fold_scores_equal_separately_trained_models_and_the_refit_is_the_all_rows_model() {
    let dir = TempDir::new("kfold-cls");
    let (path, all) = data(&dir, false);
    let base = || Pipeline::classification("label").features(["a", "b", "c", "d"]);
    let model = cv_pipeline(base()).fit_files([&path]).unwrap();
    let table = model.header.validation.clone().unwrap();
    assert_eq!((table.folds, table.rows), (Some(K), ROWS as u64));
    let folds = fold_rows(5);
    assert!(
        folds.iter().all(|f| f.len().abs_diff(ROWS / K) < 70),
        "folds {:?}",
        folds.iter().map(Vec::len).collect::<Vec<_>>()
    );
    for j in [6, 16, 24, 34] {
        let lambda = table.grid[j];
        let mut right = 0;
        for fold in &folds {
            let rest: Vec<usize> = (0..ROWS).filter(|r| !fold.contains(r)).collect();
            let m = cv_pipeline(base()).lambda(Lambda::Fixed(lambda));
            let mut m = m;
            m.spec_mut().ridge.cv = None;
            let fitted: Model = m.fit([take(&all, &rest)]).unwrap();
            let held = take(&all, fold);
            let pred = fitted.predict_batch(&held, false).unwrap();
            let p = pred.column(0).as_any().downcast_ref::<arrow_array::Int64Array>().unwrap();
            let t = held.column(4).as_any().downcast_ref::<arrow_array::Int64Array>().unwrap();
            right += (0..held.num_rows()).filter(|&r| p.value(r) == t.value(r)).count();
        }
        let separate = right as f64 / ROWS as f64;
        // Rounding can move a row that sits on a decision boundary, no more.
        assert!(
            (separate - table.score[j]).abs() <= 1.0 / ROWS as f64 + 1e-12,
            "λ {lambda}: {separate} vs {}",
            table.score[j]
        );
    }
    // Log-loss of the ±1 scores, pooled the same way.
    let mut ll = cv_pipeline(base());
    ll.spec_mut().ridge.metric = Some(sketchfit::pipeline::spec::Metric::LogLoss);
    let lt = ll.fit_files([&path]).unwrap().header.validation.clone().unwrap();
    assert_eq!(lt.metric, "log_loss");
    for j in [12, 28] {
        let mut loss = 0.0;
        for fold in &folds {
            let rest: Vec<usize> = (0..ROWS).filter(|r| !fold.contains(r)).collect();
            let mut m = cv_pipeline(base()).lambda(Lambda::Fixed(lt.grid[j]));
            m.spec_mut().ridge.cv = None;
            let fitted = m.fit([take(&all, &rest)]).unwrap();
            let held = take(&all, fold);
            let (s, n) = fitted.score_batches(std::slice::from_ref(&held), false).unwrap();
            let t = held.column(4).as_any().downcast_ref::<arrow_array::Int64Array>().unwrap();
            let c = s.len() / n;
            for r in 0..n {
                for k in 0..c {
                    let y = if t.value(r) == k as i64 { 1.0 } else { -1.0 };
                    loss += (-(s[r * c + k] * y)).exp().ln_1p();
                }
            }
        }
        let separate = loss / (ROWS * 3) as f64;
        assert!((separate - lt.score[j]).abs() < 1e-8 * separate, "{separate} vs {}", lt.score[j]);
    }
    // The refit: the all-rows model at the chosen λ.
    let chosen = table.chosen[0];
    let mut fixed = cv_pipeline(base()).lambda(Lambda::Fixed(chosen));
    fixed.spec_mut().ridge.cv = None;
    let direct = fixed.fit_files([&path]).unwrap();
    assert!(rel(&model.weights, &direct.weights) < 1e-10, "{:e}", rel(&model.weights, &direct.weights));
    assert_eq!(model.header.lambdas, vec![chosen; model.header.outputs]);
    assert_eq!(model.header.rows, ROWS as u64);
}

#[test]
fn fold_rmse_from_the_stream_equals_separate_regressions_and_shards_select_alike() {
    let dir = TempDir::new("kfold-reg");
    let (path, all) = data(&dir, true);
    let base = || Pipeline::regression(["y"]).features(["a", "b", "c", "d"]);
    let p = cv_pipeline(base());
    let model = p.fit_files([&path]).unwrap();
    let table = model.header.validation.clone().unwrap();
    assert_eq!(table.metric, "rmse");
    let folds = fold_rows(5);
    for j in [10, 20, 30] {
        let mut sq = 0.0;
        for fold in &folds {
            let rest: Vec<usize> = (0..ROWS).filter(|r| !fold.contains(r)).collect();
            let mut m = cv_pipeline(base()).lambda(Lambda::Fixed(table.grid[j]));
            m.spec_mut().ridge.cv = None;
            let fitted = m.fit([take(&all, &rest)]).unwrap();
            let held = take(&all, fold);
            let (s, _) = fitted.score_batches(std::slice::from_ref(&held), false).unwrap();
            let y = held.column(4).as_any().downcast_ref::<Float64Array>().unwrap();
            sq += s.iter().zip(y.values()).map(|(a, b)| (a - b).powi(2)).sum::<f64>();
        }
        let separate = (sq / ROWS as f64).sqrt();
        assert!((separate - table.score[j]).abs() < 1e-8 * separate, "{separate} vs {}", table.score[j]);
    }
    // Two shards of the file, merged: the same fold statistics, the same selection.
    let parts: Vec<_> = (0..2).map(|i| p.accumulate_files([&path], (i, 2)).unwrap()).collect();
    let mut spec_p = p.clone();
    spec_p.spec_mut().data.train = vec![path.clone()];
    let sharded = spec_p.solve(parts).unwrap();
    let t2 = sharded.header.validation.clone().unwrap();
    // The grid comes from the merged total, equal to the last few bits.
    assert!(rel(&t2.chosen, &table.chosen) < 1e-12, "{:?} vs {:?}", t2.chosen, table.chosen);
    for (a, b) in t2.score.iter().zip(&table.score) {
        assert!((a - b).abs() < 1e-10 * b.abs().max(1.0));
    }
    assert!(rel(&sharded.weights, &model.weights) < 1e-10);
    // The same data and seed: the same folds and model.
    assert_eq!(p.fit_files([&path]).unwrap().weights, model.weights);
}

#[test]
fn k_fold_settings_are_checked_and_parts_must_share_the_fold_layout() {
    let dir = TempDir::new("kfold-keys");
    let (path, _) = data(&dir, false);
    let base = || cv_pipeline(Pipeline::classification("label").features(["a", "b", "c", "d"]));
    let err = |p: Pipeline| p.check().unwrap_err().to_string();
    let mut one = base();
    one.spec_mut().ridge.cv = Some(1);
    assert!(err(one).contains("ridge.cv: must be from 2 to 10"));
    assert!(err(base().pca(8)).contains("ridge.cv: k-fold selection is for ridge on all D features"));
    assert!(err(base().lambda(Lambda::Fixed(1.0))).contains("ridge.cv: k-fold chooses λ from the grid"));
    assert!(err(base().validation([&path])).contains("ridge.cv"));
    // Parts accumulated without folds do not solve as k-fold, nor the other way round.
    let mut plain = base();
    plain.spec_mut().ridge.cv = None;
    let parts = vec![plain.accumulate_files([&path], (0, 1)).unwrap()];
    let e = base().solve(parts).unwrap_err().to_string();
    assert!(e.contains("ridge.cv") && e.contains("without folds"), "{e}");
    let parts = vec![base().accumulate_files([&path], (0, 1)).unwrap()];
    assert!(plain.solve(parts).unwrap_err().to_string().contains("ridge.cv"));
    // Batches in memory have no files for the scoring stream: said, not guessed.
    let parts = vec![base().accumulate_files([&path], (0, 1)).unwrap()];
    let e = base().solve(parts).unwrap_err().to_string();
    assert!(e.contains("streams the training rows once more"), "{e}");
}

#[test]
fn k_fold_parts_solve_without_a_missing_shard_when_allowed() {
    // 900 rows in three row groups; shard 0 of 2 holds groups 0 and 2. The scoring stream
    // reads only those: a check against every file's rows refused the documented option.
    let dir = TempDir::new("kfold-partial");
    let (path, _) = data(&dir, false);
    let text = format!(
        "task = \"classification\"\n[data]\ntrain = [\"{}\"]\nfeatures = [\"a\", \"b\", \"c\", \"d\"]\nlabel = \"label\"\n\
         [[stages]]\nkind = \"rff\"\ndim = 64\nsigma = 1.0\n[ridge]\ncv = 3\n[run]\nseed = 5\nthreads = 2\n",
        path.display()
    );
    let p = dir.path("p.toml");
    std::fs::write(&p, text).unwrap();
    let (p, part) = (p.to_str().unwrap(), dir.path("part0.sfs"));
    let part = part.to_str().unwrap();
    let out = sketchfit(&["accumulate", p, "--shard", "0/2", "-o", part, "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let model = dir.path("m.sfm");
    let out = sketchfit(&["solve", p, part, "-o", model.to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("missing"));
    let out = sketchfit(&["solve", p, part, "--allow-partial", "-o", model.to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m = Model::load(&model).unwrap();
    assert_eq!(m.header.rows, 600);
    assert_eq!(m.header.validation.unwrap().metric, "accuracy");
}
