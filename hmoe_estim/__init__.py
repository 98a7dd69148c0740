"""hmoe-estim: sample complexity of (gated) attention through hierarchical mixtures of experts.

Each entry of a multi-head attention output is a three-level HMoE (heads, value channels,
softmax gate over tokens on ``xᵀ M x``, experts ``a·x``); gating after the value projection (G2)
or after the attention output (G1) makes its experts polynomially estimable (the paper's
eq. (2), (9), (12); see the documentation's "Theory to code" page).

The package is laid out by concern: :mod:`hmoe_estim.model` (the mixing measure and the
regression functions), :mod:`hmoe_estim.kernels` (Numba kernels), :mod:`hmoe_estim.estimators`
and :mod:`hmoe_estim.solvers` (fitting), :mod:`hmoe_estim.metrics` (the theory's losses and
scorers), :mod:`hmoe_estim.datasets` and :mod:`hmoe_estim.attention` (data and attention
layers), :mod:`hmoe_estim.study` (studies, rates, plots, command line).

Public names are imported lazily (PEP 562), so ``import hmoe_estim`` stays fast and Numba
kernels are only loaded by the code that uses them.
"""

import importlib
import os

# Numba's OpenMP layer (libgomp) lets idle workers spin for several ms after each parallel
# region, stealing the core of the solver that runs between two kernel calls; a short spin
# bridges consecutive calls and then sleeps (measurements: docs, "Performance"). Both must be
# set before the OpenMP runtime starts; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # other OpenMP runtimes: do not spin
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # libgomp: spin briefly, then sleep

from . import _moved
from ._names import ACTIVATIONS, GATES  # noqa: F401 (public names)

__version__ = "0.2.0.dev0"

_moved.install()

#: public name -> subpackage that exports it
_LAZY = {
    "MixingMeasure": "model",
    "regression_function": "model",
    "HMoERegressor": "estimators",
    "MHARegressor": "estimators",
    "G1Regressor": "estimators",
    "G2Regressor": "estimators",
    "AttentionLayerRegressor": "layer",
    "voronoi_loss": "metrics",
    "voronoi_cells": "metrics",
    "expert_error": "metrics",
    "regression_error": "metrics",
    "fit_metrics": "metrics",
    "make_voronoi_scorer": "metrics",
    "make_expert_error_scorer": "metrics",
    "make_regression_error_scorer": "metrics",
    "make_hmoe_regression": "datasets",
    "random_measure": "datasets",
    "identifiability_report": "metrics",
}

__all__ = sorted([*_LAZY, "GATES", "ACTIVATIONS", "__version__"])


def __getattr__(name):
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hmoe_estim' has no attribute {name!r}")


def __dir__():
    return __all__
