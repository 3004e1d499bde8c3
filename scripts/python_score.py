#!/usr/bin/env python3
"""The Python side of the scoring benchmark (scripts/bench.sh, section "score").

    python_score.py FILE MODEL [THREADS]

Reads the Parquet FILE's `px*` columns into one float32 NumPy array (not timed: a user
holding rows in memory already has them), then times `sketchfit.Model.predict` on the
whole array, the rate to put beside `sketchfit predict` of the same file and model.
"""
import sys
import time

import numpy as np
import pyarrow.parquet as pq

import sketchfit


def main() -> None:
    path, model_path = sys.argv[1], sys.argv[2]
    f = pq.ParquetFile(path)
    cols = [c for c in f.schema_arrow.names if c.startswith("px")]
    x = np.empty((f.metadata.num_rows, len(cols)), dtype=np.float32)
    at = 0
    for g in range(f.num_row_groups):
        part = f.read_row_group(g, columns=cols)
        x[at : at + part.num_rows] = np.column_stack([part.column(c).to_numpy() for c in cols])
        at += part.num_rows
    model = sketchfit.Model.load(model_path)
    t = time.perf_counter()
    pred = model.predict(x)
    wall = time.perf_counter() - t
    print(f"Python Model.predict on a {x.shape[0]:,} x {x.shape[1]} float32 array: {wall:.1f} s "
          f"({x.shape[0] / wall:,.0f} rows/s); {len(pred):,} predictions")


if __name__ == "__main__":
    main()
