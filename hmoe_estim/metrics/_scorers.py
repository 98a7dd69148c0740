"""scikit-learn scorers for the theory metrics (Voronoi loss, expert and regression error).

Each ``make_*_scorer(true_measure, **kw)`` returns a picklable callable
``scorer(estimator, X, y) -> -loss`` (greater is better, the scikit-learn convention), usable as
``scoring=`` in :class:`~sklearn.model_selection.GridSearchCV`,
:func:`~sklearn.model_selection.cross_validate` or
:func:`~sklearn.model_selection.learning_curve`, also with ``n_jobs > 1``.

The scorer compares the fitted ``estimator.measure_`` with ``true_measure`` under the
estimator's own ``gate`` and ``activation``; ``X`` and ``y`` are not used (the metrics are
properties of the parameters, estimated on a fixed reference sample, not of the test split).
When ``estimator`` is a :class:`~sklearn.pipeline.Pipeline`, its last step's ``measure_``
lives in the coordinates that step sees; it is mapped back to raw coordinates where that is
exact (per-feature scalings ``x' = s ⊙ x``: ``M = S M' S``, ``a = S a'``; see
:func:`hmoe_estim.metrics.fitted_measure`), and any other step (centring, PCA, a non-linear or
unknown transformer) is refused with a ``ValueError`` naming it, never scored silently.
"""

import importlib
import inspect

import numpy as np

from ..model import MixingMeasure
from ._pipeline import fitted_model

__all__ = [
    "make_voronoi_scorer",
    "make_expert_error_scorer",
    "make_regression_error_scorer",
    "MetricScorer",
]

_METRICS = ("voronoi_loss", "expert_error", "regression_error")


def _metric_function(name):
    """The metric function ``hmoe_estim.<name>`` (resolved lazily, at call time)."""
    return getattr(importlib.import_module(__package__), name)
_RESERVED = ("gate", "activation", "return_details", "per_expert")


class MetricScorer:
    """Callable ``scorer(estimator, X, y=None) -> -metric(estimator.measure_, true_measure)``.

    Parameters
    ----------
    metric : {"voronoi_loss", "expert_error", "regression_error"}
        Name of the metric function in :mod:`hmoe_estim`.
    true_measure : MixingMeasure
        The true ``G*``.
    **kwargs
        Keyword arguments of the metric (``r``, ``X_ref``, ``n_ref``, ``random_state``,
        ``weighting``, ``expert``, ...). ``gate`` and ``activation`` are read from the
        estimator and may not be given.

    Raises
    ------
    ValueError
        Unknown metric, ``true_measure`` not a MixingMeasure, a keyword the metric does not
        take, or ``gate`` / ``activation`` / ``return_details`` / ``per_expert`` given.
    """

    def __init__(self, metric, true_measure, **kwargs):
        if metric not in _METRICS:
            raise ValueError(f"Unknown metric {metric!r}; use one of {sorted(_METRICS)}.")
        if not isinstance(true_measure, MixingMeasure):
            raise ValueError(
                f"true_measure must be a MixingMeasure; got {type(true_measure).__name__}."
            )
        bad = [name for name in _RESERVED if name in kwargs]
        if bad:
            raise ValueError(
                f"{bad} cannot be passed to a scorer: gate and activation are read from the "
                "fitted estimator, and a scorer must return one number."
            )
        params = inspect.signature(_metric_function(metric)).parameters
        unknown = [name for name in kwargs if name not in params]
        if unknown:
            allowed = [p for p in params if p not in ("measure", "true_measure", *_RESERVED)]
            raise ValueError(f"{metric} takes no argument {unknown}; allowed: {allowed}.")
        self.metric = metric
        self.true_measure = true_measure
        self.kwargs = dict(kwargs)

    def __call__(self, estimator, X=None, y=None, **fit_params):
        measure, est = fitted_model(estimator, what=f"{self.metric} scorer")
        D = self.true_measure.n_features
        if measure.n_features != D:
            raise ValueError(
                f"The fitted measure has {measure.n_features} features but the true measure "
                f"has {D}: score an estimator fitted on {D}-feature data generated from the "
                "true measure."
            )
        gate = getattr(est, "gate", None)
        activation = getattr(est, "activation", None)
        if gate is None or activation is None:
            raise ValueError(
                f"{type(est).__name__} has no gate/activation attribute: the {self.metric} "
                "scorer needs an HMoERegressor (or a Pipeline ending in one)."
            )
        loss = _metric_function(self.metric)(
            measure, self.true_measure, gate=gate, activation=activation, **self.kwargs
        )
        return -float(loss)

    def __repr__(self):
        kw = "".join(f", {k}={v!r}" for k, v in self.kwargs.items() if k != "X_ref")
        if "X_ref" in self.kwargs:
            kw += f", X_ref=<array {np.shape(self.kwargs['X_ref'])}>"
        name = "voronoi" if self.metric == "voronoi_loss" else self.metric
        return f"make_{name}_scorer({self.true_measure!r}{kw})"


def make_voronoi_scorer(true_measure, **kwargs):
    """Scorer returning ``-voronoi_loss(estimator.measure_, true_measure, ...)``.

    Parameters
    ----------
    true_measure : MixingMeasure
        The true ``G*`` (same ``N`` and ``D`` as the fitted models).
    **kwargs
        Passed to :func:`hmoe_estim.voronoi_loss`: ``r`` (default ``None``, ``L_2``),
        ``X_ref``, ``n_ref``, ``random_state``, ``expert``, ``token_matching``.

    Returns
    -------
    MetricScorer
        ``scorer(estimator, X, y) -> float`` (greater is better); picklable.

    Raises
    ------
    ValueError
        At creation: bad keyword. At scoring: estimator without ``gate``/``activation``, a fitted
        measure of another ``D`` or ``N``. ``sklearn.exceptions.NotFittedError`` (a
        ``ValueError``) for an unfitted estimator.

    Examples
    --------
    >>> from sklearn.model_selection import GridSearchCV
    >>> from hmoe_estim import HMoERegressor, make_voronoi_scorer
    >>> # GridSearchCV(HMoERegressor(), {"n_experts": [1, 2, 3]},
    >>> #              scoring=make_voronoi_scorer(G_true)).fit(X, y)
    """
    return MetricScorer("voronoi_loss", true_measure, **kwargs)


def make_expert_error_scorer(true_measure, **kwargs):
    """Scorer returning ``-expert_error(estimator.measure_, true_measure, ...)``.

    Parameters
    ----------
    true_measure : MixingMeasure
    **kwargs
        Passed to :func:`hmoe_estim.expert_error`: ``X_ref``, ``n_ref``, ``random_state``,
        ``weighting`` (default ``"heaviest"``), ``expert``, ``token_matching``.

    Returns
    -------
    MetricScorer
        Picklable ``scorer(estimator, X, y) -> -worst expert error``.
    """
    return MetricScorer("expert_error", true_measure, **kwargs)


def make_regression_error_scorer(true_measure, **kwargs):
    """Scorer returning ``-regression_error(estimator.measure_, true_measure, ...)``.

    Parameters
    ----------
    true_measure : MixingMeasure
    **kwargs
        Passed to :func:`hmoe_estim.regression_error`: ``X_ref``, ``n_ref``, ``random_state``.

    Returns
    -------
    MetricScorer
        Picklable ``scorer(estimator, X, y) -> -‖f_Ĝ − f_{G*}‖_{L2(μ)}``.
    """
    return MetricScorer("regression_error", true_measure, **kwargs)
