"""Python and the command line read each other's files, and sharded statistics reduced
on an engine (Dask on a local cluster) give the single-process model."""

import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sketchfit as sf

from conftest import REPO

PIPELINE = """
task = "classification"
[data]
train = ["{train}"]
features = ["px*"]
label = "label"
[[stages]]
kind = "tensor_sketch"
degree = 3
offset = 1.0
dim = 1024
normalize = "l2"
[pca]
components = 256
[ridge]
lambda = "gcv"
[run]
seed = 7
"""


@pytest.fixture()
def pipeline_file(tmp_path):
    p = tmp_path / "digits.toml"
    p.write_text(PIPELINE.format(train=REPO / "data" / "digits_train.parquet"))
    return p


def test_cli_and_python_give_the_same_model(cli, digits, pipeline_file, tmp_path):
    X, y, Xt, yt, train, test, feats = digits
    cli("train", pipeline_file, "-o", tmp_path / "cli.sfm", "--quiet")
    from_cli = sf.Model.load(tmp_path / "cli.sfm")
    # The same pipeline, data and seed in Python, on the same file: the same model.
    est = sf.SketchRidgeClassifier(
        stages=[{"kind": "tensor_sketch", "degree": 3, "offset": 1.0, "dim": 1024, "normalize": "l2"}],
        pca=256,
        random_state=7,
    ).fit(str(REPO / "data" / "digits_train.parquet"), "label")
    test_x = test.select(feats)
    np.testing.assert_array_equal(est.decision_function(test_x), from_cli.decision_function(test_x))
    # On the rows in memory (other chunking, so other rounding): the same predictions.
    mem = sf.SketchRidgeClassifier(stages=est.stages, pca=256, random_state=7).fit(train.select(feats), y)
    np.testing.assert_array_equal(mem.predict(test_x), from_cli.predict(test_x))
    np.testing.assert_allclose(mem.decision_function(test_x), from_cli.decision_function(test_x), rtol=1e-6, atol=1e-8)
    # Python's model file, read by the CLI: its predictions are Python's.
    est.save(tmp_path / "py.sfm")
    cli("predict", tmp_path / "py.sfm", "--input", REPO / "data" / "digits_test.parquet", "--output", tmp_path / "pred.parquet")
    pred = pq.read_table(tmp_path / "pred.parquet").column("prediction").to_numpy()
    np.testing.assert_array_equal(pred, est.predict(test_x))
    assert (pred == yt).mean() > 0.97


def test_statistics_files_move_both_ways(cli, pipeline_file, tmp_path, digits):
    _, _, _, _, _, test, feats = digits
    pipe = sf.Pipeline.load(pipeline_file)
    files = [str(REPO / "data" / "digits_train.parquet")]
    # Python writes shard 0, the CLI shard 1; each solver merges both.
    sf.Statistics.accumulate(pipe, files, shard=(0, 2)).save(tmp_path / "p0.stats")
    cli("accumulate", pipeline_file, "--shard", "1/2", "-o", tmp_path / "p1.stats")
    cli("solve", pipeline_file, tmp_path / "p0.stats", tmp_path / "p1.stats", "-o", tmp_path / "cli.sfm")
    merged = sf.Statistics.load(tmp_path / "p0.stats").merge(sf.Statistics.load(tmp_path / "p1.stats"))
    assert merged.shards == [0, 1]
    py_model = merged.solve(pipe)
    cli_model = sf.Model.load(tmp_path / "cli.sfm")
    x = test.select(feats)
    np.testing.assert_array_equal(py_model.decision_function(x), cli_model.decision_function(x))
    with pytest.raises(ValueError, match="shard 1/2 is in both"):
        merged.merge(sf.Statistics.load(tmp_path / "p1.stats"))
    one = sf.Pipeline.load(pipeline_file).fit(files)
    np.testing.assert_allclose(py_model.decision_function(x), one.decision_function(x), rtol=1e-10, atol=1e-12)


def _shard(pipeline_text, files, i, n, maps=None):
    import sketchfit as sf

    return sf.Statistics.accumulate(sf.Pipeline(pipeline_text, maps=maps), files, shard=(i, n))


def _merge(a, b):
    return a.merge(b)


