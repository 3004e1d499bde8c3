"""scikit-learn estimators over the Rust core: ridge classifier and regressor on
random features, and RF-PCA. Their parameters mirror the pipeline file (stages as
dicts of stage keys or sketch transformers, ``pca``, ``alpha`` for ``[ridge] lambda``);
``fit`` streams the rows through the maps into sufficient statistics and solves once,
``partial_fit`` only accumulates, and the solve runs at the next prediction."""

from __future__ import annotations

import json
import numbers
import os

import numpy as np
import pyarrow as pa
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, TransformerMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import assert_all_finite, check_is_fitted, column_or_1d, validate_data

from . import _core
from ._inputs import arrow_table, expand_paths, features_table, is_arrow, is_paths, label_array, scores_of, with_columns
from ._spec import pipeline_text, seed_of, stage_dicts
from .core import Model, Statistics, session

DEFAULT_STAGES = ({"kind": "rff", "dim": 1024},)
LABEL = "label"


class _SketchModel(BaseEstimator):
    """What the three estimators share: the pipeline text, the input layout, the model
    (and, between ``partial_fit`` calls, the statistics), pickled as bytes."""

    _task = "regression"

    def _maps_header(self):
        """The header of the ``maps`` file, read once per fit (None without one)."""
        if getattr(self, "maps", None) is None:
            return None
        return json.loads(_core.maps_header(os.fspath(self.maps), session(None)))

    def _stages(self, maps=None):
        if self.stages is None and maps is not None:
            # The maps' own stages: an estimator given only ``maps=`` maps as they were fitted.
            return maps["keys"]["stages"]
        return stage_dicts(DEFAULT_STAGES if self.stages is None else self.stages)

    def _pca(self):
        if self.pca is None:
            return None
        if isinstance(self.pca, bool) or not isinstance(self.pca, numbers.Real):
            raise ValueError(f"pca must be a number of components (int) or a variance share in (0, 1), got {self.pca!r}")
        if isinstance(self.pca, numbers.Integral):
            return {"components": int(self.pca)}
        return {"variance": float(self.pca)}

    def _ridge(self):
        alpha = self.alpha
        if isinstance(alpha, str):
            if alpha != "gcv":
                raise ValueError(f"alpha must be 'gcv' or a number ≥ 0, got {alpha!r}")
        elif not isinstance(alpha, numbers.Real) or isinstance(alpha, bool) or not alpha >= 0:
            raise ValueError(f"alpha must be 'gcv' or a number ≥ 0, got {alpha!r}")
        ridge = {"lambda": alpha if isinstance(alpha, str) else float(alpha), "per_output": bool(self.per_output)}
        if getattr(self, "cv", None) is not None:
            ridge["cv"] = self.cv
        if self.validation is not None:
            ridge["refit"] = bool(self.refit)
        return ridge

    def _text(self, data: dict, seed: int) -> str:
        maps = self._maps_header()
        if maps is not None and self.random_state is None:
            seed = int(maps["seed"])  # the seed the maps were drawn with
        run = {"seed": seed, "threads": int(self.n_jobs or 0), "sample_rows": int(self.sample_rows), "gram": self.gram}
        if maps is not None:
            run["maps"] = str(self.maps) if "://" in str(self.maps) else os.path.abspath(os.fspath(self.maps))
        if self.validation is not None:
            data = {**data, "validation": expand_paths(self.validation)}
        return pipeline_text(task=self._task, data=data, stages=self._stages(maps), pca=self._pca(), ridge=self._ridge(), run=run, passes=self.passes)

    # Inputs -----------------------------------------------------------------------

    def _features(self, X, reset: bool):
        return features_table(self, X, reset, min_rows=2)

    def _scores(self, X, pca: bool):
        """``(model, bytes of f64, rows, columns)``: the decision values of ``X`` (or with
        ``pca`` its PCA features), checked as scikit-learn checks a predict input."""
        check_is_fitted(self, "n_features_in_")
        model = self._ensure_model()
        if is_arrow(X):
            self._features(X, reset=False)
            return (model, *model._core.scores(arrow_table(X), pca))
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32], order=None, ensure_all_finite=False)
        return (model, *scores_of(model._core, X, model.header["features"], pca))

    # State ------------------------------------------------------------------------

    def _ensure_model(self) -> Model:
        if getattr(self, "_model", None) is None:
            stats = getattr(self, "_stats", None)
            if stats is None:
                check_is_fitted(self, "_model")
            self._model = Model(self._pipeline.solve([stats._core]))
        return self._model

    def solve(self):
        """Solves the statistics accumulated by ``partial_fit`` now (it otherwise runs
        at the next prediction)."""
        self._ensure_model()
        return self

    @property
    def model_(self) -> Model:
        """The trained :class:`sketchfit.Model` (save it with ``model_.save(path)``)."""
        return self._ensure_model()

    def save(self, path, storage_options=None) -> None:
        """Writes the model file (the command line's ``predict`` and ``inspect`` read it),
        locally or to an object store (never replacing an object there)."""
        self._ensure_model().save(path, storage_options)

    def __getstate__(self):
        state = self.__dict__.copy()
        for key in ("_model", "_stats", "_pipeline"):
            state.pop(key, None)
        if getattr(self, "_model", None) is not None:
            state["_model_bytes"] = self._model.to_bytes()
        if getattr(self, "_stats", None) is not None:
            state["_stats_bytes"] = self._stats.to_bytes()
        if getattr(self, "_pipeline", None) is not None:
            state["_pipeline_args"] = (self._pipeline_text, self._pipeline_classes)
        return state

    def __setstate__(self, state):
        model = state.pop("_model_bytes", None)
        stats = state.pop("_stats_bytes", None)
        pipe = state.pop("_pipeline_args", None)
        self.__dict__.update(state)
        self._model = None if model is None else Model.from_bytes(model)
        self._stats = None if stats is None else Statistics.from_bytes(stats)
        if pipe is not None:
            self._set_pipeline(*pipe)

    def _started(self) -> bool:
        """Whether rows were taken that a ``partial_fit`` continues: statistics, or the
        rows a dual fit kept."""
        return getattr(self, "_stats", None) is not None or getattr(self, "_rows", None) is not None

    def _set_pipeline(self, text, classes):
        self._pipeline_text, self._pipeline_classes = text, classes
        self._pipeline = _core.Pipeline(text, classes)

    def _train(self, table, data: dict, classes, incremental: bool):
        """Accumulates the rows: a ``fit`` (or the first ``partial_fit``) starts new
        statistics, a later ``partial_fit`` adds to them. The statistics are kept, so
        ``partial_fit`` after ``fit`` continues it (the sums are exact); ``fit`` solves
        at once, ``partial_fit`` at the next prediction."""
        if incremental and getattr(self, "_from_files", False):
            raise ValueError(
                "this estimator was fitted on Parquet files, whose statistics it does not keep in memory; "
                "partial_fit continues statistics of in-memory rows: fit(X, y) or partial_fit from a fresh estimator"
            )
        self._from_files = False
        if getattr(self, "cv", None) is not None:
            if incremental:
                raise ValueError("cv scores every row again after the pass, which partial_fit cannot do: use fit, or alpha='gcv'")
            # k-fold scoring streams the rows once more: the one-call fit, no statistics kept.
            self._set_pipeline(self._text(data, seed_of(self.random_state)), classes)
            self._stats = None
            self._model = Model(self._pipeline.fit(table))
            return
        if incremental and getattr(self, "_rows", None) is not None:
            # The fit before was solved in the dual and kept its rows, not statistics:
            # the statistics of those rows continue it.
            self._stats = Statistics(self._pipeline.accumulate(self._rows, (0, 1)))
            self._rows = None
        if incremental and getattr(self, "_stats", None) is not None:
            self._pipeline.add(self._stats._core, table)
            self._model = None
            return
        self._set_pipeline(self._text(data, seed_of(self.random_state)), classes)
        self._rows = None
        if incremental:
            self._stats = Statistics(self._pipeline.accumulate(table, (0, 1)))
            self._model = None
            return
        # With at most D/2 rows the fit solves in the dual and keeps the rows (a
        # reference to the table), not the D × D statistics.
        kind, out = self._pipeline.fit_or_accumulate(table)
        if kind == "model":
            self._stats, self._rows, self._model = None, table, Model(out)
        else:
            self._stats, self._model = Statistics(out), None
            self._ensure_model()

    def _fit_files(self, paths, data: dict, storage_options=None):
        self._set_pipeline(self._text(data, seed_of(self.random_state)), None)
        self._stats = None
        self._from_files = True
        self._model = Model(self._pipeline.fit_files(paths, session(storage_options)))
        f = self._model.header["features"]
        self.n_features_in_ = f["dim"]
        if not f["list"]:
            self.feature_names_in_ = np.asarray(f["columns"], dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


_COMMON_DOC = """
    Parameters
    ----------
    stages : list of dict or sketch transformers, default None
        The ``[[stages]]`` of a pipeline file: each a dict of stage keys
        (``{"kind": "tensor_sketch", "degree": 3, "dim": 4096}``) or a transformer such
        as ``TensorSketch(degree=3, dim=4096)``. Default: random Fourier features,
        D = 1024, bandwidth by the median heuristic.
    pca : int or float, default None
        ``[pca] components`` (int) or ``variance`` (float in (0, 1)); None: ridge on all
        D features.
    alpha : "gcv" or float, default "gcv"
        ``[ridge] lambda``: chosen by generalised cross-validation, or fixed (a fixed λ
        without PCA is one Cholesky factorisation).
    per_output : bool, default False
        One λ per output (``[ridge] per_output``).
    validation : path or list of paths, default None
        Parquet files of held-out rows (``[data] validation``): λ by held-out accuracy
        or RMSE instead of GCV, then a refit on train ∪ validation when ``refit``.
    refit : bool, default True
    cv : int, default None
        ``[ridge] cv``: λ from the grid by K-fold cross-validation (2 ≤ K ≤ 10) on the
        held-out metric, then a refit on all rows (no PCA; ``fit`` only).
    passes : int, default 1
        2: a PCA per stage, then ridge on the projected features (``pca`` then gives
        each stage's components).
    gram : "f64" or "f32", default "f64"
        Precision of the Gram products (``[run] gram``).
    sample_rows : int, default 10000
        The pre-pass sample that fits data-dependent parameters (``[run] sample_rows``).
    random_state : int, RandomState or None
        ``[run] seed``: an int gives the command line's model for the same seed.
    n_jobs : int or None
        Worker threads (None or 0: all cores).
    maps : path or URL, default None
        A maps file (``Pipeline.fit_maps``, the ``fit-maps`` command; ``[run] maps``):
        the fitted stages, landmarks and shift are taken from it instead of a pre-pass,
        so estimators fitted on different data map rows alike. ``stages`` and
        ``random_state`` left as None take the maps' own; given, they must be the maps'.
"""


class SketchRidgeClassifier(ClassifierMixin, _SketchModel):
    __doc__ = "Ridge classifier (one-vs-all ±1 targets) on random features." + _COMMON_DOC
    _task = "classification"

    def __init__(self, stages=None, pca=None, alpha="gcv", per_output=False, validation=None, refit=True, codes="one_vs_all", passes=1, gram="f64", sample_rows=10000, cv=None, random_state=None, n_jobs=None, maps=None):
        self.maps = maps
        self.stages = stages
        self.cv = cv
        self.pca = pca
        self.alpha = alpha
        self.per_output = per_output
        self.validation = validation
        self.refit = refit
        self.codes = codes
        self.passes = passes
        self.gram = gram
        self.sample_rows = sample_rows
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _ridge(self):
        return {**super()._ridge(), "codes": self.codes}

    def _labels(self, y, n):
        y = column_or_1d(np.asarray(y) if not isinstance(y, (pa.Array, pa.ChunkedArray)) else y.to_numpy(zero_copy_only=False), warn=True)
        if len(y) != n:
            raise ValueError(f"X has {n} rows but y has {len(y)} labels")
        # Refuse NaN and ±∞ first: type_of_target would cast them to int64 and warn.
        if y.dtype.kind == "f":
            assert_all_finite(y, input_name="y")
        check_classification_targets(y)
        return y

    def fit(self, X, y=None, storage_options=None):
        """Fits on X (NumPy, pyarrow, polars, pandas) and labels y, or on Parquet paths
        (``fit("train/*.parquet")`` or ``fit("s3://bucket/train/*.parquet",
        storage_options={...})``, label column ``label`` unless ``y`` names it)."""
        if is_paths(X):
            self._fit_files(expand_paths(X), {"label": y or LABEL}, storage_options)
            self.classes_ = np.asarray(self._model.classes)
            return self
        return self._fit(X, y, classes=None, incremental=False)

    def partial_fit(self, X, y, classes=None):
        """Accumulates a chunk (the first call fits the data-dependent parameters on
        it and needs ``classes``, every class of the whole stream)."""
        first = not self._started()
        if first and classes is None:
            # scikit-learn's convention is to require them; taking the first chunk's
            # is as safe, since a later label outside them is refused, never guessed.
            classes = np.unique(self._labels(y, len(y)))
        return self._fit(X, y, classes=classes if first else None, incremental=True)

    def _fit(self, X, y, classes, incremental):
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None")
        table, data = self._features(X, reset=not (incremental and self._started()))
        y = self._labels(y, table.num_rows)
        if classes is not None:
            self.classes_ = np.unique(np.asarray(classes))
        elif not incremental:
            self.classes_ = np.unique(y)
        unseen = np.setdiff1d(np.unique(y), self.classes_)
        if len(unseen):
            shown = ", ".join(str(c) for c in self.classes_[:20])
            raise ValueError(f"label '{unseen[0]}' is not one of the {len(self.classes_)} classes the model was trained on ({shown})")
        if len(self.classes_) < 2:
            raise ValueError(f"the labels have 1 class ({self.classes_[0]!r}); classification needs samples of at least 2 classes")
        labels, given = label_array(y, self.classes_)
        table = with_columns(table, {LABEL: labels})
        self._train(table, {**data, "label": LABEL}, given, incremental)
        return self

    def decision_function(self, X):
        _, data, rows, cols = self._scores(X, False)
        out = np.frombuffer(data, dtype="<f8").reshape(rows, cols)
        return out[:, 0] if cols == 1 else out

    def predict(self, X):
        model, data, _, _ = self._scores(X, False)
        return self.classes_[np.frombuffer(model._core.classify(data), dtype="<i8")]


class SketchRidgeRegressor(RegressorMixin, _SketchModel):
    __doc__ = "Ridge regression on random features (one or several targets)." + _COMMON_DOC
    _task = "regression"

    def __init__(self, stages=None, pca=None, alpha="gcv", per_output=False, validation=None, refit=True, passes=1, gram="f64", sample_rows=10000, cv=None, random_state=None, n_jobs=None, maps=None):
        self.maps = maps
        self.stages = stages
        self.cv = cv
        self.pca = pca
        self.alpha = alpha
        self.per_output = per_output
        self.validation = validation
        self.refit = refit
        self.passes = passes
        self.gram = gram
        self.sample_rows = sample_rows
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, X, y=None, storage_options=None):
        """Fits on X and targets y (1-D, or 2-D for several), or on Parquet paths (local
        or in an object store, with ``storage_options``) with ``y`` the target column
        name(s)."""
        if is_paths(X):
            targets = [y] if isinstance(y, str) else list(y or [])
            if not targets:
                raise ValueError("fitting on files needs y: the target column name(s)")
            self._fit_files(expand_paths(X), {"targets": targets}, storage_options)
            self._single = len(targets) == 1
            return self
        return self._fit(X, y, incremental=False)

    def partial_fit(self, X, y):
        """Accumulates a chunk (the first call fits the data-dependent parameters)."""
        return self._fit(X, y, incremental=True)

    def _fit(self, X, y, incremental):
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None")
        started = incremental and self._started()
        table, data = self._features(X, reset=not started)
        y = np.asarray(y.to_numpy(zero_copy_only=False) if isinstance(y, (pa.Array, pa.ChunkedArray)) else y)
        if y.dtype.kind not in "fiub":
            y = y.astype(np.float64)
        single = y.ndim == 1
        Y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        if not np.isfinite(Y).all():
            raise ValueError("Input y contains NaN or infinity")
        if Y.shape[0] != table.num_rows:
            raise ValueError(f"X has {table.num_rows} rows but y has {Y.shape[0]}")
        if started and single != self._single:
            raise ValueError("y has a different number of targets than in the first partial_fit")
        self._single = single
        names = [f"y{k}" for k in range(Y.shape[1])]
        table = with_columns(table, {n: pa.array(np.ascontiguousarray(Y[:, k])) for k, n in enumerate(names)})
        self._train(table, {**data, "targets": names}, None, incremental)
        return self

    def predict(self, X):
        _, data, rows, cols = self._scores(X, False)
        out = np.frombuffer(data, dtype="<f8").reshape(rows, cols)
        return out[:, 0] if self._single else out.copy()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags


