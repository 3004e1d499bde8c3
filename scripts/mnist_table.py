#!/usr/bin/env python3
"""MNIST test error and `train` wall time over maps, degrees, E and output codes — the
project's version of CRAFTMaps' Table 1-b — with scikit-learn's PolynomialCountSketch +
RidgeClassifier at equal D beside it.

Every sketchfit run is a whole `train` of a pipeline made like pipelines/mnist_select.toml:
(γ⟨x,y⟩ + 1)^p on unit-length rows, fitted on the 50,000 fit rows, λ chosen by the GCV
grid scored on the 10,000 holdout rows (data.validation), refit on all 60,000 training
rows, then the test rows scored once. scikit-learn's α is chosen by RidgeClassifierCV's
leave-one-out on the 60,000 training rows. No choice sees the test rows.

    python3 scripts/mnist_table.py [--dims 4096 8192] [--degrees 3 5 7]
        [--maps ts rm rm_h craft_ts craft_rm_h] [--codes ova ecoc] [--sklearn]
        [--out target/mnist-table.jsonl] [--budget-min 60]

Each finished run is appended to --out as one JSON line and skipped when the script is
run again, so a long grid can be resumed; the table is printed from that file. A run
whose wall time would exceed --budget-min (predicted from the same map at the previous E,
four times its time, as the Gram costs n·E²) is recorded as "did not fit" without running.

Needs data/mnist/{fit,holdout,train,test}.parquet (scripts/get_mnist.py), a release
build, and for --sklearn numpy, pyarrow and scikit-learn. The scikit-learn side runs with
OpenBLAS's own kernel choice (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset), each fit in
its own process. Not run by CI.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

MAPS = {
    "ts": ("tensor sketch", 'kind = "tensor_sketch"'),
    "rm": ("random Maclaurin, H0/1", 'kind = "random_maclaurin"\nh01 = true'),
    "rm_h": ("random Maclaurin, H0/1, Hadamard", 'kind = "random_maclaurin"\nh01 = true\nhadamard = true'),
    "craft_ts": ("CRAFTMaps, TS → SRHT, up = 4E", 'kind = "craftmaps"\nup = "tensor_sketch"\ndown = "srht"'),
    "craft_rm_h": (
        "CRAFTMaps, RM H0/1 Hadamard → SRHT, up = 4E",
        'kind = "craftmaps"\nup = "random_maclaurin"\nh01 = true\nhadamard = true\ndown = "srht"',
    ),
}


def pipeline(map_key, degree, dim, codes):
    data = os.path.abspath("data/mnist")
    up = f"up_dim = {4 * dim}\n" if map_key.startswith("craft") else ""
    code = 'codes = "ecoc"\ncode_length = 200\n' if codes == "ecoc" else ""
    return f"""task = "classification"
[data]
train = ["{data}/fit.parquet"]
validation = ["{data}/holdout.parquet"]
test = ["{data}/test.parquet"]
features = ["px*"]
label = "label"
[[stages]]
{MAPS[map_key][1]}
degree = {degree}
gamma = 1.0
offset = 1.0
dim = {dim}
{up}normalize = "l2"
[ridge]
lambda = "gcv"
refit = true
{code}[run]
seed = 1
gram = "f32"
checkpoint_every = 0
"""


def run_sketchfit(binary, map_key, degree, dim, codes):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.toml")
        with open(path, "w") as f:
            f.write(pipeline(map_key, degree, dim, codes))
        t = time.perf_counter()
        out = subprocess.run(
            ["/usr/bin/time", "-f", "peak-rss-kb %M", binary, "train", "-q", path, "-o", os.path.join(tmp, "m.sfm")],
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t
    text = out.stdout + out.stderr
    if out.returncode != 0:
        sys.exit(f"sketchfit train failed ({map_key}, p = {degree}, E = {dim}, {codes}):\n{text}")
    acc = re.search(r"test accuracy[^0-9]*([0-9.]+)", text)
    lam = re.search(r"lambda = ([0-9.eE+-]+)", text)
    rss = re.search(r"peak-rss-kb (\d+)", text)
    if not acc:
        sys.exit("no test accuracy in sketchfit's output:\n" + text)
    return {
        "error": 1.0 - float(acc.group(1)),
        "wall": wall,
        "lambda": float(lam.group(1)) if lam else None,
        "rss_gib": int(rss.group(1)) / 2**20 if rss else None,
    }


def sklearn_one(degree, dim):
    """One scikit-learn fit in this process: prints error, wall and the chosen α."""
    import numpy as np
    from mnist_vs_sklearn import load  # unit-length rows and labels, as there
    from sklearn.kernel_approximation import PolynomialCountSketch
    from sklearn.linear_model import RidgeClassifierCV

    xtr, ytr = load("data/mnist/train.parquet")
    xte, yte = load("data/mnist/test.parquet")
    t = time.perf_counter()
    sketch = PolynomialCountSketch(degree=degree, gamma=1.0, coef0=1.0, n_components=dim, random_state=1).fit(xtr)
    # In blocks: the whole transform at once holds p complex spectra of every row.
    ztr = np.vstack([sketch.transform(xtr[i : i + 5000]) for i in range(0, len(xtr), 5000)])
    clf = RidgeClassifierCV(alphas=np.logspace(-3, 2, 11)).fit(ztr, ytr)
    del ztr
    pred = np.concatenate([clf.predict(sketch.transform(xte[i : i + 5000])) for i in range(0, len(xte), 5000)])
    print(json.dumps({"error": float(np.mean(pred != yte)), "wall": time.perf_counter() - t, "lambda": float(clf.alpha_)}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", type=int, nargs="+", default=[4096])
    ap.add_argument("--degrees", type=int, nargs="+", default=[3, 5, 7])
    ap.add_argument("--maps", nargs="+", default=list(MAPS), choices=list(MAPS))
    ap.add_argument("--codes", nargs="+", default=["ova", "ecoc"], choices=["ova", "ecoc"])
    ap.add_argument("--sklearn", action="store_true")
    ap.add_argument("--out", default="target/mnist-table.jsonl")
    ap.add_argument("--budget-min", type=float, default=60.0)
    ap.add_argument("--bin", default="target/release/sketchfit")
    ap.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)  # child: one scikit-learn fit
    a = ap.parse_args()
    if a.one is not None:
        sklearn_one(*a.one)
        return
    done = {}
    if os.path.exists(a.out):
        with open(a.out) as f:
            for line in f:
                r = json.loads(line)
                done[(r["map"], r["degree"], r["dim"], r["codes"])] = r

    def record(r):
        done[(r["map"], r["degree"], r["dim"], r["codes"])] = r
        with open(a.out, "a") as f:
            f.write(json.dumps(r) + "\n")
        err = "did not fit" if r.get("skipped") else f"{100 * r['error']:.2f} %"
        wall = "" if r.get("skipped") else f" in {r['wall']:.0f} s"
        print(f"{r['map']:>10} p={r['degree']} E={r['dim']:>6} {r['codes']:>4}: {err}{wall}", flush=True)

    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    for dim in sorted(a.dims):
        for degree in a.degrees:
            if a.sklearn and ("sklearn", degree, dim, "ova") not in done:
                cmd = [sys.executable, __file__, "--one", str(degree), str(dim)]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                record({"map": "sklearn", "degree": degree, "dim": dim, "codes": "ova", **json.loads(out)})
            for m in a.maps:
                for codes in a.codes:
                    key = (m, degree, dim, codes)
                    if key in done:
                        continue
                    prev = done.get((m, degree, dim // 2, codes))
                    if prev and (prev.get("skipped") or 4 * prev["wall"] > 60 * a.budget_min):
                        record({"map": m, "degree": degree, "dim": dim, "codes": codes, "skipped": True})
                        continue
                    record({"map": m, "degree": degree, "dim": dim, "codes": codes, **run_sketchfit(a.bin, *key)})
    print_table(done, a)


def print_table(done, a):
    dims = sorted(a.dims)
    print("\n| map | p | codes | " + " | ".join(f"E = {d}" for d in dims) + " |")
    print("|---|---|---|" + "---|" * len(dims))
    for m in (["sklearn"] if a.sklearn else []) + a.maps:
        name = "scikit-learn PolynomialCountSketch + RidgeClassifierCV" if m == "sklearn" else MAPS[m][0]
        for degree in a.degrees:
            for codes in ["ova"] if m == "sklearn" else a.codes:
                cells = []
                for d in dims:
                    r = done.get((m, degree, d, codes))
                    if r is None:
                        cells.append("not run")
                    elif r.get("skipped"):
                        cells.append("did not fit")
                    else:
                        cells.append(f"{100 * r['error']:.2f} % ({r['wall']:.0f} s)")
                label = "one-vs-all" if codes == "ova" else "ECOC 200"
                print(f"| {name} | {degree} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
