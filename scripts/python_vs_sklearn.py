#!/usr/bin/env python3
"""sketchfit's Python estimator next to scikit-learn's PolynomialCountSketch +
RidgeClassifier, same data, same D, same fixed α, measured side by side in one run.

Each fit runs in its own child process, so its peak RSS (ru_maxrss) is its own; the
data are made (or read) in the child before the clock starts, and the memory the data
alone take is reported separately.

    python3 scripts/python_vs_sklearn.py              # digits and 60,000 × 784 synthetic
    python3 scripts/python_vs_sklearn.py --quick      # smaller synthetic set
"""

import argparse
import json
import multiprocessing as mp
import resource
import time

import numpy as np


def data(name, rows):
    if name == "digits":
        import pyarrow.parquet as pq

        def read(path):
            t = pq.read_table(path)
            X = np.column_stack([t.column(c).to_numpy() for c in t.column_names if c.startswith("px")]).astype(np.float32)
            return X, t.column("label").to_numpy()

        return read("data/digits_train.parquet") + read("data/digits_test.parquet")
    # Ten noisy clusters in d = 784, made in float32 blocks so that the data, not
    # their making, set the baseline memory.
    rng = np.random.default_rng(0)
    d, k = 784, 10
    centers = rng.standard_normal((k, d), dtype=np.float32)
    n = rows + 10000
    y = rng.integers(0, k, size=n)
    X = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, 4096):
        e = min(n, s + 4096)
        X[s:e] = (centers[y[s:e]] + 3.0 * rng.standard_normal((e - s, d), dtype=np.float32)) / np.float32(np.sqrt(d))
    return X[:rows], y[:rows], X[rows:], y[rows:]


def child(which, name, rows, dim, alpha, q):
    # Imports and data come first: neither the clock nor the memory baseline counts them.
    import sketchfit as sf
    from sklearn.kernel_approximation import PolynomialCountSketch
    from sklearn.linear_model import RidgeClassifier
    from sklearn.pipeline import make_pipeline

    X, y, Xt, yt = data(name, rows)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    if which == "sketchfit":
        est = sf.SketchRidgeClassifier(stages=[{"kind": "tensor_sketch", "degree": 3, "gamma": 1.0, "offset": 1.0, "dim": dim}], alpha=alpha, random_state=0)
        est.fit(X, y)
    else:
        est = make_pipeline(PolynomialCountSketch(degree=3, gamma=1.0, coef0=1.0, n_components=dim, random_state=0), RidgeClassifier(alpha=alpha))
        est.fit(X, y)
    fit = time.perf_counter() - t
    acc = float((est.predict(Xt) == yt).mean())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    q.put({"fit_s": fit, "accuracy": acc, "peak_mib": peak / 1024, "data_mib": base / 1024})


def run(which, name, rows, dim, alpha):
    q = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=child, args=(which, name, rows, dim, alpha, q))
    p.start()
    out = q.get()
    p.join()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--only", choices=["digits", "synthetic"], help="run one data set's cases")
    args = ap.parse_args()
    # The digits at D = 1024 (1,347 rows > D/2: statistics) and at D = 4096 and 8192
    # (rows ≤ D/2: the dual path), the synthetic set at D = 4096.
    cases = [("digits", 0, 1024, 1e-3), ("digits", 0, args.dim, 1e-3), ("digits", 0, 2 * args.dim, 1e-3), ("synthetic", 10000 if args.quick else 60000, args.dim, 1e-3)]
    for name, rows, dim, alpha in [c for c in cases if args.only in (None, c[0])]:
        ours = run("sketchfit", name, rows, dim, alpha)
        theirs = run("sklearn", name, rows, dim, alpha)
        print(json.dumps({"data": name, "rows": rows or 1347, "D": dim, "sketchfit": ours, "sklearn": theirs}))
        print(
            f"{name}: fit {theirs['fit_s'] / ours['fit_s']:.1f}× faster, peak memory above the data "
            f"{(ours['peak_mib'] - ours['data_mib']):.0f} vs {(theirs['peak_mib'] - theirs['data_mib']):.0f} MiB, "
            f"accuracy {ours['accuracy']:.4f} vs {theirs['accuracy']:.4f}"
        )


if __name__ == "__main__":
    main()