class RFPCA(TransformerMixin, _SketchModel):
    """RF-PCA: the top principal components of random features, from the streamed
    covariance (no labels needed).

    Parameters
    ----------
    n_components : int or float, default 64
        ``[pca] components`` (int) or ``variance`` (float in (0, 1)).
    stages, sample_rows, random_state, n_jobs, gram, maps : as for :class:`SketchRidgeClassifier`
        (a classifier's maps serve: RF-PCA takes their map, not their classes).
    """

    def __init__(self, n_components=64, stages=None, gram="f64", sample_rows=10000, random_state=None, n_jobs=None, maps=None):
        self.maps = maps
        self.n_components = n_components
        self.stages = stages
        self.gram = gram
        self.sample_rows = sample_rows
        self.random_state = random_state
        self.n_jobs = n_jobs

    # The PCA's statistics are the ridge's; a constant target costs one more column.
    pca = property(lambda self: self.n_components)
    alpha = 1.0
    per_output = False
    validation = None
    passes = 1

    def fit(self, X, y=None):
        return self._fit(X, incremental=False)

    def partial_fit(self, X, y=None):
        return self._fit(X, incremental=True)

    def _fit(self, X, incremental):
        started = incremental and self._started()
        table, data = self._features(X, reset=not started)
        if isinstance(self.n_components, numbers.Integral) and not isinstance(self.n_components, bool):
            if self.n_components < 1:
                raise ValueError(f"n_components must be ≥ 1, got {self.n_components}")
        table = with_columns(table, {"__rfpca_target__": pa.array(np.zeros(table.num_rows))})
        self._train(table, {**data, "targets": ["__rfpca_target__"]}, None, incremental)
        return self

    def transform(self, X):
        _, data, rows, cols = self._scores(X, True)
        return np.frombuffer(data, dtype="<f8").reshape(rows, cols).copy()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags
