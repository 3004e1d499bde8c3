"""sketchfit: kernel models on data larger than memory.

Random-feature sketches stream rows into sufficient statistics (``ZᵀZ``, ``Zᵀ1``,
``Zᵀy``); RF-PCA and closed-form ridge regression solve from those alone, in a Rust
core. This package gives it scikit-learn estimators (:class:`SketchRidgeClassifier`,
:class:`SketchRidgeRegressor`, :class:`RFPCA`, one transformer per sketch family),
Arrow and NumPy inputs without copies, and the library objects (:class:`Pipeline`,
:class:`Statistics`, :class:`Model`) that read and write the command line's files.
"""

from ._core import __version__
from .core import Model, Pipeline, Statistics
from .estimators import RFPCA, SketchRidgeClassifier, SketchRidgeRegressor
from . import sketches as _sketches
from .sketches import *  # noqa: F401,F403 - one transformer per family, listed in sketches.__all__

__all__ = ["__version__", "Model", "Pipeline", "Statistics", "SketchRidgeClassifier", "SketchRidgeRegressor", "RFPCA"] + _sketches.__all__
