"""A whole (gated) multi-head attention layer as one model: its weights and packed parameter
vector, its output for every gate position (MHA, G1–G5, and the multiplicative gate of Qiu et
al. 2025), and synthetic data from a known layer.

Each entry of the output is an HMoE (the paper's Section 2, :mod:`hmoe_estim.attention`); here
the entries share their parameters, as in a layer. The Jacobian and Gauss–Newton sums of a fit
are the kernels' (:mod:`hmoe_estim.kernels.layer`); :class:`LayerProblem` is a layer fit in
the form the package's search and local solvers take (:class:`VarProLayerProblem` the same
with ``W_O`` solved in closed form), and
:class:`AttentionLayerRegressor` the scikit-learn estimator that fits a layer with them. The
gauge-invariant metrics of a fitted layer against the true one (regression error, ``P_h`` and
``C_h`` errors, the layer and per-entry Voronoi losses) and their scorers close the loop;
:func:`layer_identifiability_report` says which of a layer's weights a fit can identify.
:func:`layer_to_torch` and :func:`layer_from_torch` convert a layer to and from PyTorch
modules (optional extra ``torch``).
"""

from ._data import make_attention_regression, random_attention_layer
from ._estimator import AttentionLayerRegressor
from ._forward import attention_layer_output
from ._identifiability import (
    Gauge,
    LayerIdentifiabilityReport,
    LayerJacobianCheck,
    LayerObstruction,
    layer_identifiability_report,
    layer_verdict_label,
)
from ._metrics import (
    LAYER_METRICS,
    EntryVoronoiLoss,
    LayerMetricScorer,
    LayerParameterErrors,
    LayerVoronoiDetails,
    align_layer,
    entry_voronoi_loss,
    head_matching,
    layer_parameter_errors,
    layer_regression_error,
    layer_voronoi_loss,
    make_layer_scorer,
)
from ._parameters import AttentionLayer, LayerLayout
from ._problem import LayerProblem
from ._torch import layer_from_torch, layer_to_torch
from ._varpro import VarProLayerProblem

__all__ = [
    "AttentionLayer",
    "LayerLayout",
    "attention_layer_output",
    "random_attention_layer",
    "make_attention_regression",
    "LayerProblem",
    "VarProLayerProblem",
    "AttentionLayerRegressor",
    "layer_regression_error",
    "head_matching",
    "layer_parameter_errors",
    "LayerParameterErrors",
    "layer_voronoi_loss",
    "LayerVoronoiDetails",
    "align_layer",
    "entry_voronoi_loss",
    "EntryVoronoiLoss",
    "make_layer_scorer",
    "LayerMetricScorer",
    "LAYER_METRICS",
    "layer_identifiability_report",
    "LayerIdentifiabilityReport",
    "LayerJacobianCheck",
    "LayerObstruction",
    "Gauge",
    "layer_verdict_label",
    "layer_to_torch",
    "layer_from_torch",
]


def __getattr__(name):
    # the module class of layer_to_torch is built on first use: it subclasses torch.nn.Module
    if name == "AttentionLayerModule":
        from . import _torch

        return _torch.AttentionLayerModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
