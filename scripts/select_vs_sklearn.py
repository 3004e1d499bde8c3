#!/usr/bin/env python3
"""How λ is chosen, on the same features: sketchfit's GCV, held-out files and k-fold
(each refitted on all rows) next to scikit-learn's RidgeClassifierCV over the same λ
grid on the very same random features (sketchfit's TensorSketch transformer gives the
pipeline stage's z(x) for the same seed). One run; test accuracy on held-out rows.

    python3 scripts/select_vs_sklearn.py            # digits and a 60,000-row synthetic set
    python3 scripts/select_vs_sklearn.py --quick    # 12,000 synthetic rows
"""

import argparse
import os
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.linear_model import RidgeClassifierCV

import sketchfit as sf

STAGE = {"kind": "tensor_sketch", "degree": 3, "gamma": 1.0, "offset": 1.0, "dim": 4096, "normalize": "l2"}


def digits():
    def read(path):
        t = pq.read_table(path)
        X = np.column_stack([t.column(c).to_numpy() for c in t.column_names if c.startswith("px")]).astype(np.float32)
        return X, t.column("label").to_numpy()

    return read("data/digits_train.parquet") + read("data/digits_test.parquet")


def synthetic(rows):
    rng = np.random.default_rng(0)
    d, k = 784, 10
    centers = rng.standard_normal((k, d), dtype=np.float32)
    n = rows + 10000
    y = rng.integers(0, k, size=n)
    X = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, 4096):
        e = min(n, s + 4096)
        X[s:e] = np.maximum(centers[y[s:e]] + 3.0 * rng.standard_normal((e - s, d), dtype=np.float32), 0)
    return X[:rows], y[:rows], X[rows:], y[rows:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    for name, (X, y, Xt, yt) in [("digits", digits()), ("synthetic", synthetic(12000 if args.quick else 60000))]:
        row = {}
        for label, kw in [("GCV", {}), ("5-fold", {"cv": 5})]:
            t = time.perf_counter()
            est = sf.SketchRidgeClassifier(stages=[STAGE], random_state=0, **kw).fit(X, y)
            row[label] = (est.score(Xt, yt), time.perf_counter() - t, est.model_.header["lambdas"][0])
        # Held-out: the last fifth of the training rows as a validation file, then the refit.
        cut = len(X) * 4 // 5
        with tempfile.TemporaryDirectory() as tmp:
            val = os.path.join(tmp, "val.parquet")
            pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X[cut:].reshape(-1)), X.shape[1]), "label": y[cut:].astype(np.int64)}), val)
            t = time.perf_counter()
            est = sf.SketchRidgeClassifier(stages=[STAGE], validation=[val], random_state=0).fit(X[:cut], y[:cut])
            row["held-out + refit"] = (est.score(Xt, yt), time.perf_counter() - t, est.model_.header["lambdas"][0])
        grid = est.model_.header["validation"]["grid"]
        t = time.perf_counter()
        ts = sf.TensorSketch(**{k: v for k, v in STAGE.items() if k != "kind"}, random_state=0).fit(X)
        Z, Zt = ts.transform(X).astype(np.float64), ts.transform(Xt).astype(np.float64)
        # Every 4th λ of the grid: RidgeClassifierCV's leave-one-out costs n·D² per λ when
        # n > D (the whole grid at 60,000 × 4096 did not finish in 15 minutes here).
        alphas = grid if len(X) < STAGE["dim"] else grid[::4]
        sk = RidgeClassifierCV(alphas=alphas).fit(Z, y)
        row[f"sklearn RidgeClassifierCV (LOO, {len(alphas)} λ), same z(x)"] = (sk.score(Zt, yt), time.perf_counter() - t, sk.alpha_)
        print(f"{name} ({len(X)} train / {len(Xt)} test rows, D = {STAGE['dim']}):")
        for k, (acc, secs, lam) in row.items():
            print(f"  {k:50s} accuracy {acc:.4f}  λ {lam:.3e}  {secs:6.1f} s", flush=True)


if __name__ == "__main__":
    main()
