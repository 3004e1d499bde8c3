"""The Spark and Ray recipes of docs/src/guide/python.md, run: each engine's partitions accumulate their
statistics with the library, the driver merges them, and the model is the one-process
model to 1e-10. Both engines run on this machine only (Spark in local[2] on loopback,
Ray with two CPUs, no dashboard, usage statistics off)."""

import functools
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sketchfit as sf

TEXT = """
task = "classification"
[data]
train = []
features = ["f*"]
label = "label"
[[stages]]
kind = "rff"
dim = 512
[ridge]
lambda = 0.01
[run]
seed = 11
"""


# The landmark map, which shards over a maps file fitted once.
LANDMARKS = TEXT.replace('kind = "rff"\ndim = 512', 'kind = "nystrom"\nkernel = "gaussian"\ndim = 256')


def _parts(tmp_path, files=3, rows=3000, d=12, seed=5):
    rng = np.random.default_rng(seed)
    out = []
    for f in range(files):
        X = rng.normal(size=(rows, d)).astype(np.float32)
        y = np.where(X[:, 0] * X[:, 1] + 0.3 * X[:, 2] > 0, 1, 0).astype(np.int64)
        t = pa.table({**{f"f{j}": X[:, j] for j in range(d)}, "label": y})
        path = tmp_path / f"part-{f}.parquet"
        pq.write_table(t, path, row_group_size=1000)
        out.append(str(path))
    return out


def _close(model, single, files):
    probe = pq.read_table(files[0]).drop(["label"])
    a, b = model.decision_function(probe), single.decision_function(probe)
    assert a.shape == b.shape and np.all(np.isfinite(a))
    assert np.max(np.abs(a - b)) <= 1e-10 * max(1.0, np.max(np.abs(b)))
    np.testing.assert_array_equal(model.predict(probe), single.predict(probe))


@pytest.mark.parametrize("landmarks", [False, True], ids=["rff", "nystrom-over-maps"])
def test_spark_map_in_arrow_partitions_merge_to_the_one_process_model(tmp_path, monkeypatch, landmarks):
    import pyspark
    from pyspark.sql import SparkSession

    files = _parts(tmp_path)
    text, maps = TEXT, None
    if landmarks:
        # Beside the data folder, which Spark reads whole.
        text, maps = LANDMARKS, f"{tmp_path}-landmarks.maps"
        sf.Pipeline(text, classes=[0, 1]).fit_maps(files, maps)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sketchfit-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.files.maxPartitionBytes", str(64 << 10))  # several partitions from three files
        .getOrCreate()
    )
    try:
        pipe = sf.Pipeline(text, classes=[0, 1], maps=maps)
        df = spark.read.parquet(str(tmp_path))
        n = df.rdd.getNumPartitions()
        assert n >= 2
        # The recipe as the Python guide gives it: the parameters fitted once on a sample, one
        # empty copy per partition, one part per partition, merged on the driver.
        base = sf.Statistics.accumulate(pipe, pq.read_table(files[0]).slice(0, 500))

        def accumulate(batches):
            i = pyspark.TaskContext.get().partitionId()
            stats = base.empty_like((i, n))
            for b in batches:
                stats.add(pipe, b)
            yield pa.record_batch({"part": [stats.to_bytes()]})

        rows = df.mapInArrow(accumulate, "part binary").collect()
        parts = [sf.Statistics.from_bytes(bytes(r.part)) for r in rows]
        assert sorted(s for p in parts for s in p.shards) == list(range(n))
        model = functools.reduce(lambda a, b: a.merge(b), parts).solve(pipe)
    finally:
        spark.stop()
    whole = pa.concat_tables([pq.read_table(f) for f in files])
    single = base.empty_like((0, 1)).add(pipe, whole).solve(pipe)
    assert model.header["rows"] == single.header["rows"] == 9000
    _close(model, single, files)


def _ray_part(text, files, i, n, maps=None):
    return sf.Statistics.accumulate(sf.Pipeline(text, classes=[0, 1], maps=maps), files, shard=(i, n)).to_bytes()


@pytest.mark.parametrize("landmarks", [False, True], ids=["rff", "nystrom-over-maps"])
def test_ray_tasks_over_shards_merge_to_the_one_process_model(tmp_path, monkeypatch, landmarks):
    import ray
    files = _parts(tmp_path, seed=6)
    text, maps = TEXT, None
    if landmarks:
        # The landmark map shards only over a maps file: fitted once, read by every task.
        text, maps = LANDMARKS, str(tmp_path / "landmarks.maps")
        digest = sf.Pipeline(text, classes=[0, 1]).fit_maps(files, maps)
        assert len(digest) == 16
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("RAY_DISABLE_DOCKER_CPU_WARNING", "1")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=100 << 20,
        _node_ip_address="127.0.0.1",
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}},
    )
    try:
        n = 5
        part = ray.remote(_ray_part)
        blobs = ray.get([part.remote(text, files, i, n, maps) for i in range(n)])
    finally:
        ray.shutdown()
    parts = [sf.Statistics.from_bytes(b) for b in blobs]
    pipe = sf.Pipeline(text, classes=[0, 1], maps=maps)
    model = functools.reduce(lambda a, b: a.merge(b), parts).solve(pipe)
    single = pipe.fit(files)
    _close(model, single, files)
    if landmarks:
        # A shard given twice would count its rows twice: refused, naming the input.
        with pytest.raises(ValueError, match="counted twice"):
            parts[0].merge(sf.Statistics.from_bytes(blobs[0]))
