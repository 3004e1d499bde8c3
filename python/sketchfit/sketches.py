"""Each sketch family as a scikit-learn transformer: ``fit`` fits the data-dependent
parameters on the pre-pass sample (the bandwidth's median heuristic, the χ² series'
k's, exp-χ²'s β), ``transform`` returns the random features ``z(x)`` as float32. The
parameters are the stage's keys in the pipeline file; ``None`` means the file's
default. A transformer also serves as a stage of the ridge estimators
(``SketchRidgeClassifier(stages=[TensorSketch(degree=3, dim=4096)])``)."""

from __future__ import annotations

import inspect
import json

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from . import _core
from ._inputs import arrow_table, features_table, is_arrow, table_for
from ._spec import pipeline_text, seed_of

# The families, their keys and which need non-negative inputs come from the Rust
# registry (``_core.kinds()``); only the class names and their one-line docs are Python's.
FAMILIES = {f["kind"]: f for f in json.loads(_core.kinds())}

NAMES = {
    "identity": ("Identity", "The linear kernel ⟨x, y⟩: the (normalised, weighted) inputs themselves."),
    "tensor_sketch": ("TensorSketch", "Polynomial kernel (γ⟨x,y⟩ + c)^p by tensor sketch (FFT of count sketches)."),
    "recursive_tensor_sketch": ("RecursiveTensorSketch", "Polynomial kernel by a binary tree of degree-2 sketches."),
    "random_maclaurin": ("RandomMaclaurin", "Dot-product kernels (polynomial, exponential) by random Maclaurin features."),
    "craftmaps": ("CraftMaps", "CRAFTMaps: up-project by random Maclaurin or tensor sketch, then down-project (SRHT or Gaussian) to dim."),
    "rff": ("RandomFourierFeatures", "Gaussian or Laplacian kernel by random Fourier features (bandwidth by the median heuristic unless given)."),
    "chi2": ("Chi2Series", "Additive χ² kernel by its direct series (non-negative inputs)."),
    "chi2_chebyshev": ("Chi2Chebyshev", "Additive χ² kernel by Chebyshev coefficients (non-negative inputs)."),
    "exp_chi2": ("ExpChi2", "exp(−β X²(x, y)): the χ² series, then Gaussian random Fourier features (non-negative inputs)."),
    "gaussian_sketch": ("GaussianSketch", "Gaussian kernel by per-coordinate expansions and one recursive tensor sketch (low d)."),
    "gaussian_sketch_hd": ("GaussianSketchHD", "Gaussian kernel by one recursive tensor sketch per degree (high d)."),
    "nystrom": ("Nystroem", "Polynomial or Gaussian kernel by dim landmark rows of the data: z(x) = L⁻¹k_M(x), K_MM + εI = LLᵀ."),
}


class _Sketch(TransformerMixin, BaseEstimator):
    _kind = ""
    _keys: tuple = ()
    _nonnegative = False

    def stage_dict(self) -> dict:
        """The stage as a pipeline file's ``[[stages]]`` table."""
        return {"kind": self._kind, **{k: getattr(self, k) for k in self._keys if getattr(self, k) is not None}}

    def _table(self, X, reset: bool):
        # Negative inputs to a χ² stage are refused by the Rust core's one rule (a
        # ValueError naming the row and column), never by a copy of it here.
        return features_table(self, X, reset)

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
        self._map = self._core(lambda: _core.FeatureMap.fit(_core.Pipeline(text), table))
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
        data, rows, dim = self._core(lambda: self._map.transform(table))
        return np.frombuffer(data, dtype="<f4").reshape(rows, dim)

    def _core(self, call):
        """Runs a core call; a negative input the core refused (its one χ² rule, naming
        the row and column) is reported in the words scikit-learn looks for."""
        try:
            return call()
        except ValueError as e:
            if self._nonnegative and "is negative" in str(e):
                raise ValueError(f"Negative values in data passed to {type(self).__name__}: {e}") from e
            raise

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


def _fitted_stage(m) -> dict:
    import json

    return json.loads(m.spec_json())["stages"][0]


def _features_of(m) -> dict:
    import json

    return json.loads(m.spec_json())["features"]


def _signature(keys: tuple) -> inspect.Signature:
    """``(self, key=None, …, random_state=None)``: every stage key by name, as
    scikit-learn's ``get_params`` reads them from ``__init__``."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("self", kind)]
    params += [inspect.Parameter(k, kind, default=None) for k in keys + ("random_state",)]
    return inspect.Signature(params)


def _init(signature: inspect.Signature):
    """An ``__init__`` that stores each argument of ``signature`` under its name (an
    unknown or doubled argument is the TypeError Python gives any call)."""

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        for name in list(signature.parameters)[1:]:
            setattr(self, name, bound.arguments.get(name))

    __init__.__signature__ = signature
    return __init__


def _type_of(value) -> str:
    if value is None:
        return "optional"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list"}.get(type(value), type(value).__name__)


def _docstring(summary: str, family: dict) -> str:
    """A numpydoc docstring: the summary, then every key with its type, the pipeline
    file's default and its meaning (the pipeline reference's line, from the registry)."""
    lines = [summary, "", "Parameters", "----------"]
    for k in family["keys"]:
        default = family["defaults"].get(k)
        shown = "fitted or derived" if default is None else json.dumps(default)
        lines.append(f"{k} : {_type_of(default)}, default None (the pipeline file's default: {shown})")
        lines.append(f"    {family['help'].get(k) or 'The stage key ' + repr(k) + '.'}")
    lines.append("random_state : int or None, default None")
    lines.append("    Seed of the random maps and of the pre-pass sample (the pipeline's ``run.seed``).")
    lines += ["", "Attributes", "----------", "n_components_ : int", "    Output dimension of ``transform``.",
              "fitted_stage_ : dict", "    The stage with its fitted keys (σ, k, β, …) as the pipeline file writes it."]
    return "\n".join(lines) + "\n"


def _family(kind: str):
    """The transformer class of `kind`: a plain subclass of ``_Sketch`` whose signature
    names every stage key explicitly, each defaulting to None (the file's default)."""
    name, summary = NAMES[kind]
    family = FAMILIES[kind]
    keys = tuple(family["keys"])
    attrs = {
        "__init__": _init(_signature(keys)),
        "_kind": kind,
        "_keys": keys,
        "_nonnegative": family["nonnegative"],
        "__doc__": _docstring(summary, family),
        "__module__": __name__,
        "__qualname__": name,
    }
    return type(name, (_Sketch,), attrs)


TRANSFORMERS = {kind: _family(kind) for kind in FAMILIES if kind in NAMES}
globals().update({cls.__name__: cls for cls in TRANSFORMERS.values()})
__all__ = [cls.__name__ for cls in TRANSFORMERS.values()]
