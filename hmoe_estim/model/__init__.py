"""The model: the mixing measure ``G = (omega, M, a)``, its packed parameter vector, the
regression functions of the four gate positions, and the starting points of a fit.

See :doc:`/theory` for the definitions (the paper's eq. (2), (9), (12) and assumptions
(A.1)–(A.5)).
"""

from ._measure import MixingMeasure
from ._parameters import make_bounds, n_params, pack, triangle_indices, unpack
from ._regression import regression_function
from ._starts import check_init_measure, random_start, split_heaviest_channel

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
