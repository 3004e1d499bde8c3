#!/usr/bin/env python3
"""The landmark map sharded on MNIST: one maps file (`fit-maps`), then the model of one
process (`train --maps`) against the model of four `accumulate --maps --shard i/4` parts
merged by `solve`, and against Spark `local[2]` partitions accumulating over the same maps
(the Python guide's recipe, each partition's part saved to a file). Prints the relative
difference of the test rows' scores and the test predictions that differ, with each step's wall.

    python3 scripts/mnist_shards.py [--dim 8192] [--shards 4] [--gram f64] [--bin target/release/sketchfit] [--no-spark]

`--gram f64` (the default here) makes the sums independent of where the chunks end;
with `mnist.toml`'s f32 Gram products, partitions that cut the rows into other blocks
than the command's row groups round differently (about 1e-6 of the scores).

Needs data/mnist/{train,test}.parquet (scripts/get_mnist.py); Spark needs pyspark and a
Java runtime, and the sketchfit Python package of the same build.
"""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent


def run(*args):
    start = time.monotonic()
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))} failed ({r.returncode}):\n{r.stderr}")
    return time.monotonic() - start


def compare(name, a, b, test):
    """The largest difference of the test rows' scores, relative to the largest score, and
    the test predictions that differ."""
    import pyarrow.parquet as pq

    probe = pq.read_table(test).drop(["label"])
    sa, sb = a.decision_function(probe), b.decision_function(probe)
    rel = float(np.max(np.abs(sa - sb)) / np.max(np.abs(sb)))
    differ = int(np.sum(a.predict(probe) != b.predict(probe)))
    print(f"{name}: test scores relative difference {rel:.2e}, test predictions differing {differ}")
    return rel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=8192)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "sketchfit"))
    ap.add_argument("--gram", choices=["f32", "f64"], default="f64")
    ap.add_argument("--no-spark", action="store_true")
    a = ap.parse_args()
    train, test = REPO / "data" / "mnist" / "train.parquet", REPO / "data" / "mnist" / "test.parquet"
    if not train.exists():
        sys.exit("no data/mnist/train.parquet: run python3 scripts/get_mnist.py first")
    work = pathlib.Path(tempfile.mkdtemp(prefix="mnist-shards-"))
    job = work / "job.toml"
    text = (REPO / "pipelines" / "mnist.toml").read_text().replace('"../data/', f'"{REPO}/data/')
    job.write_text(text)
    text = text.replace('gram = "f32"', f'gram = "{a.gram}"')
    job.write_text(text)
    dim = f"stages.0.dim={a.dim}"
    maps = work / "m.maps"
    print(f"fit-maps, M = {a.dim}: {run(a.bin, 'fit-maps', job, '--set', dim, '-o', maps, '-q'):.1f} s")
    one = work / "one.sfm"
    print(f"one process (train --maps): {run(a.bin, 'train', job, '--set', dim, '--maps', maps, '-o', one, '-q'):.1f} s")
    parts, wall = [], 0.0
    for i in range(a.shards):
        part = work / f"part-{i}.sfs"
        wall += run(a.bin, "accumulate", job, "--set", dim, "--maps", maps, "-i", train,
                    "--shard", f"{i}/{a.shards}", "-o", part, "-q")
        parts.append(part)
    merged = work / "shards.sfm"
    solve = run(a.bin, "solve", job, *parts, "--set", dim, "--maps", maps, "-o", merged, "-q")
    print(f"{a.shards} shards in turn: accumulate {wall:.1f} s, solve {solve:.1f} s")

    import sketchfit as sf

    def load(path):
        return sf.Model.load(str(path))

    compare(f"{a.shards} shards vs one process", load(merged), load(one), test)
    if a.no_spark:
        return
    spark_model = spark(sf, text.replace("dim = 28672", f"dim = {a.dim}"), maps, train, work, a.shards)
    compare("Spark local[2] vs one process", spark_model, load(one), test)


def spark(sf, text, maps, train, work, shards):
    import pyspark
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    size = train.stat().st_size
    session = (
        SparkSession.builder.master("local[2]")
        .appName("sketchfit-mnist-shards")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.files.maxPartitionBytes", str(size // shards + 1))
        .getOrCreate()
    )
    start = time.monotonic()
    try:
        pipe = sf.Pipeline(text, maps=str(maps))
        df = session.read.parquet(str(train))
        n = df.rdd.getNumPartitions()
        base = sf.Statistics.accumulate(pipe, pq.read_table(train).slice(0, 100))
        folder = str(work)

        def accumulate(batches):
            i = pyspark.TaskContext.get().partitionId()
            stats = base.empty_like((i, n))
            for b in batches:
                stats.add(pipe, b)
            path = f"{folder}/spark-{i}.sfs"
            stats.save(path)
            yield pa.record_batch({"path": [path]})

        paths = [r.path for r in df.mapInArrow(accumulate, "path string").collect()]
    finally:
        session.stop()
    parts = [sf.Statistics.load(p) for p in paths]
    total = parts[0]
    for p in parts[1:]:
        total.merge(p)
    model = total.solve(pipe)
    print(f"Spark local[2], {n} partitions: {time.monotonic() - start:.1f} s")
    return model


if __name__ == "__main__":
    main()
