#!/usr/bin/env python3
"""Writes data/digits_{train,test}.parquet from the UCI optical-recognition digits.

Source: the copy of the UCI "Optical Recognition of Handwritten Digits" test set
(1,797 8x8 images, pixel counts 0..16) that scikit-learn ships as
sklearn/datasets/data/digits.csv.gz (load_digits). Licence: CC BY 4.0 (UCI ML
Repository, Alpaydin & Kaynak 1998).

Split: stratified by class, 25 % test, numpy default_rng(20261201); deterministic.
The test set is also written split by class (digits 0-4 and 5-9) for the worked
two-sample example of `sketchfit mmd` in docs/src/guide/data-sets.md.
Columns: px0..px63 (uint8), label (int64). One row group per 512 rows so that the
reader's row-group handling is exercised even on this small file.

Needs: numpy, scikit-learn, pyarrow (pip install numpy scikit-learn pyarrow).
"""
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.datasets import load_digits


def main() -> None:
    out = pathlib.Path(__file__).resolve().parent.parent / "data"
    out.mkdir(exist_ok=True)
    digits = load_digits()
    x = digits.data.astype(np.uint8)
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(20261201)
    test = np.zeros(len(y), dtype=bool)
    for k in np.unique(y):
        idx = np.flatnonzero(y == k)
        rng.shuffle(idx)
        test[idx[: round(0.25 * len(idx))]] = True
    for name, mask in (("train", ~test), ("test", test)):
        order = np.flatnonzero(mask)
        rng.shuffle(order)
        cols = {f"px{j}": pa.array(x[order, j], type=pa.uint8()) for j in range(64)}
        cols["label"] = pa.array(y[order], type=pa.int64())
        table = pa.table(cols)
        pq.write_table(table, out / f"digits_{name}.parquet", row_group_size=512,
                       compression="snappy")
        print(f"{name}: {table.num_rows} rows")
        if name == "test":
            for tag, keep in (("0to4", y[order] <= 4), ("5to9", y[order] >= 5)):
                part = table.filter(pa.array(keep))
                pq.write_table(part, out / f"digits_test_{tag}.parquet", row_group_size=512,
                               compression="snappy")
                print(f"test {tag}: {part.num_rows} rows")


if __name__ == "__main__":
    main()
