"""Each sketch family as a scikit-learn transformer: ``fit`` fits the data-dependent
parameters on the pre-pass sample (the bandwidth's median heuristic, the χ² series'
k's, exp-χ²'s β), ``transform`` returns the random features ``z(x)`` as float32. The
parameters are the stage's keys in the pipeline file; ``None`` means the file's
default. A transformer also serves as a stage of the ridge estimators
(``SketchRidgeClassifier(stages=[TensorSketch(degree=3, dim=4096)])``)."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from . import _core
from ._inputs import arrow_table, features_table, is_arrow, table_for
from ._spec import pipeline_text, seed_of

COMMON = ("normalize", "weight", "down", "down_dim")


class _Sketch(TransformerMixin, BaseEstimator):
    _kind = ""
    _keys: tuple = ()
    _nonnegative = False

    def stage_dict(self) -> dict:
        """The stage as a pipeline file's ``[[stages]]`` table."""
        return {"kind": self._kind, **{k: getattr(self, k) for k in self._keys if getattr(self, k) is not None}}

    def _table(self, X, reset: bool):
        return features_table(self, X, reset, check=(lambda X: _refuse_negative(self, X)) if self._nonnegative else None)

    def fit(self, X, y=None):
        table, data = self._table(X, reset=True)
        text = pipeline_text(
            task="regression",
            data={**data, "targets": ["__none__"]},
            stages=[self.stage_dict()],
            pca=None,
            ridge={},
            run={"seed": seed_of(self.random_state), "sample_rows": 10000},
        )
        self._map = _core.FeatureMap.fit(_core.Pipeline(text), table)
        self.n_components_ = self._map.dim
        self.fitted_stage_ = _fitted_stage(self._map)
        return self

    def transform(self, X):
        check_is_fitted(self, "n_components_")
        if is_arrow(X):
            table = arrow_table(X)
        else:
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32], order=None, ensure_all_finite=False)
            table = table_for(X, _features_of(self._map))
        data, rows, dim = self._map.transform(table)
        return np.frombuffer(data, dtype="<f4").reshape(rows, dim)

    def __getstate__(self):
        state = self.__dict__.copy()
        if "_map" in state:
            state["_map"] = self._map.to_json()
        return state

    def __setstate__(self, state):
        if "_map" in state:
            state["_map"] = _core.FeatureMap.from_json(state["_map"])
        self.__dict__.update(state)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]
        tags.input_tags.positive_only = self._nonnegative
        tags.requires_fit = True
        return tags


def _refuse_negative(est, X) -> None:
    neg = np.argwhere(X < 0)
    if len(neg):
        r, j = neg[0]
        raise ValueError(
            f"Negative values in data passed to {type(est).__name__}: row {r}, feature {j} is {X[r, j]}; "
            "χ² stages need non-negative inputs such as histograms or counts"
        )


def _fitted_stage(m) -> dict:
    import json

    return json.loads(m.to_json())["stages"][0]


def _features_of(m) -> dict:
    import json

    return json.loads(m.to_json())["features"]


def _family(name: str, kind: str, keys: tuple, doc: str, nonnegative: bool = False):
    """A transformer class whose ``__init__`` names every stage key explicitly (as
    scikit-learn's ``get_params`` needs), each defaulting to None (the file's default)."""
    keys = keys + COMMON
    args = ", ".join(f"{k}=None" for k in keys) + ", random_state=None"
    body = "".join(f"    self.{k} = {k}\n" for k in keys + ("random_state",))
    namespace: dict = {}
    exec(f"def __init__(self, {args}):\n{body}", namespace)  # noqa: S102 - a generated signature, no user input
    cls = type(name, (_Sketch,), {"__init__": namespace["__init__"], "_kind": kind, "_keys": keys, "_nonnegative": nonnegative, "__doc__": doc, "__module__": __name__})
    return cls


TensorSketch = _family("TensorSketch", "tensor_sketch", ("degree", "gamma", "offset", "dim"), "Polynomial kernel (γ⟨x,y⟩ + c)^p by tensor sketch (FFT of count sketches).")
RecursiveTensorSketch = _family("RecursiveTensorSketch", "recursive_tensor_sketch", ("degree", "gamma", "offset", "dim"), "Polynomial kernel by a binary tree of degree-2 sketches.")
RandomMaclaurin = _family("RandomMaclaurin", "random_maclaurin", ("kernel", "degree", "gamma", "offset", "dim", "eta", "h01", "hadamard"), "Dot-product kernels (polynomial, exponential) by random Maclaurin features.")
RandomFourierFeatures = _family("RandomFourierFeatures", "rff", ("kernel", "variant", "dim", "sigma", "gamma"), "Gaussian or Laplacian kernel by random Fourier features (bandwidth by the median heuristic unless given).")
Chi2Series = _family("Chi2Series", "chi2", ("terms", "k", "bins"), "Additive χ² kernel by its direct series (non-negative inputs).", nonnegative=True)
Chi2Chebyshev = _family("Chi2Chebyshev", "chi2_chebyshev", ("terms",), "Additive χ² kernel by Chebyshev coefficients (non-negative inputs).", nonnegative=True)
ExpChi2 = _family("ExpChi2", "exp_chi2", ("terms", "k", "bins", "beta", "variant", "dim"), "exp(−β X²(x, y)): the χ² series, then Gaussian random Fourier features (non-negative inputs).", nonnegative=True)
GaussianSketch = _family("GaussianSketch", "gaussian_sketch", ("sigma", "truncation", "dim", "center"), "Gaussian kernel by per-coordinate expansions and one recursive tensor sketch (low d).")
GaussianSketchHD = _family("GaussianSketchHD", "gaussian_sketch_hd", ("sigma", "truncation", "dim", "blocks", "identity_block"), "Gaussian kernel by one recursive tensor sketch per degree (high d).")


def _craft_init(self, up=None, down=None, kernel=None, degree=None, gamma=None, offset=None, dim=None, up_dim=None, eta=None, h01=None, hadamard=None, normalize=None, weight=None, random_state=None):
    for k, v in list(locals().items()):
        if k != "self":
            setattr(self, k, v)


CraftMaps = type(
    "CraftMaps",
    (_Sketch,),
    {
        "__init__": _craft_init,
        "_kind": "craftmaps",
        "_keys": ("up", "down", "kernel", "degree", "gamma", "offset", "dim", "up_dim", "eta", "h01", "hadamard", "normalize", "weight"),
        "__doc__": "CRAFTMaps: up-project by random Maclaurin or tensor sketch, then down-project (SRHT or Gaussian) to dim.",
        "__module__": __name__,
    },
)

__all__ = [
    "TensorSketch",
    "RecursiveTensorSketch",
    "RandomMaclaurin",
    "RandomFourierFeatures",
    "Chi2Series",
    "Chi2Chebyshev",
    "ExpChi2",
    "GaussianSketch",
    "GaussianSketchHD",
    "CraftMaps",
]
