"""hmoe-estim: sample complexity of (gated) attention through hierarchical mixtures of experts.

Each entry of a multi-head attention output is a three-level HMoE (heads, value channels,
softmax gate over tokens on ``xᵀ M x``, experts ``a·x``); gating after the value projection (G2)
or after the attention output (G1) makes its experts polynomially estimable. See SPEC §1–5.

Public names are imported lazily (PEP 562), so ``import hmoe_estim`` stays fast and Numba
kernels are only loaded by the code that uses them.
"""

import importlib
import os

# Numba's OpenMP threading layer spins its idle threads by default; between two kernel calls
# L-BFGS-B runs on the main thread, and spinning workers steal its core (measured: 50-100x
# slower fits on 2 cores). Passive waiting costs nothing measurable in the kernels. The
# variable must be set before the OpenMP runtime starts; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ._names import ACTIVATIONS, GATES

__version__ = "0.1.0"

#: public name -> submodule that defines it
_LAZY = {
    "MixingMeasure": "measure",
    "regression_function": "regression",
    "HMoERegressor": "estimator",
    "MHARegressor": "estimator",
    "G1Regressor": "estimator",
    "G2Regressor": "estimator",
    "voronoi_loss": "voronoi",
    "voronoi_cells": "voronoi",
    "expert_error": "expert_metrics",
    "regression_error": "expert_metrics",
    "make_voronoi_scorer": "scorers",
    "make_expert_error_scorer": "scorers",
    "make_regression_error_scorer": "scorers",
    "make_hmoe_regression": "datasets",
    "random_measure": "datasets",
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
