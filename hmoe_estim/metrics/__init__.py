"""The theory's metrics: Voronoi cells and losses, the expert and regression errors, their
scikit-learn scorers (see :doc:`/user_guide/metrics`), and the identifiability diagnosis that
says when a loss can shrink at all (see :doc:`/user_guide/identifiability`)."""

from ._atoms import (
    ATOM_TOL,
    LEVELS,
    MEASURE_GATES,
    AtomCells,
    Atoms,
    MeasureVoronoiDetails,
    measure_atoms,
)
from ._branches import DEFAULT_N_REF, EXPERT_READINGS, reference_sample
from ._branches import branch_distances as branch_distances  # for the layer metrics
from ._expert import WEIGHTINGS, expert_error, regression_error
from ._fit_metrics import fit_metrics
from ._identifiability import (
    PHI_AT_ZERO,
    IdentifiabilityReport,
    JacobianCheck,
    NearAlternative,
    Obstruction,
    Symmetry,
    fit_alternatives,
    identifiability_report,
    measure_verdict_label,
    quotient_jacobian,
    regression_jacobian,
    verdict_label,
)
from ._pipeline import fitted_measure, pipeline_scale
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
    "fit_metrics",
    "WEIGHTINGS",
    "make_voronoi_scorer",
    "make_expert_error_scorer",
    "make_regression_error_scorer",
    "MetricScorer",
    "fitted_measure",
    "pipeline_scale",
    "identifiability_report",
    "fit_alternatives",
    "IdentifiabilityReport",
    "Symmetry",
    "Obstruction",
    "NearAlternative",
    "JacobianCheck",
    "regression_jacobian",
    "verdict_label",
    "PHI_AT_ZERO",
    "reference_sample",
    "DEFAULT_N_REF",
    "EXPERT_READINGS",
    "LEVELS",
    "MEASURE_GATES",
    "ATOM_TOL",
    "Atoms",
    "AtomCells",
    "MeasureVoronoiDetails",
    "measure_atoms",
    "measure_verdict_label",
    "quotient_jacobian",
]
