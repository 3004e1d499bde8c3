"""The estimators: scikit-learn's conventions and checks, inputs of every kind giving
one model, partial_fit equal to fit, pickling, errors with the core's messages."""

import pickle
import threading
import time

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

import sketchfit as sf
from conftest import REPO
from sketchfit import _core
from sketchfit._inputs import numpy_table

TS = {"kind": "tensor_sketch", "degree": 3, "offset": 1.0, "dim": 1024, "normalize": "l2"}


def classifier(**kw):
    return sf.SketchRidgeClassifier(stages=[TS], random_state=7, **kw)


# scikit-learn's estimator checks: every check must pass (none is skipped by us; the
# checks scikit-learn itself skips for a tag are listed in docs/src/guide/python.md).
ESTIMATORS = [
    sf.SketchRidgeClassifier(stages=[{"kind": "rff", "dim": 256}]),
    sf.SketchRidgeRegressor(stages=[{"kind": "rff", "dim": 256}]),
    sf.RFPCA(n_components=2, stages=[{"kind": "rff", "dim": 64}]),
    sf.TensorSketch(dim=64),
    sf.RandomFourierFeatures(dim=64),
    sf.RandomMaclaurin(dim=64),
    sf.RecursiveTensorSketch(dim=64),
    sf.CraftMaps(dim=64),
    sf.Chi2Series(),
    sf.Chi2Chebyshev(terms=8),
    sf.ExpChi2(dim=64),
    sf.GaussianSketch(dim=64),
    sf.GaussianSketchHD(dim=64),
    sf.Identity(),
]


@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_check_estimator(est):
    results = check_estimator(est, on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:400]) for r in results if r["status"] == "failed"]
    assert not failed, failed
    assert sum(r["status"] == "passed" for r in results) >= 40


