"""The model: the mixing measure ``G = (omega, M, a)``, its packed parameter vector, the
regression functions of the four gate positions, and the starting points of a fit.

See :doc:`/theory` for the definitions (the paper's eq. (2), (9), (12) and assumptions
(A.1)–(A.5)).
"""

from ._measure import MixingMeasure
from ._parameters import make_bounds, n_params, pack, triangle_indices, unpack

# for the other subpackages, not public API (re-exported with ``as``): the packed evaluation,
# the input check of the metrics and the packed random start of the estimators
from ._regression import check_inputs as check_inputs
from ._regression import evaluate as evaluate
from ._regression import regression_function
from ._starts import check_init_measure, random_start, split_heaviest_channel
from ._starts import random_start_theta as random_start_theta

__all__ = [
    "MixingMeasure",
    "regression_function",
    "n_params",
    "pack",
    "unpack",
    "triangle_indices",
    "make_bounds",
    "random_start",
    "split_heaviest_channel",
    "check_init_measure",
]
