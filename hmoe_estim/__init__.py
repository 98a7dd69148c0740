"""hmoe-estim: sample complexity of (gated) attention through hierarchical mixtures of experts.

Each entry of a multi-head attention output is a three-level HMoE (heads, value channels,
softmax gate over tokens on ``xᵀ M x``, experts ``a·x``); gating after the value projection (G2)
or after the attention output (G1) makes its experts polynomially estimable. See SPEC §1–5.

Public names are imported lazily (PEP 562), so ``import hmoe_estim`` stays fast and Numba
kernels are only loaded by the code that uses them.
"""

import importlib
import os

# Numba's OpenMP threading layer (GNU libgomp) lets idle workers spin for ~300 000 rounds
# (several ms) after each parallel region; between two kernel calls L-BFGS-B runs on the main
# thread, and long-spinning workers steal its core (measured: 50-100x slower fits on 2 cores).
# Sleeping at once (OMP_WAIT_POLICY=PASSIVE alone) costs ~0.05 ms per call to wake the
# worker and lets the scheduler put the woken worker on the main thread's core, which
# halved the speed of back-to-back calls at random. A short spin (GOMP_SPINCOUNT=10000,
# ~0.25 ms here) bridges the gap between consecutive calls and then sleeps (measured: fits at
# n = 1e4 30% faster, 1e5 8%; benchmarks/README.md). Both must be set before the OpenMP
# runtime starts; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # other OpenMP runtimes: do not spin
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # libgomp: spin briefly, then sleep

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
    "identifiability_report": "identifiability",
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
