"""The library objects over the Rust core: :class:`Pipeline`, :class:`Statistics` and
:class:`Model`. They read and write the command line's files (pipeline TOML, part
files, model files), so a model or a shard moves between Python and the CLI either
way. The GIL is released while the core computes."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa

from . import _core
from ._inputs import arrow_table, expand_paths, is_arrow, is_paths, numpy_table, scores_of


def session(storage_options=None):
    """The core's session for one call: its object-store options (``storage_options`` as
    polars and delta-rs spell it: ``{"aws_endpoint": ..., "aws_region": ...,
    "allow_http": "true"}``) over the environment's ``AWS_``/``GOOGLE_``/``AZURE_``
    variables. Each call has its own, so calls on other threads never share options."""
    items = dict(storage_options or {}).items()
    return _core.Session([(str(k), str(v).lower() if isinstance(v, bool) else str(v)) for k, v in items])


def _source(X):
    """An Arrow table for in-memory data, or a list of paths for Parquet files."""
    if is_paths(X):
        return None, expand_paths(X)
    if is_arrow(X):
        return arrow_table(X), None
    return numpy_table(np.asarray(X))[0], None


class Pipeline:
    """A pipeline: the text of a pipeline file (``Pipeline.load(path)`` reads one;
    its ``[data]`` files are ignored here, the data is what you pass). ``classes`` fixes
    the class list; ``maps``, the path or URL of a maps file (:meth:`fit_maps`), replaces
    the pre-pass, so statistics of any data with those maps merge."""

    def __init__(self, text: str, classes=None, maps=None):
        self.text = text
        self.classes = None if classes is None else list(classes)
        self.maps = None if maps is None else os.fspath(maps)
        self._core = _core.Pipeline(text, self.classes, self.maps)

    @classmethod
    def load(cls, path, classes=None) -> "Pipeline":
        with open(path, encoding="utf-8") as f:
            return cls(f.read(), classes)

    def fit(self, source, storage_options=None) -> "Model":
        """Fits on an Arrow table / stream, a NumPy array with its label columns
        appended beforehand, or Parquet paths (streamed; ``s3://`` and the other stores
        with ``storage_options``)."""
        table, paths = _source(source)
        if paths is not None:
            return Model(self._core.fit_files(paths, session(storage_options)))
        return Model(self._core.fit(table))

    def fit_maps(self, source, path, storage_options=None) -> str:
        """Fits this pipeline's maps (its pre-pass: stages, landmarks, shift, classes) on
        Parquet files and writes them to ``path`` (local or in an object store); returns
        their digest. ``Pipeline(text, maps=path)`` then maps any data alike."""
        _, paths = _source(source)
        if paths is None:
            raise TypeError("fit_maps reads Parquet files: give paths or globs")
        return self._core.fit_maps(paths, os.fspath(path), session(storage_options))

    def solve(self, parts, decay=None, weights=None) -> "Model":
        """Merges statistics and solves them into a model. Parts over a maps file (one
        per day, say, oldest first) merge whatever data each read, and may be weighted:
        ``decay=H`` weighs the last part 1 and each part ``H`` parts older half as much,
        ``weights=[...]`` gives one weight per part; the model is then weighted ridge
        over their rows."""
        return Model(self._core.solve([p._core for p in parts], decay, None if weights is None else list(weights)))

    def __reduce__(self):
        return (Pipeline, (self.text, self.classes, self.maps))


class Statistics:
    """Sufficient statistics: a shard's part file in memory. Sums, so they merge."""

    def __init__(self, core):
        self._core = core

    @classmethod
    def accumulate(cls, pipeline: Pipeline, source, shard=(0, 1), storage_options=None) -> "Statistics":
        """Shard ``(i, n)`` of a source: every n-th row group of Parquet files (paths or
        globs, local or in an object store, streamed), or every n-th batch of an Arrow
        table."""
        table, paths = _source(source)
        i, n = shard
        if paths is not None:
            return cls(pipeline._core.accumulate_files(paths, (i, n), session(storage_options)))
        return cls(pipeline._core.accumulate(table, (i, n)))

    def add(self, pipeline: Pipeline, source) -> "Statistics":
        """Adds in-memory rows, mapped with these statistics' fitted parameters."""
        table, paths = _source(source)
        if paths is not None:
            raise TypeError("add takes rows in memory; accumulate files with Statistics.accumulate")
        pipeline._core.add(self._core, table)
        return self

    def empty_like(self, shard) -> "Statistics":
        """No rows, the same fitted parameters, as shard ``(i, n)``: one per partition."""
        return Statistics(self._core.empty_like(tuple(shard)))

    def merge(self, other: "Statistics") -> "Statistics":
        """Adds another shard of the same run (each shard once) and returns self."""
        self._core.merge(other._core)
        return self

    def solve(self, pipeline: Pipeline) -> "Model":
        return Model(pipeline._core.solve([self._core]))

    @property
    def rows(self) -> int:
        return self._core.rows

    @property
    def shards(self) -> list:
        return list(self._core.shards_held)

    def save(self, path, storage_options=None) -> None:
        self._core.save(os.fspath(path), session(storage_options))

    @classmethod
    def load(cls, path, storage_options=None) -> "Statistics":
        return cls(_core.Statistics.load(os.fspath(path), session(storage_options)))

    def to_bytes(self) -> bytes:
        return self._core.to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Statistics":
        return cls(_core.Statistics.from_bytes(data))

    def __reduce__(self):
        return (Statistics.from_bytes, (self.to_bytes(),))


class Model:
    """A trained model (the command line's model file)."""

    def __init__(self, core):
        self._core = core
        self.header = json.loads(core.header_json())

    @classmethod
    def load(cls, path, storage_options=None) -> "Model":
        return cls(_core.Model.load(os.fspath(path), session(storage_options)))

    def save(self, path, storage_options=None) -> None:
        self._core.save(os.fspath(path), session(storage_options))

    def to_bytes(self) -> bytes:
        return self._core.to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Model":
        return cls(_core.Model.from_bytes(data))

    def __reduce__(self):
        return (Model.from_bytes, (self.to_bytes(),))

    @property
    def classes(self):
        c = self.header.get("classes")
        return None if c is None else list(c["values"])

    def _scores(self, X, pca: bool):
        if isinstance(X, pa.Table):
            return self._core.scores(X, pca)
        return scores_of(self._core, X, self.header["features"], pca)

    def decision_function(self, X) -> np.ndarray:
        """``f(x)`` per row: ``(n,)`` for one output, else ``(n, outputs)``."""
        data, rows, cols = self._scores(X, False)
        out = np.frombuffer(data, dtype="<f8").reshape(rows, cols)
        return out[:, 0] if cols == 1 else out

    def predict(self, X) -> np.ndarray:
        """Class labels (classification) or values (regression)."""
        data, rows, cols = self._scores(X, False)
        classes = self.classes
        if classes is None:
            out = np.frombuffer(data, dtype="<f8").reshape(rows, cols)
            return out[:, 0] if cols == 1 else out
        return np.asarray(classes)[np.frombuffer(self._core.classify(data), dtype="<i8")]

    def transform(self, X) -> np.ndarray:
        """The PCA features ``(n, ΣE)`` (a model trained with PCA)."""
        data, rows, cols = self._scores(X, True)
        return np.frombuffer(data, dtype="<f8").reshape(rows, cols)