def test_numpy_pyarrow_polars_give_one_model(digits):
    X, y, Xt, _, _, _, feats = digits
    ref = classifier().fit(X, y).decision_function(Xt)
    # F-ordered float64: named columns instead of one list column; same features.
    f_order = classifier().fit(np.asfortranarray(X.astype(np.float64)), y).decision_function(Xt)
    np.testing.assert_allclose(f_order, ref, rtol=1e-9, atol=1e-9)
    table = pa.table({c: X[:, j] for j, c in enumerate(feats)})
    test_table = pa.table({c: Xt[:, j] for j, c in enumerate(feats)})
    arrow = classifier().fit(table, y).decision_function(test_table)
    frame = classifier().fit(pl.from_arrow(table), y).decision_function(pl.from_arrow(test_table))
    batch = classifier().fit(table.to_batches()[0] if table.num_rows == len(table.to_batches()[0]) else table, y)
    np.testing.assert_allclose(arrow, ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(frame, arrow)
    np.testing.assert_array_equal(batch.decision_function(test_table), arrow)
    est = classifier().fit(pl.from_arrow(table), y)
    assert list(est.feature_names_in_) == feats and est.n_features_in_ == 64


def test_zero_copy_inputs():
    X = np.random.default_rng(0).random((500, 7), dtype=np.float32)
    table, layout = numpy_table(X)
    assert layout.list_column == "x"
    assert _core.values_address(table) == X.__array_interface__["data"][0]
    F = np.asfortranarray(X.astype(np.float64))
    table, layout = numpy_table(F)
    assert layout.list_column is None
    assert _core.values_address(table) == F.__array_interface__["data"][0]
    arrow = pa.table({"a": pa.array(X[:, 0].copy())})
    assert _core.values_address(arrow) == arrow.column(0).chunks[0].buffers()[1].address


def test_partial_fit_equals_fit(digits):
    X, y, Xt, _, _, _, _ = digits
    ref = classifier().fit(X, y)
    inc = classifier()
    for i in range(0, len(X), 250):
        inc.partial_fit(X[i : i + 250], y[i : i + 250], classes=np.unique(y))
    np.testing.assert_allclose(inc.decision_function(Xt), ref.decision_function(Xt), rtol=1e-9, atol=1e-10)
    np.testing.assert_array_equal(inc.predict(Xt), ref.predict(Xt))
    # partial_fit after fit continues the same sums: fit on half + the other half = fit on all.
    half = len(X) // 2
    cont = classifier().fit(X[:half], y[:half]).partial_fit(X[half:], y[half:])
    np.testing.assert_allclose(cont.decision_function(Xt), ref.decision_function(Xt), rtol=1e-9, atol=1e-10)
    reg = sf.SketchRidgeRegressor(stages=[TS], alpha=0.1, random_state=3)
    Y = np.column_stack([X[:, 20], X[:, 30] * 2])
    full = reg.fit(X, Y).predict(Xt)
    parts = clone(reg)
    for i in range(0, len(X), 400):
        parts.partial_fit(X[i : i + 400], Y[i : i + 400])
    np.testing.assert_allclose(parts.predict(Xt), full, rtol=1e-9, atol=1e-10)
    assert full.shape == (len(Xt), 2)


def test_few_rows_train_in_the_dual_and_partial_fit_continues_them(digits):
    X, y, Xt, _, _, _, _ = digits
    n = 400  # at most D/2 = 512 rows: the fit keeps them and solves the 400 × 400 kernel
    few = classifier(alpha=1e-2).fit(X[:n], y[:n])
    assert few.model_.header["solver"] == "dual"
    full = classifier(alpha=1e-2).fit(X, y)
    assert full.model_.header["solver"] == "cholesky"
    # The kept rows continue like statistics: fit on 400 rows + partial_fit on the rest
    # is the fit on all rows, before and after pickling.
    cont = classifier(alpha=1e-2).fit(X[:n], y[:n]).partial_fit(X[n:], y[n:])
    np.testing.assert_allclose(cont.decision_function(Xt), full.decision_function(Xt), rtol=1e-9, atol=1e-10)
    again = pickle.loads(pickle.dumps(few))
    np.testing.assert_array_equal(again.decision_function(Xt), few.decision_function(Xt))
    again.partial_fit(X[n:], y[n:])
    np.testing.assert_allclose(again.decision_function(Xt), full.decision_function(Xt), rtol=1e-9, atol=1e-10)
    # λ by GCV runs in the dual too (its curve equals the primal one: tests/suite/api.rs).
    gcv = classifier().fit(X[:n], y[:n])
    assert gcv.model_.header["solver"] == "dual" and gcv.model_.header["gcv"] is not None


def test_accuracy_and_sklearn_protocols(digits):
    X, y, Xt, yt, _, _, _ = digits
    est = classifier(pca=256).fit(X, y)
    assert est.score(Xt, yt) > 0.97
    assert list(est.classes_) == sorted(set(y))
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.decision_function(Xt), est.decision_function(Xt))
    pipe = make_pipeline(StandardScaler(), sf.SketchRidgeClassifier(stages=[sf.RandomFourierFeatures(dim=512)], random_state=1))
    assert pipe.fit(X, y).score(Xt, yt) > 0.9
    grid = GridSearchCV(classifier(), {"alpha": [1e-4, 1.0]}, cv=2).fit(X[:600], y[:600])
    assert grid.best_params_["alpha"] in (1e-4, 1.0)
    # String labels keep their names; the model file holds them too.
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])[y]
    s = classifier().fit(X, names)
    assert set(s.predict(Xt[:50])) <= set(names) and s.model_.classes == sorted(set(names))
    # A sketch transformer as a stage equals its dict.
    a = sf.SketchRidgeClassifier(stages=[sf.TensorSketch(degree=3, offset=1.0, dim=1024, normalize="l2")], random_state=7)
    np.testing.assert_array_equal(a.fit(X, y).decision_function(Xt), classifier().fit(X, y).decision_function(Xt))


def test_every_rust_family_has_its_transformer_with_the_rust_keys():
    import inspect
    import json

    from sketchfit import sketches

    families = json.loads(_core.kinds())
    assert [f["kind"] for f in families] == list(sketches.TRANSFORMERS), "one transformer per Rust family, in order"
    for f in families:
        cls = sketches.TRANSFORMERS[f["kind"]]
        assert set(cls().get_params()) - {"random_state"} == set(f["keys"]), f["kind"]
        assert cls._nonnegative == f["nonnegative"], f["kind"]
        assert cls.__name__ in sf.__all__
        # Ordinary classes: the signature names every key, positional or by name.
        params = list(inspect.signature(cls).parameters)
        assert params == f["keys"] + ["random_state"], f["kind"]
        assert cls(*range(len(params))).get_params() == dict(zip(params, range(len(params))))
        with pytest.raises(TypeError):
            cls(no_such_key=1)
        # numpydoc: help() lists every parameter with its default and meaning.
        doc = cls.__doc__
        assert "Parameters\n----------" in doc and "random_state : " in doc, f["kind"]
        for k in f["keys"]:
            assert f"\n{k} : " in doc, (f["kind"], k)
    assert "(the pipeline file's default: 4096)" in sf.TensorSketch.__doc__
    assert "p, 1..16" in sf.TensorSketch.__doc__
    assert "exec(" not in inspect.getsource(sketches)
    # The χ² rule is the core's: a negative input is refused with its row and column.
    with pytest.raises(ValueError, match="negative"):
        sf.Chi2Series().fit(np.array([[0.5, -1.0], [0.5, 1.0]]))


