"""Inputs as Arrow without copies: what every entry point hands the Rust core.

NumPy arrays become Arrow arrays over the same memory: a C-ordered ``(n, d)`` array is
one ``FixedSizeList`` column ``x`` over its buffer, an F-ordered one is ``d`` columns
``x0 … x{d-1}``, each a view of one column. pyarrow tables and batches, polars frames
and anything with ``__arrow_c_stream__`` are imported through the Arrow PyCapsule
interface, also without copies. pandas frames and other array-likes go through NumPy.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

LIST = "x"


@dataclass(frozen=True)
class Layout:
    """How features sit in the Arrow table: one list column, or named columns."""

    list_column: str | None
    columns: tuple

    @property
    def width(self) -> int:
        return len(self.columns)


def is_arrow(X) -> bool:
    return isinstance(X, (pa.Table, pa.RecordBatch)) or hasattr(X, "__arrow_c_stream__")


def is_paths(X) -> bool:
    return isinstance(X, (str, os.PathLike)) or (
        isinstance(X, (list, tuple)) and len(X) > 0 and all(isinstance(p, (str, os.PathLike)) for p in X)
    )


def expand_paths(X) -> list:
    """Paths or globs, as the Rust reader takes them (it expands globs itself)."""
    items = [X] if isinstance(X, (str, os.PathLike)) else list(X)
    return [os.fspath(p) for p in items]


def arrow_table(X) -> pa.Table:
    """An Arrow table over the same buffers (pyarrow, polars or any C-stream object)."""
    if isinstance(X, pa.Table):
        return X
    if isinstance(X, pa.RecordBatch):
        return pa.Table.from_batches([X])
    return pa.table(X)


def numpy_table(X: np.ndarray) -> tuple[pa.Table, Layout]:
    """A 2-D float32/float64 array as Arrow, sharing its memory when it is C- or
    F-contiguous (otherwise one C-ordered copy is made)."""
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array of features, got {X.ndim} dimension(s)")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    n, d = X.shape
    if X.flags.f_contiguous and not X.flags.c_contiguous:
        names = tuple(f"x{j}" for j in range(d))
        cols = [pa.array(X[:, j]) for j in range(d)]
        return pa.Table.from_arrays(cols, names=list(names)), Layout(None, names)
    X = np.ascontiguousarray(X)
    values = pa.array(X.reshape(-1))
    lists = pa.FixedSizeListArray.from_arrays(values, d)
    return pa.Table.from_arrays([lists], names=[LIST]), Layout(LIST, tuple(f"x{j}" for j in range(d)))


def table_for(X, features: dict) -> pa.Table:
    """Rows in the layout a model was trained on (its header's ``features``): Arrow
    input as it is, a NumPy array as the list column or the named columns, sharing its
    memory where the order allows."""
    if is_arrow(X):
        return arrow_table(X)
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array of features, got {X.ndim} dimension(s)")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    if features["list"]:
        table, _ = numpy_table(np.ascontiguousarray(X))
        return table.rename_columns([features["columns"][0]])
    names = list(features["columns"])
    if X.shape[1] != len(names):
        raise ValueError(f"X has {X.shape[1]} features, but the model is expecting {len(names)} features as input")
    return pa.Table.from_arrays([pa.array(np.asarray(X[:, j])) for j in range(len(names))], names=names)


def scores_of(core, X, features: dict, pca: bool):
    """``core.scores`` of a model's input: ``(bytes of f64, rows, columns)``. A NumPy
    array of the model's width goes to the core as row-major float32 rows, without a
    copy when it is C-ordered float32: gathering its columns into Arrow one strided
    column at a time took about as long as scoring them (1.2M x 784). Whatever that way
    refuses (a non-finite value, a float64 beyond float32) is scored the Arrow way, whose
    message names the row and column."""
    if not is_arrow(X):
        A = np.asarray(X)
        if A.ndim == 2 and A.shape[1] == features["dim"] and A.dtype in (np.float32, np.float64):
            try:
                return core.scores_rows(numpy_table(np.ascontiguousarray(A, dtype=np.float32))[0], pca)
            except ValueError:
                pass
        return core.scores(table_for(X, features), pca)
    return core.scores(arrow_table(X), pca)


def features_table(est, X, reset: bool, min_rows: int = 1, check=None):
    """An estimator's input as Arrow and the pipeline's feature keys. Arrow inputs keep
    their column names and buffers (and set or check ``feature_names_in_``); anything
    else goes through scikit-learn's checks (2-D, numeric; non-finite values are left to
    the core, which names the row and column) and then shares its memory."""
    from sklearn.utils.validation import validate_data

    if is_arrow(X):
        table = arrow_table(X)
        names = np.asarray(table.column_names, dtype=object)
        if reset:
            est.feature_names_in_ = names
            est.n_features_in_ = len(names)
        elif hasattr(est, "feature_names_in_") and list(names) != list(est.feature_names_in_):
            raise ValueError(f"the columns {list(names)} differ from the columns seen in fit {list(est.feature_names_in_)}")
        return table, {"features": list(table.column_names)}
    X = validate_data(est, X, reset=reset, dtype=[np.float64, np.float32], order=None, ensure_all_finite=False)
    if reset and X.shape[0] < min_rows:
        raise ValueError(f"n_samples={X.shape[0]}: fitting needs at least {min_rows} rows")
    if reset and check is not None:
        check(X)
    table, layout = numpy_table(X)
    if layout.list_column is not None:
        return table, {"feature_list": layout.list_column}
    return table, {"features": list(layout.columns)}


def with_columns(table: pa.Table, columns: dict) -> pa.Table:
    """The table with extra columns (labels, targets) appended; the feature columns'
    buffers are shared, not copied."""
    for name, values in columns.items():
        if name in table.column_names:
            raise ValueError(f"the input already has a column named {name!r}; rename it")
        table = table.append_column(name, values)
    return table


def label_array(y: np.ndarray, classes: np.ndarray):
    """Labels as Arrow, and the class list the Rust core is given.

    Integer and string labels go as they are (the model file then holds the real
    labels, so the command line reads them); any other kind (floats, booleans, mixed
    objects) goes as its index in ``classes``.
    """
    if y.dtype.kind in "iu":
        return pa.array(y.astype(np.int64)), [int(c) for c in classes]
    if y.dtype.kind in "UO" and all(isinstance(c, str) for c in classes):
        return pa.array([str(v) for v in y], type=pa.string()), [str(c) for c in classes]
    codes = np.searchsorted(classes, y)
    return pa.array(codes.astype(np.int64)), list(range(len(classes)))


def glob_count(paths: list) -> int:
    return sum(len(glob.glob(p)) or 1 for p in paths)
