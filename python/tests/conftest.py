import os
import pathlib
import subprocess

import numpy as np
import pyarrow.parquet as pq
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli():
    """The command line binary (``SKETCHFIT_BIN``, or the workspace's debug build, made
    here if it is missing): the interop tests need it and fail without it."""
    path = os.environ.get("SKETCHFIT_BIN") or str(REPO / "target" / "debug" / "sketchfit")
    if not os.path.exists(path):
        subprocess.run(["cargo", "build", "--quiet", "--bin", "sketchfit"], cwd=REPO, check=True)
    assert os.path.exists(path), f"no sketchfit binary at {path}"

    def run(*args):
        r = subprocess.run([path, *map(str, args)], capture_output=True, text=True)
        assert r.returncode == 0, f"sketchfit {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}"
        return r.stdout

    return run


@pytest.fixture(scope="session")
def digits():
    """The shipped digits (the CLI's main job data): train and test, features and labels."""
    tr = pq.read_table(REPO / "data" / "digits_train.parquet")
    te = pq.read_table(REPO / "data" / "digits_test.parquet")
    feats = [c for c in tr.column_names if c.startswith("px")]

    def split(t):
        X = np.column_stack([t.column(c).to_numpy() for c in feats]).astype(np.float32)
        return X, t.column("label").to_numpy()

    return split(tr) + split(te) + (tr, te, feats)