def test_transformers(digits):
    X, _, Xt, _, _, _, _ = digits
    ts = sf.TensorSketch(degree=2, dim=2048, random_state=0).fit(X)
    Z = ts.transform(Xt[:40].astype(np.float64))
    assert Z.shape == (40, 2048) and Z.dtype == np.float32
    K = (Xt[:40].astype(np.float64) @ Xt[:40].T.astype(np.float64)) ** 2
    # Tensor sketch is unbiased with variance ≤ (2/D)·(‖x‖‖y‖)^4 per entry (math.md §3):
    # the mean relative error over 1,600 pairs stays far inside 6 standard errors.
    err = np.abs(Z.astype(np.float64) @ Z.T.astype(np.float64) - K) / np.outer(np.diag(K), np.diag(K)) ** 0.5
    assert err.mean() < 6 * np.sqrt(2 / 2048)
    again = pickle.loads(pickle.dumps(ts))
    np.testing.assert_array_equal(again.transform(Xt[:5]), ts.transform(Xt[:5]))
    # Nyström at M = 400 landmarks of the 1,347 rows: on the landmarks' span the kernel
    # is reproduced, so its error on unseen pairs is far below the tensor sketch's at
    # five times the features; it pickles with its landmarks and factor (data, not seed).
    ny = sf.Nystroem(degree=2, dim=400, random_state=0).fit(X)
    Zn = ny.transform(Xt[:40]).astype(np.float64)
    assert Zn.shape == (40, 400) and ny.fitted_stage_["dim"] == 400
    err_ny = np.abs(Zn @ Zn.T - K) / np.outer(np.diag(K), np.diag(K)) ** 0.5
    assert err_ny.mean() < 0.2 * err.mean(), (err_ny.mean(), err.mean())
    again = pickle.loads(pickle.dumps(ny))
    np.testing.assert_array_equal(again.transform(Xt[:5]), ny.transform(Xt[:5]))
    with pytest.raises(ValueError, match="lower dim to at most 1347"):
        sf.Nystroem(dim=2000).fit(X)
    rff = sf.RandomFourierFeatures(dim=256, random_state=0).fit(X)
    assert rff.fitted_stage_["sigma"] > 0
    pca = sf.RFPCA(n_components=16, stages=[TS], random_state=0).fit(X)
    P = pca.transform(Xt)
    assert P.shape == (len(Xt), 16)
    var = P.var(axis=0)
    assert (np.diff(var[:8]) < var[0] * 0.2).all()  # components come in decreasing variance (up to sampling)


def test_errors_carry_the_core_messages():
    rng = np.random.default_rng(1)
    X = rng.random((200, 6)).astype(np.float32)
    y = np.arange(200) % 3
    est = classifier().fit(X, y)
    bad = X.copy()
    bad[4, 2] = np.nan
    with pytest.raises(ValueError, match=r"row 4, column 'x': element 2 is NaN, not finite"):
        classifier().fit(bad, y)
    with pytest.raises(ValueError, match=r"row 4, column 'x': element 2 is NaN"):
        est.predict(bad)
    with pytest.raises(ValueError, match="X has 5 features, but SketchRidgeClassifier is expecting 6"):
        est.predict(X[:, :5])
    with pytest.raises(ValueError, match=r"label '5' is not one of the 3 classes the model was trained on \(0, 1, 2\)"):
        est.partial_fit(X, np.where(y == 2, 5, y))
    # Float labels go to the core as class indices; an unseen one is refused, not mapped.
    floats = y.astype(np.float64)
    f = classifier().fit(X, floats)
    with pytest.raises(ValueError, match="label '9.0' is not one of the 3 classes"):
        f.partial_fit(X, np.where(floats == 2.0, 9.0, floats))
    with pytest.raises(ValueError, match=r"stages\[0\]\.degree: must be an integer from 1 to 16"):
        sf.SketchRidgeClassifier(stages=[{"kind": "tensor_sketch", "degree": 0}]).fit(X, y)
    with pytest.raises(ValueError, match="negative; χ² stages need non-negative inputs"):
        sf.SketchRidgeClassifier(stages=[{"kind": "chi2"}]).fit(X - 0.5, y)
    with pytest.raises(TypeError, match="__arrow_c_stream__"):
        _core.Model.from_bytes(est.model_.to_bytes()).scores(object(), False)