@pytest.mark.parametrize("landmarks", [False, True], ids=["rff", "nystrom-over-maps"])
def test_dask_tree_merge_equals_one_process(tmp_path, landmarks):
    """The Python guide's Dask recipe, on a local cluster of two worker processes; the
    landmark map shards over a maps file fitted once."""
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(5)
    files = []
    for f in range(3):
        X = rng.normal(size=(3000, 12)).astype(np.float32)
        y = np.where(X[:, 0] * X[:, 1] + 0.3 * X[:, 2] > 0, "pos", "neg")
        t = pa.table({**{f"f{j}": X[:, j] for j in range(12)}, "label": y})
        path = tmp_path / f"part-{f}.parquet"
        pq.write_table(t, path, row_group_size=1000)
        files.append(str(path))
    text = """
task = "classification"
[data]
train = []
label = "label"
[[stages]]
kind = "rff"
dim = 512
[ridge]
lambda = "gcv"
[run]
seed = 11
"""
    maps = None
    if landmarks:
        text = text.replace('kind = "rff"\ndim = 512', 'kind = "nystrom"\nkernel = "gaussian"\ndim = 256')
        maps = str(tmp_path / "landmarks.maps")
        sf.Pipeline(text).fit_maps(files, maps)
    n = 5
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, distributed.Client(cluster):
        parts = [dask.delayed(_shard)(text, files, i, n, maps) for i in range(n)]
        while len(parts) > 1:  # a tree of pairwise merges
            parts = [dask.delayed(_merge)(parts[k], parts[k + 1]) if k + 1 < len(parts) else parts[k] for k in range(0, len(parts), 2)]
        stats = parts[0].compute()
    assert sorted(stats.shards) == list(range(n)) and stats.rows == 9000
    model = stats.solve(sf.Pipeline(text, maps=maps))
    single = sf.Pipeline(text, maps=maps).fit(files)
    probe = pq.read_table(files[0]).drop(["label"])
    a, b = model.decision_function(probe), single.decision_function(probe)
    assert np.max(np.abs(a - b)) <= 1e-10 * max(1.0, np.max(np.abs(b)))


def test_partitions_with_fixed_parameters_merge(digits):
    """The Ray / Spark recipe: fit the parameters once, one empty copy per partition."""
    X, y, Xt, _, _, _, _ = digits
    from sketchfit._inputs import numpy_table, with_columns

    def table(Xp, yp):
        t, _ = numpy_table(Xp)
        return with_columns(t, {"label": pa.array(yp.astype(np.int64))})

    text = 'task = "classification"\n[data]\ntrain = []\nfeature_list = "x"\nlabel = "label"\n[[stages]]\nkind = "rff"\ndim = 512\n[ridge]\nlambda = 0.01\n[run]\nseed = 3\n'
    pipe = sf.Pipeline(text, classes=sorted(set(y.tolist())))
    base = sf.Statistics.accumulate(pipe, table(X[:300], y[:300]))
    parts = []
    for i, idx in enumerate(np.array_split(np.arange(len(X)), 4)):
        parts.append(base.empty_like((i, 4)).add(pipe, table(X[idx], y[idx])))
    total = parts[0]
    for p in parts[1:]:
        total.merge(p)
    whole = base.empty_like((0, 1)).add(pipe, table(X, y))
    probe, _ = numpy_table(Xt)
    np.testing.assert_allclose(total.solve(pipe).decision_function(probe), whole.solve(pipe).decision_function(probe), rtol=1e-9, atol=1e-11)
    with pytest.raises(ValueError, match="shards \\[3\\] of 4 are missing"):
        parts[0].empty_like((0, 4)).add(pipe, table(X, y)).merge(parts[1]).merge(parts[2]).solve(pipe)


