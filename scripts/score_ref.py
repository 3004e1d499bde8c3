#!/usr/bin/env python3
"""References for the scoring benchmark (scripts/bench.sh, section "score").

    score_ref.py FILE D TRAIN

Prints, for the Parquet FILE of `px*` f32 columns: pyarrow's read of the whole file (the
decoding floor), and scikit-learn's PolynomialCountSketch(degree=3, coef0=1) at D
features with RidgeClassifier, fitted on the first 20,000 rows of TRAIN (L2-normalised
as sketchfit's pipeline does), timing transform + predict over FILE read one row group at
a time, the way `sketchfit predict` streams it (the whole file would not fit as f64
features: 1.2M × 4096 × 8 bytes is 39 GB). Rows per second from the wall time.
"""
import sys
import time

import numpy as np
import pyarrow.parquet as pq
from sklearn.kernel_approximation import PolynomialCountSketch
from sklearn.linear_model import RidgeClassifier


def features(table):
    cols = [c for c in table.column_names if c.startswith("px")]
    x = np.column_stack([table.column(c).to_numpy() for c in cols]).astype(np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)


def main() -> None:
    path, dim, train = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    t = time.perf_counter()
    table = pq.read_table(path)
    read = time.perf_counter() - t
    rows = table.num_rows
    del table
    print(f"pyarrow read_table: {read:.1f} s ({rows / read:,.0f} rows/s)")

    fit = pq.read_table(train).slice(0, 20000)
    y = fit.column("label").to_numpy()
    sketch = PolynomialCountSketch(degree=3, gamma=1.0, coef0=1.0, n_components=dim, random_state=1)
    model = RidgeClassifier(alpha=0.01).fit(sketch.fit_transform(features(fit)), y)

    t = time.perf_counter()
    f = pq.ParquetFile(path)
    n = 0
    for g in range(f.num_row_groups):
        part = f.read_row_group(g)
        model.predict(sketch.transform(features(part)))
        n += part.num_rows
    wall = time.perf_counter() - t
    print(f"scikit-learn PolynomialCountSketch + RidgeClassifier predict, D = {dim}: "
          f"{wall:.1f} s ({n / wall:,.0f} rows/s)")


if __name__ == "__main__":
    main()
