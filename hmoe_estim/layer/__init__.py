"""A whole (gated) multi-head attention layer as one model: its weights and packed parameter
vector, its output for every gate position (MHA, G1–G5, and the multiplicative gate of Qiu et
al. 2025), and synthetic data from a known layer.

Each entry of the output is an HMoE (the paper's Section 2, :mod:`hmoe_estim.attention`); here
the entries share their parameters, as in a layer. The Jacobian and Gauss–Newton sums of a fit
are the kernels' (:mod:`hmoe_estim.kernels.layer`); :class:`LayerProblem` is a layer fit in
the form the package's search and local solvers take (:class:`VarProLayerProblem` the same
with ``W_O`` solved in closed form), and
:class:`AttentionLayerRegressor` the scikit-learn estimator that fits a layer with them.
"""

from ._data import make_attention_regression, random_attention_layer
from ._estimator import AttentionLayerRegressor
from ._forward import attention_layer_output
from ._parameters import AttentionLayer, LayerLayout
from ._problem import LayerProblem
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
]