def test_days_over_maps_solve_weighted(tmp_path):
    """``Pipeline.solve`` over parts of one maps file: a weight of 2 is the day counted
    twice (its file copied), and ``decay`` and ``weights`` are refused together."""
    text = (REPO / "pipelines" / "digits_nystrom.toml").read_text()
    text = text.replace('"../data/', f'"{REPO}/data/').replace("dim = 1024", "dim = 128")
    maps = str(tmp_path / "m.maps")
    sf.Pipeline(text).fit_maps([str(REPO / "data" / "digits_train.parquet")], maps)
    pipe = sf.Pipeline(text, maps=maps)
    day1, day2 = REPO / "data" / "digits_test_0to4.parquet", REPO / "data" / "digits_test_5to9.parquet"
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(day1.read_bytes())
    parts = {k: sf.Statistics.accumulate(pipe, [str(f)]) for k, f in (("a", day1), ("copy", copy), ("b", day2))}
    weighted = pipe.solve([parts["a"], parts["b"]], weights=[2, 1])
    twice = pipe.solve([parts["a"], parts["copy"], parts["b"]])
    probe = pq.read_table(day2).drop(["label"])
    a, b = weighted.decision_function(probe), twice.decision_function(probe)
    assert np.max(np.abs(a - b)) <= 1e-9 * np.max(np.abs(b))
    decayed = pipe.solve([parts["a"], parts["b"]], decay=1.0).decision_function(probe)
    assert np.max(np.abs(decayed - pipe.solve([parts["a"], parts["b"]], weights=[0.5, 1]).decision_function(probe))) == 0
    with pytest.raises(ValueError, match="not both"):
        pipe.solve([parts["a"], parts["b"]], decay=1.0, weights=[1, 1])
    with pytest.raises(ValueError, match="1 weight"):
        pipe.solve([parts["a"], parts["b"]], weights=[1])


def test_model_file_roundtrip_and_damage(tmp_path, digits):
    X, y, Xt, _, _, _, _ = digits
    est = sf.SketchRidgeClassifier(stages=[{"kind": "rff", "dim": 256}], random_state=0).fit(X, y)
    est.save(tmp_path / "m.sfm")
    m = sf.Model.load(tmp_path / "m.sfm")
    np.testing.assert_array_equal(m.decision_function(Xt), est.decision_function(Xt))
    raw = bytearray((tmp_path / "m.sfm").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    pathlib.Path(tmp_path / "bad.sfm").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="checksum|not a valid|damaged"):
        sf.Model.load(tmp_path / "bad.sfm")


def test_numpy_rows_score_as_the_arrow_way(digits):
    """A model trained on named columns scores a NumPy array as the same rows handed over
    whole (no per-column gather): the same bits as the Arrow table of those columns, for
    float32 or float64, and the Arrow way's message for a value it cannot take."""
    X, y, Xt, _, _, te, feats = digits
    text = PIPELINE.format(train=REPO / "data" / "digits_train.parquet")
    model = sf.Pipeline(text).fit([str(REPO / "data" / "digits_train.parquet")])
    named = te.select(feats)
    for fn in ("decision_function", "predict", "transform"):
        arrow = getattr(model, fn)(named)
        np.testing.assert_array_equal(getattr(model, fn)(Xt), arrow, err_msg=fn)
        np.testing.assert_array_equal(getattr(model, fn)(Xt.astype(np.float64)), arrow, err_msg=fn)
        np.testing.assert_array_equal(getattr(model, fn)(np.asfortranarray(Xt)), arrow, err_msg=fn)
    assert (model.predict(Xt) == te.column("label").to_numpy()).mean() > 0.9
    bad = Xt.copy()
    bad[4, 2] = np.nan
    with pytest.raises(ValueError, match=r"row 4, column 'px2'.*NaN"):
        model.predict(bad)
    with pytest.raises(ValueError, match="features"):
        model.predict(Xt[:, :10])


def test_one_version_in_cargo_the_command_line_and_the_package(cli):
    """`Cargo.toml`, `sketchfit --version`, the Python package's `__version__` and the
    changelog's latest release agree."""
    import re
    import sketchfit as sf

    cargo = re.search(r'^version = "([^"]+)"', (REPO / "Cargo.toml").read_text(), re.M).group(1)
    assert cli("--version").split() == ["sketchfit", cargo]
    assert sf.__version__ == cargo
    assert re.search(r'^version = "([^"]+)"', (REPO / "python" / "pyproject.toml").read_text(), re.M).group(1) == cargo
    assert f"## [{cargo}]" in (REPO / "CHANGELOG.md").read_text()