def test_the_gil_is_released_while_fitting():
    X = np.random.default_rng(2).random((60000, 64)).astype(np.float32)
    y = (X[:, 0] > 0.5).astype(np.int64)
    ticks = []
    done = threading.Event()

    def fit():
        sf.SketchRidgeClassifier(stages=[{"kind": "tensor_sketch", "dim": 2048}], alpha=1.0, random_state=0).fit(X, y)
        done.set()

    t = threading.Thread(target=fit)
    t.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    t.join()
    # With the GIL held for the fit, this loop could not run until it returned.
    assert len(ticks) > 20


def test_k_fold_selection_from_python(digits):
    X, y, Xt, yt, _, _, _ = digits
    est = classifier(cv=3).fit(X, y)
    table = est.model_.header["validation"]
    assert table["folds"] == 3 and len(table["score"]) == 41
    best = max(table["score"])
    assert table["score"][table["grid"].index(table["chosen"][0])] == best
    assert est.score(Xt, yt) > 0.97
    with pytest.raises(ValueError, match="partial_fit cannot"):
        est.partial_fit(X[:10], y[:10])


def test_ecoc_decision_function_is_one_column_per_class_and_predict_is_its_argmax(digits):
    X, y, Xt, _, _, _, _ = digits
    for codes in ["ecoc", "one_vs_all"]:
        est = sf.SketchRidgeClassifier(stages=[TS], alpha=1e-3, codes=codes, random_state=7).fit(X, y)
        scores = est.decision_function(Xt)
        assert scores.shape == (len(Xt), len(est.classes_)), (codes, scores.shape)
        np.testing.assert_array_equal(est.classes_[np.argmax(scores, axis=1)], est.predict(Xt))
    # Binary one-vs-all keeps scikit-learn's one column (the second class's score).
    two = y < 5
    est = sf.SketchRidgeClassifier(stages=[TS], alpha=1e-3, random_state=7).fit(X, two)
    assert est.decision_function(Xt).shape == (len(Xt),)


def test_estimators_map_with_a_maps_file_instead_of_a_pre_pass(tmp_path, digits):
    """``maps=``: the estimator's landmarks are the maps file's (fitted on other rows),
    whatever rows it is fitted on, so estimators over different data map alike."""
    from safetensors.numpy import load_file

    _, _, _, yt, _, te, feats = digits
    # The maps name the digits' columns: the rows come as the same columns.
    rows = te.slice(0, 200).select(feats)
    text = (REPO / "pipelines" / "digits_nystrom.toml").read_text()
    text = text.replace('"../data/', f'"{REPO}/data/').replace("dim = 1024", "dim = 128")
    maps = tmp_path / "m.maps"
    sf.Pipeline(text).fit_maps([str(REPO / "data" / "digits_train.parquet")], maps)
    stages = [{"kind": "nystrom", "kernel": "polynomial", "degree": 3, "gamma": 1.0, "offset": 1.0, "dim": 128, "normalize": "l2"}]
    landmarks = load_file(str(maps))["stage0.landmarks"]
    # Stages and seed given as the maps', or left to the maps (None).
    for est in (sf.SketchRidgeClassifier(stages=stages, random_state=7, maps=maps), sf.SketchRidgeClassifier(maps=maps),
                sf.RFPCA(n_components=8, maps=maps)):
        est.fit(rows, yt[:200])
        est.model_.save(tmp_path / "m.sfm")
        np.testing.assert_array_equal(load_file(str(tmp_path / "m.sfm"))["stage0.landmarks"], landmarks)
    # Without it, the landmark map cannot be an estimator's: its landmarks would live in
    # the statistics an estimator keeps for partial_fit.
    with pytest.raises(ValueError, match="landmarks"):
        sf.SketchRidgeClassifier(stages=stages).fit(rows, yt[:200])
