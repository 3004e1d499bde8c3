#!/usr/bin/env python3
"""Per-feature accuracy on MNIST: sketchfit's tensor sketch against scikit-learn's
PolynomialCountSketch (or, with --map nystrom, sketchfit's Nyström stage against
scikit-learn's Nystroem), both feeding a ridge classifier, at equal D over several seeds
each, with Welch's two-sample t-test on the test errors.

Both sides use the same kernel ((<x,y> + 1)^p on unit-length rows: p = 3 for the sketches,
7 for the landmark maps, the pipelines' kernel), the same D, and the same fixed ridge α
(λ on the sum of squares, ±1 one-vs-all targets with an unpenalised intercept:
RidgeClassifier's objective), chosen before this comparison and never on the test rows.
Only the map differs (for the landmark maps: which rows are drawn, and scikit-learn's
K_MM^(-1/2) by an SVD against sketchfit's Cholesky factor, which give the same ridge model
on the same landmarks), so a gap in the mean error is the maps'.

    python3 scripts/mnist_vs_sklearn.py [--dim 8192] [--seeds 5] [--first-seed 1] [--alpha 0.1]
    python3 scripts/mnist_vs_sklearn.py --map nystrom --degree 7 --alpha 5.3769e-3

Needs data/mnist/{train,test}.parquet (scripts/get_mnist.py) and a release build. Run
the scikit-learn side with OpenBLAS's own kernel choice (OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset); each fit runs in its own process.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np


def load(path):
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    cols = [c for c in t.column_names if c.startswith("px")]
    x = np.column_stack([t.column(c).to_numpy() for c in cols]).astype(np.float64)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
    return x, t.column("label").to_numpy()


def sklearn_error(dim, seed, alpha, kind="tensor_sketch", degree=3):
    from sklearn.kernel_approximation import Nystroem, PolynomialCountSketch
    from sklearn.linear_model import RidgeClassifier

    xtr, ytr = load("data/mnist/train.parquet")
    xte, yte = load("data/mnist/test.parquet")
    t = time.perf_counter()
    if kind == "nystrom":
        sketch = Nystroem(
            kernel="polynomial", degree=degree, gamma=1.0, coef0=1.0, n_components=dim, random_state=seed
        ).fit(xtr)
    else:
        sketch = PolynomialCountSketch(
            degree=degree, gamma=1.0, coef0=1.0, n_components=dim, random_state=seed
        ).fit(xtr)
    # In blocks: the whole transform at once holds three complex spectra of every row.
    ztr = np.vstack([sketch.transform(xtr[i : i + 5000]) for i in range(0, len(xtr), 5000)])
    clf = RidgeClassifier(alpha=alpha, solver="cholesky").fit(ztr, ytr)
    del ztr
    pred = np.concatenate([clf.predict(sketch.transform(xte[i : i + 5000])) for i in range(0, len(xte), 5000)])
    return float(np.mean(pred != yte)), time.perf_counter() - t


def sketchfit_error(dim, seed, alpha, binary, kind="tensor_sketch", degree=3):
    spec = f"""[data]
train = ["{os.path.abspath('data/mnist/train.parquet')}"]
test = ["{os.path.abspath('data/mnist/test.parquet')}"]
features = ["px*"]
label = "label"
[[stages]]
kind = "{kind}"
degree = {degree}
gamma = 1.0
offset = 1.0
dim = {dim}
normalize = "l2"
[ridge]
lambda = {alpha}
[run]
seed = {seed}
checkpoint_every = 0
"""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ts.toml")
        with open(path, "w") as f:
            f.write(spec)
        t = time.perf_counter()
        out = subprocess.run(
            [binary, "train", path, "-o", os.path.join(tmp, "m.sfm")], capture_output=True, text=True, check=True
        )
        wall = time.perf_counter() - t
    m = re.search(r"test accuracy[^0-9]*([0-9.]+)", out.stdout + out.stderr)
    if not m:
        sys.exit("no test accuracy in sketchfit's output:\n" + out.stdout + out.stderr)
    return 1.0 - float(m.group(1)), wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=8192)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--map", choices=["tensor_sketch", "nystrom"], default="tensor_sketch")
    ap.add_argument("--degree", type=int, help="default 3 (tensor_sketch), 7 (nystrom)")
    ap.add_argument("--bin", default="target/release/sketchfit")
    ap.add_argument("--side", choices=["both", "sklearn", "sketchfit"], default="both")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child: one scikit-learn fit
    a = ap.parse_args()
    degree = a.degree or (7 if a.map == "nystrom" else 3)
    names = {"tensor_sketch": ("tensor sketch", "PolynomialCountSketch"), "nystrom": ("Nyström", "Nystroem")}[a.map]
    if a.one is not None:
        err, wall = sklearn_error(a.dim, a.one, a.alpha, a.map, degree)
        print(f"{err!r} {wall!r}")
        return
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    ours, theirs = [], []
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        if a.side in ("both", "sketchfit"):
            err, wall = sketchfit_error(a.dim, seed, a.alpha, a.bin, a.map, degree)
            ours.append(err)
            print(f"sketchfit {names[0]} p={degree} D={a.dim} seed {seed}: test error {100 * err:.2f} %  ({wall:.0f} s)", flush=True)
        if a.side in ("both", "sklearn"):
            cmd = [sys.executable, __file__, "--dim", str(a.dim), "--alpha", str(a.alpha), "--one", str(seed)]
            cmd += ["--map", a.map, "--degree", str(degree)]
            err, wall = map(float, subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.split())
            theirs.append(err)
            print(f"scikit-learn {names[1]} p={degree} D={a.dim} seed {seed}: test error {100 * err:.2f} %  ({wall:.0f} s)", flush=True)
    for name, v in (("sketchfit", ours), ("scikit-learn", theirs)):
        if v:
            print(f"{name}: mean {100 * np.mean(v):.3f} %, sd {100 * np.std(v, ddof=1) if len(v) > 1 else 0:.3f} over {len(v)} seeds")
    if len(ours) > 1 and len(theirs) > 1:
        from scipy.stats import ttest_ind

        t = ttest_ind(ours, theirs, equal_var=False)
        print(f"Welch two-sample t-test: t = {t.statistic:.2f}, p = {t.pvalue:.3f} (difference of means {100 * (np.mean(ours) - np.mean(theirs)):+.3f} points)")


if __name__ == "__main__":
    main()
