"""The theory's metrics: Voronoi cells and losses, the expert and regression errors, and
their scikit-learn scorers (see :doc:`/user_guide/metrics`)."""

from ._branches import DEFAULT_N_REF, EXPERT_READINGS, reference_sample
from ._expert import WEIGHTINGS, expert_error, regression_error
from ._scorers import (
    MetricScorer,
    make_expert_error_scorer,
    make_regression_error_scorer,
    make_voronoi_scorer,
)
from ._voronoi import VoronoiCells, VoronoiDetails, voronoi_cells, voronoi_loss

__all__ = [
    "voronoi_cells",
    "voronoi_loss",
    "VoronoiCells",
    "VoronoiDetails",
    "expert_error",
    "regression_error",
    "WEIGHTINGS",
    "make_voronoi_scorer",
    "make_expert_error_scorer",
    "make_regression_error_scorer",
    "MetricScorer",
    "reference_sample",
    "DEFAULT_N_REF",
    "EXPERT_READINGS",
]
